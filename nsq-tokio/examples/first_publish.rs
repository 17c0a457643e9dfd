//! Measures where a new producer's first publish lands with `producer_routing = topology`:
//! `--phases` times, a new producer (in `--zone` / `--region`) over every `--nsqd-tcp-address`
//! publishes one message to a topic of its own and closes; then every nsqd's `/stats` (the
//! `--nsqd-http-address` list) says which one got it.
//!
//! It prints each phase's nsqd and how long the publish took, and how many of the phases
//! reached `--nearest-http-address` (the nsqd in the producer's zone).
//!
//! ```text
//! cargo run --release -p nsq-tokio --example first_publish -- --zone=z2 --region=r1 \
//!     --nsqd-tcp-address=127.0.0.1:4150 --nsqd-tcp-address=127.0.0.1:4250 \
//!     --nsqd-http-address=127.0.0.1:4151 --nsqd-http-address=127.0.0.1:4251 \
//!     --nearest-http-address=127.0.0.1:4251 --phases=8
//! ```
#![allow(
    clippy::print_stdout,
    reason = "a measurement tool that prints its figures"
)]

mod support;

use nsq_tokio::{Cluster, Config, HttpConfig, Producer, Topic};
use std::time::{Duration, Instant};
use support::{Flags, Usage, apply_opts, fatal, init_logging, value};

const USAGE: Usage = Usage {
    name: "first_publish",
    about: "New producers routed by topology publish once each; says where each landed.",
    flags: &[
        value(
            "nsqd-tcp-address",
            "ADDR",
            "nsqd TCP address the producer is given (may be given multiple times)",
        ),
        value(
            "nsqd-http-address",
            "ADDR",
            "nsqd HTTP address whose /stats is read (may be given multiple times)",
        ),
        value(
            "nearest-http-address",
            "ADDR",
            "the HTTP address of the nsqd in the producer's zone (compared by port)",
        ),
        value("zone", "ZONE", "the producer's topology_zone"),
        value("region", "REGION", "the producer's topology_region"),
        value(
            "topic",
            "TOPIC",
            "topic prefix (default: first); phase N uses TOPIC_N",
        ),
        value("phases", "N", "how many producers (default: 8)"),
        value(
            "producer-opt",
            "NAME,VALUE",
            "option to pass through to the producer (may be given multiple times)",
        ),
    ],
};

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let flags = Flags::parse(&USAGE);
    init_logging();
    if let Err(e) = run(&flags).await {
        fatal("first_publish", &e);
    }
}

async fn run(flags: &Flags) -> Result<(), String> {
    let tcp = flags.all("nsqd-tcp-address");
    let http = flags.all("nsqd-http-address");
    if tcp.is_empty() || http.is_empty() {
        return Err("--nsqd-tcp-address and --nsqd-http-address required".to_owned());
    }
    let nearest = flags.string("nearest-http-address", "");
    let prefix = flags.string("topic", "first");
    let phases: u32 = flags.number("phases", 8)?;
    let mut config = Config::default();
    config
        .set_str("producer_routing", "topology")
        .map_err(|e| e.to_string())?;
    for (option, flag) in [("topology_zone", "zone"), ("topology_region", "region")] {
        if let Some(v) = flags.get(flag) {
            config.set_str(option, v).map_err(|e| e.to_string())?;
        }
    }
    apply_opts(&mut config, &flags.all("producer-opt"))?;
    let cluster = Cluster::from_nsqds(&http, HttpConfig::new()).map_err(|e| e.to_string())?;
    let mut near = 0;
    for phase in 1..=phases {
        let topic = Topic::new(format!("{prefix}_{phase}")).map_err(|e| e.to_string())?;
        let producer = Producer::builder()
            .config(&config)
            .nsqds(&tcp)
            .build()
            .map_err(|e| e.to_string())?;
        let started = Instant::now();
        producer
            .publish(topic.as_str(), format!("phase {phase}"))
            .await
            .map_err(|e| e.to_string())?;
        let took = started.elapsed();
        producer.close().await;
        let stats = cluster.topic_stats(&topic).await;
        let landed: Vec<&str> = stats
            .value
            .nodes
            .iter()
            .filter(|(_, t)| t.message_count > 0)
            .map(|(addr, _)| addr.as_str())
            .collect();
        // nsqd reports itself under its broadcast address: the ports tell them apart.
        let port = |a: &str| a.rsplit(':').next().unwrap_or_default().to_owned();
        if landed.len() == 1 && port(landed[0]) == port(&nearest) {
            near += 1;
        }
        println!(
            "phase {phase}: {} in {:.1} ms",
            landed.join(","),
            took.as_secs_f64() * 1e3
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    println!(
        "first publishes in the producer's zone: {near} of {phases} (left it: {})",
        phases - near
    );
    Ok(())
}
