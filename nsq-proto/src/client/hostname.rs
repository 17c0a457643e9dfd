//! Which hostname an adapter sends in IDENTIFY when the configuration names none (go-nsq
//! sends `os.Hostname()`). The adapter asks the OS (the `gethostname` crate, which works on
//! every Unix and on Windows); this module turns the OS's answer into what goes on the wire, the
//! same way in every adapter, and stays sans-IO.

use std::ffi::OsStr;

/// The hostname to send for the OS's answer `name` (an adapter passes
/// `gethostname::gethostname()`): trimmed, `None` when empty or not UTF-8 (IDENTIFY is JSON,
/// and a mangled name would be wrong in nsqd's stats; it then shows no hostname).
///
/// ```
/// use nsq_proto::client::hostname_from_os;
/// use std::ffi::OsStr;
///
/// assert_eq!(hostname_from_os(OsStr::new("box.example\n")).as_deref(), Some("box.example"));
/// assert_eq!(hostname_from_os(OsStr::new("  ")), None);
/// ```
pub fn hostname_from_os(name: &OsStr) -> Option<String> {
    let name = name.to_str()?.trim();
    (!name.is_empty()).then(|| name.to_owned())
}
