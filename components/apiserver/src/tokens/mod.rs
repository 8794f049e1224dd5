//! Bearer-token authentication: bootstrap tokens (joining nodes) and service-account JWTs, and the
//! issuing side of service-account tokens (TokenRequest).

pub mod bootstrap;
pub mod jwt;

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{json, Value};

use crate::auth::User;
use crate::registry::lifecycle::{from_stored, new_uid};
use crate::registry::resources::{PODS, SECRETS, SERVICE_ACCOUNTS};
use crate::storage::{Store, StoreError};
use jwt::ServiceAccountKeys;

/// The default issuer (and API audience), as kubeadm configures kube-apiserver.
pub const DEFAULT_ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

#[derive(Clone)]
pub struct TokenAuthenticator {
    store: Store,
    pub keys: Option<Arc<ServiceAccountKeys>>,
}

fn now() -> i64 {
    time::OffsetDateTime::now_utc().unix_timestamp()
}

/// The user of a service account, with upstream's groups.
pub fn service_account_user(ns: &str, name: &str) -> User {
    User {
        name: format!("system:serviceaccount:{ns}:{name}"),
        groups: vec![
            "system:serviceaccounts".into(),
            format!("system:serviceaccounts:{ns}"),
            "system:authenticated".into(),
        ],
    }
}

/// What a token is bound to (a Pod or a Secret), embedded in its claims.
pub struct BoundObject {
    pub kind: String,
    pub name: String,
    pub uid: String,
    /// A Pod's node, name and (when the Node exists) uid: claims for integrators, never checked
    /// (upstream's ServiceAccountTokenPodNodeInfo).
    pub node: Option<(String, Option<String>)>,
}

/// What a TokenReview says of a valid token.
pub struct Reviewed {
    pub user: User,
    /// The audiences, of those asked for, the token is valid for.
    pub audiences: Vec<String>,
    /// The ServiceAccount's uid; empty for a bootstrap token.
    pub uid: String,
    /// Upstream's user extra: the token's credential id, its pod and the pod's node.
    pub extra: BTreeMap<String, Vec<String>>,
}

/// The extra of a service-account token's user, from its (verified) claims, as upstream's
/// ServiceAccountInfo.UserInfo: `credential-id` (`JTI=<jti>`), `pod-name`/`pod-uid` for a pod-bound
/// token, `node-name` (and `node-uid` when known) for one bound to a scheduled pod.
pub fn service_account_extra(claims: &Value) -> BTreeMap<String, Vec<String>> {
    let key = |k: &str| format!("authentication.kubernetes.io/{k}");
    let text = |v: &Value| v.as_str().filter(|s| !s.is_empty()).map(str::to_string);
    let k = &claims["kubernetes.io"];
    let mut extra = BTreeMap::new();
    if let (Some(name), Some(uid)) = (text(&k["pod"]["name"]), text(&k["pod"]["uid"])) {
        extra.insert(key("pod-name"), vec![name]);
        extra.insert(key("pod-uid"), vec![uid]);
    }
    if let Some(jti) = text(&claims["jti"]) {
        extra.insert(key("credential-id"), vec![format!("JTI={jti}")]);
    }
    if let Some(node) = text(&k["node"]["name"]) {
        extra.insert(key("node-name"), vec![node]);
        if let Some(uid) = text(&k["node"]["uid"]) {
            extra.insert(key("node-uid"), vec![uid]);
        }
    }
    extra
}

impl TokenAuthenticator {
    pub fn new(store: Store, keys: Option<ServiceAccountKeys>) -> Self {
        TokenAuthenticator {
            store,
            keys: keys.map(Arc::new),
        }
    }

    async fn get(&self, key: &str) -> Result<Option<Value>, StoreError> {
        Ok(match self.store.get(key).await? {
            Some(v) => from_stored(&v.value, v.mod_revision).ok(),
            None => None,
        })
    }

    /// The user a bearer token stands for; `None` when the token is not valid.
    pub async fn authenticate(&self, token: &str) -> Result<Option<User>, StoreError> {
        Ok(self.review(token, &[]).await?.map(|r| r.user))
    }

    /// The API server's own audiences (what a token must be issued for to call it).
    pub fn api_audiences(&self) -> Vec<String> {
        self.keys
            .as_ref()
            .map(|k| k.audiences.clone())
            .unwrap_or_else(|| vec![DEFAULT_ISSUER.to_string()])
    }

    /// A TokenReview: the user a token stands for and the audiences it is valid for, among
    /// `audiences` (empty = the API server's own). Bootstrap tokens know no audiences: they are
    /// valid for the API server's, as upstream's audience-agnostic authenticators.
    pub async fn review(
        &self,
        token: &str,
        audiences: &[String],
    ) -> Result<Option<Reviewed>, StoreError> {
        let api = self.api_audiences();
        let wanted: Vec<String> = if audiences.is_empty() {
            api.clone()
        } else {
            audiences.to_vec()
        };
        if let Some((id, secret)) = bootstrap::parse(token) {
            let matched: Vec<String> = wanted.into_iter().filter(|a| api.contains(a)).collect();
            if matched.is_empty() {
                return Ok(None);
            }
            let key = SECRETS.key(Some("kube-system"), &format!("bootstrap-token-{id}"));
            return Ok(match self.get(&key).await? {
                Some(s) => bootstrap::user_for(&s, id, secret, now()).map(|user| Reviewed {
                    user,
                    audiences: matched,
                    uid: String::new(),
                    extra: BTreeMap::new(),
                }),
                None => None,
            });
        }
        let Some(keys) = &self.keys else {
            return Ok(None);
        };
        let (claims, matched) = match keys.verify_for(token, now(), &wanted) {
            Ok(c) => c,
            Err(e) => {
                tracing::debug!(error = %e, "bearer token rejected");
                return Ok(None);
            }
        };
        let k = &claims["kubernetes.io"];
        let ns = k["namespace"].as_str().unwrap_or("");
        let name = k["serviceaccount"]["name"].as_str().unwrap_or("");
        let uid = k["serviceaccount"]["uid"].as_str().unwrap_or("");
        // Bound tokens die with their service account (and pod): the uid must still match.
        let sa = self.get(&SERVICE_ACCOUNTS.key(Some(ns), name)).await?;
        if sa.is_none_or(|sa| sa["metadata"]["uid"] != uid) {
            return Ok(None);
        }
        if let Some(pod) = k["pod"].as_object() {
            let pod_name = pod.get("name").and_then(Value::as_str).unwrap_or("");
            let current = self.get(&PODS.key(Some(ns), pod_name)).await?;
            if current.is_none_or(|p| Some(&p["metadata"]["uid"]) != pod.get("uid")) {
                return Ok(None);
            }
        }
        Ok(Some(Reviewed {
            user: service_account_user(ns, name),
            audiences: matched,
            uid: uid.to_string(),
            extra: service_account_extra(&claims),
        }))
    }

    /// Signs a token for `sa` (a stored ServiceAccount); `None` without a signing key. Returns the
    /// token and its expiry (seconds since the epoch).
    pub fn issue(
        &self,
        sa: &Value,
        audiences: &[String],
        expiration_seconds: i64,
        bound: Option<&BoundObject>,
    ) -> Option<(String, i64)> {
        let keys = self.keys.as_ref()?;
        let ns = sa["metadata"]["namespace"].as_str().unwrap_or("");
        let name = sa["metadata"]["name"].as_str().unwrap_or("");
        let iat = now();
        let exp = iat + expiration_seconds;
        let audiences: Vec<String> = if audiences.is_empty() {
            keys.audiences.clone()
        } else {
            audiences.to_vec()
        };
        let mut k8s = json!({
            "namespace": ns,
            "serviceaccount": {"name": name, "uid": sa["metadata"]["uid"]},
        });
        if let Some(b) = bound {
            let field = if b.kind == "Pod" { "pod" } else { "secret" };
            k8s[field] = json!({"name": b.name, "uid": b.uid});
            if let Some((node, uid)) = &b.node {
                k8s["node"] = json!({"name": node});
                if let Some(uid) = uid {
                    k8s["node"]["uid"] = json!(uid);
                }
            }
        }
        let claims = json!({
            "aud": audiences,
            "exp": exp,
            "iat": iat,
            "nbf": iat,
            "iss": keys.issuer,
            "jti": new_uid(),
            "kubernetes.io": k8s,
            "sub": format!("system:serviceaccount:{ns}:{name}"),
        });
        Some((keys.sign(&claims)?, exp))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::service_account_extra;

    #[test]
    fn a_pod_bound_token_names_its_credential_pod_and_node() {
        let claims = json!({"jti": "j1", "kubernetes.io": {
            "namespace": "ns", "serviceaccount": {"name": "default", "uid": "sa"},
            "pod": {"name": "p", "uid": "pu"}, "node": {"name": "n", "uid": "nu"}}});
        let extra = service_account_extra(&claims);
        let one = |k: &str| extra[&format!("authentication.kubernetes.io/{k}")].clone();
        assert_eq!(one("credential-id"), vec!["JTI=j1"]);
        assert_eq!(
            (one("pod-name"), one("pod-uid")),
            (vec!["p".into()], vec!["pu".into()])
        );
        assert_eq!(
            (one("node-name"), one("node-uid")),
            (vec!["n".into()], vec!["nu".into()])
        );
    }

    #[test]
    fn an_unbound_token_has_only_its_credential_id_and_a_missing_node_no_uid() {
        let claims = json!({"jti": "j2", "kubernetes.io": {"namespace": "ns"}});
        assert_eq!(
            service_account_extra(&claims)
                .into_keys()
                .collect::<Vec<_>>(),
            vec!["authentication.kubernetes.io/credential-id"]
        );
        let claims =
            json!({"kubernetes.io": {"pod": {"name": "p", "uid": "pu"}, "node": {"name": "gone"}}});
        let extra = service_account_extra(&claims);
        assert!(extra.contains_key("authentication.kubernetes.io/node-name"));
        assert!(!extra.contains_key("authentication.kubernetes.io/node-uid"));
        assert!(!extra.contains_key("authentication.kubernetes.io/credential-id"));
    }
}
