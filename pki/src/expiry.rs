//! Reading certificates back: subject, issuer, SANs and expiry, for `kiln certs check-expiration` and
//! for tests that check what was written.

use std::path::Path;

use time::OffsetDateTime;
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::{FromDer, X509Certificate};

use crate::files::{read_string, FileError};
use crate::tree::CERT_TREE;

#[derive(Debug, thiserror::Error)]
pub enum ExpiryError {
    #[error(transparent)]
    File(#[from] FileError),
    #[error("no PEM certificate found in {0}")]
    NoPem(String),
    #[error("parsing certificate {0}: {1}")]
    Parse(String, String),
}

/// What a certificate says about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertInfo {
    pub subject_cn: String,
    pub organizations: Vec<String>,
    pub issuer_cn: String,
    pub not_before: OffsetDateTime,
    pub not_after: OffsetDateTime,
    pub is_ca: bool,
    /// DNS names and IP addresses, as strings.
    pub sans: Vec<String>,
}

impl CertInfo {
    pub fn remaining(&self, now: OffsetDateTime) -> time::Duration {
        self.not_after - now
    }
}

/// DER of the first certificate in a PEM text.
pub fn first_cert_der(pem: &str, what: &str) -> Result<Vec<u8>, ExpiryError> {
    let mut reader = pem.as_bytes();
    let first = rustls_pemfile::certs(&mut reader).next();
    match first {
        Some(Ok(der)) => Ok(der.to_vec()),
        Some(Err(e)) => Err(ExpiryError::Parse(what.into(), e.to_string())),
        None => Err(ExpiryError::NoPem(what.into())),
    }
}

/// Parses a PEM certificate.
pub fn parse_cert_pem(pem: &str, what: &str) -> Result<CertInfo, ExpiryError> {
    let der = first_cert_der(pem, what)?;
    let (_, cert) = X509Certificate::from_der(&der)
        .map_err(|e| ExpiryError::Parse(what.into(), e.to_string()))?;
    let cn = |name: &x509_parser::x509::X509Name| {
        name.iter_common_name()
            .next()
            .and_then(|a| a.as_str().ok())
            .unwrap_or_default()
            .to_string()
    };
    let organizations = cert
        .subject()
        .iter_organization()
        .filter_map(|a| a.as_str().ok().map(str::to_string))
        .collect();
    let mut sans = Vec::new();
    if let Ok(Some(ext)) = cert.subject_alternative_name() {
        for n in &ext.value.general_names {
            match n {
                GeneralName::DNSName(d) => sans.push(d.to_string()),
                GeneralName::IPAddress(b) => {
                    let ip = match b.len() {
                        4 => std::net::IpAddr::from(<[u8; 4]>::try_from(*b).unwrap_or_default()),
                        16 => std::net::IpAddr::from(<[u8; 16]>::try_from(*b).unwrap_or_default()),
                        _ => continue,
                    };
                    sans.push(ip.to_string());
                }
                _ => {}
            }
        }
    }
    Ok(CertInfo {
        subject_cn: cn(cert.subject()),
        organizations,
        issuer_cn: cn(cert.issuer()),
        not_before: cert.validity().not_before.to_datetime(),
        not_after: cert.validity().not_after.to_datetime(),
        is_ca: cert.is_ca(),
        sans,
    })
}

/// Reads one certificate file.
pub fn read_cert(path: &Path) -> Result<CertInfo, ExpiryError> {
    let pem = read_string(path)?;
    parse_cert_pem(&pem, &path.display().to_string())
}

/// Expiry of every certificate of the tree present under `dir`, by spec name (missing ones skipped).
pub fn expiry(dir: &Path) -> Result<Vec<(String, CertInfo)>, ExpiryError> {
    let mut out = Vec::new();
    for spec in CERT_TREE {
        let path = dir.join(spec.cert_file());
        if path.exists() {
            out.push((spec.name.to_string(), read_cert(&path)?));
        }
    }
    Ok(out)
}

/// The DER SubjectPublicKeyInfo of a PEM certificate: what kubeadm's `--discovery-token-ca-cert-hash
/// sha256:…` pins (its sha256).
pub fn spki_der(pem: &str, what: &str) -> Result<Vec<u8>, ExpiryError> {
    let der = first_cert_der(pem, what)?;
    let (_, cert) = X509Certificate::from_der(&der)
        .map_err(|e| ExpiryError::Parse(what.into(), e.to_string()))?;
    Ok(cert.public_key().raw.to_vec())
}
