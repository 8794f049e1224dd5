//! Admission: checks and defaults that need the object, after authentication and authorization
//! (NamespaceLifecycle lives in `handlers::crud::create_object`). Plugins are chosen with upstream's
//! `--enable-admission-plugins` / `--disable-admission-plugins`; NodeRestriction is on by default,
//! ServiceAccount only when enabled (it refuses pods until their ServiceAccount exists, which needs
//! the controller-manager's serviceaccount controller, and mounts tokens only an API server with
//! `--service-account-signing-key-file` can issue). A bare kiln-apiserver (tests without a
//! controller-manager) therefore leaves it off; `kiln init`'s static pod turns it on, as kubeadm's
//! kube-apiserver has it.

pub mod node_restriction;
pub mod service_account;

use serde_json::Value;

use crate::handlers::{AppState, Target};
use crate::registry::lifecycle::{from_stored, name_suffix};
use crate::registry::resources::SERVICE_ACCOUNTS;
use crate::status::{qualified, ApiError};
use node_restriction::Op;

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum AdmissionError {
    #[error("admission plugin {0:?} is not supported by kiln-apiserver (known: NamespaceLifecycle, NodeRestriction, ServiceAccount)")]
    UnknownPlugin(String),
    #[error("admission plugin NamespaceLifecycle cannot be disabled in kiln-apiserver")]
    Required,
}

/// Which plugins run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plugins {
    pub node_restriction: bool,
    pub service_account: bool,
    /// Whether ServiceAccount admission adds token volumes (only when tokens can be issued).
    pub mount_tokens: bool,
}

impl Plugins {
    pub fn from_flags(
        enable: &[String],
        disable: &[String],
        can_issue_tokens: bool,
    ) -> Result<Self, AdmissionError> {
        let known = ["NamespaceLifecycle", "NodeRestriction", "ServiceAccount"];
        for p in enable.iter().chain(disable) {
            if !p.is_empty() && !known.contains(&p.as_str()) {
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
    state: &AppState,
    target: &Target,
    subresource: Option<&str>,
    op: Op<'_>,
) -> Result<(), ApiError> {
    if !state.admission.node_restriction {
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

/// How often ServiceAccount admission looks the `default` ServiceAccount up before refusing a pod,
/// and the pause between lookups (upstream: 10 lookups, 100-200 ms apart).
const DEFAULT_ACCOUNT_LOOKUPS: u32 = 10;
const LOOKUP_PAUSE: std::time::Duration = std::time::Duration::from_millis(150);

/// ServiceAccount admission for a pod being created (mutates it).
pub async fn service_account(
    state: &AppState,
    target: &Target,
    pod: &mut Value,
) -> Result<(), ApiError> {
    let spec = target.spec;
    if !state.admission.service_account
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
            .map_err(crate::handlers::crud::store_error)?;
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
    if state.admission.mount_tokens && service_account::should_automount(pod, &sa) {
        service_account::mount_token(pod, &name_suffix());
    }
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
        assert!(matches!(
            Plugins::from_flags(&s(&["AlwaysPullImages"]), &[], true),
            Err(AdmissionError::UnknownPlugin(_))
        ));
    }
}
