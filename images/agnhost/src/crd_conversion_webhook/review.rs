//! ConversionReview in and out (`apiextensions.k8s.io/v1` and `v1beta1`, whose request and response
//! fields are the same), and upstream's `doConversion`: every object converted, or the first failure.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::converter::{convert_example_crd, ConvertError};
use crate::kube_json::{self, DecodeError, Gvk, Status};

/// Where upstream's converter scheme is made; apimachinery names a scheme after that call site.
const SCHEME: &str =
    "k8s.io/kubernetes/test/images/agnhost/crd-conversion-webhook/converter/framework.go";

#[derive(Debug, thiserror::Error)]
pub enum Rejection {
    #[error("{0}")]
    Decode(#[from] DecodeError),
    #[error("Unsupported group version kind: {0}")]
    Unsupported(Gvk),
}

#[derive(Deserialize)]
struct ReviewIn {
    request: Option<RequestIn>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RequestIn {
    #[serde(default)]
    uid: String,
    #[serde(default, rename = "desiredAPIVersion")]
    desired_api_version: String,
    #[serde(default)]
    objects: Option<Vec<Box<RawValue>>>,
}

/// A decoded ConversionReview; `request` is `None` when the body had none (upstream then
/// dereferences nil).
pub struct Review {
    gvk: Gvk,
    request: Option<RequestIn>,
}

impl Review {
    pub fn has_request(&self) -> bool {
        self.request.is_some()
    }
}

/// Decodes the JSON text of a body (YAML already turned into JSON by the caller).
pub fn decode(json: &str) -> Result<Review, Rejection> {
    let gvk = kube_json::type_of(json)?;
    match (gvk.group.as_str(), gvk.version.as_str(), gvk.kind.as_str()) {
        ("apiextensions.k8s.io", "v1" | "v1beta1", "ConversionReview") => {}
        ("apiextensions.k8s.io", "v1" | "v1beta1", _) => return Err(Rejection::Unsupported(gvk)),
        _ => {
            return Err(DecodeError::NotRegistered {
                kind: gvk.kind.clone(),
                version: gvk.api_version(),
                scheme: SCHEME,
            }
            .into())
        }
    }
    let review: ReviewIn =
        serde_json::from_str(json).map_err(|e| DecodeError::Typed(e.to_string()))?;
    Ok(Review {
        gvk,
        request: review.request,
    })
}

/// The response: the converted objects, or none and the failure.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ResponseOut {
    uid: String,
    converted_objects: Option<Vec<Value>>,
    result: Status,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct EmptyRequest {
    uid: &'static str,
    #[serde(rename = "desiredAPIVersion")]
    desired_api_version: &'static str,
    objects: Option<()>,
}

/// The review sent back: the request's kind and version, the request emptied (upstream resets it),
/// the response.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReviewOut {
    kind: &'static str,
    api_version: String,
    request: EmptyRequest,
    response: ResponseOut,
}

fn failure(uid: &str, message: String) -> ResponseOut {
    tracing::error!("{message}");
    ResponseOut {
        uid: uid.to_owned(),
        converted_objects: None,
        result: Status::failure(message, 0),
    }
}

/// An object as `unstructured.Unstructured.UnmarshalJSON` takes it: a JSON object with a kind.
fn unstructured(raw: &RawValue) -> Result<Map<String, Value>, String> {
    let v: Value = serde_json::from_str(raw.get()).map_err(|e| e.to_string())?;
    let Value::Object(m) = v else {
        return Err(
            "json: cannot unmarshal non-object into Go value of type map[string]interface {}"
                .into(),
        );
    };
    if m.get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .is_empty()
    {
        return Err(DecodeError::MissingKind(raw.get().to_owned()).to_string());
    }
    Ok(m)
}

/// Converts every object of the review; `Err` when upstream's handler would panic.
pub fn respond(review: Review) -> Result<ReviewOut, ConvertError> {
    let request = review.request.ok_or(ConvertError::Panic)?;
    let uid = request.uid.as_str();
    let mut converted = Vec::new();
    let mut result = None;
    for raw in request.objects.iter().flatten() {
        let object = match unstructured(raw) {
            Ok(o) => o,
            Err(e) => {
                result = Some(failure(
                    uid,
                    format!(
                        "failed to unmarshall object ({}) with error: {e}",
                        raw.get()
                    ),
                ));
                break;
            }
        };
        match convert_example_crd(&object, &request.desired_api_version) {
            Ok(mut out) => {
                out.insert(
                    "apiVersion".into(),
                    Value::String(request.desired_api_version.clone()),
                );
                converted.push(Value::Object(out));
            }
            Err(ConvertError::Failure(message)) => {
                result = Some(failure(uid, message));
                break;
            }
            Err(ConvertError::Panic) => return Err(ConvertError::Panic),
        }
    }
    let response = result.unwrap_or_else(|| ResponseOut {
        uid: uid.to_owned(),
        // Go's nil slice when there was nothing to convert.
        converted_objects: (!converted.is_empty()).then_some(converted),
        result: Status::success(),
    });
    Ok(ReviewOut {
        kind: "ConversionReview",
        api_version: review.gvk.api_version(),
        request: EmptyRequest {
            uid: "",
            desired_api_version: "",
            objects: None,
        },
        response,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn convert(body: Value) -> Value {
        let out = respond(decode(&body.to_string()).unwrap()).unwrap();
        serde_json::to_value(&out).unwrap()
    }

    #[test]
    fn converts_every_object_and_empties_the_request() {
        let out = convert(json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
            "request": {"uid": "u1", "desiredAPIVersion": "stable.example.com/v2", "objects": [
                {"apiVersion": "stable.example.com/v1", "kind": "E2e", "metadata": {"name": "a"}, "hostPort": "localhost:7070"},
                {"apiVersion": "stable.example.com/v1", "kind": "E2e", "metadata": {"name": "b"}}
            ]}
        }));
        assert_eq!(
            out,
            json!({
                "kind": "ConversionReview", "apiVersion": "apiextensions.k8s.io/v1",
                "request": {"uid": "", "desiredAPIVersion": "", "objects": null},
                "response": {"uid": "u1", "convertedObjects": [
                    {"apiVersion": "stable.example.com/v2", "kind": "E2e", "metadata": {"name": "a"}, "host": "localhost", "port": "7070"},
                    {"apiVersion": "stable.example.com/v2", "kind": "E2e", "metadata": {"name": "b"}}
                ], "result": {"metadata": {}, "status": "Success"}}
            })
        );
    }

    #[test]
    fn the_first_failure_is_the_result() {
        let out = convert(json!({
            "apiVersion": "apiextensions.k8s.io/v1beta1", "kind": "ConversionReview",
            "request": {"uid": "u2", "desiredAPIVersion": "stable.example.com/v2", "objects": [
                {"apiVersion": "stable.example.com/v1", "kind": "E2e", "hostPort": "nope"}
            ]}
        }));
        assert_eq!(out["apiVersion"], "apiextensions.k8s.io/v1beta1");
        assert_eq!(
            out["response"],
            json!({"uid": "u2", "convertedObjects": null,
                   "result": {"metadata": {}, "status": "Failure", "message": "invalid hostPort value `nope`"}})
        );
    }

    #[test]
    fn an_object_without_kind_fails_with_its_raw_text() {
        let body = r#"{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","request":{"uid":"u","desiredAPIVersion":"stable.example.com/v2","objects":[{"apiVersion": "stable.example.com/v1"}]}}"#;
        let out = serde_json::to_value(respond(decode(body).unwrap()).unwrap()).unwrap();
        assert_eq!(
            out["response"]["result"]["message"],
            r#"failed to unmarshall object ({"apiVersion": "stable.example.com/v1"}) with error: Object 'Kind' is missing in '{"apiVersion": "stable.example.com/v1"}'"#
        );
    }

    #[test]
    fn other_kinds_are_rejected() {
        let e =
            decode(r#"{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition"}"#);
        assert_eq!(
            e.err().unwrap().to_string(),
            "Unsupported group version kind: apiextensions.k8s.io/v1, Kind=CustomResourceDefinition"
        );
        assert!(respond(
            decode(r#"{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview"}"#)
                .unwrap()
        )
        .is_err());
    }
}
