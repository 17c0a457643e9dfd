//! nsqlookupd `/lookup` replies.

use crate::addr::join_host_port;
use crate::identify::{ReplyError, expect_json_object};
use serde::{Deserialize, Serialize};

/// One nsqd that nsqlookupd knows to carry a topic.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct LookupProducer {
    /// The address the nsqd asks clients to use.
    pub broadcast_address: String,
    /// The nsqd's hostname.
    pub hostname: String,
    /// The address nsqlookupd saw the nsqd connect from.
    pub remote_address: String,
    /// The nsqd's TCP port.
    pub tcp_port: u16,
    /// The nsqd's HTTP port.
    pub http_port: u16,
    /// The nsqd's version.
    pub version: String,
}

impl LookupProducer {
    /// The address to connect to, `broadcast_address:tcp_port`, with IPv6 literals bracketed
    /// (`[::1]:4150`). Also the key producers are deduplicated by across lookupds.
    pub fn tcp_address(&self) -> String {
        join_host_port(&self.broadcast_address, self.tcp_port)
    }
}

/// A parsed `/lookup` reply.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct LookupResponse {
    /// Channels of the topic known to nsqlookupd.
    pub channels: Vec<String>,
    /// The nsqd instances carrying the topic.
    pub producers: Vec<LookupProducer>,
}

/// A 200 reply in either form: the old envelope has `status_code`, the v1 form does not.
/// (Not an untagged enum: a malformed envelope would silently parse as an empty flat reply.)
#[derive(Deserialize, Default)]
#[serde(default)]
struct AnyReply {
    status_code: Option<i64>,
    status_txt: String,
    data: Option<LookupResponse>,
    channels: Vec<String>,
    producers: Vec<LookupProducer>,
}

#[derive(Deserialize)]
struct Message {
    message: String,
}

impl LookupResponse {
    /// Parses a `/lookup` reply given the HTTP status and body.
    ///
    /// Accepts the flat v1 form (`{"channels":[..],"producers":[..]}`) and the old
    /// `{"status_code","status_txt","data"}` envelope. A 404 (or enveloped) `TOPIC_NOT_FOUND`
    /// means "no producers yet" and parses as an empty reply.
    pub fn parse(status: u16, body: &[u8]) -> Result<LookupResponse, ReplyError> {
        if status != 200 {
            let text = serde_json::from_slice::<Message>(body)
                .map(|m| m.message)
                .ok()
                .or_else(|| {
                    serde_json::from_slice::<AnyReply>(body)
                        .ok()
                        .filter(|r| r.status_code.is_some())
                        .map(|r| r.status_txt)
                })
                .unwrap_or_else(|| String::from_utf8_lossy(&body[..body.len().min(200)]).into());
            if status == 404 && text == "TOPIC_NOT_FOUND" {
                return Ok(LookupResponse::default());
            }
            if status == 404 && text == "NOT_FOUND" {
                // nsqlookupd answers /lookup for any topic; nsqd's HTTP API has no such path.
                return Err(ReplyError::new(
                    "lookup",
                    "HTTP 404 NOT_FOUND: this server has no /lookup, so it is not an \
                     nsqlookupd (nsqd's HTTP address answers like this; a lookupd's HTTP \
                     port is 4161 by default)",
                ));
            }
            return Err(ReplyError::new("lookup", format!("HTTP {status}: {text}")));
        }
        expect_json_object("lookup", body)?;
        let reply =
            serde_json::from_slice::<AnyReply>(body).map_err(|e| ReplyError::new("lookup", e))?;
        let reply = match reply.status_code {
            None => LookupResponse {
                channels: reply.channels,
                producers: reply.producers,
            },
            Some(200) => reply.data.unwrap_or_default(),
            Some(_) if reply.status_txt == "TOPIC_NOT_FOUND" => LookupResponse::default(),
            Some(code) => {
                return Err(ReplyError::new(
                    "lookup",
                    format!("status {code}: {}", reply.status_txt),
                ));
            }
        };
        reply.check_producers()?;
        Ok(reply)
    }

    /// Rejects producers that cannot be connected to: no `broadcast_address` or a `tcp_port`
    /// of 0 (missing). Ports outside `0..=65535` already fail to parse.
    fn check_producers(&self) -> Result<(), ReplyError> {
        for (i, p) in self.producers.iter().enumerate() {
            if p.broadcast_address.is_empty() {
                return Err(ReplyError::new(
                    "lookup",
                    format!("producer {i} has no broadcast_address"),
                ));
            }
            if p.tcp_port == 0 {
                return Err(ReplyError::new(
                    "lookup",
                    format!("producer {i} ({}) has no tcp_port", p.broadcast_address),
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const V1: &[u8] = br#"{"channels":["c"],"producers":[{"remote_address":"127.0.0.1:5000","hostname":"h","broadcast_address":"10.0.0.1","tcp_port":4150,"http_port":4151,"version":"1.3.0","extra":true}]}"#;

    #[test]
    fn an_nsqd_http_address_is_named_as_not_a_lookupd() {
        let e = LookupResponse::parse(404, br#"{"message":"NOT_FOUND"}"#).unwrap_err();
        assert!(e.to_string().contains("not an nsqlookupd"), "{e}");
        assert!(LookupResponse::parse(404, br#"{"message":"TOPIC_NOT_FOUND"}"#).is_ok());
    }

    #[test]
    fn flat() {
        let r = LookupResponse::parse(200, V1).unwrap();
        assert_eq!(r.channels, vec!["c".to_string()]);
        assert_eq!(r.producers[0].tcp_address(), "10.0.0.1:4150");
    }

    #[test]
    fn envelope() {
        let body = br#"{"status_code":200,"status_txt":"OK","data":{"channels":[],"producers":[{"broadcast_address":"::1","tcp_port":4150}]}}"#;
        let r = LookupResponse::parse(200, body).unwrap();
        assert_eq!(r.producers[0].tcp_address(), "[::1]:4150");
    }

    #[test]
    fn not_found() {
        let r = LookupResponse::parse(404, br#"{"message":"TOPIC_NOT_FOUND"}"#).unwrap();
        assert!(r.producers.is_empty());
        let r = LookupResponse::parse(
            200,
            br#"{"status_code":500,"status_txt":"TOPIC_NOT_FOUND","data":null}"#,
        )
        .unwrap();
        assert!(r.producers.is_empty());
        assert!(LookupResponse::parse(500, br#"{"message":"INTERNAL_ERROR"}"#).is_err());
        assert!(LookupResponse::parse(404, b"nope").is_err());
    }

    #[test]
    fn bad_port() {
        let body = br#"{"channels":[],"producers":[{"broadcast_address":"a","tcp_port":70000}]}"#;
        assert!(LookupResponse::parse(200, body).is_err());
        let body = br#"{"channels":[],"producers":[{"broadcast_address":"a","tcp_port":-1}]}"#;
        assert!(LookupResponse::parse(200, body).is_err());
    }
}
