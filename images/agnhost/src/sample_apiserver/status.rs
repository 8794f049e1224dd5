//! `metav1.Status` failures as apimachinery's `errors.New*` build them (reason, code, details and
//! the exact message texts), and the JSON responses that carry objects.

use axum::response::{IntoResponse, Response};
use http::{header, HeaderValue, StatusCode};
use serde_json::{json, Value};

/// A failure answered as a Status object.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    pub details: Option<Value>,
}

/// `group/resource` as upstream prints a GroupResource (`flunders.wardle.example.com`).
pub fn qualified(resource: &str, group: &str) -> String {
    if group.is_empty() {
        resource.to_string()
    } else {
        format!("{resource}.{group}")
    }
}

fn details(name: &str, group: &str, resource: &str) -> Value {
    let mut d = json!({"group": group, "kind": resource});
    if !name.is_empty() {
        d["name"] = json!(name);
    }
    d
}

impl ApiError {
    pub fn not_found(group: &str, resource: &str, name: &str) -> ApiError {
        ApiError {
            code: 404,
            reason: "NotFound",
            message: format!("{} {name:?} not found", qualified(resource, group)),
            details: Some(details(name, group, resource)),
        }
    }

    pub fn already_exists(group: &str, resource: &str, name: &str) -> ApiError {
        ApiError {
            code: 409,
            reason: "AlreadyExists",
            message: format!("{} {name:?} already exists", qualified(resource, group)),
            details: Some(details(name, group, resource)),
        }
    }

    pub fn conflict(group: &str, resource: &str, name: &str) -> ApiError {
        ApiError {
            code: 409,
            reason: "Conflict",
            message: format!(
                "Operation cannot be fulfilled on {} {name:?}: the object has been modified; please apply your changes to the latest version and try again",
                qualified(resource, group)
            ),
            details: Some(details(name, group, resource)),
        }
    }

    /// errors.NewForbidden: `<resource> "<name>" is forbidden: <why>`.
    pub fn forbidden(group: &str, resource: &str, name: &str, why: &str) -> ApiError {
        let what = qualified(resource, group);
        let message = if name.is_empty() {
            format!("{what} is forbidden: {why}")
        } else {
            format!("{what} {name:?} is forbidden: {why}")
        };
        ApiError {
            code: 403,
            reason: "Forbidden",
            message,
            details: Some(details(name, group, resource)),
        }
    }

    /// errors.NewInvalid: `<Kind> "<name>" is invalid: [<cause>, …]` (one cause unbracketed).
    pub fn invalid(group: &str, kind: &str, name: &str, causes: &[Cause]) -> ApiError {
        let listed: Vec<String> = causes.iter().map(Cause::to_string).collect();
        let joined = match listed.as_slice() {
            [one] => one.clone(),
            many => format!("[{}]", many.join(", ")),
        };
        let mut d = json!({"name": name, "group": group, "kind": kind});
        d["causes"] = causes
            .iter()
            .map(|c| json!({"reason": c.reason, "message": c.detail_message(), "field": c.field}))
            .collect();
        ApiError {
            code: 422,
            reason: "Invalid",
            message: format!("{} {name:?} is invalid: {joined}", qualified(kind, group)),
            details: Some(d),
        }
    }

    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError {
            code: 400,
            reason: "BadRequest",
            message: message.into(),
            details: None,
        }
    }

    pub fn unauthorized() -> ApiError {
        ApiError {
            code: 401,
            reason: "Unauthorized",
            message: "Unauthorized".into(),
            details: None,
        }
    }

    pub fn method_not_allowed(method: &str) -> ApiError {
        ApiError {
            code: 405,
            reason: "MethodNotAllowed",
            message: format!(
                "the server does not allow this method on the requested resource ({method})"
            ),
            details: None,
        }
    }

    pub fn unsupported_media_type(content_type: &str) -> ApiError {
        ApiError {
            code: 415,
            reason: "UnsupportedMediaType",
            message: format!("the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json; got {content_type:?}"),
            details: None,
        }
    }

    /// The 404 of a path no route serves (upstream's NotFound handler's Status).
    pub fn path_not_found() -> ApiError {
        ApiError {
            code: 404,
            reason: "NotFound",
            message: "the server could not find the requested resource".into(),
            details: None,
        }
    }

    pub fn internal(why: impl std::fmt::Display) -> ApiError {
        ApiError {
            code: 500,
            reason: "InternalError",
            message: format!("Internal error occurred: {why}"),
            details: None,
        }
    }

    pub fn to_json(&self) -> Value {
        let mut v = json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
            "status": "Failure", "message": self.message, "reason": self.reason, "code": self.code});
        if let Some(d) = &self.details {
            v["details"] = d.clone();
        }
        v
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        json_response(code, &self.to_json())
    }
}

/// One field error, printed as field.Error does: `spec.x: Invalid value: "v": why`.
#[derive(Debug, Clone, PartialEq)]
pub struct Cause {
    pub field: String,
    /// FieldValueRequired, FieldValueInvalid, …
    pub reason: &'static str,
    pub value: Option<String>,
    pub detail: String,
}

impl Cause {
    pub fn required(field: &str, detail: &str) -> Cause {
        Cause {
            field: field.into(),
            reason: "FieldValueRequired",
            value: None,
            detail: detail.into(),
        }
    }

    pub fn invalid(field: &str, value: &str, detail: &str) -> Cause {
        Cause {
            field: field.into(),
            reason: "FieldValueInvalid",
            value: Some(value.into()),
            detail: detail.into(),
        }
    }

    /// The message a StatusCause carries (the field is apart).
    fn detail_message(&self) -> String {
        match (&self.value, self.reason) {
            (Some(v), _) => format!("Invalid value: {v:?}: {}", self.detail),
            (None, _) => format!("Required value: {}", self.detail),
        }
    }
}

impl std::fmt::Display for Cause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.detail_message())
    }
}

pub fn json_response(code: StatusCode, body: &Value) -> Response {
    let mut r = (code, body.to_string()).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

/// A successful delete without the object (the registry's `Status{Status: Success}`).
pub fn deleted(group: &str, resource: &str, name: &str, uid: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
        "details": {"name": name, "group": group, "kind": resource, "uid": uid}})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_read_as_apimachinery_writes_them() {
        let e = ApiError::not_found("wardle.example.com", "flunders", "f1");
        assert_eq!(e.message, "flunders.wardle.example.com \"f1\" not found");
        assert_eq!(e.to_json()["details"]["kind"], "flunders");
        let e = ApiError::forbidden("wardle.example.com", "flunders", "f1", "no");
        assert_eq!(
            e.message,
            "flunders.wardle.example.com \"f1\" is forbidden: no"
        );
        let e = ApiError::invalid(
            "wardle.example.com",
            "Flunder",
            "f1",
            &[Cause::required(
                "spec.fischerReference",
                "cannot be empty if referenceType is Fischer",
            )],
        );
        assert_eq!(
            e.message,
            "Flunder.wardle.example.com \"f1\" is invalid: spec.fischerReference: Required value: cannot be empty if referenceType is Fischer"
        );
        assert_eq!(e.code, 422);
    }
}
