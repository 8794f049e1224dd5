//! Server-side apply: PATCH with `application/apply-patch+yaml`. The configuration is merged by
//! `fieldmanager::apply` into the live object (or into nothing: apply creates), then stored through
//! the same create / update paths as every other write.

use std::collections::HashMap;

use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde_json::{json, Value};

use super::crud::{
    create_object, field_validation, guaranteed_update, read, required_name, scope, MAX_ATTEMPTS,
};
use super::duplicate_fields;
use crate::fieldmanager::{self, FieldManagerError, Writer};
use crate::registry::lifecycle::{
    duplicate_field_message, now_rfc3339, unknown_fields_of, FieldValidation,
};
use crate::registry::ResourceSpec;
use crate::request::{Requester, Target};
use crate::state::AppState;
use crate::status::{json_response, ApiError, Cause};

pub const CONTENT_TYPE: &str = "application/apply-patch+yaml";

pub fn is_apply(headers: &HeaderMap) -> bool {
    headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.split(';').next().unwrap_or("").trim() == CONTENT_TYPE)
}

/// The configuration: JSON (what kubectl sends) or YAML.
fn parse(body: &[u8]) -> Result<Value, ApiError> {
    serde_json::from_slice(body).or_else(|_| {
        serde_norway::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))
    })
}

/// Field validation of the configuration itself, before it is merged, in the words of upstream's
/// typed patch: a key set twice (`line 11: key "foo" already set in map` for YAML), and under
/// `Strict` a field the kind's schema lacks (`.spec.foo: field not declared in schema`). Unknown
/// fields under `Warn` are reported once, by the write path's decode of the merged object.
fn check_configuration(
    spec: &ResourceSpec,
    body: &[u8],
    applied: &Value,
    validation: FieldValidation,
) -> Result<(), ApiError> {
    if validation == FieldValidation::Ignore {
        return Ok(());
    }
    let mut problems: Vec<String> = match duplicate_fields::in_json(body) {
        Ok(paths) => paths.iter().map(|p| duplicate_field_message(p)).collect(),
        Err(_) => duplicate_fields::yaml_duplicate_message(body)
            .into_iter()
            .collect(),
    };
    if validation == FieldValidation::Warn {
        problems.iter().for_each(|p| crate::warnings::add(p));
        return Ok(());
    }
    problems.extend(
        unknown_fields_of(spec, applied)
            .iter()
            .map(|f| format!(".{f}: field not declared in schema")),
    );
    if problems.is_empty() {
        return Ok(());
    }
    Err(ApiError::bad_request(format!(
        "failed to create typed patch object ({}, Kind={}): {}",
        spec.api_version(),
        spec.kind,
        problems.join(", ")
    )))
}

fn patch_options_invalid(cause: Cause) -> ApiError {
    ApiError::invalid("meta.k8s.io", "PatchOptions", "", vec![cause])
}

/// A 409 whose causes name each conflicting field and its manager, as upstream's
/// `NewApplyConflict`; kubectl prints the message and suggests `--force-conflicts`.
fn to_api_error(e: FieldManagerError) -> ApiError {
    match e {
        FieldManagerError::Invalid(m) => ApiError::bad_request(m),
        FieldManagerError::Conflicts(ref conflicts) => {
            let causes: Vec<Value> = conflicts
                .iter()
                .map(|c| {
                    json!({"reason": "FieldManagerConflict",
                           "message": format!("conflict with {}", c.manager),
                           "field": c.field()})
                })
                .collect();
            ApiError {
                code: 409,
                reason: "Conflict",
                message: e.to_string(),
                details: Some(json!({ "causes": causes })),
            }
        }
    }
}

pub async fn apply(
    state: &AppState,
    target: &Target,
    query: &HashMap<String, String>,
    body: &[u8],
) -> Result<Response, ApiError> {
    let spec = target.spec;
    let name = required_name(target)?;
    let Some(manager) = query.get("fieldManager").filter(|m| !m.is_empty()) else {
        return Err(patch_options_invalid(Cause::required(
            "fieldManager",
            "is required for apply patch",
        )));
    };
    let force = match query.get("force").map(String::as_str) {
        None | Some("false") => false,
        Some("true") => true,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "invalid value for force: {other:?}"
            )))
        }
    };
    let applied = parse(body)?;
    check_configuration(spec, body, &applied, field_validation(query))?;
    let (api_version, now) = (spec.api_version(), now_rfc3339());
    let w = Writer {
        manager,
        api_version: &api_version,
        subresource: target.status.then_some("status"),
        tracks_status: target.status || !spec.status_subresource,
        now: &now,
    };
    // The Apply entry is written here; the shared write paths must not add an Update entry too.
    let inner = Target {
        spec,
        namespace: target.namespace.clone(),
        name: target.name.clone(),
        status: target.status,
        requester: Requester {
            user: target.requester.user.clone(),
            manager: None,
        },
    };
    for _ in 0..MAX_ATTEMPTS {
        match read(state, &inner, name).await {
            Ok(_) => {
                let obj = guaranteed_update(state, &inner, scope(target), query, |old| {
                    fieldmanager::apply(Some(old), &applied, &w, force).map_err(to_api_error)
                })
                .await?;
                return Ok(json_response(StatusCode::OK, &obj));
            }
            Err(e) if e.code == 404 && !target.status => {
                let mut obj =
                    fieldmanager::apply(None, &applied, &w, force).map_err(to_api_error)?;
                match obj["metadata"]["name"].as_str() {
                    None | Some("") => obj["metadata"]["name"] = json!(name),
                    Some(n) if n == name => {}
                    Some(n) => {
                        return Err(ApiError::bad_request(format!(
                        "the name of the object ({n}) does not match the name on the URL ({name})"
                    )))
                    }
                }
                let create = Target {
                    spec,
                    namespace: inner.namespace.clone(),
                    name: None,
                    status: false,
                    requester: inner.requester.clone(),
                };
                match create_object(state, &create, query, obj).await {
                    Ok(created) => return Ok(json_response(StatusCode::CREATED, &created)),
                    // Created by someone else meanwhile: apply to that object instead.
                    Err(e) if e.reason == "AlreadyExists" => continue,
                    Err(e) => return Err(e),
                }
            }
            Err(e) => return Err(e),
        }
    }
    Err(ApiError::conflict(spec.group, spec.plural, name))
}
