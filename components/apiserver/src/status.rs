//! `metav1.Status` error objects, shaped exactly like the upstream apiserver's, so kubectl and kube-rs
//! print and classify them (`errors.IsNotFound`, `IsConflict`, ...) the same way.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{json, Map, Value};

/// One failed API request. The fields map 1:1 onto a `metav1.Status`.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{code} {reason}: {message}")]
pub struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    pub details: Option<Value>,
}

/// One field problem inside a 422 Invalid status (`details.causes[]`).
#[derive(Debug, Clone, PartialEq)]
pub struct Cause {
    pub reason: &'static str,
    pub message: String,
    pub field: String,
}

impl Cause {
    pub fn required(field: &str, detail: &str) -> Self {
        let message = if detail.is_empty() {
            "Required value".to_string()
        } else {
            format!("Required value: {detail}")
        };
        Cause {
            reason: "FieldValueRequired",
            message,
            field: field.to_string(),
        }
    }

    pub fn invalid(field: &str, value: &Value, detail: &str) -> Self {
        Cause {
            reason: "FieldValueInvalid",
            message: format!("Invalid value: {}: {detail}", go_quote(value)),
            field: field.to_string(),
        }
    }

    /// An invalid value already rendered the Go way (e.g. `map[string]string{...}`).
    pub fn invalid_raw(field: &str, rendered: &str, detail: &str) -> Self {
        Cause {
            reason: "FieldValueInvalid",
            message: format!("Invalid value: {rendered}: {detail}"),
            field: field.to_string(),
        }
    }

    pub fn duplicate(field: &str, value: &Value) -> Self {
        Cause {
            reason: "FieldValueDuplicate",
            message: format!("Duplicate value: {}", go_quote(value)),
            field: field.to_string(),
        }
    }

    /// A value outside a fixed set: `Unsupported value: "Always": supported values: "OnFailure", "Never"`.
    pub fn not_supported(field: &str, value: &str, supported: &[&str]) -> Self {
        let list: Vec<String> = supported.iter().map(|s| format!("{s:?}")).collect();
        Cause {
            reason: "FieldValueNotSupported",
            message: format!(
                "Unsupported value: {value:?}: supported values: {}",
                list.join(", ")
            ),
            field: field.to_string(),
        }
    }

    pub fn forbidden(field: &str, detail: &str) -> Self {
        Cause {
            reason: "FieldValueForbidden",
            message: format!("Forbidden: {detail}"),
            field: field.to_string(),
        }
    }
}

/// Renders a value the way Go's `%#v`-ish field errors do: strings quoted, everything else as JSON.
fn go_quote(value: &Value) -> String {
    match value {
        Value::String(s) => format!("{s:?}"),
        other => other.to_string(),
    }
}

/// `resource` or `resource.group`, as upstream names a GroupResource in messages.
pub fn qualified(group: &str, resource: &str) -> String {
    if group.is_empty() {
        resource.to_string()
    } else {
        format!("{resource}.{group}")
    }
}

fn details(group: &str, resource: &str, name: Option<&str>) -> Value {
    let mut d = Map::new();
    if let Some(name) = name {
        d.insert("name".into(), json!(name));
    }
    if !group.is_empty() {
        d.insert("group".into(), json!(group));
    }
    d.insert("kind".into(), json!(resource));
    Value::Object(d)
}

impl ApiError {
    pub fn new(code: u16, reason: &'static str, message: String, details: Option<Value>) -> Self {
        ApiError {
            code,
            reason,
            message,
            details,
        }
    }

    pub fn not_found(group: &str, resource: &str, name: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", qualified(group, resource)),
            Some(details(group, resource, Some(name))),
        )
    }

    pub fn already_exists(group: &str, resource: &str, name: &str) -> Self {
        Self::new(
            409,
            "AlreadyExists",
            format!("{} \"{name}\" already exists", qualified(group, resource)),
            Some(details(group, resource, Some(name))),
        )
    }

    pub fn conflict(group: &str, resource: &str, name: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; \
                 please apply your changes to the latest version and try again",
                qualified(group, resource)
            ),
            Some(details(group, resource, Some(name))),
        )
    }

    pub fn conflict_with(group: &str, resource: &str, name: &str, why: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": {why}",
                qualified(group, resource)
            ),
            Some(details(group, resource, Some(name))),
        )
    }

    /// 422 with field causes; `kind` is the Kind (e.g. `Pod`), as upstream puts it in details.
    pub fn invalid(group: &str, kind: &str, name: &str, causes: Vec<Cause>) -> Self {
        let summary: Vec<String> = causes
            .iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect();
        let summary = if summary.len() == 1 {
            summary[0].clone()
        } else {
            format!("[{}]", summary.join(", "))
        };
        let mut d = Map::new();
        d.insert("name".into(), json!(name));
        if !group.is_empty() {
            d.insert("group".into(), json!(group));
        }
        d.insert("kind".into(), json!(kind));
        d.insert(
            "causes".into(),
            Value::Array(
                causes
                    .iter()
                    .map(|c| json!({"reason": c.reason, "message": c.message, "field": c.field}))
                    .collect(),
            ),
        );
        Self::new(
            422,
            "Invalid",
            format!(
                "{kind}{} \"{name}\" is invalid: {summary}",
                group_suffix(group)
            ),
            Some(Value::Object(d)),
        )
    }

    /// 403 for a resource request. `name` and `namespace` shape the message like upstream's authorizer.
    pub fn forbidden_resource(
        user: &str,
        verb: &str,
        group: &str,
        resource: &str,
        subresource: Option<&str>,
        namespace: Option<&str>,
        name: Option<&str>,
    ) -> Self {
        let qualified_name = qualified(group, resource);
        let subject = match name {
            Some(n) => format!("{qualified_name} \"{n}\" is forbidden"),
            None => format!("{qualified_name} is forbidden"),
        };
        let res = match subresource {
            Some(s) => format!("{resource}/{s}"),
            None => resource.to_string(),
        };
        let scope = match namespace {
            Some(ns) => format!("in the namespace \"{ns}\""),
            None => "at the cluster scope".to_string(),
        };
        Self::new(
            403,
            "Forbidden",
            format!(
                "{subject}: User \"{user}\" cannot {verb} resource \"{res}\" in API group \"{group}\" {scope}"
            ),
            Some(details(group, resource, name)),
        )
    }

    pub fn forbidden_path(user: &str, verb: &str, path: &str) -> Self {
        Self::new(
            403,
            "Forbidden",
            format!("forbidden: User \"{user}\" cannot {verb} path \"{path}\""),
            Some(json!({})),
        )
    }

    pub fn unauthorized() -> Self {
        Self::new(401, "Unauthorized", "Unauthorized".into(), None)
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message.into(), None)
    }

    pub fn path_not_found() -> Self {
        Self::new(
            404,
            "NotFound",
            "the server could not find the requested resource".into(),
            Some(json!({})),
        )
    }

    pub fn method_not_allowed(verb: &str, group: &str, resource: &str) -> Self {
        Self::new(
            405,
            "MethodNotAllowed",
            format!(
                "{verb} is not supported on resources of kind \"{}\"",
                qualified(group, resource)
            ),
            Some(json!({})),
        )
    }

    pub fn unsupported_media_type(content_type: &str) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!("the body of the request was in an unknown format - accepted media types include: application/json, application/yaml, application/vnd.kubernetes.protobuf, application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json (got {content_type:?})"),
            Some(json!({})),
        )
    }

    pub fn too_large() -> Self {
        Self::new(
            413,
            "RequestEntityTooLarge",
            "Request entity too large: limit is 3145728".into(),
            Some(json!({})),
        )
    }

    pub fn expired(message: String) -> Self {
        Self::new(410, "Expired", message, None)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(
            500,
            "InternalError",
            format!("Internal error occurred: {}", message.into()),
            None,
        )
    }

    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(503, "ServiceUnavailable", message.into(), None)
    }

    /// The Status object itself, also used as the object of a watch ERROR event.
    pub fn to_status(&self) -> Value {
        let mut s = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(d) = &self.details {
            s["details"] = d.clone();
        }
        s
    }
}

fn group_suffix(group: &str) -> String {
    if group.is_empty() {
        String::new()
    } else {
        format!(".{group}")
    }
}

/// Upstream's field order of a metav1.Status, its StatusDetails and a StatusCause (Go struct order,
/// which encoding/json keeps); keys outside these lists follow in name order.
const STATUS_ORDER: &[&str] = &[
    "kind",
    "apiVersion",
    "metadata",
    "status",
    "message",
    "reason",
    "details",
    "code",
];
const DETAILS_ORDER: &[&str] = &[
    "name",
    "group",
    "kind",
    "uid",
    "causes",
    "retryAfterSeconds",
];
const CAUSE_ORDER: &[&str] = &["reason", "message", "field"];

/// Writes `value`'s members in `order` first, recursing into `details` and its `causes`.
fn write_ordered(out: &mut Vec<u8>, value: &Value, order: &[&str]) {
    let Value::Object(m) = value else {
        out.extend(serde_json::to_vec(value).unwrap_or_default());
        return;
    };
    let mut keys: Vec<&String> = m.keys().collect();
    keys.sort_by_key(|k| (order.iter().position(|o| o == k).unwrap_or(order.len()), *k));
    out.push(b'{');
    for (i, k) in keys.into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend(serde_json::to_vec(k).unwrap_or_default());
        out.push(b':');
        match (k.as_str(), &m[k]) {
            ("details", d) if order == STATUS_ORDER => write_ordered(out, d, DETAILS_ORDER),
            ("causes", Value::Array(causes)) if order == DETAILS_ORDER => {
                out.push(b'[');
                for (j, c) in causes.iter().enumerate() {
                    if j > 0 {
                        out.push(b',');
                    }
                    write_ordered(out, c, CAUSE_ORDER);
                }
                out.push(b']');
            }
            (_, v) => out.extend(serde_json::to_vec(v).unwrap_or_default()),
        }
    }
    out.push(b'}');
}

impl ApiError {
    /// The response body, byte for byte as upstream's JSON serializer writes a Status: Go's field
    /// order and encoding/json's trailing newline (clients compare error bodies).
    pub fn status_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(256);
        write_ordered(&mut out, &self.to_status(), STATUS_ORDER);
        out.push(b'\n');
        out
    }
}

/// The error's Status with `metadata.continue` set (a 410 for an expired continue token hands out an
/// inconsistent one).
pub fn with_continue(e: &ApiError, token: &str) -> Response {
    let mut status = e.to_status();
    status["metadata"]["continue"] = Value::String(token.to_string());
    let mut out = Vec::with_capacity(512);
    write_ordered(&mut out, &status, STATUS_ORDER);
    out.push(b'\n');
    let code = StatusCode::from_u16(e.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    bytes_response(code, out)
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        bytes_response(code, self.status_bytes())
    }
}

/// A JSON body with its status code; every response the API writes goes through here.
pub fn json_response(code: StatusCode, value: &Value) -> Response {
    bytes_response(code, serde_json::to_vec(value).unwrap_or_default())
}

/// An already serialised JSON body.
pub fn bytes_response(code: StatusCode, body: Vec<u8>) -> Response {
    (
        code,
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response()
}

pub fn ok_json(value: &Value) -> Response {
    json_response(StatusCode::OK, value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_found_matches_upstream_shape() {
        let s = ApiError::not_found("", "pods", "web").to_status();
        assert_eq!(
            s,
            json!({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",
                   "message":"pods \"web\" not found","reason":"NotFound",
                   "details":{"name":"web","kind":"pods"},"code":404})
        );
    }

    #[test]
    fn status_bytes_are_upstreams() {
        let nf = ApiError::not_found("apps", "deployments", "web");
        assert_eq!(
            String::from_utf8(nf.status_bytes()).unwrap(),
            "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\
             \"message\":\"deployments.apps \\\"web\\\" not found\",\"reason\":\"NotFound\",\
             \"details\":{\"name\":\"web\",\"group\":\"apps\",\"kind\":\"deployments\"},\"code\":404}\n"
        );
        let inv = ApiError::invalid("", "Pod", "x", vec![Cause::required("spec", "")]);
        let body = String::from_utf8(inv.status_bytes()).unwrap();
        assert!(
            body.contains(r#""details":{"name":"x","kind":"Pod","causes":[{"reason":"FieldValueRequired","message":"Required value","field":"spec"}]},"code":422}"#),
            "{body}"
        );
    }

    #[test]
    fn grouped_resource_is_qualified() {
        let e = ApiError::already_exists("coordination.k8s.io", "leases", "n1");
        assert_eq!(
            e.message,
            "leases.coordination.k8s.io \"n1\" already exists"
        );
        assert_eq!(e.details.unwrap()["group"], "coordination.k8s.io");
    }

    #[test]
    fn forbidden_message_names_scope() {
        let e = ApiError::forbidden_resource(
            "system:node:n1",
            "list",
            "",
            "secrets",
            None,
            Some("default"),
            None,
        );
        assert_eq!(
            e.message,
            "secrets is forbidden: User \"system:node:n1\" cannot list resource \"secrets\" in API group \"\" in the namespace \"default\""
        );
    }

    #[test]
    fn invalid_lists_causes() {
        let e = ApiError::invalid(
            "",
            "Pod",
            "x",
            vec![Cause::required(
                "metadata.name",
                "name or generateName is required",
            )],
        );
        assert_eq!(
            e.message,
            "Pod \"x\" is invalid: metadata.name: Required value: name or generateName is required"
        );
        assert_eq!(e.code, 422);
    }
}
