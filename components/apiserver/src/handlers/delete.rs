//! delete and deletecollection: preconditions, graceful deletion (pods on a node wait for their
//! kubelet), finalizers (deletionTimestamp until the last one is removed).

use std::collections::HashMap;

use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde_json::{json, Value};

use super::crud::{is_dry_run, read, required_name, store_error, MAX_ATTEMPTS};
use super::list::{list_objects, Selectors};
use super::{json_response, AppState, Target};
use crate::admission::node_restriction::Op;
use crate::registry::lifecycle::{name_of, now_rfc3339, to_stored};
use crate::status::ApiError;
use crate::storage::StoreError;

/// DeleteOptions from the body (may be empty) and the query.
pub(super) struct DeleteOptions {
    pub grace: Option<i64>,
    pub uid: Option<String>,
    pub resource_version: Option<String>,
}

fn delete_options(
    headers: &HeaderMap,
    query: &HashMap<String, String>,
    body: &[u8],
) -> Result<DeleteOptions, ApiError> {
    let body = if body.iter().all(u8::is_ascii_whitespace) {
        json!({})
    } else {
        super::parse_body(headers, body)?
    };
    let grace = match query.get("gracePeriodSeconds") {
        Some(g) => Some(
            g.parse::<i64>()
                .map_err(|_| ApiError::bad_request(format!("invalid gracePeriodSeconds {g:?}")))?,
        ),
        None => body["gracePeriodSeconds"].as_i64(),
    };
    let mut opts = DeleteOptions::from_body(&body);
    opts.grace = grace;
    Ok(opts)
}

impl DeleteOptions {
    /// A DeleteOptions object (a DELETE body, or an Eviction's `deleteOptions`).
    pub(super) fn from_body(body: &Value) -> Self {
        let pre = &body["preconditions"];
        DeleteOptions {
            grace: body["gracePeriodSeconds"].as_i64(),
            uid: pre["uid"].as_str().map(str::to_string),
            resource_version: pre["resourceVersion"].as_str().map(str::to_string),
        }
    }
}

/// Deletes one object (or starts its graceful deletion); returns its last state.
pub(super) async fn delete_object(
    state: &AppState,
    target: &Target,
    name: &str,
    opts: &DeleteOptions,
    query: &HashMap<String, String>,
) -> Result<Value, ApiError> {
    let spec = target.spec;
    for _ in 0..MAX_ATTEMPTS {
        let (mut obj, rev) = read(state, target, name).await?;
        crate::admission::node_restriction(state, target, None, Op::Delete(&obj))?;
        if let Some(uid) = &opts.uid {
            let current = obj["metadata"]["uid"].as_str().unwrap_or("");
            if uid != current {
                return Err(ApiError::conflict_with(spec.group, spec.plural, name, &format!(
                    "the UID in the precondition ({uid}) does not match the UID in record ({current}). The object might have been deleted and then recreated")));
            }
        }
        if let Some(want) = &opts.resource_version {
            if *want != rev.to_string() {
                return Err(ApiError::conflict_with(spec.group, spec.plural, name, &format!(
                    "the ResourceVersion in the precondition ({want}) does not match the ResourceVersion in record ({rev}). The object might have been modified")));
            }
        }
        crate::admission::webhook::admit_delete(state, target, query, &obj).await?;
        let grace = spec.graceful_delete.as_ref().and_then(|g| {
            let default = (g.default_grace)(&obj)?;
            match opts.grace.unwrap_or(default) {
                0 => None,
                n => Some(n),
            }
        });
        if let Some(finalizer) = spec.delete_finalizer {
            let finalizers = obj["metadata"]["finalizers"].as_array();
            if !finalizers.is_some_and(|f| f.iter().any(|x| x == finalizer))
                && !obj["metadata"]["deletionTimestamp"].is_string()
            {
                let mut list = finalizers.cloned().unwrap_or_default();
                list.push(json!(finalizer));
                obj["metadata"]["finalizers"] = json!(list);
            }
        }
        let has_finalizers = obj["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|f| !f.is_empty());
        if grace.is_some() || has_finalizers || spec.terminating {
            if obj["metadata"]["deletionTimestamp"].is_string() {
                // Already being deleted: only a shorter grace period changes anything (the
                // kubelet's final grace-0 delete of a pod that finalizers still hold). Recording
                // it lets the removal of the last finalizer delete the object at once.
                let current = obj["metadata"]["deletionGracePeriodSeconds"]
                    .as_i64()
                    .unwrap_or(0);
                if spec.terminating || grace.unwrap_or(0) >= current {
                    return Ok(obj);
                }
            }
            if spec.terminating {
                obj["status"]["phase"] = json!("Terminating");
            }
            let grace = grace.unwrap_or(0);
            let at = time::OffsetDateTime::now_utc() + time::Duration::seconds(grace);
            let at = at
                .replace_nanosecond(0)
                .ok()
                .and_then(|t| {
                    t.format(&time::format_description::well_known::Rfc3339)
                        .ok()
                })
                .unwrap_or_else(now_rfc3339);
            obj["metadata"]["deletionTimestamp"] = json!(at);
            obj["metadata"]["deletionGracePeriodSeconds"] = json!(grace);
            if is_dry_run(query) {
                return Ok(obj);
            }
            match state
                .store
                .update(&target.key(name), to_stored(&obj), rev)
                .await
            {
                Ok(new_rev) => {
                    obj["metadata"]["resourceVersion"] = json!(new_rev.to_string());
                    if spec.terminating {
                        // The namespace controller's job, done in-process: delete the content,
                        // then the namespace itself (see `namespaces.rs`).
                        let _ = state.terminating.send(name.to_string());
                    }
                    return Ok(obj);
                }
                Err(StoreError::Conflict) => continue,
                Err(StoreError::NotFound) => {
                    return Err(ApiError::not_found(spec.group, spec.plural, name))
                }
                Err(e) => return Err(store_error(e)),
            }
        }
        if is_dry_run(query) {
            return Ok(obj);
        }
        let (_, releases) = super::crud::reservation_diff(spec, Some(&obj), None);
        match state
            .store
            .delete_releasing(&target.key(name), rev, &releases)
            .await
        {
            Ok(_) => {
                tracing::debug!(resource = spec.plural, name, "deleted");
                return Ok(obj);
            }
            Err(StoreError::Conflict) => continue,
            Err(StoreError::NotFound) => {
                return Err(ApiError::not_found(spec.group, spec.plural, name))
            }
            Err(e) => return Err(store_error(e)),
        }
    }
    Err(ApiError::conflict(spec.group, spec.plural, name))
}

pub async fn delete(
    state: &AppState,
    target: &Target,
    headers: &HeaderMap,
    query: &HashMap<String, String>,
    body: &[u8],
) -> Result<Response, ApiError> {
    let name = required_name(target)?;
    let opts = delete_options(headers, query, body)?;
    let obj = delete_object(state, target, name, &opts, query).await?;
    Ok(json_response(StatusCode::OK, &obj))
}

/// DELETE on a collection: every object matching the selectors, each as a single delete would.
pub async fn delete_collection(
    state: &AppState,
    target: &Target,
    headers: &HeaderMap,
    query: &HashMap<String, String>,
    body: &[u8],
) -> Result<Response, ApiError> {
    let spec = target.spec;
    let opts = delete_options(headers, query, body)?;
    let selectors = Selectors::from_query(spec, query)?;
    let (objects, _) = list_objects(state, target, &selectors).await?;
    let mut deleted = Vec::with_capacity(objects.len());
    for obj in objects {
        let item = Target {
            spec,
            namespace: obj["metadata"]["namespace"].as_str().map(str::to_string),
            name: None,
            status: false,
            requester: target.requester.clone(),
        };
        match delete_object(state, &item, name_of(&obj), &opts, query).await {
            Ok(last) => deleted.push(last),
            Err(e) if e.code == 404 => {} // gone meanwhile
            Err(e) => return Err(e),
        }
    }
    Ok(json_response(
        StatusCode::OK,
        &json!({
            "kind": spec.list_kind,
            "apiVersion": spec.api_version(),
            "metadata": {},
            "items": deleted,
        }),
    ))
}
