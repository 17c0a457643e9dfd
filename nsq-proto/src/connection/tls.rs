//! TLS for the connection core: configuration, and a byte-transform layer over rustls' sans-IO
//! `ClientConnection` (`read_tls` / `process_new_packets` / `reader` / `writer` / `write_tls`
//! over in-memory buffers).

use bytes::{BufMut, BytesMut};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{
    ClientConfig, ClientConnection, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use std::fmt;
use std::io::{self, BufRead, Write};
use std::sync::Arc;

/// TLS settings for a connection. Certificate verification is on unless the loudly named
/// [`TlsConfig::dangerous_skip_verification`] was used.
///
/// Cheap to clone (the rustls configuration is shared).
///
/// ```
/// # use nsq_proto::TlsConfig;
/// // Verify the server against the Mozilla roots shipped by webpki-roots, with the name
/// // taken from the address the connection is made to.
/// let tls = TlsConfig::webpki_roots()?;
/// // Or name the server explicitly (when connecting by IP address, for example).
/// let tls = tls.with_server_name("nsqd.internal");
/// # Ok::<(), nsq_proto::connection::TlsSetupError>(())
/// ```
#[derive(Clone)]
pub struct TlsConfig {
    client_config: Arc<ClientConfig>,
    server_name: Option<String>,
    insecure: bool,
}

impl fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsConfig")
            .field("server_name", &self.server_name)
            .field("verification_skipped", &self.insecure)
            .finish_non_exhaustive()
    }
}

/// A TLS configuration could not be built (for example an unusable client key).
#[derive(Debug, Clone, PartialEq)]
pub struct TlsSetupError(rustls::Error);

impl fmt::Display for TlsSetupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid TLS configuration: {}", self.0)
    }
}

impl std::error::Error for TlsSetupError {}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A client certificate chain and its private key.
pub type ClientCert = (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>);

impl TlsConfig {
    /// Verify servers against the Mozilla root certificates of the `webpki-roots` crate.
    pub fn webpki_roots() -> Result<TlsConfig, TlsSetupError> {
        TlsConfig::with_root_store(webpki_root_store(), None)
    }

    /// Verify servers against `roots`, optionally presenting a client certificate.
    pub fn with_root_store(
        roots: RootCertStore,
        client_cert: Option<ClientCert>,
    ) -> Result<TlsConfig, TlsSetupError> {
        let builder = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(TlsSetupError)?
            .with_root_certificates(roots);
        let config = match client_cert {
            Some((chain, key)) => builder
                .with_client_auth_cert(chain, key)
                .map_err(TlsSetupError)?,
            None => builder.with_no_client_auth(),
        };
        Ok(TlsConfig::from_client_config(Arc::new(config)))
    }

    /// Use a complete rustls client configuration as given (roots, verifier, client
    /// certificate, protocol versions, ...).
    pub fn from_client_config(config: Arc<ClientConfig>) -> TlsConfig {
        TlsConfig {
            client_config: config,
            server_name: None,
            insecure: false,
        }
    }

    /// **Dangerous**: accept any server certificate for any name. The connection is then
    /// encrypted but not authenticated, so anyone on the path can impersonate the server. Only
    /// for tests and for networks where that is acceptable.
    pub fn dangerous_skip_verification(
        client_cert: Option<ClientCert>,
    ) -> Result<TlsConfig, TlsSetupError> {
        let provider = provider();
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(TlsSetupError)?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AcceptAnyCertificate(provider)));
        let config = match client_cert {
            Some((chain, key)) => builder
                .with_client_auth_cert(chain, key)
                .map_err(TlsSetupError)?,
            None => builder.with_no_client_auth(),
        };
        let mut tls = TlsConfig::from_client_config(Arc::new(config));
        tls.insecure = true;
        Ok(tls)
    }

    /// The name to verify the server's certificate against (and send as SNI). Without it the
    /// host part of the address given to [`crate::Connection::new`] is used.
    pub fn with_server_name(mut self, name: impl Into<String>) -> TlsConfig {
        self.server_name = Some(name.into());
        self
    }

    /// The configured server name, if any.
    pub fn server_name(&self) -> Option<&str> {
        self.server_name.as_deref()
    }

    /// Whether certificate verification was switched off.
    pub fn is_verification_skipped(&self) -> bool {
        self.insecure
    }

    /// The rustls configuration in use.
    pub fn client_config(&self) -> &Arc<ClientConfig> {
        &self.client_config
    }
}

/// The Mozilla root certificates shipped by the `webpki-roots` crate, as a store to extend.
pub fn webpki_root_store() -> RootCertStore {
    RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    }
}

/// Accepts every certificate but still checks the handshake signatures with the key it
/// presents.
#[derive(Debug)]
struct AcceptAnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for AcceptAnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// Why the TLS layer failed. Fatal for the connection.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum TlsError {
    /// rustls rejected the peer (certificate, handshake, decryption...).
    Rustls(rustls::Error),
    /// The server asked for TLS in a way rustls could not handle (buffering limits).
    Buffer(String),
}

impl fmt::Display for TlsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TlsError::Rustls(e) => write!(f, "TLS error: {e}"),
            TlsError::Buffer(e) => write!(f, "TLS buffering error: {e}"),
        }
    }
}

impl std::error::Error for TlsError {}

/// What a pull from the TLS layer produced.
pub(crate) enum TlsPull {
    /// Plaintext bytes were appended.
    Data,
    /// Nothing more until more ciphertext arrives.
    NeedInput,
    /// The server sent `close_notify`.
    Closed,
}

/// The TLS layer: ciphertext in, plaintext out, and the reverse for writes.
pub(crate) struct TlsLayer {
    conn: ClientConnection,
    /// Ciphertext received and not yet handed to rustls.
    input: BytesMut,
}

impl fmt::Debug for TlsLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsLayer")
            .field("handshaking", &self.conn.is_handshaking())
            .field("buffered", &self.input.len())
            .finish_non_exhaustive()
    }
}

impl TlsLayer {
    /// Starts a client handshake; the ClientHello is appended to `out`.
    pub(crate) fn start(
        config: Arc<ClientConfig>,
        name: ServerName<'static>,
        out: &mut BytesMut,
    ) -> Result<TlsLayer, TlsError> {
        let conn = ClientConnection::new(config, name).map_err(TlsError::Rustls)?;
        let mut layer = TlsLayer {
            conn,
            input: BytesMut::new(),
        };
        layer.write_out(out)?;
        Ok(layer)
    }

    /// Appends received ciphertext.
    pub(crate) fn push(&mut self, data: &[u8]) {
        self.input.extend_from_slice(data);
    }

    /// Ciphertext buffered but not processed.
    pub(crate) fn buffered(&self) -> usize {
        self.input.len()
    }

    /// Moves pending TLS records (handshake messages, alerts, encrypted data) to `out`.
    fn write_out(&mut self, out: &mut BytesMut) -> Result<(), TlsError> {
        let mut w = out.writer();
        while self.conn.wants_write() {
            self.conn
                .write_tls(&mut w)
                .map_err(|e| TlsError::Buffer(e.to_string()))?;
        }
        Ok(())
    }

    /// Produces up to `max` plaintext bytes into `plain`, feeding buffered ciphertext to rustls
    /// as needed; handshake records rustls wants to send go to `out`.
    pub(crate) fn pull(
        &mut self,
        plain: &mut BytesMut,
        max: usize,
        out: &mut BytesMut,
    ) -> Result<TlsPull, TlsError> {
        loop {
            let mut reader = self.conn.reader();
            match reader.fill_buf() {
                Ok([]) => return Ok(TlsPull::Closed),
                Ok(chunk) => {
                    let n = chunk.len().min(max);
                    plain.extend_from_slice(&chunk[..n]);
                    reader.consume(n);
                    return Ok(TlsPull::Data);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(TlsError::Buffer(e.to_string())),
            }
            if self.input.is_empty() {
                return Ok(TlsPull::NeedInput);
            }
            let mut src: &[u8] = &self.input;
            let before = src.len();
            let n = self.conn.read_tls(&mut src);
            let consumed = before - src.len();
            bytes::Buf::advance(&mut self.input, consumed);
            if let Err(e) = n {
                return Err(TlsError::Buffer(e.to_string()));
            }
            let processed = self.conn.process_new_packets();
            // Alerts and handshake replies go out even when processing failed.
            let written = self.write_out(out);
            processed.map_err(TlsError::Rustls)?;
            written?;
        }
    }

    /// Queues a `close_notify` alert and appends it to `out` (a graceful end of the TLS
    /// stream; without it nsqd logs an unexpected EOF).
    pub(crate) fn close_notify(&mut self, out: &mut BytesMut) -> Result<(), TlsError> {
        self.conn.send_close_notify();
        self.write_out(out)
    }

    /// Encrypts `data` and appends the records to `out`.
    pub(crate) fn write(&mut self, mut data: &[u8], out: &mut BytesMut) -> Result<(), TlsError> {
        while !data.is_empty() {
            let n = self
                .conn
                .writer()
                .write(data)
                .map_err(|e| TlsError::Buffer(e.to_string()))?;
            data = &data[n..];
            self.write_out(out)?;
            if n == 0 {
                return Err(TlsError::Buffer("rustls accepted no plaintext".into()));
            }
        }
        self.write_out(out)
    }
}
