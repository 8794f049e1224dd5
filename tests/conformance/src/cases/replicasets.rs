//! sig-apps ReplicaSet entries, written from upstream's test/e2e/apps/replica_set.go: a basic image
//! served by each replica, adoption of a matching orphan and release of a pod that stops matching,
//! the scale subresource, replace and patch, list and delete a collection, and the status
//! subresource. The pod shapes, the status-subresource steps and the scale-subresource steps are
//! shared with the Deployment entries (`deployments.rs`). Upstream's webserver (httpd) is the lab's
//! busybox, whose own command serves HTTP on port 80; the exceeded-quota entry waits for
//! ResourceQuota (issue #25).

use std::fmt::Debug;

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent};
use kube::Resource;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};

use super::replication::{
    controlled_by, pods_created, replicas_answer_with_their_names, suffix, until, watch_labelled,
    MINUTE,
};
use super::{case, Case};
use crate::ctx::{from_json, to_json, Ctx, POD_START};
use crate::error::CaseResult;
use crate::{must, must_eq};

pub const CASES: &[Case] = &[
    case!(
        "[sig-apps] ReplicaSet should serve a basic image on each replica with a public image [Conformance]",
        "replicaset",
        serve_basic_image
    ),
    case!(
        "[sig-apps] ReplicaSet should adopt matching pods on creation and release no longer matching pods [Conformance]",
        "replicaset",
        adopt_and_release
    ),
    case!(
        "[sig-apps] ReplicaSet Replicaset should have a working scale subresource [Conformance]",
        "replicaset",
        scale_subresource
    ),
    case!(
        "[sig-apps] ReplicaSet Replace and Patch tests [Conformance]",
        "replicaset",
        replace_and_patch
    ),
    case!(
        "[sig-apps] ReplicaSet should list and delete a collection of ReplicaSets [Conformance]",
        "replicaset",
        list_and_delete_collection
    ),
    case!(
        "[sig-apps] ReplicaSet should validate Replicaset Status endpoints [Conformance]",
        "replicaset",
        status_endpoints
    ),
];

/// Upstream's WebserverImageName and AgnhostImageName: the container names its apps tests give.
pub(super) const WEBSERVER: &str = "httpd";
pub(super) const AGNHOST: &str = "agnhost";

/// The images upstream's apps tests run, as the lab has them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Image {
    /// WebserverImage (httpd): the lab's busybox, whose own command serves HTTP on port 80.
    Webserver,
    /// AgnhostImage without arguments, which pauses: the lab's image names its binary as the
    /// command (not the entrypoint), so the container names it with `pause`.
    Agnhost,
    /// agnhost serve-hostname, answering on port 9376 with the pod's name.
    ServeHostname,
    /// The pause image.
    Pause,
    /// An image upstream names that does not exist, so its pods never start.
    Missing(&'static str),
}

impl Image {
    pub(super) fn reference(self, ctx: &Ctx) -> String {
        match self {
            Image::Webserver => ctx.images().httpd(),
            Image::Agnhost | Image::ServeHostname => ctx.images().agnhost(),
            Image::Pause => ctx.images().pause(),
            Image::Missing(image) => image.to_string(),
        }
    }

    /// One container of the image named `name`: its command and args (null when the image's own
    /// runs), so a merge or an update that switches images also drops the other's command.
    pub(super) fn container(self, ctx: &Ctx, name: &str) -> Value {
        let (command, args) = match self {
            Image::Agnhost => (json!(["/agnhost"]), json!(["pause"])),
            Image::ServeHostname => (json!(["/agnhost"]), json!(["serve-hostname"])),
            _ => (Value::Null, Value::Null),
        };
        let mut c = json!({"name": name, "image": self.reference(ctx), "securityContext": {}});
        if !command.is_null() {
            c["command"] = command;
            c["args"] = args;
        }
        if self == Image::ServeHostname {
            c["ports"] = json!([{"containerPort": 9376}]);
        }
        c
    }
}

/// Upstream's newRS: the labels on the set, its selector and its pods; one container;
/// terminationGracePeriodSeconds 0.
pub(super) fn new_rs(
    ctx: &Ctx,
    name: &str,
    replicas: i32,
    labels: &Value,
    container: &str,
    image: Image,
) -> CaseResult<ReplicaSet> {
    from_json(json!({
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "terminationGracePeriodSeconds": 0,
                    "containers": [image.container(ctx, container)]
                }
            }
        }
    }))
}

/// `{"name": "sample-pod", "pod": "httpd"}`: the labels of upstream's webserver sets.
pub(super) fn sample_labels(name: &str) -> Value {
    json!({"name": name, "pod": WEBSERVER})
}

/// e2epod.VerifyPodsRunning: `replicas` pods labelled `name=<name>` exist and each runs.
pub(super) async fn verify_pods_running(ctx: &Ctx, name: &str, replicas: usize) -> CaseResult {
    for p in pods_created(ctx, name, replicas).await? {
        ctx.wait_running(p.metadata.name.as_deref().unwrap_or_default())
            .await?;
    }
    Ok(())
}

/// The steps of testRSScaleSubresources / testDeploymentSubresources once the object runs one
/// replica: /scale reads 1 and 1; an unconditional update to 2 answers 2 and shows in
/// spec.replicas; a patch of /scale to 4 shows in spec.replicas.
pub(super) async fn scale_steps<K>(
    api: &Api<K>,
    name: &str,
    spec_replicas: fn(&K) -> Option<i32>,
) -> CaseResult
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let mut scale = api.get_scale(name).await?;
    must_eq!(
        scale.spec.as_ref().and_then(|s| s.replicas),
        Some(1),
        "the scale's spec.replicas"
    );
    must_eq!(
        scale.status.as_ref().map(|s| s.replicas),
        Some(1),
        "the scale's status.replicas"
    );
    scale.metadata.resource_version = None;
    scale.spec.get_or_insert_with(Default::default).replicas = Some(2);
    let updated = api
        .replace_scale(name, &PostParams::default(), &scale)
        .await?;
    must_eq!(
        updated.spec.as_ref().and_then(|s| s.replicas),
        Some(2),
        "the updated scale's spec.replicas"
    );
    must_eq!(
        spec_replicas(&api.get(name).await?),
        Some(2),
        "spec.replicas after the scale update"
    );
    api.patch_scale(
        name,
        &PatchParams::default(),
        &Patch::Strategic(json!({"spec": {"replicas": 4}})),
    )
    .await?;
    must_eq!(
        spec_replicas(&api.get(name).await?),
        Some(4),
        "spec.replicas after the scale patch"
    );
    Ok(())
}

/// Whether a watched object is `name` in `ns` with every label of `labels` and a status condition
/// that `cond` accepts.
fn has_condition<K: Serialize>(
    obj: &K,
    name: &str,
    ns: &str,
    labels: &Value,
    cond: impl Fn(&Value) -> bool,
) -> bool {
    let v = to_json(obj);
    let labelled = labels
        .as_object()
        .into_iter()
        .flatten()
        .all(|(k, want)| &v["metadata"]["labels"][k] == want);
    v["metadata"]["name"] == name
        && v["metadata"]["namespace"] == ns
        && labelled
        && v["status"]["conditions"]
            .as_array()
            .is_some_and(|cs| cs.iter().any(&cond))
}

/// The steps of testRSStatus / "should validate Deployment Status endpoints" once the object
/// (labelled `sel`) runs: /status reads; an update of /status adding the StatusUpdate condition
/// and a merge patch of /status adding StatusPatched each show on the watch.
pub(super) async fn status_steps<K>(ctx: &Ctx, api: &Api<K>, name: &str, sel: &str) -> CaseResult
where
    K: Resource + Clone + DeserializeOwned + Serialize + Debug + Send + 'static,
{
    let labels: Value = sel
        .split(',')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), Value::String(v.to_string())))
        .collect::<serde_json::Map<_, _>>()
        .into();
    // Upstream's watches start before the object is made; this one starts once it runs, which is
    // still before every status change it waits for.
    let mut events = watch_labelled(api, sel).await?;
    let read = to_json(&api.get_status(name).await?);
    must!(
        read["metadata"]["name"] == name && read.get("status").is_some(),
        "GET /status of {name} did not return the object with its status: {read}"
    );

    let updated = ctx
        .wait("updating /status", MINUTE, || async {
            let mut v = to_json(&api.get(name).await?);
            let cond =
                json!({"type": "StatusUpdate", "status": "True", "reason": "E2E", "message": "Set from e2e test"});
            match v["status"]["conditions"].as_array_mut() {
                Some(cs) => cs.push(cond),
                None => v["status"]["conditions"] = json!([cond]),
            }
            let obj: K = from_json(v)?;
            Ok(match api.replace_status(name, &PostParams::default(), &obj).await {
                Ok(o) => Ok(o),
                Err(kube::Error::Api(s)) if s.code == 409 => Err("conflict".to_string()),
                Err(e) => return Err(e.into()),
            })
        })
        .await?;
    let ns = ctx.ns.as_str();
    must!(
        has_condition(&updated, name, ns, &labels, |c| c["type"] == "StatusUpdate"),
        "the /status update's answer lacks the StatusUpdate condition: {}",
        to_json(&updated)["status"]
    );
    until(
        &mut events,
        "the StatusUpdate condition",
        POD_START,
        |e| match e {
            WatchEvent::Added(o) | WatchEvent::Modified(o) => {
                has_condition(o, name, ns, &labels, |c| {
                    c["type"] == "StatusUpdate"
                        && c["reason"] == "E2E"
                        && c["message"] == "Set from e2e test"
                })
            }
            _ => false,
        },
    )
    .await?;

    let patched = api
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"status": {"conditions": [{"type": "StatusPatched", "status": "True"}]}}),
            ),
        )
        .await?;
    must!(
        has_condition(&patched, name, ns, &labels, |c| c["type"]
            == "StatusPatched"),
        "the /status patch's answer lacks the StatusPatched condition: {}",
        to_json(&patched)["status"]
    );
    until(
        &mut events,
        "the StatusPatched condition",
        POD_START,
        |e| match e {
            WatchEvent::Added(o) | WatchEvent::Modified(o) => {
                has_condition(o, name, ns, &labels, |c| c["type"] == "StatusPatched")
            }
            _ => false,
        },
    )
    .await?;
    Ok(())
}

fn rs_spec_replicas(rs: &ReplicaSet) -> Option<i32> {
    rs.spec.as_ref().and_then(|s| s.replicas)
}

/// Replica Set, run basic image: one replica of agnhost serve-hostname runs and answers with its
/// own name.
async fn serve_basic_image(ctx: &Ctx) -> CaseResult {
    let name = format!("my-hostname-basic-{}", suffix());
    let rs = new_rs(
        ctx,
        &name,
        1,
        &json!({"name": name}),
        &name,
        Image::ServeHostname,
    )?;
    ctx.api::<ReplicaSet>()
        .create(&PostParams::default(), &rs)
        .await?;
    replicas_answer_with_their_names(ctx, &name, 1).await
}

/// Replica Set, adopt matching pods and release non matching pods: an orphan with the selector's
/// labels is adopted (or replaced); a pod relabelled out of the selector loses its controller
/// reference.
async fn adopt_and_release(ctx: &Ctx) -> CaseResult {
    let name = "pod-adoption-release";
    let pod: Pod = from_json(json!({
        "metadata": {"name": name, "labels": {"name": name}},
        "spec": {"containers": [Image::Webserver.container(ctx, name)]}
    }))?;
    ctx.create_pod(&pod).await?;
    ctx.wait_running(name).await?;
    let rs = new_rs(ctx, name, 1, &json!({"name": name}), name, Image::Webserver)?;
    let rs = ctx
        .api::<ReplicaSet>()
        .create(&PostParams::default(), &rs)
        .await?;
    let uid = rs.metadata.uid.clone().unwrap_or_default();
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
    .await?;

    let pod_name = pods_created(ctx, name, 1).await?[0]
        .metadata
        .name
        .clone()
        .unwrap_or_default();
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
            Err("still controlled by the ReplicaSet")
        } else {
            Ok(())
        })
    })
    .await
}

/// ReplicaSet, completes the scaling of a ReplicaSet subresource: its one pod runs; /scale reads,
/// updates and patches the replicas.
async fn scale_subresource(ctx: &Ctx) -> CaseResult {
    let name = "test-rs";
    let rss: Api<ReplicaSet> = ctx.api();
    let rs = new_rs(
        ctx,
        name,
        1,
        &sample_labels("sample-pod"),
        WEBSERVER,
        Image::Webserver,
    )?;
    rss.create(&PostParams::default(), &rs).await?;
    verify_pods_running(ctx, "sample-pod", 1).await?;
    scale_steps(&rss, name, rs_spec_replicas).await
}

/// ReplicaSet, is created, Replaced and Patched: its pod runs; an update scales it to 2; a
/// strategic merge patch (label, 3 replicas, a pause container first) shows on the watch with 3
/// ready and available replicas.
async fn replace_and_patch(ctx: &Ctx) -> CaseResult {
    let name = "test-rs";
    let sel = "test-rs=patched";
    let rss: Api<ReplicaSet> = ctx.api();
    let mut events = watch_labelled(&rss, sel).await?;
    let rs = new_rs(
        ctx,
        name,
        1,
        &sample_labels("sample-pod"),
        WEBSERVER,
        Image::Webserver,
    )?;
    rss.create(&PostParams::default(), &rs).await?;
    verify_pods_running(ctx, "sample-pod", 1).await?;

    ctx.wait("scaling the ReplicaSet to 2", MINUTE, || async {
        let mut rs = rss.get(name).await?;
        rs.spec.get_or_insert_with(Default::default).replicas = Some(2);
        Ok(match rss.replace(name, &PostParams::default(), &rs).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => Err("conflict".to_string()),
            Err(e) => return Err(e.into()),
        })
    })
    .await?;
    must_eq!(
        rs_spec_replicas(&rss.get(name).await?),
        Some(2),
        "spec.replicas after the update"
    );

    let pause = ctx.images().pause();
    let patch = json!({
        "metadata": {"labels": {"test-rs": "patched"}},
        "spec": {"replicas": 3, "template": {"spec": {
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": name, "image": pause}]
        }}}
    });
    rss.patch(name, &PatchParams::default(), &Patch::Strategic(patch))
        .await?;
    until(
        &mut events,
        "the patched ReplicaSet with 3 ready and available replicas",
        POD_START,
        |e| match e {
            WatchEvent::Added(rs) | WatchEvent::Modified(rs) => {
                let v = to_json(rs);
                v["metadata"]["name"] == name
                    && v["metadata"]["labels"]["test-rs"] == "patched"
                    && v["status"]["readyReplicas"] == 3
                    && v["status"]["availableReplicas"] == 3
                    && v["spec"]["template"]["spec"]["containers"][0]["image"] == pause.as_str()
                    && v["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 0
            }
            _ => false,
        },
    )
    .await?;
    Ok(())
}

/// ReplicaSet, list and delete a collection of ReplicaSets: created, its 3 pods run, listed
/// across namespaces by a label, deleted by collection, and the list is then empty.
async fn list_and_delete_collection(ctx: &Ctx) -> CaseResult {
    let name = "test-rs";
    let e2e = suffix();
    let sel = format!("e2e={e2e}");
    let rss: Api<ReplicaSet> = ctx.api();
    let labels = json!({"name": "sample-pod", "pod": WEBSERVER, "e2e": e2e});
    let rs = new_rs(ctx, name, 3, &labels, WEBSERVER, Image::Webserver)?;
    rss.create(&PostParams::default(), &rs).await?;
    verify_pods_running(ctx, "sample-pod", 3).await?;
    rss.get(name).await?;

    let all: Api<ReplicaSet> = Api::all(ctx.client.clone());
    let listed = all.list(&ListParams::default().labels(&sel)).await?.items;
    must_eq!(listed.len(), 1, "ReplicaSets listed by {sel}");
    rss.delete_collection(
        &DeleteParams {
            grace_period_seconds: Some(1),
            ..Default::default()
        },
        &ListParams::default().labels(&sel),
    )
    .await?;
    let left = all.list(&ListParams::default().labels(&sel)).await?.items;
    must_eq!(
        left.len(),
        0,
        "ReplicaSets listed by {sel} after the collection's deletion"
    );
    Ok(())
}

/// ReplicaSet, status sub-resource: created, its pod runs; /status is read, updated and patched,
/// each change seen on a watch.
async fn status_endpoints(ctx: &Ctx) -> CaseResult {
    let name = "test-rs";
    let rss: Api<ReplicaSet> = ctx.api();
    let rs = new_rs(
        ctx,
        name,
        1,
        &sample_labels("sample-pod"),
        WEBSERVER,
        Image::Webserver,
    )?;
    rss.create(&PostParams::default(), &rs).await?;
    verify_pods_running(ctx, "sample-pod", 1).await?;
    status_steps(ctx, &rss, name, &format!("name=sample-pod,pod={WEBSERVER}")).await
}
