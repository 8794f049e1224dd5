//! The Deployment's status: replica counts summed over its ReplicaSets, and the Available and
//! Progressing conditions (with progressDeadlineSeconds) that `kubectl rollout status` reads.

use k8s_openapi::api::apps::v1::{Deployment, DeploymentCondition, DeploymentStatus, ReplicaSet};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use crate::deployment_plan::{max_unavailable, replicas, rs_available, rs_status};

fn condition(
    type_: &str,
    status: &str,
    reason: &str,
    message: String,
    now: Timestamp,
) -> DeploymentCondition {
    DeploymentCondition {
        type_: type_.into(),
        status: status.into(),
        reason: Some(reason.into()),
        message: Some(message),
        last_update_time: Some(Time(now)),
        last_transition_time: Some(Time(now)),
    }
}

/// Keeps the previous transition time when the status did not change, and the previous update
/// time too when nothing about the condition changed.
fn merge_condition(
    prev: Option<&DeploymentCondition>,
    mut next: DeploymentCondition,
) -> DeploymentCondition {
    if let Some(p) = prev {
        if p.status == next.status {
            next.last_transition_time = p.last_transition_time.clone();
            if p.reason == next.reason && p.message == next.message {
                next.last_update_time = p.last_update_time.clone();
            }
        }
    }
    next
}

/// What the Deployment's status should say. `progressed`: this sync changed the rollout (created or
/// scaled a set), which resets the progress deadline.
pub fn compute_status(
    d: &Deployment,
    new_rs: Option<&ReplicaSet>,
    all: &[&ReplicaSet],
    progressed: bool,
    now: Timestamp,
) -> DeploymentStatus {
    let want = replicas(d);
    let sum = |f: &dyn Fn(&ReplicaSet) -> i32| all.iter().map(|rs| f(rs)).sum::<i32>();
    let total = sum(&|rs| rs_status(rs, |s| s.replicas));
    let ready = sum(&|rs| rs_status(rs, |s| s.ready_replicas.unwrap_or(0)));
    let available = sum(&rs_available);
    let updated = new_rs.map(|rs| rs_status(rs, |s| s.replicas)).unwrap_or(0);
    let prev = d.status.clone().unwrap_or_default();
    let prev_cond = |t: &str| {
        prev.conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == t)
            .cloned()
    };
    let avail = if available >= want - max_unavailable(d) {
        condition(
            "Available",
            "True",
            "MinimumReplicasAvailable",
            "Deployment has minimum availability.".into(),
            now,
        )
    } else {
        condition(
            "Available",
            "False",
            "MinimumReplicasUnavailable",
            "Deployment does not have minimum availability.".into(),
            now,
        )
    };
    let rs_name = new_rs
        .and_then(|rs| rs.metadata.name.clone())
        .unwrap_or_default();
    let complete = new_rs.is_some() && updated == want && total == want && available == want;
    let paused = d.spec.as_ref().and_then(|s| s.paused).unwrap_or(false);
    let previous_progress = prev_cond("Progressing");
    // Upstream's DeploymentProgressing: more updated / ready / available pods, or fewer old ones.
    let old_before = prev.replicas.unwrap_or(0) - prev.updated_replicas.unwrap_or(0);
    let progressed = progressed
        || updated > prev.updated_replicas.unwrap_or(0)
        || ready > prev.ready_replicas.unwrap_or(0)
        || available > prev.available_replicas.unwrap_or(0)
        || total - updated < old_before;
    let progressing = if paused {
        condition(
            "Progressing",
            "Unknown",
            "DeploymentPaused",
            "Deployment is paused".into(),
            now,
        )
    } else if complete {
        condition(
            "Progressing",
            "True",
            "NewReplicaSetAvailable",
            format!("ReplicaSet \"{rs_name}\" has successfully progressed."),
            now,
        )
    } else if progressed || previous_progress.is_none() {
        condition(
            "Progressing",
            "True",
            "ReplicaSetUpdated",
            format!("ReplicaSet \"{rs_name}\" is progressing."),
            now,
        )
    } else {
        let p = previous_progress.clone().unwrap_or_default();
        let deadline = d
            .spec
            .as_ref()
            .and_then(|s| s.progress_deadline_seconds)
            .unwrap_or(600);
        let since = p.last_update_time.as_ref().map(|t| t.0).unwrap_or(now);
        if p.reason.as_deref() == Some("ProgressDeadlineExceeded")
            || since + SignedDuration::from_secs(deadline.into()) <= now
        {
            condition(
                "Progressing",
                "False",
                "ProgressDeadlineExceeded",
                format!("ReplicaSet \"{rs_name}\" has timed out progressing."),
                now,
            )
        } else if p.reason.as_deref() == Some("NewReplicaSetAvailable")
            || p.reason.as_deref() == Some("DeploymentPaused")
        {
            condition(
                "Progressing",
                "True",
                "ReplicaSetUpdated",
                format!("ReplicaSet \"{rs_name}\" is progressing."),
                now,
            )
        } else {
            p
        }
    };
    let conditions = vec![
        merge_condition(prev_cond("Available").as_ref(), avail),
        merge_condition(previous_progress.as_ref(), progressing),
    ];
    DeploymentStatus {
        observed_generation: d.metadata.generation,
        replicas: Some(total),
        updated_replicas: Some(updated),
        ready_replicas: Some(ready),
        available_replicas: Some(available),
        unavailable_replicas: Some((want - available).max(0)),
        conditions: Some(conditions),
        collision_count: prev.collision_count,
        terminating_replicas: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::deployment_plan::REVISION;
    use serde_json::json;

    fn deployment(replicas: i32, strategy: serde_json::Value) -> Deployment {
        serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "default", "uid": "d-uid", "generation": 4,
                "annotations": {"kubernetes.io/change-cause": "v2", REVISION: "1",
                    "kubectl.kubernetes.io/last-applied-configuration": "{}"}},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                "strategy": strategy,
                "template": {"metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "c", "image": "app:2"}]}}}
        }))
        .unwrap()
    }

    fn rs(name: &str, rev: i64, spec: i32, available: i32, created: &str) -> ReplicaSet {
        serde_json::from_value(json!({
            "metadata": {"name": name, "creationTimestamp": created,
                "annotations": {REVISION: rev.to_string()}},
            "spec": {"replicas": spec, "selector": {"matchLabels": {"app": "web"}}},
            "status": {"replicas": spec, "readyReplicas": available, "availableReplicas": available}
        }))
        .unwrap()
    }

    #[test]
    fn status_reports_completion_and_deadline() {
        let d = deployment(3, json!({}));
        let new = rs("web-new", 2, 3, 3, "2025-01-02T00:00:00Z");
        let old = rs("web-old", 1, 0, 0, "2025-01-01T00:00:00Z");
        let now: Timestamp = "2025-01-03T00:00:00Z".parse().unwrap();
        let s = compute_status(&d, Some(&new), &[&old, &new], false, now);
        assert_eq!(
            (
                s.replicas,
                s.updated_replicas,
                s.available_replicas,
                s.unavailable_replicas
            ),
            (Some(3), Some(3), Some(3), Some(0))
        );
        assert_eq!(s.observed_generation, Some(4));
        let cond = |s: &DeploymentStatus, t: &str| {
            let c = s
                .conditions
                .iter()
                .flatten()
                .find(|c| c.type_ == t)
                .unwrap()
                .clone();
            (c.status, c.reason.unwrap())
        };
        assert_eq!(
            cond(&s, "Available"),
            ("True".into(), "MinimumReplicasAvailable".into())
        );
        assert_eq!(
            cond(&s, "Progressing"),
            ("True".into(), "NewReplicaSetAvailable".into())
        );

        // Stuck: no progress for longer than progressDeadlineSeconds.
        let stuck_new = rs("web-new", 2, 1, 0, "2025-01-02T00:00:00Z");
        let stuck_old = rs("web-old", 1, 3, 3, "2025-01-01T00:00:00Z");
        let mut d = deployment(3, json!({}));
        let first = compute_status(&d, Some(&stuck_new), &[&stuck_old, &stuck_new], true, now);
        assert_eq!(
            cond(&first, "Progressing"),
            ("True".into(), "ReplicaSetUpdated".into())
        );
        d.status = Some(first);
        let later = now + SignedDuration::from_secs(601);
        let s = compute_status(
            &d,
            Some(&stuck_new),
            &[&stuck_old, &stuck_new],
            false,
            later,
        );
        assert_eq!(
            cond(&s, "Progressing"),
            ("False".into(), "ProgressDeadlineExceeded".into())
        );
        let soon = now + SignedDuration::from_secs(60);
        let s = compute_status(&d, Some(&stuck_new), &[&stuck_old, &stuck_new], false, soon);
        assert_eq!(
            cond(&s, "Progressing"),
            ("True".into(), "ReplicaSetUpdated".into())
        );
    }
}
