//! ttl-after-finished: deletes a finished Job `ttlSecondsAfterFinished` after its Complete or
//! Failed condition (upstream's ttlafterfinished controller), its pods with it. The decision is
//! re-made on a fresh read just before the delete, and the delete carries that read's
//! resourceVersion: a Job whose TTL was raised meanwhile is kept.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Preconditions, PropagationPolicy};
use kube::runtime::controller::{self, applier, Action, ReconcileRequest};
use kube::runtime::reflector::ObjectRef;

use crate::context::{spawn_reflector_with_changes, Context};
use crate::job_plan::{is_finished, ttl_expires_at};

#[derive(Debug, thiserror::Error)]
pub enum TtlError {
    #[error("{action} for Job {job}: {source}")]
    Api {
        action: &'static str,
        job: String,
        source: kube::Error,
    },
}

/// When the Job is due, if it is finished and has a TTL.
pub fn due_at(job: &Job) -> Option<Timestamp> {
    if job.metadata.deletion_timestamp.is_some() || !is_finished(job) {
        return None;
    }
    ttl_expires_at(job)
}

pub async fn run(ctx: Context) {
    let (jobs, changes, _task) = spawn_reflector_with_changes::<Job>(&ctx.client);
    if jobs.wait_until_ready().await.is_err() {
        return;
    }
    let triggers = changes.map(|j: Job| {
        Ok::<_, kube::runtime::watcher::Error>(ReconcileRequest::from(ObjectRef::from_obj(&j)))
    });
    applier(
        |job, ctx| Box::pin(reconcile(job, ctx)),
        |_, err: &TtlError, _| {
            tracing::warn!(error = %err, "ttl-after-finished");
            Action::requeue(Duration::from_secs(5))
        },
        Arc::new(ctx),
        jobs,
        triggers,
        controller::Config::default(),
    )
    .for_each(|_| async {})
    .await;
}

async fn reconcile(job: Arc<Job>, ctx: Arc<Context>) -> Result<Action, TtlError> {
    let Some(at) = due_at(&job) else {
        return Ok(Action::await_change());
    };
    let now = Timestamp::now();
    if at > now {
        let wait = Duration::try_from(at.duration_since(now)).unwrap_or(Duration::ZERO);
        return Ok(Action::requeue(wait + Duration::from_millis(100)));
    }
    let ns = job.metadata.namespace.clone().unwrap_or_default();
    let name = job.metadata.name.clone().unwrap_or_default();
    let key = format!("{ns}/{name}");
    let api: Api<Job> = Api::namespaced(ctx.client.clone(), &ns);
    let fresh = match api.get_opt(&name).await {
        Ok(Some(j)) => j,
        Ok(None) => return Ok(Action::await_change()),
        Err(source) => {
            return Err(TtlError::Api {
                action: "reading",
                job: key,
                source,
            })
        }
    };
    if due_at(&fresh).is_none_or(|t| t > now) {
        return Ok(Action::requeue(Duration::from_secs(1)));
    }
    let dp = DeleteParams {
        // Foreground upstream; kiln's garbage collector deletes the pods in the background.
        propagation_policy: Some(PropagationPolicy::Background),
        preconditions: Some(Preconditions {
            uid: fresh.metadata.uid.clone(),
            resource_version: fresh.metadata.resource_version.clone(),
        }),
        ..Default::default()
    };
    match api.delete(&name, &dp).await {
        Ok(_) => {
            tracing::info!(job = %key, "deleted a finished job whose TTL expired");
            Ok(Action::await_change())
        }
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {
            Ok(Action::requeue(Duration::from_secs(1)))
        }
        Err(source) => Err(TtlError::Api {
            action: "deleting",
            job: key,
            source,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn job(status: serde_json::Value, ttl: Option<i32>) -> Job {
        serde_json::from_value(json!({
            "metadata": {"name": "j", "namespace": "default"},
            "spec": {"ttlSecondsAfterFinished": ttl, "template": {}},
            "status": status,
        }))
        .unwrap()
    }

    #[test]
    fn due_after_the_terminal_condition_plus_ttl() {
        let done = json!({"conditions": [
            {"type": "SuccessCriteriaMet", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"},
            {"type": "Complete", "status": "True", "lastTransitionTime": "2026-01-01T00:00:05Z"}]});
        let at = due_at(&job(done.clone(), Some(10))).unwrap();
        assert_eq!(at.to_string(), "2026-01-01T00:00:15Z");
        assert!(due_at(&job(done, None)).is_none());
        let running = json!({"conditions": [{"type": "SuccessCriteriaMet", "status": "True",
            "lastTransitionTime": "2026-01-01T00:00:00Z"}]});
        assert!(due_at(&job(running, Some(0))).is_none());
        let failed = json!({"conditions": [{"type": "Failed", "status": "True",
            "lastTransitionTime": "2026-01-01T00:01:00Z"}]});
        assert_eq!(
            due_at(&job(failed, Some(0))).unwrap().to_string(),
            "2026-01-01T00:01:00Z"
        );
    }
}
