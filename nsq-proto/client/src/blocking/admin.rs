//! The blocking [`HttpClient`] and [`Cluster`].

use super::block_on;
use crate::runtime::Calls;
use crate::{ChannelStatsReport, ClusterReport, Error, HttpConfig, TopicStatsReport};
use nsq_proto::http::{Call, lookupd};
use nsq_proto::{Channel, LookupProducer, Topic};

/// A client of one nsqd's or nsqlookupd's HTTP address (`host:port`): make the typed calls of
/// [`nsq_proto::http::nsqd`] and [`nsq_proto::http::lookupd`] with [`call`](Self::call). Each
/// call makes one exchange on a connection of its own. Cheap to clone.
#[derive(Debug, Clone)]
pub struct HttpClient(crate::HttpClient);

impl HttpClient {
    /// A client of `addr` (`host:port`, or `http://host:port` / `https://host:port`; an
    /// `https://` address without TLS settings uses the web's root certificates).
    pub fn new(addr: &str) -> Result<HttpClient, Error> {
        HttpClient::with_config(addr, HttpConfig::default())
    }

    /// A client of `addr` (as [`new`](Self::new)) with `config` ([`HttpConfig`]: TLS,
    /// headers, timeouts).
    pub fn with_config(addr: &str, config: HttpConfig) -> Result<HttpClient, Error> {
        crate::HttpClient::for_calls(addr, config, Calls::Blocking).map(HttpClient)
    }

    /// The address (`host:port`).
    pub fn addr(&self) -> &str {
        self.0.addr()
    }

    /// Makes `call` (one exchange, on a short-lived thread and a connection of its own) and
    /// returns its typed reply, blocking until it is known.
    pub fn call<T: Send + 'static>(&self, call: Call<T>) -> Result<T, Error> {
        block_on(self.0.call(call))
    }
}

/// nsqadmin's operations over a cluster: its nsqlookupd ([`new`](Self::new)), or, without
/// any, a fixed set of nsqd ([`from_nsqds`](Self::from_nsqds)). Each operation returns a
/// [`ClusterReport`]: what the nodes that answered say, and the failures of the others. Each
/// call blocks until every node has answered or failed. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Cluster(crate::Cluster);

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
        crate::Cluster::of_lookupds(lookupd_http_addresses, config, Calls::Blocking).map(Cluster)
    }

    /// A cluster without nsqlookupd: these nsqd, at their HTTP addresses, with `config`
    /// ([`HttpConfig`]) for every call.
    pub fn from_nsqds<I, S>(nsqd_http_addresses: I, config: HttpConfig) -> Result<Cluster, Error>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        crate::Cluster::of_nsqds(nsqd_http_addresses, config, Calls::Blocking).map(Cluster)
    }

    /// Every topic: the union of each nsqlookupd's `/topics` (or of each nsqd's stats).
    pub fn topics(&self) -> ClusterReport<Vec<String>> {
        block_on(self.0.topics())
    }

    /// A topic's channels: the union of each nsqlookupd's `/channels` (or of each nsqd's).
    pub fn channels(&self, topic: &Topic) -> ClusterReport<Vec<String>> {
        block_on(self.0.channels(topic))
    }

    /// Every nsqd registered with an nsqlookupd, once each (by HTTP address), with its
    /// topics and tombstones as the first lookupd to list it says.
    pub fn nodes(&self) -> ClusterReport<Vec<lookupd::Node>> {
        block_on(self.0.nodes())
    }

    /// The nsqd that carry `topic`, once each: from every nsqlookupd's `/lookup` (or the nsqd
    /// of [`from_nsqds`](Self::from_nsqds) whose stats list it).
    pub fn producers(&self, topic: &Topic) -> ClusterReport<Vec<LookupProducer>> {
        block_on(self.0.producers(topic))
    }

    /// `topic`'s stats on every nsqd that carries it, and their sum ([`TopicStatsReport`]).
    pub fn topic_stats(&self, topic: &Topic) -> ClusterReport<TopicStatsReport> {
        block_on(self.0.topic_stats(topic))
    }

    /// `channel`'s stats on every nsqd that carries `topic`, and their sum
    /// ([`ChannelStatsReport`]).
    pub fn channel_stats(
        &self,
        topic: &Topic,
        channel: &Channel,
    ) -> ClusterReport<ChannelStatsReport> {
        block_on(self.0.channel_stats(topic, channel))
    }

    /// Creates `topic`: at every nsqlookupd, as nsqadmin does (or on every nsqd of
    /// [`from_nsqds`](Self::from_nsqds)).
    pub fn create_topic(&self, topic: &Topic) -> ClusterReport<()> {
        block_on(self.0.create_topic(topic))
    }

    /// Creates `channel` of `topic`: at every nsqlookupd (topic and channel) and on every
    /// nsqd that carries the topic, as nsqadmin does.
    pub fn create_channel(&self, topic: &Topic, channel: &Channel) -> ClusterReport<()> {
        block_on(self.0.create_channel(topic, channel))
    }

    /// Deletes `topic` everywhere, in the order that keeps it from coming back: each nsqd
    /// that carries it is tombstoned at every nsqlookupd (consumers stop finding it), the
    /// topic is deleted on each of those nsqd, then at every nsqlookupd.
    pub fn delete_topic(&self, topic: &Topic) -> ClusterReport<()> {
        block_on(self.0.delete_topic(topic))
    }

    /// Deletes `channel` of `topic`: at every nsqlookupd and on every nsqd that carries the
    /// topic, as nsqadmin does.
    pub fn delete_channel(&self, topic: &Topic, channel: &Channel) -> ClusterReport<()> {
        block_on(self.0.delete_channel(topic, channel))
    }

    /// Pauses `topic` on every nsqd that carries it.
    pub fn pause_topic(&self, topic: &Topic) -> ClusterReport<()> {
        block_on(self.0.pause_topic(topic))
    }

    /// Unpauses `topic` on every nsqd that carries it.
    pub fn unpause_topic(&self, topic: &Topic) -> ClusterReport<()> {
        block_on(self.0.unpause_topic(topic))
    }

    /// Empties `topic` on every nsqd that carries it.
    pub fn empty_topic(&self, topic: &Topic) -> ClusterReport<()> {
        block_on(self.0.empty_topic(topic))
    }

    /// Pauses `channel` on every nsqd that carries `topic`: it delivers nothing until
    /// unpaused.
    pub fn pause_channel(&self, topic: &Topic, channel: &Channel) -> ClusterReport<()> {
        block_on(self.0.pause_channel(topic, channel))
    }

    /// Unpauses `channel` on every nsqd that carries `topic`.
    pub fn unpause_channel(&self, topic: &Topic, channel: &Channel) -> ClusterReport<()> {
        block_on(self.0.unpause_channel(topic, channel))
    }

    /// Empties `channel` on every nsqd that carries `topic`.
    pub fn empty_channel(&self, topic: &Topic, channel: &Channel) -> ClusterReport<()> {
        block_on(self.0.empty_channel(topic, channel))
    }
}
