//! Carrying out a preemption (upstream's prepareCandidate and PreemptPod): each victim not already
//! terminating gets the DisruptionTarget condition (pods/status), is deleted (gracefully) and gets a
//! `Preempted` event; then pods of lower priority nominated to the same node lose their nomination,
//! since the room they waited for is now the preemptor's. The API calls sit behind a trait so the
//! sequence is tested with a recording double.

use std::future::Future;

use futures::future::join_all;
use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kiln_common::events::{EventRecorder, NORMAL};
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use serde_json::{json, Value};

use crate::pod_info::PodInfo;

/// A failed API call; a pod that is gone needs nothing more.
#[derive(Debug, Clone, PartialEq)]
pub enum ApiFailure {
    NotFound,
    Other(String),
}

impl From<kube::Error> for ApiFailure {
    fn from(e: kube::Error) -> ApiFailure {
        match e {
            kube::Error::Api(s) if s.is_not_found() => ApiFailure::NotFound,
            e => ApiFailure::Other(e.to_string()),
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum PreemptionError {
    #[error("adding the DisruptionTarget condition to victim {pod}: {message}")]
    Condition { pod: String, message: String },
    #[error("deleting victim {pod}: {message}")]
    Delete { pod: String, message: String },
    #[error("clearing the nominated node of {pod}: {message}")]
    ClearNomination { pod: String, message: String },
}

/// The API calls a preemption makes.
pub trait PreemptionApi {
    /// A strategic merge patch of pods/<name>/status.
    fn patch_status(
        &self,
        namespace: &str,
        name: &str,
        patch: &Value,
    ) -> impl Future<Output = Result<(), ApiFailure>> + Send;
    /// A graceful delete, only of the pod with this uid.
    fn delete_pod(
        &self,
        namespace: &str,
        name: &str,
        uid: &str,
    ) -> impl Future<Output = Result<(), ApiFailure>> + Send;
    /// A Normal event about `involved` (best effort).
    fn record_event(
        &self,
        involved: &ObjectReference,
        reason: &str,
        message: &str,
    ) -> impl Future<Output = ()> + Send;
}

/// One decided preemption.
#[derive(Debug, Clone)]
pub struct Plan {
    pub preemptor_uid: String,
    /// The preemptor's spec.schedulerName (the condition's message names it).
    pub scheduler_name: String,
    pub node: String,
    pub victims: Vec<PodInfo>,
    /// Pods of lower priority nominated to the node.
    pub lower_nominated: Vec<PodInfo>,
}

/// The DisruptionTarget condition upstream's preemption adds to a victim, as a status patch (a
/// strategic merge keeps the kubelet's conditions, merging by type).
pub fn disruption_condition_patch(scheduler_name: &str, now: Timestamp) -> Value {
    json!({"status": {"conditions": [{
        "type": "DisruptionTarget",
        "status": "True",
        "reason": "PreemptionByScheduler",
        "message": format!("{scheduler_name}: preempting to accommodate a higher priority pod"),
        "lastTransitionTime": Time(now),
    }]}})
}

fn reference(pod: &PodInfo) -> ObjectReference {
    let (namespace, name) = pod.namespace_and_name();
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        namespace: Some(namespace.into()),
        name: Some(name.into()),
        uid: Some(pod.uid.clone()).filter(|u| !u.is_empty()),
        ..Default::default()
    }
}

/// PreemptPod: condition, delete, event. A victim that is already gone is done.
async fn preempt_victim(
    api: &impl PreemptionApi,
    plan: &Plan,
    victim: &PodInfo,
) -> Result<(), PreemptionError> {
    let (namespace, name) = victim.namespace_and_name();
    let patch = disruption_condition_patch(&plan.scheduler_name, Timestamp::now());
    match api.patch_status(namespace, name, &patch).await {
        Ok(()) => {}
        Err(ApiFailure::NotFound) => return Ok(()),
        Err(ApiFailure::Other(message)) => {
            return Err(PreemptionError::Condition {
                pod: victim.key.clone(),
                message,
            })
        }
    }
    match api.delete_pod(namespace, name, &victim.uid).await {
        Ok(()) => {}
        Err(ApiFailure::NotFound) => return Ok(()),
        Err(ApiFailure::Other(message)) => {
            return Err(PreemptionError::Delete {
                pod: victim.key.clone(),
                message,
            })
        }
    }
    tracing::info!(preemptor = %plan.preemptor_uid, victim = %victim.key, node = %plan.node, "preempted");
    let message = format!(
        "Preempted by pod {} on node {}",
        plan.preemptor_uid, plan.node
    );
    api.record_event(&reference(victim), "Preempted", &message)
        .await;
    Ok(())
}

/// prepareCandidate: every victim not already terminating is preempted (side by side), then the
/// lower-priority nominations on the node are cleared. The first failure is returned; the others
/// are still attempted.
pub async fn execute(api: &impl PreemptionApi, plan: &Plan) -> Result<(), PreemptionError> {
    let results = join_all(
        plan.victims
            .iter()
            // Graceful deletion already started: another call would change nothing.
            .filter(|v| !v.deleting)
            .map(|v| preempt_victim(api, plan, v)),
    )
    .await;
    let mut first = results.into_iter().find_map(Result::err);
    for p in &plan.lower_nominated {
        let (namespace, name) = p.namespace_and_name();
        let patch = json!({"status": {"nominatedNodeName": null}});
        if let Err(ApiFailure::Other(message)) = api.patch_status(namespace, name, &patch).await {
            let e = PreemptionError::ClearNomination {
                pod: p.key.clone(),
                message,
            };
            // Not critical (upstream only logs it): the pod is retried anyway.
            tracing::warn!(error = %e, "clearing a nomination failed");
            first.get_or_insert(e);
        }
    }
    first.map_or(Ok(()), Err)
}

/// The API calls over kube-rs, events through the scheduler's recorder.
pub struct KubePreemptionApi<'a> {
    pub client: kube::Client,
    pub recorder: &'a EventRecorder,
}

impl PreemptionApi for KubePreemptionApi<'_> {
    async fn patch_status(
        &self,
        namespace: &str,
        name: &str,
        patch: &Value,
    ) -> Result<(), ApiFailure> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        api.patch_status(name, &PatchParams::default(), &Patch::Strategic(patch))
            .await?;
        Ok(())
    }

    async fn delete_pod(&self, namespace: &str, name: &str, uid: &str) -> Result<(), ApiFailure> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let params = DeleteParams {
            // A pod recreated under the same name (a StatefulSet's) is not the victim.
            preconditions: Some(Preconditions {
                uid: Some(uid.to_string()).filter(|u| !u.is_empty()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        api.delete(name, &params).await?;
        Ok(())
    }

    async fn record_event(&self, involved: &ObjectReference, reason: &str, message: &str) {
        if let Err(e) = self
            .recorder
            .record(involved, NORMAL, reason, message)
            .await
        {
            tracing::warn!(error = %e, "writing the {reason} event failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// Records every call; answers from `fail` by (call, pod name).
    #[derive(Default)]
    struct Recording {
        calls: Mutex<Vec<String>>,
        fail: Vec<(&'static str, &'static str, ApiFailure)>,
    }

    impl Recording {
        fn answer(&self, call: &str, name: &str) -> Result<(), ApiFailure> {
            match self.fail.iter().find(|(c, n, _)| *c == call && *n == name) {
                Some((_, _, f)) => Err(f.clone()),
                None => Ok(()),
            }
        }
        fn calls(&self) -> Vec<String> {
            self.calls.lock().unwrap().clone()
        }
    }

    impl PreemptionApi for Recording {
        async fn patch_status(
            &self,
            namespace: &str,
            name: &str,
            patch: &Value,
        ) -> Result<(), ApiFailure> {
            let mut patch = patch.clone();
            if let Some(c) = patch.pointer_mut("/status/conditions/0/lastTransitionTime") {
                *c = json!("<now>");
            }
            self.calls
                .lock()
                .unwrap()
                .push(format!("patch {namespace}/{name} {patch}"));
            self.answer("patch", name)
        }
        async fn delete_pod(
            &self,
            namespace: &str,
            name: &str,
            uid: &str,
        ) -> Result<(), ApiFailure> {
            self.calls
                .lock()
                .unwrap()
                .push(format!("delete {namespace}/{name} uid={uid}"));
            self.answer("delete", name)
        }
        async fn record_event(&self, involved: &ObjectReference, reason: &str, message: &str) {
            self.calls.lock().unwrap().push(format!(
                "event {}/{} {reason}: {message}",
                involved.namespace.as_deref().unwrap_or(""),
                involved.name.as_deref().unwrap_or("")
            ));
        }
    }

    fn info(name: &str, deleting: bool) -> PodInfo {
        let mut p = PodInfo::new(
            &serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}")},
                "spec": {"containers": []}
            }))
            .unwrap(),
        );
        p.deleting = deleting;
        p
    }

    fn plan(victims: Vec<PodInfo>, lower: Vec<PodInfo>) -> Plan {
        Plan {
            preemptor_uid: "uid-preemptor".into(),
            scheduler_name: "default-scheduler".into(),
            node: "host1".into(),
            victims,
            lower_nominated: lower,
        }
    }

    const CONDITION: &str = r#"{"status":{"conditions":[{"lastTransitionTime":"<now>","message":"default-scheduler: preempting to accommodate a higher priority pod","reason":"PreemptionByScheduler","status":"True","type":"DisruptionTarget"}]}}"#;

    #[tokio::test]
    async fn a_victim_gets_the_condition_then_is_deleted_then_an_event() {
        let api = Recording::default();
        let p = plan(
            vec![info("low", false), info("going", true)],
            vec![info("nominated-lower", false)],
        );
        execute(&api, &p).await.unwrap();
        assert_eq!(
            api.calls(),
            [
                format!("patch ns/low {CONDITION}"),
                "delete ns/low uid=uid-low".to_string(),
                "event ns/low Preempted: Preempted by pod uid-preemptor on node host1".to_string(),
                r#"patch ns/nominated-lower {"status":{"nominatedNodeName":null}}"#.to_string(),
            ],
            "a terminating victim is left alone"
        );
    }

    #[tokio::test]
    async fn a_vanished_victim_is_done_and_a_failure_is_reported() {
        let api = Recording {
            fail: vec![
                ("patch", "gone", ApiFailure::NotFound),
                ("delete", "stuck", ApiFailure::Other("forbidden".into())),
            ],
            ..Default::default()
        };
        let err = execute(
            &api,
            &plan(vec![info("gone", false), info("stuck", false)], vec![]),
        )
        .await
        .unwrap_err();
        assert_eq!(
            err,
            PreemptionError::Delete {
                pod: "ns/stuck".into(),
                message: "forbidden".into()
            }
        );
        let calls = api.calls();
        assert!(!calls.iter().any(|c| c.starts_with("delete ns/gone")));
        assert!(!calls.iter().any(|c| c.starts_with("event")), "{calls:?}");
    }

    #[test]
    fn the_condition_names_the_scheduler() {
        let patch = disruption_condition_patch("kiln-scheduler", Timestamp::now());
        assert_eq!(
            patch["status"]["conditions"][0]["message"],
            "kiln-scheduler: preempting to accommodate a higher priority pod"
        );
    }
}
