//! What the client layer reads from the OS: the hostname it sends in IDENTIFY when the
//! configuration names none (go-nsq sends `os.Hostname()`), and the seed of a core's RNG when
//! the user sets none. The core itself never asks the OS anything.

use std::ffi::OsStr;
use std::fmt::Display;
use std::hash::{BuildHasher, Hasher};

/// The OS hostname (the `gethostname` crate: every Unix and Windows), as
/// [`hostname_from_os`] turns it into what goes on the wire.
pub(crate) fn os_hostname() -> Option<String> {
    hostname_from_os(&gethostname::gethostname())
}

/// A random seed for a core's RNG (jitter, random connection choice), from the OS's random
/// source, or from a randomly keyed hasher when the OS has none to give.
pub(crate) fn random_seed() -> u64 {
    seed_or_fallback(
        getrandom::u64(),
        &std::collections::hash_map::RandomState::new(),
        u64::from(std::process::id()),
    )
}

/// The hostname to send for the OS's answer `name`: trimmed, `None` when empty or not UTF-8
/// (IDENTIFY is JSON, and a mangled name would be wrong in nsqd's stats; it then shows no
/// hostname).
fn hostname_from_os(name: &OsStr) -> Option<String> {
    let name = name.to_str()?.trim();
    (!name.is_empty()).then(|| name.to_owned())
}

/// The seed for a core's RNG: `os`, the OS's random source's answer, or when the OS has none
/// to give (a sandbox without `getrandom(2)` or `/dev/urandom`),
/// [`seed_from_entropy`]`(entropy, salt)` with a warning. The seed is not secret: it only
/// spreads reconnects and lookups.
fn seed_or_fallback<E: Display>(os: Result<u64, E>, entropy: &impl BuildHasher, salt: u64) -> u64 {
    os.unwrap_or_else(|e| {
        tracing::warn!(error = %e, "OS random source unavailable; seeding from the hasher keys");
        seed_from_entropy(entropy, salt)
    })
}

/// A seed from caller-supplied entropy: a keyed hasher (randomly keyed by the OS) fed `salt`
/// (the process id). Pure: the same hasher keys and salt give the same seed.
fn seed_from_entropy(entropy: &impl BuildHasher, salt: u64) -> u64 {
    let mut h = entropy.build_hasher();
    h.write_u64(salt);
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::{BuildHasherDefault, DefaultHasher, RandomState};

    #[test]
    fn hostname_is_trimmed_and_never_empty() {
        assert_eq!(
            hostname_from_os(OsStr::new("box.example\n")).as_deref(),
            Some("box.example")
        );
        assert_eq!(hostname_from_os(OsStr::new("  ")), None);
    }

    #[test]
    fn seeds_come_from_the_os_or_the_hasher() {
        let fixed = BuildHasherDefault::<DefaultHasher>::default();
        assert_eq!(seed_or_fallback(Ok::<u64, &str>(42), &fixed, 7), 42);
        let fallback = seed_or_fallback(Err("no entropy"), &fixed, 7);
        assert_eq!(fallback, seed_from_entropy(&fixed, 7));
        assert_eq!(seed_from_entropy(&fixed, 7), seed_from_entropy(&fixed, 7));
        assert_ne!(seed_from_entropy(&fixed, 7), seed_from_entropy(&fixed, 8));
        let _seed = seed_from_entropy(&RandomState::new(), std::process::id().into());
        let _random = random_seed();
    }
}
