//! [`super::Routing::Topology`] before the nearest nsqd has answered:
//! how long a publish waits for the IDENTIFY replies that state the nsqd's zones.
//!
//! nsqd states its zone and region in its IDENTIFY reply, so until an nsqd has answered,
//! the producer cannot know whether it is the nearest. A new producer's first publish made
//! as soon as one connection is ready would go to that one, wherever it is, while the
//! nearest was still answering (3 of 8 first publishes left the zone against three nsqd on
//! one machine). So while no ready nsqd is as near as any can be (in the producer's zone,
//! or its region when it names no zone), a publish waits for the nsqd whose first
//! connection is still under way: until each has answered, or its connection has failed,
//! or `connect_timeout` has passed since that connection began (`publish_timeout` if it is
//! shorter, so no publish fails for the wait). An nsqd that answered once is known; one
//! whose first connection failed no longer holds publishes back.

use super::Routing;
use super::producer::Producer;
use crate::connection::Connection;
use crate::deadline::later;
use std::time::Instant;

impl Producer {
    /// The nearest of the `ready` nodes by the topology their nsqd stated, with its
    /// nearness: same zone (2), same region (1), any (0); the first of the nearest.
    pub(super) fn nearest_ready(&self, ready: impl Iterator<Item = usize>) -> Option<(usize, u8)> {
        let (zone, region) = (
            self.config.connection.topology_zone.as_deref(),
            self.config.connection.topology_region.as_deref(),
        );
        let nearness = |i: usize| {
            let Some(reply) = self.nodes[i]
                .link
                .as_ref()
                .and_then(|l| l.conn.as_ref())
                .and_then(Connection::negotiated)
                .map(|n| &n.identify)
            else {
                return 0;
            };
            let same = |ours: Option<&str>, theirs: &str| ours.is_some_and(|o| o == theirs);
            if same(zone, &reply.topology_zone) {
                2
            } else {
                u8::from(same(region, &reply.topology_region))
            }
        };
        let mut best: Option<(usize, u8)> = None;
        for i in ready {
            let near = nearness(i);
            if best.is_none_or(|(_, b)| near > b) {
                best = Some((i, near));
                if near == 2 {
                    break;
                }
            }
        }
        best
    }

    /// How near an nsqd can be: 2 in the producer's own zone, 1 in its region, 0 when the
    /// producer names neither.
    pub(super) fn nearest_possible(&self) -> u8 {
        let c = &self.config.connection;
        if c.topology_zone.as_deref().is_some_and(|z| !z.is_empty()) {
            2
        } else {
            u8::from(c.topology_region.as_deref().is_some_and(|r| !r.is_empty()))
        }
    }

    /// With topology routing, while the nearest ready nsqd is `nearest` (`None`: none is
    /// ready) and a nearer one may still answer: the instant the last of those stops
    /// holding publishes back (its first connection's start plus `connect_timeout`, or
    /// `publish_timeout` if shorter).
    pub(super) fn nearer_may_answer(&self, nearest: Option<u8>) -> Option<Instant> {
        if self.config.routing != Routing::Topology
            || nearest.is_some_and(|n| n >= self.nearest_possible())
        {
            return None;
        }
        let now = self.clock?;
        // Never past a publish's own deadline: its connection began before the publish.
        let bound = self.config.connect_timeout.min(self.config.publish_timeout);
        self.nodes
            .iter()
            .filter(|n| !n.stated)
            .filter_map(|n| n.link.as_ref())
            .filter(|l| l.ready_at.is_none())
            .map(|l| later(l.started, bound))
            .filter(|t| *t > now)
            .max()
    }
}
