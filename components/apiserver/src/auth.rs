//! Authentication (x509 client certificates: CN = user, O = groups, as kubeadm issues them) and the
//! request attributes authorization decides on (see `rbac` for the authorizers).

use x509_parser::prelude::{FromDer, X509Certificate};

#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("client certificate could not be parsed: {0}")]
    BadCertificate(String),
    #[error("client certificate has no common name")]
    NoCommonName,
}

/// Who is calling.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Identity {
    /// No credentials presented.
    Anonymous,
    User(User),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    pub name: String,
    pub groups: Vec<String>,
}

impl Identity {
    pub fn name(&self) -> &str {
        match self {
            Identity::Anonymous => "system:anonymous",
            Identity::User(u) => &u.name,
        }
    }
}

impl User {
    pub fn in_group(&self, group: &str) -> bool {
        self.groups.iter().any(|g| g == group)
    }
}

/// Reads user and groups from a (chain-verified) client certificate.
pub fn user_from_certificate(der: &[u8]) -> Result<User, AuthError> {
    let (_, cert) =
        X509Certificate::from_der(der).map_err(|e| AuthError::BadCertificate(e.to_string()))?;
    let subject = cert.subject();
    let name = subject
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())
        .ok_or(AuthError::NoCommonName)?
        .to_string();
    let mut groups: Vec<String> = subject
        .iter_organization()
        .filter_map(|o| o.as_str().ok().map(str::to_string))
        .collect();
    groups.push("system:authenticated".into());
    Ok(User { name, groups })
}

/// What a request wants to do, as upstream's authorizer attributes.
#[derive(Debug, Clone)]
pub enum Attributes<'a> {
    Resource {
        verb: &'a str,
        group: &'a str,
        resource: &'a str,
        subresource: Option<&'a str>,
        namespace: Option<&'a str>,
        name: Option<&'a str>,
    },
    NonResource {
        verb: &'a str,
        path: &'a str,
    },
}

/// Paths anyone may read, logged in or not (upstream's system:public-info-viewer).
pub fn is_public_path(path: &str) -> bool {
    matches!(path, "/healthz" | "/livez" | "/readyz" | "/version")
        || path.starts_with("/healthz/")
        || path.starts_with("/livez/")
        || path.starts_with("/readyz/")
}
