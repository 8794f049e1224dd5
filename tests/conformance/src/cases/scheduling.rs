//! sig-scheduling entries (test/e2e/scheduling): the PriorityClass API and the scheduler's
//! predicates (predicates.go: node selectors, CPU requests against allocatable, host ports). Each
//! case restates the entry's MUSTs in its doc comment.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, Node, Pod};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kiln_common::quantity;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::{json, Value};

use super::{case, Case};
use crate::ctx::{describe_status, from_json, phase, Ctx, POD_START};
use crate::error::{CaseError, CaseResult};
use crate::{must, must_eq};

pub const CASES: &[Case] = &[
    case!(
        "[sig-scheduling] SchedulerPreemption [Serial] PriorityClass endpoints verify PriorityClass endpoints can be operated with different HTTP methods [Conformance]",
        "sched-preemption-path",
        priority_class_endpoints
    ),
    case!(
        "[sig-scheduling] SchedulerPredicates [Serial] validates resource limits of pods that are allowed to run [Conformance]",
        "sched-pred",
        resource_limits
    ),
    case!(
        "[sig-scheduling] SchedulerPredicates [Serial] validates that NodeSelector is respected if matching [Conformance]",
        "sched-pred",
        node_selector_matching
    ),
    case!(
        "[sig-scheduling] SchedulerPredicates [Serial] validates that NodeSelector is respected if not matching [Conformance]",
        "sched-pred",
        node_selector_not_matching
    ),
    case!(
        "[sig-scheduling] SchedulerPredicates [Serial] validates that there exists conflict between pods with same hostPort and protocol but one using 0.0.0.0 hostIP [Conformance]",
        "sched-pred",
        host_port_wildcard_conflict
    ),
];

fn rv(pc: &PriorityClass) -> u64 {
    pc.metadata
        .resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Scheduler, PriorityClass endpoints: with classes p1 (1) and p2 (2), a patch and an update of the
/// immutable value MUST fail; a patch and an update of the description MUST succeed; the list MUST
/// succeed; each class MUST keep its value, show the new description and a newer resourceVersion.
async fn priority_class_endpoints(ctx: &Ctx) -> CaseResult {
    let api: Api<PriorityClass> = ctx.all();
    let label = format!("e2e={}", ctx.ns);
    let mut created = Vec::new();
    for (name, value) in [("p1", 1), ("p2", 2)] {
        let pc: PriorityClass = from_json(json!({
            "metadata": {"name": name, "labels": {"e2e": ctx.ns}}, "value": value,
        }))?;
        created.push(match api.create(&PostParams::default(), &pc).await {
            Ok(pc) => pc,
            // Upstream tolerates classes left by an earlier run.
            Err(kube::Error::Api(e)) if e.code == 409 => api.get(name).await?,
            Err(e) => return Err(e.into()),
        });
    }
    let result = async {
        let pp = PatchParams::default();
        let patched = api
            .patch(
                "p1",
                &pp,
                &Patch::Strategic(json!({"value": created[0].value * 10})),
            )
            .await;
        must!(patched.is_err(), "patching the immutable value succeeded");
        let mut copy = created[1].clone();
        copy.value *= 10;
        must!(
            api.replace("p2", &PostParams::default(), &copy)
                .await
                .is_err(),
            "updating the immutable value succeeded"
        );
        let desc = "updated description";
        api.patch("p1", &pp, &Patch::Strategic(json!({"description": desc})))
            .await?;
        let mut copy = created[1].clone();
        copy.description = Some(desc.to_string());
        api.replace("p2", &PostParams::default(), &copy).await?;
        api.list(&ListParams::default()).await?;
        for pc in &created {
            let name = pc.metadata.name.clone().unwrap_or_default();
            let live = api.get(&name).await?;
            must_eq!(live.value, pc.value, "{name}'s value");
            must_eq!(
                live.description.as_deref(),
                Some(desc),
                "{name}'s description"
            );
            must!(
                rv(&live) > rv(pc),
                "{name}'s resourceVersion {} is not newer than {}",
                rv(&live),
                rv(pc)
            );
        }
        Ok(())
    }
    .await;
    api.delete_collection(
        &DeleteParams::default(),
        &ListParams::default().labels(&label),
    )
    .await?;
    result
}

/// Upstream's WaitForStableCluster timeout.
const STABLE: Duration = Duration::from_secs(300);
/// How long the scheduler may take to report a pod it cannot place (upstream's event wait).
const SCHEDULER_VERDICT: Duration = Duration::from_secs(60);

fn node_name(p: &Pod) -> &str {
    p.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .unwrap_or("")
}

fn ended(p: &Pod) -> bool {
    matches!(phase(p), "Succeeded" | "Failed")
}

/// WaitForStableCluster: every pod of the cluster that has not ended is scheduled.
async fn wait_stable(ctx: &Ctx) -> CaseResult {
    let all: Api<Pod> = Api::all(ctx.client.clone());
    ctx.wait("every pod of the cluster scheduled", STABLE, || async {
        let pending: Vec<String> = all
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .filter(|p| !ended(p) && node_name(p).is_empty())
            .map(|p| {
                format!(
                    "{}/{}",
                    p.metadata.namespace.as_deref().unwrap_or(""),
                    p.metadata.name.as_deref().unwrap_or("")
                )
            })
            .collect();
        Ok(if pending.is_empty() {
            Ok(())
        } else {
            Err(format!("not scheduled: {pending:?}"))
        })
    })
    .await
}

/// initPausePod: a pause container named as the pod, grace period 1 s.
fn pause_pod(ctx: &Ctx, name: &str, labels: Value, spec: Value) -> CaseResult<Pod> {
    let mut pod = json!({
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "containers": [{"name": name, "image": ctx.images().pause()}],
            "terminationGracePeriodSeconds": 1,
        }
    });
    if let (Some(base), Some(extra)) = (pod["spec"].as_object_mut(), spec.as_object()) {
        for (k, v) in extra {
            if k == "resources" {
                base["containers"][0]["resources"] = v.clone();
            } else {
                base.insert(k.clone(), v.clone());
            }
        }
    }
    from_json(pod)
}

/// GetNodeThatCanRunPod: run a pause pod without a label, note its node, delete it at once.
async fn node_that_can_run_pod(ctx: &Ctx) -> CaseResult<String> {
    let name = "without-label";
    ctx.create_pod(&pause_pod(ctx, name, json!({}), json!({}))?)
        .await?;
    let pod = ctx.wait_running(name).await?;
    ctx.api::<Pod>()
        .delete(
            name,
            &DeleteParams {
                grace_period_seconds: Some(0),
                ..DeleteParams::default()
            },
        )
        .await?;
    let node = node_name(&pod).to_string();
    must!(!node.is_empty(), "the running pod {name} has no node");
    Ok(node)
}

/// AddOrUpdateLabelOnNode / RemoveLabelOffNode (`None`), then ExpectNodeHasLabel.
async fn label_node(ctx: &Ctx, node: &str, key: &str, value: Option<&str>) -> CaseResult {
    let patch = json!({"metadata": {"labels": {key: value}}});
    let updated = ctx
        .all::<Node>()
        .patch(node, &PatchParams::default(), &Patch::Merge(patch))
        .await?;
    let now = updated
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(key))
        .map(String::as_str);
    must_eq!(now, value, "node {node}'s label {key}");
    Ok(())
}

/// WaitForSchedulerAfterAction expecting failure: a Warning FailedScheduling event about the pod.
async fn wait_failed_scheduling(ctx: &Ctx, pod: &str) -> CaseResult {
    let events: Api<Event> = ctx.api();
    ctx.wait(
        &format!("a FailedScheduling event for pod {pod}"),
        SCHEDULER_VERDICT,
        || async {
            let seen = events
                .list(&ListParams::default())
                .await?
                .items
                .iter()
                .any(|e| {
                    e.involved_object.kind.as_deref() == Some("Pod")
                        && e.involved_object.name.as_deref() == Some(pod)
                        && e.reason.as_deref() == Some("FailedScheduling")
                        && e.type_.as_deref() == Some("Warning")
                });
            Ok(if seen {
                Ok(())
            } else {
                Err("no such event yet")
            })
        },
    )
    .await
}

/// verifyResult: the case's pods on worker nodes (each with PodScheduled True) and those on no node
/// MUST number `scheduled` and `not_scheduled`.
async fn verify_result(
    ctx: &Ctx,
    workers: &BTreeSet<String>,
    scheduled: usize,
    not_scheduled: usize,
) -> CaseResult {
    let pods = ctx.api::<Pod>().list(&ListParams::default()).await?.items;
    let mut on_workers = Vec::new();
    let mut on_none = Vec::new();
    for p in &pods {
        let name = p.metadata.name.clone().unwrap_or_default();
        if workers.contains(node_name(p)) {
            let condition = p
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .and_then(|c| c.iter().find(|c| c.type_ == "PodScheduled"));
            must!(
                condition.is_some_and(|c| c.status == "True"),
                "pod {name} is on a node without a PodScheduled=True condition: {condition:?}"
            );
            on_workers.push(name);
        } else if node_name(p).is_empty() {
            on_none.push(name);
        }
    }
    must_eq!(
        on_none.len(),
        not_scheduled,
        "pods not scheduled ({on_none:?})"
    );
    must_eq!(
        on_workers.len(),
        scheduled,
        "pods scheduled ({on_workers:?})"
    );
    Ok(())
}

fn cpu_milli(q: Option<&k8s_openapi::apimachinery::pkg::api::resource::Quantity>) -> i64 {
    q.and_then(|q| quantity::parse(&q.0).ok())
        .map(|m| m.0 as i64)
        .unwrap_or(0)
}

/// getRequestedCPU: the sum of the containers' CPU requests, in millicores.
fn requested_cpu(p: &Pod) -> i64 {
    p.spec
        .iter()
        .flat_map(|s| s.containers.iter())
        .map(|c| {
            cpu_milli(
                c.resources
                    .as_ref()
                    .and_then(|r| r.requests.as_ref())
                    .and_then(|r| r.get("cpu")),
            )
        })
        .sum()
}

/// Scheduler, resource limits: with a pod on every node requesting 70% of the CPU left there, a
/// pod requesting half the largest node's allocatable CPU MUST NOT be scheduled.
async fn resource_limits(ctx: &Ctx) -> CaseResult {
    let workers = ctx.ready_schedulable_nodes().await?;
    wait_stable(ctx).await?;
    let mut left: BTreeMap<String, i64> = BTreeMap::new();
    for n in &workers {
        let name = n.metadata.name.clone().unwrap_or_default();
        let cpu = cpu_milli(
            n.status
                .as_ref()
                .and_then(|s| s.allocatable.as_ref())
                .and_then(|a| a.get("cpu")),
        );
        must!(cpu > 0, "node {name}'s status.allocatable has no cpu");
        left.insert(name, cpu);
    }
    let result = async {
        for name in left.keys() {
            label_node(ctx, name, "node", Some(name)).await?;
        }
        resource_limits_steps(ctx, left.clone()).await
    }
    .await;
    // Upstream's deferred clean-up: the nodes lose the label whatever the outcome.
    for name in left.keys() {
        if let Err(e) = label_node(ctx, name, "node", None).await {
            return result.and(Err(e));
        }
    }
    result
}

async fn resource_limits_steps(ctx: &Ctx, mut left: BTreeMap<String, i64>) -> CaseResult {
    let max_allocatable = left.values().copied().max().unwrap_or(0);
    let workers: BTreeSet<String> = left.keys().cloned().collect();
    let all: Api<Pod> = Api::all(ctx.client.clone());
    for p in all.list(&ListParams::default()).await?.items {
        if let Some(cpu) = left.get_mut(node_name(&p)) {
            if !ended(&p) {
                *cpu -= requested_cpu(&p);
            }
        }
    }
    let mut fillers = Vec::new();
    for (node, cpu) in &left {
        let requested = cpu * 7 / 10;
        let name = format!("filler-pod-{}", fillers.len());
        let cpu_q = format!("{requested}m");
        let pod = pause_pod(
            ctx,
            &name,
            json!({}),
            json!({
                "resources": {"limits": {"cpu": cpu_q}, "requests": {"cpu": cpu_q}},
                "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [
                        {"key": "node", "operator": "In", "values": [node]}]}]}}},
            }),
        )?;
        ctx.create_pod(&pod).await?;
        fillers.push(name);
    }
    for name in &fillers {
        ctx.wait_running(name).await?;
    }
    let cpu_q = format!("{}m", max_allocatable * 5 / 10);
    let additional = pause_pod(
        ctx,
        "additional-pod",
        json!({"name": "additional"}),
        json!({"resources": {"limits": {"cpu": cpu_q}, "requests": {"cpu": cpu_q}}}),
    )?;
    ctx.create_pod(&additional).await?;
    wait_failed_scheduling(ctx, "additional-pod").await?;
    verify_result(ctx, &workers, fillers.len(), 1).await
}

/// Scheduler, node selector not matching: a pod whose node selector no node matches MUST NOT be
/// scheduled.
async fn node_selector_not_matching(ctx: &Ctx) -> CaseResult {
    let workers: BTreeSet<String> = ctx
        .ready_schedulable_nodes()
        .await?
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    wait_stable(ctx).await?;
    let pod = pause_pod(
        ctx,
        "restricted-pod",
        json!({"name": "restricted"}),
        json!({"nodeSelector": {"label": "nonempty"}}),
    )?;
    ctx.create_pod(&pod).await?;
    wait_failed_scheduling(ctx, "restricted-pod").await?;
    verify_result(ctx, &workers, 0, 1).await
}

/// WaitForPodNotPending: the pod leaves the Pending phase.
async fn wait_not_pending(ctx: &Ctx, name: &str) -> CaseResult<Pod> {
    let pods: Api<Pod> = ctx.api();
    ctx.wait(&format!("pod {name} not Pending"), POD_START, || async {
        let p = pods.get(name).await?;
        Ok(if phase(&p) == "Pending" || phase(&p).is_empty() {
            Err(describe_status(&p))
        } else {
            Ok(p)
        })
    })
    .await
}

/// A node label key of the case's own (upstream's `kubernetes.io/e2e-<uuid>`).
fn unique_key(ctx: &Ctx) -> String {
    format!("kubernetes.io/e2e-{}", ctx.ns)
}

/// Run `steps` with `key=value` on `node`, removing the label afterwards whatever the outcome.
async fn with_node_label<F, Fut>(
    ctx: &Ctx,
    node: &str,
    key: &str,
    value: &str,
    steps: F,
) -> CaseResult
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = CaseResult>,
{
    label_node(ctx, node, key, Some(value)).await?;
    let result = steps().await;
    let removed = label_node(ctx, node, key, None).await;
    result.and(removed)
}

/// Scheduler, node selector matching: with a label {k: v} on a node, a pod selecting {k: v} MUST
/// be scheduled on that node.
async fn node_selector_matching(ctx: &Ctx) -> CaseResult {
    let node = node_that_can_run_pod(ctx).await?;
    let key = unique_key(ctx);
    with_node_label(ctx, &node, &key, "42", || async {
        let pod = pause_pod(
            ctx,
            "with-labels",
            json!({}),
            json!({"nodeSelector": {key.clone(): "42"}}),
        )?;
        ctx.create_pod(&pod).await?;
        let pod = wait_not_pending(ctx, "with-labels").await?;
        must_eq!(
            node_name(&pod),
            node.as_str(),
            "the node of pod with-labels"
        );
        Ok(())
    })
    .await
}

/// createHostPortPodOnNode: agnhost netexec on 8080 (TCP and UDP), published on `port` of `host_ip`
/// (empty: all addresses), ready when /hostname answers.
fn host_port_pod(
    ctx: &Ctx,
    name: &str,
    host_ip: &str,
    port: i32,
    selector: Value,
) -> CaseResult<Pod> {
    from_json(json!({
        "metadata": {"name": name},
        "spec": {
            "containers": [{
                "name": "agnhost",
                "image": ctx.images().agnhost(),
                "command": ["/agnhost"],
                "args": ["netexec", "--http-port=8080", "--udp-port=8080"],
                "ports": [{"hostPort": port, "containerPort": 8080, "protocol": "TCP", "hostIP": host_ip}],
                "readinessProbe": {"httpGet": {"path": "/hostname", "port": 8080, "scheme": "HTTP"}},
            }],
            "nodeSelector": selector,
        }
    }))
}

/// Scheduling, HostPort and Protocol match, HostIPs different but one is 0.0.0.0: with a pod using
/// host port P/TCP on all addresses of a node, a pod asking for P/TCP on the node's own address
/// MUST NOT be scheduled to that node.
async fn host_port_wildcard_conflict(ctx: &Ctx) -> CaseResult {
    let node = node_that_can_run_pod(ctx).await?;
    let host_ip = ctx
        .all::<Node>()
        .get(&node)
        .await?
        .status
        .and_then(|s| s.addresses)
        .into_iter()
        .flatten()
        .find(|a| a.type_ == "InternalIP" && a.address.parse::<std::net::Ipv4Addr>().is_ok())
        .map(|a| a.address)
        .ok_or_else(|| CaseError::Failed(format!("node {node} has no IPv4 InternalIP")))?;
    let key = unique_key(ctx);
    let port = 54322;
    with_node_label(ctx, &node, &key, "95", || async {
        let selector = json!({key.clone(): "95"});
        ctx.create_pod(&host_port_pod(ctx, "pod4", "", port, selector.clone())?)
            .await?;
        wait_not_pending(ctx, "pod4").await?;
        ctx.create_pod(&host_port_pod(ctx, "pod5", &host_ip, port, selector)?)
            .await?;
        wait_failed_scheduling(ctx, "pod5").await?;
        let pod5 = ctx.api::<Pod>().get("pod5").await?;
        must!(
            node_name(&pod5).is_empty(),
            "pod5 was scheduled to {} although pod4 holds {port}/TCP on 0.0.0.0 there",
            node_name(&pod5)
        );
        Ok(())
    })
    .await
}
