//! The ValidatingAdmissionPolicy status controller: each policy's expressions type-checked against
//! the kinds it matches, written as `status.typeChecking` with `status.observedGeneration`, as
//! upstream's validatingadmissionpolicy-status controller does (its presence tells a client the
//! check finished; warnings never change what the policy does). Upstream runs it in
//! kube-controller-manager and resolves schemas through the OpenAPI; kiln runs it in-process beside
//! the CRD controller and reads the same schemas directly (built-in kinds' from
//! `openapi_schemas`, custom resources' from their CRD). Every apiserver of an HA control plane
//! runs it; writes are compare-and-swap, so they converge.

use std::time::Duration;

use serde_json::{json, Value};
use tokio::sync::watch;

use crate::cel::Ty;
use crate::openapi_schemas::builtin_schema_inlined;
use crate::registry::admission_registration::{
    policy_type_issues, CheckedTypes, VALIDATING_ADMISSION_POLICIES,
};
use crate::registry::lifecycle::{from_stored, to_stored};
use crate::registry::{Registry, ResourceSpec};
use crate::storage::{Store, StoreError};

#[derive(Debug, thiserror::Error)]
pub enum PolicyStatusError {
    #[error("ValidatingAdmissionPolicy store access: {0}")]
    Store(#[from] StoreError),
}

/// Upstream checks at most this many matched kinds per policy.
const MAX_TYPES: usize = 10;

/// The wait after a failed pass or watch.
const RETRY: Duration = Duration::from_secs(1);

/// The kinds a policy's matchConstraints name exactly, sorted by group, version and kind as
/// upstream's: rules with a wildcard group or version are skipped, and wildcard or subresource
/// resources within a rule.
fn matched_kinds(policy: &Value, registry: &Registry) -> Vec<&'static ResourceSpec> {
    let mut out: Vec<&'static ResourceSpec> = Vec::new();
    let rules = policy["spec"]["matchConstraints"]["resourceRules"].as_array();
    for rule in rules.into_iter().flatten() {
        let (groups, versions) = (
            sorted_strings(rule, "apiGroups"),
            sorted_strings(rule, "apiVersions"),
        );
        if groups.iter().chain(&versions).any(|s| s.contains('*')) {
            continue;
        }
        let resources: Vec<&str> = sorted_strings(rule, "resources")
            .into_iter()
            .filter(|r| !r.contains(['*', '/']))
            .collect();
        for g in &groups {
            for v in &versions {
                for r in &resources {
                    let Some(spec) = registry.lookup(g, v, r) else {
                        continue;
                    };
                    if !out.iter().any(|s| std::ptr::eq(*s, spec)) {
                        out.push(spec);
                    }
                    if out.len() == MAX_TYPES {
                        return sorted(out);
                    }
                }
            }
        }
    }
    sorted(out)
}

fn sorted_strings<'a>(rule: &'a Value, field: &str) -> Vec<&'a str> {
    let mut v: Vec<&str> = rule[field]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    v.sort_unstable();
    v
}

fn sorted(mut specs: Vec<&'static ResourceSpec>) -> Vec<&'static ResourceSpec> {
    specs.sort_by_key(|s| (s.group, s.version, s.kind));
    specs
}

/// A kind's object type for the checker: a custom resource's from its version's schema (the
/// resource root: apiVersion, kind, metadata.name/generateName), a built-in's from its OpenAPI
/// schema (metadata a full ObjectMeta). `None` when no schema is known, as upstream skips the kind.
fn object_type(spec: &ResourceSpec) -> Option<Ty> {
    match spec.custom {
        Some(custom) => custom.schema.as_ref().map(|s| Ty::from_schema(s, true)),
        None => builtin_schema_inlined(spec.group, spec.version, spec.kind)
            .map(|s| Ty::from_schema(&s, false)),
    }
}

/// The paramKind's object type, when it names a served kind with a known schema.
fn params_type(policy: &Value, registry: &Registry) -> Option<Ty> {
    let param = &policy["spec"]["paramKind"];
    let (api_version, kind) = (param["apiVersion"].as_str()?, param["kind"].as_str()?);
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let spec = registry
        .all()
        .into_iter()
        .find(|s| s.group == group && s.version == version && s.kind == kind)?;
    object_type(spec)
}

/// Go's `GroupVersionKind.String()`: `apps/v1, Kind=Deployment` (`/v1, Kind=Pod` for core).
fn gvk(spec: &ResourceSpec) -> String {
    format!("{}/{}, Kind={}", spec.group, spec.version, spec.kind)
}

/// The policy's `status.typeChecking`: one warning per expression that fails for some matched
/// kind, its text each failing kind's `<gvk>: <issues>` line, as upstream's.
pub fn type_checking(policy: &Value, registry: &Registry) -> Value {
    let params = params_type(policy, registry);
    let per_kind: Vec<(String, Vec<(String, String)>)> = matched_kinds(policy, registry)
        .into_iter()
        .filter_map(|spec| {
            let object = object_type(spec)?;
            let types = CheckedTypes {
                object,
                params: params.clone(),
            };
            Some((gvk(spec), policy_type_issues(&policy["spec"], &types)))
        })
        .collect();
    // In the policy's order: validations[i].expression, then its messageExpression.
    let mut refs: Vec<String> = Vec::new();
    for (_, issues) in &per_kind {
        for (field, _) in issues {
            if !refs.contains(field) {
                refs.push(field.clone());
            }
        }
    }
    refs.sort_by_key(|r| field_order(r));
    let warnings: Vec<Value> = refs
        .iter()
        .map(|field| {
            let lines: Vec<String> = per_kind
                .iter()
                .filter_map(|(kind, issues)| {
                    let (_, text) = issues.iter().find(|(f, _)| f == field)?;
                    Some(format!("{kind}: {text}\n"))
                })
                .collect();
            json!({"fieldRef": field, "warning": lines.join("\n")})
        })
        .collect();
    if warnings.is_empty() {
        json!({})
    } else {
        json!({ "expressionWarnings": warnings })
    }
}

/// `spec.validations[i].expression` before `spec.validations[i].messageExpression`, by index.
fn field_order(field: &str) -> (usize, bool) {
    let index = field
        .strip_prefix("spec.validations[")
        .and_then(|r| r.split(']').next())
        .and_then(|i| i.parse().ok())
        .unwrap_or(usize::MAX);
    (index, field.ends_with(".messageExpression"))
}

/// One pass: every policy whose generation is newer than its status's gets its type check.
/// Returns the store revision read.
pub async fn reconcile(store: &Store, registry: &Registry) -> Result<i64, PolicyStatusError> {
    let (items, revision) = store
        .list(&VALIDATING_ADMISSION_POLICIES.key_prefix(None))
        .await?;
    for item in items {
        let Ok(mut policy) = from_stored(&item.value, item.mod_revision) else {
            continue;
        };
        let generation = policy["metadata"]["generation"].as_i64().unwrap_or(0);
        let observed = policy["status"]["observedGeneration"].as_i64().unwrap_or(0);
        if generation <= observed && policy["status"]["typeChecking"].is_object() {
            continue;
        }
        let checked = type_checking(&policy, registry);
        if !policy["status"].is_object() {
            policy["status"] = json!({});
        }
        policy["status"]["observedGeneration"] = json!(generation);
        policy["status"]["typeChecking"] = checked;
        match store
            .update(&item.key, to_stored(&policy), item.mod_revision)
            .await
        {
            // Changed or deleted meanwhile: the watch brings the next pass.
            Ok(_) | Err(StoreError::Conflict | StoreError::NotFound) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(revision)
}

/// Runs a pass on every policy change until `stop`.
pub async fn run(store: Store, registry: Registry, mut stop: watch::Receiver<bool>) {
    let prefix = VALIDATING_ADMISSION_POLICIES.key_prefix(None);
    loop {
        let revision = match reconcile(&store, &registry).await {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e, "ValidatingAdmissionPolicy status pass failed");
                tokio::select! {
                    _ = stop.changed() => return,
                    _ = tokio::time::sleep(RETRY) => continue,
                }
            }
        };
        let mut watch = match store.watch(&prefix, revision + 1).await {
            Ok(w) => w,
            Err(e) => {
                tracing::warn!(error = %e, "ValidatingAdmissionPolicy watch failed");
                tokio::time::sleep(RETRY).await;
                continue;
            }
        };
        tokio::select! {
            _ = stop.changed() => return,
            _ = watch.next() => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(validations: Value) -> Value {
        json!({"metadata": {"name": "p", "generation": 1}, "spec": {
            "matchConstraints": {"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"],
                "resources": ["deployments", "deployments/scale"], "operations": ["CREATE"]}]},
            "validations": validations}})
    }

    #[test]
    fn a_correct_policy_has_an_empty_type_check() {
        let p = policy(json!([{"expression": "object.spec.replicas > 1"},
            {"expression": "object.metadata.labels['a'] == 'b'",
             "messageExpression": "'name ' + object.metadata.name"}]));
        assert_eq!(type_checking(&p, &Registry::default()), json!({}));
    }

    #[test]
    fn type_confusion_is_warned_per_expression_with_the_kind() {
        let p = policy(json!([{"expression": "object.spec.replicas > '1'",
            "messageExpression": "'wants replicas > 1, got ' + object.spec.replicas"}]));
        let t = type_checking(&p, &Registry::default());
        let w = t["expressionWarnings"].as_array().expect("warnings");
        assert_eq!(w.len(), 2, "{t:#}");
        assert_eq!(w[0]["fieldRef"], "spec.validations[0].expression");
        let text = w[0]["warning"].as_str().unwrap();
        assert!(
            text.starts_with("apps/v1, Kind=Deployment: ERROR: <input>:1:"),
            "{text}"
        );
        assert!(text.contains("found no matching overload for '_>_' applied to '(int, string)'"));
        assert_eq!(w[1]["fieldRef"], "spec.validations[0].messageExpression");
        assert!(w[1]["warning"]
            .as_str()
            .unwrap()
            .contains("found no matching overload for '_+_' applied to '(string, int)'"));
    }

    #[test]
    fn wildcards_and_unknown_kinds_are_not_checked() {
        let mut p = policy(json!([{"expression": "object.nope > '1'"}]));
        p["spec"]["matchConstraints"]["resourceRules"][0]["apiGroups"] = json!(["*"]);
        assert_eq!(type_checking(&p, &Registry::default()), json!({}));
        p["spec"]["matchConstraints"]["resourceRules"][0]["apiGroups"] = json!(["example.com"]);
        assert_eq!(type_checking(&p, &Registry::default()), json!({}));
    }

    #[test]
    fn params_are_typed_by_their_kind() {
        let mut p = policy(json!([{"expression": "params.data.max > 1"}]));
        p["spec"]["paramKind"] = json!({"apiVersion": "v1", "kind": "ConfigMap"});
        let t = type_checking(&p, &Registry::default());
        let text = t["expressionWarnings"][0]["warning"].as_str().unwrap_or("");
        assert!(text.contains("applied to '(string, int)'"), "{t:#}");
    }
}
