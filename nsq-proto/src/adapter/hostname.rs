//! Which OS hostname an adapter sends in IDENTIFY when the configuration names none (go-nsq
//! sends `os.Hostname()`). The choice is made here once; the adapter does the reading (files,
//! environment), so this stays sans-IO.

/// Files holding the OS hostname (Linux and most Unix-likes), in order of preference.
pub const HOSTNAME_FILES: [&str; 2] = ["/proc/sys/kernel/hostname", "/etc/hostname"];

/// Environment variables naming the host (most shells, Windows), tried after the files.
pub const HOSTNAME_VARS: [&str; 2] = ["HOSTNAME", "COMPUTERNAME"];

/// The OS hostname: the first of [`HOSTNAME_FILES`] `read_file` can read, else the first of
/// [`HOSTNAME_VARS`] `var` knows; trimmed, `None` when empty or unknown.
///
/// Adapters pass `|p| std::fs::read_to_string(p).ok()` and `|v| std::env::var(v).ok()`.
///
/// ```
/// use nsq_proto::adapter::os_hostname;
///
/// let from_file = os_hostname(|p| (p == "/etc/hostname").then(|| "box\n".into()), |_| None);
/// assert_eq!(from_file.as_deref(), Some("box"));
/// let from_env = os_hostname(|_| None, |v| (v == "COMPUTERNAME").then(|| "PC".into()));
/// assert_eq!(from_env.as_deref(), Some("PC"));
/// assert_eq!(os_hostname(|_| Some("  \n".into()), |_| None), None);
/// ```
pub fn os_hostname(
    mut read_file: impl FnMut(&str) -> Option<String>,
    mut var: impl FnMut(&str) -> Option<String>,
) -> Option<String> {
    HOSTNAME_FILES
        .iter()
        .find_map(|p| read_file(p))
        .or_else(|| HOSTNAME_VARS.iter().find_map(|v| var(v)))
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
}
