//! get / list / create / update / patch / delete for any registered resource. Every write is a
//! compare-and-swap on the key's mod revision; unconditional updates retry on a lost race.

use std::collections::HashMap;

use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde_json::{json, Value};

use super::table::{self, Include};
use crate::admission::node_restriction::Op;
use crate::fieldmanager::{self, Writer};
use crate::patch::{self, PatchType};
use crate::registry::lifecycle::{
    from_stored, name_of, now_rfc3339, prepare_create, prepare_update, same_object, to_stored,
    FieldValidation, UpdateScope,
};
use crate::registry::resources::NAMESPACES;
use crate::registry::strategy::Reservation;
use crate::registry::ResourceSpec;
use crate::request::Target;
use crate::request_body::parse_json;
use crate::state::AppState;
use crate::status::{json_response, ApiError, Cause};
use crate::storage::{StoreError, Versioned};
use crate::storage_status::store_error;

/// Attempts for writes that retry on a lost compare-and-swap (no client precondition).
pub(super) const MAX_ATTEMPTS: usize = 16;

/// The store keys an object holds exclusively, with the owner's name as their value.
pub(super) fn reservations(spec: &ResourceSpec, obj: &Value) -> Vec<Reservation> {
    spec.reservations.map(|f| f(obj)).unwrap_or_default()
}

fn owner(obj: &Value) -> Vec<u8> {
    format!(
        "{}/{}",
        obj["metadata"]["namespace"].as_str().unwrap_or(""),
        name_of(obj)
    )
    .into_bytes()
}

/// Keys `new` holds that `old` did not (to claim) and keys `old` held that `new` does not (to free).
pub(super) fn reservation_diff(
    spec: &ResourceSpec,
    old: Option<&Value>,
    new: Option<&Value>,
) -> (Vec<(String, Vec<u8>)>, Vec<String>) {
    let before = old.map(|o| reservations(spec, o)).unwrap_or_default();
    let after = new.map(|n| reservations(spec, n)).unwrap_or_default();
    let claims = after
        .iter()
        .filter(|r| !before.iter().any(|b| b.key == r.key))
        .map(|r| (r.key.clone(), new.map(owner).unwrap_or_default()))
        .collect();
    let releases = before
        .iter()
        .filter(|b| !after.iter().any(|r| r.key == b.key))
        .map(|b| b.key.clone())
        .collect();
    (claims, releases)
}

/// The 422 for a reservation another object holds (a taken ClusterIP or NodePort).
pub(super) fn taken_error(spec: &ResourceSpec, obj: &Value, key: &str) -> ApiError {
    match reservations(spec, obj).into_iter().find(|r| r.key == key) {
        Some(r) => ApiError::invalid(
            spec.group,
            spec.kind,
            name_of(obj),
            vec![Cause::invalid_raw(&r.field, &r.rendered, &r.detail)],
        ),
        None => ApiError::conflict(spec.group, spec.plural, name_of(obj)),
    }
}

pub(super) fn field_validation(query: &HashMap<String, String>) -> FieldValidation {
    FieldValidation::from_query(query.get("fieldValidation").map(String::as_str))
}

pub(super) fn is_dry_run(query: &HashMap<String, String>) -> bool {
    query.get("dryRun").is_some_and(|v| v == "All")
}

pub(super) fn required_name(target: &Target) -> Result<&str, ApiError> {
    target
        .name
        .as_deref()
        .ok_or_else(|| ApiError::bad_request("a resource name is required"))
}

/// Serves one object as JSON or, when asked, as a one-row Table or its PartialObjectMetadata.
fn respond(
    spec: &ResourceSpec,
    headers: &HeaderMap,
    query: &HashMap<String, String>,
    code: StatusCode,
    obj: &Value,
) -> Response {
    if let Some(v) = super::partial_metadata::object_version(headers) {
        return json_response(code, &super::partial_metadata::object(v, obj));
    }
    if table::wants_table(headers) {
        let rv = obj["metadata"]["resourceVersion"].as_str();
        let t = table::table(
            spec,
            std::slice::from_ref(obj),
            rv,
            Include::from_query(query),
        );
        return json_response(code, &t);
    }
    json_response(code, obj)
}

pub(super) async fn read(
    state: &AppState,
    target: &Target,
    name: &str,
) -> Result<(Value, i64), ApiError> {
    let spec = target.spec;
    let Some(Versioned {
        value,
        mod_revision,
        ..
    }) = state
        .store
        .get(&target.key(name))
        .await
        .map_err(store_error)?
    else {
        return Err(ApiError::not_found(spec.group, spec.plural, name));
    };
    let obj = from_stored(&value, mod_revision)?;
    let obj = crate::crd::convert::served(&state.store, spec, vec![obj])
        .await?
        .pop()
        .unwrap_or_default();
    Ok((obj, mod_revision))
}

pub async fn get(
    state: &AppState,
    target: &Target,
    headers: &HeaderMap,
    query: &HashMap<String, String>,
) -> Result<Response, ApiError> {
    let (obj, _) = read(state, target, required_name(target)?).await?;
    Ok(respond(target.spec, headers, query, StatusCode::OK, &obj))
}

pub async fn create(
    state: &AppState,
    target: &Target,
    query: &HashMap<String, String>,
    body: Value,
) -> Result<Response, ApiError> {
    let spec = target.spec;
    if target.name.is_some() {
        return Err(ApiError::method_not_allowed(
            "create",
            spec.group,
            spec.plural,
        ));
    }
    let obj = create_object(state, target, query, body).await?;
    Ok(json_response(StatusCode::CREATED, &obj))
}

/// Who a write is recorded for in managedFields, if anyone.
fn writer<'a>(target: &'a Target, api_version: &'a str, now: &'a str) -> Option<Writer<'a>> {
    Some(Writer {
        manager: target.requester.manager.as_deref()?,
        api_version,
        subresource: target.status.then_some("status"),
        tracks_status: target.status || !target.spec.status_subresource,
        now,
    })
}

/// Create: lifecycle, admission, allocations, store. Returns the stored object.
pub(super) async fn create_object(
    state: &AppState,
    target: &Target,
    query: &HashMap<String, String>,
    body: Value,
) -> Result<Value, ApiError> {
    let spec = target.spec;
    let mut obj = prepare_create(
        spec,
        target.namespace.as_deref(),
        body,
        field_validation(query),
    )?;
    if let Some(ns) = target.namespace.as_deref() {
        // NamespaceLifecycle admission: namespaced objects need a live namespace.
        match state
            .store
            .get(&NAMESPACES.key(None, ns))
            .await
            .map_err(store_error)?
        {
            None => return Err(ApiError::not_found("", "namespaces", ns)),
            Some(v) => {
                let nsobj = from_stored(&v.value, v.mod_revision)?;
                if nsobj["metadata"]["deletionTimestamp"].is_string() {
                    return Err(ApiError {
                        code: 403,
                        reason: "Forbidden",
                        message: format!("{} \"{}\" is forbidden: unable to create new content in namespace {ns} because it is being terminated", spec.plural, name_of(&obj)),
                        details: Some(json!({"name": name_of(&obj), "kind": spec.plural})),
                    });
                }
            }
        }
    }
    crate::admission::service_account(&state.admission_context(), target, &mut obj).await?;
    crate::admission::storage_create(&state.admission_context(), target, &mut obj).await?;
    crate::admission::class_create(&state.admission_context(), target, &mut obj).await?;
    crate::admission::limits_create(&state.admission_context(), target, &mut obj).await?;
    crate::admission::node_restriction(&state.admission_context(), target, None, Op::Create(&obj))?;
    crate::admission::webhook::admit_create(&state.admission_context(), target, query, &mut obj)
        .await?;
    crate::admission::quota_create(&state.admission_context(), target, &obj, is_dry_run(query))
        .await?;
    state
        .allocator
        .prepare(&state.store, spec, &mut obj, None)
        .await?;
    let (api_version, now) = (spec.api_version(), now_rfc3339());
    if let Some(w) = writer(target, &api_version, &now) {
        fieldmanager::track_update(None, &mut obj, &w);
    }
    let name = name_of(&obj).to_string();
    if !is_dry_run(query) {
        let (claims, _) = reservation_diff(spec, None, Some(&obj));
        let rev = state
            .store
            .create_claiming(&target.key(&name), to_stored(&obj), &claims)
            .await
            .map_err(|e| match e {
                StoreError::AlreadyExists => {
                    ApiError::already_exists(spec.group, spec.plural, &name)
                }
                StoreError::Taken(key) => taken_error(spec, &obj, &key),
                other => store_error(other),
            })?;
        obj["metadata"]["resourceVersion"] = json!(rev.to_string());
    }
    tracing::debug!(resource = spec.plural, name = %name, "created");
    Ok(obj)
}

pub(super) fn scope(target: &Target) -> UpdateScope {
    if target.status {
        UpdateScope::Status
    } else {
        UpdateScope::Main
    }
}

/// The read-modify-write loop behind update and patch. `build` makes the new object from the stored
/// one; a resourceVersion in the result that differs from the stored one is a 409.
/// get / update / patch of a subresource that writes one part of the stored object
/// (`certificatesigningrequests/approval`, `pods/ephemeralcontainers`): `build(stored, incoming)` makes
/// what is stored from the stored object and the request's — an update's body, or the stored object
/// with the patch applied (which carries no precondition unless the patch names a resourceVersion).
#[allow(clippy::too_many_arguments)]
pub(super) async fn serve_part(
    state: &AppState,
    target: &Target,
    verb: &str,
    headers: &HeaderMap,
    query: &HashMap<String, String>,
    body: &[u8],
    scope: UpdateScope,
    build: impl Fn(&Value, &Value) -> Result<Value, ApiError>,
) -> Result<Value, ApiError> {
    match verb {
        "get" => Ok(read(state, target, required_name(target)?).await?.0),
        "update" => {
            let incoming = crate::request_body::parse_body(headers, body)?;
            guaranteed_update(state, target, scope, query, |old| build(old, &incoming)).await
        }
        "patch" => {
            let (kind, patch_body) = patch_request(headers, body)?;
            guaranteed_update(state, target, scope, query, |old| {
                let mut patched = crate::patch::apply(kind, old, &patch_body)
                    .map_err(|e| ApiError::bad_request(e.to_string()))?;
                if patch_body["metadata"]["resourceVersion"].is_null() {
                    patched["metadata"]["resourceVersion"] = Value::Null;
                }
                build(old, &patched)
            })
            .await
        }
        other => Err(ApiError::method_not_allowed(
            other,
            target.spec.group,
            target.spec.plural,
        )),
    }
}

/// `new` with `incoming`'s resourceVersion as the write's precondition, or none when it names none.
pub(super) fn precondition_from(new: &mut Value, incoming: &Value) {
    new["metadata"]["resourceVersion"] = incoming["metadata"]["resourceVersion"].clone();
    if new["metadata"]["resourceVersion"].is_null() {
        if let Some(m) = new["metadata"].as_object_mut() {
            m.remove("resourceVersion");
        }
    }
}

pub(super) async fn guaranteed_update(
    state: &AppState,
    target: &Target,
    scope: UpdateScope,
    query: &HashMap<String, String>,
    build: impl Fn(&Value) -> Result<Value, ApiError>,
) -> Result<Value, ApiError> {
    let spec = target.spec;
    let name = required_name(target)?;
    for _ in 0..MAX_ATTEMPTS {
        let (old, rev) = read(state, target, name).await?;
        let candidate = build(&old)?;
        let precondition = candidate["metadata"]["resourceVersion"]
            .as_str()
            .filter(|s| !s.is_empty())
            .map(str::to_string);
        if precondition
            .as_deref()
            .is_some_and(|p| p != rev.to_string())
        {
            return Err(ApiError::conflict(spec.group, spec.plural, name));
        }
        let mut new = prepare_update(
            spec,
            scope,
            target.namespace.as_deref(),
            &old,
            candidate,
            field_validation(query),
        )?;
        state
            .allocator
            .prepare(&state.store, spec, &mut new, Some(&old))
            .await?;
        if new["metadata"].get("managedFields").is_none() {
            // Omitted from the request = kept as stored (an empty list clears them).
            if let Some(stored) = old["metadata"].get("managedFields") {
                new["metadata"]["managedFields"] = stored.clone();
            }
        }
        // A no-op is not written, unless the stored value is stale (sealed with a rotated-out
        // encryption key): then it is, as upstream, so a replace re-encrypts it.
        if same_object(&old, &new)
            && !state
                .store
                .is_stale(&target.key(name))
                .await
                .map_err(store_error)?
        {
            return Ok(old);
        }
        crate::admission::node_restriction(
            &state.admission_context(),
            target,
            None,
            Op::Update {
                old: &old,
                new: &new,
            },
        )?;
        crate::admission::storage_update(&state.admission_context(), target, &old, &new).await?;
        crate::admission::webhook::admit_update(
            &state.admission_context(),
            target,
            query,
            &old,
            &mut new,
        )
        .await?;
        let (api_version, now) = (spec.api_version(), now_rfc3339());
        if let Some(w) = writer(target, &api_version, &now) {
            fieldmanager::track_update(Some(&old), &mut new, &w);
        }
        if is_dry_run(query) {
            return Ok(new);
        }
        if finalized(&new) {
            let (_, releases) = reservation_diff(spec, Some(&old), None);
            match state
                .store
                .delete_releasing(&target.key(name), rev, &releases)
                .await
            {
                Ok(_) => return Ok(new),
                // Re-read: the check above turns a stale client precondition into a 409.
                Err(StoreError::Conflict) => continue,
                Err(StoreError::NotFound) => {
                    return Err(ApiError::not_found(spec.group, spec.plural, name))
                }
                Err(e) => return Err(store_error(e)),
            }
        }
        let (claims, releases) = reservation_diff(spec, Some(&old), Some(&new));
        match state
            .store
            .update_claiming(&target.key(name), to_stored(&new), rev, &claims, &releases)
            .await
        {
            Ok(new_rev) => {
                new["metadata"]["resourceVersion"] = json!(new_rev.to_string());
                return Ok(new);
            }
            Err(StoreError::Taken(key)) => return Err(taken_error(spec, &new, &key)),
            // Re-read and rebuild: a patch without its own resourceVersion carries the one it was
            // applied to, which only the store's compare-and-swap knew to be stale; a stale client
            // precondition fails the check above on the next round (409).
            Err(StoreError::Conflict) => continue,
            Err(StoreError::NotFound) => {
                return Err(ApiError::not_found(spec.group, spec.plural, name))
            }
            Err(e) => return Err(store_error(e)),
        }
    }
    Err(ApiError::conflict(spec.group, spec.plural, name))
}

/// An object being deleted whose last finalizer is gone and that waits for no grace period.
fn finalized(obj: &Value) -> bool {
    let meta = &obj["metadata"];
    meta["deletionTimestamp"].is_string()
        && meta["finalizers"].as_array().is_none_or(Vec::is_empty)
        && meta["deletionGracePeriodSeconds"].as_i64().unwrap_or(0) == 0
        // A namespace's own finalizers (spec.finalizers) hold it too.
        && obj["spec"]["finalizers"].as_array().is_none_or(Vec::is_empty)
}

pub async fn update(
    state: &AppState,
    target: &Target,
    query: &HashMap<String, String>,
    incoming: Value,
) -> Result<Response, ApiError> {
    let obj = guaranteed_update(
        state,
        target,
        scope(target),
        query,
        |_| Ok(incoming.clone()),
    )
    .await?;
    Ok(json_response(StatusCode::OK, &obj))
}

/// The patch type (from Content-Type) and the parsed patch document.
pub(super) fn patch_request(
    headers: &HeaderMap,
    body: &[u8],
) -> Result<(PatchType, Value), ApiError> {
    let content_type = headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let kind = PatchType::from_content_type(content_type)
        .map_err(|_| ApiError::unsupported_media_type(content_type))?;
    Ok((kind, parse_json(body)?))
}

pub async fn patch(
    state: &AppState,
    target: &Target,
    headers: &HeaderMap,
    query: &HashMap<String, String>,
    body: &[u8],
) -> Result<Response, ApiError> {
    if super::apply::is_apply(headers) {
        return super::apply::apply(state, target, query, body).await;
    }
    if query.contains_key("force") {
        return Err(ApiError::invalid(
            "meta.k8s.io",
            "PatchOptions",
            "",
            vec![Cause::forbidden(
                "force",
                "may not be specified for non-apply patch",
            )],
        ));
    }
    let (kind, patch_body) = patch_request(headers, body)?;
    let obj = guaranteed_update(state, target, scope(target), query, |old| {
        patch::apply(kind, old, &patch_body).map_err(|e| ApiError::bad_request(e.to_string()))
    })
    .await?;
    // As upstream, the response honours Accept like a get's (kube-rs's patch_metadata).
    Ok(respond(target.spec, headers, query, StatusCode::OK, &obj))
}
