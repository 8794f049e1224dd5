//! sig-scheduling SchedulerPreemption entries, written from upstream's
//! test/e2e/scheduling/preemption.go: nodes advertise an extended resource (a patch of the node's
//! status capacity and allocatable, removed afterwards), pause pods of the case's PriorityClasses
//! fill it, and a pod of higher priority (or system-cluster-critical) MUST preempt exactly the lowest
//! priority pod; a preempted pod MUST carry the DisruptionTarget condition; ReplicaSets of four
//! priorities MUST see exactly the preempted replicas recreated.

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use serde_json::{json, Value};

use super::{case, Case};
use crate::ctx::{describe_status, from_json, phase, Ctx, POD_START};
use crate::error::{CaseError, CaseResult};
use crate::{must, must_eq};

pub const CASES: &[Case] = &[
    case!(
        "[sig-scheduling] SchedulerPreemption [Serial] validates basic preemption works [Conformance]",
        "sched-preemption",
        basic_preemption
    ),
    case!(
        "[sig-scheduling] SchedulerPreemption [Serial] validates lower priority pod preemption by critical pod [Conformance]",
        "sched-preemption",
        critical_pod_preemption
    ),
    case!(
        "[sig-scheduling] SchedulerPreemption [Serial] validates pod disruption condition is added to the preempted pod [Conformance]",
        "sched-preemption",
        disruption_condition
    ),
    case!(
        "[sig-scheduling] SchedulerPreemption [Serial] PreemptionExecutionPath runs ReplicaSets to verify preemption running path [Conformance]",
        "sched-preemption-path",
        replicasets_preemption_path
    ),
];

/// upstream's testExtendedResource.
const FOO: &str = "scheduling.k8s.io/foo";
/// The PreemptionExecutionPath context's resource.
const FAKECPU: &str = "example.com/fakecpu";
const LOW: &str = "sched-preemption-low-priority";
const MEDIUM: &str = "sched-preemption-medium-priority";
const HIGH: &str = "sched-preemption-high-priority";
const TEST_FINALIZER: &str = "example.com/test-finalizer";
/// framework.PodGetTimeout.
const POD_GET: Duration = Duration::from_secs(120);
/// framework.PollShortTimeout.
const POLL_SHORT: Duration = Duration::from_secs(60);

/// Create the PriorityClasses (one already there is fine, as upstream accepts AlreadyExists).
async fn create_priority_classes(ctx: &Ctx, classes: &[(&str, i32)]) -> CaseResult {
    let api: Api<PriorityClass> = ctx.all();
    for (name, value) in classes {
        let pc: PriorityClass = from_json(json!({"metadata": {"name": name}, "value": value}))?;
        match api.create(&PostParams::default(), &pc).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

async fn delete_priority_classes(ctx: &Ctx, names: &[&str]) {
    let api: Api<PriorityClass> = ctx.all();
    for name in names {
        let _ = api
            .delete(name, &DeleteParams::default().grace_period(0))
            .await;
    }
}

/// GetReadySchedulableNodes, by name.
async fn ready_schedulable_nodes(ctx: &Ctx) -> CaseResult<Vec<String>> {
    let nodes = ctx.ready_schedulable_nodes().await?;
    Ok(nodes.into_iter().filter_map(|n| n.metadata.name).collect())
}

/// patchNode on the status subresource: the resource advertised in capacity and allocatable
/// (`None` removes it).
async fn advertise(ctx: &Ctx, node: &str, resource: &str, amount: Option<&str>) -> CaseResult {
    let patch =
        json!({"status": {"capacity": {resource: amount}, "allocatable": {resource: amount}}});
    ctx.all::<Node>()
        .patch_status(node, &PatchParams::default(), &Patch::Strategic(patch))
        .await?;
    Ok(())
}

/// Run `steps`, then upstream's AfterEach: the resource leaves the nodes and the classes go,
/// whatever the outcome.
async fn with_cleanup<F, Fut>(
    ctx: &Ctx,
    nodes: &[String],
    resource: &str,
    classes: &[&str],
    steps: F,
) -> CaseResult
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = CaseResult>,
{
    let result = steps().await;
    delete_priority_classes(ctx, classes).await;
    for node in nodes {
        if let Err(e) = advertise(ctx, node, resource, None).await {
            return result.and(Err(e));
        }
    }
    result
}

/// initPausePod: a pause container named as the pod, grace period 1 s, the default scheduler.
fn pause_pod(
    ctx: &Ctx,
    name: &str,
    class: &str,
    resource: &str,
    amount: &str,
    extra: Value,
) -> Value {
    let mut pod = json!({
        "metadata": {"name": name},
        "spec": {
            "containers": [{
                "name": name,
                "image": ctx.images().pause(),
                "resources": {"requests": {resource: amount}, "limits": {resource: amount}},
            }],
            "priorityClassName": class,
            "terminationGracePeriodSeconds": 1,
            "schedulerName": "default-scheduler",
        }
    });
    if let Some(extra) = extra.as_object() {
        for (k, v) in extra {
            if k == "metadata" {
                for (mk, mv) in v.as_object().into_iter().flatten() {
                    pod["metadata"][mk] = mv.clone();
                }
            } else {
                pod["spec"][k] = v.clone();
            }
        }
    }
    pod
}

/// Required node affinity to one node by metadata.name.
fn on_node(node: &str) -> Value {
    json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": [node]}]}]}}}})
}

/// WaitForPodRunningInNamespace for any namespace.
async fn wait_running_in(ctx: &Ctx, pods: &Api<Pod>, name: &str) -> CaseResult<Pod> {
    ctx.wait(&format!("pod {name} Running"), POD_START, || async {
        let pod = pods.get(name).await?;
        match phase(&pod) {
            "Running" => Ok(Ok(pod)),
            "Succeeded" | "Failed" => Err(CaseError::Failed(format!(
                "pod {name} ended ({}) before it was seen Running: {}",
                phase(&pod),
                describe_status(&pod)
            ))),
            _ => Ok(Err(describe_status(&pod))),
        }
    })
    .await
}

/// Two pods of 2 of 5 per node, the first low priority and the rest medium; returns their names.
async fn fill_nodes(ctx: &Ctx, nodes: &[String]) -> CaseResult<Vec<String>> {
    let mut names = Vec::new();
    for (i, node) in nodes.iter().enumerate() {
        advertise(ctx, node, FOO, Some("5")).await?;
        for j in 0..2 {
            let class = if names.is_empty() { LOW } else { MEDIUM };
            let name = format!("pod{i}-{j}-{class}");
            let pod: Pod = from_json(pause_pod(ctx, &name, class, FOO, "2", on_node(node)))?;
            ctx.create_pod(&pod).await?;
            names.push(name);
        }
    }
    must!(
        names.len() >= 2,
        "We need at least two pods to be created but all nodes are already heavily utilized, so preemption tests cannot be run"
    );
    for name in &names {
        ctx.wait_running(name).await?;
    }
    Ok(names)
}

/// The first (low priority) pod MUST be preempted — gone or terminating — and no other MUST be.
async fn only_the_first_preempted(ctx: &Ctx, names: &[String]) -> CaseResult {
    let pods: Api<Pod> = ctx.api();
    let first = pods.get_opt(&names[0]).await?;
    must!(
        first
            .as_ref()
            .is_none_or(|p| p.metadata.deletion_timestamp.is_some()),
        "expected pod {} to be preempted, instead got {}",
        names[0],
        first.as_ref().map(describe_status).unwrap_or_default()
    );
    for name in &names[1..] {
        let live = pods.get(name).await?;
        must!(
            live.metadata.deletion_timestamp.is_none(),
            "pod {name} of medium priority was preempted too"
        );
    }
    Ok(())
}

const CLASSES: [(&str, i32); 3] = [(LOW, 1), (MEDIUM, 100), (HIGH, 1000)];

/// Scheduler, Basic Preemption: with every node's extended resource 4/5 used, a high priority pod
/// asking as much as the low priority pod MUST be scheduled, preempting that pod and no other.
async fn basic_preemption(ctx: &Ctx) -> CaseResult {
    create_priority_classes(ctx, &CLASSES).await?;
    let nodes = ready_schedulable_nodes(ctx).await?;
    with_cleanup(ctx, &nodes, FOO, &[LOW, MEDIUM, HIGH], || async {
        let names = fill_nodes(ctx, &nodes).await?;
        let pod: Pod = from_json(pause_pod(ctx, "preemptor-pod", HIGH, FOO, "2", json!({})))?;
        ctx.create_pod(&pod).await?;
        ctx.wait_running("preemptor-pod").await?;
        only_the_first_preempted(ctx, &names).await
    })
    .await
}

/// Scheduler, Preemption for critical pod: the same, with a system-cluster-critical pod in
/// kube-system as the preemptor.
async fn critical_pod_preemption(ctx: &Ctx) -> CaseResult {
    create_priority_classes(ctx, &CLASSES).await?;
    let nodes = ready_schedulable_nodes(ctx).await?;
    with_cleanup(ctx, &nodes, FOO, &[LOW, MEDIUM, HIGH], || async {
        let names = fill_nodes(ctx, &nodes).await?;
        let system: Api<Pod> = Api::namespaced(ctx.client.clone(), "kube-system");
        let pod: Pod = from_json(pause_pod(
            ctx,
            "critical-pod",
            "system-cluster-critical",
            FOO,
            "2",
            json!({}),
        ))?;
        let result = async {
            system.create(&PostParams::default(), &pod).await?;
            wait_running_in(ctx, &system, "critical-pod").await?;
            only_the_first_preempted(ctx, &names).await
        }
        .await;
        // The critical pod goes whatever the outcome.
        match system
            .delete("critical-pod", &DeleteParams::default().grace_period(0))
            .await
        {
            Ok(_) => result,
            Err(kube::Error::Api(s)) if s.code == 404 => result,
            Err(e) => result.and(Err(e.into())),
        }
    })
    .await
}

/// Verify the DisruptionTarget condition is added to the preempted pod: a low priority pod (with a
/// finalizer, so it stays while terminating) holding a node's 1/1, then a high priority pod
/// wanting it; the low pod MUST become terminating and MUST have the DisruptionTarget condition.
async fn disruption_condition(ctx: &Ctx) -> CaseResult {
    create_priority_classes(ctx, &CLASSES).await?;
    let nodes = ready_schedulable_nodes(ctx).await?;
    let node = nodes[0].clone();
    with_cleanup(
        ctx,
        std::slice::from_ref(&node),
        FOO,
        &[LOW, MEDIUM, HIGH],
        || async {
            advertise(ctx, &node, FOO, Some("1")).await?;
            let mut victim = on_node(&node);
            victim["metadata"] = json!({"finalizers": [TEST_FINALIZER]});
            let victim: Pod = from_json(pause_pod(ctx, "victim-pod", LOW, FOO, "1", victim))?;
            ctx.create_pod(&victim).await?;
            ctx.wait_running("victim-pod").await?;
            let result = async {
                let preemptor: Pod = from_json(pause_pod(
                    ctx,
                    "preemptor-pod",
                    HIGH,
                    FOO,
                    "1",
                    on_node(&node),
                ))?;
                ctx.create_pod(&preemptor).await?;
                let pods: Api<Pod> = ctx.api();
                let terminating = ctx
                    .wait("victim-pod terminating", POD_START, || async {
                        let p = pods.get("victim-pod").await?;
                        Ok(if p.metadata.deletion_timestamp.is_some() {
                            Ok(p)
                        } else {
                            Err(describe_status(&p))
                        })
                    })
                    .await?;
                let conditions = terminating
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.clone())
                    .unwrap_or_default();
                must!(
                    conditions.iter().any(|c| c.type_ == "DisruptionTarget"),
                    "the preempted pod has no DisruptionTarget condition: {conditions:?}"
                );
                Ok(())
            }
            .await;
            // RemoveFinalizer, so the pod can go.
            let unblock = json!({"metadata": {"finalizers": null}});
            match ctx
                .api::<Pod>()
                .patch(
                    "victim-pod",
                    &PatchParams::default(),
                    &Patch::Merge(unblock),
                )
                .await
            {
                Ok(_) => result,
                Err(kube::Error::Api(s)) if s.code == 404 => result,
                Err(e) => result.and(Err(e.into())),
            }
        },
    )
    .await
}

/// GetNodeThatCanRunPod: run a pause pod without a label, note its node, delete it at once.
async fn node_that_can_run_pod(ctx: &Ctx) -> CaseResult<String> {
    let pod: Pod = from_json(json!({
        "metadata": {"name": "without-label"},
        "spec": {"containers": [{"name": "without-label", "image": ctx.images().pause()}],
                 "terminationGracePeriodSeconds": 1}
    }))?;
    ctx.create_pod(&pod).await?;
    let running = ctx.wait_running("without-label").await?;
    ctx.api::<Pod>()
        .delete("without-label", &DeleteParams::default().grace_period(0))
        .await?;
    let node = running.spec.and_then(|s| s.node_name).unwrap_or_default();
    must!(
        !node.is_empty(),
        "the running pod without-label has no node"
    );
    Ok(node)
}

/// runPauseRS: a ReplicaSet `rs-<name>` of one pause pod, waited for until available.
async fn run_pause_rs(ctx: &Ctx, name: &str, class: &str, fakecpu: &str, host: &str) -> CaseResult {
    let template = pause_pod(
        ctx,
        name,
        class,
        FAKECPU,
        fakecpu,
        json!({"nodeSelector": {"kubernetes.io/hostname": host}}),
    );
    let rs: ReplicaSet = from_json(json!({
        "metadata": {"name": format!("rs-{name}")},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"name": name}},
            "template": {"metadata": {"labels": {"name": name}}, "spec": template["spec"]},
        }
    }))?;
    let api: Api<ReplicaSet> = ctx.api();
    api.create(&PostParams::default(), &rs).await?;
    ctx.wait(
        &format!("ReplicaSet rs-{name} with 1 available replica"),
        POD_GET,
        || async {
            let rs = api.get(&format!("rs-{name}")).await?;
            let available = rs.status.and_then(|s| s.available_replicas).unwrap_or(0);
            Ok(if available == 1 {
                Ok(())
            } else {
                Err(format!("{available} available"))
            })
        },
    )
    .await
}

/// Pod creations seen per ReplicaSet (rs-pod1, rs-pod2, rs-pod3), by distinct pod name.
fn counts(seen: &Mutex<BTreeSet<String>>) -> [usize; 3] {
    let seen = seen.lock().expect("pod names");
    ["rs-pod1", "rs-pod2", "rs-pod3"].map(|p| seen.iter().filter(|n| n.starts_with(p)).count())
}

/// Pod preemption verification: ReplicaSets of priority 1-3 holding 950/1000 of a node's fakecpu
/// MUST run; a priority-4 pod wanting 500 MUST be scheduled, preempting exactly the pods of
/// priority 1 and 2 once (their ReplicaSets create 2 pods each, the third 1), and the counts MUST
/// stay so.
async fn replicasets_preemption_path(ctx: &Ctx) -> CaseResult {
    let node = node_that_can_run_pod(ctx).await?;
    let host = ctx
        .all::<Node>()
        .get(&node)
        .await?
        .metadata
        .labels
        .and_then(|l| l.get("kubernetes.io/hostname").cloned())
        .ok_or_else(|| {
            CaseError::Failed(format!(
                "error getting kubernetes.io/hostname label on node {node}"
            ))
        })?;
    advertise(ctx, &node, FAKECPU, Some("1000")).await?;
    let classes = ["p1", "p2", "p3", "p4"];
    with_cleanup(
        ctx,
        std::slice::from_ref(&node),
        FAKECPU,
        &classes,
        || async {
            create_priority_classes(ctx, &[("p1", 1), ("p2", 2), ("p3", 3), ("p4", 4)]).await?;
            // The informer: every pod of the namespace ever seen, by name.
            let seen = Arc::new(Mutex::new(BTreeSet::new()));
            let names = seen.clone();
            let pods: Api<Pod> = ctx.api();
            let informer = tokio::spawn(async move {
                let mut events = std::pin::pin!(watcher(pods, watcher::Config::default()));
                while let Some(ev) = events.next().await {
                    if let Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) = ev {
                        if let Some(name) = p.metadata.name {
                            names.lock().expect("pod names").insert(name);
                        }
                    }
                }
            });
            let result = async {
                for (name, class, fakecpu) in [
                    ("pod1", "p1", "200"),
                    ("pod2", "p2", "300"),
                    ("pod3", "p3", "450"),
                ] {
                    run_pause_rs(ctx, name, class, fakecpu, &host).await?;
                }
                let mut preemptor = pause_pod(
                    ctx,
                    "pod4",
                    "p4",
                    FAKECPU,
                    "500",
                    json!({"nodeSelector": {"kubernetes.io/hostname": host}}),
                );
                preemptor["metadata"]["labels"] = json!({"name": "pod4"});
                ctx.create_pod(&from_json(preemptor)?).await?;
                let pods: Api<Pod> = ctx.api();
                ctx.wait(
                    "pod4 to preempt other pods (spec.nodeName set)",
                    POD_GET,
                    || async {
                        let p = pods.get("pod4").await?;
                        Ok(
                            match p.spec.and_then(|s| s.node_name).filter(|n| !n.is_empty()) {
                                Some(n) => Ok(n),
                                None => Err("not scheduled"),
                            },
                        )
                    },
                )
                .await?;
                // ReplicaSets 1 and 2 recreate their preempted pod once; ReplicaSet 3 keeps its own.
                let expected = [2, 2, 1];
                ctx.wait("the ReplicaSets' pod creations", POLL_SHORT, || async {
                    let got = counts(&seen);
                    for (i, (g, e)) in got.iter().zip(expected).enumerate() {
                        must!(*g <= e, "rs{} had more than {e} pods created: {g}", i + 1);
                    }
                    Ok(if got == expected {
                        Ok(())
                    } else {
                        Err(format!("pods created so far: {got:?}"))
                    })
                })
                .await?;
                // The state MUST be stable: neither under- nor over-preempted a while later.
                tokio::time::sleep(Duration::from_secs(5)).await;
                must_eq!(
                    counts(&seen),
                    expected,
                    "pods created per ReplicaSet after 5 s"
                );
                Ok(())
            }
            .await;
            informer.abort();
            result
        },
    )
    .await
}
