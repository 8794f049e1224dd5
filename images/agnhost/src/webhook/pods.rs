//! The pod handlers: `/pods` (deny unwanted labels and container names, or never answer),
//! `/mutating-pods` (add an init container), `/mutating-pods-sidecar` (add `--sidecar-image` as a
//! container) and `/pods/attach` (deny one particular `kubectl attach`).

use super::objects;
use super::review::{AdmissionRequest, AdmissionResponse, Gvr};
use super::Verdict;
use crate::kube_json::Status;

pub const PODS_INIT_CONTAINER_PATCH: &str = "[\n\t\t {\"op\":\"add\",\"path\":\"/spec/initContainers\",\"value\":[{\"image\":\"webhook-added-image\",\"name\":\"webhook-added-init-container\",\"resources\":{}}]}\n\t]";

/// Upstream formats the image in with `%v`: inserted as is, not JSON-escaped.
pub fn pods_sidecar_patch(image: &str) -> String {
    format!("[\n\t\t{{\"op\":\"add\", \"path\":\"/spec/containers/-\",\"value\":{{\"image\":\"{image}\",\"name\":\"webhook-added-sidecar\",\"resources\":{{}}}}}}\n\t]")
}

fn pods() -> Gvr {
    Gvr::new("", "v1", "pods")
}

struct Pod {
    name: String,
    labels: std::collections::BTreeMap<String, String>,
    containers: Vec<String>,
    init_containers: Vec<String>,
}

fn decode_pod(req: &AdmissionRequest) -> Result<Pod, String> {
    let o = objects::typed(req.object.as_ref());
    Ok(Pod {
        name: objects::string(o, &["metadata", "name"], "Pod.metadata.name")?,
        labels: objects::string_map(o, &["metadata", "labels"], "Pod.metadata.labels")?,
        containers: objects::container_names(o, &["spec", "containers"], "Pod.spec.containers")?,
        init_containers: objects::container_names(
            o,
            &["spec", "initContainers"],
            "Pod.spec.initContainers",
        )?,
    })
}

/// Only lets pods through whose label `webhook-e2e-test` and container names are not the unwanted
/// ones; `webhook-e2e-test: wait-forever` never gets an answer (the timeout tests).
pub fn admit_pods(req: &AdmissionRequest) -> Verdict {
    if req.resource != pods() {
        let e = format!("expect resource to be {}", pods());
        tracing::error!("{e}");
        return AdmissionResponse::error(e).into();
    }
    let pod = match decode_pod(req) {
        Ok(p) => p,
        Err(e) => return AdmissionResponse::error(e).into(),
    };
    let mut allowed = true;
    let mut msg = String::new();
    match pod.labels.get("webhook-e2e-test").map(String::as_str) {
        Some("webhook-disallow") => {
            allowed = false;
            msg.push_str("the pod contains unwanted label; ");
        }
        Some("wait-forever") => return Verdict::Hang,
        _ => {}
    }
    for c in &pod.containers {
        if c.contains("webhook-disallow") {
            allowed = false;
            msg.push_str("the pod contains unwanted container name; ");
        }
    }
    if allowed {
        AdmissionResponse::allow().into()
    } else {
        AdmissionResponse::deny(Status::message(msg.trim())).into()
    }
}

/// Upstream's `applyPodPatch`: the patch when `should_patch` says so; a request for another resource
/// gets a nil response.
fn apply_pod_patch(
    req: &AdmissionRequest,
    should_patch: impl Fn(&Pod) -> bool,
    patch: String,
) -> Verdict {
    if req.resource != pods() {
        tracing::error!("expect resource to be {}", pods());
        return Verdict::Nil;
    }
    match decode_pod(req) {
        Ok(pod) if should_patch(&pod) => AdmissionResponse::patch(patch).into(),
        Ok(_) => AdmissionResponse::allow().into(),
        Err(e) => AdmissionResponse::error(e).into(),
    }
}

pub fn mutate_pods(req: &AdmissionRequest) -> Verdict {
    apply_pod_patch(
        req,
        |pod| {
            pod.name == "webhook-to-be-mutated"
                && !pod
                    .init_containers
                    .iter()
                    .any(|c| c == "webhook-added-init-container")
        },
        PODS_INIT_CONTAINER_PATCH.into(),
    )
}

pub fn mutate_pods_sidecar(req: &AdmissionRequest, sidecar_image: &str) -> Verdict {
    if sidecar_image.is_empty() {
        return AdmissionResponse::deny(Status::failure(
            "No image specified by the sidecar-image parameter",
            500,
        ))
        .into();
    }
    apply_pod_patch(
        req,
        |pod| !pod.containers.iter().any(|c| c == "webhook-added-sidecar"),
        pods_sidecar_patch(sidecar_image),
    )
}

/// Denies `kubectl attach to-be-attached-pod -i -c=container1`, lets every other attach through.
pub fn deny_specific_attachment(req: &AdmissionRequest) -> Verdict {
    if req.name != "to-be-attached-pod" {
        return AdmissionResponse::allow().into();
    }
    if req.resource != pods() {
        let e = format!("expect resource to be {}, got {}", pods(), req.resource);
        tracing::error!("{e}");
        return AdmissionResponse::error(e).into();
    }
    if req.sub_resource != "attach" {
        let e = format!("expect subresource to be attach, got {}", req.sub_resource);
        tracing::error!("{e}");
        return AdmissionResponse::error(e).into();
    }
    let o = objects::typed(req.object.as_ref());
    let options = objects::boolean(o, &["stdin"], "PodAttachOptions.stdin").and_then(|stdin| {
        Ok((
            stdin,
            objects::string(o, &["container"], "PodAttachOptions.container")?,
        ))
    });
    match options {
        Err(e) => AdmissionResponse::error(e).into(),
        Ok((true, c)) if c == "container1" => AdmissionResponse::deny(Status::message(
            "attaching to pod 'to-be-attached-pod' is not allowed",
        ))
        .into(),
        Ok(_) => AdmissionResponse::allow().into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn pod_request(pod: Value) -> AdmissionRequest {
        AdmissionRequest {
            resource: pods(),
            operation: "CREATE".into(),
            object: Some(pod),
            ..AdmissionRequest::default()
        }
    }

    fn answer(v: Verdict) -> AdmissionResponse {
        match v {
            Verdict::Answer(r) => r,
            other => panic!("expected an answer, got {other:?}"),
        }
    }

    #[test]
    fn pods_with_unwanted_label_and_container_are_denied() {
        let r = answer(admit_pods(&pod_request(json!({
            "metadata": {"labels": {"webhook-e2e-test": "webhook-disallow"}},
            "spec": {"containers": [{"name": "webhook-disallow"}]}
        }))));
        assert!(!r.allowed);
        assert_eq!(
            r.result.unwrap().message,
            "the pod contains unwanted label; the pod contains unwanted container name;"
        );
        let r = answer(admit_pods(&pod_request(json!({
            "spec": {"containers": [{"name": "ok"}]}
        }))));
        assert_eq!(r, AdmissionResponse::allow());
    }

    #[test]
    fn wait_forever_never_answers() {
        let v = admit_pods(&pod_request(json!({
            "metadata": {"labels": {"webhook-e2e-test": "wait-forever"}}
        })));
        assert!(matches!(v, Verdict::Hang));
    }

    #[test]
    fn other_resources_are_errors_or_nil() {
        let mut req = pod_request(json!({}));
        req.resource = Gvr::new("", "v1", "configmaps");
        let r = answer(admit_pods(&req));
        assert_eq!(
            r.result.unwrap().message,
            "expect resource to be { v1 pods}"
        );
        assert!(matches!(mutate_pods(&req), Verdict::Nil));
    }

    #[test]
    fn mutating_pods_adds_the_init_container_once() {
        let r = answer(mutate_pods(&pod_request(json!({
            "metadata": {"name": "webhook-to-be-mutated"}
        }))));
        assert_eq!(r.patch.as_deref(), Some(PODS_INIT_CONTAINER_PATCH));
        let r = answer(mutate_pods(&pod_request(json!({
            "metadata": {"name": "webhook-to-be-mutated"},
            "spec": {"initContainers": [{"name": "webhook-added-init-container"}]}
        }))));
        assert_eq!(r.patch, None);
        let r = answer(mutate_pods(&pod_request(
            json!({"metadata": {"name": "other"}}),
        )));
        assert_eq!(r.patch, None);
    }

    #[test]
    fn sidecar_needs_an_image_and_is_added_once() {
        let r = answer(mutate_pods_sidecar(&pod_request(json!({})), ""));
        assert!(!r.allowed);
        let s = r.result.unwrap();
        assert_eq!(
            (s.status.as_str(), s.message.as_str(), s.code),
            (
                "Failure",
                "No image specified by the sidecar-image parameter",
                500
            )
        );
        let r = answer(mutate_pods_sidecar(&pod_request(json!({})), "img:1"));
        let patch: Value = serde_json::from_str(r.patch.as_deref().unwrap()).unwrap();
        assert_eq!(
            patch,
            json!([{"op":"add","path":"/spec/containers/-","value":{"image":"img:1","name":"webhook-added-sidecar","resources":{}}}])
        );
        let r = answer(mutate_pods_sidecar(
            &pod_request(json!({"spec": {"containers": [{"name": "webhook-added-sidecar"}]}})),
            "img:1",
        ));
        assert_eq!(r.patch, None);
    }

    #[test]
    fn attach_to_container1_with_stdin_is_denied() {
        let mut req = AdmissionRequest {
            name: "to-be-attached-pod".into(),
            resource: pods(),
            sub_resource: "attach".into(),
            object: Some(
                json!({"kind": "PodAttachOptions", "stdin": true, "container": "container1"}),
            ),
            ..AdmissionRequest::default()
        };
        let r = answer(deny_specific_attachment(&req));
        assert_eq!(
            r.result.unwrap().message,
            "attaching to pod 'to-be-attached-pod' is not allowed"
        );
        req.object = Some(json!({"stdin": false, "container": "container1"}));
        assert!(answer(deny_specific_attachment(&req)).allowed);
        req.sub_resource = "exec".into();
        assert_eq!(
            answer(deny_specific_attachment(&req))
                .result
                .unwrap()
                .message,
            "expect subresource to be attach, got exec"
        );
        req.name = "other".into();
        assert!(answer(deny_specific_attachment(&req)).allowed);
    }
}
