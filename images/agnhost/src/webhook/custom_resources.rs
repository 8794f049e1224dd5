//! `/custom-resource`, `/mutating-custom-resource` (the configmap rules, on a custom resource's
//! top-level `data`) and `/crd` (deny CustomResourceDefinitions labelled `webhook-disallow`).

use super::configmaps::{judge_data, stage_patch};
use super::objects;
use super::review::{AdmissionRequest, AdmissionResponse, Gvr};
use crate::kube_json::Status;

fn data(
    raw: Option<&serde_json::Value>,
) -> Result<std::collections::BTreeMap<String, String>, String> {
    objects::unmarshal(raw).and_then(objects::untagged_data)
}

pub fn admit_custom_resource(req: &AdmissionRequest) -> AdmissionResponse {
    match data(req.object_or_old()) {
        Ok(d) => judge_data(
            &req.operation,
            &d,
            "the custom resource contains unwanted data",
            "the custom resource cannot be deleted because it contains unwanted key and value",
        ),
        Err(e) => {
            tracing::error!("{e}");
            AdmissionResponse::error(e)
        }
    }
}

pub fn mutate_custom_resource(req: &AdmissionRequest) -> AdmissionResponse {
    match data(req.object.as_ref()) {
        Ok(d) => stage_patch(&d),
        Err(e) => {
            tracing::error!("{e}");
            AdmissionResponse::error(e)
        }
    }
}

pub fn admit_crd(req: &AdmissionRequest) -> AdmissionResponse {
    let v1beta1 = Gvr::new(
        "apiextensions.k8s.io",
        "v1beta1",
        "customresourcedefinitions",
    );
    let v1 = Gvr::new("apiextensions.k8s.io", "v1", "customresourcedefinitions");
    if req.resource != v1beta1 && req.resource != v1 {
        let e = format!(
            "expect resource to be one of [{v1beta1}, {v1}] but got {}",
            req.resource
        );
        tracing::error!("{e}");
        return AdmissionResponse::error(e);
    }
    let labels = objects::string_map(
        objects::typed(req.object.as_ref()),
        &["metadata", "labels"],
        "CustomResourceDefinition.metadata.labels",
    );
    match labels {
        Ok(l)
            if l.get("webhook-e2e-test")
                .is_some_and(|v| v == "webhook-disallow") =>
        {
            AdmissionResponse::deny(Status::message("the crd contains unwanted label"))
        }
        Ok(_) => AdmissionResponse::allow(),
        Err(e) => AdmissionResponse::error(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::webhook::configmaps::{CONFIG_MAP_PATCH_1, CONFIG_MAP_PATCH_2};
    use serde_json::json;

    fn req(op: &str, object: serde_json::Value) -> AdmissionRequest {
        AdmissionRequest {
            resource: Gvr::new("stable.example.com", "v1", "e2e-test-crds"),
            operation: op.into(),
            object: Some(object.clone()),
            old_object: (op == "DELETE").then_some(object),
            ..AdmissionRequest::default()
        }
    }

    #[test]
    fn custom_resource_data_rules() {
        let r = admit_custom_resource(&req(
            "CREATE",
            json!({"kind": "E2e", "data": {"webhook-e2e-test": "webhook-disallow"}}),
        ));
        assert_eq!(
            r.result.unwrap().reason,
            "the custom resource contains unwanted data"
        );
        let mut d = req(
            "DELETE",
            json!({"data": {"webhook-e2e-test": "webhook-nondeletable"}}),
        );
        d.object = None;
        assert_eq!(
            admit_custom_resource(&d).result.unwrap().reason,
            "the custom resource cannot be deleted because it contains unwanted key and value"
        );
        assert!(admit_custom_resource(&req("CREATE", json!({"data": {"a": "b"}}))).allowed);
    }

    #[test]
    fn custom_resource_mutation_stages() {
        let r = mutate_custom_resource(&req("CREATE", json!({"data": {"mutation-start": "yes"}})));
        assert_eq!(r.patch.as_deref(), Some(CONFIG_MAP_PATCH_1));
        let r = mutate_custom_resource(&req(
            "UPDATE",
            json!({"data": {"mutation-start": "yes", "mutation-stage-1": "yes"}}),
        ));
        assert_eq!(r.patch.as_deref(), Some(CONFIG_MAP_PATCH_2));
    }

    #[test]
    fn crd_with_unwanted_label_is_denied() {
        let mut r = req(
            "CREATE",
            json!({"metadata": {"labels": {"webhook-e2e-test": "webhook-disallow"}}}),
        );
        r.resource = Gvr::new("apiextensions.k8s.io", "v1", "customresourcedefinitions");
        let a = admit_crd(&r);
        assert!(!a.allowed);
        assert_eq!(a.result.unwrap().message, "the crd contains unwanted label");
        r.object = Some(json!({"metadata": {"labels": {"webhook-e2e-test": "ok"}}}));
        assert!(admit_crd(&r).allowed);
        r.resource = Gvr::new("", "v1", "pods");
        assert_eq!(
            admit_crd(&r).result.unwrap().message,
            "expect resource to be one of [{apiextensions.k8s.io v1beta1 customresourcedefinitions}, {apiextensions.k8s.io v1 customresourcedefinitions}] but got { v1 pods}"
        );
    }
}
