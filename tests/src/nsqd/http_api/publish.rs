//! `/pub` and `/mpub`.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::http::{Request, Response};
use crate::nsqd::Inner;

use super::{HttpResult, bool_param, err, nanos};

impl Inner {
    fn check_exiting(&self) -> Result<(), Response> {
        if self.fail_publishes.load(Ordering::SeqCst) {
            return Err(err(503, "EXITING"));
        }
        Ok(())
    }

    pub(super) fn http_pub(&self, req: &Request) -> HttpResult {
        let max = self.opts.max_msg_size;
        if req.content_length.is_some_and(|n| n > max as u64) {
            return Err(err(413, "MSG_TOO_BIG"));
        }
        if req.body.len() as i64 > max {
            return Err(err(413, "MSG_TOO_BIG"));
        }
        if req.body.is_empty() {
            return Err(err(400, "MSG_EMPTY"));
        }
        let (q, topic) = self.topic_from_query(req)?;
        let mut defer = Duration::ZERO;
        if let Some(ds) = q.get("defer") {
            let ms: i64 = ds.parse().map_err(|_| err(400, "INVALID_DEFER"))?;
            // time.Duration(di) * time.Millisecond, overflow and all.
            let ns = ms.wrapping_mul(1_000_000);
            if ns < 0 || ns > nanos(self.opts.max_req_timeout) {
                return Err(err(400, "INVALID_DEFER"));
            }
            defer = Duration::from_nanos(ns.unsigned_abs());
        }
        self.check_exiting()?;
        let mut st = self.lock();
        self.publish(
            &mut st,
            &topic,
            vec![req.body.clone()],
            defer,
            Instant::now(),
        );
        Ok(Response::v1_text("OK"))
    }

    pub(super) fn http_mpub(&self, req: &Request) -> HttpResult {
        let max_body = self.opts.max_body_size;
        if req.content_length.is_some_and(|n| n > max_body as u64) {
            return Err(err(413, "BODY_TOO_BIG"));
        }
        let (q, topic) = self.topic_from_query(req)?;
        // Text mode is the default; a value other than true/1/false/0 means binary.
        let binary = q
            .get("binary")
            .is_some_and(|v| bool_param(Some(v)) != Some(false));
        let bodies = if binary {
            self.read_binary_mpub(&req.body)
                .map_err(|code| err(413, code))?
        } else {
            if req.body.len() as i64 > max_body {
                return Err(err(413, "BODY_TOO_BIG"));
            }
            let mut bodies = Vec::new();
            // Empty lines are silently discarded.
            for line in req.body.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
                if line.len() as i64 > self.opts.max_msg_size {
                    return Err(err(413, "MSG_TOO_BIG"));
                }
                bodies.push(line.to_vec());
            }
            bodies
        };
        self.check_exiting()?;
        let mut st = self.lock();
        self.publish(&mut st, &topic, bodies, Duration::ZERO, Instant::now());
        Ok(Response::v1_text("OK"))
    }

    /// nsqd's `readMPUB` over an HTTP body; the error is the code without `E_`.
    pub(in crate::nsqd) fn read_binary_mpub(
        &self,
        mut body: &[u8],
    ) -> Result<Vec<Vec<u8>>, &'static str> {
        let mut take = |n: usize| -> Option<&[u8]> {
            let (head, rest) = body.split_at_checked(n)?;
            body = rest;
            Some(head)
        };
        let len = |b: &[u8]| i32::from_be_bytes([b[0], b[1], b[2], b[3]]);
        let count = take(4).map(len).ok_or("BAD_BODY")?;
        if count <= 0 || i64::from(count) > (self.opts.max_body_size - 4) / 5 {
            return Err("BAD_BODY");
        }
        let mut bodies = Vec::new();
        for _ in 0..count {
            let size = take(4).map(len).ok_or("BAD_MESSAGE")?;
            if size <= 0 || i64::from(size) > self.opts.max_msg_size {
                return Err("BAD_MESSAGE");
            }
            let size = usize::try_from(size).map_err(|_| "BAD_MESSAGE")?;
            bodies.push(take(size).ok_or("BAD_MESSAGE")?.to_vec());
        }
        Ok(bodies)
    }
}
