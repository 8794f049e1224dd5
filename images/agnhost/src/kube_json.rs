//! What the two review webhooks (`webhook`, `crd-conversion-webhook`) share: reading a body the way
//! apimachinery's serializers do (JSON, or YAML turned into JSON), their error texts, `metav1.Status`
//! as Go marshals it, Go's `http.Error`, and Go's HTML-escaping JSON encoder.

use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode};
use serde::Serialize;
use serde_json::Value;

#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error("couldn't get version/kind; json parse error: {0}")]
    Json(String),
    #[error("error converting YAML to JSON: {0}")]
    Yaml(String),
    #[error("Object 'Kind' is missing in '{0}'")]
    MissingKind(String),
    #[error("Object 'apiVersion' is missing in '{0}'")]
    MissingVersion(String),
    #[error("no kind \"{kind}\" is registered for version \"{version}\" in scheme \"{scheme}\"")]
    NotRegistered {
        kind: String,
        version: String,
        scheme: &'static str,
    },
    #[error("{0}")]
    Typed(String),
}

/// The group/version/kind an object names, printed as apimachinery's `schema.GroupVersionKind`
/// (`admission.k8s.io/v1, Kind=AdmissionReview`; `/v1, Kind=Pod` for the core group).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gvk {
    pub group: String,
    pub version: String,
    pub kind: String,
}

impl Gvk {
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
}

impl std::fmt::Display for Gvk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}, Kind={}", self.group, self.version, self.kind)
    }
}

/// A body as JSON text: apimachinery's decoders take JSON as is and turn anything else into JSON
/// through YAML first. Returns the JSON text so raw objects inside can keep their exact bytes.
pub fn to_json_text(body: &[u8], yaml: bool) -> Result<String, DecodeError> {
    if !yaml {
        let text = std::str::from_utf8(body).map_err(|e| DecodeError::Json(e.to_string()))?;
        serde_json::from_str::<Value>(text).map_err(|e| DecodeError::Json(e.to_string()))?;
        return Ok(text.to_owned());
    }
    let v: Value = serde_norway::from_slice(body).map_err(|e| DecodeError::Yaml(e.to_string()))?;
    Ok(v.to_string())
}

/// Reads `apiVersion` and `kind` as the JSON serializer does before it picks a type.
pub fn type_of(json: &str) -> Result<Gvk, DecodeError> {
    let v: Value = serde_json::from_str(json).map_err(|e| DecodeError::Json(e.to_string()))?;
    let field = |name: &str| {
        v.get(name)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let (api_version, kind) = (field("apiVersion"), field("kind"));
    if kind.is_empty() {
        return Err(DecodeError::MissingKind(json.to_owned()));
    }
    if api_version.is_empty() {
        return Err(DecodeError::MissingVersion(json.to_owned()));
    }
    let (group, version) = match api_version.split_once('/') {
        Some((g, v)) => (g.to_owned(), v.to_owned()),
        None => (String::new(), api_version),
    };
    Ok(Gvk {
        group,
        version,
        kind,
    })
}

/// `metav1.Status` as `encoding/json` writes it: `metadata` always (an empty ListMeta), the rest only
/// when set, in the struct's field order.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Status {
    metadata: EmptyMeta,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub status: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub message: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub reason: String,
    #[serde(skip_serializing_if = "is_zero")]
    pub code: i32,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
struct EmptyMeta {}

fn is_zero(c: &i32) -> bool {
    *c == 0
}

impl Status {
    pub fn message(message: impl Into<String>) -> Status {
        Status {
            message: message.into(),
            ..Status::default()
        }
    }

    /// `status: Failure` with a message (and an HTTP code, 0 for none).
    pub fn failure(message: impl Into<String>, code: i32) -> Status {
        Status {
            status: "Failure".into(),
            message: message.into(),
            code,
            ..Status::default()
        }
    }

    pub fn success() -> Status {
        Status {
            status: "Success".into(),
            ..Status::default()
        }
    }

    pub fn reason(reason: impl Into<String>) -> Status {
        Status {
            reason: reason.into(),
            ..Status::default()
        }
    }
}

/// Go's `encoding/json` escapes `<`, `>`, `&`, U+2028 and U+2029 in strings; those characters only
/// occur inside strings in serde_json's output, so replacing them afterwards is exact.
pub fn go_json<T: Serialize>(value: &T) -> String {
    let text = serde_json::to_string(value).unwrap_or_else(|_| "null".into());
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c => out.push(c),
        }
    }
    out
}

/// Go's `http.Error`: the message and a newline, as plain text, not to be sniffed.
pub fn http_error(msg: impl std::fmt::Display, code: StatusCode) -> Response {
    let mut r = (code, format!("{msg}\n")).into_response();
    r.headers_mut().insert(
        "X-Content-Type-Options",
        HeaderValue::from_static("nosniff"),
    );
    r
}

/// Go's `%s` of a value decoded into `interface{}` (what the converter prints `host` and `port`
/// with): strings as they are, anything else in fmt's `%!s(type=value)` form.
pub fn go_sprint_s(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "%!s(<nil>)".into(),
        Value::Bool(b) => format!("%!s(bool={b})"),
        Value::Number(n) if n.is_i64() => format!("%!s(int64={n})"),
        Value::Number(n) => format!("%!s(float64={n})"),
        Value::Array(items) => {
            let parts: Vec<_> = items.iter().map(go_sprint_s).collect();
            format!("[{}]", parts.join(" "))
        }
        Value::Object(m) => {
            let parts: Vec<_> = m
                .iter()
                .map(|(k, v)| format!("{k}:{}", go_sprint_s(v)))
                .collect();
            format!("map[{}]", parts.join(" "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_marshals_like_go() {
        assert_eq!(go_json(&Status::default()), r#"{"metadata":{}}"#);
        let s = Status::failure("m", 500);
        assert_eq!(
            go_json(&s),
            r#"{"metadata":{},"status":"Failure","message":"m","code":500}"#
        );
    }

    #[test]
    fn go_json_escapes_html() {
        assert_eq!(go_json(&"a<b>&c"), r#""a\u003cb\u003e\u0026c""#);
    }

    #[test]
    fn type_of_reads_group_version_kind() {
        let g =
            type_of(r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#).unwrap();
        assert_eq!(g.to_string(), "admission.k8s.io/v1, Kind=AdmissionReview");
        assert_eq!(g.api_version(), "admission.k8s.io/v1");
        let core = type_of(r#"{"apiVersion":"v1","kind":"Pod"}"#).unwrap();
        assert_eq!(core.to_string(), "/v1, Kind=Pod");
        assert_eq!(core.api_version(), "v1");
        assert_eq!(
            type_of(r#"{"apiVersion":"v1"}"#).unwrap_err().to_string(),
            r#"Object 'Kind' is missing in '{"apiVersion":"v1"}'"#
        );
        assert!(type_of("kind: x")
            .unwrap_err()
            .to_string()
            .starts_with("couldn't get version/kind; json parse error: "));
    }

    #[test]
    fn yaml_bodies_become_json() {
        let j = to_json_text(b"kind: A\napiVersion: g/v\n", true).unwrap();
        assert_eq!(type_of(&j).unwrap().kind, "A");
    }

    #[test]
    fn sprint_s_matches_fmt() {
        assert_eq!(go_sprint_s(&serde_json::json!("x")), "x");
        assert_eq!(go_sprint_s(&serde_json::json!(7070)), "%!s(int64=7070)");
        assert_eq!(go_sprint_s(&serde_json::json!(true)), "%!s(bool=true)");
    }
}
