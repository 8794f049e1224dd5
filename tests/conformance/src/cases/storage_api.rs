//! sig-storage entries that exercise the storage API kinds themselves (CSIDriver, CSINode,
//! CSIStorageCapacity, PersistentVolume(Claim), StorageClass, VolumeAttachment, a pod with inline
//! CSI volumes) — no driver runs: the objects name fictional drivers, as upstream's do. Each case
//! restates its entry's MUSTs in its doc comment.
//!
//! Most of them are one script on different kinds (create, get, patch a label, list by it, delete,
//! confirm, create replacements, update their labels, delete the collection, confirm):
//! [`Lifecycle`] holds it once; what is particular to an entry (status subresources, watches,
//! binding) stays in its case. Cluster-scoped objects carry the case's namespace name in their names
//! and labels (cases run side by side) and are deleted at the end whatever the script's outcome.

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{
    Node, PersistentVolume, PersistentVolumeClaim, PersistentVolumeClaimCondition, Pod,
};
use k8s_openapi::api::storage::v1::{
    CSIDriver, CSINode, CSIStorageCapacity, StorageClass, VolumeAttachment,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::APIGroup;
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::ResourceExt;
use serde_json::{json, Value};

use super::api_ops::{update_with_retry, Kind};
use super::{case, Case};
use crate::ctx::{by_label, from_json, Ctx};
use crate::error::{CaseError, CaseResult};
use crate::{must, must_eq};

pub const CASES: &[Case] = &[
    case!(
        "[sig-storage] CSIInlineVolumes should run through the lifecycle of a CSIDriver [Conformance]",
        "csiinlinevolumes",
        csidriver_lifecycle
    ),
    case!(
        "[sig-storage] CSIInlineVolumes should support CSIVolumeSource in Pod API [Conformance]",
        "csiinlinevolumes",
        csi_inline_pod_api
    ),
    case!(
        "[sig-storage] CSINodes CSI Conformance should run through the lifecycle of a csinode [Conformance]",
        "csinodes",
        csinode_lifecycle
    ),
    case!(
        "[sig-storage] CSIStorageCapacity should support CSIStorageCapacities API operations [Conformance]",
        "csistoragecapacity",
        csistoragecapacity_api
    ),
    case!(
        "[sig-storage] PersistentVolumes CSI Conformance should apply changes to a pv/pvc status [Conformance]",
        "pv",
        pv_pvc_status
    ),
    case!(
        "[sig-storage] PersistentVolumes CSI Conformance should run through the lifecycle of a PV and a PVC [Conformance]",
        "pv",
        pv_pvc_lifecycle
    ),
    case!(
        "[sig-storage] StorageClasses CSI Conformance should run through the lifecycle of a StorageClass [Conformance]",
        "csi-storageclass",
        storageclass_lifecycle
    ),
    case!(
        "[sig-storage] VolumeAttachment Conformance should apply changes to a volumeattachment status [Conformance]",
        "volumeattachment",
        volumeattachment_status
    ),
    case!(
        "[sig-storage] VolumeAttachment Conformance should run through the lifecycle of a VolumeAttachment [Conformance]",
        "volumeattachment",
        volumeattachment_lifecycle
    ),
];

/// How long a deletion may take to show in a list (upstream's Eventually(...).WithTimeout(30s)),
/// and a watch to deliver an event (wait.ForeverTestTimeout).
const SETTLE: Duration = Duration::from_secs(30);
/// Upstream's e2epv.VolumeSelectorKey: the label that pools a case's PVs.
const PV_POOL: &str = "e2e-pv-pool";

/// Upstream patches some kinds' labels with a strategic merge patch, others with a JSON merge patch.
#[derive(Debug, Clone, Copy)]
enum PatchStyle {
    Strategic,
    Merge,
}

impl PatchStyle {
    fn patch(self, v: Value) -> Patch<Value> {
        match self {
            PatchStyle::Strategic => Patch::Strategic(v),
            PatchStyle::Merge => Patch::Merge(v),
        }
    }
}

fn label<'a, K: Kind>(o: &'a K, key: &str) -> Option<&'a str> {
    o.meta().labels.as_ref()?.get(key).map(String::as_str)
}

fn annotation<'a, K: Kind>(o: &'a K, key: &str) -> Option<&'a str> {
    o.meta().annotations.as_ref()?.get(key).map(String::as_str)
}

/// The object's resourceVersion as upstream's HaveValidResourceVersion reads it: an unsigned
/// 128-bit decimal integer.
fn resource_version<K: Kind>(o: &K) -> CaseResult<u128> {
    let rv = o.meta().resource_version.as_deref().unwrap_or("");
    rv.parse::<u128>()
        .ok()
        .filter(|_| !rv.starts_with('0') && !rv.starts_with('+'))
        .ok_or_else(|| {
            CaseError::Failed(format!(
                "{} has resourceVersion {rv:?}, not an unsigned integer",
                o.name_any()
            ))
        })
}

/// Patch label `<name>: patched` onto the object: it MUST come back carrying it, with a larger
/// resourceVersion than `before`'s.
async fn patch_label<K: Kind>(api: &Api<K>, before: &K, style: PatchStyle) -> CaseResult<K> {
    let name = before.name_any();
    let patched = api
        .patch(
            &name,
            &PatchParams::default(),
            &style.patch(json!({"metadata": {"labels": {name.clone(): "patched"}}})),
        )
        .await?;
    must_eq!(
        label(&patched, &name),
        Some("patched"),
        "the patched label of {name}"
    );
    must!(
        resource_version(&patched)? > resource_version(before)?,
        "patching {name} did not raise its resourceVersion ({:?} -> {:?})",
        before.meta().resource_version,
        patched.meta().resource_version
    );
    Ok(patched)
}

/// A second create of the same object MUST be refused with 409 AlreadyExists.
async fn must_conflict<K: Kind>(api: &Api<K>, obj: &K) -> CaseResult {
    match api.create(&PostParams::default(), obj).await {
        Err(kube::Error::Api(s)) if s.code == 409 && s.reason == "AlreadyExists" => Ok(()),
        other => Err(CaseError::Failed(format!(
            "creating {} again: expected 409 AlreadyExists, got {other:?}",
            obj.name_any()
        ))),
    }
}

/// Upstream's confirmation after a delete: a get MUST answer 404, or find the object marked for
/// deletion.
async fn gone_or_deleting<K: Kind>(api: &Api<K>, name: &str) -> CaseResult {
    match api.get_opt(name).await? {
        None => Ok(()),
        Some(o) if o.meta().deletion_timestamp.is_some() => Ok(()),
        Some(o) => Err(CaseError::Failed(format!(
            "{name} should have been deleted or have a deletionTimestamp, but is {o:?}"
        ))),
    }
}

/// Upstream's Eventually(list).Should(be empty): a list by `selector` MUST come back empty within
/// [`SETTLE`].
async fn none_left<K: Kind>(ctx: &Ctx, api: &Api<K>, selector: &str) -> CaseResult {
    ctx.wait(
        &format!("no {} left with labels {selector}", K::kind(&())),
        SETTLE,
        || async {
            let left = api.list(&ListParams::default().labels(selector)).await?;
            if left.items.is_empty() {
                Ok(Ok(()))
            } else {
                let names: Vec<String> = left.items.iter().map(|o| o.name_any()).collect();
                Ok(Err(format!("still listed: {names:?}")))
            }
        },
    )
    .await
}

/// Delete what a case made and may have left behind (cluster-scoped objects outlive its namespace).
/// Best effort: the case's own outcome is what it reports.
async fn delete_leftovers<K: Kind>(api: &Api<K>, names: &[String]) {
    for name in names {
        let _ = api.delete(name, &DeleteParams::default()).await;
    }
}

/// The shared script of the lifecycle entries (CSINode, StorageClass, VolumeAttachment):
/// creating the initial object MUST succeed; reading it MUST return its name and UID; patching a
/// label onto it MUST succeed with the label found (and a larger resourceVersion); a list by that
/// label MUST find exactly it; deleting it MUST succeed and a list by the label MUST then come back
/// empty. Creating each replacement MUST succeed, reading it MUST too; updating its labels to
/// `updated` MUST succeed with the label found; a list by that label MUST find all replacements;
/// deleting them via deleteCollection MUST succeed and a list MUST then come back empty.
struct Lifecycle<'a, K: Kind> {
    api: Api<K>,
    /// Builds the i-th object: 0 is the initial one, 1..=replacements the replacements.
    make: &'a (dyn Fn(usize) -> CaseResult<K> + Sync),
    replacements: usize,
    style: PatchStyle,
    /// The label the replacements are updated to (its key holds the namespace's name, so the
    /// collection deleted is this case's alone).
    updated: (String, String),
}

impl<K: Kind> Lifecycle<'_, K> {
    /// Run the script, recording every name created in `created` for the caller's cleanup.
    async fn run(&self, ctx: &Ctx, created: &mut Vec<String>) -> CaseResult {
        let api = &self.api;
        let pp = PostParams::default();
        let first = api.create(&pp, &(self.make)(0)?).await?;
        let name = first.name_any();
        created.push(name.clone());
        let got = api.get(&name).await?;
        must_eq!(got.name_any(), name, "the name read back");
        must_eq!(got.uid(), first.uid(), "the UID read back");

        let patched = patch_label(api, &got, self.style).await?;
        let patched_selector = format!("{name}=patched");
        let listed = api
            .list(&ListParams::default().labels(&patched_selector))
            .await?;
        must_eq!(
            listed.items.len(),
            1,
            "objects listed with labels {patched_selector}"
        );
        api.delete(&patched.name_any(), &DeleteParams::default())
            .await?;
        none_left(ctx, api, &patched_selector).await?;

        let (key, value) = &self.updated;
        for i in 1..=self.replacements {
            let made = api.create(&pp, &(self.make)(i)?).await?;
            let name = made.name_any();
            created.push(name.clone());
            let got = api.get(&name).await?;
            must_eq!(
                got.uid(),
                made.uid(),
                "the UID of replacement {name} read back"
            );
            let updated = update_with_retry(api, &name, false, |o| {
                o.meta_mut().labels = Some([(key.clone(), value.clone())].into());
            })
            .await?;
            must_eq!(
                label(&updated, key),
                Some(value.as_str()),
                "the updated label of {name}"
            );
        }
        let updated_selector = format!("{key}={value}");
        let listed = api
            .list(&ListParams::default().labels(&updated_selector))
            .await?;
        must_eq!(
            listed.items.len(),
            self.replacements,
            "objects listed with labels {updated_selector}"
        );
        api.delete_collection(
            &DeleteParams::default(),
            &ListParams::default().labels(&updated_selector),
        )
        .await?;
        none_left(ctx, api, &updated_selector).await
    }

    /// Run the script, then delete whatever it created and left, whichever way it ended.
    async fn run_and_clean(&self, ctx: &Ctx) -> CaseResult {
        let mut created = Vec::new();
        let result = self.run(ctx, &mut created).await;
        delete_leftovers(&self.api, &created).await;
        result
    }
}

/// CSINode, lifecycle: creating an initial CSINode MUST succeed; reading it MUST succeed with its
/// name; patching it MUST succeed with its new label found; listing with a labelSelector MUST
/// succeed; deleting it MUST succeed and be confirmed; creating a replacement MUST succeed and
/// reading it MUST return its name; updating it MUST succeed with its new label found; deleting it
/// via deleteCollection MUST succeed and be confirmed. See [`Lifecycle`].
async fn csinode_lifecycle(ctx: &Ctx) -> CaseResult {
    let ns = ctx.ns.clone();
    let make = move |i: usize| {
        from_json::<CSINode>(json!({
            "metadata": {"name": format!("e2e-csinode-{ns}-{i}")},
            "spec": {"drivers": []},
        }))
    };
    Lifecycle {
        api: ctx.all::<CSINode>(),
        make: &make,
        replacements: 1,
        style: PatchStyle::Strategic,
        updated: (ctx.ns.clone(), "updated".into()),
    }
    .run_and_clean(ctx)
    .await
}

/// StorageClass, lifecycle: creating a StorageClass MUST succeed; reading it MUST succeed;
/// patching it MUST succeed with its new label found (and a larger resourceVersion); deleting it
/// MUST succeed and be confirmed; a replacement MUST be created; updating it MUST succeed with its
/// new label found; deleting it via deleteCollection MUST succeed and be confirmed. See
/// [`Lifecycle`]. The classes name a fictional provisioner, so nothing provisions for them.
async fn storageclass_lifecycle(ctx: &Ctx) -> CaseResult {
    let ns = ctx.ns.clone();
    let make = move |i: usize| {
        let prefix = if i == 0 { "e2e-" } else { "e2e-v2-" };
        from_json::<StorageClass>(json!({
            "metadata": {"generateName": format!("{prefix}{ns}-")},
            "provisioner": "e2e-fake-provisioner",
        }))
    };
    Lifecycle {
        api: ctx.all::<StorageClass>(),
        make: &make,
        replacements: 1,
        style: PatchStyle::Strategic,
        updated: (ctx.ns.clone(), "updated".into()),
    }
    .run_and_clean(ctx)
    .await
}

/// A node of the cluster for a VolumeAttachment (upstream picks one at random; any will do, the
/// attacher is fictional).
async fn some_node(ctx: &Ctx, i: usize) -> CaseResult<String> {
    let nodes = ctx.all::<Node>().list(&ListParams::default()).await?;
    must!(!nodes.items.is_empty(), "the cluster lists no nodes");
    Ok(nodes.items[i % nodes.items.len()].name_any())
}

/// Upstream's NewVolumeAttachment: attacher `e2e-test.storage.k8s.io`, source a PV name that does
/// not exist, status attached = false.
fn volume_attachment(name: &str, node: &str) -> CaseResult<VolumeAttachment> {
    from_json(json!({
        "metadata": {"name": name},
        "spec": {
            "attacher": "e2e-test.storage.k8s.io",
            "nodeName": node,
            "source": {"persistentVolumeName": format!("pv-{name}")},
        },
        "status": {"attached": false},
    }))
}

/// VolumeAttachment, lifecycle: creating an initial VolumeAttachment MUST succeed; reading it MUST
/// succeed with its name; patching it MUST succeed with its new label found; listing with a
/// labelSelector MUST succeed with a single item; deleting it MUST succeed and be confirmed;
/// creating a second one MUST succeed and updating it with a new label MUST succeed with the label
/// found; the same for a third; deleting both via deleteCollection MUST succeed and be confirmed.
/// See [`Lifecycle`].
async fn volumeattachment_lifecycle(ctx: &Ctx) -> CaseResult {
    let nodes: Vec<String> = ctx
        .all::<Node>()
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .map(|n| n.name_any())
        .collect();
    must!(!nodes.is_empty(), "the cluster lists no nodes");
    let ns = ctx.ns.clone();
    let make = move |i: usize| volume_attachment(&format!("va-{ns}-{i}"), &nodes[i % nodes.len()]);
    Lifecycle {
        api: ctx.all::<VolumeAttachment>(),
        make: &make,
        replacements: 2,
        style: PatchStyle::Merge,
        updated: (format!("va-e2e-{}", ctx.ns), "updated".into()),
    }
    .run_and_clean(ctx)
    .await
}

/// VolumeAttachment, apply changes to a volumeattachment status: creating an initial
/// VolumeAttachment MUST succeed; patching it MUST succeed with its new label found; reading its
/// status MUST succeed with attached false; patching the status MUST succeed with attached true;
/// updating the status MUST succeed with attached false; deleting it MUST succeed and be confirmed.
async fn volumeattachment_status(ctx: &Ctx) -> CaseResult {
    let api = ctx.all::<VolumeAttachment>();
    let name = format!("va-{}", ctx.ns);
    let result = volumeattachment_status_steps(ctx, &api, &name).await;
    delete_leftovers(&api, &[name]).await;
    result
}

async fn volumeattachment_status_steps(
    ctx: &Ctx,
    api: &Api<VolumeAttachment>,
    name: &str,
) -> CaseResult {
    let node = some_node(ctx, 0).await?;
    let created = api
        .create(&PostParams::default(), &volume_attachment(name, &node)?)
        .await?;
    must_eq!(
        created.name_any(),
        name,
        "the created VolumeAttachment's name"
    );
    let patched = patch_label(api, &created, PatchStyle::Merge).await?;
    let attached = |va: &VolumeAttachment| va.status.as_ref().map(|s| s.attached);

    let read = api.get_status(name).await?;
    must_eq!(
        attached(&read),
        Some(false),
        "status.attached read through /status"
    );
    let status_patched = api
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"attached": true}})),
        )
        .await?;
    must_eq!(
        attached(&status_patched),
        Some(true),
        "status.attached after patching /status"
    );
    let updated = update_with_retry(api, name, true, |va| {
        if let Some(s) = va.status.as_mut() {
            s.attached = false;
        }
    })
    .await?;
    must_eq!(
        attached(&updated),
        Some(false),
        "status.attached after updating /status"
    );
    api.delete(name, &DeleteParams::default()).await?;
    none_left(ctx, api, &format!("{}=patched", patched.name_any())).await
}

/// CSIDriver, lifecycle: creating two CSIDrivers MUST succeed (a second create of the first MUST
/// answer 409); reading each MUST return its UID; patching one MUST succeed with its new label
/// found; updating it MUST succeed with its new label found; the two MUST be found when listed by
/// their label; deleting the first MUST succeed (then read as gone or deleting); deleting the
/// second via deleteCollection MUST succeed (likewise).
async fn csidriver_lifecycle(ctx: &Ctx) -> CaseResult {
    let api = ctx.all::<CSIDriver>();
    let names = [1, 2].map(|i| format!("inline-driver-{}-{i}", ctx.ns));
    let result = csidriver_steps(ctx, &api, &names).await;
    delete_leftovers(&api, &names).await;
    result
}

async fn csidriver_steps(ctx: &Ctx, api: &Api<CSIDriver>, names: &[String; 2]) -> CaseResult {
    let unique = ("e2e-test", ctx.ns.as_str());
    let driver = |name: &str, modes: &[&str]| {
        from_json::<CSIDriver>(json!({
            "metadata": {"name": name, "labels": {unique.0: unique.1}},
            "spec": {
                "volumeLifecycleModes": modes,
                "fsGroupPolicy": "ReadWriteOnceWithFSType",
            },
        }))
    };
    // One driver for ephemeral inline volumes only, one for both kinds.
    let d1 = driver(&names[0], &["Ephemeral"])?;
    let d2 = driver(&names[1], &["Persistent", "Ephemeral"])?;
    let pp = PostParams::default();
    let c1 = api.create(&pp, &d1).await?;
    let c2 = api.create(&pp, &d2).await?;
    must_conflict(api, &d1).await?;

    for c in [&c1, &c2] {
        let got = api.get(&c.name_any()).await?;
        must_eq!(got.uid(), c.uid(), "the UID of {} read back", c.name_any());
    }
    let second = &names[1];
    let patched = api
        .patch(
            second,
            &PatchParams::default(),
            &Patch::Strategic(json!({"metadata": {"labels": {second.clone(): "patched"}}})),
        )
        .await?;
    must_eq!(
        label(&patched, second),
        Some("patched"),
        "the patched label"
    );
    let updated = update_with_retry(api, second, false, |d| {
        d.metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert(second.clone(), "updated".into());
    })
    .await?;
    must_eq!(
        label(&updated, second),
        Some("updated"),
        "the updated label"
    );
    let listed = api.list(&by_label(unique.0, unique.1)).await?;
    must_eq!(
        listed.items.len(),
        2,
        "CSIDrivers listed with labels {}={}",
        unique.0,
        unique.1
    );
    api.delete(&names[0], &DeleteParams::default()).await?;
    gone_or_deleting(api, &names[0]).await?;
    api.delete_collection(&DeleteParams::default(), &by_label(second, "updated"))
        .await?;
    gone_or_deleting(api, second).await
}

/// CSIInlineVolumes should support Pods with inline volumes: a Pod with two CSIVolumeSource
/// volumes (a fictional driver; the second with fsType and readOnly) MUST be created (a second
/// create MUST answer 409), read back by UID, listed (one in the namespace), patched (annotation
/// found) and deleted (then read as gone or deleting). The pod never starts: no such driver runs.
async fn csi_inline_pod_api(ctx: &Ctx) -> CaseResult {
    let name = "pod-csi-inline-volumes";
    let pod: Pod = from_json(json!({
        "metadata": {"name": name},
        "spec": {
            "volumes": [
                {"name": "csi-inline-vol1", "csi": {"driver": "e2e.example.com"}},
                {"name": "csi-inline-vol2", "csi": {
                    "driver": "e2e.example.com", "fsType": "ext4", "readOnly": true,
                }},
            ],
            "containers": [{
                "name": name,
                "image": ctx.images().busybox(),
                "command": ["sh", "-c", "ls /mnt/*"],
                "volumeMounts": [
                    {"name": "csi-inline-vol1", "mountPath": "/mnt/vol1"},
                    {"name": "csi-inline-vol2", "mountPath": "/mnt/vol2"},
                ],
            }],
        },
    }))?;
    let pods: Api<Pod> = ctx.api();
    let created = pods.create(&PostParams::default(), &pod).await?;
    must_conflict(&pods, &pod).await?;
    let got = pods.get(name).await?;
    must_eq!(got.uid(), created.uid(), "the pod's UID read back");
    let csi_volumes = got
        .spec
        .as_ref()
        .and_then(|s| s.volumes.as_ref())
        .map(|vs| vs.iter().filter(|v| v.csi.is_some()).count());
    must_eq!(csi_volumes, Some(2), "CSI volumes in the pod read back");
    let listed = pods.list(&ListParams::default()).await?;
    must_eq!(listed.items.len(), 1, "pods listed in the namespace");
    let patched = pods
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"patched": "true"}}})),
        )
        .await?;
    must_eq!(
        annotation(&patched, "patched"),
        Some("true"),
        "the patched annotation"
    );
    pods.delete(name, &DeleteParams::default()).await?;
    gone_or_deleting(&pods, name).await
}

/// CSIStorageCapacity API: storage.k8s.io MUST be in /apis, v1 in /apis/storage.k8s.io, and
/// csistoragecapacities in /apis/storage.k8s.io/v1; the resource MUST support create (a second
/// create MUST answer 409), get, list (in the namespace and across namespaces), watch (in the
/// namespace and across them), patch, update, delete and deletecollection.
async fn csistoragecapacity_api(ctx: &Ctx) -> CaseResult {
    storage_v1_discovery(ctx).await?;

    let cscs: Api<CSIStorageCapacity> = ctx.api();
    let everywhere: Api<CSIStorageCapacity> = Api::all(ctx.client.clone());
    let make = |suffix: &str| {
        from_json::<CSIStorageCapacity>(json!({
            "metadata": {"name": format!("{}{suffix}", ctx.ns), "labels": {"test": ctx.ns}},
            "storageClassName": "e2e.example.com",
        }))
    };
    let selector = format!("test={}", ctx.ns);
    let lp = ListParams::default().labels(&selector);
    let pp = PostParams::default();
    let csc1 = make("-csc1")?;
    let created = cscs.create(&pp, &csc1).await?;
    must_conflict(&cscs, &csc1).await?;
    cscs.create(&pp, &make("-csc2")?).await?;

    // Watch from now on (the list's resourceVersion), in the namespace and across namespaces.
    let rv = cscs
        .list(&lp)
        .await?
        .metadata
        .resource_version
        .unwrap_or_default();
    let wp = WatchParams::default().labels(&selector);
    let mut in_ns = cscs.watch(&wp, &rv).await?.boxed();
    let mut across = everywhere.watch(&wp, &rv).await?.boxed();
    cscs.create(&pp, &make("-csc3")?).await?;

    let name = created.name_any();
    let got = cscs.get(&name).await?;
    must_eq!(got.uid(), created.uid(), "the UID read back");
    must_eq!(
        cscs.list(&lp).await?.items.len(),
        3,
        "CSIStorageCapacities listed in the namespace"
    );
    must_eq!(
        everywhere.list(&lp).await?.items.len(),
        3,
        "CSIStorageCapacities listed across namespaces"
    );
    let patched = cscs
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"patched": "true"}}})),
        )
        .await?;
    must_eq!(
        annotation(&patched, "patched"),
        Some("true"),
        "the patched annotation"
    );
    let mut to_update = patched.clone();
    to_update
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert("updated".into(), "true".into());
    let updated = cscs.replace(&name, &pp, &to_update).await?;
    must_eq!(
        annotation(&updated, "updated"),
        Some("true"),
        "the updated annotation"
    );
    saw_add_patch_update(&mut in_ns, "in the namespace").await?;
    saw_add_patch_update(&mut across, "across namespaces").await?;

    cscs.delete(&name, &DeleteParams::default()).await?;
    // Held back by a finalizer, it may still be listed (upstream allows for that).
    let max = match cscs.get_opt(&name).await? {
        None => 2,
        Some(c) if c.metadata.deletion_timestamp.is_some() && !c.finalizers().is_empty() => 3,
        Some(c) => {
            return Err(CaseError::Failed(format!(
                "{name} should have been deleted or be held by a finalizer, but is {c:?}"
            )))
        }
    };
    let left = cscs.list(&lp).await?.items.len();
    must!(
        (2..=max).contains(&left),
        "expected 2..={max} CSIStorageCapacities left after the delete, got {left}"
    );
    cscs.delete_collection(&DeleteParams::default(), &lp)
        .await?;
    for c in cscs.list(&lp).await?.items {
        must!(
            c.metadata.deletion_timestamp.is_some() && !c.finalizers().is_empty(),
            "{} should have been deleted or be held by a finalizer, but is {c:?}",
            c.name_any()
        );
    }
    Ok(())
}

/// The discovery documents MUST show storage.k8s.io, its v1, and csistoragecapacities in it.
async fn storage_v1_discovery(ctx: &Ctx) -> CaseResult {
    let groups = ctx.client.list_api_groups().await?;
    let served = groups
        .groups
        .iter()
        .any(|g| g.name == "storage.k8s.io" && g.versions.iter().any(|v| v.version == "v1"));
    must!(
        served,
        "/apis does not list storage.k8s.io/v1: {:?}",
        groups.groups.iter().map(|g| &g.name).collect::<Vec<_>>()
    );
    let raw = ctx
        .kubectl(&["get", "--raw", "/apis/storage.k8s.io"])
        .await?;
    let group: APIGroup = serde_json::from_str(&raw).map_err(|source| CaseError::Json {
        what: "/apis/storage.k8s.io".into(),
        source,
    })?;
    must!(
        group.versions.iter().any(|v| v.version == "v1"),
        "/apis/storage.k8s.io does not list v1: {raw}"
    );
    let resources = ctx
        .client
        .list_api_group_resources("storage.k8s.io/v1")
        .await?;
    must!(
        resources
            .resources
            .iter()
            .any(|r| r.name == "csistoragecapacities"),
        "/apis/storage.k8s.io/v1 does not list csistoragecapacities: {:?}",
        resources
            .resources
            .iter()
            .map(|r| &r.name)
            .collect::<Vec<_>>()
    );
    Ok(())
}

type CscWatch = futures::stream::BoxStream<'static, kube::Result<WatchEvent<CSIStorageCapacity>>>;

/// The watch MUST deliver the third object's ADDED, then MODIFIED events carrying the patched and
/// the updated annotation, each within [`SETTLE`]. (Upstream's loop is content with any one of
/// them; a server that serves watch delivers all three.)
async fn saw_add_patch_update(w: &mut CscWatch, which: &str) -> CaseResult {
    let (mut added, mut patched, mut updated) = (false, false, false);
    while !(added && patched && updated) {
        let ev = tokio::time::timeout(SETTLE, w.try_next())
            .await
            .map_err(|_| {
                CaseError::Failed(format!(
                    "watch {which}: no event within {}s (added {added}, patched {patched}, updated {updated})",
                    SETTLE.as_secs()
                ))
            })??;
        match ev {
            Some(WatchEvent::Added(_)) => added = true,
            Some(WatchEvent::Modified(c)) => {
                if annotation(&c, "updated") == Some("true") {
                    updated = true;
                } else if annotation(&c, "patched") == Some("true") {
                    patched = true;
                }
            }
            Some(WatchEvent::Bookmark(_)) => {}
            Some(other) => {
                return Err(CaseError::Failed(format!(
                    "watch {which}: unexpected event {other:?}"
                )))
            }
            None => return Err(CaseError::Failed(format!("watch {which}: it closed"))),
        }
    }
    Ok(())
}

/// Upstream's e2epv.CreatePVPVC for the CSI Conformance entries: a 2Gi RWO Retain PV of class
/// `<namespace>` with a CSI source (a fictional driver), labelled into the case's pool and with
/// the pv.beta.kubernetes.io/gid annotation, then a 2Gi RWO claim of the same class; the PV
/// controller binds them. Records the PV's name in `created`.
async fn create_pv_pvc(
    ctx: &Ctx,
    driver: &str,
    handle: &str,
    created: &mut Vec<String>,
) -> CaseResult<(PersistentVolume, PersistentVolumeClaim)> {
    let pp = PostParams::default();
    let pv: PersistentVolume = from_json(json!({
        "metadata": {
            "generateName": format!("{}-", ctx.ns),
            "labels": {PV_POOL: ctx.ns},
            "annotations": {"pv.beta.kubernetes.io/gid": "777"},
        },
        "spec": {
            "persistentVolumeReclaimPolicy": "Retain",
            "capacity": {"storage": "2Gi"},
            "csi": {"driver": driver, "volumeHandle": handle},
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": ctx.ns,
        },
    }))?;
    let pv = ctx.all::<PersistentVolume>().create(&pp, &pv).await?;
    created.push(pv.name_any());
    let pvc: PersistentVolumeClaim = from_json(json!({
        "metadata": {"generateName": "pvc-"},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "2Gi"}},
            "storageClassName": ctx.ns,
        },
    }))?;
    let pvc = ctx.api::<PersistentVolumeClaim>().create(&pp, &pvc).await?;
    Ok((pv, pvc))
}

/// Upstream's AfterEach (PVPVCMapCleanup): the claims first, then the PVs, so pv-protection lets
/// them go once they are released.
async fn delete_pvs_and_claims(ctx: &Ctx, pvs: &[String]) {
    let _ = ctx
        .api::<PersistentVolumeClaim>()
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await;
    delete_leftovers(&ctx.all::<PersistentVolume>(), pvs).await;
}

/// The one PV of the case's pool and the one claim of its namespace, with valid resourceVersions.
async fn the_pv_and_claim(ctx: &Ctx) -> CaseResult<(PersistentVolume, PersistentVolumeClaim)> {
    let pvs = ctx
        .all::<PersistentVolume>()
        .list(&by_label(PV_POOL, &ctx.ns))
        .await?;
    must_eq!(
        pvs.items.len(),
        1,
        "PVs listed with labels {PV_POOL}={}",
        ctx.ns
    );
    let claims = ctx
        .api::<PersistentVolumeClaim>()
        .list(&ListParams::default())
        .await?;
    must_eq!(claims.items.len(), 1, "PVCs listed in the namespace");
    let (pv, pvc) = (pvs.items[0].clone(), claims.items[0].clone());
    resource_version(&pv)?;
    resource_version(&pvc)?;
    Ok((pv, pvc))
}

/// PersistentVolumes(Claims), lifecycle: creating a PV and a PVC MUST succeed; listing PVs with a
/// labelSelector MUST succeed; listing PVCs in the namespace MUST succeed; patching the PV and the
/// PVC MUST succeed with their new labels found; reading them MUST return their UIDs; deleting
/// the PVC and the PV MUST succeed and be confirmed; a replacement PV and PVC MUST be created;
/// updating the PV and the PVC MUST succeed with their new labels found; deleting them via
/// deleteCollection MUST succeed and be confirmed.
async fn pv_pvc_lifecycle(ctx: &Ctx) -> CaseResult {
    let mut created = Vec::new();
    let result = pv_pvc_lifecycle_steps(ctx, &mut created).await;
    delete_pvs_and_claims(ctx, &created).await;
    result
}

async fn pv_pvc_lifecycle_steps(ctx: &Ctx, created: &mut Vec<String>) -> CaseResult {
    let pvs = ctx.all::<PersistentVolume>();
    let claims = ctx.api::<PersistentVolumeClaim>();
    // Upstream names (but never creates) a CSIDriver for the PVs' source.
    let driver = format!("inline-driver-{}", ctx.ns);
    let pool = format!("{PV_POOL}={}", ctx.ns);
    create_pv_pvc(ctx, &driver, "e2e-conformance", created).await?;
    let (pv, pvc) = the_pv_and_claim(ctx).await?;

    let patched_pv = patch_label(&pvs, &pv, PatchStyle::Strategic).await?;
    let patched_pvc = patch_label(&claims, &pvc, PatchStyle::Strategic).await?;
    let got_pv = pvs.get(&patched_pv.name_any()).await?;
    must_eq!(got_pv.uid(), patched_pv.uid(), "the PV's UID read back");
    let got_pvc = claims.get(&patched_pvc.name_any()).await?;
    must_eq!(got_pvc.uid(), patched_pvc.uid(), "the PVC's UID read back");

    claims
        .delete(&got_pvc.name_any(), &DeleteParams::default())
        .await?;
    ctx.wait("the PVC deleted", SETTLE, || async {
        let left = claims.list(&ListParams::default()).await?;
        Ok(match left.items.first() {
            None => Ok(()),
            Some(c) => Err(format!(
                "{} is still listed: {:?}",
                c.name_any(),
                c.metadata
            )),
        })
    })
    .await?;
    pvs.delete(&got_pv.name_any(), &DeleteParams::default())
        .await?;
    none_left(ctx, &pvs, &pool).await?;

    let (pv, pvc) = create_pv_pvc(ctx, &driver, "e2e-conformance", created).await?;
    let (pv_name, pvc_name) = (pv.name_any(), pvc.name_any());
    let updated_pv = update_with_retry(&pvs, &pv_name, false, |pv| {
        pv.metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert(pv_name.clone(), "updated".into());
    })
    .await?;
    must_eq!(
        label(&updated_pv, &pv_name),
        Some("updated"),
        "the PV's updated label"
    );
    let updated_pvc = update_with_retry(&claims, &pvc_name, false, |pvc| {
        pvc.metadata.labels = Some([(pvc_name.clone(), "updated".to_string())].into());
    })
    .await?;
    must_eq!(
        label(&updated_pvc, &pvc_name),
        Some("updated"),
        "the PVC's updated label"
    );
    let pvc_selector = format!("{pvc_name}=updated");
    let everywhere: Api<PersistentVolumeClaim> = Api::all(ctx.client.clone());
    let listed = everywhere
        .list(&ListParams::default().labels(&pvc_selector))
        .await?;
    must_eq!(
        listed.items.len(),
        1,
        "PVCs listed across namespaces with labels {pvc_selector}"
    );
    claims
        .delete_collection(
            &DeleteParams::default(),
            &ListParams::default().labels(&pvc_selector),
        )
        .await?;
    none_left(ctx, &claims, &pvc_selector).await?;
    let pv_selector = format!("{pv_name}=updated");
    pvs.delete_collection(
        &DeleteParams::default(),
        &ListParams::default().labels(&pv_selector),
    )
    .await?;
    none_left(ctx, &pvs, &pv_selector).await
}

/// PersistentVolumes(Claims), apply changes to a pv/pvc status: creating a PV and a PVC MUST
/// succeed; listing PVs with a labelSelector and PVCs in the namespace MUST succeed; reading the
/// PVC's status MUST succeed with a valid phase (Pending or Bound), the PV's too (Available, Bound
/// or Pending); patching the PVC's status MUST succeed with its new condition found; patching the
/// PV's status MUST succeed with the new reason and message found; updating the PVC's status MUST
/// succeed with its new condition found; updating the PV's status MUST succeed with the new reason
/// and message found.
async fn pv_pvc_status(ctx: &Ctx) -> CaseResult {
    let mut created = Vec::new();
    let result = pv_pvc_status_steps(ctx, &mut created).await;
    delete_pvs_and_claims(ctx, &created).await;
    result
}

async fn pv_pvc_status_steps(ctx: &Ctx, created: &mut Vec<String>) -> CaseResult {
    let pvs = ctx.all::<PersistentVolume>();
    let claims = ctx.api::<PersistentVolumeClaim>();
    let driver = format!("e2e-driver-{}", ctx.ns);
    create_pv_pvc(ctx, &driver, "e2e-status-conformance", created).await?;
    let (pv, pvc) = the_pv_and_claim(ctx).await?;
    let (pv_name, pvc_name) = (pv.name_any(), pvc.name_any());

    let read_pvc = claims.get_status(&pvc_name).await?;
    let phase = read_pvc.status.as_ref().and_then(|s| s.phase.clone());
    must!(
        matches!(phase.as_deref(), Some("Pending" | "Bound")),
        "the PVC's phase read through /status is {phase:?}, want Pending or Bound"
    );
    let read_pv = pvs.get_status(&pv_name).await?;
    let phase = read_pv.status.as_ref().and_then(|s| s.phase.clone());
    must!(
        matches!(phase.as_deref(), Some("Available" | "Bound" | "Pending")),
        "the PV's phase read through /status is {phase:?}, want Available, Bound or Pending"
    );

    let patched_pvc = claims
        .patch_status(
            &pvc_name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"conditions": [{
                "type": "StatusPatched", "status": "True",
                "reason": "E2E patchedStatus", "message": "Set from e2e test",
            }]}})),
        )
        .await?;
    has_condition(&patched_pvc, "StatusPatched", "E2E patchedStatus")?;
    let patched_pv = pvs
        .patch_status(
            &pv_name,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"status": {"message": "StatusPatched", "reason": "E2E patchStatus"}}),
            ),
        )
        .await?;
    pv_reason_message(&patched_pv, "E2E patchStatus", "StatusPatched")?;

    let updated_pvc = update_with_retry(&claims, &pvc_name, true, |pvc| {
        let status = pvc.status.get_or_insert_with(Default::default);
        status.conditions.get_or_insert_with(Default::default).push(
            PersistentVolumeClaimCondition {
                type_: "StatusUpdated".into(),
                status: "True".into(),
                reason: Some("E2E updateStatus".into()),
                message: Some("Set from e2e test".into()),
                ..Default::default()
            },
        );
    })
    .await?;
    has_condition(&updated_pvc, "StatusUpdated", "E2E updateStatus")?;
    let updated_pv = update_with_retry(&pvs, &pv_name, true, |pv| {
        let status = pv.status.get_or_insert_with(Default::default);
        status.reason = Some("E2E updateStatus".into());
        status.message = Some("StatusUpdated".into());
    })
    .await?;
    pv_reason_message(&updated_pv, "E2E updateStatus", "StatusUpdated")
}

/// The claim MUST carry condition `type_` with the reason and the e2e message.
fn has_condition(pvc: &PersistentVolumeClaim, type_: &str, reason: &str) -> CaseResult {
    let conditions = pvc
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .cloned()
        .unwrap_or_default();
    let found = conditions.iter().any(|c| {
        c.type_ == type_
            && c.reason.as_deref().is_some_and(|r| r.contains(reason))
            && c.message
                .as_deref()
                .is_some_and(|m| m.contains("Set from e2e test"))
    });
    must!(
        found,
        "the PVC's status lacks condition {type_} ({reason}): {conditions:?}"
    );
    Ok(())
}

fn pv_reason_message(pv: &PersistentVolume, reason: &str, message: &str) -> CaseResult {
    let status = pv.status.clone().unwrap_or_default();
    must_eq!(
        status.reason.as_deref(),
        Some(reason),
        "the PV's status.reason"
    );
    must_eq!(
        status.message.as_deref(),
        Some(message),
        "the PV's status.message"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sc_with_rv(rv: &str) -> StorageClass {
        from_json(json!({"metadata": {"name": "x", "resourceVersion": rv}, "provisioner": "p"}))
            .unwrap()
    }

    #[test]
    fn resource_versions_are_unsigned_integers() {
        assert_eq!(resource_version(&sc_with_rv("12345")).unwrap(), 12345);
        for bad in ["", "0", "012", "+5", "-1", "abc", "1.5"] {
            assert!(
                resource_version(&sc_with_rv(bad)).is_err(),
                "{bad:?} accepted"
            );
        }
    }

    #[test]
    fn volume_attachments_are_made_as_upstream_does() {
        let va = volume_attachment("va-x", "node-1").unwrap();
        assert_eq!(va.spec.attacher, "e2e-test.storage.k8s.io");
        assert_eq!(va.spec.node_name, "node-1");
        assert_eq!(
            va.spec.source.persistent_volume_name.as_deref(),
            Some("pv-va-x")
        );
        assert_eq!(va.status.map(|s| s.attached), Some(false));
    }

    #[test]
    fn claim_conditions_match_by_type_reason_and_message() {
        let pvc: PersistentVolumeClaim = from_json(json!({
            "metadata": {"name": "c"},
            "status": {"conditions": [{"type": "StatusPatched", "status": "True",
                "reason": "E2E patchedStatus", "message": "Set from e2e test"}]},
        }))
        .unwrap();
        assert!(has_condition(&pvc, "StatusPatched", "E2E patchedStatus").is_ok());
        assert!(has_condition(&pvc, "StatusUpdated", "E2E updateStatus").is_err());
        assert!(has_condition(&pvc, "StatusPatched", "E2E updateStatus").is_err());
    }
}
