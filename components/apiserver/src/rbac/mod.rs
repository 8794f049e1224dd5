//! Authorization, in upstream's order: the privileged group (system:masters), the Node authorizer
//! (a kubelet reaches only its own node and what its pods use), then RBAC over the stored roles and
//! bindings. Everything not allowed is denied.

pub mod aggregation_roles;
pub mod bootstrap;
pub mod node;
pub mod rules;
pub mod storage_roles;

use std::collections::HashMap;

use serde_json::Value;

use crate::auth::{is_public_path, Attributes, Identity, User};
use crate::registry::lifecycle::{from_stored, prepare_create, to_stored, FieldValidation};
use crate::registry::rbac::{CLUSTER_ROLES, CLUSTER_ROLE_BINDINGS, ROLES, ROLE_BINDINGS};
use crate::registry::ResourceSpec;
use crate::storage::{Store, StoreError};

#[derive(Debug, thiserror::Error)]
pub enum RbacError {
    #[error("store: {0}")]
    Store(#[from] StoreError),
    #[error("stored {0} is not valid JSON")]
    Corrupt(String),
    #[error("bootstrap policy {name}: {message}")]
    Bootstrap { name: String, message: String },
}

/// The RBAC + Node authorizer; reads policy from the store on every decision (a watch-fed cache
/// can replace the reads without changing callers).
#[derive(Clone)]
pub struct Authorizer {
    store: Store,
}

/// A user's effective rules: (rules, where they came from) for SelfSubjectRulesReview.
pub type RuleSet = Vec<Value>;

impl Authorizer {
    pub fn new(store: Store) -> Self {
        Authorizer { store }
    }

    pub async fn authorize(
        &self,
        identity: &Identity,
        attrs: &Attributes<'_>,
    ) -> Result<bool, RbacError> {
        let Identity::User(user) = identity else {
            return Ok(
                matches!(attrs, Attributes::NonResource { verb: "get", path } if is_public_path(path)),
            );
        };
        if user.in_group("system:masters") {
            return Ok(true);
        }
        if node::applies(user) && node::authorize(&self.store, user, attrs).await? {
            return Ok(true);
        }
        let namespace = match attrs {
            Attributes::Resource { namespace, .. } => *namespace,
            Attributes::NonResource { .. } => None,
        };
        let rules = self.rules_for(user, namespace).await?;
        Ok(rules.iter().any(|r| rules::rule_allows(r, attrs)))
    }

    /// Every rule granted to `user` cluster-wide and, with `namespace`, in that namespace.
    pub async fn rules_for(
        &self,
        user: &User,
        namespace: Option<&str>,
    ) -> Result<RuleSet, RbacError> {
        let mut out = Vec::new();
        let mut cluster_roles: HashMap<String, Option<Value>> = HashMap::new();
        for binding in self.list(&CLUSTER_ROLE_BINDINGS, None).await? {
            if rules::binding_applies(&binding, user) {
                if let Some(role) = self.cluster_role(&binding, &mut cluster_roles).await? {
                    out.extend(role["rules"].as_array().cloned().unwrap_or_default());
                }
            }
        }
        if let Some(ns) = namespace {
            for binding in self.list(&ROLE_BINDINGS, Some(ns)).await? {
                if !rules::binding_applies(&binding, user) {
                    continue;
                }
                let role = if binding["roleRef"]["kind"] == "Role" {
                    let name = binding["roleRef"]["name"].as_str().unwrap_or("");
                    self.get(&ROLES, Some(ns), name).await?
                } else {
                    self.cluster_role(&binding, &mut cluster_roles).await?
                };
                if let Some(role) = role {
                    out.extend(role["rules"].as_array().cloned().unwrap_or_default());
                }
            }
        }
        Ok(out)
    }

    async fn cluster_role(
        &self,
        binding: &Value,
        cache: &mut HashMap<String, Option<Value>>,
    ) -> Result<Option<Value>, RbacError> {
        let name = binding["roleRef"]["name"]
            .as_str()
            .unwrap_or("")
            .to_string();
        if let Some(hit) = cache.get(&name) {
            return Ok(hit.clone());
        }
        let role = self.get(&CLUSTER_ROLES, None, &name).await?;
        cache.insert(name, role.clone());
        Ok(role)
    }

    async fn list(&self, spec: &ResourceSpec, ns: Option<&str>) -> Result<Vec<Value>, RbacError> {
        let (items, _) = self.store.list(&spec.key_prefix(ns)).await?;
        items
            .iter()
            .map(|i| {
                from_stored(&i.value, i.mod_revision).map_err(|_| RbacError::Corrupt(i.key.clone()))
            })
            .collect()
    }

    async fn get(
        &self,
        spec: &ResourceSpec,
        ns: Option<&str>,
        name: &str,
    ) -> Result<Option<Value>, RbacError> {
        match self.store.get(&spec.key(ns, name)).await? {
            None => Ok(None),
            Some(v) => from_stored(&v.value, v.mod_revision)
                .map(Some)
                .map_err(|_| RbacError::Corrupt(v.key)),
        }
    }
}

/// Creates the default cluster roles and bindings, and brings auto-updated ones back to the
/// bootstrap content (as upstream's policy reconciliation does at start).
pub async fn ensure_bootstrap_policy(store: &Store) -> Result<(), RbacError> {
    let objects = bootstrap::cluster_roles()
        .into_iter()
        .chain(storage_roles::cluster_roles())
        .chain(aggregation_roles::cluster_roles())
        .map(|o| (&CLUSTER_ROLES, None, o))
        .chain(
            bootstrap::cluster_role_bindings()
                .into_iter()
                .chain(storage_roles::cluster_role_bindings())
                .map(|o| (&CLUSTER_ROLE_BINDINGS, None, o)),
        )
        .chain(
            aggregation_roles::namespaced_roles()
                .into_iter()
                .map(|o| (&ROLES, Some(aggregation_roles::KUBE_SYSTEM), o)),
        )
        .chain(
            aggregation_roles::namespaced_role_bindings()
                .into_iter()
                .map(|o| (&ROLE_BINDINGS, Some(aggregation_roles::KUBE_SYSTEM), o)),
        );
    for (spec, ns, obj) in objects {
        let name = obj["metadata"]["name"].as_str().unwrap_or("").to_string();
        let obj = prepare_create(spec, ns, obj, FieldValidation::Strict).map_err(|e| {
            RbacError::Bootstrap {
                name: name.clone(),
                message: e.message,
            }
        })?;
        let key = spec.key(ns, &name);
        let content = ["rules", "roleRef", "subjects"];
        match store.get(&key).await? {
            None => match store.create(&key, to_stored(&obj)).await {
                Ok(_) | Err(StoreError::AlreadyExists) => {}
                Err(e) => return Err(e.into()),
            },
            Some(current) => {
                let mut stored = from_stored(&current.value, current.mod_revision)
                    .map_err(|_| RbacError::Corrupt(key.clone()))?;
                let auto = stored["metadata"]["annotations"]
                    ["rbac.authorization.kubernetes.io/autoupdate"]
                    != "false";
                if !auto || content.iter().all(|f| stored[*f] == obj[*f]) {
                    continue;
                }
                for f in content.iter().filter(|f| obj.get(**f).is_some()) {
                    stored[*f] = obj[*f].clone();
                }
                match store
                    .update(&key, to_stored(&stored), current.mod_revision)
                    .await
                {
                    Ok(_) | Err(StoreError::Conflict) => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
    }
    Ok(())
}
