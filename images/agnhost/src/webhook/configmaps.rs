//! `/configmaps` (deny an unwanted key and value, or deleting a configmap marked nondeletable) and
//! `/mutating-configmaps` (the two-stage mutation the webhook ordering tests chain).

use std::collections::BTreeMap;

use super::objects;
use super::review::{AdmissionRequest, AdmissionResponse, Gvr};
use super::Verdict;
use crate::kube_json::Status;

pub const CONFIG_MAP_PATCH_1: &str =
    "[\n         { \"op\": \"add\", \"path\": \"/data/mutation-stage-1\", \"value\": \"yes\" }\n     ]";
pub const CONFIG_MAP_PATCH_2: &str =
    "[\n         { \"op\": \"add\", \"path\": \"/data/mutation-stage-2\", \"value\": \"yes\" }\n     ]";

fn configmaps() -> Gvr {
    Gvr::new("", "v1", "configmaps")
}

/// The verdict on `data` shared by configmaps and custom resources: `webhook-disallow` on CREATE
/// and UPDATE, `webhook-nondeletable` on DELETE; each with its own reason.
pub fn judge_data(
    operation: &str,
    data: &BTreeMap<String, String>,
    unwanted: &str,
    nondeletable: &str,
) -> AdmissionResponse {
    match (data.get("webhook-e2e-test").map(String::as_str), operation) {
        (Some("webhook-disallow"), "CREATE" | "UPDATE") => {
            AdmissionResponse::deny(Status::reason(unwanted))
        }
        (Some("webhook-nondeletable"), "DELETE") => {
            AdmissionResponse::deny(Status::reason(nondeletable))
        }
        _ => AdmissionResponse::allow(),
    }
}

/// Stage 1 when `mutation-start: yes`, stage 2 when stage 1 is there (the later one wins, as
/// upstream overwrites the patch).
pub fn stage_patch(data: &BTreeMap<String, String>) -> AdmissionResponse {
    let is_yes = |k: &str| data.get(k).is_some_and(|v| v == "yes");
    if is_yes("mutation-stage-1") {
        AdmissionResponse::patch(CONFIG_MAP_PATCH_2)
    } else if is_yes("mutation-start") {
        AdmissionResponse::patch(CONFIG_MAP_PATCH_1)
    } else {
        AdmissionResponse::allow()
    }
}

fn data(raw: Option<&serde_json::Value>) -> Result<BTreeMap<String, String>, String> {
    objects::string_map(objects::typed(raw), &["data"], "ConfigMap.data")
}

pub fn admit_configmaps(req: &AdmissionRequest) -> Verdict {
    if req.resource != configmaps() {
        tracing::error!("expect resource to be {}", configmaps());
        return Verdict::Nil;
    }
    match data(req.object_or_old()) {
        Ok(d) => judge_data(
            &req.operation,
            &d,
            "the configmap contains unwanted key and value",
            "the configmap cannot be deleted because it contains unwanted key and value",
        )
        .into(),
        Err(e) => AdmissionResponse::error(e).into(),
    }
}

pub fn mutate_configmaps(req: &AdmissionRequest) -> Verdict {
    if req.resource != configmaps() {
        tracing::error!("expect resource to be {}", configmaps());
        return Verdict::Nil;
    }
    match data(req.object.as_ref()) {
        Ok(d) => stage_patch(&d).into(),
        Err(e) => AdmissionResponse::error(e).into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn req(op: &str, object: serde_json::Value) -> AdmissionRequest {
        let mut r = AdmissionRequest {
            resource: configmaps(),
            operation: op.into(),
            ..AdmissionRequest::default()
        };
        if op == "DELETE" {
            r.old_object = Some(object);
        } else {
            r.object = Some(object);
        }
        r
    }

    fn answer(v: Verdict) -> AdmissionResponse {
        match v {
            Verdict::Answer(r) => r,
            other => panic!("expected an answer, got {other:?}"),
        }
    }

    #[test]
    fn unwanted_data_is_denied_with_upstreams_reason() {
        let cm = json!({"data": {"webhook-e2e-test": "webhook-disallow"}});
        let r = answer(admit_configmaps(&req("CREATE", cm.clone())));
        assert!(!r.allowed);
        assert_eq!(
            r.result.unwrap().reason,
            "the configmap contains unwanted key and value"
        );
        assert!(answer(admit_configmaps(&req("DELETE", cm))).allowed);
        let cm = json!({"data": {"webhook-e2e-test": "webhook-nondeletable"}});
        let r = answer(admit_configmaps(&req("DELETE", cm.clone())));
        assert_eq!(
            r.result.unwrap().reason,
            "the configmap cannot be deleted because it contains unwanted key and value"
        );
        assert!(answer(admit_configmaps(&req("UPDATE", cm))).allowed);
    }

    #[test]
    fn mutation_goes_in_stages() {
        let r = answer(mutate_configmaps(&req(
            "CREATE",
            json!({"data": {"mutation-start": "yes"}}),
        )));
        assert_eq!(r.patch.as_deref(), Some(CONFIG_MAP_PATCH_1));
        let r = answer(mutate_configmaps(&req(
            "CREATE",
            json!({"data": {"mutation-start": "yes", "mutation-stage-1": "yes"}}),
        )));
        assert_eq!(r.patch.as_deref(), Some(CONFIG_MAP_PATCH_2));
        let r = answer(mutate_configmaps(&req("CREATE", json!({"data": {}}))));
        assert_eq!(r, AdmissionResponse::allow());
    }

    #[test]
    fn another_resource_gets_nil() {
        let mut r = req("CREATE", json!({}));
        r.resource = Gvr::new("", "v1", "pods");
        assert!(matches!(admit_configmaps(&r), Verdict::Nil));
        assert!(matches!(mutate_configmaps(&r), Verdict::Nil));
    }
}
