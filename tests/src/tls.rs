//! Test-only TLS material: a certificate authority generated once per process and server
//! certificates signed by it.

use std::sync::{Arc, OnceLock};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// A throw-away certificate authority, generated per test process.
///
/// Client tests trust [`TestPki::ca_cert_der`] (or use [`TestPki::client_config`]); the broker
/// presents a certificate issued by this CA for `localhost` and `127.0.0.1` unless told to use
/// other names (see [`crate::NsqdBuilder::tls_server_names`]), which is how a test gets a
/// certificate for the wrong hostname.
pub struct TestPki {
    ca_cert: rcgen::Certificate,
    ca_key: KeyPair,
}

impl std::fmt::Debug for TestPki {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestPki").finish_non_exhaustive()
    }
}

/// A certificate chain and its private key, ready for a rustls server.
#[derive(Debug)]
pub struct ServerIdentity {
    /// The leaf certificate followed by the CA certificate.
    pub chain: Vec<CertificateDer<'static>>,
    /// The leaf's private key (PKCS#8).
    pub key: PrivateKeyDer<'static>,
}

impl Clone for ServerIdentity {
    fn clone(&self) -> Self {
        Self {
            chain: self.chain.clone(),
            key: self.key.clone_key(),
        }
    }
}

/// The ring crypto provider every rustls config of this crate uses.
pub(crate) fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

impl TestPki {
    /// The per-process CA, generated on first use.
    pub fn global() -> &'static TestPki {
        static PKI: OnceLock<TestPki> = OnceLock::new();
        PKI.get_or_init(|| TestPki::generate().expect("generating the test CA"))
    }

    /// Generates a fresh CA.
    pub fn generate() -> Result<Self, rcgen::Error> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, "nsq-test-broker CA");
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_key = KeyPair::generate()?;
        let ca_cert = params.self_signed(&ca_key)?;
        Ok(Self { ca_cert, ca_key })
    }

    /// The CA certificate, DER.
    pub fn ca_cert_der(&self) -> CertificateDer<'static> {
        self.ca_cert.der().clone()
    }

    /// The CA certificate, PEM.
    pub fn ca_cert_pem(&self) -> String {
        self.ca_cert.pem()
    }

    /// Issues a server certificate for the given DNS names / IP addresses.
    pub fn issue(&self, names: &[&str]) -> Result<ServerIdentity, rcgen::Error> {
        let names: Vec<String> = names.iter().map(|s| (*s).to_owned()).collect();
        let mut params = CertificateParams::new(names)?;
        params
            .distinguished_name
            .push(DnType::CommonName, "nsq-test-broker");
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.ca_cert, &self.ca_key)?;
        Ok(ServerIdentity {
            chain: vec![cert.der().clone(), self.ca_cert_der()],
            key: PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
        })
    }

    /// A rustls client configuration trusting only this CA.
    pub fn client_config(&self) -> Arc<rustls::ClientConfig> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.ca_cert_der()).expect("adding the test CA");
        let config = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .expect("ring supports the default protocol versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
        Arc::new(config)
    }
}

pub(crate) fn server_config(
    identity: &ServerIdentity,
) -> Result<Arc<rustls::ServerConfig>, rustls::Error> {
    let config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(identity.chain.clone(), identity.key.clone_key())?;
    Ok(Arc::new(config))
}
