//! `/topic/{create,delete,empty,pause,unpause}` and
//! `/channel/{create,delete,empty,pause,unpause}`.

use std::time::Instant;

use crate::http::{Request, Response};
use crate::nsqd::Inner;
use crate::util::is_valid_name;

use super::{HttpResult, err, params, topic_channel_args};

impl Inner {
    pub(super) fn http_topic_create(&self, req: &Request) -> HttpResult {
        self.topic_from_query(req)?;
        Ok(Response::v1_empty())
    }

    pub(super) fn http_topic_delete(&self, req: &Request) -> HttpResult {
        let q = params(req)?;
        let topic = q
            .get("topic")
            .ok_or_else(|| err(400, "MISSING_ARG_TOPIC"))?;
        if !self.delete(topic, None) {
            return Err(err(404, "TOPIC_NOT_FOUND"));
        }
        Ok(Response::v1_empty())
    }

    pub(super) fn http_topic_empty(&self, req: &Request) -> HttpResult {
        let q = params(req)?;
        let topic = q
            .get("topic")
            .ok_or_else(|| err(400, "MISSING_ARG_TOPIC"))?;
        if !is_valid_name(topic.as_bytes()) {
            return Err(err(400, "INVALID_TOPIC"));
        }
        if !self.empty_topic(topic) {
            return Err(err(404, "TOPIC_NOT_FOUND"));
        }
        Ok(Response::v1_empty())
    }

    pub(super) fn http_topic_pause(&self, req: &Request, pause: bool) -> HttpResult {
        let q = params(req)?;
        let topic = q
            .get("topic")
            .ok_or_else(|| err(400, "MISSING_ARG_TOPIC"))?;
        if !self.pause_topic(topic, pause) {
            return Err(err(404, "TOPIC_NOT_FOUND"));
        }
        Ok(Response::v1_empty())
    }

    /// The channel endpoints: `getExistingTopicFromQuery`, then `action` on the channel
    /// (`Err` = 404 `CHANNEL_NOT_FOUND`); `/channel/create` gets (creates) the channel.
    pub(super) fn http_channel(
        &self,
        req: &Request,
        action: impl FnOnce(&Self, &str, &str) -> Result<(), ()>,
    ) -> HttpResult {
        let q = params(req)?;
        let (topic, channel) = topic_channel_args(&q)?;
        {
            let mut st = self.lock();
            if !st.queues.topics.contains_key(&topic) {
                return Err(err(404, "TOPIC_NOT_FOUND"));
            }
            if req.path == "/channel/create" {
                self.ensure_channel(&mut st, &topic, &channel, Instant::now());
            }
        }
        action(self, &topic, &channel).map_err(|()| err(404, "CHANNEL_NOT_FOUND"))?;
        Ok(Response::v1_empty())
    }
}
