//! Review kinds, computed per request and never stored: authorization.k8s.io
//! SelfSubjectAccessReview / SubjectAccessReview (`kubectl auth can-i`), SelfSubjectRulesReview
//! (`kubectl auth can-i --list`), LocalSubjectAccessReview (a namespace admin's SubjectAccessReview)
//! and authentication.k8s.io SelfSubjectReview (`kubectl auth whoami`) and TokenReview (how
//! webhooks and aggregated servers authenticate their callers' bearer tokens).

use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{json, Value};

use crate::auth::{Attributes, Identity, User};
use crate::registry::lifecycle::check_identity;
use crate::registry::ResourceSpec;
use crate::state::AppState;
use crate::status::{json_response, ApiError};

fn text<'a>(v: &'a Value, field: &str) -> &'a str {
    v[field].as_str().unwrap_or("")
}

fn non_empty(s: &str) -> Option<&str> {
    (!s.is_empty()).then_some(s)
}

/// The attributes a review's spec asks about.
fn attributes(spec: &Value) -> Result<Attributes<'_>, ApiError> {
    let r = &spec["resourceAttributes"];
    let n = &spec["nonResourceAttributes"];
    match (r.is_object(), n.is_object()) {
        (true, false) => Ok(Attributes::Resource {
            verb: text(r, "verb"),
            group: text(r, "group"),
            resource: text(r, "resource"),
            subresource: non_empty(text(r, "subresource")),
            namespace: non_empty(text(r, "namespace")),
            name: non_empty(text(r, "name")),
        }),
        (false, true) => Ok(Attributes::NonResource {
            verb: text(n, "verb"),
            path: text(n, "path"),
        }),
        _ => Err(ApiError::invalid(
            "authorization.k8s.io",
            "SelfSubjectAccessReview",
            "",
            vec![crate::status::Cause::invalid(
                "spec.resourceAttributes",
                &json!(""),
                "exactly one of nonResourceAttributes or resourceAttributes must be specified",
            )],
        )),
    }
}

fn user_of(who: &Identity) -> Result<&User, ApiError> {
    match who {
        Identity::User(u) => Ok(u),
        Identity::Anonymous => Err(ApiError::unauthorized()),
    }
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|g| {
            g.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// The user a SubjectAccessReview's spec names.
fn subject(s: &Value) -> User {
    User {
        name: text(s, "user").to_string(),
        groups: strings(&s["groups"]),
    }
}

/// A LocalSubjectAccessReview asks about its own namespace only, and about resources only.
fn local_review_check(spec: &Value, namespace: &str) -> Result<(), ApiError> {
    let invalid = |cause| {
        ApiError::invalid(
            "authorization.k8s.io",
            "LocalSubjectAccessReview",
            "",
            vec![cause],
        )
    };
    if spec["nonResourceAttributes"].is_object() {
        return Err(invalid(crate::status::Cause::invalid(
            "spec.nonResourceAttributes",
            &spec["nonResourceAttributes"],
            "disallowed on this kind of request",
        )));
    }
    let asked = text(&spec["resourceAttributes"], "namespace");
    if spec["resourceAttributes"].is_object() && asked != namespace {
        return Err(invalid(crate::status::Cause::invalid(
            "spec.resourceAttributes.namespace",
            &json!(asked),
            "must match metadata.namespace",
        )));
    }
    Ok(())
}

/// TokenReview status: who the token is, or `{"user": {}}` when it is not valid.
async fn token_review(state: &AppState, spec: &Value) -> Result<Value, ApiError> {
    let token = text(spec, "token");
    if token.is_empty() {
        return Err(ApiError::bad_request(
            "token is required for TokenReview in authentication",
        ));
    }
    let audiences = strings(&spec["audiences"]);
    let reviewed = state
        .tokens
        .review(token, &audiences)
        .await
        .map_err(crate::storage_status::store_error)?;
    Ok(match reviewed {
        Some(r) => {
            let mut user = json!({"username": r.user.name, "groups": r.user.groups});
            if !r.uid.is_empty() {
                user["uid"] = json!(r.uid);
            }
            if !r.extra.is_empty() {
                user["extra"] = json!(r.extra);
            }
            json!({"authenticated": true, "user": user, "audiences": r.audiences})
        }
        None => json!({"user": {}}),
    })
}

pub async fn create(
    state: &AppState,
    spec: &'static ResourceSpec,
    namespace: Option<&str>,
    who: &Identity,
    mut obj: Value,
) -> Result<Response, ApiError> {
    check_identity(spec, namespace, &mut obj)?;
    let decoded = (spec.decode)(obj.clone()).map_err(ApiError::bad_request)?;
    let internal = |e: crate::rbac::RbacError| ApiError::internal(e.to_string());
    let status = match spec.plural {
        "selfsubjectaccessreviews" => {
            let attrs = attributes(&decoded["spec"])?;
            let allowed = state
                .authorizer
                .authorize(who, &attrs)
                .await
                .map_err(internal)?;
            json!({"allowed": allowed})
        }
        "subjectaccessreviews" => {
            let s = &decoded["spec"];
            let attrs = attributes(s)?;
            let allowed = state
                .authorizer
                .authorize(&Identity::User(subject(s)), &attrs)
                .await
                .map_err(internal)?;
            json!({"allowed": allowed})
        }
        "localsubjectaccessreviews" => {
            let s = &decoded["spec"];
            local_review_check(s, namespace.unwrap_or(""))?;
            let attrs = attributes(s)?;
            let allowed = state
                .authorizer
                .authorize(&Identity::User(subject(s)), &attrs)
                .await
                .map_err(internal)?;
            json!({"allowed": allowed})
        }
        "tokenreviews" => token_review(state, &decoded["spec"]).await?,
        "selfsubjectrulesreviews" => {
            let user = user_of(who)?;
            let ns = non_empty(text(&decoded["spec"], "namespace"));
            let rules = state
                .authorizer
                .rules_for(user, ns)
                .await
                .map_err(internal)?;
            let (resource, non_resource): (Vec<Value>, Vec<Value>) = rules
                .into_iter()
                .partition(|r| r["nonResourceURLs"].is_null());
            let resource: Vec<Value> = resource
                .into_iter()
                .map(|r| {
                    json!({"verbs": r["verbs"], "apiGroups": r["apiGroups"],
                           "resources": r["resources"], "resourceNames": r["resourceNames"]})
                })
                .collect();
            let non_resource: Vec<Value> = non_resource
                .into_iter()
                .map(|r| json!({"verbs": r["verbs"], "nonResourceURLs": r["nonResourceURLs"]}))
                .collect();
            json!({"resourceRules": resource, "nonResourceRules": non_resource, "incomplete": false})
        }
        "selfsubjectreviews" => {
            let user = user_of(who)?;
            json!({"userInfo": {"username": user.name, "groups": user.groups}})
        }
        _ => return Err(ApiError::path_not_found()),
    };
    let mut out = decoded;
    out["status"] = status;
    if out["metadata"].is_null() {
        out["metadata"] = json!({});
    }
    out["metadata"]["creationTimestamp"] = Value::Null;
    Ok(json_response(StatusCode::CREATED, &out))
}
