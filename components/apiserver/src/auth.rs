//! Authentication (x509 client certificates: CN = user, O = groups, as kubeadm issues them) and the
//! request attributes authorization decides on (see `rbac` for the authorizers).

use x509_parser::prelude::{FromDer, X509Certificate};

#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("client certificate could not be parsed: {0}")]
    BadCertificate(String),
    #[error("client certificate has no common name")]
    NoCommonName,
    #[error("client certificate is not valid now (valid from {not_before} to {not_after})")]
    OutsideValidity {
        not_before: String,
        not_after: String,
    },
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

/// Reads user and groups from a (chain-verified) client certificate. Its validity is checked again on
/// every request, as upstream's x509 authenticator does: TLS checked it at the handshake, but a resumed
/// session or a long-lived connection outlives a certificate (a kubelet whose rotation failed must be
/// refused once its certificate expires, not when it happens to reconnect).
pub fn user_from_certificate(der: &[u8]) -> Result<User, AuthError> {
    let (_, cert) =
        X509Certificate::from_der(der).map_err(|e| AuthError::BadCertificate(e.to_string()))?;
    let validity = cert.validity();
    if !validity.is_valid() {
        return Err(AuthError::OutsideValidity {
            not_before: validity.not_before.to_string(),
            not_after: validity.not_after.to_string(),
        });
    }
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

/// When a client certificate stops being valid: a connection it authenticated is closed then, so the
/// client must handshake again (and is refused with an expired certificate).
pub fn certificate_not_after(der: &[u8]) -> Option<std::time::SystemTime> {
    let (_, cert) = X509Certificate::from_der(der).ok()?;
    let secs = cert.validity().not_after.timestamp();
    Some(std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs.max(0) as u64))
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

#[cfg(test)]
mod tests {
    use super::*;

    fn cert(cn: &str, not_before: i64, not_after: i64) -> Vec<u8> {
        let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        p.distinguished_name.push(rcgen::DnType::CommonName, cn);
        p.distinguished_name
            .push(rcgen::DnType::OrganizationName, "system:nodes");
        let now = time::OffsetDateTime::now_utc();
        p.not_before = now + time::Duration::seconds(not_before);
        p.not_after = now + time::Duration::seconds(not_after);
        let key = rcgen::KeyPair::generate().unwrap();
        p.self_signed(&key).unwrap().der().to_vec()
    }

    #[test]
    fn user_and_groups_come_from_a_valid_certificate() {
        let u = user_from_certificate(&cert("system:node:n1", -60, 3600)).unwrap();
        assert_eq!(u.name, "system:node:n1");
        assert!(u.in_group("system:nodes") && u.in_group("system:authenticated"));
    }

    #[test]
    fn an_expired_or_not_yet_valid_certificate_authenticates_no_one() {
        let e = user_from_certificate(&cert("old", -7200, -60)).unwrap_err();
        assert!(matches!(e, AuthError::OutsideValidity { .. }), "{e}");
        let e = user_from_certificate(&cert("early", 3600, 7200)).unwrap_err();
        assert!(matches!(e, AuthError::OutsideValidity { .. }), "{e}");
    }

    #[test]
    fn a_connection_ends_when_its_certificate_does() {
        let der = cert("u", -60, 3600);
        let left = certificate_not_after(&der)
            .unwrap()
            .duration_since(std::time::SystemTime::now())
            .unwrap();
        assert!(
            left > std::time::Duration::from_secs(3500)
                && left <= std::time::Duration::from_secs(3600)
        );
    }
}
