//! `run_batch` on nsq-tokio (the shared scenarios of nsq-test-support; against a real nsqd
//! when `NSQD_TCP_ADDRESS` is set).

#[path = "support/exec.rs"]
mod exec;

use nsq_test_support::batches::{self, AsyncRunner};

#[test]
fn batches_fill_and_finish() {
    batches::batches_fill_and_finish(&AsyncRunner(exec::tokio()));
}

#[test]
fn the_bound_hands_batches_over() {
    batches::the_bound_hands_batches_over(&AsyncRunner(exec::tokio()));
}

#[test]
fn auto_touch_keeps_a_slow_batch() {
    batches::auto_touch_keeps_a_slow_batch(&AsyncRunner(exec::tokio()));
}

#[test]
fn a_stop_hands_over_the_partial_batch() {
    batches::a_stop_hands_over_the_partial_batch(&AsyncRunner(exec::tokio()));
}

#[test]
fn single_messages_fail_while_the_rest_finish() {
    batches::single_messages_fail_while_the_rest_finish(&AsyncRunner(exec::tokio()));
}

#[test]
fn a_failed_batch_backs_off_once() {
    batches::a_failed_batch_backs_off_once(&AsyncRunner(exec::tokio()));
}

/// `recv_batch` and the `Stream` of batches: `max_bytes` splits batches before the message
/// that would pass it (which starts the next one), a requeued batch comes back whole, a
/// batch dropped unanswered is requeued, and the stream ends after a stop.
#[test]
fn recv_batch_and_the_stream() {
    use futures_lite::StreamExt;
    use nsq_test_broker::Nsqd;
    use nsq_tokio::{BatchEnd, BatchOptions, Config, Consumer};
    use std::time::Duration;

    let nsqd = Nsqd::start().unwrap();
    for i in 0..6 {
        nsqd.publish("recv_batch", format!("{i}{}", "x".repeat(99)).as_bytes());
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let requeued_first = rt.block_on(async {
        let config = Config {
            max_in_flight: 50,
            ..Config::default()
        };
        let mut consumer = Consumer::builder("recv_batch", "ch")
            .config(&config)
            .nsqd(nsqd.tcp_address().to_string())
            .connect()
            .await
            .unwrap();
        let options = BatchOptions::new()
            .max_bytes(250)
            .linger(Duration::from_millis(300));
        let mut sizes = Vec::new();
        let mut first = None;
        let mut ends = Vec::new();
        while sizes.iter().sum::<usize>() < 6 {
            let batch = tokio::time::timeout(Duration::from_secs(5), consumer.recv_batch(&options))
                .await
                .expect("a batch in time")
                .expect("a batch");
            assert!(batch.bytes() <= 250, "{batch:?}");
            ends.push(batch.ended_by());
            if first.is_none() {
                // The first batch goes back whole, at once: it is seen again.
                first = Some(batch.len() as u64);
                batch.requeue(Some(Duration::ZERO));
                continue;
            }
            sizes.push(batch.len());
            batch.finish();
        }
        assert!(sizes.iter().all(|n| *n <= 2), "{sizes:?}");
        // The requeue backs off (RDY 1 for a while: batches of one at the bound), then
        // batches split on max_bytes.
        assert!(ends.contains(&BatchEnd::Bytes), "{ends:?}");
        // A batch dropped without an answer is requeued (with the default delay).
        nsqd.publish("recv_batch", b"dropped");
        let batch = consumer.recv_batch(&options).await.expect("a batch");
        assert_eq!(batch.len(), 1);
        drop(batch);
        // The stream: a stop ends it after the partial batch.
        let mut batches = consumer.batches(BatchOptions::new().linger(Duration::from_secs(60)));
        nsqd.publish("recv_batch", b"last");
        let handle = batches.handle();
        let stopper = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(500)).await;
            handle.stop().await
        });
        let partial = tokio::time::timeout(Duration::from_secs(10), batches.next())
            .await
            .expect("the partial batch before the linger")
            .expect("a batch");
        assert_eq!(partial.ended_by(), BatchEnd::Stop);
        assert_eq!(partial.len(), 1);
        partial.finish();
        assert!(batches.next().await.is_none());
        let report = stopper.await.unwrap();
        assert_eq!(report.unanswered, 0);
        let stats = batches.as_handle().batch_stats();
        assert_eq!(stats.ended_by(BatchEnd::Stop), 1, "{stats:?}");
        first.unwrap()
    });
    let ch = nsqd.channel("recv_batch", "ch").unwrap();
    // The first batch requeued, and the one dropped; 6 + 1 finished ("dropped" waits out its
    // default delay).
    assert_eq!(
        (ch.finished, ch.requeued),
        (7, requeued_first + 1),
        "{ch:?}"
    );
}

#[test]
fn batches_mix_nsqd() {
    batches::batches_mix_nsqd(&AsyncRunner(exec::tokio()));
}

#[test]
fn a_stop_takes_in_what_was_received() {
    batches::a_stop_takes_in_what_was_received(&AsyncRunner(exec::tokio()));
}
