//! The `--drivers` flag of nsq-async-std's bench tools, shared by them.

/// Applies `--drivers=thread|executor` for `--runtime=runtime`: with `executor`, every
/// client's driver is a task on that runtime's executor ([`nsq_async_std::set_executor`]).
pub(crate) fn apply(drivers: &str, runtime: &str) -> Result<(), String> {
    match (drivers, runtime) {
        ("thread", _) => {}
        ("executor", "async-std") => {
            nsq_async_std::set_executor(|driver| drop(async_std::task::spawn(driver)));
        }
        ("executor", _) => nsq_async_std::set_executor(|driver| smol::spawn(driver).detach()),
        (other, _) => {
            return Err(format!(
                "-drivers must be thread or executor, not {other:?}"
            ));
        }
    }
    Ok(())
}
