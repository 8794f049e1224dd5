//! sig-apps DaemonSet entries that rest on ControllerRevisions, written from upstream's
//! test/e2e/apps/daemon_set.go and controller_revision.go: a RollingUpdate of the image (history
//! revision 1 → 2, pods labelled with the current revision's hash), a roll back in the middle of a
//! rollout that restarts none of the pods still on the old template, and the ControllerRevision
//! lifecycle (patch, create, delete, update, a hash collision the controller resolves, delete
//! collection, revision 3). Upstream's webserver and agnhost images are busybox and agnhost here,
//! both running the same shell loop, so only the image changes.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use super::{case, Case};
use crate::ctx::{from_json, is_ready, Ctx};
use crate::error::{CaseError, CaseResult};
use crate::{must, must_eq};

pub const CASES: &[Case] = &[
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
    ctx.wait("a ready daemon pod on every node", DS_TIMEOUT, || async {
        let mut per_node: BTreeMap<String, usize> = BTreeMap::new();
        for p in own_pods(ctx, ds).await? {
            if p.metadata.deletion_timestamp.is_none() && is_ready(&p) {
                *per_node.entry(node_of(&p)).or_default() += 1;
            }
        }
        let ok = per_node.len() == nodes.len() && nodes.iter().all(|n| per_node.get(n) == Some(&1));
        Ok(if ok {
            Ok(())
        } else {
            Err(format!("ready pods per node {per_node:?}, nodes {nodes:?}"))
        })
    })
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
    // CheckDaemonStatus. Upstream reads it once; kiln's status follows the pods' events a moment
    // later, so the consistency MUST is given a short while to show.
    let ds = ctx
        .wait(
            "a consistent daemon status",
            Duration::from_secs(30),
            || async {
                let ds = dss.get(&name).await?;
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
        .await?;
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
