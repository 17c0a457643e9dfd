//! Validated topic and channel names.
//!
//! nsqd accepts names of 1 to 64 bytes drawn from `[.a-zA-Z0-9_-]`, optionally ending in
//! `#ephemeral` (the suffix counts toward the 64). Validation happens once, when a [`Topic`] or
//! [`Channel`] is built, so the encoders never have to fail on a name.

use std::fmt;

/// The longest name nsqd accepts, in bytes, including an `#ephemeral` suffix.
pub const MAX_NAME_LEN: usize = 64;

/// The suffix that makes a topic or channel ephemeral.
pub const EPHEMERAL_SUFFIX: &str = "#ephemeral";

/// Why a topic or channel name was rejected.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum NameError {
    /// The name is empty.
    Empty,
    /// The name is longer than [`MAX_NAME_LEN`] bytes.
    TooLong {
        /// The length of the rejected name, in bytes.
        len: usize,
    },
    /// The name contains a byte outside `[.a-zA-Z0-9_-]` (outside the `#ephemeral` suffix).
    InvalidChar {
        /// Byte offset of the first offending character.
        index: usize,
        /// The offending character.
        ch: char,
    },
}

impl fmt::Display for NameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NameError::Empty => f.write_str("name is empty"),
            NameError::TooLong { len } => {
                write!(f, "name is {len} bytes long, the limit is {MAX_NAME_LEN}")
            }
            NameError::InvalidChar { index, ch } => write!(
                f,
                "invalid character {ch:?} at byte {index}: names use only [.a-zA-Z0-9_-] with an optional #ephemeral suffix"
            ),
        }
    }
}

impl std::error::Error for NameError {}

fn valid_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-')
}

/// Checks a topic or channel name against nsqd's rules.
pub fn validate_name(name: &str) -> Result<(), NameError> {
    if name.is_empty() {
        return Err(NameError::Empty);
    }
    if name.len() > MAX_NAME_LEN {
        return Err(NameError::TooLong { len: name.len() });
    }
    let stem = name.strip_suffix(EPHEMERAL_SUFFIX).unwrap_or(name);
    if stem.is_empty() {
        return Err(NameError::Empty);
    }
    if let Some(index) = stem.bytes().position(|b| !valid_name_byte(b)) {
        let ch = name[index..].chars().next().unwrap_or('\u{fffd}');
        return Err(NameError::InvalidChar { index, ch });
    }
    Ok(())
}

macro_rules! name_type {
    ($(#[$doc:meta])* $ty:ident) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $ty(Box<str>);

        impl $ty {
            /// Validates `name` and wraps it.
            pub fn new(name: impl AsRef<str>) -> Result<Self, NameError> {
                let name = name.as_ref();
                validate_name(name)?;
                Ok(Self(name.into()))
            }

            /// The name as a string slice.
            pub fn as_str(&self) -> &str {
                &self.0
            }

            /// Whether the name ends in `#ephemeral`.
            pub fn is_ephemeral(&self) -> bool {
                self.0.ends_with(EPHEMERAL_SUFFIX)
            }
        }

        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl fmt::Debug for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Debug::fmt(&*self.0, f)
            }
        }

        impl AsRef<str> for $ty {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl TryFrom<&str> for $ty {
            type Error = NameError;
            fn try_from(name: &str) -> Result<Self, NameError> {
                Self::new(name)
            }
        }

        impl TryFrom<String> for $ty {
            type Error = NameError;
            fn try_from(name: String) -> Result<Self, NameError> {
                validate_name(&name)?;
                Ok(Self(name.into_boxed_str()))
            }
        }

        impl std::str::FromStr for $ty {
            type Err = NameError;
            fn from_str(name: &str) -> Result<Self, NameError> {
                Self::new(name)
            }
        }
    };
}

name_type! {
    /// A validated NSQ topic name.
    ///
    /// ```
    /// # use nsq_proto::Topic;
    /// assert!(Topic::new("events.v1").is_ok());
    /// assert!(Topic::new("scratch#ephemeral").unwrap().is_ephemeral());
    /// assert!(Topic::new("no spaces").is_err());
    /// ```
    Topic
}

name_type! {
    /// A validated NSQ channel name (same rules as topics).
    ///
    /// ```
    /// # use nsq_proto::Channel;
    /// assert!(Channel::new("archive").is_ok());
    /// assert!(Channel::new("").is_err());
    /// ```
    Channel
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_edges() {
        assert!(validate_name("a").is_ok());
        assert!(validate_name(&"a".repeat(64)).is_ok());
        assert!(validate_name(&format!("{}#ephemeral", "a".repeat(54))).is_ok());
        assert!(validate_name("A.b_c-9").is_ok());
    }

    #[test]
    fn rejects() {
        assert_eq!(validate_name(""), Err(NameError::Empty));
        assert_eq!(validate_name("#ephemeral"), Err(NameError::Empty));
        assert_eq!(
            validate_name(&"a".repeat(65)),
            Err(NameError::TooLong { len: 65 })
        );
        assert_eq!(
            validate_name(&format!("{}#ephemeral", "a".repeat(55))),
            Err(NameError::TooLong { len: 65 })
        );
        assert_eq!(
            validate_name("a b"),
            Err(NameError::InvalidChar { index: 1, ch: ' ' })
        );
        assert_eq!(
            validate_name("a#ephemeralx"),
            Err(NameError::InvalidChar { index: 1, ch: '#' })
        );
        assert_eq!(
            validate_name("hé"),
            Err(NameError::InvalidChar { index: 1, ch: 'é' })
        );
    }
}
