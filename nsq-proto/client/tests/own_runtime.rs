//! The `own_runtime` example (a runtime plugged in from outside the workspace, over std
//! sockets) runs its round trip through the in-process test broker, within a time bound.

#[path = "../examples/own_runtime.rs"]
#[allow(
    dead_code,
    unreachable_pub,
    reason = "the example's own items: its main is not called here, and its runtime is pub there"
)]
mod own_runtime;

#[test]
fn a_runtime_from_outside_publishes_and_consumes() {
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let thread = std::thread::Builder::new().name("own-runtime".into());
    thread
        .spawn(move || {
            let result = own_runtime::round_trip(None).map_err(|e| e.to_string());
            let _ = done_tx.send(result);
        })
        .expect("a thread for the example");
    let result = done_rx
        .recv_timeout(std::time::Duration::from_secs(30))
        .expect("the example finishes within 30 s");
    result.expect("the example's round trip");
}
