//! Current-thread tokio runtimes that each lack one driver the client needs, with the call
//! that adds it: for the tests that such a runtime is refused with `Error::NoRuntime`.

/// `(the missing call, a runtime without it)`, one per driver.
pub(crate) fn runtimes_missing_a_driver() -> [(&'static str, tokio::runtime::Runtime); 2] {
    let build = |b: &mut tokio::runtime::Builder| b.build().unwrap();
    [
        (
            "enable_time()",
            build(tokio::runtime::Builder::new_current_thread().enable_io()),
        ),
        (
            "enable_io()",
            build(tokio::runtime::Builder::new_current_thread().enable_time()),
        ),
    ]
}
