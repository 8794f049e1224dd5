//! Subresources beyond status: `<resource>/scale` (autoscaling/v1 Scale over any kind with a
//! `ScaleSpec`), and the action subresources `pods/binding` (the scheduler's write) and
//! `pods/eviction` (a graceful delete). Each is a different view of, or a constrained write to, the
//! parent object, so they reuse the generic read-modify-write loop.

use std::collections::HashMap;

use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde_json::{json, Value};

use super::crud::{guaranteed_update, patch_request, read, required_name};
use super::delete::{delete_object, DeleteOptions};
use super::{json_response, ok_json, AppState, Target};
use crate::patch;
use crate::registry::lifecycle::{now_rfc3339, UpdateScope};
use crate::registry::ResourceSpec;
use crate::selectors::label_selector_string;
use crate::status::ApiError;

/// The Scale view of a scalable object.
pub fn to_scale(spec: &ResourceSpec, obj: &Value) -> Value {
    let meta = &obj["metadata"];
    let selector = spec
        .scale
        .as_ref()
        .and_then(|s| obj.pointer(s.selector))
        .map(label_selector_string)
        .unwrap_or_default();
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
        "spec": {"replicas": obj["spec"]["replicas"].as_i64().unwrap_or(0)},
        "status": {
            "replicas": obj["status"]["replicas"].as_i64().unwrap_or(0),
            "selector": selector,
        },
    })
}

/// Applies a Scale's `spec.replicas` to the parent; its resourceVersion stays a precondition.
fn from_scale(old: &Value, scale: &Value) -> Result<Value, ApiError> {
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
    new["spec"]["replicas"] = json!(replicas);
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
            let scale = super::parse_body(headers, body)?;
            guaranteed_update(state, target, UpdateScope::Main, query, |old| {
                from_scale(old, &scale)
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
                from_scale(old, &patched)
            })
            .await?
        }
        other => return Err(ApiError::method_not_allowed(other, spec.group, spec.plural)),
    };
    Ok(ok_json(&to_scale(spec, &obj)))
}

/// The Status a successful action subresource answers with (upstream: 201 + Status Success).
fn success() -> Response {
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
    let binding = super::parse_body(headers, body)?;
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

/// POST pods/<name>/eviction: a delete with the Eviction's deleteOptions (no disruption budgets
/// are served yet, so every eviction is allowed).
pub async fn eviction(
    state: &AppState,
    target: &Target,
    headers: &HeaderMap,
    query: &HashMap<String, String>,
    body: &[u8],
) -> Result<Response, ApiError> {
    let eviction = super::parse_body(headers, body)?;
    let name = required_name(target)?;
    let opts = DeleteOptions::from_body(&eviction["deleteOptions"]);
    delete_object(state, target, name, &opts, query).await?;
    Ok(success())
}
