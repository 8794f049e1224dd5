//! sig-apps CronJob entries, from upstream's test/e2e/apps/cronjob.go: the concurrency policies
//! (Allow, Forbid, Replace), suspension, and the API operations on cronjobs and cronjobs/status.
//! The cronjobs are upstream's newTestCronJob: every minute, one busybox container, restart
//! OnFailure. Each case restates the entry's MUSTs in its doc comment.

use std::time::{Duration, Instant};

use futures::TryStreamExt;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use serde_json::json;

use super::api_ops::update_with_retry;
use super::{case, Case};
use crate::ctx::{by_label, from_json, Ctx};
use crate::error::{CaseError, CaseResult};
use crate::{must, must_eq};

pub const CASES: &[Case] = &[
    case!(
        "[sig-apps] CronJob should schedule multiple jobs concurrently [Conformance]",
        "cronjob",
        allow_concurrent
    ),
    case!(
        "[sig-apps] CronJob should not schedule jobs when suspended [Slow] [Conformance]",
        "cronjob",
        suspended
    ),
    case!(
        "[sig-apps] CronJob should not schedule new jobs when ForbidConcurrent [Slow] [Conformance]",
        "cronjob",
        forbid_concurrent
    ),
    case!(
        "[sig-apps] CronJob should replace jobs when ReplaceConcurrent [Conformance]",
        "cronjob",
        replace_concurrent
    ),
    case!(
        "[sig-apps] CronJob should support CronJob API operations [Conformance]",
        "cronjob",
        api_operations
    ),
];

/// How long upstream waits for a cronjob to do something (cronJobTimeout).
const CRONJOB_TIMEOUT: Duration = Duration::from_secs(300);
/// Upstream's framework.Poll.
const POLL: Duration = Duration::from_secs(2);
/// Every minute; upstream writes the weekday as `?`.
const EVERY_MINUTE: &str = "*/1 * * * ?";
const SLEEP: &[&str] = &["sleep", "300"];
const SUCCEED: &[&str] = &["/bin/true"];

/// upstream's newTestCronJob.
fn test_cronjob(
    ctx: &Ctx,
    name: &str,
    schedule: &str,
    policy: &str,
    command: &[&str],
    limits: Option<(i32, i32)>,
) -> CaseResult<CronJob> {
    let mut cj = json!({
        "metadata": {"name": name},
        "spec": {
            "schedule": schedule,
            "concurrencyPolicy": policy,
            "jobTemplate": {"spec": {
                "parallelism": 1,
                "completions": 1,
                "backoffLimit": 1,
                "template": {"spec": {
                    "restartPolicy": "OnFailure",
                    "volumes": [{"name": "data", "emptyDir": {}}],
                    "containers": [{
                        "name": "c",
                        "image": ctx.images().busybox(),
                        "command": command,
                        "volumeMounts": [{"mountPath": "/data", "name": "data"}],
                    }],
                }},
            }},
        },
    });
    if let Some((successful, failed)) = limits {
        cj["spec"]["successfulJobsHistoryLimit"] = json!(successful);
        cj["spec"]["failedJobsHistoryLimit"] = json!(failed);
    }
    from_json(cj)
}

async fn create(ctx: &Ctx, cj: &CronJob) -> CaseResult<CronJob> {
    Ok(ctx
        .api::<CronJob>()
        .create(&PostParams::default(), cj)
        .await?)
}

/// upstream's deleteCronJob: background propagation takes its jobs and pods with it.
async fn delete(ctx: &Ctx, name: &str) -> CaseResult {
    ctx.api::<CronJob>()
        .delete(name, &DeleteParams::background())
        .await?;
    Ok(())
}

fn active_count(cj: &CronJob) -> usize {
    cj.status
        .as_ref()
        .and_then(|s| s.active.as_ref())
        .map_or(0, Vec::len)
}

/// A Job with a true Complete or Failed condition.
fn finished(job: &Job) -> bool {
    job.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True")
        })
}

/// upstream's filterActiveJobs: the unfinished jobs' names, and the finished ones'.
async fn jobs_by_state(ctx: &Ctx) -> CaseResult<(Vec<Job>, Vec<Job>)> {
    let jobs = ctx.api::<Job>().list(&ListParams::default()).await?;
    Ok(jobs.items.into_iter().partition(|j| !finished(j)))
}

/// upstream's waitForActiveJobs: the cronjob lists at least `n` active jobs.
async fn wait_active(ctx: &Ctx, name: &str, n: usize) -> CaseResult<CronJob> {
    let cjs: Api<CronJob> = ctx.api();
    ctx.wait(
        &format!("{n} active job(s) in CronJob {name}"),
        CRONJOB_TIMEOUT,
        || async {
            let cj = cjs.get(name).await?;
            Ok(if active_count(&cj) >= n {
                Ok(cj)
            } else {
                Err(format!("{} active", active_count(&cj)))
            })
        },
    )
    .await
}

/// How long to watch for something that must not happen: past the next two schedule times of an
/// every-minute cronjob (so the controller had two chances to start a job), plus a margin for it
/// to act. Upstream watches for cronJobTimeout (5 minutes); two schedule times already show it.
fn through_two_schedule_times() -> Duration {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let into_minute = now.as_millis() % 60_000;
    Duration::from_millis((2 * 60_000 - into_minute) as u64) + Duration::from_secs(15)
}

/// Poll `check` every `POLL` for `window`; the first failure fails the case.
async fn consistently<F, Fut>(window: Duration, mut check: F) -> CaseResult
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = CaseResult>,
{
    let start = Instant::now();
    while start.elapsed() < window {
        check().await?;
        tokio::time::sleep(POLL).await;
    }
    check().await
}

/// CronJob AllowConcurrent: a cronjob with concurrencyPolicy Allow whose jobs outlast the schedule
/// MUST have more than one job running at a time — at least two active jobs in its status, and at
/// least two unfinished jobs listed.
async fn allow_concurrent(ctx: &Ctx) -> CaseResult {
    let cj = test_cronjob(ctx, "concurrent", EVERY_MINUTE, "Allow", SLEEP, None)?;
    create(ctx, &cj).await?;
    wait_active(ctx, "concurrent", 2).await?;
    let (active, _) = jobs_by_state(ctx).await?;
    must!(
        active.len() >= 2,
        "expected at least 2 running jobs, listed {}",
        active.len()
    );
    delete(ctx, "concurrent").await
}

/// CronJob Suspend: a suspended cronjob MUST NOT create jobs — its status lists no active job
/// while its schedule times pass, and no job exists.
async fn suspended(ctx: &Ctx) -> CaseResult {
    let mut cj = test_cronjob(ctx, "suspended", EVERY_MINUTE, "Allow", SLEEP, None)?;
    cj.spec.get_or_insert_with(Default::default).suspend = Some(true);
    create(ctx, &cj).await?;
    let cjs: Api<CronJob> = ctx.api();
    consistently(through_two_schedule_times(), || async {
        let cj = cjs.get("suspended").await?;
        must_eq!(active_count(&cj), 0, "active jobs of the suspended cronjob");
        Ok(())
    })
    .await?;
    let jobs = ctx.api::<Job>().list(&ListParams::default()).await?;
    must!(
        jobs.items.is_empty(),
        "a suspended cronjob created jobs: {:?}",
        names(&jobs.items)
    );
    delete(ctx, "suspended").await
}

fn names(jobs: &[Job]) -> Vec<String> {
    jobs.iter()
        .filter_map(|j| j.metadata.name.clone())
        .collect()
}

/// CronJob ForbidConcurrent: with concurrencyPolicy Forbid exactly one job MUST run — one active
/// job in the status and one unfinished job listed — and while it runs no further job MUST be
/// started when the next schedule times come.
async fn forbid_concurrent(ctx: &Ctx) -> CaseResult {
    let cj = test_cronjob(ctx, "forbid", EVERY_MINUTE, "Forbid", SLEEP, None)?;
    create(ctx, &cj).await?;
    let cj = wait_active(ctx, "forbid", 1).await?;
    must_eq!(active_count(&cj), 1, "active jobs");
    let (active, _) = jobs_by_state(ctx).await?;
    must_eq!(active.len(), 1, "running jobs listed");
    let cjs: Api<CronJob> = ctx.api();
    consistently(through_two_schedule_times(), || async {
        let cj = cjs.get("forbid").await?;
        must!(
            active_count(&cj) < 2,
            "unexpected active job number: {}",
            active_count(&cj)
        );
        let (active, _) = jobs_by_state(ctx).await?;
        must_eq!(active.len(), 1, "running jobs listed");
        Ok(())
    })
    .await?;
    delete(ctx, "forbid").await
}

/// CronJob ReplaceConcurrent: with concurrencyPolicy Replace exactly one job MUST run at a time,
/// and at the next schedule time it MUST be replaced by a new one (never two alive at once).
async fn replace_concurrent(ctx: &Ctx) -> CaseResult {
    let cj = test_cronjob(ctx, "replace", EVERY_MINUTE, "Replace", SLEEP, None)?;
    create(ctx, &cj).await?;
    let cj = wait_active(ctx, "replace", 1).await?;
    must_eq!(active_count(&cj), 1, "active jobs");
    let jobs = ctx.api::<Job>().list(&ListParams::default()).await?;
    let running = jobs.items.iter().filter(|j| !finished(j)).count();
    must_eq!(running, 1, "running jobs listed");
    let first = names(&jobs.items).into_iter().next().unwrap_or_default();
    let job_api: Api<Job> = ctx.api();
    ctx.wait(
        &format!("job {first} to be replaced"),
        CRONJOB_TIMEOUT,
        || async {
            let jobs = job_api.list(&ListParams::default()).await?;
            // Jobs pending deletion go asynchronously; they do not count.
            let alive: Vec<&Job> = jobs
                .items
                .iter()
                .filter(|j| j.metadata.deletion_timestamp.is_none())
                .collect();
            match alive.as_slice() {
                [] => Ok(Err("no job".to_string())),
                [only] if only.metadata.name.as_deref() == Some(first.as_str()) => {
                    Ok(Err(format!("still {first}")))
                }
                [_] => Ok(Ok(())),
                more => Err(CaseError::Failed(format!(
                    "more than one job is running: {:?}",
                    more.iter()
                        .filter_map(|j| j.metadata.name.clone())
                        .collect::<Vec<_>>()
                ))),
            }
        },
    )
    .await?;
    delete(ctx, "replace").await
}

/// The time now, to the second (the wire format carries no fraction).
fn now_seconds() -> Time {
    let now = k8s_openapi::jiff::Timestamp::now().as_second();
    Time(
        k8s_openapi::jiff::Timestamp::from_second(now)
            .unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
    )
}

fn annotation<'a>(cj: &'a CronJob, key: &str) -> Option<&'a str> {
    cj.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

fn last_schedule(cj: &CronJob) -> Option<&Time> {
    cj.status.as_ref()?.last_schedule_time.as_ref()
}

/// CronJob API Operations: cronjobs MUST support create, get (the same UID), list and watch in the
/// namespace and across namespaces (by label), patch and update (each read back, and the watch
/// MUST see them as MODIFIED), delete and deletecollection (each gone, or pending deletion with a
/// finalizer); cronjobs/status MUST support patch (its lastScheduleTime and annotation read back),
/// update (its lastScheduleTime read back) and get (the same UID).
async fn api_operations(ctx: &Ctx) -> CaseResult {
    // Upstream labels with the framework's unique name: the namespace's.
    let unique = ctx.ns.clone();
    let mut template = test_cronjob(
        ctx,
        "test-api",
        "* */1 * * ?",
        "Allow",
        SUCCEED,
        Some((1, 0)),
    )?;
    template.metadata.labels = Some([("special-label".to_string(), unique.clone())].into());
    let selector = format!("special-label={unique}");
    let cjs: Api<CronJob> = ctx.api();

    let created = cjs.create(&PostParams::default(), &template).await?;
    let got = cjs.get("test-api").await?;
    must_eq!(got.metadata.uid, created.metadata.uid, "the UID read back");

    let listed = cjs.list(&by_label("special-label", &unique)).await?;
    must_eq!(listed.items.len(), 1, "cronjobs listed by label");
    let rv = listed.metadata.resource_version.clone().unwrap_or_default();
    let wp = WatchParams::default().labels(&selector);
    let mut watch = Box::pin(cjs.watch(&wp, &rv).await?);

    let all: Api<CronJob> = Api::all(ctx.client.clone());
    let across = all.list(&by_label("special-label", &unique)).await?;
    must_eq!(
        across.items.len(),
        1,
        "cronjobs listed across namespaces by label"
    );
    let _cluster_watch = all.watch(&wp, &rv).await?;

    let patched = cjs
        .patch(
            "test-api",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"patched": "true"}}})),
        )
        .await?;
    must_eq!(
        annotation(&patched, "patched"),
        Some("true"),
        "the patched annotation"
    );

    let updated = update_with_retry(&cjs, "test-api", false, |cj| {
        cj.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert("updated".into(), "true".into());
    })
    .await?;
    must_eq!(
        annotation(&updated, "updated"),
        Some("true"),
        "the updated annotation"
    );

    tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(event) = watch.try_next().await? {
            match event {
                WatchEvent::Modified(cj) if annotation(&cj, "patched") == Some("true") => {
                    return Ok(());
                }
                WatchEvent::Modified(_) | WatchEvent::Bookmark(_) => {}
                other => {
                    return Err(CaseError::Failed(format!(
                        "expected MODIFIED events, got {other:?}"
                    )))
                }
            }
        }
        Err(CaseError::Failed("the watch closed".into()))
    })
    .await
    .map_err(|_| CaseError::Failed("timed out waiting for the watch event".into()))??;

    let now1 = now_seconds();
    let patch = json!({
        "metadata": {"annotations": {"patchedstatus": "true"}},
        "status": {"lastScheduleTime": now1},
    });
    let patched = cjs
        .patch_status("test-api", &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    must_eq!(
        last_schedule(&patched),
        Some(&now1),
        "the patched lastScheduleTime"
    );
    must_eq!(
        annotation(&patched, "patchedstatus"),
        Some("true"),
        "the annotation patched through /status"
    );

    let now2 = now_seconds();
    let updated = update_with_retry(&cjs, "test-api", true, |cj| {
        cj.status
            .get_or_insert_with(Default::default)
            .last_schedule_time = Some(now2.clone());
    })
    .await?;
    must_eq!(
        last_schedule(&updated),
        Some(&now2),
        "the updated lastScheduleTime"
    );

    let status = cjs.get_status("test-api").await?;
    must_eq!(
        status.metadata.uid,
        created.metadata.uid,
        "the UID read through /status"
    );

    // Deleting: gone, or (with finalizers) pending deletion.
    let pending = |cj: &CronJob| {
        cj.metadata.deletion_timestamp.is_some()
            && cj
                .metadata
                .finalizers
                .as_ref()
                .is_some_and(|f| !f.is_empty())
    };
    template.metadata.name = Some("for-removal".into());
    cjs.create(&PostParams::default(), &template).await?;
    cjs.delete("for-removal", &DeleteParams::default()).await?;
    if let Some(cj) = cjs.get_opt("for-removal").await? {
        must!(
            pending(&cj),
            "for-removal is still there without a pending deletion"
        );
    }

    cjs.delete_collection(
        &DeleteParams::default(),
        &by_label("special-label", &unique),
    )
    .await?;
    let left = cjs.list(&by_label("special-label", &unique)).await?;
    must!(
        left.items.len() <= 2,
        "{} cronjobs left after deletecollection",
        left.items.len()
    );
    for cj in &left.items {
        must!(
            pending(cj),
            "{:?} is still there without a pending deletion",
            cj.metadata.name
        );
    }
    Ok(())
}
