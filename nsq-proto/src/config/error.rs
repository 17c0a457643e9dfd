//! [`OptionError`]: why an option name, value or combination was refused.

use std::fmt;
use std::path::PathBuf;

/// A configuration option was unknown, could not be parsed, or is out of range. Every variant
/// names the option ([`OptionError::option`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum OptionError {
    /// No option has this name.
    Unknown {
        /// The name given.
        option: String,
    },
    /// The value has the wrong type or syntax.
    Invalid {
        /// The option.
        option: String,
        /// The value given, as text.
        value: String,
        /// What was expected.
        expected: &'static str,
    },
    /// The value is outside the option's range.
    OutOfRange {
        /// The option.
        option: String,
        /// The value given, as text.
        value: String,
        /// The allowed range, as text.
        range: &'static str,
    },
    /// The option conflicts with another one, or misses a companion.
    Conflict {
        /// The option.
        option: String,
        /// Why, in words.
        reason: String,
    },
    /// A TLS file could not be read or holds nothing usable.
    TlsFile {
        /// The option naming the file.
        option: String,
        /// The path.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// The option asks for something this build leaves out: the named cargo feature of
    /// nsq-proto (`tls`, `snappy`, `deflate`) is off.
    FeatureDisabled {
        /// The option.
        option: String,
        /// The cargo feature it needs.
        feature: &'static str,
    },
}

impl OptionError {
    /// The name of the option at fault.
    pub fn option(&self) -> &str {
        match self {
            OptionError::Unknown { option }
            | OptionError::Invalid { option, .. }
            | OptionError::OutOfRange { option, .. }
            | OptionError::Conflict { option, .. }
            | OptionError::TlsFile { option, .. }
            | OptionError::FeatureDisabled { option, .. } => option,
        }
    }
}

impl fmt::Display for OptionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OptionError::Unknown { option } => write!(f, "unknown option {option:?}"),
            OptionError::Invalid {
                option,
                value,
                expected,
            } => write!(f, "invalid {option} {value}: expected {expected}"),
            OptionError::OutOfRange {
                option,
                value,
                range,
            } => write!(f, "invalid {option} {value}: must be {range}"),
            OptionError::Conflict { option, reason } => write!(f, "invalid {option}: {reason}"),
            OptionError::TlsFile {
                option,
                path,
                reason,
            } => write!(f, "{option} {}: {reason}", path.display()),
            OptionError::FeatureDisabled { option, feature } => write!(
                f,
                "{option} needs {feature}, which this build leaves out (nsq-proto's `{feature}` \
                 cargo feature is off)"
            ),
        }
    }
}

impl std::error::Error for OptionError {}
