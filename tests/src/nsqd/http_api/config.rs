//! `GET|PUT /config/:opt`.

use std::sync::PoisonError;
use std::sync::atomic::Ordering;
use std::time::Duration;

use serde_json::{Value, json};

use crate::http::{Request, Response};
use crate::nsqd::Inner;
use crate::nsqd::latency::GoFloat;
use crate::util::default_node_id;

use super::{HttpResult, err, nanos};

impl Inner {
    /// `GET|PUT /config/:opt`.
    pub(super) fn http_config(&self, req: &Request) -> HttpResult {
        let opt = req.param("opt").unwrap_or("");
        if req.method == "PUT" {
            let max = self.opts.max_msg_size;
            let too_big =
                req.content_length.is_some_and(|n| n > max as u64) || req.body.len() as i64 > max;
            if too_big || req.body.is_empty() {
                return Err(err(413, "INVALID_VALUE"));
            }
            let mut config = self.config.lock().unwrap_or_else(PoisonError::into_inner);
            match opt {
                "nsqlookupd_tcp_addresses" => {
                    // json.Unmarshal into a []string (null makes it nil).
                    let text = String::from_utf8_lossy(&req.body);
                    let v: Option<Vec<String>> =
                        serde_json::from_str(&text).map_err(|_| err(400, "INVALID_VALUE"))?;
                    config.nsqlookupd_tcp_addresses = v;
                }
                "log_level" => {
                    let level = match String::from_utf8_lossy(&req.body).to_lowercase().as_str() {
                        "debug" => 1,
                        "info" => 2,
                        "warn" => 3,
                        "error" => 4,
                        "fatal" => 5,
                        _ => return Err(err(400, "INVALID_VALUE")),
                    };
                    config.log_level = level;
                }
                _ => return Err(err(400, "INVALID_OPTION")),
            }
        }
        match self.config_value(opt) {
            Some(Value::String(s)) => Ok(Response::v1_text(s)),
            Some(v) => Ok(Response::v1_raw_json(200, v.to_string().into_bytes())),
            None => Err(err(400, "INVALID_OPTION")),
        }
    }

    /// `getOptByCfgName`: the value of an nsqd option by its config name (strings are
    /// answered as text, everything else as JSON, like nsqd does).
    fn config_value(&self, name: &str) -> Option<Value> {
        let o = &self.opts;
        let config = self.config.lock().unwrap_or_else(PoisonError::into_inner);
        let http_port = self.http_port.load(Ordering::SeqCst);
        let d = |d: Duration| json!(nanos(d));
        let statsd_host = format!("{}_{http_port}", o.broadcast_address).replace(['.', ':'], "_");
        Some(match name {
            "id" => json!(default_node_id(&o.hostname)),
            "log_level" => json!(config.log_level),
            "log_prefix" => json!("[nsqd] "),
            "tcp_address" => json!(self.addr.to_string()),
            "http_address" => json!(format!("127.0.0.1:{http_port}")),
            "https_address" => json!("0.0.0.0:4152"),
            "broadcast_address" => json!(o.broadcast_address),
            "broadcast_tcp_port" => json!(self.addr.port()),
            "broadcast_http_port" => json!(http_port),
            "nsqlookupd_tcp_addresses" => json!(config.nsqlookupd_tcp_addresses),
            "auth_http_addresses" => json!([]),
            "http_client_connect_timeout" | "sync_timeout" => d(Duration::from_secs(2)),
            "http_client_request_timeout" => d(Duration::from_secs(5)),
            "data_path"
            | "statsd_address"
            | "tls_cert"
            | "tls_key"
            | "tls_client_auth_policy"
            | "tls_root_ca_file" => json!(""),
            "mem_queue_size" => json!(10_000),
            "max_bytes_per_file" => json!(104_857_600),
            "sync_every" => json!(2500),
            "queue_scan_selection_count" => json!(20),
            "queue_scan_worker_pool_max" => json!(4),
            "msg_timeout" => d(o.msg_timeout),
            "max_msg_timeout" => d(o.max_msg_timeout),
            "max_msg_size" => json!(o.max_msg_size),
            "max_body_size" => json!(o.max_body_size),
            "max_req_timeout" => d(o.max_req_timeout),
            "max_heartbeat_interval" => d(o.max_heartbeat_interval),
            "max_rdy_count" => json!(o.max_rdy_count),
            "max_output_buffer_size" => json!(o.max_output_buffer_size),
            "max_output_buffer_timeout" => d(o.max_output_buffer_timeout),
            "min_output_buffer_timeout" => d(o.min_output_buffer_timeout),
            "output_buffer_timeout" => d(o.output_buffer_timeout),
            "max_channel_consumers" => json!(o.max_channel_consumers),
            "statsd_prefix" => json!(format!("nsq.{statsd_host}.")),
            "statsd_interval" => d(Duration::from_secs(60)),
            "statsd_mem_stats" => json!(true),
            "statsd_udp_packet_size" => json!(508),
            "statsd_exclude_ephemeral" => json!(false),
            "e2e_processing_latency_window_time" => d(o.e2e_processing_latency_window_time),
            "e2e_processing_latency_percentiles" => serde_json::to_value(
                o.e2e_processing_latency_percentiles
                    .iter()
                    .map(|&f| GoFloat(f))
                    .collect::<Vec<_>>(),
            )
            .ok()?,
            "tls_required" => json!(if o.tls_required { 2 } else { 0 }),
            "tls_min_version" => json!(0x0301),
            "deflate" => json!(o.deflate),
            "max_deflate_level" => json!(o.max_deflate_level),
            "snappy" => json!(o.snappy),
            _ => return None,
        })
    }
}
