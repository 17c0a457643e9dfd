//! The HTTP APIs of nsqd and nsqlookupd on every runtime: [`HttpClient`] makes the core's
//! typed [`Call`]s ([`nsq_proto::http`]) to one address, each on a connection of its own,
//! with a connect timeout, a timeout for the whole exchange, and HTTPS through the same
//! rustls configuration as the TCP protocol ([`HttpConfig::from_config`]).

use super::runtime::{Calls, Runtime, RuntimeChoice, Socket, SocketOptions, Timer};
use super::sync::{ReplyRx, oneshot};
use super::{Error, HttpFailure};
use bytes::{Buf, Bytes};
use nsq_proto::Config;
use nsq_proto::connection::TlsConfig;
use nsq_proto::http::{Call, Exchange, Response};
use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

/// How an [`HttpClient`] (and a [`Cluster`](super::Cluster)) talks to its servers.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct HttpConfig {
    /// HTTPS (nsqd's `--https-address`) with these TLS settings; plain HTTP when `None`.
    pub tls: Option<TlsConfig>,
    /// How long a TCP connect may take (nsqadmin's default: 2 s).
    pub connect_timeout: Duration,
    /// How long a whole exchange may take, connect included (nsqadmin's default: 5 s).
    pub timeout: Duration,
    /// The largest response body accepted, in bytes.
    pub max_body: usize,
    /// Headers sent with every request ([`with_header`](Self::with_header)).
    headers: Vec<(String, String)>,
    /// The runtime each exchange runs on ([`with_runtime`](Self::with_runtime)).
    runtime: RuntimeChoice,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            tls: None,
            connect_timeout: Duration::from_secs(2),
            timeout: Duration::from_secs(5),
            max_body: nsq_proto::http::DEFAULT_MAX_BODY_SIZE,
            headers: Vec::new(),
            runtime: RuntimeChoice::default(),
        }
    }
}

impl HttpConfig {
    /// Plain HTTP with the default timeouts.
    pub fn new() -> HttpConfig {
        HttpConfig::default()
    }

    /// The TLS settings of a client [`Config`] (`tls_v1`, `tls_root_ca_file`, `tls_cert`,
    /// `tls_key`, `tls_insecure_skip_verify`, `tls_min_version`; the files are read here):
    /// HTTPS when `tls_v1` is set, with the TCP protocol's verification, and `dial_timeout`
    /// as the connect timeout.
    pub fn from_config(config: &Config) -> Result<HttpConfig, Error> {
        let connection = config
            .connection_config(std::fs::read)
            .map_err(Error::Config)?;
        Ok(HttpConfig {
            tls: connection.tls,
            connect_timeout: config.dial_timeout,
            ..HttpConfig::default()
        })
    }

    /// With HTTPS through `tls`.
    #[must_use]
    pub fn with_tls(mut self, tls: TlsConfig) -> HttpConfig {
        self.tls = Some(tls);
        self
    }

    /// With a header sent on every request: credentials for a proxy that guards nsqd's or
    /// nsqlookupd's HTTP API (`Authorization: Basic ...`; nsqd itself asks for none: its
    /// client authentication is TLS client certificates, from [`from_config`](Self::from_config)).
    pub fn with_header(mut self, name: &str, value: &str) -> Result<HttpConfig, Error> {
        // Checked here, once, by the request builder's own rules.
        nsq_proto::http::Request::new(nsq_proto::http::Method::Get, "/", &[])
            .with_header(name, value)
            .map_err(|e| Error::InvalidInput(super::InputError::NsqdAddress(e.to_string())))?;
        self.headers.push((name.to_owned(), value.to_owned()));
        Ok(self)
    }

    /// With these timeouts.
    #[must_use]
    pub fn with_timeouts(mut self, connect: Duration, whole: Duration) -> HttpConfig {
        self.connect_timeout = connect;
        self.timeout = whole;
        self
    }

    /// With each exchange run on `runtime`, instead of the one found where the call is made
    /// (see [`ConsumerBuilder::runtime`](crate::ConsumerBuilder::runtime)).
    #[must_use]
    pub fn with_runtime(mut self, runtime: Arc<dyn Runtime>) -> HttpConfig {
        self.runtime = RuntimeChoice::given(runtime);
        self
    }
}

/// A client of one nsqd's or nsqlookupd's HTTP address (`host:port`): make the typed calls
/// of [`nsq_proto::http::nsqd`] and [`nsq_proto::http::lookupd`] with [`call`](Self::call).
/// Each call makes one exchange on a connection of its own. Cheap to clone.
#[derive(Clone)]
pub struct HttpClient {
    addr: String,
    config: HttpConfig,
    /// Whether its calls are awaited or block (the runtime it finds follows).
    calls: Calls,
}

impl fmt::Debug for HttpClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpClient")
            .field("addr", &self.addr)
            .field("https", &self.config.tls.is_some())
            .finish_non_exhaustive()
    }
}

impl HttpClient {
    /// A client of `addr` (`host:port`, or `http://host:port` / `https://host:port`; an
    /// `https://` address without TLS settings uses the web's root certificates).
    pub fn new(addr: &str) -> Result<HttpClient, Error> {
        HttpClient::with_config(addr, HttpConfig::default())
    }

    /// A client of `addr` (as [`new`](Self::new)) with `config` ([`HttpConfig`]: TLS,
    /// headers, timeouts).
    pub fn with_config(addr: &str, config: HttpConfig) -> Result<HttpClient, Error> {
        HttpClient::for_calls(addr, config, Calls::Async)
    }

    /// A client of `addr` whose calls are `calls`.
    pub(crate) fn for_calls(
        addr: &str,
        mut config: HttpConfig,
        calls: Calls,
    ) -> Result<HttpClient, Error> {
        let (https, host) = if let Some(rest) = addr.strip_prefix("https://") {
            (true, rest)
        } else {
            (false, addr.strip_prefix("http://").unwrap_or(addr))
        };
        let host = host.trim_end_matches('/');
        if host.is_empty() || host.contains('/') || !host.contains(':') {
            return Err(Error::InvalidInput(super::InputError::NsqdAddress(
                format!("{addr:?} is not an HTTP address (host:port)"),
            )));
        }
        if https && config.tls.is_none() {
            config.tls = Some(default_tls()?);
        }
        Ok(HttpClient {
            addr: host.to_owned(),
            config,
            calls,
        })
    }

    /// The address (`host:port`).
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Makes `call` (one exchange, on a connection of its own) and returns its typed reply.
    /// The exchange runs on the runtime of the context this is called in (see
    /// [`ConsumerBuilder::build`](crate::ConsumerBuilder::build)), or on the one given with
    /// [`HttpConfig::with_runtime`].
    pub async fn call<T: Send + 'static>(&self, call: Call<T>) -> Result<T, Error> {
        self.start(call)?.await
    }

    /// Starts `call` at once (its exchange runs on the runtime, as [`call`](Self::call)
    /// says); the returned [`PendingCall`] resolves with its reply. Many can be under way
    /// together.
    pub fn start<T: Send + 'static>(&self, call: Call<T>) -> Result<PendingCall<T>, Error> {
        let runtime = self.config.runtime.runtime(self.calls)?;
        let (tx, rx) = oneshot();
        let exchange = exchange(
            runtime.clone(),
            self.addr.clone(),
            self.config.clone(),
            call,
        );
        runtime
            .spawn(
                "nsq-http",
                Box::pin(async move {
                    tx.send(exchange.await);
                }),
            )
            .map_err(|e| Error::Spawn(e.to_string()))?;
        Ok(PendingCall {
            rx,
            addr: self.addr.clone(),
        })
    }
}

#[cfg(feature = "tls")]
fn default_tls() -> Result<TlsConfig, Error> {
    TlsConfig::webpki_roots()
        .map_err(|e| Error::InvalidInput(super::InputError::NsqdAddress(format!("TLS setup: {e}"))))
}

#[cfg(not(feature = "tls"))]
fn default_tls() -> Result<TlsConfig, Error> {
    Err(Error::Config(
        nsq_proto::config::OptionError::FeatureDisabled {
            option: "tls_v1".to_owned(),
            feature: "tls",
        },
    ))
}

/// A call under way ([`HttpClient::start`]): resolves with its reply.
#[must_use = "a call's result is only known by awaiting it"]
pub struct PendingCall<T> {
    rx: ReplyRx<Result<T, Error>>,
    addr: String,
}

impl<T> fmt::Debug for PendingCall<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PendingCall")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl<T> Future for PendingCall<T> {
    type Output = Result<T, Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        this.rx.poll_recv(cx).map(|r| {
            r.unwrap_or_else(|_| {
                Err(Error::Http {
                    server: this.addr.clone(),
                    failure: HttpFailure::Io("the exchange ended without an answer".into()),
                })
            })
        })
    }
}

/// One exchange of `call` with `addr` on `runtime`: connect (bounded by the connect
/// timeout), write the request, read until the response is complete (bounded by the
/// timeout), decode it.
async fn exchange<T>(
    runtime: Arc<dyn Runtime>,
    addr: String,
    config: HttpConfig,
    call: Call<T>,
) -> Result<T, Error> {
    let fail = |failure: HttpFailure| Error::Http {
        server: addr.clone(),
        failure,
    };
    let response = exchange_response(&*runtime, &addr, &config, &call)
        .await
        .map_err(fail)?;
    call.decode(&response)
        .map_err(|e| fail(HttpFailure::Api(e)))
}

async fn exchange_response<T>(
    runtime: &dyn Runtime,
    addr: &str,
    config: &HttpConfig,
    call: &Call<T>,
) -> Result<Response, HttpFailure> {
    let start = runtime.now();
    let mut request = call.request().clone();
    for (name, value) in &config.headers {
        request = request
            .with_header(name.as_str(), value.as_str())
            .map_err(|e| HttpFailure::Io(e.to_string()))?;
    }
    let mut exchange =
        Exchange::with_max_body(&request, addr, config.tls.as_ref(), config.max_body)?;
    let options = SocketOptions::new(config.connect_timeout, config.timeout);
    let mut connecting = runtime.connect(addr, options);
    let mut timer = runtime.timer(start + config.connect_timeout.min(config.timeout));
    let mut socket = std::future::poll_fn(|cx| {
        if let Poll::Ready(r) = connecting.as_mut().poll(cx) {
            return Poll::Ready(r.map_err(|e| HttpFailure::Connect(e.to_string())));
        }
        if timer.poll_expired(cx).is_ready() {
            return Poll::Ready(Err(HttpFailure::Connect(format!(
                "no connection within {:?}",
                config.connect_timeout
            ))));
        }
        Poll::Pending
    })
    .await?;
    drop(connecting);
    timer.reset(start + config.timeout);
    let mut pending: VecDeque<Bytes> = VecDeque::new();
    std::future::poll_fn(|cx| {
        loop {
            pending.extend(exchange.poll_transmit());
            while let Some(front) = pending.front_mut() {
                match socket.poll_write(cx, front) {
                    Poll::Ready(Ok(0)) => {
                        return Poll::Ready(Err(HttpFailure::Io("write returned 0 bytes".into())));
                    }
                    Poll::Ready(Ok(n)) => {
                        front.advance(n.min(front.len()));
                        if front.is_empty() {
                            pending.pop_front();
                        }
                    }
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(HttpFailure::Io(e.to_string()))),
                    Poll::Pending => break,
                }
            }
            match socket.poll_read(cx) {
                Poll::Ready(Ok(data)) if data.is_empty() => {
                    return Poll::Ready(exchange.handle_eof().map_err(HttpFailure::from));
                }
                Poll::Ready(Ok(data)) => match exchange.handle_input(&data) {
                    Ok(Some(response)) => return Poll::Ready(Ok(response)),
                    Ok(None) => {}
                    Err(e) => return Poll::Ready(Err(e.into())),
                },
                Poll::Ready(Err(e)) => return Poll::Ready(Err(HttpFailure::Io(e.to_string()))),
                Poll::Pending => {
                    if timer.poll_expired(cx).is_ready() {
                        return Poll::Ready(Err(HttpFailure::Timeout(config.timeout)));
                    }
                    return Poll::Pending;
                }
            }
        }
    })
    .await
}
