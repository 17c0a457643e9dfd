//! [`Cluster`]: nsqadmin's operations over a set of nsqlookupd (or of nsqd), on every
//! runtime: list topics, channels, nodes and a topic's producers; one topic's or channel's
//! stats over every nsqd that has it, per nsqd and summed; create, delete, pause, unpause and
//! empty everywhere it applies. Every node is asked at once; a node that fails is reported
//! ([`ClusterReport::failures`]), never hidden.

use super::runtime::Calls;
use super::{Error, HttpClient, HttpConfig, NodeFailure};
use nsq_proto::http::nsqd::{ChannelStats, E2eLatency, StatsQuery, TopicStats};
use nsq_proto::http::{Call, lookupd, nsqd};
use nsq_proto::{Channel, LookupProducer, Topic};
use std::collections::BTreeMap;
use std::fmt;

/// What a cluster operation gathered, and every node that failed on the way.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ClusterReport<T> {
    /// What the nodes that answered gave.
    pub value: T,
    /// Each node that failed, and why.
    pub failures: Vec<NodeFailure>,
}

impl<T> ClusterReport<T> {
    /// Whether every node answered.
    pub fn is_complete(&self) -> bool {
        self.failures.is_empty()
    }

    /// The value if every node answered, else [`Error::Cluster`] with the failures.
    pub fn into_result(self) -> Result<T, Error> {
        if self.failures.is_empty() {
            Ok(self.value)
        } else {
            Err(Error::Cluster(self.failures))
        }
    }
}

/// One topic's stats over the cluster ([`Cluster::topic_stats`]).
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct TopicStatsReport {
    /// Summed over the nsqd: depths and counts added, paused if any is, channels merged by
    /// name; each latency percentile the highest of the nsqd's.
    pub total: TopicStats,
    /// Each nsqd's own, by HTTP address.
    pub nodes: Vec<(String, TopicStats)>,
}

/// One channel's stats over the cluster ([`Cluster::channel_stats`]).
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct ChannelStatsReport {
    /// Summed over the nsqd (see [`TopicStatsReport::total`]).
    pub total: ChannelStats,
    /// Each nsqd's own, by HTTP address.
    pub nodes: Vec<(String, ChannelStats)>,
}

/// nsqadmin's operations over a cluster: its nsqlookupd ([`new`](Self::new)), or, without
/// any, a fixed set of nsqd ([`from_nsqds`](Self::from_nsqds)). Each operation returns a
/// [`ClusterReport`]: what the nodes that answered say, and the failures of the others. Its
/// calls resolve once every node has answered or failed. Cheap to clone.
#[derive(Clone)]
pub struct Cluster {
    lookupds: Vec<HttpClient>,
    nsqds: Vec<HttpClient>,
    config: HttpConfig,
    /// Whether the calls of the clients it makes are awaited or block.
    calls: Calls,
}

impl fmt::Debug for Cluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let addrs = |c: &[HttpClient]| c.iter().map(|c| c.addr().to_owned()).collect::<Vec<_>>();
        f.debug_struct("Cluster")
            .field("lookupds", &addrs(&self.lookupds))
            .field("nsqds", &addrs(&self.nsqds))
            .finish_non_exhaustive()
    }
}

impl Cluster {
    /// The cluster its nsqlookupd know, at their HTTP addresses (`host:port`).
    pub fn new<I, S>(lookupd_http_addresses: I) -> Result<Cluster, Error>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Cluster::with_config(lookupd_http_addresses, HttpConfig::default())
    }

    /// [`new`](Self::new), with `config` ([`HttpConfig`]) for every call (to lookupd and
    /// nsqd).
    pub fn with_config<I, S>(
        lookupd_http_addresses: I,
        config: HttpConfig,
    ) -> Result<Cluster, Error>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Cluster::of_lookupds(lookupd_http_addresses, config, Calls::Async)
    }

    /// A cluster without nsqlookupd: these nsqd, at their HTTP addresses, with `config`
    /// ([`HttpConfig`]) for every call.
    pub fn from_nsqds<I, S>(nsqd_http_addresses: I, config: HttpConfig) -> Result<Cluster, Error>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Cluster::of_nsqds(nsqd_http_addresses, config, Calls::Async)
    }

    /// [`with_config`](Self::with_config) for clients whose calls are `calls`.
    pub(crate) fn of_lookupds<I, S>(
        lookupd_http_addresses: I,
        config: HttpConfig,
        calls: Calls,
    ) -> Result<Cluster, Error>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let lookupds = clients(lookupd_http_addresses, &config, calls)?;
        if lookupds.is_empty() {
            return Err(no_address("nsqlookupd"));
        }
        Ok(Cluster {
            lookupds,
            nsqds: Vec::new(),
            config,
            calls,
        })
    }

    /// [`from_nsqds`](Self::from_nsqds) for clients whose calls are `calls`.
    pub(crate) fn of_nsqds<I, S>(
        nsqd_http_addresses: I,
        config: HttpConfig,
        calls: Calls,
    ) -> Result<Cluster, Error>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let nsqds = clients(nsqd_http_addresses, &config, calls)?;
        if nsqds.is_empty() {
            return Err(no_address("nsqd"));
        }
        Ok(Cluster {
            lookupds: Vec::new(),
            nsqds,
            config,
            calls,
        })
    }

    fn client(&self, addr: &str) -> Result<HttpClient, Error> {
        HttpClient::for_calls(addr, self.config.clone(), self.calls)
    }

    /// Every topic: the union of each nsqlookupd's `/topics` (or of each nsqd's stats).
    pub async fn topics(&self) -> ClusterReport<Vec<String>> {
        if self.lookupds.is_empty() {
            let q = StatsQuery::new().include_clients(false).include_mem(false);
            let (answers, failures) = gather(&self.nsqds, || nsqd::stats(&q)).await;
            let names = answers
                .into_iter()
                .flat_map(|(_, s)| s.topics.into_iter().map(|t| t.topic_name));
            return report(sorted_union(names), failures);
        }
        let (answers, failures) = gather(&self.lookupds, lookupd::topics).await;
        report(
            sorted_union(answers.into_iter().flat_map(|(_, t)| t)),
            failures,
        )
    }

    /// A topic's channels: the union of each nsqlookupd's `/channels` (or of each nsqd's).
    pub async fn channels(&self, topic: &Topic) -> ClusterReport<Vec<String>> {
        if self.lookupds.is_empty() {
            let q = StatsQuery::new()
                .topic(topic)
                .include_clients(false)
                .include_mem(false);
            let (answers, failures) = gather(&self.nsqds, || nsqd::stats(&q)).await;
            let names = answers.into_iter().flat_map(|(_, s)| {
                s.topics
                    .into_iter()
                    .flat_map(|t| t.channels.into_iter().map(|c| c.channel_name))
            });
            return report(sorted_union(names), failures);
        }
        let (answers, failures) = gather(&self.lookupds, || lookupd::channels(topic)).await;
        report(
            sorted_union(answers.into_iter().flat_map(|(_, c)| c)),
            failures,
        )
    }

    /// Every nsqd registered with an nsqlookupd, once each (by HTTP address), with its
    /// topics and tombstones as the first lookupd to list it says.
    pub async fn nodes(&self) -> ClusterReport<Vec<lookupd::Node>> {
        if self.lookupds.is_empty() {
            let (answers, failures) = gather(&self.nsqds, nsqd::info).await;
            let nodes = answers
                .into_iter()
                .map(|(addr, info)| {
                    let mut node = lookupd::Node::default();
                    node.broadcast_address = info.broadcast_address;
                    node.hostname = info.hostname;
                    node.remote_address = addr;
                    node.tcp_port = u16::try_from(info.tcp_port).unwrap_or(0);
                    node.http_port = u16::try_from(info.http_port).unwrap_or(0);
                    node.version = info.version;
                    node
                })
                .collect();
            return report(nodes, failures);
        }
        let (answers, failures) = gather(&self.lookupds, lookupd::nodes).await;
        let mut nodes: BTreeMap<String, lookupd::Node> = BTreeMap::new();
        for node in answers.into_iter().flat_map(|(_, n)| n) {
            nodes.entry(node.http_address()).or_insert(node);
        }
        report(nodes.into_values().collect(), failures)
    }

    /// The nsqd that carry `topic`, once each: from every nsqlookupd's `/lookup` (or the
    /// nsqd of [`from_nsqds`](Self::from_nsqds) whose stats list it).
    pub async fn producers(&self, topic: &Topic) -> ClusterReport<Vec<LookupProducer>> {
        if self.lookupds.is_empty() {
            let q = StatsQuery::new()
                .topic(topic)
                .include_clients(false)
                .include_mem(false);
            let (answers, mut failures) = gather(&self.nsqds, || nsqd::stats(&q)).await;
            let having: Vec<&HttpClient> = self
                .nsqds
                .iter()
                .filter(|c| {
                    answers
                        .iter()
                        .any(|(a, s)| a == c.addr() && !s.topics.is_empty())
                })
                .collect();
            let (infos, more) = gather(having, nsqd::info).await;
            failures.extend(more);
            let producers = infos
                .into_iter()
                .map(|(_, info)| {
                    let mut p = LookupProducer::default();
                    p.broadcast_address = info.broadcast_address;
                    p.hostname = info.hostname;
                    p.tcp_port = u16::try_from(info.tcp_port).unwrap_or(0);
                    p.http_port = u16::try_from(info.http_port).unwrap_or(0);
                    p.version = info.version;
                    p
                })
                .collect();
            return report(producers, failures);
        }
        let (answers, mut failures) = gather(&self.lookupds, || lookupd::lookup(topic)).await;
        // A lookupd that does not know the topic has no producer of it: not a failure.
        failures.retain(|f| {
            !f.error
                .api_error()
                .is_some_and(nsq_proto::http::ApiError::is_not_found)
        });
        let mut producers: BTreeMap<String, LookupProducer> = BTreeMap::new();
        for p in answers.into_iter().flat_map(|(_, r)| r.producers) {
            producers.entry(http_address(&p)).or_insert(p);
        }
        report(producers.into_values().collect(), failures)
    }

    /// The HTTP clients of the nsqd that carry `topic`, and the failures finding them.
    async fn producer_clients(&self, topic: &Topic) -> (Vec<HttpClient>, Vec<NodeFailure>) {
        let found = self.producers(topic).await;
        let mut failures = found.failures;
        let clients = self.clients_of(&found.value, &mut failures);
        (clients, failures)
    }

    /// The HTTP clients of `producers`; an address that cannot be one is a failure.
    fn clients_of(
        &self,
        producers: &[LookupProducer],
        failures: &mut Vec<NodeFailure>,
    ) -> Vec<HttpClient> {
        let mut clients = Vec::new();
        for p in producers {
            let addr = http_address(p);
            match self.client(&addr) {
                Ok(c) => clients.push(c),
                Err(error) => failures.push(NodeFailure { node: addr, error }),
            }
        }
        clients
    }

    /// `topic`'s stats on every nsqd that carries it, and their sum.
    pub async fn topic_stats(&self, topic: &Topic) -> ClusterReport<TopicStatsReport> {
        let (producers, mut failures) = self.producer_clients(topic).await;
        let q = StatsQuery::new().topic(topic).include_mem(false);
        let (answers, more) = gather(&producers, || nsqd::stats(&q)).await;
        failures.extend(more);
        let mut out = TopicStatsReport::default();
        topic.as_str().clone_into(&mut out.total.topic_name);
        for (addr, stats) in answers {
            for t in stats
                .topics
                .into_iter()
                .filter(|t| t.topic_name == topic.as_str())
            {
                add_topic(&mut out.total, &t);
                out.nodes.push((addr.clone(), t));
            }
        }
        report(out, failures)
    }

    /// `channel`'s stats on every nsqd that carries `topic`, and their sum.
    pub async fn channel_stats(
        &self,
        topic: &Topic,
        channel: &Channel,
    ) -> ClusterReport<ChannelStatsReport> {
        let (producers, mut failures) = self.producer_clients(topic).await;
        let q = StatsQuery::new()
            .topic(topic)
            .channel(channel)
            .include_mem(false);
        let (answers, more) = gather(&producers, || nsqd::stats(&q)).await;
        failures.extend(more);
        let mut out = ChannelStatsReport::default();
        channel.as_str().clone_into(&mut out.total.channel_name);
        for (addr, stats) in answers {
            let channels = stats
                .topics
                .into_iter()
                .filter(|t| t.topic_name == topic.as_str())
                .flat_map(|t| t.channels)
                .filter(|c| c.channel_name == channel.as_str());
            for c in channels {
                add_channel(&mut out.total, &c);
                out.nodes.push((addr.clone(), c));
            }
        }
        report(out, failures)
    }

    /// Creates `topic`: at every nsqlookupd, as nsqadmin does (or on every nsqd of
    /// [`from_nsqds`](Self::from_nsqds)).
    pub async fn create_topic(&self, topic: &Topic) -> ClusterReport<()> {
        if self.lookupds.is_empty() {
            return done(gather(&self.nsqds, || nsqd::create_topic(topic)).await);
        }
        done(gather(&self.lookupds, || lookupd::create_topic(topic)).await)
    }

    /// Creates `channel` of `topic`: at every nsqlookupd (topic and channel) and on every
    /// nsqd that carries the topic, as nsqadmin does.
    pub async fn create_channel(&self, topic: &Topic, channel: &Channel) -> ClusterReport<()> {
        if self.lookupds.is_empty() {
            let (_, mut failures) = gather(&self.nsqds, || nsqd::create_topic(topic)).await;
            failures.extend(
                gather(&self.nsqds, || nsqd::create_channel(topic, channel))
                    .await
                    .1,
            );
            return report((), failures);
        }
        let mut failures = gather(&self.lookupds, || lookupd::create_topic(topic))
            .await
            .1;
        failures.extend(
            gather(&self.lookupds, || lookupd::create_channel(topic, channel))
                .await
                .1,
        );
        let (producers, more) = self.producer_clients(topic).await;
        failures.extend(more);
        failures.extend(
            gather(&producers, || nsqd::create_channel(topic, channel))
                .await
                .1,
        );
        report((), failures)
    }

    /// Deletes `topic` everywhere, in the order that keeps it from coming back: each nsqd
    /// that carries it is tombstoned at every nsqlookupd (consumers stop finding it), the
    /// topic is deleted on each of those nsqd, then at every nsqlookupd.
    pub async fn delete_topic(&self, topic: &Topic) -> ClusterReport<()> {
        if self.lookupds.is_empty() {
            let (producers, mut failures) = self.producer_clients(topic).await;
            failures.extend(gather(&producers, || nsqd::delete_topic(topic)).await.1);
            return report((), failures);
        }
        let found = self.producers(topic).await;
        let mut failures = found.failures;
        for p in &found.value {
            let node = http_address(p);
            failures.extend(
                gather(&self.lookupds, || lookupd::tombstone_topic(topic, &node))
                    .await
                    .1,
            );
        }
        let producers = self.clients_of(&found.value, &mut failures);
        failures.extend(gather(&producers, || nsqd::delete_topic(topic)).await.1);
        failures.extend(
            gather(&self.lookupds, || lookupd::delete_topic(topic))
                .await
                .1,
        );
        report((), failures)
    }

    /// Deletes `channel` of `topic`: at every nsqlookupd and on every nsqd that carries the
    /// topic, as nsqadmin does.
    pub async fn delete_channel(&self, topic: &Topic, channel: &Channel) -> ClusterReport<()> {
        let (producers, mut failures) = self.producer_clients(topic).await;
        failures.extend(
            gather(&self.lookupds, || lookupd::delete_channel(topic, channel))
                .await
                .1,
        );
        failures.extend(
            gather(&producers, || nsqd::delete_channel(topic, channel))
                .await
                .1,
        );
        report((), failures)
    }

    async fn on_producers<F>(&self, topic: &Topic, make: F) -> ClusterReport<()>
    where
        F: Fn() -> Call<()>,
    {
        let (producers, mut failures) = self.producer_clients(topic).await;
        failures.extend(gather(&producers, make).await.1);
        report((), failures)
    }

    /// Pauses `topic` on every nsqd that carries it.
    pub async fn pause_topic(&self, topic: &Topic) -> ClusterReport<()> {
        self.on_producers(topic, || nsqd::pause_topic(topic)).await
    }

    /// Unpauses `topic` on every nsqd that carries it.
    pub async fn unpause_topic(&self, topic: &Topic) -> ClusterReport<()> {
        self.on_producers(topic, || nsqd::unpause_topic(topic))
            .await
    }

    /// Empties `topic` on every nsqd that carries it.
    pub async fn empty_topic(&self, topic: &Topic) -> ClusterReport<()> {
        self.on_producers(topic, || nsqd::empty_topic(topic)).await
    }

    /// Pauses `channel` on every nsqd that carries `topic`: it delivers nothing until
    /// unpaused.
    pub async fn pause_channel(&self, topic: &Topic, channel: &Channel) -> ClusterReport<()> {
        self.on_producers(topic, || nsqd::pause_channel(topic, channel))
            .await
    }

    /// Unpauses `channel` on every nsqd that carries `topic`.
    pub async fn unpause_channel(&self, topic: &Topic, channel: &Channel) -> ClusterReport<()> {
        self.on_producers(topic, || nsqd::unpause_channel(topic, channel))
            .await
    }

    /// Empties `channel` on every nsqd that carries `topic`.
    pub async fn empty_channel(&self, topic: &Topic, channel: &Channel) -> ClusterReport<()> {
        self.on_producers(topic, || nsqd::empty_channel(topic, channel))
            .await
    }
}

fn clients<I, S>(addrs: I, config: &HttpConfig, calls: Calls) -> Result<Vec<HttpClient>, Error>
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    addrs
        .into_iter()
        .map(|a| HttpClient::for_calls(a.as_ref(), config.clone(), calls))
        .collect()
}

fn no_address(what: &str) -> Error {
    Error::InvalidInput(super::InputError::NsqdAddress(format!(
        "a cluster needs at least one {what} HTTP address"
    )))
}

/// A producer's HTTP address, `broadcast_address:http_port`: where its API answers, and the
/// `node` nsqlookupd's tombstone names it by.
fn http_address(p: &LookupProducer) -> String {
    nsq_proto::join_host_port(&p.broadcast_address, p.http_port)
}

fn report<T>(value: T, failures: Vec<NodeFailure>) -> ClusterReport<T> {
    ClusterReport { value, failures }
}

fn done<T>((_, failures): (Vec<(String, T)>, Vec<NodeFailure>)) -> ClusterReport<()> {
    report((), failures)
}

fn sorted_union(names: impl Iterator<Item = String>) -> Vec<String> {
    let mut names: Vec<String> = names.collect();
    names.sort();
    names.dedup();
    names
}

/// At most this many calls of one cluster operation are under way at once (on the poller
/// runtimes each is a short thread of its own).
const CALLS_AT_ONCE: usize = 32;

/// Makes `make()` on every client, [`CALLS_AT_ONCE`] at a time; the answers by address, and
/// the failures.
async fn gather<'a, T, F>(
    clients: impl IntoIterator<Item = &'a HttpClient>,
    make: F,
) -> (Vec<(String, T)>, Vec<NodeFailure>)
where
    T: Send + 'static,
    F: Fn() -> Call<T>,
{
    let mut clients = clients.into_iter();
    let mut under_way = std::collections::VecDeque::new();
    let mut answers = Vec::new();
    let mut failures = Vec::new();
    loop {
        while under_way.len() < CALLS_AT_ONCE {
            let Some(c) = clients.next() else {
                break;
            };
            let node = c.addr().to_owned();
            match c.start(make()) {
                Ok(pending) => under_way.push_back((node, pending)),
                Err(error) => failures.push(NodeFailure { node, error }),
            }
        }
        let Some((node, pending)) = under_way.pop_front() else {
            break;
        };
        match pending.await {
            Ok(v) => answers.push((node, v)),
            Err(error) => failures.push(NodeFailure { node, error }),
        }
    }
    (answers, failures)
}

fn add_latency(total: &mut E2eLatency, one: &E2eLatency) {
    total.count += one.count;
    for p in &one.percentiles {
        match total
            .percentiles
            .iter_mut()
            .find(|t| (t.quantile - p.quantile).abs() < f64::EPSILON)
        {
            Some(t) => t.value = t.value.max(p.value),
            None => total.percentiles.push(*p),
        }
    }
}

fn add_channel(total: &mut ChannelStats, one: &ChannelStats) {
    total.depth += one.depth;
    total.backend_depth += one.backend_depth;
    total.in_flight_count += one.in_flight_count;
    total.deferred_count += one.deferred_count;
    total.message_count += one.message_count;
    total.requeue_count += one.requeue_count;
    total.timeout_count += one.timeout_count;
    total.client_count += one.client_count;
    total.clients.extend(one.clients.iter().cloned());
    total.paused |= one.paused;
    add_latency(
        &mut total.e2e_processing_latency,
        &one.e2e_processing_latency,
    );
}

fn add_topic(total: &mut TopicStats, one: &TopicStats) {
    total.depth += one.depth;
    total.backend_depth += one.backend_depth;
    total.message_count += one.message_count;
    total.message_bytes += one.message_bytes;
    total.paused |= one.paused;
    add_latency(
        &mut total.e2e_processing_latency,
        &one.e2e_processing_latency,
    );
    for c in &one.channels {
        if let Some(t) = total
            .channels
            .iter_mut()
            .find(|t| t.channel_name == c.channel_name)
        {
            add_channel(t, c);
        } else {
            let mut t = ChannelStats::default();
            t.channel_name.clone_from(&c.channel_name);
            add_channel(&mut t, c);
            total.channels.push(t);
        }
    }
    total
        .channels
        .sort_by(|a, b| a.channel_name.cmp(&b.channel_name));
}
