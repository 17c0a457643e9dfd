//! The nsqlookupd stand-in: `GET /lookup?topic=` and friends, answered in the v1 JSON form.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use serde::Serialize;
use serde_json::json;

use crate::http::{HttpServer, Request, Response};

/// A producer as nsqlookupd reports it (`PeerInfo`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PeerInfo {
    /// The address the nsqd connected to lookupd from.
    pub remote_address: String,
    /// The nsqd's hostname.
    pub hostname: String,
    /// The address clients should connect to.
    pub broadcast_address: String,
    /// TCP port.
    pub tcp_port: u16,
    /// HTTP port.
    pub http_port: u16,
    /// nsqd version.
    pub version: String,
}

impl PeerInfo {
    /// A producer at `127.0.0.1:tcp_port`.
    pub fn local(tcp_port: u16, http_port: u16) -> Self {
        Self {
            remote_address: format!("127.0.0.1:{tcp_port}"),
            hostname: "localhost".to_owned(),
            broadcast_address: "127.0.0.1".to_owned(),
            tcp_port,
            http_port,
            version: "1.3.0".to_owned(),
        }
    }
}

/// `/lookup`'s answer, fields in nsqlookupd's order.
#[derive(Serialize)]
struct LookupReply {
    channels: Vec<String>,
    producers: Vec<PeerInfo>,
}

/// A `/nodes` entry, fields in nsqlookupd's order.
#[derive(Serialize)]
struct Node<'a> {
    #[serde(flatten)]
    info: &'a PeerInfo,
    tombstones: Vec<bool>,
    topics: Vec<&'a str>,
}

/// Handle of a producer registered with a [`Lookupd`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ProducerId(u64);

#[derive(Debug)]
struct Producer {
    info: PeerInfo,
    topics: BTreeMap<String, BTreeSet<String>>,
}

#[derive(Debug, Default)]
struct LookupState {
    producers: BTreeMap<u64, Producer>,
    next_id: u64,
    failure: Option<u16>,
    requests: Vec<String>,
}

/// The registration database, shared with the nsqd that register in-process.
#[derive(Debug, Default)]
pub(crate) struct LookupShared {
    state: Mutex<LookupState>,
}

impl LookupShared {
    fn lock(&self) -> MutexGuard<'_, LookupState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn add_producer(&self, info: PeerInfo) -> ProducerId {
        let mut st = self.lock();
        st.next_id += 1;
        let id = st.next_id;
        st.producers.insert(
            id,
            Producer {
                info,
                topics: BTreeMap::new(),
            },
        );
        ProducerId(id)
    }

    pub(crate) fn remove_producer(&self, id: ProducerId) -> bool {
        self.lock().producers.remove(&id.0).is_some()
    }

    pub(crate) fn register(&self, id: ProducerId, topic: &str, channel: Option<&str>) {
        if let Some(p) = self.lock().producers.get_mut(&id.0) {
            let chans = p.topics.entry(topic.to_owned()).or_default();
            if let Some(c) = channel {
                chans.insert(c.to_owned());
            }
        }
    }

    pub(crate) fn unregister(&self, id: ProducerId, topic: &str, channel: Option<&str>) {
        if let Some(p) = self.lock().producers.get_mut(&id.0) {
            match channel {
                Some(c) => {
                    if let Some(chans) = p.topics.get_mut(topic) {
                        chans.remove(c);
                    }
                }
                None => {
                    p.topics.remove(topic);
                }
            }
        }
    }

    fn lookup(&self, topic: &str) -> Option<(Vec<String>, Vec<PeerInfo>)> {
        let st = self.lock();
        let mut channels = BTreeSet::new();
        let mut producers = Vec::new();
        for p in st.producers.values() {
            if let Some(chans) = p.topics.get(topic) {
                channels.extend(chans.iter().cloned());
                producers.push(p.info.clone());
            }
        }
        if producers.is_empty() {
            None
        } else {
            Some((channels.into_iter().collect(), producers))
        }
    }

    fn handle(&self, req: &Request) -> Response {
        {
            let mut st = self.lock();
            let mut line = req.path.clone();
            if !req.query.is_empty() {
                let q: Vec<String> = req.query.iter().map(|(k, v)| format!("{k}={v}")).collect();
                line.push('?');
                line.push_str(&q.join("&"));
            }
            st.requests.push(line);
            if let Some(status) = st.failure {
                return Response::message(status, "INJECTED_FAILURE");
            }
        }
        if req.method != "GET" && req.method != "HEAD" {
            return Response::message(405, "METHOD_NOT_ALLOWED");
        }
        match req.path.as_str() {
            "/ping" => Response::text(200, "OK"),
            "/lookup" => {
                let Some(topic) = req.param("topic") else {
                    return Response::message(400, "MISSING_ARG_TOPIC");
                };
                match self.lookup(topic) {
                    Some((channels, producers)) => Response::json(
                        200,
                        &LookupReply {
                            channels,
                            producers,
                        },
                    ),
                    None => Response::message(404, "TOPIC_NOT_FOUND"),
                }
            }
            "/topics" => {
                let st = self.lock();
                let topics: BTreeSet<&String> = st
                    .producers
                    .values()
                    .flat_map(|p| p.topics.keys())
                    .collect();
                Response::json(200, &json!({ "topics": topics }))
            }
            "/channels" => {
                let Some(topic) = req.param("topic") else {
                    return Response::message(400, "MISSING_ARG_TOPIC");
                };
                let channels = self.lookup(topic).map(|(c, _)| c).unwrap_or_default();
                Response::json(200, &json!({ "channels": channels }))
            }
            "/nodes" => {
                let st = self.lock();
                let producers: Vec<Node<'_>> = st
                    .producers
                    .values()
                    .map(|p| Node {
                        info: &p.info,
                        tombstones: vec![false; p.topics.len()],
                        topics: p.topics.keys().map(String::as_str).collect(),
                    })
                    .collect();
                // Not through json!, which would sort the nodes' fields.
                #[derive(Serialize)]
                struct Nodes<'a> {
                    producers: Vec<Node<'a>>,
                }
                Response::json(200, &Nodes { producers })
            }
            "/info" => Response::json(200, &json!({ "version": "1.3.0" })),
            _ => Response::message(404, "NOT_FOUND"),
        }
    }
}

/// An nsqlookupd stand-in serving HTTP on `127.0.0.1` (ephemeral port).
///
/// nsqd stand-ins started with [`crate::NsqdBuilder::lookupd`] register themselves and their
/// topics/channels in-process; tests can also add and remove producers by hand.
/// Dropping it stops the server and joins its threads.
pub struct Lookupd {
    shared: Arc<LookupShared>,
    server: HttpServer,
}

impl std::fmt::Debug for Lookupd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lookupd")
            .field("http_address", &self.server.addr())
            .finish_non_exhaustive()
    }
}

impl Lookupd {
    /// Starts a lookupd on an ephemeral port.
    pub fn start() -> io::Result<Self> {
        let shared = Arc::new(LookupShared::default());
        let handler_shared = shared.clone();
        let server = HttpServer::start(
            "lookupd",
            Arc::new(move |req: &Request| handler_shared.handle(req)),
        )?;
        Ok(Self { shared, server })
    }

    /// The HTTP address (`127.0.0.1:port`).
    pub fn http_address(&self) -> SocketAddr {
        self.server.addr()
    }

    /// Adds a producer with no topics yet.
    pub fn add_producer(&self, info: PeerInfo) -> ProducerId {
        self.shared.add_producer(info)
    }

    /// Removes a producer; false if it was not registered.
    pub fn remove_producer(&self, id: ProducerId) -> bool {
        self.shared.remove_producer(id)
    }

    /// Registers a topic (and optionally a channel) for a producer.
    pub fn register(&self, id: ProducerId, topic: &str, channel: Option<&str>) {
        self.shared.register(id, topic, channel);
    }

    /// Unregisters a channel, or a whole topic when `channel` is `None`.
    pub fn unregister(&self, id: ProducerId, topic: &str, channel: Option<&str>) {
        self.shared.unregister(id, topic, channel);
    }

    /// Producers currently listed for `topic`.
    pub fn producers(&self, topic: &str) -> Vec<PeerInfo> {
        self.shared
            .lookup(topic)
            .map(|(_, p)| p)
            .unwrap_or_default()
    }

    /// Makes every request fail with this HTTP status (`None` restores normal answers).
    pub fn set_failure(&self, status: Option<u16>) {
        self.shared.lock().failure = status;
    }

    /// Every request received so far (`path?k=v` with decoded query values).
    pub fn requests(&self) -> Vec<String> {
        self.shared.lock().requests.clone()
    }

    pub(crate) fn shared(&self) -> Arc<LookupShared> {
        self.shared.clone()
    }
}
