//! The `tls`, `snappy` and `deflate` cargo features: with a feature on, asking for its layer is
//! accepted; with it off, asking is a typed error naming the option and the feature (never a
//! panic, never a silent fallback to plain text or no compression). `.ci/run` runs this with
//! the default features and with `--no-default-features`.

use nsq_proto::config::OptionError;
use nsq_proto::{Compression, Config, ConfigError, Connection, ConnectionConfig, Role};

mod common;

fn no_files(_: std::path::PathBuf) -> std::io::Result<Vec<u8>> {
    Err(std::io::ErrorKind::NotFound.into())
}

/// `option` set to true in a `Config`: accepted when `built`, else refused as disabled.
fn check_option(option: &str, feature: &'static str, built: bool) {
    let json = format!(r#"{{"{option}": true, "tls_insecure_skip_verify": true}}"#);
    let parsed = Config::from_json(&json);
    if built {
        let config = parsed.unwrap_or_else(|e| panic!("{option}: {e}"));
        let conn = config.connection_config(no_files).unwrap();
        match option {
            "tls_v1" => assert!(conn.tls.is_some()),
            "snappy" => assert_eq!(conn.compression, Compression::Snappy),
            _ => assert!(matches!(conn.compression, Compression::Deflate { .. })),
        }
    } else {
        let err = parsed.unwrap_err();
        assert_eq!(
            err,
            OptionError::FeatureDisabled {
                option: option.into(),
                feature,
            }
        );
        assert_eq!(err.option(), option);
        let shown = err.to_string();
        assert!(
            shown.contains(&format!("`{feature}` cargo feature is off")),
            "{shown}"
        );
        // The same through `set` + `validate` (the command-line path).
        let mut config = Config::default();
        config.set_str(option, "true").unwrap();
        assert!(matches!(
            config.validate(),
            Err(OptionError::FeatureDisabled { .. })
        ));
        assert!(matches!(
            config.consumer_config(no_files),
            Err(OptionError::FeatureDisabled { .. })
        ));
    }
}

#[test]
fn tls_option_follows_the_feature() {
    check_option("tls_v1", "tls", cfg!(feature = "tls"));
}

#[test]
fn snappy_option_follows_the_feature() {
    check_option("snappy", "snappy", cfg!(feature = "snappy"));
}

#[test]
fn deflate_option_follows_the_feature() {
    check_option("deflate", "deflate", cfg!(feature = "deflate"));
}

#[test]
fn compression_in_a_connection_config_follows_the_feature() {
    for (compression, feature, built) in [
        (Compression::Snappy, "snappy", cfg!(feature = "snappy")),
        (
            Compression::Deflate { level: 6 },
            "deflate",
            cfg!(feature = "deflate"),
        ),
    ] {
        let config = ConnectionConfig {
            compression,
            ..ConnectionConfig::default()
        };
        let made = Connection::new(config, Role::Producer, "127.0.0.1:4150", common::t0());
        if built {
            assert!(made.is_ok(), "{compression:?}");
        } else {
            let Err(err) = made else {
                panic!("{compression:?} accepted without its feature");
            };
            assert_eq!(err, ConfigError::FeatureDisabled(feature));
            assert!(err.to_string().contains(feature), "{err}");
        }
    }
}

#[test]
fn no_compression_and_no_tls_work_in_every_build() {
    let config = Config::from_json(r#"{"max_in_flight": 3}"#).unwrap();
    let conn = config.connection_config(no_files).unwrap();
    assert!(conn.tls.is_none());
    assert_eq!(conn.compression, Compression::None);
    assert!(Connection::new(conn, Role::Producer, "127.0.0.1:4150", common::t0()).is_ok());
}
