//! The rustls client configuration of a [`TlsConfig`](super::TlsConfig): ring as the crypto
//! provider, and a certificate verifier for each libpq mode (nothing, the
//! chain, the chain and the host name).

use std::path::Path;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{WebPkiServerVerifier, verify_server_cert_signed_by_trust_anchor};
use rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

use crate::error::{Error, Kind};

/// What a connection checks of the server's certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verify {
    /// Nothing (the handshake's signatures only).
    Nothing,
    /// The chain, up to a trusted root.
    Chain,
    /// The chain and the host name.
    Full,
}

/// The rustls configuration that checks `verify` of the server's
/// certificate against the roots of the PEM file `root_cert` (else
/// Mozilla's), with the client certificate of the PEM files `cert` and
/// `key` when both are given; the files are read now.
pub(crate) fn client_config(
    verify: Verify,
    root_cert: Option<&Path>,
    cert: Option<&Path>,
    key: Option<&Path>,
) -> Result<ClientConfig, Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier: Arc<dyn ServerCertVerifier> = match verify {
        Verify::Nothing => Arc::new(ChainVerifier {
            roots: None,
            provider: Arc::clone(&provider),
        }),
        Verify::Chain => Arc::new(ChainVerifier {
            roots: Some(roots(root_cert)?),
            provider: Arc::clone(&provider),
        }),
        Verify::Full => WebPkiServerVerifier::builder_with_provider(
            Arc::new(roots(root_cert)?),
            Arc::clone(&provider),
        )
        .build()
        .map_err(|e| config_error("cannot build the certificate verifier", e))?,
    };
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| config_error("no TLS protocol version", e))?
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    match (cert, key) {
        (Some(cert), Some(key)) => {
            let chain = CertificateDer::pem_file_iter(cert)
                .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
                .map_err(|e| config_error(&format!("cannot read sslcert {}", cert.display()), e))?;
            let key = PrivateKeyDer::from_pem_file(key)
                .map_err(|e| config_error(&format!("cannot read sslkey {}", key.display()), e))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| config_error("unusable client certificate (sslcert, sslkey)", e))
        }
        _ => Ok(builder.with_no_client_auth()),
    }
}

fn config_error(what: &str, e: impl std::error::Error + Send + Sync + 'static) -> Error {
    Error::with_source(Kind::Config, what, e)
}

/// The roots to trust: those of `sslrootcert`, else Mozilla's.
fn roots(root_cert: Option<&Path>) -> Result<RootCertStore, Error> {
    let Some(path) = root_cert else {
        return Ok(RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        });
    };
    let what = || format!("cannot read sslrootcert {}", path.display());
    let mut roots = RootCertStore::empty();
    let certs = CertificateDer::pem_file_iter(path).map_err(|e| config_error(&what(), e))?;
    for cert in certs {
        let cert = cert.map_err(|e| config_error(&what(), e))?;
        roots.add(cert).map_err(|e| config_error(&what(), e))?;
    }
    if roots.is_empty() {
        return Err(Error::new(
            Kind::Config,
            format!("{}: no certificate in it", what()),
        ));
    }
    Ok(roots)
}

/// `prefer` and `require` (`roots` is `None`: libpq checks no certificate
/// there), and `verify-ca` (the chain must end at one of `roots`; the name
/// is not checked). In both, the handshake's signatures are still checked,
/// so the session is with the holder of the certificate's key.
#[derive(Debug)]
struct ChainVerifier {
    roots: Option<RootCertStore>,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for ChainVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if let Some(roots) = &self.roots {
            let cert = ParsedCertificate::try_from(end_entity)?;
            verify_server_cert_signed_by_trust_anchor(
                &cert,
                roots,
                intermediates,
                now,
                self.provider.signature_verification_algorithms.all,
            )?;
        }
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}
