//! The clients under test: the consumer (a new one after each graceful stop, the closed ones
//! kept until their connections are gone) and the producer, driven with what the world
//! delivers, and what they ask of it.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::net::Who;
use super::{Ev, TOPIC, World, timed};
use crate::sim::client::{ConnRef, ConsumerNote, ConsumerSpec, Machine, SimConsumer, SimProducer};

pub(super) struct ConsumerSlot {
    pub(super) epoch: u32,
    pub(super) machine: Box<dyn SimConsumer>,
    /// The messages the application holds, and when each was handed out.
    pub(super) held: HashMap<(ConnRef, [u8; 16]), Instant>,
    pub(super) closing: bool,
    pub(super) closed: bool,
    pub(super) rdy_sum: u64,
}

impl World<'_> {
    pub(super) fn start_consumer(&mut self) {
        let epoch = self.report.consumers;
        self.report.consumers += 1;
        let lookupds: Vec<String> = (0..self.lookupd_up.len())
            .map(|k| format!("http://lookupd{k}.sim:4161"))
            .collect();
        let spec = ConsumerSpec {
            seed: self.cfg.seed.wrapping_add(u64::from(epoch)),
            topic: TOPIC,
            channel: super::CHANNEL,
            max_in_flight: self.max_in_flight,
            max_attempts: self.cfg.max_attempts,
            lookupds: &lookupds,
            adaptive: self.cfg.adaptive,
        };
        let (now, factory) = (self.now, &mut *self.factory);
        let machine = timed(&mut self.core, || factory.consumer(now, &spec));
        if let Some(old) = self.consumer.take() {
            self.old_consumers.push(old);
        }
        self.consumer = Some(ConsumerSlot {
            epoch,
            machine,
            held: HashMap::new(),
            closing: false,
            closed: false,
            rdy_sum: 0,
        });
        self.drain_consumer();
    }

    /// The producer under test, publishing to the first [`SimConfig::producer_nsqd`] nsqd
    /// (if it has messages to publish).
    ///
    /// [`SimConfig::producer_nsqd`]: crate::sim::SimConfig::producer_nsqd
    pub(super) fn start_producer(&mut self) {
        let nsqds: Vec<String> = self
            .nodes
            .iter()
            .take(self.cfg.producer_nsqd.min(self.nodes.len()))
            .map(|n| n.addr.clone())
            .collect();
        if self.cfg.producer_messages > 0 && !nsqds.is_empty() {
            let (now, seed) = (self.now, self.cfg.seed ^ 0x5eed);
            let factory = &mut *self.factory;
            let p = timed(&mut self.core, || factory.producer(now, seed, &nsqds));
            self.producer = Some(p);
            self.drive_producer();
        }
    }

    pub(super) fn client_call(&mut self, who: Who, f: impl FnOnce(&mut dyn Machine, Instant)) {
        match who {
            Who::Producer => self.producer_call(|p, now| f(p, now)),
            Who::Consumer(epoch) => self.epoch_call(epoch, |c, now| f(c, now)),
        }
    }

    /// Calls consumer `epoch`, the current one or a closed one, then drains it.
    pub(super) fn epoch_call(&mut self, epoch: u32, f: impl FnOnce(&mut dyn SimConsumer, Instant)) {
        if self.consumer.as_ref().is_some_and(|c| c.epoch == epoch) {
            self.consumer_call(f);
        } else if let Some(i) = self.old_consumers.iter().position(|c| c.epoch == epoch) {
            let now = self.now;
            let m = self.old_consumers[i].machine.as_mut();
            timed(&mut self.core, || f(m, now));
            self.drain_old(i);
        }
    }

    pub(super) fn consumer_call(&mut self, f: impl FnOnce(&mut dyn SimConsumer, Instant)) {
        let now = self.now;
        let Some(c) = self.consumer.as_mut() else {
            return;
        };
        timed(&mut self.core, || f(c.machine.as_mut(), now));
        self.drain_consumer();
    }

    pub(super) fn producer_call(&mut self, f: impl FnOnce(&mut dyn SimProducer, Instant)) {
        let now = self.now;
        let Some(p) = self.producer.as_mut() else {
            return;
        };
        timed(&mut self.core, || f(p.as_mut(), now));
        self.drive_producer();
    }

    /// The timers of the closed consumers due at `next`.
    pub(super) fn old_timeouts(&mut self, next: Instant) {
        let now = self.now;
        for i in 0..self.old_consumers.len() {
            if self.old_consumers[i].machine.next_timeout() == Some(next) {
                let m = self.old_consumers[i].machine.as_mut();
                timed(&mut self.core, || m.timeout(now));
                self.drain_old(i);
            }
        }
    }

    /// Drains the current consumer's actions and notes, then checks the invariants. Each
    /// drain is one timed call: handling an action or a note never calls the consumer back
    /// before the next is taken, except answers, whose notes the next round takes; so the
    /// order is the same as taking them one at a time.
    pub(super) fn drain_consumer(&mut self) {
        let Some(c) = self.consumer.as_mut() else {
            return;
        };
        let epoch = c.epoch;
        let mut acts = std::mem::take(&mut self.act_buf);
        timed(&mut self.core, || {
            while let Some(act) = c.machine.poll_act() {
                acts.push(act);
            }
        });
        for act in acts.drain(..) {
            self.act(Who::Consumer(epoch), act);
        }
        self.act_buf = acts;
        loop {
            let Some(c) = self.consumer.as_mut() else {
                return;
            };
            let mut notes = std::mem::take(&mut self.note_buf);
            timed(&mut self.core, || {
                while let Some(note) = c.machine.poll_note() {
                    notes.push(note);
                }
            });
            let done = notes.is_empty();
            for note in notes.drain(..) {
                self.consumer_note(&note);
            }
            self.note_buf = notes;
            if done {
                break;
            }
        }
        self.check_flow();
        self.check_limit();
        self.after_drain_batches();
    }

    /// Drains a consumer that has closed (only closed consumers are kept as old ones): its
    /// last actions go to the world; it may hand nothing out any more.
    pub(super) fn drain_old(&mut self, i: usize) {
        let mut acts = std::mem::take(&mut self.act_buf);
        let m = &mut self.old_consumers[i].machine;
        timed(&mut self.core, || {
            while let Some(act) = m.poll_act() {
                acts.push(act);
            }
        });
        let epoch = self.old_consumers[i].epoch;
        for act in acts.drain(..) {
            self.act(Who::Consumer(epoch), act);
        }
        self.act_buf = acts;
        loop {
            let note = timed(&mut self.core, || self.old_consumers[i].machine.poll_note());
            let Some(note) = note else { break };
            if let ConsumerNote::Message(d) | ConsumerNote::GaveUp(d) = note {
                let epoch = self.old_consumers[i].epoch;
                self.violate(format!(
                    "consumer {epoch} handed out message {} after Closed",
                    String::from_utf8_lossy(&d.id)
                ));
            }
        }
    }

    fn consumer_note(&mut self, note: &ConsumerNote) {
        let Some(c) = self.consumer.as_mut() else {
            return;
        };
        let epoch = c.epoch;
        match note {
            ConsumerNote::Message(d) => {
                let d = *d;
                if c.closed {
                    self.violate(format!(
                        "consumer {epoch} handed out message {} after Closed",
                        String::from_utf8_lossy(&d.id)
                    ));
                    return;
                }
                let held = c.held.len() as u64;
                // Strict: not even messages on the wire under a RDY that a lowered
                // max_in_flight took back may reach the application beyond it.
                let bound = self.max_in_flight;
                if held >= u64::from(bound) {
                    let view = self
                        .conn_node(Who::Consumer(epoch), d.conn)
                        .map(|n| format!("nsqd{n}: {}", self.node_view(n)))
                        .unwrap_or_default();
                    self.violate(format!(
                        "the application already holds {held} messages and max_in_flight is {}, \
                         yet message {} (attempt {}) was handed out; {view}",
                        self.max_in_flight,
                        String::from_utf8_lossy(&d.id),
                        d.attempts
                    ));
                    return;
                }
                if !self.check_hand_out(held) {
                    return;
                }
                let now = self.now;
                if let Some(c) = self.consumer.as_mut() {
                    c.held.insert((d.conn, d.id), now);
                }
                self.report.delivered += 1;
                if self.now < self.end_of_faults {
                    self.report.fault_phase_delivered += 1;
                }
                if self.load == super::Load::Published {
                    if let Some(n) = self.conn_node(Who::Consumer(epoch), d.conn) {
                        self.handed.insert((n, d.id));
                    }
                }
                self.trace(b'm', d.conn, &d.id);
                self.on_message(epoch, d);
            }
            ConsumerNote::GaveUp(d) => {
                let d = *d;
                let node = self.conn_node(Who::Consumer(epoch), d.conn);
                if let Some(n) = node.filter(|_| self.load == super::Load::Published) {
                    self.handed.insert((n, d.id));
                    self.finished.insert((n, d.id));
                }
                self.report.gave_up += 1;
                self.trace(b'g', d.conn, &d.id);
            }
            ConsumerNote::Closed { leftovers } => {
                let leftovers = *leftovers;
                let held = c.held.len();
                c.closed = true;
                self.closed_check(epoch, leftovers, held);
                self.closed_batches(epoch, held);
                if !self.final_close {
                    let at = self.now + Duration::from_millis(500);
                    self.push(at, Ev::StartConsumer);
                }
            }
            ConsumerNote::Other(_) => {}
        }
    }

    pub(super) fn drive_producer(&mut self) {
        loop {
            let Some(p) = self.producer.as_mut() else {
                return;
            };
            let act = timed(&mut self.core, || p.poll_act());
            let Some(act) = act else { break };
            self.act(Who::Producer, act);
        }
        loop {
            let Some(p) = self.producer.as_mut() else {
                return;
            };
            let r = timed(&mut self.core, || p.poll_result());
            let Some(r) = r else { break };
            let body = self.producer_bodies.remove(&r.id).unwrap_or_default();
            let there = self.accepted_bodies.contains(&body);
            self.trace(b'p', r.id, &[u8::from(r.ok), u8::from(r.maybe_published)]);
            if r.ok {
                self.report.producer_ok += 1;
                if !there {
                    self.violate(format!(
                        "publish {} of {:?} got OK but no nsqd has it",
                        r.id,
                        String::from_utf8_lossy(&body)
                    ));
                }
            } else {
                self.report.producer_failed += 1;
                if there && !r.maybe_published {
                    self.violate(format!(
                        "publish {} of {:?} failed as not published, but an nsqd has it",
                        r.id,
                        String::from_utf8_lossy(&body)
                    ));
                }
            }
        }
    }

    pub(super) fn producer_publish(&mut self, n: u64) {
        self.producer_left = self.producer_left.saturating_sub(1);
        let body = format!("p{n}").into_bytes();
        let now = self.now;
        let Some(p) = self.producer.as_mut() else {
            return;
        };
        let r = timed(&mut self.core, || p.publish(now, TOPIC, &body));
        match r {
            Ok(id) => {
                self.producer_bodies.insert(id, body);
            }
            Err(_) => self.report.producer_failed += 1,
        }
        self.drive_producer();
    }
}
