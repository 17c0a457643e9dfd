//! The seed of a state machine's RNG when the user sets none. The OS randomness is the
//! adapter's to read (`RandomState::new()` draws on it); the mixing is done here, once, so the
//! core stays sans-IO and deterministic for a given input.

use std::hash::{BuildHasher, Hasher};

/// A seed for a core's RNG (jitter, random connection choice) from caller-supplied entropy:
/// a keyed hasher (the adapters pass `std::hash::RandomState::new()`, randomly keyed by the
/// OS) fed `salt` (the adapters pass the process id).
///
/// Pure: the same hasher keys and salt give the same seed.
///
/// ```
/// use nsq_proto::adapter::seed_from_entropy;
/// use std::hash::{BuildHasherDefault, DefaultHasher, RandomState};
///
/// let fixed = BuildHasherDefault::<DefaultHasher>::default();
/// assert_eq!(seed_from_entropy(&fixed, 7), seed_from_entropy(&fixed, 7));
/// assert_ne!(seed_from_entropy(&fixed, 7), seed_from_entropy(&fixed, 8));
/// // What an adapter does:
/// let _seed = seed_from_entropy(&RandomState::new(), std::process::id().into());
/// ```
pub fn seed_from_entropy(entropy: &impl BuildHasher, salt: u64) -> u64 {
    let mut h = entropy.build_hasher();
    h.write_u64(salt);
    h.finish()
}
