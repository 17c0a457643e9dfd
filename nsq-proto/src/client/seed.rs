//! The seed of a state machine's RNG when the user sets none. The OS randomness is the
//! adapter's to read (`getrandom::u64()`); what to do with it, and without it, is decided here,
//! once, so the core stays sans-IO and every adapter behaves the same.

use std::fmt::Display;
use std::hash::{BuildHasher, Hasher};

/// The seed for a core's RNG (jitter, random connection choice): `os`, the OS's random source's
/// answer (the adapters pass `getrandom::u64()`), or when the OS has none to give (a sandbox
/// without `getrandom(2)` or `/dev/urandom`), [`seed_from_entropy`]`(entropy, salt)` with a
/// warning. The seed is not secret: it only spreads reconnects and lookups.
///
/// ```
/// use nsq_proto::client::seed_or_fallback;
/// use std::hash::{BuildHasherDefault, DefaultHasher};
///
/// let fixed = BuildHasherDefault::<DefaultHasher>::default();
/// assert_eq!(seed_or_fallback(Ok::<u64, &str>(42), &fixed, 7), 42);
/// let fallback = seed_or_fallback(Err("no entropy"), &fixed, 7);
/// assert_eq!(fallback, nsq_proto::client::seed_from_entropy(&fixed, 7));
/// ```
pub fn seed_or_fallback<E: Display>(
    os: Result<u64, E>,
    entropy: &impl BuildHasher,
    salt: u64,
) -> u64 {
    os.unwrap_or_else(|e| {
        tracing::warn!(error = %e, "OS random source unavailable; seeding from the hasher keys");
        seed_from_entropy(entropy, salt)
    })
}

/// A seed from caller-supplied entropy: a keyed hasher (the adapters pass
/// `std::hash::RandomState::new()`, randomly keyed by the OS) fed `salt` (the adapters pass
/// the process id). The fallback of [`seed_or_fallback`].
///
/// Pure: the same hasher keys and salt give the same seed.
///
/// ```
/// use nsq_proto::client::seed_from_entropy;
/// use std::hash::{BuildHasherDefault, DefaultHasher, RandomState};
///
/// let fixed = BuildHasherDefault::<DefaultHasher>::default();
/// assert_eq!(seed_from_entropy(&fixed, 7), seed_from_entropy(&fixed, 7));
/// assert_ne!(seed_from_entropy(&fixed, 7), seed_from_entropy(&fixed, 8));
/// let _seed = seed_from_entropy(&RandomState::new(), std::process::id().into());
/// ```
pub fn seed_from_entropy(entropy: &impl BuildHasher, salt: u64) -> u64 {
    let mut h = entropy.build_hasher();
    h.write_u64(salt);
    h.finish()
}
