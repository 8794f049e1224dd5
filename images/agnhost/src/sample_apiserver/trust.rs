//! Delegated authentication, as k8s.io/apiserver's DelegatingAuthenticationOptions builds it from
//! `kube-system/extension-apiserver-authentication`: a client certificate that verifies against
//! `requestheader-client-ca-file` (and whose CN is one of `requestheader-allowed-names`, when any
//! are given) is the front proxy, and the user is whatever its X-Remote-User/-Group/-Extra-*
//! headers say; one that verifies against `client-ca-file` is the user its CN (and O, as groups)
//! names. Anything else is anonymous. Headers are believed only from the front proxy.

use percent_encoding::percent_decode_str;
use std::collections::BTreeMap;
use std::sync::Arc;

use http::HeaderMap;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::danger::ClientCertVerifier;
use rustls::server::WebPkiClientVerifier;
use serde_json::Value;

use super::status::ApiError;

#[derive(Debug, thiserror::Error)]
pub enum TrustError {
    #[error("{key}: no usable certificate")]
    NoCertificate { key: &'static str },
    #[error("{key}: {reason}")]
    Verifier { key: &'static str, reason: String },
    #[error("{key}: not a JSON list of strings: {reason}")]
    List { key: &'static str, reason: String },
}

/// An authenticated user, as user.Info carries it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct User {
    pub name: String,
    pub groups: Vec<String>,
    pub extra: BTreeMap<String, Vec<String>>,
}

pub const ANONYMOUS: &str = "system:anonymous";
pub const UNAUTHENTICATED: &str = "system:unauthenticated";
pub const AUTHENTICATED: &str = "system:authenticated";

impl User {
    pub fn anonymous() -> User {
        User {
            name: ANONYMOUS.into(),
            groups: vec![UNAUTHENTICATED.into()],
            extra: BTreeMap::new(),
        }
    }

    /// AuthenticatedGroupAdder: every user but the anonymous one is in system:authenticated.
    fn authenticated(mut self) -> User {
        if !self.groups.iter().any(|g| g == AUTHENTICATED) {
            self.groups.push(AUTHENTICATED.into());
        }
        self
    }
}

struct RequestHeader {
    verifier: Arc<dyn ClientCertVerifier>,
    allowed_names: Vec<String>,
    username_headers: Vec<String>,
    group_headers: Vec<String>,
    extra_prefixes: Vec<String>,
}

/// Whom this server believes; empty (everyone anonymous) until the ConfigMap has been read.
#[derive(Default)]
pub struct Trust {
    request_header: Option<RequestHeader>,
    client_ca: Option<Arc<dyn ClientCertVerifier>>,
}

fn verifier(key: &'static str, pem: &str) -> Result<Arc<dyn ClientCertVerifier>, TrustError> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pemfile::certs(&mut pem.as_bytes()).flatten() {
        let _ = roots.add(cert);
    }
    if roots.is_empty() {
        return Err(TrustError::NoCertificate { key });
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
        .build()
        .map_err(|e| TrustError::Verifier {
            key,
            reason: e.to_string(),
        })
}

/// The ConfigMap's list values are JSON arrays in strings.
fn list(data: &Value, key: &'static str) -> Result<Vec<String>, TrustError> {
    match data[key].as_str() {
        None | Some("") => Ok(Vec::new()),
        Some(s) => serde_json::from_str(s).map_err(|e| TrustError::List {
            key,
            reason: e.to_string(),
        }),
    }
}

/// The chain verifies against `v` (as a client certificate, at `now`).
fn verifies(v: &dyn ClientCertVerifier, chain: &[CertificateDer<'static>]) -> bool {
    match chain.split_first() {
        Some((leaf, rest)) => v.verify_client_cert(leaf, rest, UnixTime::now()).is_ok(),
        None => false,
    }
}

/// The subject's CN and O values of a DER certificate.
fn subject(der: &[u8]) -> (String, Vec<String>) {
    let Ok((_, cert)) = x509_parser::parse_x509_certificate(der) else {
        return (String::new(), Vec::new());
    };
    let cn = cert
        .subject()
        .iter_common_name()
        .next()
        .and_then(|a| a.as_str().ok())
        .unwrap_or("")
        .to_string();
    let orgs = cert
        .subject()
        .iter_organization()
        .filter_map(|a| a.as_str().ok())
        .map(str::to_string)
        .collect();
    (cn, orgs)
}

/// `%2F` in an extra header's key is `/` (url.PathUnescape), and keys are lower case.
fn unescape_key(key: &str) -> String {
    percent_decode_str(key)
        .decode_utf8_lossy()
        .to_ascii_lowercase()
}

impl RequestHeader {
    fn user(&self, headers: &HeaderMap) -> Option<User> {
        let values = |name: &str| -> Vec<String> {
            headers
                .get_all(name)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .map(str::to_string)
                .collect()
        };
        let name = self
            .username_headers
            .iter()
            .flat_map(|h| values(h))
            .find(|v| !v.is_empty())?;
        let groups = self.group_headers.iter().flat_map(|h| values(h)).collect();
        let mut extra: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (header, value) in headers {
            let header = header.as_str();
            let Some(prefix) = self
                .extra_prefixes
                .iter()
                .find(|p| header.starts_with(&p.to_ascii_lowercase()))
            else {
                continue;
            };
            if let Ok(v) = value.to_str() {
                extra
                    .entry(unescape_key(&header[prefix.len()..]))
                    .or_default()
                    .push(v.to_string());
            }
        }
        Some(User {
            name,
            groups,
            extra,
        })
    }
}

impl Trust {
    /// From the ConfigMap's `data`.
    pub fn from_configmap(data: &Value) -> Result<Trust, TrustError> {
        let mut trust = Trust::default();
        if let Some(pem) = data["client-ca-file"].as_str() {
            trust.client_ca = Some(verifier("client-ca-file", pem)?);
        }
        if let Some(pem) = data["requestheader-client-ca-file"].as_str() {
            trust.request_header = Some(RequestHeader {
                verifier: verifier("requestheader-client-ca-file", pem)?,
                allowed_names: list(data, "requestheader-allowed-names")?,
                username_headers: list(data, "requestheader-username-headers")?,
                group_headers: list(data, "requestheader-group-headers")?,
                extra_prefixes: list(data, "requestheader-extra-headers-prefix")?,
            });
        }
        Ok(trust)
    }

    pub fn is_loaded(&self) -> bool {
        self.request_header.is_some() || self.client_ca.is_some()
    }

    /// Who sent the request: the front proxy's user, a client certificate's, or anonymous.
    /// A front-proxy certificate whose CN is not allowed is refused (401), as upstream's
    /// request-header authenticator fails the request.
    pub fn authenticate(
        &self,
        chain: &[CertificateDer<'static>],
        headers: &HeaderMap,
    ) -> Result<User, ApiError> {
        if let Some(rh) = &self.request_header {
            if verifies(rh.verifier.as_ref(), chain) {
                let (cn, _) = subject(&chain[0]);
                if !rh.allowed_names.is_empty() && !rh.allowed_names.contains(&cn) {
                    tracing::warn!("request header authentication: x509: subject with cn={cn} is not in the allowed list");
                    return Err(ApiError::unauthorized());
                }
                if let Some(user) = rh.user(headers) {
                    return Ok(user.authenticated());
                }
            }
        }
        if let Some(ca) = &self.client_ca {
            if verifies(ca.as_ref(), chain) {
                let (cn, orgs) = subject(&chain[0]);
                return Ok(User {
                    name: cn,
                    groups: orgs,
                    extra: BTreeMap::new(),
                }
                .authenticated());
            }
        }
        Ok(User::anonymous())
    }
}

#[cfg(test)]
pub mod tests {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    };
    use serde_json::json;

    use super::*;

    /// A CA and a client certificate it signed, for `cn`.
    pub struct ClientPki {
        pub ca_pem: String,
        pub cert_pem: String,
        pub key_pem: String,
        pub der: CertificateDer<'static>,
    }

    pub fn client_pki(ca_cn: &str, cn: &str, org: Option<&str>) -> ClientPki {
        let ca_key = KeyPair::generate().unwrap();
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.distinguished_name.push(DnType::CommonName, ca_cn);
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca_cert = ca.self_signed(&ca_key).unwrap();
        let issuer = Issuer::new(ca, ca_key);
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.distinguished_name.push(DnType::CommonName, cn);
        if let Some(o) = org {
            p.distinguished_name.push(DnType::OrganizationName, o);
        }
        p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let cert = p.signed_by(&key, &issuer).unwrap();
        ClientPki {
            ca_pem: ca_cert.pem(),
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            der: cert.der().clone(),
        }
    }

    pub fn configmap_data(front_proxy_ca: &str, client_ca: &str) -> Value {
        json!({
            "client-ca-file": client_ca,
            "requestheader-client-ca-file": front_proxy_ca,
            "requestheader-allowed-names": "[\"front-proxy-client\"]",
            "requestheader-username-headers": "[\"X-Remote-User\"]",
            "requestheader-group-headers": "[\"X-Remote-Group\"]",
            "requestheader-extra-headers-prefix": "[\"X-Remote-Extra-\"]",
        })
    }

    fn identity_headers() -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("x-remote-user", "alice".parse().unwrap());
        h.append("x-remote-group", "dev".parse().unwrap());
        h.append("x-remote-group", "ops".parse().unwrap());
        h.insert("x-remote-extra-example.com%2fteam", "blue".parse().unwrap());
        h
    }

    #[test]
    fn only_the_front_proxy_certificate_makes_the_headers_believed() {
        let proxy = client_pki("front-proxy-ca", "front-proxy-client", None);
        let admin = client_pki("kubernetes", "bob", Some("team"));
        let trust = Trust::from_configmap(&configmap_data(&proxy.ca_pem, &admin.ca_pem)).unwrap();
        let h = identity_headers();

        let u = trust
            .authenticate(std::slice::from_ref(&proxy.der), &h)
            .unwrap();
        assert_eq!(u.name, "alice");
        assert_eq!(u.groups, ["dev", "ops", AUTHENTICATED]);
        assert_eq!(u.extra["example.com/team"], ["blue"]);

        // A cluster client certificate cannot claim the headers' user: it is its own CN.
        let u = trust
            .authenticate(std::slice::from_ref(&admin.der), &h)
            .unwrap();
        assert_eq!(
            (u.name.as_str(), u.groups.as_slice()),
            ("bob", &["team".to_string(), AUTHENTICATED.to_string()][..])
        );

        // No certificate, or one of a stranger CA: anonymous, headers or not.
        assert_eq!(trust.authenticate(&[], &h).unwrap(), User::anonymous());
        let stranger = client_pki("front-proxy-ca", "front-proxy-client", None);
        assert_eq!(
            trust.authenticate(&[stranger.der], &h).unwrap(),
            User::anonymous()
        );
        // Nothing loaded yet: everyone is anonymous.
        assert_eq!(
            Trust::default().authenticate(&[proxy.der], &h).unwrap(),
            User::anonymous()
        );
    }

    #[test]
    fn a_front_proxy_certificate_of_another_name_is_refused() {
        let other = client_pki("front-proxy-ca", "someone-else", None);
        let trust = Trust::from_configmap(&configmap_data(&other.ca_pem, &other.ca_pem)).unwrap();
        let e = trust
            .authenticate(&[other.der], &identity_headers())
            .unwrap_err();
        assert_eq!(e.code, 401);
    }
}
