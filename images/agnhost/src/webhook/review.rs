//! AdmissionReview in and out, v1 and v1beta1: the request fields the handlers read, and the response
//! as `encoding/json` writes upstream's `admission.k8s.io` types.

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::kube_json::{self, DecodeError, Gvk, Status};

/// Where upstream's scheme was made; apimachinery names a scheme after that call site in its errors.
const SCHEME: &str = "k8s.io/kubernetes/test/images/agnhost/webhook/scheme.go:31";

/// The group/versions upstream's webhook scheme registers (core/v1, admission and
/// admissionregistration v1 and v1beta1): a kind of these that is not an AdmissionReview is
/// "unsupported", anything else is not registered at all.
const REGISTERED: &[(&str, &str)] = &[
    ("", "v1"),
    ("admission.k8s.io", "v1beta1"),
    ("admission.k8s.io", "v1"),
    ("admissionregistration.k8s.io", "v1beta1"),
    ("admissionregistration.k8s.io", "v1"),
];

/// Why a body gets a 400 before any handler sees it.
#[derive(Debug, thiserror::Error)]
pub enum Rejection {
    #[error("Request could not be decoded: {0}")]
    Decode(#[from] DecodeError),
    #[error("Unsupported group version kind: {0}")]
    Unsupported(Gvk),
}

#[derive(Debug, Deserialize)]
struct ReviewIn {
    request: Option<AdmissionRequest>,
}

/// `metav1.GroupVersionResource`; printed with `%s`/`%v` as Go prints the plain struct.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct Gvr {
    pub group: String,
    pub version: String,
    pub resource: String,
}

impl Gvr {
    pub fn new(group: &str, version: &str, resource: &str) -> Gvr {
        Gvr {
            group: group.into(),
            version: version.into(),
            resource: resource.into(),
        }
    }
}

impl std::fmt::Display for Gvr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{{{} {} {}}}", self.group, self.version, self.resource)
    }
}

/// The fields of `AdmissionRequest` the handlers use; the rest are ignored, as Go's decoder ignores
/// what no handler reads.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct AdmissionRequest {
    pub uid: String,
    pub resource: Gvr,
    pub sub_resource: String,
    pub name: String,
    pub namespace: String,
    pub operation: String,
    pub object: Option<Value>,
    pub old_object: Option<Value>,
}

impl AdmissionRequest {
    /// The object a handler reads: the old one for DELETE (the new one is empty then).
    pub fn object_or_old(&self) -> Option<&Value> {
        if self.operation == "DELETE" {
            self.old_object.as_ref()
        } else {
            self.object.as_ref()
        }
    }
}

/// The version a review came in, which is the version it is answered in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReviewVersion {
    V1,
    V1beta1,
}

impl ReviewVersion {
    fn api_version(self) -> &'static str {
        match self {
            ReviewVersion::V1 => "admission.k8s.io/v1",
            ReviewVersion::V1beta1 => "admission.k8s.io/v1beta1",
        }
    }
}

/// A decoded review; `request` is `None` when the body had none (upstream then dereferences nil).
#[derive(Debug)]
pub struct Review {
    pub version: ReviewVersion,
    pub request: Option<AdmissionRequest>,
}

/// Decodes a body as upstream's universal deserializer does: JSON, or YAML turned into JSON.
pub fn decode(body: &[u8]) -> Result<Review, Rejection> {
    let yaml = !body.trim_ascii_start().starts_with(b"{");
    let json = kube_json::to_json_text(body, yaml)?;
    let gvk = kube_json::type_of(&json)?;
    let version = match (gvk.group.as_str(), gvk.version.as_str(), gvk.kind.as_str()) {
        ("admission.k8s.io", "v1", "AdmissionReview") => ReviewVersion::V1,
        ("admission.k8s.io", "v1beta1", "AdmissionReview") => ReviewVersion::V1beta1,
        (g, v, _) if REGISTERED.contains(&(g, v)) => return Err(Rejection::Unsupported(gvk)),
        _ => {
            return Err(DecodeError::NotRegistered {
                kind: gvk.kind.clone(),
                version: gvk.api_version(),
                scheme: SCHEME,
            }
            .into())
        }
    };
    let review: ReviewIn =
        serde_json::from_str(&json).map_err(|e| DecodeError::Typed(e.to_string()))?;
    Ok(Review {
        version,
        request: review.request,
    })
}

/// `AdmissionResponse` without its UID (the server copies the request's in).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AdmissionResponse {
    pub allowed: bool,
    pub result: Option<Status>,
    /// A JSON patch, as the exact bytes upstream sends (base64 on the wire).
    pub patch: Option<String>,
}

impl AdmissionResponse {
    pub fn allow() -> AdmissionResponse {
        AdmissionResponse {
            allowed: true,
            ..AdmissionResponse::default()
        }
    }

    pub fn deny(result: Status) -> AdmissionResponse {
        AdmissionResponse {
            allowed: false,
            result: Some(result),
            patch: None,
        }
    }

    pub fn patch(patch: impl Into<String>) -> AdmissionResponse {
        AdmissionResponse {
            allowed: true,
            result: None,
            patch: Some(patch.into()),
        }
    }

    /// Upstream's `toV1AdmissionResponse(err)`: not allowed, the error as the message.
    pub fn error(err: impl std::fmt::Display) -> AdmissionResponse {
        AdmissionResponse::deny(Status::message(err.to_string()))
    }
}

#[derive(Serialize)]
struct ReviewOut<'a> {
    kind: &'static str,
    #[serde(rename = "apiVersion")]
    api_version: &'static str,
    response: ResponseOut<'a>,
}

#[derive(Serialize)]
struct ResponseOut<'a> {
    uid: &'a str,
    allowed: bool,
    #[serde(rename = "status", skip_serializing_if = "Option::is_none")]
    result: Option<&'a Status>,
    #[serde(skip_serializing_if = "Option::is_none")]
    patch: Option<String>,
    #[serde(rename = "patchType", skip_serializing_if = "Option::is_none")]
    patch_type: Option<&'static str>,
}

/// The answering review's JSON, in the request's version, with the request's UID.
pub fn encode(version: ReviewVersion, uid: &str, response: &AdmissionResponse) -> String {
    let patch = response
        .patch
        .as_ref()
        .map(|p| base64::engine::general_purpose::STANDARD.encode(p));
    kube_json::go_json(&ReviewOut {
        kind: "AdmissionReview",
        api_version: version.api_version(),
        response: ResponseOut {
            uid,
            allowed: response.allowed,
            result: response.result.as_ref(),
            patch_type: patch.as_ref().map(|_| "JSONPatch"),
            patch,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_both_versions() {
        let r = decode(br#"{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{"uid":"u1","operation":"CREATE","resource":{"group":"","version":"v1","resource":"pods"}}}"#).unwrap();
        assert_eq!(r.version, ReviewVersion::V1beta1);
        let req = r.request.unwrap();
        assert_eq!(req.uid, "u1");
        assert_eq!(req.resource, Gvr::new("", "v1", "pods"));
        let r = decode(b"apiVersion: admission.k8s.io/v1\nkind: AdmissionReview\n").unwrap();
        assert_eq!(r.version, ReviewVersion::V1);
        assert!(r.request.is_none());
    }

    #[test]
    fn rejects_other_kinds_as_upstream() {
        let e = decode(br#"{"apiVersion":"v1","kind":"ConfigMap"}"#).unwrap_err();
        assert_eq!(
            e.to_string(),
            "Unsupported group version kind: /v1, Kind=ConfigMap"
        );
        let e = decode(br#"{"apiVersion":"admission.k8s.io/v2","kind":"AdmissionReview"}"#)
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("Request could not be decoded: no kind \"AdmissionReview\" is registered for version \"admission.k8s.io/v2\" in scheme \"{SCHEME}\"")
        );
        let e = decode(br#"{"kind":"AdmissionReview"}"#).unwrap_err();
        assert!(e
            .to_string()
            .starts_with("Request could not be decoded: Object 'apiVersion' is missing in"));
    }

    #[test]
    fn encodes_like_encoding_json() {
        let out = encode(
            ReviewVersion::V1,
            "u",
            &AdmissionResponse::deny(Status::message("no")),
        );
        assert_eq!(
            out,
            r#"{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","response":{"uid":"u","allowed":false,"status":{"metadata":{},"message":"no"}}}"#
        );
        let out = encode(ReviewVersion::V1beta1, "u", &AdmissionResponse::patch("[]"));
        assert_eq!(
            out,
            r#"{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1beta1","response":{"uid":"u","allowed":true,"patch":"W10=","patchType":"JSONPatch"}}"#
        );
    }

    #[test]
    fn gvr_prints_as_a_go_struct() {
        assert_eq!(Gvr::new("", "v1", "pods").to_string(), "{ v1 pods}");
    }
}
