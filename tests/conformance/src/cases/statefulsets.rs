//! sig-apps StatefulSet entries that need no PersistentVolumeClaims, written from upstream's
//! test/e2e/apps/statefulset.go: ordered and burst scaling, the scale and status subresources,
//! list/patch/deletecollection, rolling updates with roll back, canary and phased updates.
//! Upstream's httpd webserver is busybox's httpd here (`webserver()`), and its "new" image is the
//! agnhost image running the same httpd (both carry busybox), so only the image changes.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::TryStreamExt;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::autoscaling::v1::Scale;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use serde_json::json;

use super::{case, Case};
use crate::ctx::{from_json, is_ready, phase, Ctx};
use crate::error::{CaseError, CaseResult};
use crate::{must, must_eq};

pub const CASES: &[Case] = &[
    case!(
        "[sig-apps] StatefulSet Basic StatefulSet functionality [StatefulSetBasic] Should recreate evicted statefulset [Conformance]",
        "statefulset",
        recreate_evicted
    ),
    case!(
        "[sig-apps] StatefulSet Basic StatefulSet functionality [StatefulSetBasic] Scaling should happen in predictable order and halt if any stateful pod is unhealthy [Slow] [Conformance]",
        "statefulset",
        scaling_in_order
    ),
    case!(
        "[sig-apps] StatefulSet Basic StatefulSet functionality [StatefulSetBasic] Burst scaling should run to completion even with unhealthy pods [Slow] [Conformance]",
        "statefulset",
        burst_scaling
    ),
    case!(
        "[sig-apps] StatefulSet Basic StatefulSet functionality [StatefulSetBasic] should have a working scale subresource [Conformance]",
        "statefulset",
        scale_subresource
    ),
    case!(
        "[sig-apps] StatefulSet Basic StatefulSet functionality [StatefulSetBasic] should list, patch and delete a collection of StatefulSets [Conformance]",
        "statefulset",
        list_patch_delete_collection
    ),
    case!(
        "[sig-apps] StatefulSet Basic StatefulSet functionality [StatefulSetBasic] should validate Statefulset Status endpoints [Conformance]",
        "statefulset",
        status_endpoints
    ),
    case!(
        "[sig-apps] StatefulSet Basic StatefulSet functionality [StatefulSetBasic] should perform rolling updates and roll backs of template modifications [Conformance]",
        "statefulset",
        rolling_update_and_roll_back
    ),
    case!(
        "[sig-apps] StatefulSet Basic StatefulSet functionality [StatefulSetBasic] should perform canary updates and phased rolling updates of template modifications [Conformance]",
        "statefulset",
        canary_and_phased
    ),
];

/// upstream's statefulSetTimeout.
const SET_TIMEOUT: Duration = Duration::from_secs(600);
const SS: &str = "ss2";
/// How long a watch may trail what a list already shows.
const STATUS_WAIT: Duration = Duration::from_secs(30);
const SVC: &str = "test";

fn labels() -> serde_json::Value {
    json!({"foo": "bar", "baz": "blah"})
}

fn selector() -> String {
    "baz=blah,foo=bar".into()
}

/// httpd on port 80 serving /www/index.html (the readiness path), exiting at once on SIGTERM as
/// httpd does; the same command works in both images.
const SERVE: &str = "echo ok > /www/index.html; trap 'exit 0' TERM; httpd -f -p 80 -h /www & wait";

/// e2estatefulset.NewStatefulSet with setHTTPProbe: one webserver container, probed on
/// /index.html every second, governed by the headless Service `test`.
fn new_set(
    ctx: &Ctx,
    name: &str,
    replicas: i32,
    labels: serde_json::Value,
) -> CaseResult<StatefulSet> {
    from_json(json!({
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "serviceName": SVC,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{
                    "name": "webserver",
                    "image": ctx.images().httpd(),
                    "command": ["sh", "-c", SERVE],
                    "readinessProbe": {
                        "httpGet": {"path": "/index.html", "port": 80},
                        "periodSeconds": 1, "successThreshold": 1, "failureThreshold": 1
                    }
                }]}
            }
        }
    }))
}

/// The headless Service every Basic case creates first.
async fn headless_service(ctx: &Ctx) -> CaseResult {
    let svc: Service = from_json(json!({
        "metadata": {"name": SVC, "labels": labels()},
        "spec": {"clusterIP": "None", "selector": labels(),
            "ports": [{"name": "http", "port": 80}]}
    }))?;
    ctx.api::<Service>()
        .create(&PostParams::default(), &svc)
        .await?;
    Ok(())
}

fn ordinal(pod: &Pod) -> i64 {
    pod.metadata
        .name
        .as_deref()
        .and_then(|n| n.rsplit('-').next())
        .and_then(|o| o.parse().ok())
        .unwrap_or(-1)
}

/// GetPodList: the set's pods, by ordinal.
async fn set_pods(ctx: &Ctx, sel: &str) -> CaseResult<Vec<Pod>> {
    let mut pods = ctx
        .api::<Pod>()
        .list(&ListParams::default().labels(sel))
        .await?
        .items;
    pods.sort_by_key(ordinal);
    Ok(pods)
}

fn revision_label(pod: &Pod) -> String {
    pod.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get("controller-revision-hash"))
        .cloned()
        .unwrap_or_default()
}

fn image(pod: &Pod) -> String {
    pod.spec
        .as_ref()
        .and_then(|s| s.containers.first())
        .and_then(|c| c.image.clone())
        .unwrap_or_default()
}

/// WaitForRunningAndReady (ready = true) or waitForRunningAndNotReady (ready = false): exactly
/// `n` pods, each Running with that readiness.
async fn wait_pods(ctx: &Ctx, sel: &str, n: usize, ready: bool) -> CaseResult<Vec<Pod>> {
    let what = format!(
        "{n} pods Running and {}",
        if ready { "Ready" } else { "not Ready" }
    );
    ctx.wait(&what, SET_TIMEOUT, || async {
        let pods = set_pods(ctx, sel).await?;
        let good = pods
            .iter()
            .filter(|p| {
                phase(p) == "Running"
                    && is_ready(p) == ready
                    && p.metadata.deletion_timestamp.is_none()
            })
            .count();
        if pods.len() == n && good == n {
            Ok(Ok(pods))
        } else {
            Ok(Err(format!("{} pods, {good} as wanted", pods.len())))
        }
    })
    .await
}

/// waitForStatus: the controller has observed the latest generation.
async fn wait_status(ctx: &Ctx, name: &str) -> CaseResult<StatefulSet> {
    let sets: Api<StatefulSet> = ctx.api();
    ctx.wait(
        "the StatefulSet's status to observe its generation",
        SET_TIMEOUT,
        || async {
            let ss = sets.get(name).await?;
            let observed = ss
                .status
                .as_ref()
                .and_then(|s| s.observed_generation)
                .unwrap_or(0);
            if observed >= ss.metadata.generation.unwrap_or(0) {
                Ok(Ok(ss))
            } else {
                Ok(Err(format!("observedGeneration {observed}")))
            }
        },
    )
    .await
}

/// WaitForStatusReadyReplicas / WaitForStatusReplicas.
async fn wait_status_count(ctx: &Ctx, name: &str, field: &str, n: i32) -> CaseResult {
    let sets: Api<StatefulSet> = ctx.api();
    ctx.wait(&format!("status.{field} = {n}"), SET_TIMEOUT, || async {
        let ss = sets.get(name).await?;
        let s = ss.status.unwrap_or_default();
        let got = match field {
            "readyReplicas" => s.ready_replicas.unwrap_or(0),
            _ => s.replicas,
        };
        if got == n {
            Ok(Ok(()))
        } else {
            Ok(Err(format!("{got}")))
        }
    })
    .await
}

async fn update_replicas(ctx: &Ctx, name: &str, n: i32) -> CaseResult {
    ctx.api::<StatefulSet>()
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"replicas": n}})),
        )
        .await?;
    Ok(())
}

/// confirmStatefulPodCount: for 10 s the set MUST keep exactly `n` pods (when `hard`).
async fn confirm_pod_count(ctx: &Ctx, sel: &str, n: usize, hard: bool) -> CaseResult {
    let until = std::time::Instant::now() + Duration::from_secs(10);
    while std::time::Instant::now() < until {
        let count = set_pods(ctx, sel).await?.len();
        if hard {
            must_eq!(
                count,
                n,
                "the StatefulSet's pod count while a pod is unhealthy"
            );
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    Ok(())
}

/// breakHTTPProbe / restoreHTTPProbe on one pod: move the probed file away, or back. Retried as upstream's
/// ExecInStatefulPods does (RunHostCmdWithRetries, up to StatefulPodTimeout): a pod of a Parallel scale-up
/// may still be unscheduled or starting when it is listed.
async fn set_probe(ctx: &Ctx, pod: &str, healthy: bool) -> CaseResult {
    let cmd = if healthy {
        "mv -v /tmp/index.html /www/ || true"
    } else {
        "mv -v /www/index.html /tmp/ || true"
    };
    let until = std::time::Instant::now() + Duration::from_secs(300);
    loop {
        match ctx.exec(pod, "webserver", &["sh", "-c", cmd]).await {
            Ok(_) => return Ok(()),
            Err(e) if std::time::Instant::now() < until => {
                tracing::debug!(pod, error = %e, "exec into the stateful pod; retrying");
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
            Err(e) => return Err(e),
        }
    }
}

async fn set_probe_all(ctx: &Ctx, sel: &str, healthy: bool) -> CaseResult {
    for p in set_pods(ctx, sel).await? {
        set_probe(ctx, p.metadata.name.as_deref().unwrap_or_default(), healthy).await?;
    }
    Ok(())
}

/// Pod names in the order a watch saw them ADDED or DELETED, from a list's resourceVersion on.
struct PodEvents {
    seen: Arc<Mutex<Vec<(String, String)>>>,
    task: tokio::task::JoinHandle<()>,
}

impl PodEvents {
    async fn start(ctx: &Ctx, sel: &str) -> CaseResult<PodEvents> {
        let pods: Api<Pod> = ctx.api();
        let rv = pods
            .list(&ListParams::default().labels(sel))
            .await?
            .metadata
            .resource_version
            .unwrap_or_default();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let out = seen.clone();
        let sel = sel.to_string();
        let task = tokio::spawn(async move {
            let mut rv = rv;
            loop {
                let wp = WatchParams::default().labels(&sel).timeout(290);
                let Ok(stream) = pods.watch(&wp, &rv).await else {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                };
                let mut stream = Box::pin(stream);
                while let Ok(Some(ev)) = stream.try_next().await {
                    let (kind, p) = match ev {
                        WatchEvent::Added(p) => ("ADDED", p),
                        WatchEvent::Deleted(p) => ("DELETED", p),
                        WatchEvent::Modified(p) => ("MODIFIED", p),
                        _ => continue,
                    };
                    rv = p.metadata.resource_version.clone().unwrap_or(rv);
                    let name = p.metadata.name.clone().unwrap_or_default();
                    if let Ok(mut s) = out.lock() {
                        s.push((kind.to_string(), name));
                    }
                }
            }
        });
        Ok(PodEvents { seen, task })
    }

    /// The names of `kind` events, first occurrence of each, in order.
    fn order(&self, kind: &str) -> Vec<String> {
        let seen = self.seen.lock().map(|s| s.clone()).unwrap_or_default();
        let mut out: Vec<String> = Vec::new();
        for (k, n) in seen {
            if k == kind && !out.contains(&n) {
                out.push(n);
            }
        }
        out
    }
}

impl Drop for PodEvents {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn names(prefix: &str, ords: &[i32]) -> Vec<String> {
    ords.iter().map(|o| format!("{prefix}-{o}")).collect()
}

/// StatefulSet, Scaling: pods MUST be created in ascending ordinal order when scaling up and
/// deleted in descending order when scaling down; scaling MUST pause while any pod is unhealthy.
async fn scaling_in_order(ctx: &Ctx) -> CaseResult {
    headless_service(ctx).await?;
    let sel = selector();
    let events = PodEvents::start(ctx, &sel).await?;
    let sets: Api<StatefulSet> = ctx.api();
    sets.create(&PostParams::default(), &new_set(ctx, SS, 1, labels())?)
        .await?;
    wait_pods(ctx, &sel, 1, true).await?;

    // Scale up halts behind an unhealthy pod.
    set_probe_all(ctx, &sel, false).await?;
    wait_pods(ctx, &sel, 1, false).await?;
    wait_status_count(ctx, SS, "readyReplicas", 0).await?;
    update_replicas(ctx, SS, 3).await?;
    confirm_pod_count(ctx, &sel, 1, true).await?;
    set_probe_all(ctx, &sel, true).await?;
    wait_pods(ctx, &sel, 3, true).await?;
    let added = events.order("ADDED");
    must_eq!(
        added,
        names(SS, &[0, 1, 2]),
        "the order pods were created in"
    );

    // Scale down halts behind unhealthy pods too, then goes in reverse order.
    set_probe_all(ctx, &sel, false).await?;
    wait_status_count(ctx, SS, "readyReplicas", 0).await?;
    wait_pods(ctx, &sel, 3, false).await?;
    update_replicas(ctx, SS, 0).await?;
    confirm_pod_count(ctx, &sel, 3, true).await?;
    set_probe_all(ctx, &sel, true).await?;
    ctx.wait("the StatefulSet to have no pods", SET_TIMEOUT, || async {
        let n = set_pods(ctx, &sel).await?.len();
        Ok(if n == 0 {
            Ok(())
        } else {
            Err(format!("{n} pods"))
        })
    })
    .await?;
    // The watch may deliver the last DELETED after a list already shows no pods.
    ctx.wait("the watch to see all 3 deletions", STATUS_WAIT, || async {
        let n = events.order("DELETED").len();
        Ok(if n >= 3 {
            Ok(())
        } else {
            Err(format!("{n} seen"))
        })
    })
    .await?;
    let deleted = events.order("DELETED");
    must_eq!(
        deleted,
        names(SS, &[2, 1, 0]),
        "the order pods were deleted in"
    );
    Ok(())
}

/// StatefulSet, Burst Scaling: with the Parallel policy, scaling up and down MUST run to completion
/// while pods are unhealthy.
async fn burst_scaling(ctx: &Ctx) -> CaseResult {
    headless_service(ctx).await?;
    let sel = selector();
    let mut ss = new_set(ctx, SS, 1, labels())?;
    if let Some(spec) = ss.spec.as_mut() {
        spec.pod_management_policy = Some("Parallel".into());
    }
    ctx.api::<StatefulSet>()
        .create(&PostParams::default(), &ss)
        .await?;
    wait_pods(ctx, &sel, 1, true).await?;

    set_probe_all(ctx, &sel, false).await?;
    wait_pods(ctx, &sel, 1, false).await?;
    wait_status_count(ctx, SS, "readyReplicas", 0).await?;
    update_replicas(ctx, SS, 3).await?;
    confirm_pod_count(ctx, &sel, 3, false).await?;
    set_probe_all(ctx, &sel, true).await?;
    wait_pods(ctx, &sel, 3, true).await?;

    set_probe_all(ctx, &sel, false).await?;
    wait_status_count(ctx, SS, "readyReplicas", 0).await?;
    wait_pods(ctx, &sel, 3, false).await?;
    update_replicas(ctx, SS, 0).await?;
    confirm_pod_count(ctx, &sel, 0, false).await?;
    ctx.wait("the StatefulSet to have no pods", SET_TIMEOUT, || async {
        let n = set_pods(ctx, &sel).await?.len();
        Ok(if n == 0 {
            Ok(())
        } else {
            Err(format!("{n} pods"))
        })
    })
    .await?;
    wait_status_count(ctx, SS, "replicas", 0).await?;
    Ok(())
}

/// StatefulSet resource Replica scaling: a new StatefulSet's scale MUST be one; updating the scale
/// to two and patching it to four MUST be reflected in spec.replicas.
async fn scale_subresource(ctx: &Ctx) -> CaseResult {
    headless_service(ctx).await?;
    let sets: Api<StatefulSet> = ctx.api();
    sets.create(&PostParams::default(), &new_set(ctx, SS, 1, labels())?)
        .await?;
    wait_pods(ctx, &selector(), 1, true).await?;
    wait_status(ctx, SS).await?;
    // The controller reports the pod it made on its next sync; read the scale once it has.
    wait_status_count(ctx, SS, "replicas", 1).await?;

    let scale = sets.get_scale(SS).await?;
    must_eq!(
        scale.spec.as_ref().and_then(|s| s.replicas),
        Some(1),
        "scale.spec.replicas"
    );
    must_eq!(
        scale.status.as_ref().map(|s| s.replicas),
        Some(1),
        "scale.status.replicas"
    );

    let mut update = scale.clone();
    update.metadata.resource_version = None;
    update.spec.get_or_insert_with(Default::default).replicas = Some(2);
    let result: Scale = sets
        .replace_scale(SS, &PostParams::default(), &update)
        .await?;
    must_eq!(
        result.spec.and_then(|s| s.replicas),
        Some(2),
        "the updated scale's spec.replicas"
    );
    let ss = sets.get(SS).await?;
    must_eq!(
        ss.spec.and_then(|s| s.replicas),
        Some(2),
        "spec.replicas after the scale update"
    );

    sets.patch_scale(
        SS,
        &PatchParams::default(),
        &Patch::Strategic(json!({"spec": {"replicas": 4}})),
    )
    .await?;
    let ss = sets.get(SS).await?;
    must_eq!(
        ss.spec.and_then(|s| s.replicas),
        Some(4),
        "spec.replicas after the scale patch"
    );
    Ok(())
}

/// StatefulSet, list, patch and delete a collection: creating, listing by label, patching and
/// deleting by deleteCollection MUST all succeed.
async fn list_patch_delete_collection(ctx: &Ctx) -> CaseResult {
    headless_service(ctx).await?;
    let name = "test-ss";
    let pod_labels = json!({"name": "sample-pod", "pod": "httpd"});
    let sets: Api<StatefulSet> = ctx.api();
    sets.create(&PostParams::default(), &new_set(ctx, name, 1, pod_labels)?)
        .await?;
    let sel = "name=sample-pod,pod=httpd";
    wait_pods(ctx, sel, 1, true).await?;
    wait_status(ctx, name).await?;

    let pause = ctx.images().pause();
    let patch = json!({
        "metadata": {"labels": {"test-ss": "patched"}},
        "spec": {"replicas": 2, "template": {"spec": {
            "TerminationGracePeriodSeconds": 1,
            "containers": [{"name": name, "image": pause}]
        }}}
    });
    sets.patch(name, &PatchParams::default(), &Patch::Strategic(&patch))
        .await?;
    let ss = sets.get(name).await?;
    let spec = ss.spec.clone().unwrap_or_default();
    must_eq!(spec.replicas, Some(2), "spec.replicas after the patch");
    must_eq!(
        spec.template
            .spec
            .as_ref()
            .and_then(|s| s.containers.first())
            .and_then(|c| c.image.clone()),
        Some(pause),
        "the first container's image after the patch"
    );
    wait_pods(ctx, sel, 2, true).await?;
    wait_status(ctx, name).await?;

    let all: Api<StatefulSet> = Api::all(ctx.client.clone());
    let lp = ListParams::default().labels("test-ss=patched");
    must_eq!(
        all.list(&lp).await?.items.len(),
        1,
        "StatefulSets labelled test-ss=patched"
    );
    sets.delete_collection(&DeleteParams::default().grace_period(1), &lp)
        .await?;
    must_eq!(
        all.list(&lp).await?.items.len(),
        0,
        "StatefulSets labelled test-ss=patched after deleteCollection"
    );
    Ok(())
}

/// Waits on a watch of StatefulSets labelled e2e=testing for one carrying a condition `ty`.
async fn watch_condition(ctx: &Ctx, rv: &str, ty: &str) -> CaseResult {
    let sets: Api<StatefulSet> = ctx.api();
    let wp = WatchParams::default().labels("e2e=testing");
    let mut stream = Box::pin(sets.watch(&wp, rv).await?);
    let found = tokio::time::timeout(SET_TIMEOUT, async {
        while let Some(ev) = stream.try_next().await? {
            if let WatchEvent::Added(s) | WatchEvent::Modified(s) = ev {
                let has = s
                    .status
                    .as_ref()
                    .and_then(|st| st.conditions.as_ref())
                    .is_some_and(|cs| cs.iter().any(|c| c.type_ == ty));
                if s.metadata.name.as_deref() == Some(SS) && has {
                    return Ok::<_, CaseError>(true);
                }
            }
        }
        Ok(false)
    })
    .await
    .map_err(|_| CaseError::Failed(format!("no watch event with condition {ty}")))??;
    must!(
        found,
        "the watch ended before a StatefulSet with condition {ty}"
    );
    Ok(())
}

/// StatefulSet, status sub-resource: reading, updating and patching /status MUST work and each
/// change MUST be visible to later reads (here: the watch).
async fn status_endpoints(ctx: &Ctx) -> CaseResult {
    headless_service(ctx).await?;
    let sets: Api<StatefulSet> = ctx.api();
    let rv = sets
        .list(&ListParams::default().labels("e2e=testing"))
        .await?
        .metadata
        .resource_version
        .unwrap_or_default();
    sets.create(&PostParams::default(), &new_set(ctx, SS, 1, labels())?)
        .await?;
    wait_pods(ctx, &selector(), 1, true).await?;
    wait_status(ctx, SS).await?;
    sets.patch(
        SS,
        &PatchParams::default(),
        &Patch::Strategic(json!({"metadata": {"labels": {"e2e": "testing"}}})),
    )
    .await?;
    let got = sets.get_status(SS).await?;
    must_eq!(
        got.metadata.name.as_deref(),
        Some(SS),
        "the /status read's name"
    );

    // RetryOnConflict: the controller writes the status too.
    let mut tries = 0;
    loop {
        let mut ss = sets.get(SS).await?;
        let status = ss.status.get_or_insert_with(Default::default);
        status.conditions.get_or_insert_with(Vec::new).push(from_json(json!({
            "type": "StatusUpdate", "status": "True", "reason": "E2E", "message": "Set from e2e test"
        }))?);
        match sets.replace_status(SS, &PostParams::default(), &ss).await {
            Ok(_) => break,
            Err(kube::Error::Api(e)) if e.code == 409 && tries < 5 => tries += 1,
            Err(e) => return Err(e.into()),
        }
    }
    watch_condition(ctx, &rv, "StatusUpdate").await?;

    sets.patch_status(
        SS,
        &PatchParams::default(),
        &Patch::Merge(
            json!({"status": {"conditions": [{"type": "StatusPatched", "status": "True"}]}}),
        ),
    )
    .await?;
    watch_condition(ctx, &rv, "StatusPatched").await?;
    Ok(())
}

async fn set_image(ctx: &Ctx, name: &str, image: &str) -> CaseResult<StatefulSet> {
    let patch = json!({"spec": {"template": {"spec": {"containers": [{"name": "webserver", "image": image}]}}}});
    Ok(ctx
        .api::<StatefulSet>()
        .patch(name, &PatchParams::default(), &Patch::Strategic(&patch))
        .await?)
}

async fn set_partition(ctx: &Ctx, name: &str, partition: i32) -> CaseResult {
    let patch = json!({"spec": {"updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": partition}}}});
    ctx.api::<StatefulSet>()
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

/// waitForPodReady / waitForPodNotReady on one pod of the set.
async fn wait_pod_ready(ctx: &Ctx, pod: &str, ready: bool) -> CaseResult {
    let pods: Api<Pod> = ctx.api();
    ctx.wait(&format!("pod {pod} ready={ready}"), SET_TIMEOUT, || async {
        let p = pods.get(pod).await?;
        Ok(if is_ready(&p) == ready {
            Ok(())
        } else {
            Err(phase(&p).to_string())
        })
    })
    .await
}

/// waitForRollingUpdate: the rollout is complete (current = update revision) and every pod runs
/// the update revision.
async fn wait_rolling_update(
    ctx: &Ctx,
    name: &str,
    sel: &str,
) -> CaseResult<(StatefulSet, Vec<Pod>)> {
    let sets: Api<StatefulSet> = ctx.api();
    ctx.wait("the rolling update to complete", SET_TIMEOUT, || async {
        let ss = sets.get(name).await?;
        let st = ss.status.clone().unwrap_or_default();
        let pods = set_pods(ctx, sel).await?;
        let update = st.update_revision.clone().unwrap_or_default();
        let observed = st.observed_generation.unwrap_or(0) >= ss.metadata.generation.unwrap_or(0);
        let done = observed
            && st.current_revision == st.update_revision
            && pods.iter().all(|p| revision_label(p) == update);
        Ok(if done {
            Ok((ss, pods))
        } else {
            Err(format!(
                "current {:?} update {:?}",
                st.current_revision, st.update_revision
            ))
        })
    })
    .await
}

/// waitForPartitionedRollingUpdate: pods at or above the partition run the update revision.
async fn wait_partitioned(ctx: &Ctx, name: &str, sel: &str) -> CaseResult<(StatefulSet, Vec<Pod>)> {
    let sets: Api<StatefulSet> = ctx.api();
    ctx.wait("the partitioned rolling update", SET_TIMEOUT, || async {
        let ss = sets.get(name).await?;
        let st = ss.status.clone().unwrap_or_default();
        let spec = ss.spec.clone().unwrap_or_default();
        let partition = spec
            .update_strategy
            .and_then(|u| u.rolling_update)
            .and_then(|r| r.partition)
            .unwrap_or(0) as i64;
        let pods = set_pods(ctx, sel).await?;
        let update = st.update_revision.clone().unwrap_or_default();
        let observed = st.observed_generation.unwrap_or(0) >= ss.metadata.generation.unwrap_or(0);
        let ready = pods.len() as i32 == spec.replicas.unwrap_or(1)
            && pods
                .iter()
                .all(|p| is_ready(p) && p.metadata.deletion_timestamp.is_none());
        let above = pods
            .iter()
            .filter(|p| ordinal(p) >= partition)
            .all(|p| revision_label(p) == update);
        let complete = partition > 0 || st.current_revision == st.update_revision;
        Ok(if observed && ready && above && complete {
            Ok((ss, pods))
        } else {
            Err(format!(
                "partition {partition}, current {:?} update {:?}",
                st.current_revision, st.update_revision
            ))
        })
    })
    .await
}

fn revisions(ss: &StatefulSet) -> (String, String) {
    let st = ss.status.clone().unwrap_or_default();
    (
        st.current_revision.unwrap_or_default(),
        st.update_revision.unwrap_or_default(),
    )
}

/// StatefulSet, Rolling Update: a template change MUST create a new revision and roll every pod
/// to it; restoring the template MUST roll them back to the prior revision.
async fn rolling_update_and_roll_back(ctx: &Ctx) -> CaseResult {
    headless_service(ctx).await?;
    let sel = selector();
    let sets: Api<StatefulSet> = ctx.api();
    sets.create(&PostParams::default(), &new_set(ctx, SS, 3, labels())?)
        .await?;
    wait_pods(ctx, &sel, 3, true).await?;
    let ss = wait_status(ctx, SS).await?;
    let (current, update) = revisions(&ss);
    must_eq!(
        current,
        update,
        "a new StatefulSet's current and update revisions"
    );
    for p in set_pods(ctx, &sel).await? {
        must_eq!(revision_label(&p), current, "pod revision label");
    }
    let old_image = ctx.images().httpd();
    let new_image = ctx.images().agnhost();
    let pod1 = format!("{SS}-1");

    set_probe(ctx, &pod1, false).await?;
    wait_pod_ready(ctx, &pod1, false).await?;
    set_image(ctx, SS, &new_image).await?;
    let ss = wait_status(ctx, SS).await?;
    let (current, update) = revisions(&ss);
    must!(
        current != update,
        "current revision equals update revision during a rolling update"
    );
    set_probe(ctx, &pod1, true).await?;
    wait_pod_ready(ctx, &pod1, true).await?;
    let (ss, pods) = wait_rolling_update(ctx, SS, &sel).await?;
    for p in &pods {
        must_eq!(image(p), new_image, "pod image after the rolling update");
        must_eq!(
            revision_label(p),
            revisions(&ss).1,
            "pod revision after the rolling update"
        );
    }

    // Roll back: the prior revision becomes the update revision again.
    let prior = current;
    set_probe(ctx, &pod1, false).await?;
    wait_pod_ready(ctx, &pod1, false).await?;
    set_image(ctx, SS, &old_image).await?;
    let ss = wait_status(ctx, SS).await?;
    let (current, update) = revisions(&ss);
    must!(
        current != update,
        "current revision equals update revision during a roll back"
    );
    must_eq!(update, prior, "the update revision during a roll back");
    set_probe(ctx, &pod1, true).await?;
    wait_pod_ready(ctx, &pod1, true).await?;
    let (_, pods) = wait_rolling_update(ctx, SS, &sel).await?;
    for p in &pods {
        must_eq!(image(p), old_image, "pod image after the roll back");
        must_eq!(revision_label(p), prior, "pod revision after the roll back");
    }
    Ok(())
}

/// Pods below the partition MUST keep the current image and revision, the others the new ones.
fn check_partition(
    pods: &[Pod],
    partition: i64,
    old: (&str, &str),
    new: (&str, &str),
) -> CaseResult {
    for p in pods {
        let want = if ordinal(p) < partition { old } else { new };
        let name = p.metadata.name.clone().unwrap_or_default();
        must_eq!(image(p), want.0, "pod {name} image (partition {partition})");
        must_eq!(
            revision_label(p),
            want.1,
            "pod {name} revision (partition {partition})"
        );
    }
    Ok(())
}

/// StatefulSet, Rolling Update with Partition: with the partition above every ordinal no pod MUST
/// be updated; lowering it MUST update exactly the pods at or above it (a canary), pods deleted
/// MUST come back at their side's revision, and lowering it step by step MUST finish the update.
async fn canary_and_phased(ctx: &Ctx) -> CaseResult {
    headless_service(ctx).await?;
    let sel = selector();
    let mut ss = new_set(ctx, SS, 3, labels())?;
    if let Some(spec) = ss.spec.as_mut() {
        spec.update_strategy = Some(from_json(
            json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 3}}),
        )?);
    }
    ctx.api::<StatefulSet>()
        .create(&PostParams::default(), &ss)
        .await?;
    wait_pods(ctx, &sel, 3, true).await?;
    let ss = wait_status(ctx, SS).await?;
    let (current, update) = revisions(&ss);
    must_eq!(
        current,
        update,
        "a new StatefulSet's current and update revisions"
    );
    let old_image = ctx.images().httpd();
    let new_image = ctx.images().agnhost();

    // A partition above every ordinal: nothing is updated.
    set_image(ctx, SS, &new_image).await?;
    let ss = wait_status(ctx, SS).await?;
    let (current, update) = revisions(&ss);
    must!(
        current != update,
        "current revision equals update revision after the template change"
    );
    confirm_pod_count(ctx, &sel, 3, true).await?;
    let pods = set_pods(ctx, &sel).await?;
    check_partition(&pods, 3, (&old_image, &current), (&new_image, &update))?;

    // Canary: partition 2 updates only the last pod.
    set_partition(ctx, SS, 2).await?;
    let (_, pods) = wait_partitioned(ctx, SS, &sel).await?;
    check_partition(&pods, 2, (&old_image, &current), (&new_image, &update))?;

    // Deleted pods come back on their side of the partition.
    let pods_api: Api<Pod> = ctx.api();
    for i in [0, 2] {
        pods_api
            .delete(&format!("{SS}-{i}"), &DeleteParams::default())
            .await?;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let pods = wait_pods(ctx, &sel, 3, true).await?;
    check_partition(&pods, 2, (&old_image, &current), (&new_image, &update))?;

    // Phased: lower the partition one ordinal at a time.
    for partition in (0..2).rev() {
        set_partition(ctx, SS, partition).await?;
        let (_, pods) = wait_partitioned(ctx, SS, &sel).await?;
        check_partition(
            &pods,
            partition as i64,
            (&old_image, &current),
            (&new_image, &update),
        )?;
    }
    let ss = wait_status(ctx, SS).await?;
    must_eq!(
        revisions(&ss).0,
        update,
        "the current revision once the update completed"
    );
    Ok(())
}

/// StatefulSet, Recreate Failed Pod: the StatefulSet MUST delete and recreate pods it owns that go
/// into a Failed state, such as when they are rejected by a node. A pod holding host port 21017 runs
/// on a node; a set of 1 whose pod asks for the same port on the same node (nodeName) is rejected
/// by that node's kubelet (NodePorts) — its pod MUST be deleted and recreated at least once; once
/// the conflicting pod is gone the set's pod MUST run, with a new UID.
async fn recreate_evicted(ctx: &Ctx) -> CaseResult {
    let node = ctx.schedulable_node().await?;
    let conflicting = json!({"hostPort": 21017, "containerPort": 21017, "name": "conflict"});
    let pod: Pod = from_json(json!({
        "metadata": {"name": "test-pod"},
        "spec": {"nodeName": node, "terminationGracePeriodSeconds": 1, "containers": [{
            "name": "webserver", "image": ctx.images().httpd(),
            "command": ["sh", "-c", SERVE], "ports": [conflicting],
        }]}
    }))?;
    let pods = ctx.api::<Pod>();
    pods.create(&PostParams::default(), &pod).await?;
    headless_service(ctx).await?;
    let mut set = new_set(ctx, "ss", 1, labels())?;
    if let Some(spec) = set.spec.as_mut().and_then(|s| s.template.spec.as_mut()) {
        spec.node_name = Some(node.clone());
        spec.containers[0].ports = Some(vec![from_json(conflicting)?]);
    }
    ctx.wait_running("test-pod").await?;
    // Watch ss-0 from before the set exists: note its UID in any state, until a delete is seen.
    let wp = WatchParams::default()
        .fields("metadata.name=ss-0")
        .timeout(290);
    let rv = pods
        .list_metadata(&ListParams::default())
        .await?
        .metadata
        .resource_version
        .unwrap_or_default();
    let mut events = Box::pin(pods.watch(&wp, &rv).await?);
    ctx.api::<StatefulSet>()
        .create(&PostParams::default(), &set)
        .await?;
    let mut first_uid = String::new();
    let deleted = tokio::time::timeout(SET_TIMEOUT, async {
        while let Some(ev) = events.try_next().await? {
            match ev {
                WatchEvent::Deleted(_) if !first_uid.is_empty() => {
                    return Ok::<bool, CaseError>(true)
                }
                WatchEvent::Added(p) | WatchEvent::Modified(p) => {
                    first_uid = p.metadata.uid.unwrap_or_default();
                }
                _ => {}
            }
        }
        Ok(false)
    })
    .await;
    must!(
        matches!(deleted, Ok(Ok(true))),
        "Pod ss-0 expected to be re-created at least once"
    );
    pods.delete("test-pod", &DeleteParams::default().grace_period(0))
        .await?;
    ctx.wait("ss-0 recreated and Running", SET_TIMEOUT, || async {
        let p = match pods.get_opt("ss-0").await? {
            Some(p) => p,
            None => return Ok(Err("ss-0 absent".to_string())),
        };
        let uid = p.metadata.uid.clone().unwrap_or_default();
        Ok(if phase(&p) == "Running" && uid != first_uid {
            Ok(())
        } else {
            Err(format!("phase {} uid {uid} (first {first_uid})", phase(&p)))
        })
    })
    .await
}
