//! sig-apps Job entries (test/e2e/apps/job.go): completion with local restarts, the pod failure
//! policy, Indexed Jobs, adoption and release, status writes, the lifecycle through the API, and
//! deletion with its pods. Jobs are built as upstream's e2ejob.NewTestJob builds them.

use std::collections::BTreeSet;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use serde_json::{json, Value};

use super::{case, Case};
use crate::ctx::{by_label, from_json, phase, Ctx};
use crate::error::{CaseError, CaseResult};
use crate::{must, must_eq};

pub const CASES: &[Case] = &[
    case!(
        "[sig-apps] Job should run a job to completion when tasks sometimes fail and are locally restarted [Conformance]",
        "job",
        completes_after_local_restarts
    ),
    case!(
        "[sig-apps] Job should allow to use the pod failure policy on exit code to fail the job early [Conformance]",
        "job",
        pod_failure_policy_fails_early
    ),
    case!(
        "[sig-apps] Job should allow to use a pod failure policy to ignore failure matching on DisruptionTarget condition [Conformance]",
        "job",
        pod_failure_policy_ignores_disruptions
    ),
    case!(
        "[sig-apps] Job should create pods for an Indexed job with completion indexes and specified hostname [Conformance]",
        "job",
        indexed_job
    ),
    case!(
        "[sig-apps] Job should delete a job [Conformance]",
        "job",
        delete_job
    ),
    case!(
        "[sig-apps] Job should adopt matching orphans and release non-matching pods [Conformance]",
        "job",
        adopt_and_release
    ),
    case!(
        "[sig-apps] Job should apply changes to a job status [Conformance]",
        "job",
        status_changes
    ),
    case!(
        "[sig-apps] Job should manage the lifecycle of a job [Conformance]",
        "job",
        lifecycle
    ),
];

/// upstream's JobTimeout (15 minutes) is for slow clusters; kiln's pods start in seconds.
const JOB_TIMEOUT: Duration = Duration::from_secs(300);

/// e2ejob.NewTestJob: `behavior` picks the container's script; `data` is an emptyDir at /data
/// (OnFailure restarts keep it), or a hostPath when the Job is pinned to a node.
fn test_job(
    ctx: &Ctx,
    behavior: &str,
    name: &str,
    restart: &str,
    parallelism: i32,
    completions: i32,
    node: Option<&str>,
) -> Value {
    let script = match behavior {
        "notTerminate" => "sleep 1000000",
        "fail" => "exit 1",
        "succeed" => "exit 0",
        // Fail the first time, succeed when restarted with the same /data.
        "failOnce" => "if [ -r /data/foo ] ; then exit 0 ; else touch /data/foo ; exit 1 ; fi",
        // Run until evicted the first time, succeed when the index's pod starts again.
        "notTerminateOncePerIndex" => "if [ -r /data/foo-$JOB_COMPLETION_INDEX ] ; then exit 0 ; else touch /data/foo-$JOB_COMPLETION_INDEX ; sleep 1000000 ; fi",
        other => panic!("unknown job behavior {other}"),
    };
    let volume = match node {
        Some(_) => json!({"name": "data", "hostPath": {"path": format!("/tmp/job-{}", ctx.ns)}}),
        None => json!({"name": "data", "emptyDir": {}}),
    };
    let mut spec = json!({
        "restartPolicy": restart,
        "volumes": [volume],
        "containers": [{
            "name": "c",
            "image": ctx.images().busybox(),
            "command": ["sh", "-c", script],
            "volumeMounts": [{"name": "data", "mountPath": "/data"}],
        }],
    });
    if let Some(n) = node {
        spec["nodeSelector"] = json!({"kubernetes.io/hostname": n});
    }
    json!({
        "metadata": {"name": name},
        "spec": {
            "parallelism": parallelism,
            "completions": completions,
            "backoffLimit": 6,
            "template": {"metadata": {"labels": {"somekey": "somevalue"}}, "spec": spec},
        },
    })
}

async fn create(ctx: &Ctx, job: Value) -> CaseResult<Job> {
    let job: Job = from_json(job)?;
    Ok(ctx
        .api::<Job>()
        .create(&PostParams::default(), &job)
        .await?)
}

fn condition(job: &Job, type_: &str) -> Option<(String, String)> {
    job.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone().unwrap_or_default()))
}

fn summary(job: &Job) -> String {
    let s = job.status.clone().unwrap_or_default();
    format!(
        "active {:?} succeeded {:?} failed {:?} conditions {:?}",
        s.active,
        s.succeeded,
        s.failed,
        s.conditions
            .unwrap_or_default()
            .iter()
            .map(|c| format!(
                "{}={}({})",
                c.type_,
                c.status,
                c.reason.clone().unwrap_or_default()
            ))
            .collect::<Vec<_>>()
    )
}

/// e2ejob.WaitForJobComplete: the Complete condition with `reason`, and `succeeded == completions`.
async fn wait_complete(ctx: &Ctx, name: &str, reason: &str, completions: i32) -> CaseResult<Job> {
    let jobs: Api<Job> = ctx.api();
    ctx.wait(&format!("job {name} Complete"), JOB_TIMEOUT, || async {
        let j = jobs.get(name).await?;
        let done = condition(&j, "Complete").is_some_and(|(s, r)| s == "True" && r == reason);
        let succeeded = j.status.as_ref().and_then(|s| s.succeeded).unwrap_or(0);
        if condition(&j, "Failed").is_some_and(|(s, _)| s == "True") {
            return Err(CaseError::Failed(format!(
                "job {name} failed: {}",
                summary(&j)
            )));
        }
        Ok(if done && succeeded == completions {
            Ok(j)
        } else {
            Err(summary(&j))
        })
    })
    .await
}

/// e2ejob.WaitForJobCondition / WaitForJobFailed.
async fn wait_condition(ctx: &Ctx, name: &str, type_: &str) -> CaseResult<Job> {
    let jobs: Api<Job> = ctx.api();
    ctx.wait(&format!("job {name} {type_}"), JOB_TIMEOUT, || async {
        let j = jobs.get(name).await?;
        Ok(if condition(&j, type_).is_some_and(|(s, _)| s == "True") {
            Ok(j)
        } else {
            Err(summary(&j))
        })
    })
    .await
}

/// The Job's pods, by the job-name label the Job's generated selector puts on them.
async fn job_pods(ctx: &Ctx, name: &str) -> CaseResult<Vec<Pod>> {
    Ok(ctx
        .api::<Pod>()
        .list(&by_label("batch.kubernetes.io/job-name", name))
        .await?
        .items)
}

/// e2ejob.WaitForJobPodsRunning: exactly `count` of the Job's pods Running.
async fn wait_pods_running(ctx: &Ctx, name: &str, count: usize) -> CaseResult<Vec<Pod>> {
    ctx.wait(
        &format!("{count} running pods of job {name}"),
        JOB_TIMEOUT,
        || async {
            let running: Vec<Pod> = job_pods(ctx, name)
                .await?
                .into_iter()
                .filter(|p| phase(p) == "Running")
                .collect();
            Ok(if running.len() == count {
                Ok(running)
            } else {
                Err(format!("{} running", running.len()))
            })
        },
    )
    .await
}

async fn wait_pods_gone(ctx: &Ctx, name: &str) -> CaseResult {
    ctx.wait(
        &format!("the pods of job {name} gone"),
        JOB_TIMEOUT,
        || async {
            let left = job_pods(ctx, name).await?;
            Ok(if left.is_empty() {
                Ok(())
            } else {
                Err(format!("{} left", left.len()))
            })
        },
    )
    .await
}

/// Jobs, completion after task failure: each pod fails once and is restarted in place
/// (restartPolicy OnFailure, its emptyDir kept); the Job MUST complete (4 completions, 2 at a time).
async fn completes_after_local_restarts(ctx: &Ctx) -> CaseResult {
    let job = create(
        ctx,
        test_job(ctx, "failOnce", "fail-once-local", "OnFailure", 2, 4, None),
    )
    .await?;
    let name = job.metadata.name.unwrap_or_default();
    wait_complete(ctx, &name, "CompletionsReached", 4).await?;
    Ok(())
}

/// Pod failure policy, FailJob on exit code: a pod of a Job pinned to one node exits 1 the first
/// time; the rule matching exit code 1 MUST fail the Job (before backoffLimit is reached).
async fn pod_failure_policy_fails_early(ctx: &Ctx) -> CaseResult {
    let node = ctx.schedulable_node().await?;
    let mut job = test_job(
        ctx,
        "failOnce",
        "pod-failure-failjob",
        "Never",
        2,
        4,
        Some(&node),
    );
    job["spec"]["podFailurePolicy"] = json!({"rules": [
        {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [1]}}]});
    let job = create(ctx, job).await?;
    let name = job.metadata.name.unwrap_or_default();
    let failed = wait_condition(ctx, &name, "Failed").await?;
    must_eq!(
        condition(&failed, "Failed").map(|c| c.1),
        Some("PodFailurePolicy".to_string()),
        "the Failed condition's reason"
    );
    must!(
        failed.status.as_ref().and_then(|s| s.failed).unwrap_or(0) <= 2,
        "the Job failed early, not after backoffLimit: {}",
        summary(&failed)
    );
    Ok(())
}

/// Pod failure policy, Ignore on DisruptionTarget: an Indexed Job of 3 pinned to one node, each pod
/// running until evicted once; after all 3 are evicted (each MUST be gone), the failures MUST be
/// ignored (backoffLimit 2 would otherwise fail the Job) and the Job MUST complete.
async fn pod_failure_policy_ignores_disruptions(ctx: &Ctx) -> CaseResult {
    let node = ctx.schedulable_node().await?;
    let mut job = test_job(
        ctx,
        "notTerminateOncePerIndex",
        "evicted-pod-ignore-on-disruption-condition",
        "Never",
        3,
        3,
        Some(&node),
    );
    job["spec"]["backoffLimit"] = json!(2);
    job["spec"]["completionMode"] = json!("Indexed");
    job["spec"]["podFailurePolicy"] = json!({"rules": [{"action": "Ignore",
        "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}]});
    let job = create(ctx, job).await?;
    let name = job.metadata.name.unwrap_or_default();
    let jobs: Api<Job> = ctx.api();
    ctx.wait(
        &format!("3 ready pods of job {name}"),
        JOB_TIMEOUT,
        || async {
            let j = jobs.get(&name).await?;
            let ready = j.status.as_ref().and_then(|s| s.ready).unwrap_or(0);
            Ok(if ready == 3 { Ok(()) } else { Err(summary(&j)) })
        },
    )
    .await?;
    let running = wait_pods_running(ctx, &name, 3).await?;
    // No budget covers these pods: every eviction is allowed at once.
    let pods: Api<Pod> = ctx.api();
    for p in &running {
        let pod = p.metadata.name.clone().unwrap_or_default();
        pods.evict(&pod, &kube::api::EvictParams::default()).await?;
    }
    for p in &running {
        let pod = p.metadata.name.clone().unwrap_or_default();
        ctx.wait(&format!("evicted pod {pod} gone"), JOB_TIMEOUT, || async {
            Ok(match pods.get_opt(&pod).await? {
                None => Ok(()),
                Some(p) => Err(crate::ctx::describe_status(&p)),
            })
        })
        .await?;
    }
    wait_complete(ctx, &name, "CompletionsReached", 3).await?;
    Ok(())
}

/// Indexed Job: 4 completions, 2 at a time; it MUST complete, and its succeeded pods MUST carry the
/// completion indexes 0..3 and the hostnames `<job>-<index>`.
async fn indexed_job(ctx: &Ctx) -> CaseResult {
    let mut job = test_job(ctx, "succeed", "indexed-job", "Never", 2, 4, None);
    job["spec"]["completionMode"] = json!("Indexed");
    let job = create(ctx, job).await?;
    let name = job.metadata.name.unwrap_or_default();
    let done = wait_complete(ctx, &name, "CompletionsReached", 4).await?;
    must_eq!(
        done.status
            .as_ref()
            .and_then(|s| s.completed_indexes.clone()),
        Some("0-3".to_string()),
        "status.completedIndexes"
    );
    let mut indexes = BTreeSet::new();
    for p in job_pods(ctx, &name).await? {
        if phase(&p) != "Succeeded" {
            continue;
        }
        let ix: i32 = p
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("batch.kubernetes.io/job-completion-index"))
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| CaseError::Failed("a succeeded pod without an index".into()))?;
        must_eq!(
            p.spec.as_ref().and_then(|s| s.hostname.clone()),
            Some(format!("{name}-{ix}")),
            "hostname of the pod with index {ix}"
        );
        indexes.insert(ix);
    }
    must_eq!(
        indexes.into_iter().collect::<Vec<_>>(),
        vec![0, 1, 2, 3],
        "the succeeded pods' completion indexes"
    );
    Ok(())
}

/// Jobs, active pods, graceful termination: active pods MUST equal parallelism; after the Job is
/// deleted (and garbage collection ran) it MUST be gone, its pods with it.
async fn delete_job(ctx: &Ctx) -> CaseResult {
    let job = create(
        ctx,
        test_job(ctx, "notTerminate", "foo", "Never", 2, 4, None),
    )
    .await?;
    let name = job.metadata.name.unwrap_or_default();
    wait_pods_running(ctx, &name, 2).await?;
    ctx.api::<Job>()
        .delete(&name, &DeleteParams::background())
        .await?;
    wait_pods_gone(ctx, &name).await?;
    match ctx.api::<Job>().get_opt(&name).await? {
        None => Ok(()),
        Some(j) => Err(CaseError::Failed(format!(
            "job {name} still exists: {}",
            summary(&j)
        ))),
    }
}

/// Jobs, orphan pods, re-adoption: a pod whose owner reference is removed MUST be adopted again;
/// a pod whose labels are removed MUST be released.
async fn adopt_and_release(ctx: &Ctx) -> CaseResult {
    let job = create(
        ctx,
        test_job(ctx, "notTerminate", "adopt-release", "Never", 2, 4, None),
    )
    .await?;
    let name = job.metadata.name.clone().unwrap_or_default();
    let uid = job.metadata.uid.clone().unwrap_or_default();
    let pods = wait_pods_running(ctx, &name, 2).await?;
    let pod = pods[0].metadata.name.clone().unwrap_or_default();
    let api: Api<Pod> = ctx.api();
    let controller = |p: &Pod| {
        p.metadata
            .owner_references
            .iter()
            .flatten()
            .find(|r| r.controller == Some(true))
            .map(|r| (r.kind.clone(), r.name.clone(), r.uid.clone()))
    };
    api.patch(
        &pod,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"ownerReferences": null}})),
    )
    .await?;
    ctx.wait(&format!("pod {pod} re-adopted"), JOB_TIMEOUT, || async {
        let p = api.get(&pod).await?;
        match controller(&p) {
            None => Ok(Err("no controller yet".to_string())),
            Some(r) if r == ("Job".into(), name.clone(), uid.clone()) => Ok(Ok(())),
            Some(r) => Err(CaseError::Failed(format!(
                "pod has wrong controllerRef {r:?}"
            ))),
        }
    })
    .await?;
    api.patch(
        &pod,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": null}})),
    )
    .await?;
    ctx.wait(&format!("pod {pod} released"), JOB_TIMEOUT, || async {
        let p = api.get(&pod).await?;
        Ok(match controller(&p) {
            None => Ok(()),
            Some(r) => Err(format!("still controlled by {r:?}")),
        })
    })
    .await
}

/// Jobs, apply changes to status: patching /status (a custom condition and an annotation) MUST
/// succeed and show both; replacing /status MUST succeed and show the new time; reading /status MUST
/// return the Job (same uid).
async fn status_changes(ctx: &Ctx) -> CaseResult {
    let job = create(
        ctx,
        test_job(
            ctx,
            "notTerminate",
            "suspend-false-to-true",
            "Never",
            2,
            4,
            None,
        ),
    )
    .await?;
    let name = job.metadata.name.clone().unwrap_or_default();
    wait_pods_running(ctx, &name, 2).await?;
    let jobs: Api<Job> = ctx.api();
    let now1 = rfc3339_now();
    let patched = jobs
        .patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({
                "metadata": {"annotations": {"patchedstatus": "true"}},
                "status": {"conditions": [{"type": "CustomConditionType", "status": "True",
                    "lastTransitionTime": now1}]},
            })),
        )
        .await?;
    must_eq!(
        custom_condition_time(&patched),
        Some(now1.clone()),
        "the patched condition's lastTransitionTime"
    );
    must_eq!(
        patched
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("patchedstatus").cloned()),
        Some("true".to_string()),
        "the patched annotation"
    );
    // Upstream retries on conflict: the Job controller writes this status too.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let now2 = rfc3339_now();
    let mut updated = None;
    for _ in 0..10 {
        let mut current = jobs.get(&name).await?;
        let Some(c) = current
            .status
            .as_mut()
            .and_then(|s| s.conditions.as_mut())
            .and_then(|l| l.iter_mut().find(|c| c.type_ == "CustomConditionType"))
        else {
            return Err(CaseError::Failed("the custom condition is gone".into()));
        };
        c.last_transition_time = Some(from_json(json!(now2))?);
        match jobs
            .replace_status(&name, &PostParams::default(), &current)
            .await
        {
            Ok(j) => {
                updated = Some(j);
                break;
            }
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            Err(e) => return Err(e.into()),
        }
    }
    let updated =
        updated.ok_or_else(|| CaseError::Failed("update /status kept conflicting".into()))?;
    must_eq!(
        custom_condition_time(&updated),
        Some(now2),
        "the updated condition's lastTransitionTime"
    );
    let raw = ctx
        .kubectl(&[
            "get",
            "--raw",
            &format!("/apis/batch/v1/namespaces/{}/jobs/{name}/status", ctx.ns),
        ])
        .await?;
    let got: Value = serde_json::from_str(&raw).map_err(|source| CaseError::Json {
        what: "the Job read through /status".into(),
        source,
    })?;
    must_eq!(
        got["metadata"]["uid"].as_str(),
        job.metadata.uid.as_deref(),
        "the uid read through /status"
    );
    Ok(())
}

fn rfc3339_now() -> String {
    let now = k8s_openapi::jiff::Timestamp::now();
    k8s_openapi::jiff::Timestamp::from_second(now.as_second())
        .unwrap_or(now)
        .to_string()
}

fn custom_condition_time(job: &Job) -> Option<String> {
    job.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "CustomConditionType")?
        .last_transition_time
        .as_ref()
        .map(|t| t.0.to_string())
}

/// Jobs, manage lifecycle: a suspended Job MUST be created; a label patch MUST succeed and be
/// seen by a watch; an update resuming it with an annotation MUST succeed and be seen; a list by
/// label across namespaces MUST find exactly it; it MUST complete; deleting the collection by label
/// MUST succeed, the watch MUST see it deleted and a list MUST then find none.
async fn lifecycle(ctx: &Ctx) -> CaseResult {
    let suffix: String = ctx.ns.rsplit('-').next().unwrap_or("x").to_string();
    let name = format!("e2e-{suffix}");
    let selector = format!("e2e-job-label={name}");
    let jobs: Api<Job> = ctx.api();
    let all: Api<Job> = Api::all(ctx.client.clone());
    let before = jobs.list(&ListParams::default().labels(&selector)).await?;
    let rv = before.metadata.resource_version.clone().unwrap_or_default();
    let mut watch = jobs
        .watch(&WatchParams::default().labels(&selector), &rv)
        .await?
        .boxed();

    let mut spec = test_job(ctx, "succeed", &name, "Never", 2, 4, None);
    spec["metadata"]["labels"] = json!({"e2e-job-label": name});
    spec["spec"]["suspend"] = json!(true);
    let job = create(ctx, spec).await?;
    must!(
        job.metadata
            .resource_version
            .as_deref()
            .is_some_and(|v| !v.is_empty()),
        "the created Job has a resourceVersion"
    );
    let patched = jobs
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Strategic(json!({"metadata": {"labels": {name.clone(): "patched"}}})),
        )
        .await?;
    must!(
        rv_newer(&job, &patched),
        "the patched Job has a newer resourceVersion"
    );
    must_eq!(
        patched
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(&name).cloned()),
        Some("patched".to_string()),
        "the patched label"
    );
    saw(&mut watch, "MODIFIED", |j| {
        j.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(&name))
            .map(String::as_str)
            == Some("patched")
    })
    .await?;

    let mut updated = None;
    for _ in 0..10 {
        let mut current = jobs.get(&name).await?;
        if let Some(s) = current.spec.as_mut() {
            s.suspend = Some(false);
        }
        current
            .metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert("updated".into(), "true".into());
        match jobs.replace(&name, &PostParams::default(), &current).await {
            Ok(j) => {
                updated = Some(j);
                break;
            }
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            Err(e) => return Err(e.into()),
        }
    }
    let updated = updated.ok_or_else(|| CaseError::Failed("update kept conflicting".into()))?;
    must_eq!(
        updated
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("updated").cloned()),
        Some("true".to_string()),
        "the updated annotation"
    );
    saw(&mut watch, "MODIFIED", |j| {
        j.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("updated"))
            .map(String::as_str)
            == Some("true")
    })
    .await?;
    let listed = all.list(&ListParams::default().labels(&selector)).await?;
    must_eq!(
        listed.items.len(),
        1,
        "Jobs listed by label in all namespaces"
    );

    wait_complete(ctx, &name, "CompletionsReached", 4).await?;
    jobs.delete_collection(
        &DeleteParams::background(),
        &ListParams::default().labels(&selector),
    )
    .await?;
    saw(&mut watch, "DELETED", |j| {
        j.metadata.name.as_deref() == Some(name.as_str())
    })
    .await?;
    let left = all.list(&ListParams::default().labels(&selector)).await?;
    must!(
        left.items.is_empty(),
        "Jobs left after the collection delete: {}",
        left.items.len()
    );
    Ok(())
}

fn rv_newer(old: &Job, new: &Job) -> bool {
    let rv = |j: &Job| {
        j.metadata
            .resource_version
            .as_deref()
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    rv(new) > rv(old)
}

type JobWatch = futures::stream::BoxStream<'static, kube::Result<WatchEvent<Job>>>;

/// Read the watch until an event of `kind` whose object satisfies `pred` (upstream's
/// waitForJobEvent, which waits up to PodStartShort).
async fn saw(watch: &mut JobWatch, kind: &str, pred: impl Fn(&Job) -> bool) -> CaseResult {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    let mut seen = Vec::new();
    loop {
        let next = tokio::time::timeout_at(deadline, watch.try_next()).await;
        let event = match next {
            Err(_) => {
                return Err(CaseError::Failed(format!(
                    "watch saw no {kind} event matching; saw {seen:?}"
                )))
            }
            Ok(r) => r?,
        };
        let Some(event) = event else {
            return Err(CaseError::Failed(format!(
                "the watch ended before a {kind} event"
            )));
        };
        let (got, job) = match event {
            WatchEvent::Added(j) => ("ADDED", j),
            WatchEvent::Modified(j) => ("MODIFIED", j),
            WatchEvent::Deleted(j) => ("DELETED", j),
            _ => continue,
        };
        if got == kind && pred(&job) {
            return Ok(());
        }
        seen.push(got);
    }
}
