//! HTTPS that asks for (but does not require) a client certificate and hands the presented chain
//! to the request: whom to trust comes from a ConfigMap that changes at run time, so the chain is
//! judged per request against the trust of that moment ([`super::trust`]), not in the handshake.
//! The handshake still proves the client holds the certificate's key.

use std::sync::Arc;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, SignatureScheme};

/// Takes any client certificate whose handshake signature is good; verification comes later.
#[derive(Debug)]
pub struct DeferredClientCert {
    provider: Arc<CryptoProvider>,
}

impl DeferredClientCert {
    pub fn new(provider: Arc<CryptoProvider>) -> DeferredClientCert {
        DeferredClientCert { provider }
    }
}

impl ClientCertVerifier for DeferredClientCert {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
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

/// The serving configuration: `--tls-cert-file`/`--tls-private-key-file`, optional client
/// certificates, HTTP/2 and HTTP/1.1.
pub fn server_config(
    cert: &std::path::Path,
    key: &std::path::Path,
) -> Result<Arc<rustls::ServerConfig>, crate::server::ServeError> {
    // Read and checked as the other HTTPS subcommands do; only the client side differs.
    let base = crate::server::tls_config(cert, key)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let certs: Vec<CertificateDer<'static>> = std::fs::read(cert)
        .ok()
        .map(|pem| {
            rustls_pemfile::certs(&mut pem.as_slice())
                .flatten()
                .collect()
        })
        .unwrap_or_default();
    let key_der = std::fs::read(key).ok().and_then(|pem| {
        rustls_pemfile::private_key(&mut pem.as_slice())
            .ok()
            .flatten()
    });
    let Some(key_der) = key_der else {
        return Ok(base);
    };
    let mut config = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()?
        .with_client_cert_verifier(Arc::new(DeferredClientCert::new(provider)))
        .with_single_cert(certs, key_der)?;
    config.alpn_protocols = base.alpn_protocols.clone();
    Ok(Arc::new(config))
}
