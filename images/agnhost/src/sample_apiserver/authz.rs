//! Delegated authorization, as k8s.io/apiserver's DelegatingAuthorizationOptions builds it: the
//! health paths and the system:masters group are always allowed; every other request is a
//! SubjectAccessReview (authorization.k8s.io/v1) the cluster answers, cached for ten seconds
//! either way as upstream's webhook authorizer caches. A denial is upstream's Forbidden text.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::kube::Kube;
use super::status::ApiError;
use super::trust::User;

/// `--authorization-always-allow-paths`' default.
pub const ALWAYS_ALLOW_PATHS: &[&str] = &["/healthz", "/readyz", "/livez"];
/// `--authorization-always-allow-groups`' default.
pub const ALWAYS_ALLOW_GROUPS: &[&str] = &["system:masters"];
const CACHE_TTL: Duration = Duration::from_secs(10);
const SAR_PATH: &str = "/apis/authorization.k8s.io/v1/subjectaccessreviews";

/// What a request asks to do (authorizer.Attributes).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Attributes {
    pub verb: String,
    /// Empty for a non-resource request.
    pub resource: String,
    pub subresource: String,
    pub group: String,
    pub version: String,
    pub namespace: String,
    pub name: String,
    pub path: String,
}

impl Attributes {
    fn is_resource(&self) -> bool {
        !self.resource.is_empty()
    }

    /// The review's spec for `user`.
    pub fn review(&self, user: &User) -> Value {
        let mut spec = json!({"user": user.name, "groups": user.groups});
        if !user.extra.is_empty() {
            spec["extra"] = json!(user.extra);
        }
        if self.is_resource() {
            spec["resourceAttributes"] = json!({
                "namespace": self.namespace, "verb": self.verb, "group": self.group,
                "version": self.version, "resource": self.resource,
                "subresource": self.subresource, "name": self.name,
            });
        } else {
            spec["nonResourceAttributes"] = json!({"path": self.path, "verb": self.verb});
        }
        json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec})
    }

    /// responsewriters.Forbidden's message.
    pub fn forbidden(&self, user: &str, reason: &str) -> ApiError {
        let reason = if reason.is_empty() {
            String::new()
        } else {
            format!(": {reason}")
        };
        if !self.is_resource() {
            return ApiError {
                code: 403,
                reason: "Forbidden",
                message: format!(
                    "forbidden: User {user:?} cannot {} path {:?}{reason}",
                    self.verb, self.path
                ),
                details: Some(json!({})),
            };
        }
        let mut resource = self.resource.clone();
        if !self.subresource.is_empty() {
            resource = format!("{resource}/{}", self.subresource);
        }
        let scope = if self.namespace.is_empty() {
            "at the cluster scope".to_string()
        } else {
            format!("in the namespace {:?}", self.namespace)
        };
        let why = format!(
            "User {user:?} cannot {} resource {resource:?} in API group {:?} {scope}{reason}",
            self.verb, self.group
        );
        ApiError::forbidden(&self.group, &self.resource, &self.name, &why)
    }
}

pub struct Authorizer {
    cache: Mutex<HashMap<String, (bool, String, Instant)>>,
}

impl Default for Authorizer {
    fn default() -> Authorizer {
        Authorizer {
            cache: Mutex::new(HashMap::new()),
        }
    }
}

impl Authorizer {
    /// Ok when allowed; a Forbidden (or, when the review cannot be had, an internal) error.
    pub async fn authorize(
        &self,
        kube: &dyn Kube,
        user: &User,
        attrs: &Attributes,
    ) -> Result<(), ApiError> {
        if !attrs.is_resource() && ALWAYS_ALLOW_PATHS.contains(&attrs.path.as_str()) {
            return Ok(());
        }
        if user
            .groups
            .iter()
            .any(|g| ALWAYS_ALLOW_GROUPS.contains(&g.as_str()))
        {
            return Ok(());
        }
        let review = attrs.review(user);
        let key = review["spec"].to_string();
        let cached = {
            let cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
            cache
                .get(&key)
                .filter(|(_, _, at)| at.elapsed() < CACHE_TTL)
                .cloned()
        };
        let (allowed, reason) = match cached {
            Some((allowed, reason, _)) => (allowed, reason),
            None => {
                let (code, body) = kube
                    .post(SAR_PATH, &review)
                    .await
                    .map_err(ApiError::internal)?;
                if !(200..300).contains(&code) {
                    return Err(ApiError::internal(format!(
                        "subjectaccessreviews: {code}: {}",
                        body["message"].as_str().unwrap_or("")
                    )));
                }
                let allowed = body["status"]["allowed"].as_bool().unwrap_or(false);
                let reason = body["status"]["reason"].as_str().unwrap_or("").to_string();
                let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
                cache.retain(|_, (_, _, at)| at.elapsed() < CACHE_TTL);
                cache.insert(key, (allowed, reason.clone(), Instant::now()));
                (allowed, reason)
            }
        };
        if allowed {
            Ok(())
        } else {
            Err(attrs.forbidden(&user.name, &reason))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::kube::recording::Recording;
    use super::*;

    fn list_flunders() -> Attributes {
        Attributes {
            verb: "list".into(),
            resource: "flunders".into(),
            group: "wardle.example.com".into(),
            version: "v1alpha1".into(),
            namespace: "default".into(),
            path: "/apis/wardle.example.com/v1alpha1/namespaces/default/flunders".into(),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn the_cluster_decides_through_a_subject_access_review() {
        let kube = Recording::default();
        *kube.allow_user.lock().unwrap() = Some("alice".into());
        let authz = Authorizer::default();
        let alice = User {
            name: "alice".into(),
            groups: vec!["dev".into()],
            ..Default::default()
        };
        authz
            .authorize(&kube, &alice, &list_flunders())
            .await
            .unwrap();
        let calls = kube.calls.lock().unwrap().clone();
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].1, SAR_PATH);
        let spec = &calls[0].2["spec"];
        assert_eq!(spec["user"], "alice");
        assert_eq!(spec["groups"], json!(["dev"]));
        assert_eq!(spec["resourceAttributes"]["verb"], "list");
        assert_eq!(spec["resourceAttributes"]["namespace"], "default");

        // Cached: the second decision asks nobody.
        authz
            .authorize(&kube, &alice, &list_flunders())
            .await
            .unwrap();
        assert_eq!(kube.calls.lock().unwrap().len(), 1);

        let e = authz
            .authorize(&kube, &User::anonymous(), &list_flunders())
            .await
            .unwrap_err();
        assert_eq!(e.code, 403);
        assert_eq!(
            e.message,
            "flunders.wardle.example.com is forbidden: User \"system:anonymous\" cannot list resource \"flunders\" in API group \"wardle.example.com\" in the namespace \"default\""
        );
    }

    #[tokio::test]
    async fn health_paths_and_masters_need_no_review() {
        let kube = Recording::default();
        let authz = Authorizer::default();
        let healthz = Attributes {
            verb: "get".into(),
            path: "/healthz".into(),
            ..Default::default()
        };
        authz
            .authorize(&kube, &User::anonymous(), &healthz)
            .await
            .unwrap();
        let master = User {
            name: "system:kube-aggregator".into(),
            groups: vec!["system:masters".into()],
            ..Default::default()
        };
        authz
            .authorize(&kube, &master, &list_flunders())
            .await
            .unwrap();
        assert!(kube.calls.lock().unwrap().is_empty());
        let apis = Attributes {
            verb: "get".into(),
            path: "/apis".into(),
            ..Default::default()
        };
        let e = authz
            .authorize(&kube, &User::anonymous(), &apis)
            .await
            .unwrap_err();
        assert_eq!(
            e.message,
            "forbidden: User \"system:anonymous\" cannot get path \"/apis\""
        );
    }
}
