//! [`super::NsqdBuilder`]: nsqd's flags plus the stand-in's own switches, then `start`.

use std::io::{self};
use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, AtomicU16, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::http::{HttpServer, Request};
use crate::lookupd::{LookupShared, Lookupd, PeerInfo};
use crate::options::{AuthTable, Options};
use crate::tls::{TestPki, server_config};

use super::{Inner, Nsqd, RuntimeConfig, State};

/// Builder of a [`Nsqd`]; every setter mirrors an nsqd flag.
#[derive(Debug, Default)]
pub struct NsqdBuilder {
    pub(super) opts: Options,
    pub(super) lookupd: Vec<Arc<LookupShared>>,
    pub(super) http: bool,
}

macro_rules! setter {
    ($(#[$doc:meta] $name:ident: $ty:ty),* $(,)?) => {
        $(#[$doc] pub fn $name(mut self, value: $ty) -> Self { self.opts.$name = value; self })*
    };
}

impl NsqdBuilder {
    setter! {
        /// `--max-rdy-count`.
        max_rdy_count: i64,
        /// `--max-channel-consumers` (0 = unlimited).
        max_channel_consumers: usize,
        /// `--msg-timeout` (default per-client message timeout).
        msg_timeout: Duration,
        /// `--max-msg-timeout`.
        max_msg_timeout: Duration,
        /// `--max-msg-size`.
        max_msg_size: i64,
        /// `--max-body-size`.
        max_body_size: i64,
        /// `--max-req-timeout` (also bounds DPUB).
        max_req_timeout: Duration,
        /// nsqd's queue scan tick (100ms) for timeouts and deferred messages ([`Options::queue_scan_interval`]).
        queue_scan_interval: Duration,
        /// Default heartbeat interval of clients that do not ask for one (nsqd: half its client timeout, 30s, not a flag).
        heartbeat_interval: Duration,
        /// `--output-buffer-timeout` (default output buffer timeout of a client).
        output_buffer_timeout: Duration,
        /// `--max-heartbeat-interval`.
        max_heartbeat_interval: Duration,
        /// `--max-output-buffer-size`.
        max_output_buffer_size: i64,
        /// `--min-output-buffer-timeout`.
        min_output_buffer_timeout: Duration,
        /// `--max-output-buffer-timeout`.
        max_output_buffer_timeout: Duration,
        /// `--max-deflate-level`.
        max_deflate_level: i64,
        /// `--snappy`.
        snappy: bool,
        /// `--deflate`.
        deflate: bool,
        /// Serve TLS with a certificate from [`TestPki::global`].
        tls: bool,
        /// `--tls-required` (implies `tls`).
        tls_required: bool,
        /// Version reported by IDENTIFY and to lookupd.
        version: String,
        /// `--e2e-processing-latency-percentile` (quantiles reported by `/stats`).
        e2e_processing_latency_percentiles: Vec<f64>,
        /// `--e2e-processing-latency-window-time`.
        e2e_processing_latency_window_time: Duration,
        /// `--lookupd-tcp-address` (only reported by `/config/nsqlookupd_tcp_addresses`).
        nsqlookupd_tcp_addresses: Vec<String>,
        /// How many commands the command log keeps (0 = none).
        command_log_limit: usize,
        /// How many bytes of each body the command log keeps.
        command_log_body_limit: usize,
    }

    /// Replaces all options.
    pub fn options(mut self, opts: Options) -> Self {
        self.opts = opts;
        self
    }

    /// Names in the server certificate (default `localhost`, `127.0.0.1`); give a wrong name
    /// to test hostname verification. Implies `tls`.
    pub fn tls_server_names(mut self, names: &[&str]) -> Self {
        self.opts.tls = true;
        self.opts.tls_server_names = names.iter().map(|s| (*s).to_owned()).collect();
        self
    }

    /// Enables AUTH with this table.
    pub fn auth(mut self, table: AuthTable) -> Self {
        self.opts.auth = Some(table);
        self
    }

    /// Registers with this lookupd (in-process): the producer appears on start, topics and
    /// channels as they are created, and it disappears on shutdown. Call again to register
    /// with several lookupds.
    pub fn lookupd(mut self, lookupd: &Lookupd) -> Self {
        self.lookupd.push(lookupd.shared());
        self
    }

    /// `--topology-zone` (nsqd after v1.3.0).
    pub fn topology_zone(mut self, zone: &str) -> Self {
        zone.clone_into(&mut self.opts.topology_zone);
        self
    }

    /// `--topology-region` (nsqd after v1.3.0).
    pub fn topology_region(mut self, region: &str) -> Self {
        region.clone_into(&mut self.opts.topology_region);
        self
    }

    /// `--enable-experiment=topology-aware-consumption` (nsqd after v1.3.0; see
    /// [`Options::topology_aware_consumption`](crate::Options::topology_aware_consumption)).
    pub fn topology_aware_consumption(mut self, on: bool) -> Self {
        self.opts.topology_aware_consumption = on;
        self
    }

    /// Also serve nsqd's HTTP API (`/ping`, `/info`, `/pub`, `/mpub`, `/stats`,
    /// `/topic/{create,delete,empty,pause,unpause}`,
    /// `/channel/{create,delete,empty,pause,unpause}`, `/config/:opt`).
    pub fn http(mut self, on: bool) -> Self {
        self.http = on;
        self
    }

    /// Starts the broker on `127.0.0.1` with an ephemeral port.
    pub fn start(self) -> io::Result<Nsqd> {
        let mut opts = self.opts;
        if opts.tls_required {
            opts.tls = true;
        }
        let tls = if opts.tls {
            let names: Vec<&str> = opts.tls_server_names.iter().map(String::as_str).collect();
            let identity = TestPki::global().issue(&names).map_err(io::Error::other)?;
            Some(server_config(&identity).map_err(io::Error::other)?)
        } else {
            None
        };
        // nsqd sorts the percentiles in descending order when it parses the flag.
        opts.e2e_processing_latency_percentiles
            .sort_by(|a, b| b.total_cmp(a));
        let opts_lookupd = opts.nsqlookupd_tcp_addresses.clone();
        let listener = TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let mut state = State::default();
        state.queues.topology = opts.topology();
        state.queues.topology_aware = opts.topology_aware_consumption;
        let inner = Arc::new(Inner {
            opts,
            tls,
            addr,
            listener: Mutex::new(Some(listener)),
            ignore_accepts: AtomicBool::new(false),
            state: Mutex::new(state),
            wake: Condvar::new(),
            shutdown: AtomicBool::new(false),
            faults: Arc::default(),
            conn_threads: Mutex::default(),
            lookup: Mutex::new(Vec::new()),
            fail_publishes: AtomicBool::new(false),
            lose_size_refusals: AtomicBool::new(false),
            start_time: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            http_port: AtomicU16::new(0),
            config: Mutex::new(RuntimeConfig {
                log_level: 2,
                nsqlookupd_tcp_addresses: Some(opts_lookupd),
            }),
        });
        let http = if self.http {
            let h = inner.clone();
            Some(HttpServer::start(
                "nsqd",
                Arc::new(move |req: &mut Request| h.handle_http(req)),
            )?)
        } else {
            None
        };
        if let Some(h) = &http {
            inner.http_port.store(h.addr().port(), Ordering::SeqCst);
        }
        for shared in self.lookupd {
            let http_port = http.as_ref().map_or(0, |h| h.addr().port());
            let mut info = PeerInfo::local(addr.port(), http_port);
            info.hostname.clone_from(&inner.opts.hostname);
            info.broadcast_address
                .clone_from(&inner.opts.broadcast_address);
            info.version.clone_from(&inner.opts.version);
            let id = shared.add_producer(info);
            inner
                .lookup
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push((shared, id));
        }
        let acceptor = {
            let inner = inner.clone();
            std::thread::Builder::new()
                .name("nsqd-accept".into())
                .spawn(move || inner.accept_loop())?
        };
        let scanner = {
            let inner = inner.clone();
            std::thread::Builder::new()
                .name("nsqd-scan".into())
                .spawn(move || inner.scan_loop())?
        };
        Ok(Nsqd {
            inner,
            acceptor: Some(acceptor),
            scanner: Some(scanner),
            http,
        })
    }
}
