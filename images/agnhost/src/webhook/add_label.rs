//! `/add-label`: makes sure the object carries the label `added-label: yes`, with the smallest of
//! upstream's three patches.

use super::objects;
use super::review::{AdmissionRequest, AdmissionResponse};

// Upstream's patches, byte for byte: the apiserver only parses them, but a test comparing the base64
// of a response sees every space.
pub const ADD_FIRST_LABEL_PATCH: &str = "[\n         { \"op\": \"add\", \"path\": \"/metadata/labels\", \"value\": {\"added-label\": \"yes\"}}\n     ]";
pub const ADD_ADDITIONAL_LABEL_PATCH: &str = "[\n         { \"op\": \"add\", \"path\": \"/metadata/labels/added-label\", \"value\": \"yes\" }\n     ]";
pub const UPDATE_LABEL_PATCH: &str = "[\n         { \"op\": \"replace\", \"path\": \"/metadata/labels/added-label\", \"value\": \"yes\" }\n     ]";

pub fn add_label(req: &AdmissionRequest) -> AdmissionResponse {
    let labels = match objects::unmarshal(req.object.as_ref())
        .and_then(|o| objects::string_map(o, &["metadata", "labels"], ".metadata.labels"))
    {
        Ok(l) => l,
        Err(e) => {
            tracing::error!("{e}");
            return AdmissionResponse::error(e);
        }
    };
    match labels.get("added-label") {
        _ if labels.is_empty() => AdmissionResponse::patch(ADD_FIRST_LABEL_PATCH),
        None => AdmissionResponse::patch(ADD_ADDITIONAL_LABEL_PATCH),
        Some(v) if v != "yes" => AdmissionResponse::patch(UPDATE_LABEL_PATCH),
        Some(_) => AdmissionResponse::allow(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn with(object: serde_json::Value) -> AdmissionRequest {
        AdmissionRequest {
            object: Some(object),
            ..AdmissionRequest::default()
        }
    }

    #[test]
    fn picks_the_patch_for_the_labels_present() {
        let r = add_label(&with(json!({"metadata": {"name": "x"}})));
        assert_eq!(r.patch.as_deref(), Some(ADD_FIRST_LABEL_PATCH));
        let r = add_label(&with(json!({"metadata": {"labels": {"a": "b"}}})));
        assert_eq!(r.patch.as_deref(), Some(ADD_ADDITIONAL_LABEL_PATCH));
        let r = add_label(&with(
            json!({"metadata": {"labels": {"added-label": "no"}}}),
        ));
        assert_eq!(r.patch.as_deref(), Some(UPDATE_LABEL_PATCH));
        let r = add_label(&with(
            json!({"metadata": {"labels": {"added-label": "yes"}}}),
        ));
        assert_eq!(r, AdmissionResponse::allow());
    }

    #[test]
    fn patches_are_json_patches() {
        for p in [
            ADD_FIRST_LABEL_PATCH,
            ADD_ADDITIONAL_LABEL_PATCH,
            UPDATE_LABEL_PATCH,
        ] {
            let v: serde_json::Value = serde_json::from_str(p).unwrap();
            assert!(v[0]["path"]
                .as_str()
                .unwrap()
                .starts_with("/metadata/labels"));
        }
    }

    #[test]
    fn no_object_is_denied_with_the_decode_error() {
        let r = add_label(&AdmissionRequest::default());
        assert!(!r.allowed);
        assert_eq!(r.result.unwrap().message, "unexpected end of JSON input");
    }
}
