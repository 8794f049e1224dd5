//! Who may call the kubelet, as upstream's webhook mode: the client is authenticated by a certificate
//! from --client-ca-file (CN = user, O = groups), then a SubjectAccessReview asks the API server whether
//! that user may `<verb>` the node's subresource (`nodes/proxy` for logs, exec and pods, `nodes/metrics`).
//! Answers are cached briefly (allowed 5 min, denied 30 s, upstream's defaults) so a follow or a burst of
//! execs costs one review.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};
use x509_parser::prelude::{FromDer, X509Certificate};

use crate::config::KubeletConfig;

#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("client certificate: {0}")]
    BadCertificate(String),
    #[error("client certificate has no common name")]
    NoCommonName,
    #[error("SubjectAccessReview: {0}")]
    Review(String),
}

/// An authenticated client.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct User {
    pub name: String,
    pub groups: Vec<String>,
}

/// The user a verified client certificate names (kubeadm semantics: CN = user, O = groups).
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

/// What a request to the kubelet means as authorizer attributes: verb on `nodes/<subresource>`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Attributes {
    pub verb: &'static str,
    pub subresource: &'static str,
}

/// Upstream's mapping: the HTTP method gives the verb; /metrics, /stats, /logs, /spec have their own
/// subresource and everything else (containerLogs, exec, pods, run, …) is `proxy`.
pub fn attributes(method: &http::Method, path: &str) -> Attributes {
    let verb = match *method {
        http::Method::POST => "create",
        http::Method::PUT => "update",
        http::Method::PATCH => "patch",
        http::Method::DELETE => "delete",
        _ => "get",
    };
    let under = |prefix: &str| {
        path == prefix
            || path
                .strip_prefix(prefix)
                .is_some_and(|rest| rest.starts_with('/'))
    };
    let subresource = if under("/metrics") {
        "metrics"
    } else if under("/stats") {
        "stats"
    } else if under("/logs") {
        "log"
    } else if under("/spec") {
        "spec"
    } else {
        "proxy"
    };
    Attributes { verb, subresource }
}

#[async_trait]
pub trait Authorizer: Send + Sync {
    async fn allowed(&self, user: &User, attrs: &Attributes) -> Result<bool, AuthError>;
}

/// SubjectAccessReviews to the API server with the kubelet's own credentials (kubeconfig read per
/// review, so a rotated client certificate is picked up).
pub struct SarAuthorizer {
    cfg: KubeletConfig,
    cache: Mutex<HashMap<(User, Attributes), (bool, Instant)>>,
}

const ALLOWED_TTL: Duration = Duration::from_secs(300);
const DENIED_TTL: Duration = Duration::from_secs(30);

impl SarAuthorizer {
    pub fn new(cfg: KubeletConfig) -> Arc<Self> {
        Arc::new(SarAuthorizer {
            cfg,
            cache: Mutex::new(HashMap::new()),
        })
    }

    fn cached(&self, key: &(User, Attributes)) -> Option<bool> {
        let cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        let (allowed, at) = cache.get(key)?;
        let ttl = if *allowed { ALLOWED_TTL } else { DENIED_TTL };
        (at.elapsed() < ttl).then_some(*allowed)
    }

    async fn review(&self, user: &User, attrs: &Attributes) -> Result<bool, AuthError> {
        let client = crate::agent::load_client(&self.cfg)
            .await
            .map_err(|e| AuthError::Review(e.to_string()))?;
        let sar = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(user.name.clone()),
                groups: Some(user.groups.clone()),
                resource_attributes: Some(ResourceAttributes {
                    verb: Some(attrs.verb.into()),
                    group: Some(String::new()),
                    version: Some("v1".into()),
                    resource: Some("nodes".into()),
                    subresource: Some(attrs.subresource.into()),
                    name: Some(self.cfg.node_name.clone()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let api: Api<SubjectAccessReview> = Api::all(client);
        let answer = api
            .create(&PostParams::default(), &sar)
            .await
            .map_err(|e| AuthError::Review(e.to_string()))?;
        Ok(answer.status.is_some_and(|s| s.allowed))
    }
}

#[async_trait]
impl Authorizer for SarAuthorizer {
    async fn allowed(&self, user: &User, attrs: &Attributes) -> Result<bool, AuthError> {
        let key = (user.clone(), attrs.clone());
        if let Some(a) = self.cached(&key) {
            return Ok(a);
        }
        let allowed = self.review(user, attrs).await?;
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        // Bounded: entries of users long gone are dropped when the cache grows.
        if cache.len() > 1024 {
            cache.retain(|_, (_, at)| at.elapsed() < ALLOWED_TTL);
        }
        cache.insert(key, (allowed, Instant::now()));
        Ok(allowed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_map_to_node_subresources() {
        let get = http::Method::GET;
        let a = |m: &http::Method, p: &str| {
            let a = attributes(m, p);
            (a.verb, a.subresource)
        };
        assert_eq!(a(&get, "/containerLogs/ns/p/c"), ("get", "proxy"));
        assert_eq!(a(&http::Method::POST, "/exec/ns/p/c"), ("create", "proxy"));
        assert_eq!(a(&get, "/pods"), ("get", "proxy"));
        assert_eq!(a(&get, "/metrics"), ("get", "metrics"));
        assert_eq!(a(&get, "/metrics/cadvisor"), ("get", "metrics"));
        assert_eq!(a(&get, "/metricsx"), ("get", "proxy"));
        assert_eq!(a(&get, "/stats/summary"), ("get", "stats"));
        assert_eq!(a(&get, "/logs/syslog"), ("get", "log"));
    }

    #[test]
    fn user_and_groups_come_from_the_subject() {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "kube-apiserver-kubelet-client");
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, "system:masters");
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        let u = user_from_certificate(cert.der()).unwrap();
        assert_eq!(u.name, "kube-apiserver-kubelet-client");
        assert_eq!(u.groups, ["system:masters", "system:authenticated"]);
    }
}
