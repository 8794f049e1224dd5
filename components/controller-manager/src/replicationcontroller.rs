//! replicationcontroller: core/v1 ReplicationControllers kept by the replicaset loop
//! (`replicaset::run_for`), as upstream's NewReplicationManager wraps its ReplicaSetController. The
//! only differences are the kind in owner references and events, and the selector: a plain label
//! map, matched as a LabelSelector's matchLabels.

use k8s_openapi::api::apps::v1::ReplicaSetStatus;
use k8s_openapi::api::core::v1::{PodTemplateSpec, ReplicationController};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use crate::context::Context;
use crate::replicaset::{run_for, ReplicaOwner};

impl ReplicaOwner for ReplicationController {
    const API_VERSION: &'static str = "v1";
    const KIND: &'static str = "ReplicationController";
    fn replicas(&self) -> i32 {
        self.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
    }
    fn min_ready_seconds(&self) -> i32 {
        self.spec
            .as_ref()
            .and_then(|s| s.min_ready_seconds)
            .unwrap_or(0)
    }
    /// None (owns nothing) without a spec; an empty map selects every pod, as upstream's
    /// labels.Set.AsSelectorPreValidated does (validation never lets one through).
    fn selector(&self) -> Option<LabelSelector> {
        let spec = self.spec.as_ref()?;
        Some(LabelSelector {
            match_labels: spec.selector.clone(),
            match_expressions: None,
        })
    }
    fn template(&self) -> Option<PodTemplateSpec> {
        self.spec.as_ref().and_then(|s| s.template.clone())
    }
    /// ReplicationControllerStatus has exactly ReplicaSetStatus's fields (conditions included).
    fn replica_status(&self) -> Option<ReplicaSetStatus> {
        let status = serde_json::to_value(self.status.as_ref()?).ok()?;
        serde_json::from_value(status).ok()
    }
}

pub async fn run(ctx: Context) {
    run_for::<ReplicationController>(ctx).await
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use k8s_openapi::api::core::v1::Pod;
    use k8s_openapi::jiff::Timestamp;
    use serde_json::json;

    use crate::replicaset::{claim_pods, compute_status, diff, new_pod, ManageFailure};

    use super::*;

    fn rc() -> ReplicationController {
        serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "default", "uid": "rc-uid", "generation": 3},
            "spec": {"replicas": 2, "selector": {"name": "web"},
                "template": {"metadata": {"labels": {"name": "web"}},
                    "spec": {"containers": [{"name": "c", "image": "app:1"}]}}},
            "status": {"replicas": 0}
        }))
        .unwrap()
    }

    fn pod(name: &str, labels: serde_json::Value) -> Arc<Pod> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "default", "labels": labels},
                "spec": {"containers": []},
                "status": {"phase": "Running"}
            }))
            .unwrap(),
        )
    }

    #[test]
    fn the_plain_map_selector_claims_and_pods_are_owned_by_the_rc() {
        let rc = rc();
        let pods = [
            pod("match", json!({"name": "web", "extra": "x"})),
            pod("other", json!({"name": "db"})),
        ];
        let claim = claim_pods(&rc.metadata, rc.selector().as_ref(), &pods);
        assert_eq!(claim.adopt.len(), 1);
        assert_eq!(claim.adopt[0].metadata.name.as_deref(), Some("match"));
        let p = new_pod(&rc);
        let owner = &p.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (
                owner.api_version.as_str(),
                owner.kind.as_str(),
                owner.uid.as_str()
            ),
            ("v1", "ReplicationController", "rc-uid")
        );
        assert_eq!(p.metadata.generate_name.as_deref(), Some("web-"));
        assert_eq!(diff(&rc, 0), 2);
        let no_spec = ReplicationController::default();
        assert!(no_spec.selector().is_none());
    }

    #[test]
    fn status_round_trips_through_the_replicaset_form() {
        let mut rc = rc();
        let f = ManageFailure {
            reason: "FailedCreate",
            message: "pods \"web-x\" is forbidden: exceeded quota".into(),
        };
        let s = compute_status(&rc, &[], Some(&f), Timestamp::now());
        assert_eq!(s.observed_generation, Some(3));
        rc.status = serde_json::from_value(serde_json::to_value(&s).unwrap()).unwrap();
        let cond = &rc.status.as_ref().unwrap().conditions.as_ref().unwrap()[0];
        assert_eq!(
            (cond.type_.as_str(), cond.reason.as_deref()),
            ("ReplicaFailure", Some("FailedCreate"))
        );
        // Times are stored to the second, so compare the stored forms.
        assert_eq!(
            serde_json::to_value(rc.replica_status()).unwrap(),
            serde_json::to_value(Some(&s)).unwrap()
        );
    }
}
