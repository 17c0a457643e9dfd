//! A [`Config`] turned into the core's configurations: [`ConnectionConfig`],
//! [`ConsumerConfig`] and [`ProducerConfig`] (with TLS material read from the files named).

use super::{Config, OptionError};
use crate::command::Limits;
#[cfg(feature = "tls")]
use crate::connection::{ClientCert, webpki_root_store};
use crate::connection::{Compression, ConnectionConfig, DEFAULT_USER_AGENT, TlsConfig};
use crate::consumer::ConsumerConfig;
use crate::producer::ProducerConfig;
#[cfg(feature = "tls")]
use rustls::RootCertStore;
#[cfg(feature = "tls")]
use rustls::pki_types::pem::PemObject;
#[cfg(feature = "tls")]
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
#[cfg(feature = "tls")]
use std::fmt;
#[cfg(feature = "tls")]
use std::path::Path;
use std::path::PathBuf;

impl Config {
    /// The settings of every nsqd connection. TLS files named by `tls_root_ca_file`,
    /// `tls_cert` and `tls_key` are read with `read_file` (the adapters pass
    /// `std::fs::read`; the core itself never touches the file system).
    pub fn connection_config(
        &self,
        read_file: impl FnMut(PathBuf) -> std::io::Result<Vec<u8>>,
    ) -> Result<ConnectionConfig, OptionError> {
        self.validate()?;
        let tls = self.tls(read_file)?;
        let compression = if self.deflate {
            Compression::Deflate {
                level: self.deflate_level,
            }
        } else if self.snappy {
            Compression::Snappy
        } else {
            Compression::None
        };
        Ok(ConnectionConfig {
            client_id: self.client_id.clone(),
            hostname: self.hostname.clone(),
            user_agent: self
                .user_agent
                .clone()
                .filter(|ua| !is_go_nsq_default_user_agent(ua))
                .unwrap_or_else(|| DEFAULT_USER_AGENT.to_owned()),
            topology_region: self.topology_region.clone().filter(|r| !r.is_empty()),
            topology_zone: self.topology_zone.clone().filter(|z| !z.is_empty()),
            heartbeat_interval: self.heartbeat_interval,
            read_timeout: self.read_timeout,
            msg_timeout: (!self.msg_timeout.is_zero()).then_some(self.msg_timeout),
            output_buffer_size: (self.output_buffer_size != 0).then_some(self.output_buffer_size),
            output_buffer_timeout: Some(self.output_buffer_timeout),
            sample_rate: self.sample_rate,
            tls,
            compression,
            auth_secret: self.auth_secret.clone(),
            limits: Limits {
                max_msg_size: self.max_msg_size,
                max_body_size: self.max_body_size,
                max_req_timeout: self.max_req_timeout,
            },
            max_outstanding_publishes: None,
            drain_timeout: self.drain_timeout,
            auto_touch: self.auto_touch.then_some(self.auto_touch_limit),
        })
    }

    /// The consumer's configuration (see [`connection_config`](Self::connection_config) for
    /// `read_file`).
    pub fn consumer_config(
        &self,
        read_file: impl FnMut(PathBuf) -> std::io::Result<Vec<u8>>,
    ) -> Result<ConsumerConfig, OptionError> {
        Ok(ConsumerConfig {
            connection: self.connection_config(read_file)?,
            max_in_flight: self.max_in_flight,
            max_in_flight_mode: self.max_in_flight_mode,
            min_in_flight: self.min_in_flight,
            max_attempts: self.max_attempts,
            default_requeue_delay: self.default_requeue_delay,
            max_requeue_delay: self.max_requeue_delay,
            backoff_enabled: !self.max_backoff_duration.is_zero(),
            backoff_strategy: self.backoff_strategy,
            backoff_multiplier: self.backoff_multiplier,
            max_backoff_duration: self.max_backoff_duration,
            lookupd_poll_interval: self.lookupd_poll_interval,
            lookupd_poll_jitter: self.lookupd_poll_jitter,
            lookupd_timeout: self.lookupd_timeout,
            rdy_redistribute_interval: self.rdy_redistribute_interval,
            low_rdy_idle_timeout: self.low_rdy_idle_timeout,
            low_rdy_timeout: self.low_rdy_timeout,
            low_rdy_max_wait: self.low_rdy_max_wait,
            reconnect_initial_delay: self.reconnect_initial_delay,
            reconnect_max_delay: self.reconnect_max_delay,
            reconnect_reset_after: self.reconnect_reset_after,
            close_timeout: self.drain_timeout,
            ..ConsumerConfig::default()
        })
    }

    /// The producer's configuration (see [`connection_config`](Self::connection_config) for
    /// `read_file`).
    pub fn producer_config(
        &self,
        read_file: impl FnMut(PathBuf) -> std::io::Result<Vec<u8>>,
    ) -> Result<ProducerConfig, OptionError> {
        Ok(ProducerConfig {
            connection: self.connection_config(read_file)?,
            routing: self.producer_routing,
            connect_timeout: self.dial_timeout,
            publish_timeout: self.publish_timeout,
            reply_timeout: (!self.reply_timeout.is_zero()).then_some(self.reply_timeout),
            max_outstanding: (self.max_outstanding_publishes > 0)
                .then_some(self.max_outstanding_publishes),
            max_pending: self.max_pending_publishes,
            reconnect_initial_delay: self.reconnect_initial_delay,
            reconnect_max_delay: self.reconnect_max_delay,
            reconnect_reset_after: self.reconnect_reset_after,
            close_timeout: self.drain_timeout,
            batching: self.producer_batching,
        })
    }

    #[cfg(not(feature = "tls"))]
    #[allow(clippy::unnecessary_wraps, clippy::unused_self)]
    fn tls(
        &self,
        _read_file: impl FnMut(PathBuf) -> std::io::Result<Vec<u8>>,
    ) -> Result<Option<TlsConfig>, OptionError> {
        // `validate` refused `tls_v1`, and no `TlsConfig` exists in this build.
        Ok(None)
    }

    #[cfg(feature = "tls")]
    fn tls(
        &self,
        mut read_file: impl FnMut(PathBuf) -> std::io::Result<Vec<u8>>,
    ) -> Result<Option<TlsConfig>, OptionError> {
        let named = |tls: TlsConfig| match &self.tls_server_name {
            Some(name) => tls.with_server_name(name.clone()),
            None => tls,
        };
        if let Some(tls) = &self.tls_config {
            return Ok(Some(named(tls.clone())));
        }
        if !self.tls_v1 {
            return Ok(None);
        }
        let mut read = |option: &str, path: &Path| -> Result<Vec<u8>, OptionError> {
            read_file(path.to_path_buf()).map_err(|e| OptionError::TlsFile {
                option: option.to_string(),
                path: path.to_path_buf(),
                reason: e.to_string(),
            })
        };
        let file_error = |option: &str, path: &Path, reason: String| OptionError::TlsFile {
            option: option.to_string(),
            path: path.to_path_buf(),
            reason,
        };
        let client_cert: Option<ClientCert> = match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => {
                let pem = read("tls_cert", cert)?;
                let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&pem)
                    .collect::<Result<_, _>>()
                    .map_err(|e| file_error("tls_cert", cert, format!("invalid PEM: {e}")))?;
                if chain.is_empty() {
                    return Err(file_error("tls_cert", cert, "no certificate found".into()));
                }
                let pem = read("tls_key", key)?;
                let key_der = PrivateKeyDer::from_pem_slice(&pem)
                    .map_err(|e| file_error("tls_key", key, format!("no private key: {e}")))?;
                Some((chain, key_der))
            }
            _ => None,
        };
        let setup_error = |option: &str, e: &dyn fmt::Display| OptionError::Conflict {
            option: option.to_string(),
            reason: e.to_string(),
        };
        if self.tls_insecure_skip_verify {
            tracing::warn!("TLS certificate verification is DISABLED (tls_insecure_skip_verify)");
            let tls = TlsConfig::dangerous_skip_verification(client_cert)
                .map_err(|e| setup_error("tls_cert", &e))?;
            return Ok(Some(named(tls)));
        }
        let roots = match &self.tls_root_ca_file {
            Some(path) => {
                let pem = read("tls_root_ca_file", path)?;
                let mut roots = RootCertStore::empty();
                for cert in CertificateDer::pem_slice_iter(&pem) {
                    let cert = cert.map_err(|e| {
                        file_error("tls_root_ca_file", path, format!("invalid PEM: {e}"))
                    })?;
                    roots.add(cert).map_err(|e| {
                        file_error(
                            "tls_root_ca_file",
                            path,
                            format!("unusable certificate: {e}"),
                        )
                    })?;
                }
                if roots.is_empty() {
                    return Err(file_error(
                        "tls_root_ca_file",
                        path,
                        "no certificate found".into(),
                    ));
                }
                roots
            }
            None => webpki_root_store(),
        };
        let tls = TlsConfig::with_root_store(roots, client_cert)
            .map_err(|e| setup_error("tls_cert", &e))?;
        Ok(Some(named(tls)))
    }
}

/// Whether `ua` is go-nsq's own default `user_agent` (`go-nsq/<version>`), which every
/// configuration marshalled by go-nsq carries: a ported configuration then sends this
/// client's name, not go-nsq's (nsqd shows it in `/stats`). Any other value is the user's.
fn is_go_nsq_default_user_agent(ua: &str) -> bool {
    ua.strip_prefix("go-nsq/").is_some_and(|version| {
        !version.is_empty() && version.chars().all(|c| c.is_ascii_digit() || c == '.')
    })
}
