//! sig-apps DaemonSet entries, written from upstream's test/e2e/apps/daemon_set.go and
//! controller_revision.go. The basic ones: a daemon pod on every node, replaced when deleted or
//! Failed; pods following a node selector as node labels and the template change; the status
//! subresource; list and deletecollection. Those that rest on ControllerRevisions: a RollingUpdate
//! of the image (history revision 1 → 2, pods labelled with the current revision's hash), a roll
//! back in the middle of a rollout that restarts none of the pods still on the old template, and
//! the ControllerRevision lifecycle (patch, create, delete, update, a hash collision the controller
//! resolves, delete collection, revision 3). Upstream's webserver and agnhost images are busybox
//! and agnhost here, both running the same shell loop, so only the image changes.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet, DaemonSetCondition};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent};
use serde_json::json;

use super::replication::{until, watch_labelled};
use super::{case, Case};
use crate::ctx::{from_json, is_ready, phase, Ctx};
use crate::error::{CaseError, CaseResult};
use crate::{must, must_eq};

pub const CASES: &[Case] = &[
    case!(
        "[sig-apps] Daemon set [Serial] should run and stop simple daemon [Conformance]",
        "daemonsets",
        simple_daemon
    ),
    case!(
        "[sig-apps] Daemon set [Serial] should run and stop complex daemon [Conformance]",
        "daemonsets",
        complex_daemon
    ),
    case!(
        "[sig-apps] Daemon set [Serial] should retry creating failed daemon pods [Conformance]",
        "daemonsets",
        retry_failed_pods
    ),
    case!(
        "[sig-apps] Daemon set [Serial] should verify changes to a daemon set status [Conformance]",
        "daemonsets",
        status_subresource
    ),
    case!(
        "[sig-apps] Daemon set [Serial] should list and delete a collection of DaemonSets [Conformance]",
        "daemonsets",
        list_and_delete_collection
    ),
    case!(
        "[sig-apps] Daemon set [Serial] should update pod when spec was updated and update strategy is RollingUpdate [Conformance]",
        "daemonsets",
        rolling_update
    ),
    case!(
        "[sig-apps] Daemon set [Serial] should rollback without unnecessary restarts [Conformance]",
        "daemonsets",
        rollback
    ),
    case!(
        "[sig-apps] ControllerRevision [Serial] should manage the lifecycle of a ControllerRevision [Conformance]",
        "controllerrevisions",
        controller_revision_lifecycle
    ),
];

/// upstream's dsRetryTimeout.
const DS_TIMEOUT: Duration = Duration::from_secs(300);
const NAME_LABEL: &str = "daemonset-name";
const HASH_LABEL: &str = "controller-revision-hash";
/// Stays up in busybox and in agnhost (packed on busybox); ends at once on SIGTERM.
const LOOP: &str = "trap 'exit 0' TERM; while true; do sleep 1; done";

/// Taint keys every daemon pod tolerates (upstream's AddOrUpdateDaemonPodTolerations).
const DAEMON_TOLERATED: &[&str] = &[
    "node.kubernetes.io/not-ready",
    "node.kubernetes.io/unreachable",
    "node.kubernetes.io/disk-pressure",
    "node.kubernetes.io/memory-pressure",
    "node.kubernetes.io/pid-pressure",
    "node.kubernetes.io/unschedulable",
];

fn new_daemonset(name: &str, image: &str, looped: bool) -> CaseResult<DaemonSet> {
    let mut container = json!({"name": "app", "image": image, "ports": [{"containerPort": 9376}]});
    if looped {
        container["command"] = json!(["sh", "-c", LOOP]);
    } else {
        // The lab's agnhost image sets /agnhost as Cmd, not Entrypoint: name it.
        container["command"] = json!(["/agnhost"]);
        container["args"] = json!(["pause"]);
    }
    // newDaemonSetWithLabel: the set carries the pods' label too (the lifecycle lists by it).
    from_json(json!({
        "metadata": {"name": name, "labels": {NAME_LABEL: name}},
        "spec": {
            "selector": {"matchLabels": {NAME_LABEL: name}},
            "updateStrategy": {"type": "RollingUpdate"},
            "template": {
                "metadata": {"labels": {NAME_LABEL: name}},
                "spec": {"containers": [container]}
            }
        }
    }))
}

fn sel(name: &str) -> ListParams {
    ListParams::default().labels(&format!("{NAME_LABEL}={name}"))
}

/// schedulableNodes: nodes whose NoSchedule/NoExecute taints a daemon pod tolerates.
async fn daemon_nodes(ctx: &Ctx) -> CaseResult<BTreeSet<String>> {
    let nodes = ctx.all::<Node>().list(&ListParams::default()).await?.items;
    Ok(nodes
        .into_iter()
        .filter(|n| {
            n.spec
                .as_ref()
                .and_then(|s| s.taints.as_ref())
                .into_iter()
                .flatten()
                .filter(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
                .all(|t| DAEMON_TOLERATED.contains(&t.key.as_str()))
        })
        .filter_map(|n| n.metadata.name)
        .collect())
}

async fn own_pods(ctx: &Ctx, ds: &DaemonSet) -> CaseResult<Vec<Pod>> {
    let uid = ds.metadata.uid.clone().unwrap_or_default();
    Ok(ctx
        .api::<Pod>()
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|p| {
            p.metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.controller == Some(true) && o.uid == uid)
        })
        .collect())
}

fn node_of(p: &Pod) -> String {
    p.spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .unwrap_or_default()
}

fn image_of(p: &Pod) -> String {
    p.spec
        .as_ref()
        .and_then(|s| s.containers.first())
        .and_then(|c| c.image.clone())
        .unwrap_or_default()
}

/// checkRunningOnAllNodes: exactly one available (ready) pod on every daemon node, none elsewhere.
async fn running_on_all_nodes(ctx: &Ctx, ds: &DaemonSet) -> CaseResult {
    let nodes = daemon_nodes(ctx).await?;
    pods_on_nodes(ctx, ds, &nodes).await
}

/// CheckDaemonPodOnNodes: exactly one available pod of the set on each of `nodes` and none on any
/// other node. Pods being deleted do not count, nor (unlike upstream, whose check reads the Ready
/// condition only) pods that ended: a pod whose phase was set to Failed is no daemon pod any more.
async fn pods_on_nodes(ctx: &Ctx, ds: &DaemonSet, nodes: &BTreeSet<String>) -> CaseResult {
    let what = if nodes.is_empty() {
        "no daemon pod on any node".to_string()
    } else {
        format!("a ready daemon pod on each of {nodes:?} only")
    };
    ctx.wait(&what, DS_TIMEOUT, || async {
        let mut per_node: BTreeMap<String, usize> = BTreeMap::new();
        for p in own_pods(ctx, ds).await? {
            let ended = matches!(phase(&p), "Failed" | "Succeeded");
            if p.metadata.deletion_timestamp.is_none() && !ended && is_ready(&p) {
                *per_node.entry(node_of(&p)).or_default() += 1;
            }
        }
        let ok = per_node.len() == nodes.len() && nodes.iter().all(|n| per_node.get(n) == Some(&1));
        Ok(if ok {
            Ok(())
        } else {
            Err(format!("ready pods per node {per_node:?}"))
        })
    })
    .await
}

/// CheckDaemonStatus: desiredNumberScheduled equals currentNumberScheduled or numberReady. Upstream
/// reads it once; kiln's status follows the pods' events a moment later, so the consistency is
/// given a short while to show.
async fn daemon_status(ctx: &Ctx, name: &str) -> CaseResult<DaemonSet> {
    let dss: Api<DaemonSet> = ctx.api();
    ctx.wait(
        "a consistent daemon status",
        Duration::from_secs(30),
        || async {
            let ds = dss.get(name).await?;
            let s = ds.status.clone().unwrap_or_default();
            Ok(
                if s.desired_number_scheduled == s.current_number_scheduled
                    || s.desired_number_scheduled == s.number_ready
                {
                    Ok(ds)
                } else {
                    Err(format!(
                        "desired {}, current {}, ready {}",
                        s.desired_number_scheduled, s.current_number_scheduled, s.number_ready
                    ))
                },
            )
        },
    )
    .await
}

/// checkDaemonPodsImageAndAvailability: every daemon node has a pod with `image`, and never more
/// than `max_unavailable` of the set's pods are unavailable.
async fn images_updated(
    ctx: &Ctx,
    ds: &DaemonSet,
    image: &str,
    max_unavailable: usize,
) -> CaseResult {
    let nodes = daemon_nodes(ctx).await?;
    ctx.wait(
        &format!("every daemon pod on {image}"),
        DS_TIMEOUT * 2,
        || async {
            let pods = own_pods(ctx, ds).await?;
            let unavailable = pods.iter().filter(|p| !is_ready(p)).count();
            if unavailable > max_unavailable {
                return Err(CaseError::Failed(format!(
                    "{unavailable} unavailable pods, more than maxUnavailable {max_unavailable}"
                )));
            }
            let updated: BTreeSet<String> = pods
                .iter()
                .filter(|p| image_of(p) == image)
                .map(node_of)
                .collect();
            Ok(if nodes.iter().all(|n| updated.contains(n)) {
                Ok(())
            } else {
                Err(format!("nodes with {image}: {updated:?} of {nodes:?}"))
            })
        },
    )
    .await
}

/// The revision that records the set's current template (curHistory): the one the set's
/// pods are labelled for, the highest-numbered if several.
async fn current_revision(ctx: &Ctx, name: &str, count: usize) -> CaseResult<ControllerRevision> {
    let revs: Api<ControllerRevision> = ctx.api();
    let list = ctx
        .wait(
            &format!("{count} controllerrevisions"),
            DS_TIMEOUT,
            || async {
                let items = revs.list(&sel(name)).await?.items;
                Ok(if items.len() == count {
                    Ok(items)
                } else {
                    Err(format!("{} controllerrevisions", items.len()))
                })
            },
        )
        .await?;
    list.into_iter()
        .max_by_key(|r| r.revision)
        .ok_or_else(|| CaseError::Failed("no controllerrevision".into()))
}

fn hash_of_revision(r: &ControllerRevision) -> String {
    r.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(HASH_LABEL))
        .cloned()
        .unwrap_or_default()
}

/// checkDaemonSetPodsLabels.
async fn pods_labelled(ctx: &Ctx, name: &str, hash: &str) -> CaseResult {
    let pods = ctx.api::<Pod>().list(&sel(name)).await?.items;
    must!(!pods.is_empty(), "no daemon pods");
    for p in pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
    {
        let got = p
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(HASH_LABEL))
            .cloned()
            .unwrap_or_default();
        must_eq!(
            got.as_str(),
            hash,
            "the {HASH_LABEL} of pod {:?}",
            p.metadata.name
        );
    }
    Ok(())
}

/// DaemonSet-RollingUpdate: a new image rolls out to every node; the history holds revision 2,
/// whose hash labels the pods.
async fn rolling_update(ctx: &Ctx) -> CaseResult {
    let name = "daemon-set";
    let dss: Api<DaemonSet> = ctx.api();
    let ds = dss
        .create(
            &PostParams::default(),
            &new_daemonset(name, &ctx.images().busybox(), true)?,
        )
        .await?;
    running_on_all_nodes(ctx, &ds).await?;
    let cur = current_revision(ctx, name, 1).await?;
    must_eq!(cur.revision, 1, "the first revision's number");
    pods_labelled(ctx, name, &hash_of_revision(&cur)).await?;

    let new_image = ctx.images().agnhost();
    let patch = json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "image": new_image}]}}}});
    let ds = dss
        .patch(name, &PatchParams::default(), &Patch::Strategic(patch))
        .await?;
    images_updated(ctx, &ds, &new_image, 1).await?;
    running_on_all_nodes(ctx, &ds).await?;
    let cur = current_revision(ctx, name, 2).await?;
    must_eq!(cur.revision, 2, "the updated revision's number");
    pods_labelled(ctx, name, &hash_of_revision(&cur)).await
}

/// updateDaemonSetWithRetries for the first container's image.
async fn set_image(ctx: &Ctx, name: &str, image: &str) -> CaseResult<DaemonSet> {
    let dss: Api<DaemonSet> = ctx.api();
    ctx.wait("the DaemonSet update", Duration::from_secs(60), || async {
        let mut ds = dss.get(name).await?;
        if let Some(c) = ds
            .spec
            .as_mut()
            .and_then(|s| s.template.spec.as_mut())
            .and_then(|s| s.containers.first_mut())
        {
            c.image = Some(image.to_string());
        }
        Ok(match dss.replace(name, &PostParams::default(), &ds).await {
            Ok(ds) => Ok(ds),
            Err(kube::Error::Api(s)) if s.code == 409 => Err("conflict".to_string()),
            Err(e) => return Err(e.into()),
        })
    })
    .await
}

/// DaemonSet-Rollback: roll out an image that cannot be pulled, roll back before it finishes;
/// the pods that never left the old template MUST still be there afterwards.
async fn rollback(ctx: &Ctx) -> CaseResult {
    let name = "daemon-set";
    let nodes = daemon_nodes(ctx).await?;
    must!(
        nodes.len() > 1,
        "the case needs at least 2 nodes that run daemon pods, found {nodes:?}"
    );
    let image = ctx.images().busybox();
    let ds = ctx
        .api::<DaemonSet>()
        .create(&PostParams::default(), &new_daemonset(name, &image, true)?)
        .await?;
    running_on_all_nodes(ctx, &ds).await?;

    let new_image = "foo:non-existent";
    set_image(ctx, name, new_image).await?;
    ctx.wait("a pod with the new image", DS_TIMEOUT, || async {
        let pods = own_pods(ctx, &ds).await?;
        Ok(if pods.iter().any(|p| image_of(p) == new_image) {
            Ok(())
        } else {
            Err("none yet")
        })
    })
    .await?;
    let mut existing = Vec::new();
    let mut fresh = 0;
    for p in own_pods(ctx, &ds).await? {
        match image_of(&p) {
            i if i == image => existing.extend(p.metadata.name.clone()),
            i if i == new_image => fresh += 1,
            other => return Err(CaseError::Failed(format!("unexpected pod image {other}"))),
        }
    }
    must!(
        !existing.is_empty(),
        "no pod left on the old image mid-rollout"
    );
    must!(fresh > 0, "no pod on the new image");

    let rolled_back = set_image(ctx, name, &image).await?;
    images_updated(ctx, &rolled_back, &image, 1).await?;
    let now: BTreeSet<String> = own_pods(ctx, &ds)
        .await?
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .collect();
    for p in &existing {
        must!(now.contains(p), "pod {p} was restarted by the roll back");
    }
    Ok(())
}

async fn revision_count(ctx: &Ctx, selector: &str, want: usize) -> CaseResult {
    let revs: Api<ControllerRevision> = ctx.api();
    let lp = ListParams::default().labels(selector);
    ctx.wait(
        &format!("{want} controllerrevisions"),
        Duration::from_secs(60),
        || async {
            let n = revs.list(&lp).await?.items.len();
            Ok(if n == want {
                Ok(())
            } else {
                Err(format!("{n} controllerrevisions"))
            })
        },
    )
    .await
}

/// ControllerRevision, resource lifecycle.
async fn controller_revision_lifecycle(ctx: &Ctx) -> CaseResult {
    let name = format!("e2e-{}-daemon-set", &ctx.ns[ctx.ns.len() - 5..]);
    let selector = format!("{NAME_LABEL}={name}");
    let dss: Api<DaemonSet> = ctx.api();
    let created = dss
        .create(
            &PostParams::default(),
            &new_daemonset(&name, &ctx.images().agnhost(), false)?,
        )
        .await?;
    running_on_all_nodes(ctx, &created).await?;
    let ds = daemon_status(ctx, &name).await?;
    let listed = Api::<DaemonSet>::all(ctx.client.clone())
        .list(&ListParams::default().labels(&selector))
        .await?
        .items;
    must_eq!(
        listed.len(),
        1,
        "DaemonSets listed by label across namespaces"
    );

    let all_revs: Api<ControllerRevision> = Api::all(ctx.client.clone());
    let revs = all_revs
        .list(&ListParams::default().labels(&selector))
        .await?
        .items;
    must_eq!(revs.len(), 1, "controllerrevisions across namespaces");
    let owner = revs[0]
        .metadata
        .owner_references
        .clone()
        .unwrap_or_default();
    must!(
        owner
            .first()
            .is_some_and(|o| o.kind == "DaemonSet" && Some(&o.uid) == ds.metadata.uid.as_ref()),
        "the revision is not owned by the DaemonSet: {owner:?}"
    );
    let revs_api: Api<ControllerRevision> = ctx.api();
    let initial = revs_api
        .get(revs[0].metadata.name.as_deref().unwrap_or_default())
        .await?;
    let initial_name = initial.metadata.name.clone().unwrap_or_default();

    let patched = revs_api
        .patch(
            &initial_name,
            &PatchParams::default(),
            &Patch::Strategic(json!({"metadata": {"labels": {initial_name.clone(): "patched"}}})),
        )
        .await?;
    must_eq!(
        patched
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(&initial_name))
            .map(String::as_str),
        Some("patched"),
        "the patched label"
    );

    // A revision made by hand holding the current data, numbered after the controller's.
    // (Upstream names it with the hash the controller would give the template patched below,
    // ComputeHash over Go's spew dump; kiln's hash is its own, so the name is plain here.)
    let made_name = format!("{name}-byhand");
    let mut labels = ds
        .spec
        .as_ref()
        .and_then(|s| s.template.metadata.as_ref())
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    labels.insert(HASH_LABEL.into(), "byhand".into());
    let made: ControllerRevision = from_json(json!({
        "metadata": {"name": made_name, "labels": labels,
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": name,
                "uid": ds.metadata.uid, "controller": true, "blockOwnerDeletion": true}]},
        "data": initial.data,
        "revision": initial.revision + 1,
    }))?;
    revs_api.create(&PostParams::default(), &made).await?;
    revision_count(ctx, &selector, 2).await?;

    revs_api
        .delete(&initial_name, &DeleteParams::default())
        .await?;
    revision_count(ctx, &selector, 1).await?;
    let current = revs_api.list(&ListParams::default()).await?.items;
    let current_name = current
        .first()
        .and_then(|r| r.metadata.name.clone())
        .unwrap_or_default();
    let updated = ctx
        .wait("the revision update", Duration::from_secs(60), || async {
            let mut r = revs_api.get(&current_name).await?;
            r.metadata
                .labels
                .get_or_insert_with(Default::default)
                .insert(current_name.clone(), "updated".into());
            Ok(
                match revs_api
                    .replace(&current_name, &PostParams::default(), &r)
                    .await
                {
                    Ok(r) => Ok(r),
                    Err(kube::Error::Api(s)) if s.code == 409 => Err("conflict".to_string()),
                    Err(e) => return Err(e.into()),
                },
            )
        })
        .await?;
    must_eq!(
        updated
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(&current_name))
            .map(String::as_str),
        Some("updated"),
        "the updated label"
    );

    let patch = json!({"spec": {"template": {"spec": {"terminationGracePeriodSeconds": 1}}}});
    dss.patch(&name, &PatchParams::default(), &Patch::Strategic(patch))
        .await?;
    revision_count(ctx, &selector, 2).await?;
    let lp = ListParams::default().labels(&format!("{current_name}=updated"));
    revs_api
        .delete_collection(&DeleteParams::default(), &lp)
        .await?;
    revision_count(ctx, &selector, 1).await?;
    let list = revs_api.list(&ListParams::default()).await?.items;
    must_eq!(
        list.first().map(|r| r.revision),
        Some(3),
        "the current revision's number"
    );
    Ok(())
}

/// Upstream's `daemonset-` prefix: the node labels the DaemonSet entries set, and clear.
const NODE_LABEL_PREFIX: &str = "daemonset-";
const COLOR_LABEL: &str = "daemonset-color";

/// newDaemonSet: the set of `new_daemonset` without labels of its own and with the default update
/// strategy (RollingUpdate), as upstream's basic entries create it.
fn plain_daemonset(name: &str, image: &str) -> CaseResult<DaemonSet> {
    let mut ds = new_daemonset(name, image, true)?;
    ds.metadata.labels = None;
    if let Some(spec) = ds.spec.as_mut() {
        spec.update_strategy = None;
    }
    Ok(ds)
}

/// setDaemonSetNodeLabels: the node's `daemonset-` labels become exactly `labels`; the updated node
/// MUST carry them all.
async fn set_node_labels(
    ctx: &Ctx,
    node: &str,
    labels: &BTreeMap<String, String>,
) -> CaseResult<Node> {
    let nodes = ctx.all::<Node>();
    let current = nodes.get(node).await?;
    let mut patch = serde_json::Map::new();
    for key in current.metadata.labels.iter().flatten().map(|(k, _)| k) {
        if key.starts_with(NODE_LABEL_PREFIX) && !labels.contains_key(key) {
            patch.insert(key.clone(), serde_json::Value::Null);
        }
    }
    for (k, v) in labels {
        patch.insert(k.clone(), json!(v));
    }
    let updated = nodes
        .patch(
            node,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": patch}})),
        )
        .await?;
    let set: BTreeMap<String, String> = updated
        .metadata
        .labels
        .clone()
        .unwrap_or_default()
        .into_iter()
        .filter(|(k, _)| k.starts_with(NODE_LABEL_PREFIX))
        .collect();
    must_eq!(&set, labels, "the daemonset- labels of node {node}");
    Ok(updated)
}

/// clearDaemonSetNodeLabels: no node keeps a `daemonset-` label.
async fn clear_node_labels(ctx: &Ctx) -> CaseResult {
    for node in ctx.all::<Node>().list(&ListParams::default()).await?.items {
        let has = node
            .metadata
            .labels
            .iter()
            .flatten()
            .any(|(k, _)| k.starts_with(NODE_LABEL_PREFIX));
        if has {
            let name = node.metadata.name.unwrap_or_default();
            set_node_labels(ctx, &name, &BTreeMap::new()).await?;
        }
    }
    Ok(())
}

/// DaemonSet-Creation: a DaemonSet MUST be created and run a pod on every node; a deleted daemon
/// pod MUST be replaced.
async fn simple_daemon(ctx: &Ctx) -> CaseResult {
    let name = "daemon-set";
    let ds = ctx
        .api::<DaemonSet>()
        .create(
            &PostParams::default(),
            &plain_daemonset(name, &ctx.images().busybox())?,
        )
        .await?;
    running_on_all_nodes(ctx, &ds).await?;
    daemon_status(ctx, name).await?;

    let pods: Api<Pod> = ctx.api();
    let listed = pods.list(&sel(name)).await?.items;
    let victim = listed
        .first()
        .and_then(|p| p.metadata.name.clone())
        .ok_or_else(|| CaseError::Failed("no daemon pods listed by the set's label".into()))?;
    pods.delete(&victim, &DeleteParams::default()).await?;
    running_on_all_nodes(ctx, &ds).await?;
    let live: BTreeSet<String> = own_pods(ctx, &ds)
        .await?
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| p.metadata.name)
        .collect();
    must!(
        !live.contains(&victim),
        "the deleted pod {victim} is still the daemon pod of its node"
    );
    Ok(())
}

/// DaemonSet-NodeSelection: daemon pods MUST run exactly on the nodes the template's node selector
/// picks, following node label changes and a change of the selector.
async fn complex_daemon(ctx: &Ctx) -> CaseResult {
    clear_node_labels(ctx).await?;
    let result = complex_daemon_steps(ctx).await;
    // Upstream's AfterEach: no node keeps the labels, whatever the outcome.
    let cleared = clear_node_labels(ctx).await;
    result.and(cleared)
}

async fn complex_daemon_steps(ctx: &Ctx) -> CaseResult {
    let name = "daemon-set";
    let blue = BTreeMap::from([(COLOR_LABEL.to_string(), "blue".to_string())]);
    let mut ds = plain_daemonset(name, &ctx.images().busybox())?;
    if let Some(spec) = ds.spec.as_mut().and_then(|s| s.template.spec.as_mut()) {
        spec.node_selector = Some(blue.clone());
    }
    let ds = ctx
        .api::<DaemonSet>()
        .create(&PostParams::default(), &ds)
        .await?;
    pods_on_nodes(ctx, &ds, &BTreeSet::new()).await?;

    let node = ctx.schedulable_node().await?;
    set_node_labels(ctx, &node, &blue).await?;
    let only = BTreeSet::from([node.clone()]);
    pods_on_nodes(ctx, &ds, &only).await?;
    daemon_status(ctx, name).await?;

    let green = BTreeMap::from([(COLOR_LABEL.to_string(), "green".to_string())]);
    set_node_labels(ctx, &node, &green).await?;
    pods_on_nodes(ctx, &ds, &BTreeSet::new()).await?;

    let patch = json!({"spec": {
        "template": {"spec": {"nodeSelector": {COLOR_LABEL: "green"}}},
        "updateStrategy": {"type": "RollingUpdate"},
    }});
    let ds = ctx
        .api::<DaemonSet>()
        .patch(name, &PatchParams::default(), &Patch::Strategic(patch))
        .await?;
    pods_on_nodes(ctx, &ds, &only).await?;
    daemon_status(ctx, name).await?;
    Ok(())
}

/// DaemonSet-FailedPodCreation: a daemon pod whose phase is set to Failed MUST be replaced (and the
/// failed one deleted).
async fn retry_failed_pods(ctx: &Ctx) -> CaseResult {
    let name = "daemon-set";
    let ds = ctx
        .api::<DaemonSet>()
        .create(
            &PostParams::default(),
            &plain_daemonset(name, &ctx.images().busybox())?,
        )
        .await?;
    running_on_all_nodes(ctx, &ds).await?;
    daemon_status(ctx, name).await?;

    let pods: Api<Pod> = ctx.api();
    let mut pod = pods
        .list(&sel(name))
        .await?
        .items
        .into_iter()
        .next()
        .ok_or_else(|| CaseError::Failed("no daemon pods listed by the set's label".into()))?;
    let pod_name = pod.metadata.name.clone().unwrap_or_default();
    // An unconditional status write, as upstream clears the resourceVersion.
    pod.metadata.resource_version = None;
    pod.status.get_or_insert_with(Default::default).phase = Some("Failed".into());
    pods.replace_status(&pod_name, &PostParams::default(), &pod)
        .await?;
    running_on_all_nodes(ctx, &ds).await?;
    ctx.wait(
        &format!("the failed daemon pod {pod_name} deleted"),
        DS_TIMEOUT,
        || async {
            Ok(match pods.get_opt(&pod_name).await? {
                None => Ok(()),
                Some(p) => Err(format!("phase {}", phase(&p))),
            })
        },
    )
    .await?;
    // The node of the failed pod MUST have its replacement.
    running_on_all_nodes(ctx, &ds).await
}

fn has_condition(ds: &DaemonSet, f: impl Fn(&DaemonSetCondition) -> bool) -> bool {
    ds.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(f))
}

fn is_ours(ds: &DaemonSet, ns: &str, name: &str) -> bool {
    ds.metadata.name.as_deref() == Some(name)
        && ds.metadata.namespace.as_deref() == Some(ns)
        && ds
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(NAME_LABEL))
            .is_some_and(|v| v == name)
}

/// DaemonSet, status sub-resource: the status MUST be read; a condition added by an update of
/// /status and one set by a patch of /status MUST each show in the answer and on a watch.
async fn status_subresource(ctx: &Ctx) -> CaseResult {
    let name = "daemon-set";
    let selector = format!("{NAME_LABEL}={name}");
    let dss: Api<DaemonSet> = ctx.api();
    let mut events = watch_labelled(&dss, &selector).await?;
    let ds = dss
        .create(
            &PostParams::default(),
            &new_daemonset(name, &ctx.images().busybox(), true)?,
        )
        .await?;
    running_on_all_nodes(ctx, &ds).await?;
    daemon_status(ctx, name).await?;

    let read = dss.get_status(name).await?;
    must_eq!(
        read.metadata.uid,
        ds.metadata.uid,
        "the uid of the DaemonSet read through /status"
    );

    let update_cond = |c: &DaemonSetCondition| {
        c.type_ == "StatusUpdate"
            && c.reason.as_deref() == Some("E2E")
            && c.message.as_deref() == Some("Set from e2e test")
    };
    let updated = ctx
        .wait("the /status update", Duration::from_secs(60), || async {
            let mut ds = dss.get(name).await?;
            ds.status
                .get_or_insert_with(Default::default)
                .conditions
                .get_or_insert_with(Vec::new)
                .push(from_json(json!({
                    "type": "StatusUpdate", "status": "True",
                    "reason": "E2E", "message": "Set from e2e test",
                }))?);
            Ok(
                match dss.replace_status(name, &PostParams::default(), &ds).await {
                    Ok(ds) => Ok(ds),
                    Err(kube::Error::Api(s)) if s.code == 409 => Err("conflict".to_string()),
                    Err(e) => return Err(e.into()),
                },
            )
        })
        .await?;
    must!(
        has_condition(&updated, update_cond),
        "the /status update's answer lacks the StatusUpdate condition: {:?}",
        updated.status.as_ref().map(|s| &s.conditions)
    );
    let ns = ctx.ns.clone();
    until(&mut events, "the StatusUpdate condition", DS_TIMEOUT, |e| {
        matches!(e, WatchEvent::Added(d) | WatchEvent::Modified(d)
            if is_ours(d, &ns, name) && has_condition(d, update_cond))
    })
    .await?;

    let patched = dss
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"status": {"conditions": [{"type": "StatusPatched", "status": "True"}]}}),
            ),
        )
        .await?;
    let patch_cond = |c: &DaemonSetCondition| c.type_ == "StatusPatched";
    must!(
        has_condition(&patched, patch_cond),
        "the /status patch's answer lacks the StatusPatched condition: {:?}",
        patched.status.as_ref().map(|s| &s.conditions)
    );
    until(
        &mut events,
        "the StatusPatched condition",
        DS_TIMEOUT,
        |e| {
            matches!(e, WatchEvent::Added(d) | WatchEvent::Modified(d)
            if is_ours(d, &ns, name) && has_condition(d, patch_cond))
        },
    )
    .await?;
    Ok(())
}

/// DaemonSets labelled `selector` in all namespaces. Earlier [Serial] entries made DaemonSets of the
/// same name and label in namespaces that are still being deleted (kiln-conformance does not wait
/// for a case's namespace to go): the count is read once those are gone.
async fn count_everywhere(ctx: &Ctx, selector: &str, want: usize, what: &str) -> CaseResult {
    let all: Api<DaemonSet> = Api::all(ctx.client.clone());
    let lp = ListParams::default().labels(selector);
    ctx.wait(what, DS_TIMEOUT, || async {
        let items = all.list(&lp).await?.items;
        let others: Vec<String> = items
            .iter()
            .filter(|d| d.metadata.namespace.as_deref() != Some(ctx.ns.as_str()))
            .filter_map(|d| d.metadata.namespace.clone())
            .collect();
        let ours = items.len() - others.len();
        Ok(if items.len() == want && ours == want {
            Ok(())
        } else {
            Err(format!(
                "{ours} listed in the case's namespace, others in {others:?}"
            ))
        })
    })
    .await
}

/// DaemonSet, list and delete a collection: the DaemonSet MUST be created, MUST be listed across
/// namespaces by its label, and MUST be gone after a deletecollection by that label.
async fn list_and_delete_collection(ctx: &Ctx) -> CaseResult {
    let name = "daemon-set";
    let selector = format!("{NAME_LABEL}={name}");
    let dss: Api<DaemonSet> = ctx.api();
    let ds = dss
        .create(
            &PostParams::default(),
            &new_daemonset(name, &ctx.images().busybox(), true)?,
        )
        .await?;
    running_on_all_nodes(ctx, &ds).await?;
    daemon_status(ctx, name).await?;
    count_everywhere(ctx, &selector, 1, "the DaemonSet listed by label").await?;

    let dp = DeleteParams {
        grace_period_seconds: Some(1),
        ..DeleteParams::default()
    };
    dss.delete_collection(&dp, &ListParams::default().labels(&selector))
        .await?;
    count_everywhere(ctx, &selector, 0, "no DaemonSet listed by label").await
}
