//! Stand-ins for the layers whose cargo feature (`tls`, `snappy`, `deflate`) is off, with the
//! interface the connection uses. Their types are uninhabited (all but the public `TlsError`,
//! which has no constructor): no value can exist, so the code that would use one is never
//! reached. What keeps it unreachable is upstream:
//! [`ConnectionConfig::identify`](super::ConnectionConfig::identify) refuses to ask for a
//! compression that is compiled out ([`ConfigError::FeatureDisabled`](super::ConfigError)), a
//! compression is only ever enabled when it was asked for, and TLS needs a [`TlsConfig`](crate::TlsConfig)
//! value, of which there is none; a server that grants TLS unasked closes the connection with
//! [`CloseReason::TlsNotGranted`](super::CloseReason::TlsNotGranted), never plain text.

#[cfg(not(feature = "tls"))]
pub(crate) mod tls {
    use bytes::BytesMut;
    use std::convert::Infallible;
    use std::fmt;
    use std::marker::PhantomData;
    use std::sync::Arc;

    /// TLS settings for a connection; **this build has no TLS** (nsq-proto's `tls` cargo
    /// feature is off), so no value of this type exists and
    /// [`ConnectionConfig::tls`](crate::ConnectionConfig::tls) is always `None`. A
    /// [`Config`](crate::Config) with `tls_v1` set is refused with
    /// [`OptionError::FeatureDisabled`](crate::config::OptionError::FeatureDisabled).
    #[derive(Debug, Clone)]
    pub enum TlsConfig {}

    impl TlsConfig {
        pub(crate) fn server_name(&self) -> Option<&str> {
            match *self {}
        }

        pub(crate) fn client_config(&self) -> &Arc<Infallible> {
            match *self {}
        }
    }

    /// Why the TLS layer failed; **this build has no TLS** (the `tls` cargo feature is off),
    /// so no connection ever fails with it.
    #[derive(Debug, Clone, PartialEq)]
    #[non_exhaustive]
    pub struct TlsError {}

    impl fmt::Display for TlsError {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("TLS is not available in this build (the `tls` feature is off)")
        }
    }

    impl std::error::Error for TlsError {}

    /// The server name a TLS layer verifies; none is ever made without TLS (`try_from` always
    /// fails).
    #[derive(Debug, Clone)]
    pub(crate) struct ServerName<'a>(PhantomData<&'a ()>);

    /// There is no TLS to verify a server name with.
    #[derive(Debug)]
    pub(crate) struct NoTls;

    impl TryFrom<String> for ServerName<'static> {
        type Error = NoTls;

        fn try_from(_: String) -> Result<Self, NoTls> {
            Err(NoTls)
        }
    }

    /// Named by the connection's matches on a pull, which never happens.
    #[allow(dead_code)]
    pub(crate) enum TlsPull {
        Data,
        NeedInput,
        Closed,
    }

    pub(crate) enum TlsLayer {}

    impl TlsLayer {
        #[allow(
            clippy::needless_pass_by_value,
            reason = "the signature of the real TlsLayer::start"
        )]
        pub(crate) fn start(
            config: Arc<Infallible>,
            _name: ServerName<'static>,
            _out: &mut BytesMut,
        ) -> Result<TlsLayer, TlsError> {
            match *config {}
        }

        pub(crate) fn push(&mut self, _: &[u8]) {
            match *self {}
        }

        pub(crate) fn buffered(&self) -> usize {
            match *self {}
        }

        pub(crate) fn pull(
            &mut self,
            _: &mut BytesMut,
            _: usize,
            _: &mut BytesMut,
        ) -> Result<TlsPull, TlsError> {
            match *self {}
        }

        pub(crate) fn close_notify(&mut self, _: &mut BytesMut) -> Result<(), TlsError> {
            match *self {}
        }

        pub(crate) fn write(&mut self, _: &[u8], _: &mut BytesMut) -> Result<(), TlsError> {
            match *self {}
        }
    }
}

#[cfg(not(feature = "snappy"))]
pub(crate) mod snappy {
    use super::super::SnappyError;
    use bytes::BytesMut;

    #[derive(Debug)]
    pub(crate) enum SnappyDecoder {}

    impl SnappyDecoder {
        pub(crate) fn push(&mut self, _: &[u8]) {
            match *self {}
        }

        pub(crate) fn buffered(&self) -> usize {
            match *self {}
        }

        pub(crate) fn pull(&mut self, _: &mut BytesMut) -> Result<usize, SnappyError> {
            match *self {}
        }
    }

    #[derive(Debug)]
    pub(crate) enum SnappyEncoder {}

    impl SnappyEncoder {
        pub(crate) fn encode(&mut self, _: &[u8], _: &mut BytesMut) {
            match *self {}
        }
    }
}

#[cfg(not(feature = "deflate"))]
pub(crate) mod deflate {
    use super::super::DeflateError;
    use bytes::BytesMut;

    #[derive(Debug)]
    pub(crate) enum DeflateDecoder {}

    impl DeflateDecoder {
        pub(crate) fn push(&mut self, _: &[u8]) {
            match *self {}
        }

        pub(crate) fn buffered(&self) -> usize {
            match *self {}
        }

        pub(crate) fn pull(&mut self, _: &mut BytesMut, _: usize) -> Result<usize, DeflateError> {
            match *self {}
        }
    }

    #[derive(Debug)]
    pub(crate) enum DeflateEncoder {}

    impl DeflateEncoder {
        pub(crate) fn encode(&mut self, _: &[u8], _: &mut BytesMut) {
            match *self {}
        }
    }
}
