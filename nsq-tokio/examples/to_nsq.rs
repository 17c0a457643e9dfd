//! nsq-tokio's `to_nsq`: same flags and behaviour as nsq's `to_nsq` (v1.3.0).
//!
//! Reads stdin, splits it at `--delimiter` (default newline) and publishes every non-empty
//! piece to `--topic` on every `--nsqd-tcp-address`, optionally throttled to `--rate`/s.
//!
//! ```text
//! printf 'a\nb\n' | cargo run -p nsq-tokio --example to_nsq -- --nsqd-tcp-address=127.0.0.1:4150 --topic=events
//! ```

mod support;

use nsq_tokio::{Config, Producer, Topic};
use std::io::BufRead;
use std::time::Duration;
use support::{Flags, Usage, apply_opts, fatal, init_logging, log, terminated, value};

const PREFIX: &str = "to_nsq";

const USAGE: Usage = Usage {
    name: "to_nsq",
    about: "Reads stdin, splits it at the delimiter and publishes every piece to a topic.",
    flags: &[
        value(
            "nsqd-tcp-address",
            "ADDR",
            "destination nsqd TCP address (may be given multiple times)",
        ),
        value("topic", "TOPIC", "NSQ topic to publish to"),
        value(
            "delimiter",
            "CHAR",
            "character to split input from stdin (default: newline)",
        ),
        value(
            "rate",
            "N",
            "throttle messages to N/second (default: 0, no throttle)",
        ),
        value(
            "producer-opt",
            "NAME,VALUE",
            "option to pass through to the producer (may be given multiple times)",
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
    let topic = Topic::new(topic).map_err(|e| e.to_string())?;
    let delimiter = flags.string("delimiter", "\n");
    if delimiter.len() != 1 {
        return Err("--delimiter must be a single byte".to_owned());
    }
    let delim = delimiter.as_bytes()[0];
    let rate: u64 = flags.number("rate", 0)?;
    let mut config = Config {
        user_agent: Some(format!("to_nsq/nsq-tokio-{}", env!("CARGO_PKG_VERSION"))),
        ..Config::default()
    };
    apply_opts(&mut config, &flags.all("producer-opt"))?;
    let addrs = flags.all("nsqd-tcp-address");
    if addrs.is_empty() {
        return Err("--nsqd-tcp-address required".to_owned());
    }
    // Like go-nsq: one producer per address, every message goes to each of them.
    let mut producers = Vec::new();
    for a in &addrs {
        let p = Producer::builder()
            .config(&config)
            .nsqd(a.as_str())
            .build()
            .map_err(|e| format!("failed to create nsq.Producer - {e}"))?;
        producers.push(p);
    }
    let interval = (rate >= 1).then(|| Duration::from_secs(1) / rate as u32);
    if rate >= 1 {
        log(
            PREFIX,
            &format!("Throttling messages rate to max:{rate}/second"),
        );
    }
    // stdin is read on a blocking thread, one piece at a time.
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Vec<u8>>(1024);
    std::thread::spawn(move || {
        let mut input = std::io::stdin().lock();
        loop {
            let mut line = Vec::new();
            match input.read_until(delim, &mut line) {
                Ok(0) => return,
                Ok(_) => {
                    if line.last() == Some(&delim) {
                        line.pop();
                    }
                    if line.is_empty() {
                        continue;
                    }
                    if tx.blocking_send(line).is_err() {
                        return;
                    }
                }
                Err(e) => fatal(PREFIX, &e.to_string()),
            }
        }
    });
    let publish_all = async {
        let mut ticker = interval.map(tokio::time::interval);
        while let Some(line) = rx.recv().await {
            if let Some(t) = ticker.as_mut() {
                t.tick().await;
            }
            let body = bytes::Bytes::from(line);
            for p in &producers {
                p.publish(&topic, body.clone())
                    .await
                    .map_err(|e| e.to_string())?;
            }
        }
        Ok::<(), String>(())
    };
    let result = tokio::select! {
        r = publish_all => r,
        () = terminated() => Ok(()),
    };
    for p in &producers {
        p.close().await;
    }
    result
}
