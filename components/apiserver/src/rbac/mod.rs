//! Authorization, in upstream's order: the privileged group (system:masters), the Node authorizer
//! (a kubelet reaches only its own node and what its pods use), then RBAC over the stored roles and
//! bindings. Everything not allowed is denied.

pub mod aggregation_roles;
pub mod bootstrap;
pub mod cache;
pub mod node;
pub mod rules;
pub mod storage_roles;

use std::collections::HashMap;
use std::sync::Arc;

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

/// The RBAC + Node authorizer: it reads the policy from a watch-fed copy ([`cache`]) and checks a
/// denial again against the store.
#[derive(Clone)]
pub struct Authorizer {
    store: Store,
    cache: Arc<PolicyCopy>,
}

/// The four policy resources' copies.
pub struct PolicyCopy {
    cluster_roles: Arc<cache::PrefixCache>,
    cluster_role_bindings: Arc<cache::PrefixCache>,
    roles: Arc<cache::PrefixCache>,
    role_bindings: Arc<cache::PrefixCache>,
}

impl PolicyCopy {
    fn of(&self, spec: &ResourceSpec) -> &cache::PrefixCache {
        match spec.plural {
            "clusterroles" => &self.cluster_roles,
            "clusterrolebindings" => &self.cluster_role_bindings,
            "roles" => &self.roles,
            _ => &self.role_bindings,
        }
    }
}

/// Where a decision reads the policy from.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Source {
    Copy,
    Store,
}

/// A user's effective rules: (rules, where they came from) for SelfSubjectRulesReview.
pub type RuleSet = Vec<Value>;

impl Authorizer {
    /// An authorizer over a watch-fed copy of the policy, kept until `stop` changes.
    pub fn cached(store: Store, stop: tokio::sync::watch::Receiver<bool>) -> Self {
        let copy = |spec: &ResourceSpec| {
            let c = cache::PrefixCache::new(spec.key_prefix(None));
            tokio::spawn(c.clone().run(store.clone(), stop.clone()));
            c
        };
        let copies = PolicyCopy {
            cluster_roles: copy(&CLUSTER_ROLES),
            cluster_role_bindings: copy(&CLUSTER_ROLE_BINDINGS),
            roles: copy(&ROLES),
            role_bindings: copy(&ROLE_BINDINGS),
        };
        Authorizer {
            store,
            cache: Arc::new(copies),
        }
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
        let rules = self.rules_in(user, namespace, Source::Copy).await?;
        if rules.iter().any(|r| rules::rule_allows(r, attrs)) {
            return Ok(true);
        }
        // The copy trails the store by a watch event: a binding created a moment ago (a client
        // that binds a role and then uses it) is read from the store before saying no.
        let rules = self.rules_in(user, namespace, Source::Store).await?;
        Ok(rules.iter().any(|r| rules::rule_allows(r, attrs)))
    }

    /// Every rule granted to `user` cluster-wide and, with `namespace`, in that namespace, read
    /// from the store (the reviews answer with what is stored now).
    pub async fn rules_for(
        &self,
        user: &User,
        namespace: Option<&str>,
    ) -> Result<RuleSet, RbacError> {
        self.rules_in(user, namespace, Source::Store).await
    }

    async fn rules_in(
        &self,
        user: &User,
        namespace: Option<&str>,
        source: Source,
    ) -> Result<RuleSet, RbacError> {
        let mut out = Vec::new();
        let mut cluster_roles: HashMap<String, Option<Arc<Value>>> = HashMap::new();
        for binding in self.list(&CLUSTER_ROLE_BINDINGS, None, source).await? {
            if rules::binding_applies(&binding, user) {
                if let Some(role) = self
                    .cluster_role(&binding, &mut cluster_roles, source)
                    .await?
                {
                    out.extend(role["rules"].as_array().cloned().unwrap_or_default());
                }
            }
        }
        if let Some(ns) = namespace {
            for binding in self.list(&ROLE_BINDINGS, Some(ns), source).await? {
                if !rules::binding_applies(&binding, user) {
                    continue;
                }
                let role = if binding["roleRef"]["kind"] == "Role" {
                    let name = binding["roleRef"]["name"].as_str().unwrap_or("");
                    self.get(&ROLES, Some(ns), name, source).await?
                } else {
                    self.cluster_role(&binding, &mut cluster_roles, source)
                        .await?
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
        memo: &mut HashMap<String, Option<Arc<Value>>>,
        source: Source,
    ) -> Result<Option<Arc<Value>>, RbacError> {
        let name = binding["roleRef"]["name"]
            .as_str()
            .unwrap_or("")
            .to_string();
        if let Some(hit) = memo.get(&name) {
            return Ok(hit.clone());
        }
        let role = self.get(&CLUSTER_ROLES, None, &name, source).await?;
        memo.insert(name, role.clone());
        Ok(role)
    }

    /// From the copy when asked and in sync, else from the store.
    fn copy_of(&self, spec: &ResourceSpec, source: Source) -> Option<&cache::PrefixCache> {
        (source == Source::Copy).then(|| self.cache.of(spec))
    }

    async fn list(
        &self,
        spec: &ResourceSpec,
        ns: Option<&str>,
        source: Source,
    ) -> Result<Vec<Arc<Value>>, RbacError> {
        let prefix = spec.key_prefix(ns);
        if let Some(items) = self.copy_of(spec, source).and_then(|c| c.list(&prefix)) {
            return Ok(items);
        }
        let (items, _) = self.store.list(&prefix).await?;
        items
            .iter()
            .map(|i| {
                from_stored(&i.value, i.mod_revision)
                    .map(Arc::new)
                    .map_err(|_| RbacError::Corrupt(i.key.clone()))
            })
            .collect()
    }

    async fn get(
        &self,
        spec: &ResourceSpec,
        ns: Option<&str>,
        name: &str,
        source: Source,
    ) -> Result<Option<Arc<Value>>, RbacError> {
        let key = spec.key(ns, name);
        if let Some(hit) = self.copy_of(spec, source).and_then(|c| c.get(&key)) {
            return Ok(hit);
        }
        match self.store.get(&key).await? {
            None => Ok(None),
            Some(v) => from_stored(&v.value, v.mod_revision)
                .map(|v| Some(Arc::new(v)))
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
