//! The start-up sequence of a [`Connection`]: the IDENTIFY reply and what it grants, the
//! upgrades in nsqd's order (TLS, then snappy or DEFLATE, each confirmed by an `OK` through
//! the new layer), AUTH, SUB, then `Ready`.

#[cfg(feature = "deflate")]
use super::deflate;
use super::events::{ConnectionEvent, Negotiated, NegotiatedCompression};
use super::layers::Codec;
#[cfg(feature = "snappy")]
use super::snappy;
use super::{CloseReason, Compression, Connection, Role, tls};
use crate::command;
use crate::identify::IdentifyResponse;
use std::time::Duration;

/// Where a connection stands in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    Identify,
    TlsOk,
    CompressionOk,
    Auth,
    Sub,
    Ready,
    Closing,
    Closed,
}

impl Connection {
    pub(super) fn on_identify(&mut self, reply: IdentifyResponse) {
        if reply.snappy && reply.deflate {
            return self.violation("server granted both snappy and deflate");
        }
        if reply.tls_v1 && self.config.tls.is_none() {
            return self.violation("server started TLS that was not requested");
        }
        if self.config.tls.is_some() && !reply.tls_v1 {
            return self.fail(CloseReason::TlsNotGranted);
        }
        let compression = match self.config.compression {
            Compression::Snappy if reply.snappy => NegotiatedCompression::Snappy,
            Compression::Deflate { level } if reply.deflate => {
                let cap = reply.max_deflate_level.clamp(1, 9) as u32;
                NegotiatedCompression::Deflate {
                    level: level.min(cap),
                }
            }
            _ if reply.snappy || reply.deflate => {
                return self.violation("server enabled compression that was not requested");
            }
            _ => NegotiatedCompression::None,
        };
        if self.config.compression != Compression::None
            && compression == NegotiatedCompression::None
        {
            tracing::info!("server declined compression; continuing uncompressed");
        }
        if !reply.auth_required && self.config.auth_secret.is_some() {
            tracing::debug!("server does not require AUTH; the configured secret is not sent");
        }
        self.msg_timeout = if reply.msg_timeout > 0 {
            reply.msg_timeout()
        } else {
            Duration::from_secs(60)
        };
        self.pending_tls = reply.tls_v1;
        self.pending_codec = compression;
        self.negotiated = Some(Negotiated {
            max_rdy_count: reply.max_rdy(),
            msg_timeout: self.msg_timeout,
            max_msg_timeout: reply.max_msg_timeout(),
            version: reply.version.clone(),
            tls: reply.tls_v1,
            compression,
            auth: None,
            identify: reply,
        });
        self.advance_handshake();
    }

    /// Takes the next start-up step.
    pub(super) fn advance_handshake(&mut self) {
        if self.pending_tls {
            self.pending_tls = false;
            if let Err(e) = self.flush_wbuf() {
                return self.fail(CloseReason::Tls(e));
            }
            let (Some(tls), Some(name)) = (&self.config.tls, &self.server_name) else {
                return self.fail(CloseReason::TlsNotGranted);
            };
            match tls::TlsLayer::start(tls.client_config().clone(), name.clone(), &mut self.out) {
                Ok(mut layer) => {
                    // Everything after the IDENTIFY reply is TLS records.
                    layer.push(&self.rbuf);
                    self.rbuf.clear();
                    self.layers.start_tls(layer);
                    self.phase = Phase::TlsOk;
                }
                Err(e) => self.fail(CloseReason::Tls(e)),
            }
            return;
        }
        if self.pending_codec != NegotiatedCompression::None {
            if let Err(e) = self.flush_wbuf() {
                return self.fail(CloseReason::Tls(e));
            }
            let codec: Option<Codec> = match self.pending_codec {
                #[cfg(feature = "deflate")]
                NegotiatedCompression::Deflate { level } => Some(Codec::Deflate(
                    deflate::DeflateDecoder::default(),
                    deflate::DeflateEncoder::new(level),
                )),
                #[cfg(feature = "snappy")]
                NegotiatedCompression::Snappy => Some(Codec::Snappy(
                    snappy::SnappyDecoder::default(),
                    Box::default(),
                )),
                // Only a compression this build can speak is ever asked for, hence granted.
                _ => None,
            };
            let Some(mut codec) = codec else {
                return self.fail(CloseReason::Protocol(format!(
                    "compression {:?} enabled without being asked for",
                    self.pending_codec
                )));
            };
            tracing::debug!(compression = ?self.pending_codec, "compression enabled");
            self.pending_codec = NegotiatedCompression::None;
            // Everything after the previous reply belongs to the compressed stream.
            codec.push(&self.rbuf);
            self.rbuf.clear();
            self.layers.start_compression(codec);
            self.phase = Phase::CompressionOk;
            return;
        }
        let auth_required = self
            .negotiated
            .as_ref()
            .is_some_and(|n| n.identify.auth_required);
        if auth_required && !self.auth_done {
            self.auth_done = true;
            let Some(secret) = &self.config.auth_secret else {
                return self.fail(CloseReason::AuthSecretMissing);
            };
            if command::auth(&mut self.wbuf, secret.expose()).is_err() {
                return self.fail(CloseReason::AuthSecretMissing);
            }
            self.phase = Phase::Auth;
            return;
        }
        if let Role::Consumer { topic, channel } = &self.role {
            if self.phase != Phase::Sub {
                command::sub(&mut self.wbuf, topic, channel);
                self.phase = Phase::Sub;
                return;
            }
        }
        self.ready();
    }

    pub(super) fn ready(&mut self) {
        self.phase = Phase::Ready;
        if !self.pre_ready.is_empty() {
            self.wbuf.extend_from_slice(&self.pre_ready);
            self.pre_ready.clear();
        }
        let negotiated = self.negotiated.clone().unwrap_or_else(|| Negotiated {
            max_rdy_count: crate::identify::DEFAULT_MAX_RDY_COUNT as u32,
            msg_timeout: self.msg_timeout,
            max_msg_timeout: Duration::from_secs(15 * 60),
            version: String::new(),
            tls: false,
            compression: NegotiatedCompression::None,
            auth: None,
            identify: IdentifyResponse::default(),
        });
        tracing::debug!(?negotiated.version, "nsqd connection ready");
        self.events
            .push_back(ConnectionEvent::Ready(Box::new(negotiated)));
    }
}
