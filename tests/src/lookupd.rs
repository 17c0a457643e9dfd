//! The nsqlookupd stand-in: nsqlookupd v1.3.0's registration database and its whole HTTP API
//! (`/ping`, `/info`, `/debug`, `/lookup`, `/topics`, `/channels`, `/nodes`,
//! `/topic/{create,delete,tombstone}`, `/channel/{create,delete}`), answered in the v1 JSON
//! form with nsqlookupd's checks and error texts.

use std::collections::BTreeMap;
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use serde_json::{Value, json};

use crate::http::{HttpServer, Request, Response, Routes, route};
use crate::util::is_valid_name;

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
struct LookupReply<'a> {
    channels: Vec<&'a str>,
    producers: Vec<&'a PeerInfo>,
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

/// nsqlookupd's `Registration`: `client::`, `topic:name:` or `channel:topic:name`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Registration {
    category: &'static str,
    key: String,
    subkey: String,
}

impl Registration {
    fn new(category: &'static str, key: &str, subkey: &str) -> Self {
        Self {
            category,
            key: key.to_owned(),
            subkey: subkey.to_owned(),
        }
    }

    /// nsqlookupd's `IsMatch`: `*` matches any key or subkey.
    fn is_match(&self, category: &str, key: &str, subkey: &str) -> bool {
        self.category == category
            && (key == "*" || self.key == key)
            && (subkey == "*" || self.subkey == subkey)
    }
}

/// One producer's entry in one registration (nsqlookupd's `Producer`: the tombstone is per
/// registration).
#[derive(Clone, Debug, Default)]
struct Entry {
    tombstoned_at: Option<(Instant, i64)>,
}

#[derive(Debug)]
struct Peer {
    info: PeerInfo,
    /// Unix nanoseconds of the last update (`last_update` in `/debug`).
    last_update: i64,
}

/// nsqlookupd's default `--tombstone-lifetime`.
const DEFAULT_TOMBSTONE_LIFETIME: Duration = Duration::from_secs(45);

#[derive(Debug)]
struct LookupState {
    peers: BTreeMap<ProducerId, Peer>,
    /// nsqlookupd's `registrationMap`: a key stays when its last producer goes (only
    /// `/topic/delete`, `/channel/delete` and ephemeral unregistrations remove keys).
    registrations: BTreeMap<Registration, BTreeMap<ProducerId, Entry>>,
    next_id: u64,
    tombstone_lifetime: Duration,
    failure: Option<u16>,
    requests: Vec<String>,
}

impl Default for LookupState {
    fn default() -> Self {
        Self {
            peers: BTreeMap::new(),
            registrations: BTreeMap::new(),
            next_id: 0,
            tombstone_lifetime: DEFAULT_TOMBSTONE_LIFETIME,
            failure: None,
            requests: Vec::new(),
        }
    }
}

fn unix_nanos() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}

/// Go's `time.Time{}.UnixNano()`, which `/debug` prints for a producer never tombstoned.
const ZERO_TIME_UNIX_NANO: i64 = -6_795_364_578_871_345_152;

impl LookupState {
    fn is_tombstoned(&self, e: &Entry) -> bool {
        e.tombstoned_at
            .is_some_and(|(at, _)| at.elapsed() < self.tombstone_lifetime)
    }

    /// `FindRegistrations`.
    fn find_registrations(&self, category: &str, key: &str, subkey: &str) -> Vec<&Registration> {
        self.registrations
            .keys()
            .filter(|r| r.is_match(category, key, subkey))
            .collect()
    }

    /// `FindProducers` (each producer once), then `FilterByActive` with the tombstone
    /// lifetime (`None` keeps tombstoned ones).
    fn find_producers(
        &self,
        category: &str,
        key: &str,
        subkey: &str,
        drop_tombstoned: bool,
    ) -> Vec<ProducerId> {
        let mut out: Vec<ProducerId> = Vec::new();
        for (r, producers) in &self.registrations {
            if !r.is_match(category, key, subkey) {
                continue;
            }
            for (id, e) in producers {
                if out.contains(id) || (drop_tombstoned && self.is_tombstoned(e)) {
                    continue;
                }
                out.push(*id);
            }
        }
        out
    }

    /// `AddProducer`: adds the key if needed; an existing entry (and its tombstone) stays.
    fn add_producer(&mut self, r: Registration, id: ProducerId) {
        self.registrations
            .entry(r)
            .or_default()
            .entry(id)
            .or_default();
    }

    /// `RemoveProducer`: the key stays; returns how many producers are left.
    fn remove_producer(&mut self, r: &Registration, id: ProducerId) -> usize {
        self.registrations.get_mut(r).map_or(0, |p| {
            p.remove(&id);
            p.len()
        })
    }

    fn touch(&mut self, id: ProducerId) {
        if let Some(p) = self.peers.get_mut(&id) {
            p.last_update = unix_nanos();
        }
    }
}

/// The registration database, shared with the nsqd that register in-process.
#[derive(Debug, Default)]
pub(crate) struct LookupShared {
    state: Mutex<LookupState>,
}

/// nsqlookupd's routes (pprof left out).
const ROUTES: &Routes = &[
    ("GET", "/ping"),
    ("GET", "/info"),
    ("GET", "/debug"),
    ("GET", "/lookup"),
    ("GET", "/topics"),
    ("GET", "/channels"),
    ("GET", "/nodes"),
    ("POST", "/topic/create"),
    ("POST", "/topic/delete"),
    ("POST", "/channel/create"),
    ("POST", "/channel/delete"),
    ("POST", "/topic/tombstone"),
];

impl LookupShared {
    fn lock(&self) -> MutexGuard<'_, LookupState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// An nsqd connected and identified: the peer, and its `client::` registration.
    pub(crate) fn add_producer(&self, info: PeerInfo) -> ProducerId {
        let mut st = self.lock();
        st.next_id += 1;
        let id = ProducerId(st.next_id);
        st.peers.insert(
            id,
            Peer {
                info,
                last_update: unix_nanos(),
            },
        );
        st.add_producer(Registration::new("client", "", ""), id);
        id
    }

    /// An nsqd disconnected: it leaves every registration (the keys stay, as in nsqlookupd).
    pub(crate) fn remove_producer(&self, id: ProducerId) -> bool {
        let mut st = self.lock();
        if st.peers.remove(&id).is_none() {
            return false;
        }
        for producers in st.registrations.values_mut() {
            producers.remove(&id);
        }
        true
    }

    /// `REGISTER topic [channel]`.
    pub(crate) fn register(&self, id: ProducerId, topic: &str, channel: Option<&str>) {
        let mut st = self.lock();
        if !st.peers.contains_key(&id) {
            return;
        }
        st.touch(id);
        if let Some(c) = channel.filter(|c| !c.is_empty()) {
            st.add_producer(Registration::new("channel", topic, c), id);
        }
        st.add_producer(Registration::new("topic", topic, ""), id);
    }

    /// `UNREGISTER topic [channel]`: a topic unregistration also leaves the topic's channels;
    /// an ephemeral key goes with its last producer.
    pub(crate) fn unregister(&self, id: ProducerId, topic: &str, channel: Option<&str>) {
        let mut st = self.lock();
        if !st.peers.contains_key(&id) {
            return;
        }
        st.touch(id);
        if let Some(c) = channel.filter(|c| !c.is_empty()) {
            let key = Registration::new("channel", topic, c);
            if st.remove_producer(&key, id) == 0 && c.ends_with("#ephemeral") {
                st.registrations.remove(&key);
            }
        } else {
            let channels: Vec<Registration> = st
                .find_registrations("channel", topic, "*")
                .into_iter()
                .cloned()
                .collect();
            for r in &channels {
                st.remove_producer(r, id);
            }
            let key = Registration::new("topic", topic, "");
            if st.remove_producer(&key, id) == 0 && topic.ends_with("#ephemeral") {
                st.registrations.remove(&key);
            }
        }
    }

    /// `/lookup`'s channels and (active) producers; `None` when the topic is not registered.
    fn lookup(&self, topic: &str) -> Option<(Vec<String>, Vec<PeerInfo>)> {
        let st = self.lock();
        if st.find_registrations("topic", topic, "").is_empty() {
            return None;
        }
        let channels = st
            .find_registrations("channel", topic, "*")
            .iter()
            .map(|r| r.subkey.clone())
            .collect();
        let producers = st
            .find_producers("topic", topic, "", true)
            .iter()
            .filter_map(|id| st.peers.get(id).map(|p| p.info.clone()))
            .collect();
        Some((channels, producers))
    }

    fn handle(&self, req: &mut Request) -> Response {
        {
            let mut st = self.lock();
            let mut line = req.path.clone();
            let q = req.lenient_query();
            if !q.pairs().is_empty() {
                let q: Vec<String> = q.pairs().iter().map(|(k, v)| format!("{k}={v}")).collect();
                line.push('?');
                line.push_str(&q.join("&"));
            }
            st.requests.push(line);
            if let Some(status) = st.failure {
                return Response::v1_err(status, "INJECTED_FAILURE");
            }
        }
        let path = match route(ROUTES, req) {
            Ok(i) => ROUTES[i].1,
            Err(resp) => return resp,
        };
        match path {
            "/ping" => return Response::plain(200, "OK"),
            "/info" => return Response::v1_json(200, &json!({ "version": "1.3.0" })),
            "/debug" => return self.debug(),
            "/nodes" => return self.nodes(),
            "/topics" => {
                let st = self.lock();
                let topics: Vec<&str> = st
                    .find_registrations("topic", "*", "")
                    .iter()
                    .map(|r| r.key.as_str())
                    .collect();
                return Response::v1_json(200, &json!({ "topics": topics }));
            }
            _ => {}
        }
        // Every other handler starts with NewReqParams.
        let Ok(q) = req.query() else {
            return Response::v1_err(400, "INVALID_REQUEST");
        };
        let topic = q.get("topic");
        // GetTopicChannelArgs.
        let topic_channel = || -> Result<(&str, &str), Response> {
            let t = topic.ok_or_else(|| Response::v1_err(400, "MISSING_ARG_TOPIC"))?;
            if !is_valid_name(t.as_bytes()) {
                return Err(Response::v1_err(400, "INVALID_ARG_TOPIC"));
            }
            let c = q
                .get("channel")
                .ok_or_else(|| Response::v1_err(400, "MISSING_ARG_CHANNEL"))?;
            if !is_valid_name(c.as_bytes()) {
                return Err(Response::v1_err(400, "INVALID_ARG_CHANNEL"));
            }
            Ok((t, c))
        };
        let missing_topic = || Response::v1_err(400, "MISSING_ARG_TOPIC");
        match path {
            "/lookup" => {
                let Some(topic) = topic else {
                    return missing_topic();
                };
                match self.lookup(topic) {
                    Some((channels, producers)) => Response::v1_json(
                        200,
                        &LookupReply {
                            channels: channels.iter().map(String::as_str).collect(),
                            producers: producers.iter().collect(),
                        },
                    ),
                    None => Response::v1_err(404, "TOPIC_NOT_FOUND"),
                }
            }
            "/channels" => {
                let Some(topic) = topic else {
                    return missing_topic();
                };
                let st = self.lock();
                let channels: Vec<&str> = st
                    .find_registrations("channel", topic, "*")
                    .iter()
                    .map(|r| r.subkey.as_str())
                    .collect();
                Response::v1_json(200, &json!({ "channels": channels }))
            }
            "/topic/create" => {
                let Some(topic) = topic else {
                    return missing_topic();
                };
                if !is_valid_name(topic.as_bytes()) {
                    return Response::v1_err(400, "INVALID_ARG_TOPIC");
                }
                let mut st = self.lock();
                st.registrations
                    .entry(Registration::new("topic", topic, ""))
                    .or_default();
                Response::v1_empty()
            }
            "/topic/delete" => {
                let Some(topic) = topic else {
                    return missing_topic();
                };
                let mut st = self.lock();
                st.registrations.retain(|r, _| {
                    !r.is_match("channel", topic, "*") && !r.is_match("topic", topic, "")
                });
                Response::v1_empty()
            }
            "/topic/tombstone" => {
                let Some(topic) = topic else {
                    return missing_topic();
                };
                let Some(node) = q.get("node") else {
                    return Response::v1_err(400, "MISSING_ARG_NODE");
                };
                let mut st = self.lock();
                let ids = st.find_producers("topic", topic, "", false);
                let now = (Instant::now(), unix_nanos());
                for id in ids {
                    let this = st
                        .peers
                        .get(&id)
                        .map(|p| format!("{}:{}", p.info.broadcast_address, p.info.http_port));
                    if this.as_deref() != Some(node) {
                        continue;
                    }
                    if let Some(e) = st
                        .registrations
                        .get_mut(&Registration::new("topic", topic, ""))
                        .and_then(|p| p.get_mut(&id))
                    {
                        e.tombstoned_at = Some(now);
                    }
                }
                Response::v1_empty()
            }
            "/channel/create" => {
                let (t, c) = match topic_channel() {
                    Ok(tc) => tc,
                    Err(r) => return r,
                };
                let mut st = self.lock();
                st.registrations
                    .entry(Registration::new("channel", t, c))
                    .or_default();
                st.registrations
                    .entry(Registration::new("topic", t, ""))
                    .or_default();
                Response::v1_empty()
            }
            _ => {
                // /channel/delete
                let (t, c) = match topic_channel() {
                    Ok(tc) => tc,
                    Err(r) => return r,
                };
                let mut st = self.lock();
                if st
                    .registrations
                    .remove(&Registration::new("channel", t, c))
                    .is_none()
                {
                    return Response::v1_err(404, "CHANNEL_NOT_FOUND");
                }
                Response::v1_empty()
            }
        }
    }

    fn nodes(&self) -> Response {
        let st = self.lock();
        // Tombstoned producers stay listed here, with their tombstones.
        let ids = st.find_producers("client", "", "", false);
        let producers: Vec<Node<'_>> = ids
            .iter()
            .filter_map(|id| {
                let peer = st.peers.get(id)?;
                let topics: Vec<&Registration> = st
                    .registrations
                    .iter()
                    .filter(|(r, p)| r.category == "topic" && p.contains_key(id))
                    .map(|(r, _)| r)
                    .collect();
                let tombstones = topics
                    .iter()
                    .map(|r| {
                        st.registrations
                            .get(*r)
                            .and_then(|p| p.get(id))
                            .is_some_and(|e| st.is_tombstoned(e))
                    })
                    .collect();
                Some(Node {
                    info: &peer.info,
                    tombstones,
                    topics: topics.iter().map(|r| r.key.as_str()).collect(),
                })
            })
            .collect();
        // Not through json!, which would sort the nodes' fields.
        #[derive(Serialize)]
        struct Nodes<'a> {
            producers: Vec<Node<'a>>,
        }
        Response::v1_json(200, &Nodes { producers })
    }

    /// `/debug`: every registration with producers, as `category:key:subkey`, each producer
    /// as a Go map (keys sorted).
    fn debug(&self) -> Response {
        let st = self.lock();
        let mut data = serde_json::Map::new();
        for (r, producers) in &st.registrations {
            let list: Vec<Value> = producers
                .iter()
                .filter_map(|(id, e)| {
                    let p = st.peers.get(id)?;
                    Some(json!({
                        "broadcast_address": p.info.broadcast_address,
                        "hostname": p.info.hostname,
                        "http_port": p.info.http_port,
                        "id": p.info.remote_address,
                        "last_update": p.last_update,
                        "tcp_port": p.info.tcp_port,
                        "tombstoned": e.tombstoned_at.is_some(),
                        "tombstoned_at": e.tombstoned_at.map_or(ZERO_TIME_UNIX_NANO, |(_, ns)| ns),
                        "version": p.info.version,
                    }))
                })
                .collect();
            if !list.is_empty() {
                data.insert(
                    format!("{}:{}:{}", r.category, r.key, r.subkey),
                    Value::Array(list),
                );
            }
        }
        Response::v1_json(200, &Value::Object(data))
    }
}

/// An nsqlookupd v1.3.0 stand-in serving HTTP on `127.0.0.1` (ephemeral port).
///
/// nsqd stand-ins started with [`crate::NsqdBuilder::lookupd`] register themselves and their
/// topics/channels in-process (as if over nsqlookupd's TCP protocol); tests can also add and
/// remove producers by hand. The registration database behaves like nsqlookupd's: a topic or
/// channel stays listed (with no producers) after its last producer unregistered or went away,
/// until `/topic/delete` or `/channel/delete` (ephemeral ones go with their last producer);
/// `/topic/tombstone` hides a producer of a topic from `/lookup` for the tombstone lifetime
/// (45 s, see [`Lookupd::set_tombstone_lifetime`]). Dropping it stops the server and joins
/// its threads.
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
            Arc::new(move |req: &mut Request| handler_shared.handle(req)),
        )?;
        Ok(Self { shared, server })
    }

    /// The HTTP address (`127.0.0.1:port`).
    pub fn http_address(&self) -> SocketAddr {
        self.server.addr()
    }

    /// Adds a producer with no topics yet (an nsqd that connected and identified).
    pub fn add_producer(&self, info: PeerInfo) -> ProducerId {
        self.shared.add_producer(info)
    }

    /// Removes a producer from every registration (an nsqd that disconnected; its topics and
    /// channels stay listed, with no producers); false if it was not registered.
    pub fn remove_producer(&self, id: ProducerId) -> bool {
        self.shared.remove_producer(id)
    }

    /// Registers a topic (and optionally a channel) for a producer (`REGISTER`).
    pub fn register(&self, id: ProducerId, topic: &str, channel: Option<&str>) {
        self.shared.register(id, topic, channel);
    }

    /// Unregisters a channel, or a whole topic when `channel` is `None` (`UNREGISTER`).
    pub fn unregister(&self, id: ProducerId, topic: &str, channel: Option<&str>) {
        self.shared.unregister(id, topic, channel);
    }

    /// Producers currently listed for `topic` by `/lookup` (tombstoned ones left out).
    pub fn producers(&self, topic: &str) -> Vec<PeerInfo> {
        self.shared
            .lookup(topic)
            .map(|(_, p)| p)
            .unwrap_or_default()
    }

    /// How long `/topic/tombstone` hides a producer (nsqlookupd's `--tombstone-lifetime`,
    /// default 45 s). Applies to tombstones already set, too.
    pub fn set_tombstone_lifetime(&self, lifetime: Duration) {
        self.shared.lock().tombstone_lifetime = lifetime;
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
