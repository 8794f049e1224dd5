//! Subresources beyond status: `<resource>/scale` (autoscaling/v1 Scale over any kind with a
//! `ScaleSpec`), and the action subresources `pods/binding` (the scheduler's write) and
//! `pods/eviction` (a delete disruption budgets may refuse: `eviction.rs`). Each is a different
//! view of, or a constrained write to, the parent object, so they reuse the generic
//! read-modify-write loop.

use std::collections::HashMap;

use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde_json::{json, Value};

use super::crud::{guaranteed_update, patch_request, read, required_name};
use crate::patch;
use crate::registry::lifecycle::{now_rfc3339, UpdateScope};
use crate::registry::strategy::ScaleSpec;
use crate::registry::ResourceSpec;
use crate::request::Target;
use crate::selectors::label_selector_string;
use crate::state::AppState;
use crate::status::{json_response, ok_json, ApiError};

/// The Scale view of a scalable object.
pub fn to_scale(spec: &ResourceSpec, obj: &Value) -> Value {
    let meta = &obj["metadata"];
    let scale = spec.scale.as_ref().unwrap_or(&ScaleSpec::REPLICAS);
    let selector = obj
        .pointer(scale.selector)
        .filter(|_| !scale.selector.is_empty())
        .map(|s| match s {
            Value::String(text) => text.clone(),
            other => scale_selector(other),
        })
        .unwrap_or_default();
    let count = |pointer: &str| obj.pointer(pointer).and_then(Value::as_i64).unwrap_or(0);
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            "name": meta["name"],
            "namespace": meta["namespace"],
            "uid": meta["uid"],
            "resourceVersion": meta["resourceVersion"],
            "creationTimestamp": meta["creationTimestamp"],
        },
        "spec": {"replicas": count(scale.spec_replicas)},
        "status": {
            "replicas": count(scale.status_replicas),
            "selector": selector,
        },
    })
}

/// A LabelSelector, or the plain label map a ReplicationController selects with (every value a
/// string), as `status.selector` prints it.
fn scale_selector(selector: &Value) -> String {
    match selector.as_object() {
        Some(m) if !m.is_empty() && m.values().all(Value::is_string) => {
            label_selector_string(&json!({ "matchLabels": selector }))
        }
        _ => label_selector_string(selector),
    }
}

/// Sets the value at a JSON pointer, creating the objects on the way (a CR's `.spec.size`).
fn set_pointer(obj: &mut Value, pointer: &str, value: Value) {
    let mut cur = obj;
    let parts: Vec<String> = pointer
        .split('/')
        .skip(1)
        .map(|p| p.replace("~1", "/").replace("~0", "~"))
        .collect();
    for (i, part) in parts.iter().enumerate() {
        if !cur.is_object() {
            *cur = json!({});
        }
        if i + 1 == parts.len() {
            cur[part.as_str()] = value;
            return;
        }
        cur = &mut cur[part.as_str()];
    }
}

/// Applies a Scale's `spec.replicas` to the parent; its resourceVersion stays a precondition.
fn from_scale(spec: &ResourceSpec, old: &Value, scale: &Value) -> Result<Value, ApiError> {
    let replicas = scale["spec"]["replicas"].as_i64().unwrap_or(0);
    if replicas < 0 {
        return Err(ApiError::invalid(
            "autoscaling",
            "Scale",
            old["metadata"]["name"].as_str().unwrap_or(""),
            vec![crate::status::Cause::invalid(
                "spec.replicas",
                &json!(replicas),
                "must be greater than or equal to 0",
            )],
        ));
    }
    let mut new = old.clone();
    let pointer = spec
        .scale
        .as_ref()
        .unwrap_or(&ScaleSpec::REPLICAS)
        .spec_replicas;
    set_pointer(&mut new, pointer, json!(replicas));
    new["metadata"]["resourceVersion"] = scale["metadata"]["resourceVersion"].clone();
    if new["metadata"]["resourceVersion"].is_null() {
        if let Some(m) = new["metadata"].as_object_mut() {
            m.remove("resourceVersion");
        }
    }
    Ok(new)
}

pub async fn scale(
    state: &AppState,
    target: &Target,
    verb: &str,
    headers: &HeaderMap,
    query: &HashMap<String, String>,
    body: &[u8],
) -> Result<Response, ApiError> {
    let spec = target.spec;
    let obj = match verb {
        "get" => read(state, target, required_name(target)?).await?.0,
        "update" => {
            let scale = crate::request_body::parse_body(headers, body)?;
            guaranteed_update(state, target, UpdateScope::Main, query, |old| {
                from_scale(spec, old, &scale)
            })
            .await?
        }
        "patch" => {
            let (kind, patch_body) = patch_request(headers, body)?;
            guaranteed_update(state, target, UpdateScope::Main, query, |old| {
                let current = to_scale(spec, old);
                let patched = patch::apply(kind, &current, &patch_body)
                    .map_err(|e| ApiError::bad_request(e.to_string()))?;
                // A patch carries no precondition unless it names a resourceVersion itself.
                let mut patched = patched;
                if patch_body["metadata"]["resourceVersion"].is_null() {
                    patched["metadata"]["resourceVersion"] = Value::Null;
                }
                from_scale(spec, old, &patched)
            })
            .await?
        }
        other => return Err(ApiError::method_not_allowed(other, spec.group, spec.plural)),
    };
    Ok(ok_json(&to_scale(spec, &obj)))
}

/// The Status a successful action subresource answers with (upstream: 201 + Status Success).
pub(super) fn success() -> Response {
    json_response(
        StatusCode::CREATED,
        &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
    )
}

/// POST pods/<name>/binding: sets spec.nodeName once (409 if already bound) and PodScheduled.
pub async fn binding(
    state: &AppState,
    target: &Target,
    headers: &HeaderMap,
    query: &HashMap<String, String>,
    body: &[u8],
) -> Result<Response, ApiError> {
    let binding = crate::request_body::parse_body(headers, body)?;
    let name = required_name(target)?;
    if let Some(n) = binding["metadata"]["name"].as_str() {
        if !n.is_empty() && n != name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({n}) does not match the name on the URL ({name})"
            )));
        }
    }
    let node = binding["target"]["name"].as_str().unwrap_or("").to_string();
    if node.is_empty() {
        return Err(ApiError::invalid(
            "",
            "Binding",
            name,
            vec![crate::status::Cause::required("target.name", "")],
        ));
    }
    guaranteed_update(state, target, UpdateScope::All, query, |old| {
        if old["metadata"]["deletionTimestamp"].is_string() {
            return Err(ApiError::conflict_with(
                "",
                "pods",
                name,
                "pod is being deleted, cannot be assigned to a host",
            ));
        }
        let current = old["spec"]["nodeName"].as_str().unwrap_or("");
        if !current.is_empty() {
            return Err(ApiError::conflict_with(
                "",
                "pods",
                name,
                &format!("pod {name} is already assigned to node {current:?}"),
            ));
        }
        let mut new = old.clone();
        new["spec"]["nodeName"] = json!(node);
        let mut conditions: Vec<Value> = old["status"]["conditions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        conditions.retain(|c| c["type"] != "PodScheduled");
        conditions.push(json!({
            "type": "PodScheduled",
            "status": "True",
            "lastProbeTime": null,
            "lastTransitionTime": now_rfc3339(),
        }));
        new["status"]["conditions"] = json!(conditions);
        // The binding's resourceVersion (if any) is not the pod's: no precondition.
        if let Some(m) = new["metadata"].as_object_mut() {
            m.remove("resourceVersion");
        }
        Ok(new)
    })
    .await?;
    Ok(success())
}

/// POST pods/<name>/eviction: a delete that PodDisruptionBudgets may refuse (`eviction.rs`).
pub async fn eviction(
    state: &AppState,
    target: &Target,
    headers: &HeaderMap,
    query: &HashMap<String, String>,
    body: &[u8],
) -> Result<Response, ApiError> {
    super::eviction::evict(state, target, headers, query, body).await
}

/// certificatesigningrequests/<name>/approval: only `status.conditions` change (Approved / Denied),
/// through update (`kubectl certificate approve`) or patch.
pub async fn approval(
    state: &AppState,
    target: &Target,
    verb: &str,
    headers: &HeaderMap,
    query: &HashMap<String, String>,
    body: &[u8],
) -> Result<Response, ApiError> {
    // Upstream's csrApprovalStrategy: only the conditions change (and the metadata, as with any
    // update); spec and the issued certificate stay as stored.
    let build_from = |old: &Value, incoming: &Value| -> Result<Value, ApiError> {
        let mut new = old.clone();
        if incoming["metadata"].is_object() {
            new["metadata"] = incoming["metadata"].clone();
        }
        let mut conditions: Vec<Value> = incoming["status"]["conditions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        for c in &mut conditions {
            if c["status"].is_null() {
                c["status"] = json!("True");
            }
            for t in ["lastUpdateTime", "lastTransitionTime"] {
                if c[t].is_null() {
                    c[t] = json!(now_rfc3339());
                }
            }
        }
        new["status"]["conditions"] = json!(conditions);
        super::crud::precondition_from(&mut new, incoming);
        Ok(new)
    };
    let obj = super::crud::serve_part(
        state,
        target,
        verb,
        headers,
        query,
        body,
        UpdateScope::Status,
        build_from,
    )
    .await?;
    Ok(ok_json(&obj))
}

/// The uid of the Node a pod-bound token names; `None` when the Node does not exist (upstream still
/// embeds the name then, so a token shows where its pod was scheduled).
async fn node_uid(state: &AppState, node: &str) -> Result<Option<String>, ApiError> {
    let key = crate::registry::resources::NODES.key(None, node);
    let stored = state
        .store
        .get(&key)
        .await
        .map_err(crate::storage_status::store_error)?;
    Ok(match stored {
        Some(v) => crate::registry::lifecycle::from_stored(&v.value, v.mod_revision)?["metadata"]
            ["uid"]
            .as_str()
            .map(str::to_string),
        None => None,
    })
}

/// POST serviceaccounts/<name>/token (TokenRequest): a signed, audience- and time-bound JWT,
/// optionally bound to a Pod or Secret whose deletion invalidates it.
pub async fn token(
    state: &AppState,
    target: &Target,
    headers: &HeaderMap,
    _query: &HashMap<String, String>,
    body: &[u8],
) -> Result<Response, ApiError> {
    let request = crate::request_body::parse_body(headers, body)?;
    let name = required_name(target)?;
    let ns = target.namespace.clone().unwrap_or_default();
    if !state.tokens.keys.as_ref().is_some_and(|k| k.can_sign()) {
        return Err(ApiError::path_not_found());
    }
    let (sa, _) = read(state, target, name).await?;
    let spec = &request["spec"];
    let expiration = spec["expirationSeconds"].as_i64().unwrap_or(3600);
    let invalid = |field: &str, value: Value, why: &str| {
        ApiError::invalid(
            "authentication.k8s.io",
            "TokenRequest",
            name,
            vec![crate::status::Cause::invalid(field, &value, why)],
        )
    };
    if expiration < 600 {
        return Err(invalid(
            "spec.expirationSeconds",
            json!(expiration),
            "may not specify a duration less than 10 minutes",
        ));
    }
    let audiences: Vec<String> = spec["audiences"]
        .as_array()
        .map(|l| {
            l.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    let bound = match spec["boundObjectRef"].as_object() {
        None => None,
        Some(r) => {
            let kind = r.get("kind").and_then(Value::as_str).unwrap_or("");
            let obj_name = r.get("name").and_then(Value::as_str).unwrap_or("");
            let bound_spec = match kind {
                "Pod" => &crate::registry::resources::PODS,
                "Secret" => &crate::registry::resources::SECRETS,
                other => {
                    return Err(invalid(
                        "spec.boundObjectRef.kind",
                        json!(other),
                        "supported values: \"Pod\", \"Secret\"",
                    ))
                }
            };
            let bound_target = Target {
                spec: bound_spec,
                namespace: Some(ns.clone()),
                name: Some(obj_name.to_string()),
                status: false,
                requester: Default::default(),
            };
            let (obj, _) = read(state, &bound_target, obj_name).await?;
            let uid = obj["metadata"]["uid"].as_str().unwrap_or("").to_string();
            if let Some(want) = r.get("uid").and_then(Value::as_str) {
                if !want.is_empty() && want != uid {
                    return Err(ApiError::conflict_with(
                        "",
                        bound_spec.plural,
                        obj_name,
                        &format!("the UID in the bound object reference ({want}) does not match the UID in record ({uid}). The object might have been deleted and then recreated"),
                    ));
                }
            }
            let node = match obj["spec"]["nodeName"].as_str() {
                Some(node) if kind == "Pod" && !node.is_empty() => {
                    Some((node.to_string(), node_uid(state, node).await?))
                }
                _ => None,
            };
            Some(crate::tokens::BoundObject {
                kind: kind.to_string(),
                name: obj_name.to_string(),
                uid,
                node,
            })
        }
    };
    let (token, exp) = state
        .tokens
        .issue(&sa, &audiences, expiration, bound.as_ref())
        .ok_or_else(|| ApiError::internal("failed to sign the service account token"))?;
    let expires = time::OffsetDateTime::from_unix_timestamp(exp)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_default();
    let mut out_spec = spec.clone();
    if !out_spec.is_object() {
        out_spec = json!({});
    }
    out_spec["expirationSeconds"] = json!(expiration);
    if audiences.is_empty() {
        out_spec["audiences"] = json!(state.tokens.keys.as_ref().map(|k| k.audiences.clone()));
    }
    tracing::debug!(namespace = %ns, serviceaccount = name, "issued a service account token");
    Ok(json_response(
        StatusCode::CREATED,
        &json!({
            "kind": "TokenRequest",
            "apiVersion": "authentication.k8s.io/v1",
            "metadata": {"name": name, "namespace": ns, "creationTimestamp": now_rfc3339()},
            "spec": out_spec,
            "status": {"token": token, "expirationTimestamp": expires},
        }),
    ))
}

/// PUT namespaces/<name>/finalize: replaces spec.finalizers only (the namespace controller removes
/// `kubernetes` once the content is gone). A Terminating namespace with no finalizers left is
/// deleted by the same write, as upstream's finalize REST does.
pub async fn finalize(
    state: &AppState,
    target: &Target,
    headers: &HeaderMap,
    query: &HashMap<String, String>,
    body: &[u8],
) -> Result<Response, ApiError> {
    let incoming = crate::request_body::parse_body(headers, body)?;
    let finalizers = match &incoming["spec"]["finalizers"] {
        Value::Null => json!([]),
        Value::Array(list) if list.iter().all(Value::is_string) => json!(list),
        _ => {
            return Err(ApiError::bad_request(
                "spec.finalizers must be a list of strings",
            ))
        }
    };
    let obj = guaranteed_update(state, target, UpdateScope::Main, query, |old| {
        let mut new = old.clone();
        new["spec"]["finalizers"] = finalizers.clone();
        new["metadata"]["resourceVersion"] = incoming["metadata"]["resourceVersion"].clone();
        if new["metadata"]["resourceVersion"].is_null() {
            if let Some(m) = new["metadata"].as_object_mut() {
                m.remove("resourceVersion");
            }
        }
        Ok(new)
    })
    .await?;
    Ok(ok_json(&obj))
}
