//! No call hangs when a client's driver panics (a socket that panics stands in for any bug):
//! every pending and later call returns (`Error::Closed`, `None`, a report), and the driver
//! thread ends.

use nsq_client::Error;
use nsq_client::blocking::{Consumer, Producer};
use nsq_proto::Config;
use nsq_test_broker::Nsqd;
use nsq_test_support::driver_end::{Panicky, WAIT, trigger};
use std::sync::atomic::Ordering;
use std::time::Duration;

#[test]
fn every_call_returns_when_the_driver_panics() {
    nsq_test_broker::scenarios::run_within(60, || {
        let nsqd = Nsqd::start().unwrap();
        let addr = nsqd.tcp_address().to_string();
        // nsq-blocking's runtime, with sockets that panic on their next read once triggered.
        let panicky = || Panicky::around(nsq_client::blocking_runtime_here().unwrap());
        let producer = Producer::builder()
            .config(&Config::default())
            .nsqd(addr.as_str())
            .runtime(panicky())
            .build()
            .unwrap();
        producer.ping().unwrap();
        producer.publish("t", "before").unwrap();
        let mut consumer = Consumer::builder("t", "ch")
            .max_in_flight(10)
            .nsqd(addr.as_str())
            .runtime(panicky())
            .build()
            .unwrap();
        consumer.recv_timeout(WAIT).unwrap().finish();
        let handle = consumer.handle();
        let waiting = std::thread::spawn(move || (consumer.recv().is_none(), consumer));
        std::thread::sleep(Duration::from_millis(50));
        trigger().store(true, Ordering::SeqCst);
        // The publish's reply is the read the producer's driver panics under.
        assert!(matches!(producer.publish("t", "after"), Err(Error::Closed)));
        nsqd.publish("t", b"wake");
        let (ended, mut consumer) = waiting.join().unwrap();
        assert!(ended, "recv ends");
        assert!(matches!(producer.publish("t", "x"), Err(Error::Closed)));
        assert!(matches!(producer.ping(), Err(Error::Closed)));
        assert!(matches!(
            producer.publish_async("t", "x").map(drop),
            Err(Error::Closed)
        ));
        producer.close();
        assert!(consumer.recv().is_none());
        assert!(matches!(handle.connect_to_nsqd(&addr), Err(Error::Closed)));
        let _ = handle.stop();
        let _ = consumer.stop();
    });
}
