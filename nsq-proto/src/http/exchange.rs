//! [`Exchange`]: one HTTP exchange over a connection of its own, sans-IO, in plain text or
//! over TLS (nsqd's `--https-address`) with the same [`TlsConfig`] as the TCP protocol.

use super::{HttpError, Request, Response, ResponseParser};
use crate::connection::{ServerName, TlsConfig, TlsError, TlsLayer, TlsPull, host_of};
use bytes::{Bytes, BytesMut};
use std::fmt;

/// Why an [`Exchange`] failed.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ExchangeError {
    /// The response could not be read as HTTP.
    Http(HttpError),
    /// The TLS layer failed (a certificate refused, a handshake failure...).
    Tls(TlsError),
    /// The TLS server name is not a valid DNS name or IP address.
    InvalidServerName(String),
}

impl fmt::Display for ExchangeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExchangeError::Http(e) => e.fmt(f),
            ExchangeError::Tls(e) => e.fmt(f),
            ExchangeError::InvalidServerName(name) => {
                write!(f, "{name:?} is not a valid TLS server name")
            }
        }
    }
}

impl std::error::Error for ExchangeError {}

impl From<HttpError> for ExchangeError {
    fn from(e: HttpError) -> ExchangeError {
        ExchangeError::Http(e)
    }
}

impl From<TlsError> for ExchangeError {
    fn from(e: TlsError) -> ExchangeError {
        ExchangeError::Tls(e)
    }
}

/// One request and its response on a fresh connection: feed it what the socket reads
/// ([`handle_input`](Self::handle_input), [`handle_eof`](Self::handle_eof)) and write what
/// [`poll_transmit`](Self::poll_transmit) gives, until it yields the [`Response`]. Over TLS
/// the handshake, the encryption and the `close_notify` are handled here.
///
/// ```
/// # use nsq_proto::http::{Exchange, nsqd};
/// let call = nsqd::ping();
/// let mut exchange = Exchange::new(call.request(), "127.0.0.1:4151", None)?;
/// let request = exchange.poll_transmit().expect("the request");
/// assert!(request.starts_with(b"GET /ping HTTP/1.1\r\n"));
/// let reply = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nOK";
/// let response = exchange.handle_input(reply)?.expect("complete");
/// call.decode(&response)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Exchange {
    tls: Option<TlsLayer>,
    parser: ResponseParser,
    /// Bytes to write (the request, or TLS records).
    out: BytesMut,
    /// Plaintext pulled from the TLS layer.
    plain: BytesMut,
}

impl fmt::Debug for Exchange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Exchange")
            .field("tls", &self.tls.is_some())
            .field("pending_out", &self.out.len())
            .finish_non_exhaustive()
    }
}

impl Exchange {
    /// An exchange of `request` with the server at `host` (`host:port`, its `Host` header
    /// and, over TLS, the server name unless `tls` names one). The bytes to write are ready
    /// at once ([`poll_transmit`](Self::poll_transmit)).
    pub fn new(
        request: &Request,
        host: &str,
        tls: Option<&TlsConfig>,
    ) -> Result<Exchange, ExchangeError> {
        Exchange::with_max_body(request, host, tls, super::DEFAULT_MAX_BODY_SIZE)
    }

    /// [`new`](Self::new), accepting response bodies up to `max_body` bytes.
    pub fn with_max_body(
        request: &Request,
        host: &str,
        tls: Option<&TlsConfig>,
        max_body: usize,
    ) -> Result<Exchange, ExchangeError> {
        let bytes = request.encode(host);
        let mut out = BytesMut::new();
        let tls = match tls {
            None => {
                out.extend_from_slice(&bytes);
                None
            }
            Some(config) => {
                let name = config
                    .server_name()
                    .unwrap_or_else(|| host_of(host))
                    .to_owned();
                let server_name = ServerName::try_from(name.clone())
                    .map_err(|_| ExchangeError::InvalidServerName(name))?;
                let mut layer =
                    TlsLayer::start(config.client_config().clone(), server_name, &mut out)?;
                layer.write(&bytes, &mut out)?;
                Some(layer)
            }
        };
        Ok(Exchange {
            tls,
            parser: ResponseParser::new(max_body),
            out,
            plain: BytesMut::new(),
        })
    }

    /// The bytes to write next, if any.
    pub fn poll_transmit(&mut self) -> Option<Bytes> {
        (!self.out.is_empty()).then(|| self.out.split().freeze())
    }

    /// Bytes read from the socket. Returns the response once it is complete.
    pub fn handle_input(&mut self, data: &[u8]) -> Result<Option<Response>, ExchangeError> {
        let Some(tls) = self.tls.as_mut() else {
            return Ok(self.parser.feed(data)?);
        };
        tls.push(data);
        loop {
            self.plain.clear();
            match tls.pull(&mut self.plain, 64 * 1024, &mut self.out)? {
                TlsPull::Data => {
                    if let Some(done) = self.parser.feed(&self.plain)? {
                        return Ok(Some(done));
                    }
                }
                TlsPull::NeedInput => return Ok(None),
                // The server ended the TLS stream: what it sent is complete or not.
                TlsPull::Closed => return self.parser.eof().map(Some).map_err(Into::into),
            }
        }
    }

    /// The server closed the connection: completes a response read to the end of the
    /// stream, else reports why it is incomplete.
    pub fn handle_eof(&mut self) -> Result<Response, ExchangeError> {
        Ok(self.parser.eof()?)
    }
}
