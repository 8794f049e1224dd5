//! sig-apps ReplicationController entries, written from upstream's test/e2e/apps/rc.go: a basic
//! image served by each replica, adoption of a matching orphan, release of a pod that stops
//! matching, the scale subresource, and the lifecycle (create, status, patch, scale, update
//! status, list, delete collection) followed through a watch. Upstream's webserver (httpd) is
//! kiln's agnhost `pause` here, which stays up the same way; and the ReplicaFailure
//! condition an exceeded quota surfaces.

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::autoscaling::v1::Scale;
use k8s_openapi::api::core::v1::{Pod, ReplicationController};
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::Resource;
use serde::de::DeserializeOwned;
use serde_json::json;

use super::{case, Case};
use crate::ctx::{from_json, Ctx, POD_START};
use crate::error::{CaseError, CaseResult};
use crate::{must, must_eq};

pub const CASES: &[Case] = &[
    case!(
        "[sig-apps] ReplicationController should surface a failure condition on a common issue like exceeded quota [Conformance]",
        "replication-controller",
        exceeded_quota_condition
    ),
    case!(
        "[sig-apps] ReplicationController should serve a basic image on each replica with a public image [Conformance]",
        "replication-controller",
        serve_basic_image
    ),
    case!(
        "[sig-apps] ReplicationController should adopt matching pods on creation [Conformance]",
        "replication-controller",
        adopt_matching_pods
    ),
    case!(
        "[sig-apps] ReplicationController should release no longer matching pods [Conformance]",
        "replication-controller",
        release_pods
    ),
    case!(
        "[sig-apps] ReplicationController should get and update a ReplicationController scale [Conformance]",
        "replication-controller",
        scale_subresource
    ),
    case!(
        "[sig-apps] ReplicationController should test the lifecycle of a ReplicationController [Conformance]",
        "replication-controller",
        lifecycle
    ),
];

pub(super) const MINUTE: Duration = Duration::from_secs(60);

/// Five random lowercase letters or digits, for names upstream makes unique with a UUID.
pub(super) fn suffix() -> String {
    use rand::Rng;
    rand::rng()
        .sample_iter(rand::distr::Alphanumeric)
        .filter(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        .take(5)
        .map(char::from)
        .collect()
}

/// upstream's newRC: one container, terminationGracePeriodSeconds 0, the pods labelled (the
/// selector defaults to those labels). The agnhost subcommand goes in args as upstream's; the
/// command names /agnhost because the lab's image sets it as Cmd, not Entrypoint, so args alone
/// would replace it.
fn new_rc(
    name: &str,
    replicas: i32,
    labels: serde_json::Value,
    container: &str,
    image: &str,
    args: &[&str],
) -> CaseResult<ReplicationController> {
    from_json(json!({
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{"name": container, "image": image,
                        "command": ["/agnhost"], "args": args}]
                }
            }
        }
    }))
}

/// The webserver stand-in: agnhost's pause keeps running until it is stopped.
fn webserver(ctx: &Ctx) -> (String, Vec<&'static str>) {
    (ctx.images().agnhost(), vec!["pause"])
}

/// e2epod.PodsCreated: the controller's pods by their `name` label, once there are `replicas` of
/// them.
pub(super) async fn pods_created(ctx: &Ctx, name: &str, replicas: usize) -> CaseResult<Vec<Pod>> {
    let pods: Api<Pod> = ctx.api();
    let lp = ListParams::default().labels(&format!("name={name}"));
    ctx.wait(&format!("{replicas} pods of {name}"), MINUTE, || async {
        let list: Vec<Pod> = pods
            .list(&lp)
            .await?
            .items
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .collect();
        Ok(if list.len() == replicas {
            Ok(list)
        } else {
            Err(format!("{} pods", list.len()))
        })
    })
    .await
}

/// checkReplicationControllerStatusReplicaCount.
async fn wait_status_replicas(ctx: &Ctx, name: &str, want: i32) -> CaseResult {
    let rcs: Api<ReplicationController> = ctx.api();
    ctx.wait(
        &format!("status.replicas {want} of {name}"),
        MINUTE,
        || async {
            let rc = rcs.get(name).await?;
            let got = rc.status.as_ref().map(|s| s.replicas).unwrap_or(0);
            Ok(if got == want {
                Ok(())
            } else {
                Err(format!("status.replicas {got}"))
            })
        },
    )
    .await
}

/// Whether the object's controller reference names `uid`.
pub(super) fn controlled_by<K: Resource>(obj: &K, uid: &str) -> bool {
    obj.meta()
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true) && o.uid == uid)
}

/// Replication Controller, run basic image: the replica runs the image and answers on its port
/// with its own name (dialled from a client pod, as the apiserver's pod proxy is not served).
async fn serve_basic_image(ctx: &Ctx) -> CaseResult {
    let name = format!("my-hostname-basic-{}", suffix());
    let mut rc = new_rc(
        &name,
        1,
        json!({"name": name}),
        &name,
        &ctx.images().agnhost(),
        &["serve-hostname"],
    )?;
    if let Some(c) = rc
        .spec
        .as_mut()
        .and_then(|s| s.template.as_mut())
        .and_then(|t| t.spec.as_mut())
        .map(|s| &mut s.containers[0])
    {
        c.ports = Some(vec![from_json(json!({"containerPort": 9376}))?]);
    }
    ctx.api::<ReplicationController>()
        .create(&PostParams::default(), &rc)
        .await?;
    replicas_answer_with_their_names(ctx, &name, 1).await
}

/// testReplicationControllerServeImageOrFail / testReplicaSetServeImageOrFail after the
/// controller is created: its `replicas` pods (labelled `name`) run, and each answers on port
/// 9376 with its own name, dialled from a client pod as the apiserver's pod proxy is not served
/// (upstream's WaitForPodsResponding goes through it).
pub(super) async fn replicas_answer_with_their_names(
    ctx: &Ctx,
    name: &str,
    replicas: usize,
) -> CaseResult {
    let pods = pods_created(ctx, name, replicas).await?;
    let mut running = Vec::new();
    for p in &pods {
        running.push(
            ctx.wait_running(p.metadata.name.as_deref().unwrap_or_default())
                .await?,
        );
    }
    must_eq!(running.len(), replicas, "running replicas");
    let client: Pod = from_json(json!({
        "metadata": {"name": "client"},
        "spec": {"terminationGracePeriodSeconds": 0,
            "containers": [{"name": "client", "image": ctx.images().busybox(),
                "command": ["sleep", "3600"]}]}
    }))?;
    ctx.create_pod(&client).await?;
    ctx.wait_running("client").await?;
    for p in &running {
        let pod_name = p.metadata.name.clone().unwrap_or_default();
        let ip = p
            .status
            .as_ref()
            .and_then(|s| s.pod_ip.clone())
            .unwrap_or_default();
        let url = format!("http://{ip}:9376/");
        // busybox's nc, not its wget (which crashes in the lab's busybox image); stdin stays open
        // a moment, as nc stops reading once it ends.
        let request = format!("(printf 'GET / HTTP/1.0\\r\\n\\r\\n'; sleep 2) | nc -w 5 {ip} 9376");
        let answer = ctx
            .wait(
                &format!("{pod_name} to answer on {url}"),
                Duration::from_secs(120),
                || async {
                    Ok(
                        match ctx.exec("client", "client", &["sh", "-c", &request]).await {
                            Ok(out) => Ok(out),
                            Err(e) => Err(e.to_string()),
                        },
                    )
                },
            )
            .await?;
        let body = answer
            .split_once("\r\n\r\n")
            .map(|(_, b)| b)
            .unwrap_or(&answer);
        must_eq!(body.trim(), pod_name.as_str(), "the replica's answer");
    }
    Ok(())
}

/// Replication Controller, adopt matching pods: an orphan with the selector's labels is adopted
/// (or replaced).
async fn adopt_matching_pods(ctx: &Ctx) -> CaseResult {
    let name = "pod-adoption";
    let (image, args) = webserver(ctx);
    let pod: Pod = from_json(json!({
        "metadata": {"name": name, "labels": {"name": name}},
        "spec": {"containers": [{"name": name, "image": image,
            "command": ["/agnhost"], "args": args}]}
    }))?;
    ctx.create_pod(&pod).await?;
    ctx.wait_running(name).await?;
    let mut rc = new_rc(name, 1, json!({"name": name}), name, &image, &args)?;
    if let Some(s) = rc.spec.as_mut() {
        s.selector = Some([("name".to_string(), name.to_string())].into());
    }
    let rc = ctx
        .api::<ReplicationController>()
        .create(&PostParams::default(), &rc)
        .await?;
    let uid = rc.metadata.uid.clone().unwrap_or_default();
    let pods: Api<Pod> = ctx.api();
    ctx.wait("the orphan pod to be adopted", MINUTE, || async {
        Ok(match pods.get_opt(name).await? {
            None => Ok(()),
            Some(p) if controlled_by(&p, &uid) => Ok(()),
            Some(p) => Err(format!(
                "owner references {:?}",
                p.metadata.owner_references
            )),
        })
    })
    .await
}

/// Replication Controller, release pods: a pod whose labels stop matching loses its controller
/// reference.
async fn release_pods(ctx: &Ctx) -> CaseResult {
    let name = "pod-release";
    let (image, args) = webserver(ctx);
    let mut rc = new_rc(name, 1, json!({"name": name}), name, &image, &args)?;
    if let Some(s) = rc.spec.as_mut() {
        s.selector = Some([("name".to_string(), name.to_string())].into());
    }
    let rc = ctx
        .api::<ReplicationController>()
        .create(&PostParams::default(), &rc)
        .await?;
    let uid = rc.metadata.uid.clone().unwrap_or_default();
    let pod_name = pods_created(ctx, name, 1).await?[0]
        .metadata
        .name
        .clone()
        .unwrap_or_default();
    let pods: Api<Pod> = ctx.api();
    ctx.wait("relabelling the pod", MINUTE, || async {
        let mut p = pods.get(&pod_name).await?;
        p.metadata.labels = Some([("name".to_string(), "not-matching-name".to_string())].into());
        Ok(
            match pods.replace(&pod_name, &PostParams::default(), &p).await {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(s)) if s.code == 409 => Err("conflict".to_string()),
                Err(e) => return Err(e.into()),
            },
        )
    })
    .await?;
    ctx.wait("the pod to be released", MINUTE, || async {
        let p = pods.get(&pod_name).await?;
        Ok(if controlled_by(&p, &uid) {
            Err("still controlled by the RC")
        } else {
            Ok(())
        })
    })
    .await
}

/// Replication Controller, get and update scale: /scale reads the replicas and an unconditional
/// update changes them.
async fn scale_subresource(ctx: &Ctx) -> CaseResult {
    let name = format!("e2e-rc-{}", suffix());
    let (image, args) = webserver(ctx);
    let rcs: Api<ReplicationController> = ctx.api();
    let rc = new_rc(&name, 1, json!({"name": name}), "httpd", &image, &args)?;
    rcs.create(&PostParams::default(), &rc).await?;
    wait_status_replicas(ctx, &name, 1).await?;
    let mut scale: Scale = rcs.get_scale(&name).await?;
    must_eq!(
        scale.status.as_ref().map(|s| s.replicas),
        Some(1),
        "the scale's status.replicas"
    );
    scale.metadata.resource_version = None;
    scale.spec.get_or_insert_with(Default::default).replicas = Some(2);
    rcs.replace_scale(&name, &PostParams::default(), &scale)
        .await?;
    wait_status_replicas(ctx, &name, 2).await
}

/// A watch's events, boxed so a case can keep reading one stream across its steps.
pub(super) type Events<K> =
    std::pin::Pin<Box<dyn futures::Stream<Item = kube::Result<WatchEvent<K>>> + Send>>;

/// Upstream's ListWatch from a list's resourceVersion: `api`'s objects labelled `sel`, from now.
pub(super) async fn watch_labelled<K>(api: &Api<K>, sel: &str) -> CaseResult<Events<K>>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let rv = api
        .list(&ListParams::default().labels(sel))
        .await?
        .metadata
        .resource_version
        .unwrap_or_default();
    Ok(api
        .watch(&WatchParams::default().labels(sel), &rv)
        .await?
        .boxed())
}

/// watchUntilWithoutRetry: read the watch until `f` accepts an event.
pub(super) async fn until<K>(
    events: &mut Events<K>,
    what: &str,
    timeout: Duration,
    mut f: impl FnMut(&WatchEvent<K>) -> bool,
) -> CaseResult<K> {
    let found = tokio::time::timeout(timeout, async {
        while let Some(ev) = events.try_next().await? {
            if f(&ev) {
                return Ok::<_, CaseError>(Some(ev));
            }
        }
        Ok(None)
    })
    .await
    .map_err(|_| CaseError::Failed(format!("no watch event: {what}")))??;
    match found {
        Some(WatchEvent::Added(o) | WatchEvent::Modified(o) | WatchEvent::Deleted(o)) => Ok(o),
        _ => Err(CaseError::Failed(format!("the watch ended before {what}"))),
    }
}

fn counts(ev: &WatchEvent<ReplicationController>) -> Option<(i32, i32)> {
    match ev {
        WatchEvent::Added(rc) | WatchEvent::Modified(rc) => rc
            .status
            .as_ref()
            .map(|s| (s.replicas, s.ready_replicas.unwrap_or(0))),
        _ => None,
    }
}

pub(super) fn is_modified<K>(ev: &WatchEvent<K>) -> bool {
    matches!(ev, WatchEvent::Modified(_))
}

/// Replication Controller, lifecycle: created, read, patched (labels, status, scale), status
/// replaced, listed across namespaces and deleted by collection, each step seen on a watch.
async fn lifecycle(ctx: &Ctx) -> CaseResult {
    let name = "rc-test";
    let sel = "test-rc-static=true";
    let rcs: Api<ReplicationController> = ctx.api();
    let mut events = watch_labelled(&rcs, sel).await?;
    let rc: ReplicationController = from_json(json!({
        "metadata": {"name": name, "labels": {"test-rc-static": "true"}},
        "spec": {"replicas": 1, "selector": {"test-rc-static": "true"},
            "template": {"metadata": {"name": name, "labels": {"test-rc-static": "true"}},
                "spec": {"containers": [{"name": name, "image": ctx.images().agnhost(),
                    "command": ["/agnhost"], "args": ["pause"]}]}}}
    }))?;
    rcs.create(&PostParams::default(), &rc).await?;
    until(&mut events, "ADDED", MINUTE, |e| {
        matches!(e, WatchEvent::Added(_))
    })
    .await?;
    until(&mut events, "one ready replica", POD_START, |e| {
        counts(e) == Some((1, 1))
    })
    .await?;

    let patched = rcs
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Strategic(json!({"metadata": {"labels": {"test-rc": "patched"}}})),
        )
        .await?;
    must_eq!(
        patched
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("test-rc"))
            .map(String::as_str),
        Some("patched"),
        "the patched label"
    );
    until(
        &mut events,
        "MODIFIED after the label patch",
        MINUTE,
        is_modified,
    )
    .await?;

    let status = rcs
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Strategic(json!({"status": {"readyReplicas": 0, "availableReplicas": 0}})),
        )
        .await?;
    must_eq!(
        status
            .status
            .as_ref()
            .and_then(|s| s.ready_replicas)
            .unwrap_or(0),
        0,
        "status.readyReplicas after the status patch"
    );
    until(
        &mut events,
        "MODIFIED after the status patch",
        MINUTE,
        is_modified,
    )
    .await?;
    until(&mut events, "status.replicas 1", POD_START, |e| {
        counts(e).is_some_and(|(r, _)| r == 1)
    })
    .await?;
    let read = rcs.get_status(name).await?;
    must_eq!(
        read.status.as_ref().map(|s| s.replicas),
        Some(1),
        "status.replicas read from /status"
    );

    rcs.patch_scale(
        name,
        &PatchParams::default(),
        &Patch::Strategic(json!({"spec": {"replicas": 2}})),
    )
    .await?;
    until(
        &mut events,
        "MODIFIED after the scale patch",
        POD_START,
        is_modified,
    )
    .await?;
    until(&mut events, "two ready replicas", POD_START, |e| {
        counts(e) == Some((2, 2))
    })
    .await?;

    let mut rc = rcs.get(name).await?;
    must_eq!(
        rc.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("test-rc"))
            .map(String::as_str),
        Some("patched"),
        "the label from the earlier patch"
    );
    if let Some(s) = rc.status.as_mut() {
        s.available_replicas = Some(1);
        s.ready_replicas = Some(1);
    }
    rcs.replace_status(name, &PostParams::default(), &rc)
        .await?;
    until(
        &mut events,
        "MODIFIED after the status update",
        MINUTE,
        is_modified,
    )
    .await?;

    let all: Api<ReplicationController> = Api::all(ctx.client.clone());
    let listed = all.list(&ListParams::default().labels(sel)).await?.items;
    must!(
        listed
            .iter()
            .any(|r| r.metadata.name.as_deref() == Some(name)
                && r.metadata.namespace.as_deref() == Some(ctx.ns.as_str())
                && r.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get("test-rc"))
                    .map(String::as_str)
                    == Some("patched")),
        "no ReplicationController {name} with both labels in the list across namespaces"
    );

    rcs.delete_collection(&DeleteParams::default(), &ListParams::default().labels(sel))
        .await?;
    until(&mut events, "DELETED", MINUTE, |e| {
        matches!(e, WatchEvent::Deleted(_))
    })
    .await?;
    Ok(())
}

fn replica_failure(rc: &ReplicationController) -> Option<String> {
    rc.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "ReplicaFailure"))
        .map(|c| {
            format!(
                "{} {}",
                c.reason.as_deref().unwrap_or(""),
                c.message.as_deref().unwrap_or("")
            )
        })
}

/// ReplicationController, exceeded quota: with a quota allowing two pods (its status.hard MUST be
/// calculated), an RC asking for three MUST get a ReplicaFailure condition; scaled down to two, the
/// condition MUST be cleared once the controller observed that generation.
async fn exceeded_quota_condition(ctx: &Ctx) -> CaseResult {
    use k8s_openapi::api::core::v1::ResourceQuota;
    let name = "condition-test";
    let quota: ResourceQuota = from_json(json!({"metadata": {"name": name},
        "spec": {"hard": {"pods": "2"}}}))?;
    let quotas = ctx.api::<ResourceQuota>();
    quotas.create(&PostParams::default(), &quota).await?;
    ctx.wait(
        "the quota's status.hard pods=2",
        Duration::from_secs(60),
        || async {
            let q = quotas.get(name).await?;
            let hard = q
                .status
                .and_then(|s| s.hard)
                .and_then(|h| h.get("pods").map(|p| p.0.clone()));
            Ok(if hard.as_deref() == Some("2") {
                Ok(())
            } else {
                Err(format!("{hard:?}"))
            })
        },
    )
    .await?;
    let (image, args) = webserver(ctx);
    let rc = new_rc(name, 3, json!({"name": name}), name, &image, &args)?;
    let rcs = ctx.api::<ReplicationController>();
    rcs.create(&PostParams::default(), &rc).await?;
    ctx.wait(
        "a ReplicaFailure condition",
        Duration::from_secs(60),
        || async {
            let rc = rcs.get(name).await?;
            Ok(replica_failure(&rc).ok_or_else(|| format!("{:?}", rc.status)))
        },
    )
    .await?;
    rcs.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 2}})),
    )
    .await?;
    ctx.wait(
        "the ReplicaFailure condition cleared",
        Duration::from_secs(60),
        || async {
            let rc = rcs.get(name).await?;
            let observed = rc
                .status
                .as_ref()
                .and_then(|s| s.observed_generation)
                .unwrap_or(0);
            let generation = rc.metadata.generation.unwrap_or(0);
            Ok(match replica_failure(&rc) {
                None if generation <= observed => Ok(()),
                cond => Err(format!(
                    "generation {generation}, observed {observed}, condition {cond:?}"
                )),
            })
        },
    )
    .await
}
