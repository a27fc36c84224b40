//! Throwaway TLS certificates (rcgen) for the harness's TLS servers: a CA,
//! a server certificate it signed for `127.0.0.1` and `localhost`, and a
//! second CA that signed nothing (the wrong one to trust).

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, KeyUsagePurpose,
};

/// The files of [`write_certs`].
#[derive(Debug, Clone)]
pub struct TestCerts {
    /// PEM of the CA that signed the server certificate.
    pub ca: PathBuf,
    /// PEM of a CA that signed nothing the servers present.
    pub other_ca: PathBuf,
    /// The server's certificate (PEM), for `127.0.0.1` and `localhost`.
    pub cert: PathBuf,
    /// The server's private key (PEM), owned by the server's user, 0600.
    pub key: PathBuf,
}

/// Names the server certificate is valid for.
pub const SERVER_NAMES: [&str; 2] = ["127.0.0.1", "localhost"];

fn ca(name: &str) -> CertifiedIssuer<'static, KeyPair> {
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let key = KeyPair::generate().expect("CA key");
    CertifiedIssuer::self_signed(params, key).expect("self-signed CA")
}

/// Writes a fresh CA, a server certificate and key it signed, and an
/// unrelated CA into `dir`. When running as root the key goes to `owner`
/// (the server's system user); it is mode 0600 (PostgreSQL refuses a key
/// others can read).
pub fn write_certs(dir: &Path, owner: &str) -> TestCerts {
    use std::os::unix::fs::PermissionsExt;
    let ca_issuer = ca("batchpool test CA");
    let other = ca("batchpool unrelated CA");
    let mut params =
        CertificateParams::new(SERVER_NAMES.map(String::from).to_vec()).expect("server params");
    params
        .distinguished_name
        .push(DnType::CommonName, "batchpool test server");
    let key = KeyPair::generate().expect("server key");
    let cert = params.signed_by(&key, &ca_issuer).expect("server cert");

    let certs = TestCerts {
        ca: dir.join("ca.pem"),
        other_ca: dir.join("other-ca.pem"),
        cert: dir.join("server.crt"),
        key: dir.join("server.key"),
    };
    let write = |path: &Path, text: &str| {
        std::fs::write(path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    };
    write(&certs.ca, &ca_issuer.pem());
    write(&certs.other_ca, &other.pem());
    write(&certs.cert, &cert.pem());
    write(&certs.key, &key.serialize_pem());
    std::fs::set_permissions(&certs.key, std::fs::Permissions::from_mode(0o600))
        .expect("chmod 0600 server.key");
    if super::util::is_root() {
        for file in [&certs.cert, &certs.key] {
            let ok = std::process::Command::new("chown")
                .arg(owner)
                .arg(file)
                .status()
                .is_ok_and(|s| s.success());
            assert!(ok, "chown {owner} {} failed", file.display());
        }
    }
    certs
}
