//! The server's TLS: the serving certificate (from --tls-cert-file/--tls-private-key-file, or self-signed
//! in memory for the node's name and IP, as upstream does without them) and client-certificate
//! verification against --client-ca-file. Clients without a certificate still complete the handshake and
//! are answered 401, so the failure is an HTTP status rather than a TLS alert.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};

use crate::config::ServerSettings;

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: no PEM certificate")]
    NoCertificate { path: PathBuf },
    #[error("{path}: no PEM private key")]
    NoKey { path: PathBuf },
    #[error("self-signed certificate: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("TLS configuration: {0}")]
    Rustls(#[from] rustls::Error),
    #[error("client CA: {0}")]
    Verifier(#[from] rustls::server::VerifierBuilderError),
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.into(),
        source,
    })
}

pub fn load_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let bytes = read(path)?;
    let certs = rustls_pemfile::certs(&mut bytes.as_slice())
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

fn load_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let bytes = read(path)?;
    rustls_pemfile::private_key(&mut bytes.as_slice())
        .map_err(|source| TlsError::Read {
            path: path.into(),
            source,
        })?
        .ok_or_else(|| TlsError::NoKey { path: path.into() })
}

/// A self-signed serving certificate for `<node>` and its IP (CN `<node>@<unix time>`, like upstream's).
pub fn self_signed(
    node_name: &str,
    node_ip: IpAddr,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), TlsError> {
    let mut params = rcgen::CertificateParams::new(vec![node_name.to_string()])?;
    params
        .subject_alt_names
        .push(rcgen::SanType::IpAddress(node_ip));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, format!("{node_name}@{now}"));
    params.is_ca = rcgen::IsCa::NoCa;
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    let key = rcgen::KeyPair::generate()?;
    let cert = params.self_signed(&key)?;
    Ok((
        vec![cert.der().clone()],
        PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
    ))
}

/// The rustls config: HTTP/1.1 only (exec upgrades), client certificates optional but verified.
pub fn server_config(
    settings: &ServerSettings,
    node_name: &str,
    node_ip: IpAddr,
) -> Result<ServerConfig, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?;
    let ca = settings.client_ca_file.as_deref().filter(|p| p.exists());
    let builder = match ca {
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
        None => {
            tracing::warn!(
                client_ca = ?settings.client_ca_file,
                "no client CA: the kubelet server answers 401 to everything but /healthz"
            );
            builder.with_no_client_auth()
        }
    };
    let (certs, key) = match &settings.tls {
        Some((cert, key)) => (load_certs(cert)?, load_key(key)?),
        None => self_signed(node_name, node_ip)?,
    };
    let mut config = builder.with_single_cert(certs, key)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}
