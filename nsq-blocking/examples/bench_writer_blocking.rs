//! nsq-blocking's counterpart of nsq's `bench/bench_writer` (and of nsq-tokio's
//! `bench_writer`): same flags, same final line.
//!
//! One thread per CPU (the Go tool's GOMAXPROCS workers), each with its own producer (one
//! nsqd connection), publishing MPUB batches of `--batch-size` messages of `--size` bytes and
//! waiting for each reply before the next, until `--runfor` has passed.
//!
//! ```text
//! cargo run --release -p nsq-blocking --example bench_writer_blocking -- \
//!     --nsqd-tcp-address=127.0.0.1:4150 --topic=sub_bench --size=200 --batch-size=200 --runfor=10s
//! ```

use nsq_example_cli as support;

use bytes::Bytes;
use nsq_blocking::{Config, Producer, Topic};
use std::time::{Duration, Instant};
use support::{BenchArgs, Flags, Usage, bench_flags, bench_line, cpus, fatal, init_logging, log};

const PREFIX: &str = "bench_writer";

const USAGE: Usage = Usage {
    name: "bench_writer_blocking",
    about: "Publishes MPUB batches from one producer per CPU for a while; prints the rate.",
    flags: bench_flags!(writer),
};

fn run() -> Result<(), String> {
    let flags = Flags::parse(&USAGE);
    init_logging();
    let args = BenchArgs::parse(&flags, Duration::from_secs(10))?;
    let runfor = args.runfor;
    let addr = args.addr.clone();
    let topic = Topic::new(args.topic.clone()).map_err(|e| e.to_string())?;
    let size: usize = args.size;
    let batch_size: usize = args.batch_size;
    let batch: Vec<Bytes> = vec![Bytes::from(vec![0u8; size]); batch_size];
    let workers = cpus();
    let mut producers = Vec::with_capacity(workers);
    for _ in 0..workers {
        producers.push(Producer::connect(&addr, &Config::default()).map_err(|e| e.to_string())?);
    }
    let start = Instant::now();
    let end = start + runfor;
    let threads: Vec<_> = producers
        .into_iter()
        .map(|p| {
            let (batch, topic) = (batch.clone(), topic.clone());
            std::thread::spawn(move || {
                let mut count = 0u64;
                loop {
                    p.multi_publish(&topic, &batch).map_err(|e| e.to_string())?;
                    count += batch.len() as u64;
                    if Instant::now() > end {
                        break;
                    }
                }
                p.close();
                Ok::<u64, String>(count)
            })
        })
        .collect();
    let mut total = 0;
    for t in threads {
        total += t.join().map_err(|_| "a publishing thread panicked")??;
    }
    log(PREFIX, &bench_line(start.elapsed(), total, size));
    Ok(())
}

fn main() {
    if let Err(e) = run() {
        fatal(PREFIX, &e);
    }
}
