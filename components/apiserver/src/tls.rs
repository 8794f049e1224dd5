//! TLS for kiln-apiserver (rustls, ring): the serving configuration (server certificate, and client
//! certificates verified against --client-ca-file but optional, so health and version stay reachable
//! without one), and the accept-any verifier its own outbound clients use where upstream does not verify.

use std::sync::Arc;

use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("reading {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path} holds no PEM certificate")]
    NoCertificate { path: String },
    #[error("{path} holds no PEM private key")]
    NoKey { path: String },
    #[error("TLS configuration: {0}")]
    Rustls(#[from] rustls::Error),
    #[error("client CA: {0}")]
    Verifier(#[from] rustls::server::VerifierBuilderError),
}

fn open(path: &str) -> Result<std::io::BufReader<std::fs::File>, TlsError> {
    std::fs::File::open(path)
        .map(std::io::BufReader::new)
        .map_err(|source| TlsError::Read {
            path: path.into(),
            source,
        })
}

pub fn load_certs(path: &str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = rustls_pemfile::certs(&mut open(path)?)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| TlsError::Read {
            path: path.into(),
            source,
        })?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate { path: path.into() });
    }
    Ok(certs)
}

pub fn load_key(path: &str) -> Result<PrivateKeyDer<'static>, TlsError> {
    rustls_pemfile::private_key(&mut open(path)?)
        .map_err(|source| TlsError::Read {
            path: path.into(),
            source,
        })?
        .ok_or_else(|| TlsError::NoKey { path: path.into() })
}

/// Server config offering h2 and http/1.1; `client_ca` = None disables client-certificate auth.
pub fn server_config(
    cert_file: &str,
    key_file: &str,
    client_ca: Option<&str>,
) -> Result<ServerConfig, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?;
    let builder = match client_ca {
        Some(ca) => {
            let mut roots = RootCertStore::empty();
            for cert in load_certs(ca)? {
                roots.add(cert)?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .allow_unauthenticated()
                .build()?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_single_cert(load_certs(cert_file)?, load_key(key_file)?)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}
/// The verifier for kubelets without --kubelet-certificate-authority and APIServices with
/// insecureSkipTLSVerify (shared with the kubelet's HTTPS probes).
pub use kiln_common::any_server_cert::AnyServerCert;
