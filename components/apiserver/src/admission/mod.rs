//! Admission: checks and defaults that need the object, after authentication and authorization
//! (NamespaceLifecycle lives in `handlers::crud::create_object`). Plugins are chosen with upstream's
//! `--enable-admission-plugins` / `--disable-admission-plugins`; NodeRestriction is on by default,
//! ServiceAccount only when enabled (it refuses pods until their ServiceAccount exists, which needs
//! the controller-manager's serviceaccount controller, and mounts tokens only an API server with
//! `--service-account-signing-key-file` can issue). A bare kiln-apiserver (tests without a
//! controller-manager) therefore leaves it off; `kiln init`'s static pod turns it on, as kubeadm's
//! kube-apiserver has it.

pub mod context;
pub mod default_ingress_class;
pub mod default_storage_class;
pub mod limit_ranger;
pub mod node_restriction;
pub mod node_volumes;
pub mod pod_security;
pub mod priority;
pub mod pvc_resize;
pub mod resource_quota;
pub mod runtime_class;
pub mod service_account;
pub mod storage_protection;
pub mod webhook;

use serde_json::Value;

use crate::admission::context::AdmissionContext;
use crate::registry::lifecycle::{from_stored, name_suffix, to_stored};
use crate::registry::networking::INGRESS_CLASSES;
use crate::registry::priority_classes::PRIORITY_CLASSES;
use crate::registry::quotas::{LIMIT_RANGES, RESOURCE_QUOTAS};
use crate::registry::resources::SERVICE_ACCOUNTS;
use crate::registry::runtime_classes::RUNTIME_CLASSES;
use crate::registry::storage_classes::STORAGE_CLASSES;
use crate::request::Target;
use crate::status::{qualified, ApiError};
use node_restriction::Op;

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum AdmissionError {
    #[error("admission plugin {0:?} is not supported by kiln-apiserver (known: {known})", known = KNOWN.join(", "))]
    UnknownPlugin(String),
    #[error("admission plugin NamespaceLifecycle cannot be disabled in kiln-apiserver")]
    Required,
}

/// The plugins kiln-apiserver has, by upstream's names.
pub const KNOWN: &[&str] = &[
    "NamespaceLifecycle",
    "NodeRestriction",
    "ServiceAccount",
    "DefaultStorageClass",
    "StorageObjectInUseProtection",
    "PersistentVolumeClaimResize",
    "RuntimeClass",
    "DefaultIngressClass",
    "LimitRanger",
    "ResourceQuota",
    "Priority",
    "PodSecurity",
];

/// Which plugins run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plugins {
    pub node_restriction: bool,
    pub service_account: bool,
    /// The storage plugins, on by default as upstream's.
    pub default_storage_class: bool,
    pub storage_protection: bool,
    pub pvc_resize: bool,
    /// RuntimeClass and DefaultIngressClass, on by default as upstream's.
    pub runtime_class: bool,
    pub default_ingress_class: bool,
    /// LimitRanger and ResourceQuota, on by default as upstream's.
    pub limit_ranger: bool,
    pub resource_quota: bool,
    /// Priority, on by default as upstream's.
    pub priority: bool,
    /// PodSecurity, on by default as upstream's (privileged everywhere unless labelled or
    /// configured, so it changes nothing until a namespace asks).
    pub pod_security: bool,
    /// Whether ServiceAccount admission adds token volumes (only when tokens can be issued).
    pub mount_tokens: bool,
}

impl Plugins {
    pub fn from_flags(
        enable: &[String],
        disable: &[String],
        can_issue_tokens: bool,
    ) -> Result<Self, AdmissionError> {
        for p in enable.iter().chain(disable) {
            if !p.is_empty() && !KNOWN.contains(&p.as_str()) {
                return Err(AdmissionError::UnknownPlugin(p.clone()));
            }
        }
        if disable.iter().any(|p| p == "NamespaceLifecycle") {
            return Err(AdmissionError::Required);
        }
        let on = |name: &str, default: bool| {
            !disable.iter().any(|p| p == name) && (default || enable.iter().any(|p| p == name))
        };
        Ok(Plugins {
            node_restriction: on("NodeRestriction", true),
            service_account: on("ServiceAccount", false),
            default_storage_class: on("DefaultStorageClass", true),
            storage_protection: on("StorageObjectInUseProtection", true),
            pvc_resize: on("PersistentVolumeClaimResize", true),
            runtime_class: on("RuntimeClass", true),
            default_ingress_class: on("DefaultIngressClass", true),
            limit_ranger: on("LimitRanger", true),
            resource_quota: on("ResourceQuota", true),
            priority: on("Priority", true),
            pod_security: on("PodSecurity", true),
            mount_tokens: can_issue_tokens,
        })
    }
}

/// Upstream's admission refusal: `<resource> "<name>" is forbidden: <reason>`.
pub fn forbidden(group: &str, resource: &str, name: &str, reason: &str) -> ApiError {
    let mut details = serde_json::json!({"name": name, "kind": resource});
    if !group.is_empty() {
        details["group"] = serde_json::json!(group);
    }
    ApiError {
        code: 403,
        reason: "Forbidden",
        message: format!(
            "{} {name:?} is forbidden: {reason}",
            qualified(group, resource)
        ),
        details: Some(details),
    }
}

/// NodeRestriction for a write by `target`'s requester (nothing to check for non-nodes).
pub fn node_restriction(
    state: &AdmissionContext<'_>,
    target: &Target,
    subresource: Option<&str>,
    op: Op<'_>,
) -> Result<(), ApiError> {
    if !state.plugins.node_restriction {
        return Ok(());
    }
    let Some(node) = target
        .requester
        .user
        .as_ref()
        .and_then(node_restriction::node_of)
    else {
        return Ok(());
    };
    let spec = target.spec;
    let req = node_restriction::Request {
        group: spec.group,
        resource: spec.plural,
        subresource: subresource.or(target.status.then_some("status")),
        namespace: target.namespace.as_deref(),
        op,
    };
    node_restriction::admit(node, &req).map_err(|reason| {
        let obj = match op {
            Op::Create(o) | Op::Delete(o) => o,
            Op::Update { new, .. } => new,
        };
        let name = obj["metadata"]["name"].as_str().unwrap_or("");
        tracing::info!(node, resource = spec.plural, name, %reason, "NodeRestriction refused");
        forbidden(spec.group, spec.plural, name, &reason)
    })
}

/// The mutating storage plugins for a create: DefaultStorageClass on claims,
/// StorageObjectInUseProtection on claims and volumes.
pub async fn storage_create(
    state: &AdmissionContext<'_>,
    target: &Target,
    obj: &mut Value,
) -> Result<(), ApiError> {
    let spec = target.spec;
    if !spec.group.is_empty() || target.status {
        return Ok(());
    }
    let plugins = state.plugins;
    if plugins.default_storage_class
        && spec.plural == "persistentvolumeclaims"
        && !default_storage_class::has_class(obj)
    {
        let classes = list_values(state, &STORAGE_CLASSES.key_prefix(None)).await?;
        if let Some(class) = default_storage_class::admit(obj, &classes) {
            tracing::debug!(claim = obj["metadata"]["name"].as_str().unwrap_or(""), %class,
                "DefaultStorageClass set the claim's class");
        }
    }
    if plugins.storage_protection {
        if let Some(finalizer) = storage_protection::finalizer_for(spec.plural) {
            storage_protection::admit(obj, finalizer);
        }
    }
    Ok(())
}

/// The class plugins for a create: RuntimeClass and Priority on pods, DefaultIngressClass on
/// Ingresses.
pub async fn class_create(
    state: &AdmissionContext<'_>,
    target: &Target,
    obj: &mut Value,
) -> Result<(), ApiError> {
    let spec = target.spec;
    if target.status {
        return Ok(());
    }
    let plugins = state.plugins;
    if plugins.runtime_class && spec.group.is_empty() && spec.plural == "pods" {
        let name = obj["metadata"]["name"].as_str().unwrap_or("").to_string();
        let refuse = |reason: String| {
            tracing::info!(pod = %name, %reason, "RuntimeClass refused");
            forbidden("", "pods", &name, &reason)
        };
        match runtime_class::class_of(obj).map(str::to_string) {
            Some(class_name) => {
                let class = match state
                    .store
                    .get(&RUNTIME_CLASSES.key(None, &class_name))
                    .await
                    .map_err(crate::storage_status::store_error)?
                {
                    Some(v) => Some(from_stored(&v.value, v.mod_revision)?),
                    None => None,
                };
                runtime_class::admit(obj, &class_name, class.as_ref()).map_err(refuse)?;
            }
            None if obj["spec"]["overhead"]
                .as_object()
                .is_some_and(|o| !o.is_empty()) =>
            {
                return Err(refuse(
                    "pod rejected: Pod Overhead set without corresponding RuntimeClass defined Overhead"
                        .into(),
                ));
            }
            None => {}
        }
    }
    if plugins.priority && spec.group.is_empty() && spec.plural == "pods" {
        let name = obj["metadata"]["name"].as_str().unwrap_or("").to_string();
        let named = match priority::class_of(obj).map(str::to_string) {
            Some(class_name) => state
                .store
                .get(&PRIORITY_CLASSES.key(None, &class_name))
                .await
                .map_err(crate::storage_status::store_error)?
                .map(|v| from_stored(&v.value, v.mod_revision))
                .transpose()?,
            None => None,
        };
        let classes = if priority::class_of(obj).is_none() {
            list_values(state, &PRIORITY_CLASSES.key_prefix(None)).await?
        } else {
            Vec::new()
        };
        priority::admit(obj, named.as_ref(), &classes).map_err(|reason| {
            tracing::info!(pod = %name, %reason, "Priority refused");
            forbidden("", "pods", &name, &reason)
        })?;
    }
    if plugins.default_ingress_class
        && spec.group == crate::registry::networking::GROUP
        && spec.plural == "ingresses"
    {
        let classes = list_values(state, &INGRESS_CLASSES.key_prefix(None)).await?;
        if let Some(class) = default_ingress_class::admit(obj, &classes) {
            tracing::debug!(ingress = obj["metadata"]["name"].as_str().unwrap_or(""), %class,
                "DefaultIngressClass set the ingress's class");
        }
    }
    Ok(())
}

/// LimitRanger for a create: the namespace's LimitRange defaults on a pod's containers, then its
/// bounds on the pod (or on a claim's storage request).
pub async fn limits_create(
    state: &AdmissionContext<'_>,
    target: &Target,
    obj: &mut Value,
) -> Result<(), ApiError> {
    let spec = target.spec;
    let (Some(ns), false, true) = (
        target.namespace.as_deref(),
        target.status,
        state.plugins.limit_ranger && spec.group.is_empty(),
    ) else {
        return Ok(());
    };
    if spec.plural != "pods" && spec.plural != "persistentvolumeclaims" {
        return Ok(());
    }
    let ranges = list_values(state, &LIMIT_RANGES.key_prefix(Some(ns))).await?;
    if ranges.is_empty() {
        return Ok(());
    }
    let name = obj["metadata"]["name"].as_str().unwrap_or("").to_string();
    let errors = if spec.plural == "pods" {
        if limit_ranger::default_pod(obj, &ranges).is_some() {
            // Defaults can put a request above its limit: the pod is validated again.
            let causes = (spec.validate)(obj);
            if !causes.is_empty() {
                return Err(ApiError::invalid(spec.group, spec.kind, &name, causes));
            }
        }
        limit_ranger::validate_pod(obj, &ranges)
    } else {
        limit_ranger::validate_claim(obj, &ranges)
    };
    if errors.is_empty() {
        return Ok(());
    }
    let reason = limit_ranger::aggregate(&errors);
    tracing::info!(namespace = ns, name = %name, %reason, "LimitRanger refused");
    Err(forbidden(spec.group, spec.plural, &name, &reason))
}

/// How often the quota charge is retried when a quota changed under it.
const QUOTA_ATTEMPTS: usize = 8;

/// ResourceQuota for a create (the last admission step): refuses what the namespace's quotas do
/// not allow, and charges the rest to them (not for a dry run).
pub async fn quota_create(
    state: &AdmissionContext<'_>,
    target: &Target,
    obj: &Value,
    dry_run: bool,
) -> Result<(), ApiError> {
    let spec = target.spec;
    let (Some(ns), false, true) = (
        target.namespace.as_deref(),
        target.status,
        state.plugins.resource_quota,
    ) else {
        return Ok(());
    };
    let name = obj["metadata"]["name"].as_str().unwrap_or("").to_string();
    let prefix = RESOURCE_QUOTAS.key_prefix(Some(ns));
    for _ in 0..QUOTA_ATTEMPTS {
        let (items, _) = state
            .store
            .list(&prefix)
            .await
            .map_err(crate::storage_status::store_error)?;
        if items.is_empty() {
            return Ok(());
        }
        let quotas: Vec<(Value, i64)> = items
            .iter()
            .map(|i| Ok((from_stored(&i.value, i.mod_revision)?, i.mod_revision)))
            .collect::<Result<_, ApiError>>()?;
        let values: Vec<Value> = quotas.iter().map(|(q, _)| q.clone()).collect();
        let charges =
            resource_quota::evaluate(&values, spec.group, spec.plural, obj).map_err(|reason| {
                tracing::info!(namespace = ns, name = %name, %reason, "ResourceQuota refused");
                forbidden(spec.group, spec.plural, &name, &reason)
            })?;
        if dry_run || charges.is_empty() {
            return Ok(());
        }
        let mut lost = false;
        for charge in charges {
            let Some((q, rev)) = quotas
                .iter()
                .find(|(q, _)| q["metadata"]["name"] == charge.name.as_str())
            else {
                continue;
            };
            let updated = resource_quota::charged(q.clone(), &charge.used);
            match state
                .store
                .update(
                    &RESOURCE_QUOTAS.key(Some(ns), &charge.name),
                    to_stored(&updated),
                    *rev,
                )
                .await
            {
                Ok(_) => {}
                // The quota changed (another charge, or the controller's recount): evaluate anew.
                Err(
                    crate::storage::StoreError::Conflict | crate::storage::StoreError::NotFound,
                ) => {
                    lost = true;
                    break;
                }
                Err(e) => return Err(crate::storage_status::store_error(e)),
            }
        }
        if !lost {
            return Ok(());
        }
    }
    Err(ApiError {
        code: 409,
        reason: "Conflict",
        message: format!(
            "Operation cannot be fulfilled on resourcequotas: the quotas in namespace {ns} kept changing while {name:?} was charged to them"
        ),
        details: None,
    })
}

/// PersistentVolumeClaimResize for an update of a claim (after the strategy's validation).
pub async fn storage_update(
    state: &AdmissionContext<'_>,
    target: &Target,
    old: &Value,
    new: &Value,
) -> Result<(), ApiError> {
    let spec = target.spec;
    if !state.plugins.pvc_resize
        || !spec.group.is_empty()
        || spec.plural != "persistentvolumeclaims"
        || target.status
    {
        return Ok(());
    }
    let Some(class_name) = pvc_resize::growing_class(old, new) else {
        return Ok(());
    };
    let class = if class_name.is_empty() {
        None
    } else {
        match state
            .store
            .get(&STORAGE_CLASSES.key(None, class_name))
            .await
            .map_err(crate::storage_status::store_error)?
        {
            Some(v) => Some(from_stored(&v.value, v.mod_revision)?),
            None => None,
        }
    };
    pvc_resize::admit(old, new, class.as_ref()).map_err(|reason| {
        let name = new["metadata"]["name"].as_str().unwrap_or("");
        forbidden("", spec.plural, name, reason)
    })
}

async fn list_values(state: &AdmissionContext<'_>, prefix: &str) -> Result<Vec<Value>, ApiError> {
    let (items, _) = state
        .store
        .list(prefix)
        .await
        .map_err(crate::storage_status::store_error)?;
    items
        .iter()
        .map(|i| from_stored(&i.value, i.mod_revision))
        .collect()
}

/// How often ServiceAccount admission looks the `default` ServiceAccount up before refusing a pod,
/// and the pause between lookups (upstream: 10 lookups, 100-200 ms apart).
const DEFAULT_ACCOUNT_LOOKUPS: u32 = 10;
const LOOKUP_PAUSE: std::time::Duration = std::time::Duration::from_millis(150);

/// ServiceAccount admission for a pod being created (mutates it).
pub async fn service_account(
    state: &AdmissionContext<'_>,
    target: &Target,
    pod: &mut Value,
) -> Result<(), ApiError> {
    let spec = target.spec;
    if !state.plugins.service_account
        || !spec.group.is_empty()
        || spec.plural != "pods"
        || service_account::is_mirror(pod)
    {
        return Ok(());
    }
    let ns = target.namespace.as_deref().unwrap_or("default");
    let name = service_account::default_name(pod);
    let key = SERVICE_ACCOUNTS.key(Some(ns), &name);
    // Upstream looks `default` up a few times before refusing: the serviceaccount controller makes
    // it just after the namespace, and a pod created right after its namespace should not fail.
    let attempts = if name == service_account::DEFAULT_SERVICE_ACCOUNT {
        DEFAULT_ACCOUNT_LOOKUPS
    } else {
        1
    };
    let mut found = None;
    for attempt in 0..attempts {
        if attempt > 0 {
            tokio::time::sleep(LOOKUP_PAUSE).await;
        }
        found = state
            .store
            .get(&key)
            .await
            .map_err(crate::storage_status::store_error)?;
        if found.is_some() {
            break;
        }
    }
    let Some(found) = found else {
        let pod_name = pod["metadata"]["name"].as_str().unwrap_or("").to_string();
        return Err(forbidden(
            "",
            "pods",
            &pod_name,
            &service_account::lookup_failed(ns, &name),
        ));
    };
    let sa = from_stored(&found.value, found.mod_revision)?;
    if state.plugins.mount_tokens && service_account::should_automount(pod, &sa) {
        service_account::mount_token(pod, &name_suffix());
    }
    service_account::copy_image_pull_secrets(pod, &sa);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn plugin_flags() {
        let d = Plugins::from_flags(&[], &[], true).unwrap();
        assert!(d.node_restriction && !d.service_account);
        let all =
            Plugins::from_flags(&s(&["NodeRestriction", "ServiceAccount"]), &[], false).unwrap();
        assert!(all.service_account && !all.mount_tokens);
        let off = Plugins::from_flags(&[], &s(&["NodeRestriction"]), true).unwrap();
        assert!(!off.node_restriction);
        assert!(d.default_storage_class && d.storage_protection && d.pvc_resize);
        let no_storage = Plugins::from_flags(
            &[],
            &s(&[
                "DefaultStorageClass",
                "StorageObjectInUseProtection",
                "PersistentVolumeClaimResize",
            ]),
            true,
        )
        .unwrap();
        assert!(!no_storage.default_storage_class && !no_storage.storage_protection);
        assert!(!no_storage.pvc_resize && no_storage.node_restriction);
        assert!(d.pod_security);
        assert!(
            !Plugins::from_flags(&[], &s(&["PodSecurity"]), true)
                .unwrap()
                .pod_security
        );
        assert!(matches!(
            Plugins::from_flags(&s(&["AlwaysPullImages"]), &[], true),
            Err(AdmissionError::UnknownPlugin(_))
        ));
    }
}
