//! Consumes a topic, finishing every message, and serves the client's metrics in the
//! Prometheus text format at `http://ADDR/metrics` (the `metrics` feature, recorded by
//! metrics-exporter-prometheus).
//!
//! `--publish N` first publishes N messages to the topic with the same client, so the
//! producer's metrics show too. It runs until interrupted.
//!
//! ```text
//! cargo run -p nsq-tokio --features metrics --example prometheus -- \
//!     --nsqd-tcp-address=127.0.0.1:4150 --topic=orders --channel=metrics --publish=500 \
//!     --metrics-address=127.0.0.1:9102
//! curl -s http://127.0.0.1:9102/metrics | grep nsq_consumer_messages_received_total
//! ```
#![allow(clippy::print_stdout, reason = "a command-line tool")]

mod support;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use nsq_tokio::{Config, Consumer, HISTOGRAM_BUCKETS, Message, Producer};
use std::time::Duration;
use support::{
    Flags, LOOKUPD_HTTP_ADDRESS_FLAG, NSQD_TCP_ADDRESS_FLAG, Usage, fatal, init_logging, log,
    terminated, value,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const PREFIX: &str = "prometheus";

const USAGE: Usage = Usage {
    name: "prometheus",
    about: "Consumes a topic, finishing every message, and serves the client's metrics at /metrics.",
    flags: &[
        NSQD_TCP_ADDRESS_FLAG,
        LOOKUPD_HTTP_ADDRESS_FLAG,
        value("topic", "TOPIC", "NSQ topic"),
        value("channel", "CHANNEL", "NSQ channel (default: metrics)"),
        value(
            "publish",
            "N",
            "first publish N messages to the topic (needs --nsqd-tcp-address)",
        ),
        value(
            "metrics-address",
            "ADDR",
            "where to serve /metrics (default: 127.0.0.1:9102)",
        ),
    ],
};

#[tokio::main]
async fn main() {
    let flags = Flags::parse(&USAGE);
    init_logging();
    if let Err(e) = run(&flags).await {
        fatal(PREFIX, &e);
    }
}

async fn run(flags: &Flags) -> Result<(), String> {
    let topic = flags.string("topic", "");
    if topic.is_empty() {
        return Err("--topic required".to_owned());
    }
    let channel = flags.string("channel", "metrics");
    let nsqd = flags.all("nsqd-tcp-address");
    let lookupd = flags.all("lookupd-http-address");
    if nsqd.is_empty() == lookupd.is_empty() {
        return Err("--nsqd-tcp-address or --lookupd-http-address required (not both)".to_owned());
    }
    let publish: u64 = flags.number("publish", 0)?;
    let listen = flags.string("metrics-address", "127.0.0.1:9102");

    // Real histograms (buckets Prometheus can aggregate across instances), not the
    // exporter's default summaries.
    let mut builder = PrometheusBuilder::new();
    for (name, buckets) in HISTOGRAM_BUCKETS {
        builder = builder
            .set_buckets_for_metric(Matcher::Full((*name).to_owned()), buckets)
            .map_err(|e| format!("buckets of {name}: {e}"))?;
    }
    let handle = builder
        .install_recorder()
        .map_err(|e| format!("installing the Prometheus recorder: {e}"))?;
    let listener = tokio::net::TcpListener::bind(&listen)
        .await
        .map_err(|e| format!("--metrics-address {listen}: {e}"))?;
    log(PREFIX, &format!("serving http://{listen}/metrics"));
    tokio::spawn(serve(listener, handle));

    if publish > 0 {
        let Some(addr) = nsqd.first() else {
            return Err("--publish needs --nsqd-tcp-address".to_owned());
        };
        let producer = Producer::connect(addr, &Config::default())
            .await
            .map_err(|e| e.to_string())?;
        for i in 0..publish {
            producer
                .publish(topic.as_str(), format!("message {i}"))
                .await
                .map_err(|e| e.to_string())?;
        }
        producer.close().await;
        log(PREFIX, &format!("published {publish} messages to {topic}"));
    }

    let consumer = Consumer::builder(topic.as_str(), channel.as_str())
        .max_in_flight(200)
        .nsqds(&nsqd)
        .lookupds(&lookupd)
        .build()
        .map_err(|e| e.to_string())?;
    let stop = consumer.handle();
    tokio::spawn(async move {
        terminated().await;
        stop.stop().await;
    });
    let report = consumer
        .run(4, |m: Message| async move {
            drop(m); // answered by returning Ok: finished
            Ok(())
        })
        .await;
    log(
        PREFIX,
        &format!("stopped, {} left unanswered", report.unanswered),
    );
    Ok(())
}

/// Answers every HTTP request on `listener` with the metrics (a scraper's `GET /metrics`).
async fn serve(listener: tokio::net::TcpListener, handle: PrometheusHandle) {
    // Histograms are kept in buckets between scrapes: drain them now and then.
    let upkeep = handle.clone();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_secs(5)).await;
            upkeep.run_upkeep();
        }
    });
    loop {
        let Ok((mut conn, _)) = listener.accept().await else {
            continue;
        };
        let handle = handle.clone();
        tokio::spawn(async move {
            let mut request = Vec::new();
            let mut buf = [0u8; 1024];
            // Read the request head (bounded), then answer.
            while !request.windows(4).any(|w| w == b"\r\n\r\n") && request.len() < 16 * 1024 {
                match tokio::time::timeout(Duration::from_secs(5), conn.read(&mut buf)).await {
                    Ok(Ok(n)) if n > 0 => request.extend_from_slice(&buf[..n]),
                    _ => return,
                }
            }
            let (status, body) = if request.starts_with(b"GET /metrics ") {
                ("200 OK", handle.render())
            } else {
                ("404 Not Found", "not found: GET /metrics\n".to_owned())
            };
            let head = format!(
                "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\n\
                 Content-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = conn.write_all(head.as_bytes()).await;
            let _ = conn.write_all(body.as_bytes()).await;
        });
    }
}
