//! sig-apps Deployment entries, written from upstream's test/e2e/apps/deployment.go (and the
//! waits of test/utils/deployment.go): the scale subresource, Recreate and RollingUpdate
//! rollouts, pruning old ReplicaSets to revisionHistoryLimit, proportional scaling in the middle
//! of a rollout, rollover of a stuck rollout, the lifecycle followed through a watch, and the
//! status subresource. Pod shapes and the scale and status steps are shared with the ReplicaSet
//! entries (`replicasets.rs`): upstream's webserver (httpd) is the lab's busybox, agnhost runs
//! `pause`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use serde_json::{json, Value};

use super::replicasets::{
    new_rs, sample_labels, scale_steps, status_steps, verify_pods_running, Image, AGNHOST,
    WEBSERVER,
};
use super::replication::{controlled_by, is_modified, suffix, until, watch_labelled, MINUTE};
use super::{case, Case};
use crate::ctx::{from_json, to_json, Ctx, POD_START};
use crate::error::{CaseError, CaseResult};
use crate::{must, must_eq};

pub const CASES: &[Case] = &[
    case!(
        "[sig-apps] Deployment Deployment should have a working scale subresource [Conformance]",
        "deployment",
        scale_subresource
    ),
    case!(
        "[sig-apps] Deployment RecreateDeployment should delete old pods and create new ones [Conformance]",
        "deployment",
        recreate
    ),
    case!(
        "[sig-apps] Deployment RollingUpdateDeployment should delete old pods and create new ones [Conformance]",
        "deployment",
        rolling_update
    ),
    case!(
        "[sig-apps] Deployment deployment should delete old replica sets [Conformance]",
        "deployment",
        delete_old_replica_sets
    ),
    case!(
        "[sig-apps] Deployment deployment should support proportional scaling [Conformance]",
        "deployment",
        proportional_scaling
    ),
    case!(
        "[sig-apps] Deployment deployment should support rollover [Conformance]",
        "deployment",
        rollover
    ),
    case!(
        "[sig-apps] Deployment should run the lifecycle of a Deployment [Conformance]",
        "deployment",
        lifecycle
    ),
    case!(
        "[sig-apps] Deployment should validate Deployment Status endpoints [Conformance]",
        "deployment",
        status_endpoints
    ),
];

/// Upstream's pollLongTimeout: how long a rollout may take.
const LONG: Duration = Duration::from_secs(300);
const REVISION: &str = "deployment.kubernetes.io/revision";
const HASH_LABEL: &str = "pod-template-hash";
const ROLLING: &str = "RollingUpdate";

/// e2edeployment.NewDeployment: the labels on the Deployment, its selector and its pods; one
/// container; terminationGracePeriodSeconds 0. As JSON, for the cases that add to it.
fn new_deployment(
    ctx: &Ctx,
    name: &str,
    replicas: i32,
    labels: &Value,
    container: &str,
    image: Image,
    strategy: &str,
) -> Value {
    json!({
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "strategy": {"type": strategy},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "terminationGracePeriodSeconds": 0,
                    "containers": [image.container(ctx, container)]
                }
            }
        }
    })
}

async fn create(ctx: &Ctx, d: Value) -> CaseResult<Deployment> {
    let d: Deployment = from_json(d)?;
    Ok(ctx
        .api::<Deployment>()
        .create(&PostParams::default(), &d)
        .await?)
}

fn spec_replicas(d: &Deployment) -> i32 {
    d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
}

fn rs_spec(rs: &ReplicaSet) -> i32 {
    rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
}

fn rs_status(rs: &ReplicaSet) -> (i32, i32, i64) {
    rs.status.as_ref().map_or((0, 0, 0), |s| {
        (
            s.replicas,
            s.available_replicas.unwrap_or(0),
            s.observed_generation.unwrap_or(0),
        )
    })
}

fn annotation<'a>(meta: &'a kube::api::ObjectMeta, key: &str) -> &'a str {
    meta.annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map_or("", String::as_str)
}

fn images(rs_or_d_template: Option<&k8s_openapi::api::core::v1::PodTemplateSpec>) -> Vec<String> {
    rs_or_d_template
        .and_then(|t| t.spec.as_ref())
        .map(|s| {
            s.containers
                .iter()
                .filter_map(|c| c.image.clone())
                .collect()
        })
        .unwrap_or_default()
}

/// A pod template as JSON without the pod-template-hash label (EqualIgnoreHash).
fn template_without_hash(t: Option<&k8s_openapi::api::core::v1::PodTemplateSpec>) -> Value {
    let mut v = t.map(to_json).unwrap_or_default();
    if let Some(labels) = v
        .pointer_mut("/metadata/labels")
        .and_then(Value::as_object_mut)
    {
        labels.remove(HASH_LABEL);
        if labels.is_empty() {
            v["metadata"].as_object_mut().map(|m| m.remove("labels"));
        }
    }
    v
}

/// deploymentutil's ListReplicaSets, FindNewReplicaSet and FindOldReplicaSets: the sets the
/// Deployment controls; the oldest whose template is the Deployment's is the new one, the rest old.
struct Sets {
    new: Option<ReplicaSet>,
    old: Vec<ReplicaSet>,
}

impl Sets {
    /// The old sets that still have replicas (FindOldReplicaSets' first answer).
    fn old_active(&self) -> impl Iterator<Item = &ReplicaSet> {
        self.old.iter().filter(|rs| rs_spec(rs) != 0)
    }
}

async fn replica_sets(ctx: &Ctx, d: &Deployment) -> CaseResult<Sets> {
    let labels = d
        .spec
        .as_ref()
        .and_then(|s| s.selector.match_labels.clone())
        .unwrap_or_default();
    let sel = labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",");
    let uid = d.metadata.uid.clone().unwrap_or_default();
    let mut owned: Vec<ReplicaSet> = ctx
        .api::<ReplicaSet>()
        .list(&ListParams::default().labels(&sel))
        .await?
        .items
        .into_iter()
        .filter(|rs| controlled_by(rs, &uid))
        .collect();
    owned.sort_by(|a, b| {
        (
            a.metadata.creation_timestamp.as_ref().map(|t| t.0),
            &a.metadata.name,
        )
            .cmp(&(
                b.metadata.creation_timestamp.as_ref().map(|t| t.0),
                &b.metadata.name,
            ))
    });
    let want = template_without_hash(d.spec.as_ref().map(|s| &s.template));
    let new_at = owned.iter().position(|rs| {
        template_without_hash(rs.spec.as_ref().and_then(|s| s.template.as_ref())) == want
    });
    let new = new_at.map(|i| owned.remove(i));
    Ok(Sets { new, old: owned })
}

fn selector_has_hash(rs: &ReplicaSet) -> bool {
    rs.spec
        .as_ref()
        .and_then(|s| s.selector.match_labels.as_ref())
        .is_some_and(|l| l.contains_key(HASH_LABEL))
}

/// checkRevisionAndImage: the new set exists with the hash in its selector, it and the
/// Deployment carry `revision`, and both templates run `image`.
fn check_revision_and_image(
    d: &Deployment,
    new: Option<&ReplicaSet>,
    revision: &str,
    image: &str,
) -> Result<(), String> {
    let name = d.metadata.name.as_deref().unwrap_or_default();
    let Some(rs) = new else {
        return Err(format!("the new ReplicaSet of {name} is not created yet"));
    };
    let rs_name = rs.metadata.name.as_deref().unwrap_or_default();
    if !selector_has_hash(rs) {
        return Err(format!("{rs_name} has no {HASH_LABEL} in its selector"));
    }
    let (d_rev, rs_rev) = (
        annotation(&d.metadata, REVISION),
        annotation(&rs.metadata, REVISION),
    );
    if d_rev != revision || rs_rev != revision {
        return Err(format!(
            "revision of {name} {d_rev:?}, of {rs_name} {rs_rev:?}; want {revision:?}"
        ));
    }
    let d_images = images(d.spec.as_ref().map(|s| &s.template));
    let rs_images = images(rs.spec.as_ref().and_then(|s| s.template.as_ref()));
    if !d_images.iter().any(|i| i == image) || !rs_images.iter().any(|i| i == image) {
        return Err(format!(
            "images of {name} {d_images:?}, of {rs_name} {rs_images:?}; want {image}"
        ));
    }
    Ok(())
}

/// WaitForDeploymentRevisionAndImage.
async fn wait_revision_and_image(ctx: &Ctx, name: &str, revision: &str, image: &str) -> CaseResult {
    let api: Api<Deployment> = ctx.api();
    ctx.wait(
        &format!("{name} and its new ReplicaSet at revision {revision} with image {image}"),
        LONG,
        || async {
            let d = api.get(name).await?;
            let sets = replica_sets(ctx, &d).await?;
            Ok(check_revision_and_image(
                &d,
                sets.new.as_ref(),
                revision,
                image,
            ))
        },
    )
    .await
}

/// upstream's ResolveFenceposts, MaxSurge and MaxUnavailable: (max surge, max unavailable) in pods.
fn fenceposts(d: &Deployment) -> (i32, i32) {
    let replicas = spec_replicas(d);
    let strategy = d.spec.as_ref().and_then(|s| s.strategy.as_ref());
    if strategy.and_then(|s| s.type_.as_deref()) != Some(ROLLING) {
        return (0, 0);
    }
    let ru = strategy.and_then(|s| s.rolling_update.as_ref());
    let resolve = |v: Option<&IntOrString>, round_up: bool| match v {
        Some(IntOrString::Int(n)) => *n,
        other => {
            let pct = match other {
                Some(IntOrString::String(s)) => s.trim_end_matches('%').parse().unwrap_or(0.0),
                _ => 25.0,
            };
            let x = f64::from(replicas) * pct / 100.0;
            (if round_up { x.ceil() } else { x.floor() }) as i32
        }
    };
    let surge = resolve(ru.and_then(|r| r.max_surge.as_ref()), true);
    let mut unavailable = resolve(ru.and_then(|r| r.max_unavailable.as_ref()), false);
    if surge == 0 && unavailable == 0 {
        unavailable = 1;
    }
    (surge, unavailable.min(replicas))
}

/// checkRollingUpdateStatus: while the sets all carry the hash, the replicas they ask for stay
/// within maxSurge and the Deployment's available replicas within maxUnavailable.
async fn check_rolling(ctx: &Ctx, d: &Deployment) -> CaseResult {
    let sets = replica_sets(ctx, d).await?;
    let Some(new) = &sets.new else {
        return Ok(());
    };
    let all: Vec<&ReplicaSet> = sets.old_active().chain([new]).collect();
    if !all.iter().all(|rs| selector_has_hash(rs)) {
        return Ok(());
    }
    let (surge, unavailable) = fenceposts(d);
    let created: i32 = all.iter().map(|rs| rs_spec(rs)).sum();
    let max = spec_replicas(d) + surge;
    must!(
        created <= max,
        "total pods created: {created}, more than the max allowed: {max}"
    );
    let available = d
        .status
        .as_ref()
        .and_then(|s| s.available_replicas)
        .unwrap_or(0);
    let min = spec_replicas(d) - unavailable;
    must!(
        available >= min,
        "total pods available: {available}, less than the min required: {min}"
    );
    Ok(())
}

/// WaitForDeploymentComplete (and, when `rolling`, WaitForDeploymentCompleteAndCheckRolling):
/// updated, total and available replicas all equal `d`'s spec.replicas, and its generation is
/// observed.
async fn wait_complete(ctx: &Ctx, d: &Deployment, rolling: bool) -> CaseResult<Deployment> {
    let name = d.metadata.name.clone().unwrap_or_default();
    let want = spec_replicas(d);
    let generation = d.metadata.generation.unwrap_or(0);
    let api: Api<Deployment> = ctx.api();
    ctx.wait(&format!("{name} to complete"), LONG, || async {
        let cur = api.get(&name).await?;
        if rolling {
            check_rolling(ctx, &cur).await?;
        }
        let s = cur.status.clone().unwrap_or_default();
        Ok(
            if s.updated_replicas == Some(want)
                && s.replicas == Some(want)
                && s.available_replicas == Some(want)
                && s.observed_generation.unwrap_or(0) >= generation
            {
                Ok(cur)
            } else {
                Err(format!("status {}", to_json(&s)))
            },
        )
    })
    .await
}

/// WaitForObservedDeployment.
async fn wait_observed(ctx: &Ctx, name: &str, generation: i64) -> CaseResult {
    let api: Api<Deployment> = ctx.api();
    ctx.wait(
        &format!("generation {generation} of {name} to be observed"),
        MINUTE,
        || async {
            let seen = api
                .get(name)
                .await?
                .status
                .and_then(|s| s.observed_generation)
                .unwrap_or(0);
            Ok(if seen >= generation {
                Ok(())
            } else {
                Err(format!("observedGeneration {seen}"))
            })
        },
    )
    .await
}

/// UpdateDeploymentWithRetries.
async fn update_with_retries(
    ctx: &Ctx,
    name: &str,
    change: impl Fn(&mut Deployment),
) -> CaseResult<Deployment> {
    let api: Api<Deployment> = ctx.api();
    ctx.wait(&format!("updating {name}"), MINUTE, || async {
        let mut d = api.get(name).await?;
        change(&mut d);
        Ok(match api.replace(name, &PostParams::default(), &d).await {
            Ok(d) => Ok(d),
            Err(e) => Err(e.to_string()),
        })
    })
    .await
}

/// The Deployment's first container becomes `container` running `image` (what upstream's
/// updates set: the name and the image).
fn set_container(ctx: &Ctx, d: &mut Deployment, container: &str, image: Image) {
    if let (Some(spec), Ok(c)) = (
        d.spec.as_mut().and_then(|s| s.template.spec.as_mut()),
        from_json::<Container>(image.container(ctx, container)),
    ) {
        spec.containers[0] = c;
    }
}

/// waitForReplicaSetTargetSpecReplicas / waitForReplicaSetDesiredReplicas: the set's generation
/// is observed and it asks for `want` replicas (and, when `created`, has them).
async fn wait_rs(ctx: &Ctx, rs: &ReplicaSet, want: i32, created: bool) -> CaseResult<ReplicaSet> {
    let name = rs.metadata.name.clone().unwrap_or_default();
    let generation = rs.metadata.generation.unwrap_or(0);
    let api: Api<ReplicaSet> = ctx.api();
    let what = if created { "to have" } else { "to ask for" };
    ctx.wait(
        &format!("{name} {what} {want} replicas"),
        MINUTE,
        || async {
            let cur = api.get(&name).await?;
            let (replicas, _, observed) = rs_status(&cur);
            Ok(
                if observed >= generation && rs_spec(&cur) == want && (!created || replicas == want)
                {
                    Ok(cur)
                } else {
                    Err(format!(
                    "spec.replicas {}, status.replicas {replicas}, observedGeneration {observed}",
                    rs_spec(&cur)
                ))
                },
            )
        },
    )
    .await
}

/// ensureReplicas: the set asks for and has `want` replicas.
fn ensure_replicas(rs: &ReplicaSet, want: i32) -> CaseResult {
    let name = rs.metadata.name.as_deref().unwrap_or_default();
    must_eq!(rs_spec(rs), want, "spec.replicas of {name}");
    must_eq!(rs_status(rs).0, want, "status.replicas of {name}");
    Ok(())
}

/// Deployment, completes the scaling of a Deployment subresource: its one pod runs; /scale
/// reads, updates and patches the replicas.
async fn scale_subresource(ctx: &Ctx) -> CaseResult {
    let name = "test-new-deployment";
    let labels = json!({"name": WEBSERVER});
    let d = create(
        ctx,
        new_deployment(ctx, name, 1, &labels, WEBSERVER, Image::Webserver, ROLLING),
    )
    .await?;
    wait_revision_and_image(ctx, name, "1", &Image::Webserver.reference(ctx)).await?;
    wait_complete(ctx, &d, false).await?;
    scale_steps(&ctx.api::<Deployment>(), name, |d| {
        d.spec.as_ref().and_then(|s| s.replicas)
    })
    .await
}

/// Deployment Recreate: after revision 1 completes, a new template rolls out without any new
/// pod running beside an old one (watched until the rollout completes).
async fn recreate(ctx: &Ctx) -> CaseResult {
    let name = "test-recreate-deployment";
    let labels = json!({"name": "sample-pod-3"});
    let d = create(
        ctx,
        new_deployment(ctx, name, 1, &labels, AGNHOST, Image::Agnhost, "Recreate"),
    )
    .await?;
    wait_revision_and_image(ctx, name, "1", &Image::Agnhost.reference(ctx)).await?;
    wait_complete(ctx, &d, false).await?;
    let d = update_with_retries(ctx, name, |d| {
        set_container(ctx, d, WEBSERVER, Image::Webserver)
    })
    .await?;

    // watchRecreateDeployment
    let api: Api<Deployment> = ctx.api();
    let rv = d.metadata.resource_version.clone().unwrap_or_default();
    let wp = WatchParams::default().fields(&format!("metadata.name={name}"));
    let mut events = api.watch(&wp, &rv).await?.boxed();
    let mut mixed = None;
    until(
        &mut events,
        "the Recreate rollout to complete",
        Duration::from_secs(120),
        |e| {
            let (WatchEvent::Added(d) | WatchEvent::Modified(d)) = e else {
                return false;
            };
            let s = d.status.clone().unwrap_or_default();
            let (replicas, updated) = (s.replicas.unwrap_or(0), s.updated_replicas.unwrap_or(0));
            if updated > 0 && replicas != updated {
                mixed = Some(to_json(&s));
                return true;
            }
            spec_replicas(d) == replicas
                && spec_replicas(d) == updated
                && d.metadata.generation.unwrap_or(0) <= s.observed_generation.unwrap_or(0)
        },
    )
    .await?;
    if let Some(s) = mixed {
        return Err(CaseError::Failed(format!(
            "deployment {name} is running new pods alongside old pods: {s}"
        )));
    }
    Ok(())
}

/// Deployment RollingUpdate: a Deployment adopts a matching ReplicaSet (revision
/// 3546343826724305832), rolls its own template out as the next revision, completes, and keeps
/// the adopted set as its one old set.
async fn rolling_update(ctx: &Ctx) -> CaseResult {
    let rs_name = "test-rolling-update-controller";
    let mut rs = new_rs(
        ctx,
        rs_name,
        1,
        &sample_labels("sample-pod"),
        WEBSERVER,
        Image::Webserver,
    )?;
    rs.metadata.annotations =
        Some([(REVISION.to_string(), "3546343826724305832".to_string())].into());
    ctx.api::<ReplicaSet>()
        .create(&PostParams::default(), &rs)
        .await?;
    verify_pods_running(ctx, "sample-pod", 1).await?;

    let name = "test-rolling-update-deployment";
    let labels = json!({"name": "sample-pod"});
    let d = create(
        ctx,
        new_deployment(ctx, name, 1, &labels, AGNHOST, Image::Agnhost, ROLLING),
    )
    .await?;
    wait_revision_and_image(
        ctx,
        name,
        "3546343826724305833",
        &Image::Agnhost.reference(ctx),
    )
    .await?;
    let d = wait_complete(ctx, &d, false).await?;
    let sets = replica_sets(ctx, &d).await?;
    let old: Vec<_> = sets.old.iter().map(|rs| rs.metadata.name.clone()).collect();
    must_eq!(
        old.len(),
        1,
        "old ReplicaSets of {name} (the adopted one): {old:?}"
    );
    Ok(())
}

/// Deployment RevisionHistoryLimit: with revisionHistoryLimit 0 the adopted set is deleted once
/// scaled down, and the only pod created meanwhile is the Deployment's own (agnhost).
async fn delete_old_replica_sets(ctx: &Ctx) -> CaseResult {
    let rs = new_rs(
        ctx,
        "test-cleanup-controller",
        1,
        &sample_labels("cleanup-pod"),
        WEBSERVER,
        Image::Webserver,
    )?;
    ctx.api::<ReplicaSet>()
        .create(&PostParams::default(), &rs)
        .await?;
    verify_pods_running(ctx, "cleanup-pod", 1).await?;

    // Every pod created from here on, with its first container's name.
    let pods: Api<Pod> = ctx.api();
    let rv = pods
        .list(&ListParams::default())
        .await?
        .metadata
        .resource_version
        .unwrap_or_default();
    let mut stream = pods.watch(&WatchParams::default(), &rv).await?.boxed();
    let created: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
    let seen = created.clone();
    let watcher = tokio::spawn(async move {
        while let Some(Ok(ev)) = stream.next().await {
            if let WatchEvent::Added(p) = ev {
                let container = p
                    .spec
                    .and_then(|s| s.containers.into_iter().next())
                    .map(|c| c.name)
                    .unwrap_or_default();
                if let Ok(mut v) = seen.lock() {
                    v.push((p.metadata.name.unwrap_or_default(), container));
                }
            }
        }
    });

    let name = "test-cleanup-deployment";
    let mut d = new_deployment(
        ctx,
        name,
        1,
        &json!({"name": "cleanup-pod"}),
        AGNHOST,
        Image::Agnhost,
        ROLLING,
    );
    d["spec"]["revisionHistoryLimit"] = json!(0);
    create(ctx, d).await?;
    let api: Api<Deployment> = ctx.api();
    let waited = ctx
        .wait(
            &format!("the old ReplicaSets of {name} to be deleted"),
            LONG,
            || async {
                let sets = replica_sets(ctx, &api.get(name).await?).await?;
                let old: Vec<_> = sets.old.iter().map(|rs| rs.metadata.name.clone()).collect();
                Ok(if old.is_empty() {
                    Ok(())
                } else {
                    Err(format!("old ReplicaSets {old:?}"))
                })
            },
        )
        .await;
    watcher.abort();
    waited?;
    let created = created.lock().map(|v| v.clone()).unwrap_or_default();
    must!(
        created.len() <= 1,
        "expected only one pod creation (the Deployment's), saw {created:?}"
    );
    for (pod, container) in &created {
        must_eq!(
            container.as_str(),
            AGNHOST,
            "the container of the created pod {pod}"
        );
    }
    Ok(())
}

/// Deployment Proportional Scaling: scaled from 10 to 30 in the middle of a rollout that is stuck
/// (maxSurge 3, maxUnavailable 2: 8 old and 5 new replicas), the Deployment spreads the 20 new
/// replicas over both sets in proportion: 20 and 13.
async fn proportional_scaling(ctx: &Ctx) -> CaseResult {
    let name = "webserver-deployment";
    let replicas = 10;
    let mut d = new_deployment(
        ctx,
        name,
        replicas,
        &json!({"name": WEBSERVER}),
        WEBSERVER,
        Image::Webserver,
        ROLLING,
    );
    d["spec"]["strategy"]["rollingUpdate"] = json!({"maxSurge": 3, "maxUnavailable": 2});
    let d = create(ctx, d).await?;
    wait_observed(ctx, name, d.metadata.generation.unwrap_or(0)).await?;
    verify_pods_running(ctx, WEBSERVER, replicas as usize).await?;
    wait_complete(ctx, &d, false).await?;
    let first = replica_sets(ctx, &d)
        .await?
        .new
        .ok_or_else(|| CaseError::Failed(format!("{name} has no ReplicaSet")))?;

    // A partial rollout: the new image does not exist.
    let d = update_with_retries(ctx, name, |d| {
        if let Some(c) = d
            .spec
            .as_mut()
            .and_then(|s| s.template.spec.as_mut())
            .and_then(|s| s.containers.first_mut())
        {
            c.image = Some("webserver:404".into());
        }
    })
    .await?;
    wait_observed(ctx, name, d.metadata.generation.unwrap_or(0)).await?;
    let (surge, unavailable) = fenceposts(&d);
    let min_available = replicas - unavailable;
    let first_name = first.metadata.name.clone().unwrap_or_default();
    let rss: Api<ReplicaSet> = ctx.api();
    ctx.wait(
        &format!("{first_name} to have {min_available} available replicas"),
        POD_START,
        || async {
            let rs = rss.get(&first_name).await?;
            let (_, available, observed) = rs_status(&rs);
            Ok(
                if rs.metadata.generation.unwrap_or(0) <= observed && available == min_available {
                    Ok(())
                } else {
                    Err(format!("availableReplicas {available}"))
                },
            )
        },
    )
    .await?;
    wait_rs(ctx, &first, min_available, false).await?;
    let first = rss.get(&first_name).await?;
    let first = wait_rs(ctx, &first, rs_spec(&first), true).await?;

    let second = replica_sets(ctx, &d)
        .await?
        .new
        .ok_or_else(|| CaseError::Failed(format!("{name} has no new ReplicaSet")))?;
    must_eq!(
        rs_status(&second).1,
        0,
        "availableReplicas of the second rollout's ReplicaSet"
    );
    let new_replicas = replicas + surge - min_available;
    wait_rs(ctx, &second, new_replicas, false).await?;
    let second = rss
        .get(second.metadata.name.as_deref().unwrap_or_default())
        .await?;
    let second = wait_rs(ctx, &second, rs_spec(&second), true).await?;
    let available = ctx
        .api::<Deployment>()
        .get(name)
        .await?
        .status
        .and_then(|s| s.available_replicas)
        .unwrap_or(0);
    must!(
        available >= min_available,
        "observed {available} available replicas, less than min required {min_available}"
    );

    update_with_retries(ctx, name, |d| {
        d.spec.get_or_insert_with(Default::default).replicas = Some(30);
    })
    .await?;
    // 8 + (30-10)*(8/13) rounds to 20; 5 + (30-10)*(5/13) rounds to 13.
    wait_rs(ctx, &first, 20, false).await?;
    wait_rs(ctx, &second, 13, false).await?;
    Ok(())
}

/// Deployment Rollover: a Deployment adopting a running set starts a rollout that cannot finish
/// (nonexistent image, maxUnavailable 0, maxSurge 1, minReadySeconds 10); a new template rolls
/// over both sets: revision 2 completes within the rolling bounds and both old sets end at 0.
async fn rollover(ctx: &Ctx) -> CaseResult {
    let rs_name = "test-rollover-controller";
    let rss: Api<ReplicaSet> = ctx.api();
    let rs = new_rs(
        ctx,
        rs_name,
        1,
        &sample_labels("rollover-pod"),
        WEBSERVER,
        Image::Webserver,
    )?;
    rss.create(&PostParams::default(), &rs).await?;
    verify_pods_running(ctx, "rollover-pod", 1).await?;
    ctx.wait(&format!("{rs_name} to be ready"), POD_START, || async {
        let rs = rss.get(rs_name).await?;
        let ready = rs
            .status
            .as_ref()
            .and_then(|s| s.ready_replicas)
            .unwrap_or(0);
        Ok(if ready == rs_spec(&rs) {
            Ok(())
        } else {
            Err(format!("readyReplicas {ready}"))
        })
    })
    .await?;

    let name = "test-rollover-deployment";
    let missing = "gcr.io/google_samples/gb-redisslave:nonexistent";
    let mut d = new_deployment(
        ctx,
        name,
        1,
        &json!({"name": "rollover-pod"}),
        "redis-slave",
        Image::Missing(missing),
        ROLLING,
    );
    d["spec"]["strategy"]["rollingUpdate"] = json!({"maxUnavailable": 0, "maxSurge": 1});
    d["spec"]["minReadySeconds"] = json!(10);
    let d = create(ctx, d).await?;
    let api: Api<Deployment> = ctx.api();
    let generation = d.metadata.generation.unwrap_or(0);
    ctx.wait(
        &format!("{name} to have at least 1 updated replica"),
        LONG,
        || async {
            let s = api.get(name).await?.status.unwrap_or_default();
            Ok(
                if s.observed_generation.unwrap_or(0) >= generation
                    && s.updated_replicas.unwrap_or(0) >= 1
                {
                    Ok(())
                } else {
                    Err(format!("status {}", to_json(&s)))
                },
            )
        },
    )
    .await?;
    let d = api.get(name).await?;
    let sets = replica_sets(ctx, &d).await?;
    check_revision_and_image(&d, sets.new.as_ref(), "1", missing).map_err(CaseError::Failed)?;
    ensure_replicas(&rss.get(rs_name).await?, 1)?;
    let stuck = sets
        .new
        .ok_or_else(|| CaseError::Failed(format!("{name} has no new ReplicaSet")))?;
    ensure_replicas(&stuck, 1)?;

    let d = update_with_retries(ctx, name, |d| {
        set_container(ctx, d, AGNHOST, Image::Agnhost)
    })
    .await?;
    wait_observed(ctx, name, d.metadata.generation.unwrap_or(0)).await?;
    wait_revision_and_image(ctx, name, "2", &Image::Agnhost.reference(ctx)).await?;
    wait_complete(ctx, &d, true).await?;
    ensure_replicas(&rss.get(rs_name).await?, 0)?;
    ensure_replicas(
        &rss.get(stuck.metadata.name.as_deref().unwrap_or_default())
            .await?,
        0,
    )?;
    Ok(())
}

/// Whether a watched Deployment is `name`, carries the static label, and `f` holds of it.
fn watched(
    e: &WatchEvent<Deployment>,
    name: &str,
    f: impl Fn(&Deployment, &Value) -> bool,
) -> bool {
    match e {
        WatchEvent::Added(d) | WatchEvent::Modified(d) | WatchEvent::Deleted(d) => {
            let labels = d.metadata.labels.clone().unwrap_or_default();
            d.metadata.name.as_deref() == Some(name)
                && labels.get("test-deployment-static").map(String::as_str) == Some("true")
                && f(d, &to_json(&d.status))
        }
        _ => false,
    }
}

/// readyReplicas and updatedReplicas both `n`, none unavailable.
fn settled(status: &Value, n: i32) -> bool {
    status["readyReplicas"] == n
        && status["updatedReplicas"] == n
        && status["unavailableReplicas"].as_i64().unwrap_or(0) == 0
}

fn first_image(d: &Deployment) -> Option<&str> {
    d.spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|s| s.containers.first())
        .and_then(|c| c.image.as_deref())
}

/// GET /status: the object's template runs `image` and its label test-deployment is `label`.
async fn status_shows(api: &Api<Deployment>, name: &str, image: &str, label: &str) -> CaseResult {
    let d = api.get_status(name).await?;
    must_eq!(first_image(&d), Some(image), "the image read from /status");
    must_eq!(
        d.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("test-deployment"))
            .map(String::as_str),
        Some(label),
        "the test-deployment label read from /status"
    );
    Ok(())
}

/// Deployment, completes the lifecycle of a Deployment: created with 2 ready replicas; patched
/// (label, 1 replica, the pause image) and scaled; listed across namespaces; updated (label, the
/// webserver image, 2 replicas) and rolled out; /status read and patched (a label there does not
/// stick, the controller restores the counts); deleted by collection — each step seen on a
/// watch. The lab's agnhost names its binary as the command, which the pause and webserver
/// images lack: the patch and the update drop it so those images run their own.
async fn lifecycle(ctx: &Ctx) -> CaseResult {
    let name = "test-deployment";
    let sel = "test-deployment-static=true";
    let api: Api<Deployment> = ctx.api();
    let mut events = watch_labelled(&api, sel).await?;
    let labels = json!({"test-deployment-static": "true"});
    let mut d = new_deployment(ctx, name, 2, &labels, name, Image::Agnhost, ROLLING);
    d["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = json!(1);
    create(ctx, d.clone()).await?;
    until(&mut events, "ADDED", Duration::from_secs(30), |e| {
        matches!(e, WatchEvent::Added(_)) && watched(e, name, |_, _| true)
    })
    .await?;
    until(&mut events, "2 ready replicas", POD_START, |e| {
        watched(e, name, |_, s| s["readyReplicas"] == 2)
    })
    .await?;

    let pause = Image::Pause.reference(ctx);
    let patch = json!({
        "metadata": {"labels": {"test-deployment": "patched"}},
        "spec": {"replicas": 1, "template": {"spec": {
            "terminationGracePeriodSeconds": 2,
            "containers": [{"name": name, "image": pause, "command": null, "args": null}]
        }}}
    });
    api.patch(name, &PatchParams::default(), &Patch::Strategic(patch))
        .await?;
    until(
        &mut events,
        "MODIFIED after the patch",
        Duration::from_secs(30),
        |e| is_modified(e) && watched(e, name, |_, _| true),
    )
    .await?;
    until(
        &mut events,
        "1 ready replica of the pause image",
        POD_START,
        |e| {
            watched(e, name, |d, s| {
                settled(s, 1)
                    && first_image(d) == Some(pause.as_str())
                    && d.spec
                        .as_ref()
                        .and_then(|s| s.template.spec.as_ref())
                        .and_then(|s| s.termination_grace_period_seconds)
                        == Some(2)
            })
        },
    )
    .await?;

    let all: Api<Deployment> = Api::all(ctx.client.clone());
    let listed = all.list(&ListParams::default().labels(sel)).await?.items;
    must!(
        listed
            .iter()
            .any(|d| d.metadata.name.as_deref() == Some(name)
                && d.metadata.namespace.as_deref() == Some(ctx.ns.as_str())),
        "no Deployment {name} in {} among those listed by {sel}",
        ctx.ns
    );

    // The update sends the object as first made (no resourceVersion): an unconditional update.
    let webserver = Image::Webserver.reference(ctx);
    d["metadata"]["labels"]["test-deployment"] = json!("updated");
    d["spec"]["template"]["spec"]["containers"] = json!([Image::Webserver.container(ctx, name)]);
    let update: Deployment = from_json(d)?;
    api.replace(name, &PostParams::default(), &update).await?;
    until(
        &mut events,
        "MODIFIED after the update",
        Duration::from_secs(30),
        |e| is_modified(e) && watched(e, name, |_, _| true),
    )
    .await?;
    status_shows(&api, name, &webserver, "updated").await?;
    until(
        &mut events,
        "2 ready replicas after the update",
        POD_START,
        |e| watched(e, name, |_, s| settled(s, 2)),
    )
    .await?;

    let status_patch = json!({
        "metadata": {"labels": {"test-deployment": "patched-status"}},
        "status": {"readyReplicas": 0, "availableReplicas": 0}
    });
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Strategic(status_patch),
    )
    .await?;
    until(
        &mut events,
        "MODIFIED after the status patch",
        Duration::from_secs(30),
        |e| is_modified(e) && watched(e, name, |_, _| true),
    )
    .await?;
    status_shows(&api, name, &webserver, "updated").await?;
    until(
        &mut events,
        "2 ready replicas of the webserver image",
        POD_START,
        |e| {
            watched(e, name, |d, s| {
                settled(s, 2) && first_image(d) == Some(webserver.as_str())
            })
        },
    )
    .await?;

    api.delete_collection(
        &DeleteParams {
            grace_period_seconds: Some(1),
            ..Default::default()
        },
        &ListParams::default().labels(sel),
    )
    .await?;
    until(&mut events, "DELETED", MINUTE, |e| {
        matches!(e, WatchEvent::Deleted(_)) && watched(e, name, |_, _| true)
    })
    .await?;
    Ok(())
}

/// Deployment, status sub-resource: created and complete; /status is read, updated and patched,
/// each change seen on a watch.
async fn status_endpoints(ctx: &Ctx) -> CaseResult {
    let name = format!("test-deployment-{}", suffix());
    let labels = json!({"name": WEBSERVER, "e2e": "testing"});
    let d = create(
        ctx,
        new_deployment(ctx, &name, 1, &labels, WEBSERVER, Image::Webserver, ROLLING),
    )
    .await?;
    wait_revision_and_image(ctx, &name, "1", &Image::Webserver.reference(ctx)).await?;
    wait_complete(ctx, &d, false).await?;
    let api: Api<Deployment> = ctx.api();
    api.get(&name).await?;
    status_steps(ctx, &api, &name, "e2e=testing").await
}
