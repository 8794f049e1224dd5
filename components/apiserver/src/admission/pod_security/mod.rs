//! PodSecurity admission (upstream's k8s.io/pod-security-admission, built into kube-apiserver as
//! the `PodSecurity` plugin): namespaces choose a Pod Security Standards level per mode with
//! `pod-security.kubernetes.io/{enforce,audit,warn}[-version]` labels; pods that break the enforce
//! level are refused, the audit level is reported as an audit annotation, the warn level as a
//! `Warning` header. Workload kinds with a pod template are only warned and audited, never refused
//! (their pods are, when created). The defaults and exemptions come from `config`.
//!
//! It runs where upstream's validating plugin does: after every mutation (built-in plugins and
//! mutating webhooks), before the validating webhooks (`webhook::run` calls [`admit`]).

pub mod api;
pub mod audit;
pub mod baseline;
pub mod checks;
pub mod config;
pub mod namespace;
pub mod restricted;

#[cfg(test)]
mod checks_tests;

use serde_json::Value;

use super::webhook::Operation;
use crate::admission::context::AdmissionContext;
use crate::registry::lifecycle::from_stored;
use crate::registry::resources::{NAMESPACES, PODS};
use crate::request::Target;
use crate::status::{ApiError, Cause};
use api::{labels_of, policy_to_evaluate, Level, LevelVersion, Policy};
use checks::{details, evaluate, Violation};
pub use config::Config;

/// The plugin's state: whether it runs, and its configuration.
#[derive(Debug, Clone, Default)]
pub struct PodSecurity {
    pub enabled: bool,
    pub config: Config,
}

/// Where a workload kind keeps its pod template (upstream's DefaultPodSpecExtractor).
fn template_of<'a>(group: &str, plural: &str, obj: &'a Value) -> Option<&'a Value> {
    match (group, plural) {
        ("", "podtemplates") => Some(&obj["template"]),
        ("", "replicationcontrollers")
        | ("apps", "replicasets" | "deployments" | "statefulsets" | "daemonsets")
        | ("batch", "jobs") => Some(&obj["spec"]["template"]),
        ("batch", "cronjobs") => Some(&obj["spec"]["jobTemplate"]["spec"]["template"]),
        _ => None,
    }
}

/// PodSecurity for a create or update of `obj` (`old` on updates).
pub async fn admit(
    state: &AdmissionContext<'_>,
    target: &Target,
    operation: Operation,
    old: Option<&Value>,
    obj: Option<&Value>,
) -> Result<(), ApiError> {
    let ps = &state.pod_security;
    // Subresources: pods/status changes no spec field PodSecurity checks, and workload
    // subresources (status, scale) carry no pod template.
    if !ps.enabled || target.status {
        return Ok(());
    }
    let (Some(obj), Operation::Create | Operation::Update) = (obj, operation) else {
        return Ok(());
    };
    let old = old.filter(|_| operation == Operation::Update);
    let spec = target.spec;
    match (spec.group, spec.plural) {
        ("", "namespaces") => admit_namespace(state, &ps.config, obj, old).await,
        ("", "pods") => admit_pod(state, target, &ps.config, obj, old).await,
        (g, p) => match template_of(g, p, obj) {
            Some(template) => admit_workload(state, target, &ps.config, obj, template).await,
            None => Ok(()),
        },
    }
}

fn user_of(target: &Target) -> &str {
    target
        .requester
        .user
        .as_ref()
        .map(|u| u.name.as_str())
        .unwrap_or("")
}

async fn namespace_labels(state: &AdmissionContext<'_>, ns: &str) -> Result<Value, String> {
    match state.store.get(&NAMESPACES.key(None, ns)).await {
        Ok(Some(v)) => from_stored(&v.value, v.mod_revision).map_err(|e| e.message),
        Ok(None) => Err(format!("namespaces {ns:?} not found")),
        Err(e) => Err(e.to_string()),
    }
}

/// Upstream's aggregate of field errors: one as is, several in brackets.
fn aggregate(errs: &[Cause]) -> String {
    let texts: Vec<String> = errs
        .iter()
        .map(|c| format!("{}: {}", c.field, c.message))
        .collect();
    if texts.len() == 1 {
        texts[0].clone()
    } else {
        format!("[{}]", texts.join(", "))
    }
}

async fn admit_pod(
    state: &AdmissionContext<'_>,
    target: &Target,
    config: &Config,
    pod: &Value,
    old: Option<&Value>,
) -> Result<(), ApiError> {
    let ns = target.namespace.as_deref().unwrap_or("");
    if config.exempt_namespace(ns) {
        audit::annotate("exempt", "namespace");
        return Ok(());
    }
    if config.exempt_user(user_of(target)) {
        audit::annotate("exempt", "user");
        return Ok(());
    }
    let nsobj = namespace_labels(state, ns).await.map_err(|e| {
        audit::annotate("error", &format!("failed to lookup namespace {ns:?}: {e}"));
        ApiError::internal(format!("failed to lookup namespace {ns:?}"))
    })?;
    let (policy, errs) = policy_to_evaluate(&labels_of(&nsobj), config.defaults);
    if errs.is_empty() && policy.fully_privileged() {
        audit::annotate("enforce-policy", "privileged:latest");
        return Ok(());
    }
    if old.is_some_and(|old| !significant_update(pod, old)) {
        return Ok(());
    }
    let name = pod["metadata"]["name"].as_str().unwrap_or("");
    evaluate_pod(
        config,
        &policy,
        &errs,
        &pod["metadata"],
        &pod["spec"],
        Some(("pods", name)),
    )
}

async fn admit_workload(
    state: &AdmissionContext<'_>,
    target: &Target,
    config: &Config,
    obj: &Value,
    template: &Value,
) -> Result<(), ApiError> {
    let ns = target.namespace.as_deref().unwrap_or("");
    if config.exempt_namespace(ns) {
        audit::annotate("exempt", "namespace");
        return Ok(());
    }
    if config.exempt_user(user_of(target)) {
        audit::annotate("exempt", "user");
        return Ok(());
    }
    // Workloads are never refused: a failed lookup is only recorded.
    let nsobj = match namespace_labels(state, ns).await {
        Ok(n) => n,
        Err(e) => {
            audit::annotate("error", &format!("failed to lookup namespace {ns:?}: {e}"));
            return Ok(());
        }
    };
    let (policy, errs) = policy_to_evaluate(&labels_of(&nsobj), config.defaults);
    if errs.is_empty()
        && policy.warn.level == Level::Privileged
        && policy.audit.level == Level::Privileged
    {
        return Ok(());
    }
    // A ReplicationController may have no template at all.
    if template.is_null() {
        return Ok(());
    }
    tracing::trace!(
        kind = target.spec.kind,
        name = obj["metadata"]["name"].as_str().unwrap_or(""),
        "PodSecurity evaluates a pod template"
    );
    evaluate_pod(
        config,
        &policy,
        &errs,
        &template["metadata"],
        &template["spec"],
        None,
    )
}

/// Evaluates a pod or template: refuses it for the enforce level when `enforce` names the pod
/// (`("pods", name)`), records the audit level's violations, warns for the warn level.
fn evaluate_pod(
    config: &Config,
    policy: &Policy,
    errs: &[Cause],
    meta: &Value,
    spec: &Value,
    enforce: Option<(&str, &str)>,
) -> Result<(), ApiError> {
    if config.exempt_runtime_class(spec["runtimeClassName"].as_str()) {
        audit::annotate("exempt", "runtimeClass");
        return Ok(());
    }
    if !errs.is_empty() {
        tracing::debug!(errors = %aggregate(errs), "PodSecurity namespace labels do not parse");
        audit::annotate(
            "error",
            &format!("Failed to parse policy: {}", aggregate(errs)),
        );
    }
    let mut cache: Vec<(LevelVersion, Vec<Violation>)> = Vec::new();
    let mut results = |lv: LevelVersion| -> Vec<Violation> {
        if let Some((_, v)) = cache.iter().find(|(k, _)| *k == lv) {
            return v.clone();
        }
        let v = evaluate(lv, meta, spec);
        cache.push((lv, v.clone()));
        v
    };
    let mut refusal = None;
    if let Some((resource, name)) = enforce {
        audit::annotate("enforce-policy", &policy.enforce.to_string());
        let v = results(policy.enforce);
        if !v.is_empty() {
            let reason = format!(
                "violates PodSecurity \"{}\": {}",
                policy.enforce,
                details(&v)
            );
            tracing::info!(pod = name, %reason, "PodSecurity refused");
            refusal = Some(super::forbidden("", resource, name, &reason));
        }
    }
    let v = results(policy.audit);
    if !v.is_empty() {
        audit::annotate(
            "audit-violations",
            &format!(
                "would violate PodSecurity \"{}\": {}",
                policy.audit,
                details(&v)
            ),
        );
    }
    if let Some(refusal) = refusal {
        // No warnings on a request that is refused anyway.
        return Err(refusal);
    }
    let v = results(policy.warn);
    if !v.is_empty() {
        crate::warnings::add(&format!(
            "would violate PodSecurity \"{}\": {}",
            policy.warn,
            details(&v)
        ));
    }
    Ok(())
}

/// Whether a pod update changes what PodSecurity checks: only container images (and added
/// ephemeral containers) may change on a pod, so only those are re-checked, as upstream.
fn significant_update(new: &Value, old: &Value) -> bool {
    let list =
        |p: &Value, k: &str| -> Vec<Value> { p["spec"][k].as_array().cloned().unwrap_or_default() };
    for k in ["containers", "initContainers"] {
        let (n, o) = (list(new, k), list(old, k));
        if n.len() != o.len() || n.iter().zip(&o).any(|(a, b)| a["image"] != b["image"]) {
            return true;
        }
    }
    let old_ephemeral = list(old, "ephemeralContainers");
    list(new, "ephemeralContainers").iter().any(|c| {
        match old_ephemeral.iter().find(|o| o["name"] == c["name"]) {
            None => true,
            Some(o) => o["image"] != c["image"],
        }
    })
}

async fn admit_namespace(
    state: &AdmissionContext<'_>,
    config: &Config,
    new: &Value,
    old: Option<&Value>,
) -> Result<(), ApiError> {
    let name = new["metadata"]["name"].as_str().unwrap_or("");
    match namespace::admit(config, new, old) {
        namespace::Verdict::Allow => Ok(()),
        namespace::Verdict::Warn(w) => {
            w.iter().for_each(|w| crate::warnings::add(w));
            Ok(())
        }
        namespace::Verdict::Invalid(errs) => Err(ApiError::invalid("", "Namespace", name, errs)),
        namespace::Verdict::CheckPods(enforce) => {
            for w in pods_warnings(state, config, name, enforce).await {
                crate::warnings::add(&w);
            }
            Ok(())
        }
    }
}

async fn pods_warnings(
    state: &AdmissionContext<'_>,
    config: &Config,
    ns: &str,
    enforce: LevelVersion,
) -> Vec<String> {
    let deadline = tokio::time::Instant::now() + namespace::POD_CHECK_TIMEOUT;
    let listed =
        tokio::time::timeout_at(deadline, state.store.list(&PODS.key_prefix(Some(ns)))).await;
    let pods: Vec<Value> = match listed {
        Ok(Ok((items, _))) => items
            .iter()
            .filter_map(|i| from_stored(&i.value, i.mod_revision).ok())
            .collect(),
        Ok(Err(e)) => {
            tracing::warn!(namespace = ns, error = %e, "PodSecurity could not list pods");
            return vec!["failed to list pods while checking new PodSecurity enforce level".into()];
        }
        Err(_) => {
            return vec!["failed to list pods while checking new PodSecurity enforce level".into()];
        }
    };
    namespace::existing_pods(
        ns,
        enforce,
        pods,
        config,
        namespace::MAX_PODS_TO_CHECK,
        &mut || tokio::time::Instant::now() >= deadline,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_image_changes_are_significant() {
        let pod = json!({"spec": {"containers": [{"name": "c", "image": "a"}],
            "initContainers": [{"name": "i", "image": "a"}]}});
        let mut labelled = pod.clone();
        labelled["metadata"] = json!({"labels": {"x": "y"}});
        labelled["spec"]["containers"][0]["securityContext"] = json!({"privileged": true});
        assert!(!significant_update(&labelled, &pod));
        let mut image = pod.clone();
        image["spec"]["initContainers"][0]["image"] = json!("b");
        assert!(significant_update(&image, &pod));
        let mut debug = pod.clone();
        debug["spec"]["ephemeralContainers"] = json!([{"name": "dbg", "image": "busybox"}]);
        assert!(significant_update(&debug, &pod));
        assert!(!significant_update(&debug, &debug));
    }

    #[test]
    fn templates_are_found_per_kind() {
        let cj =
            json!({"spec": {"jobTemplate": {"spec": {"template": {"spec": {"containers": []}}}}}});
        assert!(template_of("batch", "cronjobs", &cj).is_some_and(|t| t["spec"].is_object()));
        let d = json!({"spec": {"template": {"spec": {}}}});
        assert!(template_of("apps", "deployments", &d).is_some_and(|t| t.is_object()));
        assert!(template_of("", "podtemplates", &json!({"template": {}})).is_some());
        assert!(template_of("", "configmaps", &d).is_none());
        assert!(template_of("apps", "controllerrevisions", &d).is_none());
    }
}
