//! Making keys and certificates with rcgen: self-signed CAs, leaves issued by a CA, loading a CA back.
//! Keys are ECDSA P-256 (what rcgen generates with ring).

use std::net::IpAddr;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType, SerialNumber,
};
use time::OffsetDateTime;

use crate::tree::Usage;
use crate::validity::Validity;

#[derive(Debug, thiserror::Error)]
pub enum IssueError {
    #[error("generating a key pair: {0}")]
    KeyGen(#[source] rcgen::Error),
    #[error("parsing a private key: {0}")]
    ParseKey(#[source] rcgen::Error),
    #[error("parsing the CA certificate: {0}")]
    ParseCa(#[source] rcgen::Error),
    #[error("invalid subject alternative name {name:?}: {source}")]
    BadSan {
        name: String,
        #[source]
        source: rcgen::Error,
    },
    #[error("signing the certificate for {cn:?}: {source}")]
    Sign {
        cn: String,
        #[source]
        source: rcgen::Error,
    },
}

/// A certificate with its private key, both PEM.
#[derive(Clone, PartialEq, Eq)]
pub struct CertAndKey {
    pub cert_pem: String,
    pub key_pem: String,
}

impl std::fmt::Debug for CertAndKey {
    // Never print private keys, even in debug output.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertAndKey")
            .field("cert_pem", &self.cert_pem)
            .field("key_pem", &"<redacted>")
            .finish()
    }
}

/// A CA that can issue certificates.
pub struct CertAuthority {
    pub cert_pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl std::fmt::Debug for CertAuthority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertAuthority")
            .field("cert_pem", &self.cert_pem)
            .finish()
    }
}

/// What a leaf certificate should say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeafRequest {
    pub common_name: String,
    pub organizations: Vec<String>,
    pub usages: Vec<Usage>,
    /// DNS names or IP addresses.
    pub sans: Vec<String>,
}

fn random_serial() -> SerialNumber {
    let mut bytes: [u8; 16] = rand::random();
    // A positive integer, as RFC 5280 requires.
    bytes[0] &= 0x7f;
    SerialNumber::from_slice(&bytes)
}

fn subject(cn: &str, organizations: &[String]) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    for o in organizations {
        dn.push(DnType::OrganizationName, o.as_str());
    }
    dn.push(DnType::CommonName, cn);
    dn
}

fn san(name: &str) -> Result<SanType, IssueError> {
    if let Ok(ip) = name.parse::<IpAddr>() {
        return Ok(SanType::IpAddress(ip));
    }
    let dns = name
        .to_string()
        .try_into()
        .map_err(|source| IssueError::BadSan {
            name: name.to_string(),
            source,
        })?;
    Ok(SanType::DnsName(dns))
}

impl CertAuthority {
    /// Generates a new self-signed CA.
    pub fn generate(
        common_name: &str,
        validity: &Validity,
    ) -> Result<(Self, CertAndKey), IssueError> {
        let key = KeyPair::generate().map_err(IssueError::KeyGen)?;
        let mut params = CertificateParams::default();
        params.distinguished_name = subject(common_name, &[]);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
        ];
        params.serial_number = Some(random_serial());
        (params.not_before, params.not_after) = validity.window(OffsetDateTime::now_utc(), true);
        let cert = params
            .self_signed(&key)
            .map_err(|source| IssueError::Sign {
                cn: common_name.to_string(),
                source,
            })?;
        let pair = CertAndKey {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        };
        Ok((
            CertAuthority {
                cert_pem: pair.cert_pem.clone(),
                issuer: Issuer::new(params, key),
            },
            pair,
        ))
    }

    /// Loads an existing CA from its certificate and key PEM.
    pub fn load(cert_pem: &str, key_pem: &str) -> Result<Self, IssueError> {
        let key = KeyPair::from_pem(key_pem).map_err(IssueError::ParseKey)?;
        let issuer = Issuer::from_ca_cert_pem(cert_pem, key).map_err(IssueError::ParseCa)?;
        Ok(CertAuthority {
            cert_pem: cert_pem.to_string(),
            issuer,
        })
    }

    /// Issues a leaf certificate with a fresh key.
    pub fn issue(&self, req: &LeafRequest, validity: &Validity) -> Result<CertAndKey, IssueError> {
        let key = KeyPair::generate().map_err(IssueError::KeyGen)?;
        let mut params = CertificateParams::default();
        params.distinguished_name = subject(&req.common_name, &req.organizations);
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = req
            .usages
            .iter()
            .map(|u| match u {
                Usage::Server => ExtendedKeyUsagePurpose::ServerAuth,
                Usage::Client => ExtendedKeyUsagePurpose::ClientAuth,
            })
            .collect();
        params.subject_alt_names = req.sans.iter().map(|s| san(s)).collect::<Result<_, _>>()?;
        params.use_authority_key_identifier_extension = true;
        params.serial_number = Some(random_serial());
        (params.not_before, params.not_after) = validity.window(OffsetDateTime::now_utc(), false);
        let cert = params
            .signed_by(&key, &self.issuer)
            .map_err(|source| IssueError::Sign {
                cn: req.common_name.clone(),
                source,
            })?;
        Ok(CertAndKey {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }
}

/// A new key pair (private PKCS#8 PEM, public SPKI PEM), e.g. the service-account signing key.
pub fn generate_key_pair() -> Result<(String, String), IssueError> {
    let key = KeyPair::generate().map_err(IssueError::KeyGen)?;
    Ok((key.serialize_pem(), key.public_key_pem()))
}
