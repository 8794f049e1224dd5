//! sig-api-machinery ResourceQuota entries (test/e2e/apimachinery/resource_quota.go): quota status
//! calculated and kept by the controller, usage charged and refused by admission, scopes, and the
//! API operations. Each case restates the entry's MUSTs in its doc comment.

use std::time::Duration;

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{
    ConfigMap, Pod, ReplicationController, ResourceQuota, Secret, Service,
};
use kiln_common::quantity;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::core::DynamicObject;
use kube::discovery::ApiResource;
use serde_json::{json, Value};

use super::{case, Case};
use crate::ctx::{by_label, from_json, to_json, Ctx};
use crate::error::CaseResult;
use crate::{must, must_eq};

pub const CASES: &[Case] = &[
    case!(
        "[sig-api-machinery] ResourceQuota should create a ResourceQuota and ensure its status is promptly calculated. [Conformance]",
        "resourcequota",
        promptly_calculated
    ),
    case!(
        "[sig-api-machinery] ResourceQuota should create a ResourceQuota and capture the life of a service. [Conformance]",
        "resourcequota",
        life_of_a_service
    ),
    case!(
        "[sig-api-machinery] ResourceQuota should create a ResourceQuota and capture the life of a secret. [Conformance]",
        "resourcequota",
        life_of_a_secret
    ),
    case!(
        "[sig-api-machinery] ResourceQuota should create a ResourceQuota and capture the life of a configMap. [Conformance]",
        "resourcequota",
        life_of_a_configmap
    ),
    case!(
        "[sig-api-machinery] ResourceQuota should create a ResourceQuota and capture the life of a pod. [Conformance]",
        "resourcequota",
        life_of_a_pod
    ),
    case!(
        "[sig-api-machinery] ResourceQuota should create a ResourceQuota and capture the life of a replication controller. [Conformance]",
        "resourcequota",
        life_of_a_replication_controller
    ),
    case!(
        "[sig-api-machinery] ResourceQuota should create a ResourceQuota and capture the life of a replica set. [Conformance]",
        "resourcequota",
        life_of_a_replica_set
    ),
    case!(
        "[sig-api-machinery] ResourceQuota should verify ResourceQuota with terminating scopes. [Conformance]",
        "resourcequota",
        terminating_scopes
    ),
    case!(
        "[sig-api-machinery] ResourceQuota should verify ResourceQuota with best effort scope. [Conformance]",
        "resourcequota",
        best_effort_scopes
    ),
    case!(
        "[sig-api-machinery] ResourceQuota should be able to update and delete ResourceQuota. [Conformance]",
        "resourcequota",
        update_and_delete
    ),
    case!(
        "[sig-api-machinery] ResourceQuota should manage the lifecycle of a ResourceQuota [Conformance]",
        "resourcequota",
        lifecycle
    ),
    case!(
        "[sig-api-machinery] ResourceQuota should apply changes to a resourcequota status [Conformance]",
        "resourcequota",
        status_changes
    ),
];

/// How long a quota's status may take to follow (upstream's resourceQuotaTimeout).
const QUOTA_TIMEOUT: Duration = Duration::from_secs(60);

/// Upstream's newTestResourceQuota: hard limits on object counts, compute, storage, a
/// storage class, a discovered kind and an extended resource.
fn test_quota(name: &str) -> Value {
    json!({
        "metadata": {"name": name},
        "spec": {"hard": {
            "pods": "5", "services": "10", "services.nodeports": "1",
            "services.loadbalancers": "1", "replicationcontrollers": "10", "resourcequotas": "1",
            "cpu": "1", "memory": "500Mi", "configmaps": "10", "secrets": "10",
            "persistentvolumeclaims": "10", "requests.storage": "10Gi",
            "ephemeral-storage": "50Gi",
            "gold.storageclass.storage.k8s.io/persistentvolumeclaims": "10",
            "gold.storageclass.storage.k8s.io/requests.storage": "10Gi",
            "count/replicasets.apps": "5",
            "requests.example.com/dongle": "3",
        }},
    })
}

async fn create_quota(ctx: &Ctx, quota: Value) -> CaseResult<ResourceQuota> {
    let q: ResourceQuota = from_json(quota)?;
    Ok(ctx
        .api::<ResourceQuota>()
        .create(&PostParams::default(), &q)
        .await?)
}

/// Two quantities are equal however spelled (`Quantity.Cmp`).
fn same_quantity(a: &str, b: &str) -> bool {
    match (quantity::parse(a), quantity::parse(b)) {
        (Ok(x), Ok(y)) => x == y,
        _ => a == b,
    }
}

fn list_text(q: &ResourceQuota, status_field: &str) -> Value {
    to_json(q)["status"][status_field].clone()
}

/// Upstream's waitForResourceQuota: the quota's status.used MUST come to show `used` (other
/// resources ignored) within a minute.
async fn wait_used(ctx: &Ctx, name: &str, used: &[(&str, &str)]) -> CaseResult {
    let api = ctx.api::<ResourceQuota>();
    ctx.wait(
        &format!("resourcequota {name} status.used to show {used:?}"),
        QUOTA_TIMEOUT,
        || async {
            let q = api.get(name).await?;
            let have = list_text(&q, "used");
            let ok = used
                .iter()
                .all(|(k, v)| have[*k].as_str().is_some_and(|h| same_quantity(h, v)));
            Ok(if ok { Ok(()) } else { Err(have.to_string()) })
        },
    )
    .await
}

/// Upstream's ensureResourceQuota: the usage shows and stays so for a while.
async fn ensure_used(ctx: &Ctx, name: &str, used: &[(&str, &str)]) -> CaseResult {
    wait_used(ctx, name, used).await?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    wait_used(ctx, name, used).await
}

/// Upstream's countResourceQuota: how many quotas the namespace has, once the count is stable.
async fn count_stable<K>(api: &Api<K>) -> CaseResult<usize>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let mut last = usize::MAX;
    let mut unchanged = 0;
    for _ in 0..30 {
        let n = api.list(&ListParams::default()).await?.items.len();
        if n == last {
            unchanged += 1;
            if unchanged >= 2 {
                return Ok(n);
            }
        } else {
            unchanged = 0;
            last = n;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    Ok(last)
}

/// Upstream's newTestPodForQuota: a pause pod never scheduled (an unsatisfiable node selector).
fn quota_pod(ctx: &Ctx, name: &str, requests: Value, limits: Value) -> CaseResult<Pod> {
    from_json(json!({
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {"x-test.k8s.io/unsatisfiable": "not-schedulable"},
            "containers": [{
                "name": "pause",
                "image": ctx.images().pause(),
                "resources": {"requests": requests, "limits": limits},
            }],
        },
    }))
}

async fn create_with_quota(ctx: &Ctx, quota: Value) -> CaseResult<(String, String)> {
    let count = count_stable(&ctx.api::<ResourceQuota>()).await?;
    let name = quota["metadata"]["name"].as_str().unwrap_or("").to_string();
    create_quota(ctx, quota).await?;
    let quotas = (count + 1).to_string();
    wait_used(ctx, &name, &[("resourcequotas", &quotas)]).await?;
    Ok((name, quotas))
}

/// ResourceQuota, object count quota, resourcequotas: creating a quota MUST succeed and its status
/// MUST come to count the namespace's quotas.
async fn promptly_calculated(ctx: &Ctx) -> CaseResult {
    create_with_quota(ctx, test_quota("test-quota")).await?;
    Ok(())
}

fn service(name: &str, type_: &str, allocate_node_ports: Option<bool>) -> CaseResult<Service> {
    let mut spec = json!({"type": type_, "ports": [{"port": 80, "targetPort": 80}]});
    if let Some(a) = allocate_node_ports {
        spec["allocateLoadBalancerNodePorts"] = json!(a);
    }
    from_json(json!({"metadata": {"name": name}, "spec": spec}))
}

/// ResourceQuota, object count quota, service: a ClusterIP and a NodePort Service MUST be created
/// and counted (services 2, services.nodeports 1); a LoadBalancer with a node port MUST be refused
/// (past the node-port limit); deleting them MUST release the usage.
async fn life_of_a_service(ctx: &Ctx) -> CaseResult {
    let (name, quotas) = create_with_quota(ctx, test_quota("test-quota")).await?;
    let api = ctx.api::<Service>();
    let pp = PostParams::default();
    api.create(&pp, &service("test-service", "ClusterIP", None)?)
        .await?;
    api.create(&pp, &service("test-service-np", "NodePort", None)?)
        .await?;
    let lb = api
        .create(
            &pp,
            &service("test-service-lb", "LoadBalancer", Some(true))?,
        )
        .await;
    must!(
        lb.is_err(),
        "a LoadBalancer Service exceeding the node-port quota was created"
    );
    wait_used(
        ctx,
        &name,
        &[
            ("resourcequotas", &quotas),
            ("services", "2"),
            ("services.nodeports", "1"),
        ],
    )
    .await?;
    for svc in ["test-service", "test-service-np"] {
        api.delete(svc, &DeleteParams::default()).await?;
    }
    wait_used(
        ctx,
        &name,
        &[
            ("resourcequotas", &quotas),
            ("services", "0"),
            ("services.nodeports", "0"),
        ],
    )
    .await
}

/// The object-count kinds whose life a quota follows: (resource, what to create).
enum Counted {
    Secret,
    ConfigMap,
}

/// ResourceQuota, object count quota, secret / configmap: with hard = existing + 1, the quota MUST
/// count the existing objects, then the created one, then release it on delete.
async fn object_count_life(ctx: &Ctx, kind: Counted) -> CaseResult {
    let (resource, found) = match kind {
        Counted::Secret => ("secrets", count_stable(&ctx.api::<Secret>()).await?),
        Counted::ConfigMap => ("configmaps", count_stable(&ctx.api::<ConfigMap>()).await?),
    };
    let (defaults, hard) = (found.to_string(), (found + 1).to_string());
    let mut quota = test_quota("test-quota");
    quota["spec"]["hard"][resource] = json!(hard);
    let (name, quotas) = create_with_quota(ctx, quota).await?;
    wait_used(
        ctx,
        &name,
        &[("resourcequotas", &quotas), (resource, &defaults)],
    )
    .await?;
    let pp = PostParams::default();
    match kind {
        Counted::Secret => {
            let s: Secret = from_json(json!({"metadata": {"name": "test-secret"},
                "data": {"data-1": "dmFsdWUtMQo=", "data-2": "dmFsdWUtMgo=", "data-3": "dmFsdWUtMwo="}}))?;
            ctx.api::<Secret>().create(&pp, &s).await?;
        }
        Counted::ConfigMap => {
            let c: ConfigMap =
                from_json(json!({"metadata": {"name": "test-configmap"}, "data": {"a": "b"}}))?;
            ctx.api::<ConfigMap>().create(&pp, &c).await?;
        }
    }
    wait_used(ctx, &name, &[(resource, &hard)]).await?;
    let dp = DeleteParams::default();
    match kind {
        Counted::Secret => drop(ctx.api::<Secret>().delete("test-secret", &dp).await?),
        Counted::ConfigMap => drop(ctx.api::<ConfigMap>().delete("test-configmap", &dp).await?),
    }
    wait_used(ctx, &name, &[(resource, &defaults)]).await
}

async fn life_of_a_secret(ctx: &Ctx) -> CaseResult {
    object_count_life(ctx, Counted::Secret).await
}

async fn life_of_a_configmap(ctx: &Ctx) -> CaseResult {
    object_count_life(ctx, Counted::ConfigMap).await
}

/// ResourceQuota, object count quota, pod: a pod requesting cpu, memory, ephemeral storage and an
/// extended resource MUST be created and its usage captured; pods exceeding the remaining cpu, or
/// the extended resource, MUST be refused; changing the pod's requests MUST fail and leave the
/// usage; deleting the pod MUST release it.
async fn life_of_a_pod(ctx: &Ctx) -> CaseResult {
    let (name, quotas) = create_with_quota(ctx, test_quota("test-quota")).await?;
    let requests = json!({"cpu": "500m", "memory": "252Mi", "ephemeral-storage": "30Gi",
        "example.com/dongle": "2"});
    let pod = quota_pod(
        ctx,
        "test-pod",
        requests,
        json!({"example.com/dongle": "2"}),
    )?;
    let pods = ctx.api::<Pod>();
    let created = pods.create(&PostParams::default(), &pod).await?;
    let used = [
        ("resourcequotas", quotas.as_str()),
        ("pods", "1"),
        ("cpu", "500m"),
        ("memory", "252Mi"),
        ("ephemeral-storage", "30Gi"),
        ("requests.example.com/dongle", "2"),
    ];
    wait_used(ctx, &name, &used).await?;

    let too_much_cpu = quota_pod(
        ctx,
        "fail-pod",
        json!({"cpu": "600m", "memory": "100Mi"}),
        json!({}),
    )?;
    must!(
        pods.create(&PostParams::default(), &too_much_cpu)
            .await
            .is_err(),
        "a pod exceeding the remaining cpu quota was created"
    );
    let too_many_dongles = quota_pod(
        ctx,
        "fail-pod-for-extended-resource",
        json!({"cpu": "500m", "memory": "100Mi", "ephemeral-storage": "30Gi", "example.com/dongle": "2"}),
        json!({"example.com/dongle": "2"}),
    )?;
    must!(
        pods.create(&PostParams::default(), &too_many_dongles)
            .await
            .is_err(),
        "a pod exceeding the remaining extended-resource quota was created"
    );
    let mut changed = created.clone();
    if let Some(c) = changed.spec.as_mut().and_then(|s| s.containers.first_mut()) {
        c.resources = Some(from_json(
            json!({"requests": {"cpu": "100m", "memory": "100Mi",
            "ephemeral-storage": "10Gi"}}),
        )?);
    }
    must!(
        pods.replace("test-pod", &PostParams::default(), &changed)
            .await
            .is_err(),
        "a pod's resource requests were updated"
    );
    wait_used(ctx, &name, &used).await?;
    pods.delete("test-pod", &DeleteParams::default().grace_period(0))
        .await?;
    wait_used(
        ctx,
        &name,
        &[
            ("resourcequotas", &quotas),
            ("pods", "0"),
            ("cpu", "0"),
            ("memory", "0"),
            ("ephemeral-storage", "0"),
            ("requests.example.com/dongle", "0"),
        ],
    )
    .await
}

/// ResourceQuota, object count quota, replicationController: a ReplicationController MUST be
/// counted once created and released once deleted.
async fn life_of_a_replication_controller(ctx: &Ctx) -> CaseResult {
    let (name, quotas) = create_with_quota(ctx, test_quota("test-quota")).await?;
    wait_used(
        ctx,
        &name,
        &[("resourcequotas", &quotas), ("replicationcontrollers", "0")],
    )
    .await?;
    let rc: ReplicationController = from_json(json!({
        "metadata": {"name": "test-rc"},
        "spec": {"replicas": 0, "selector": {"name": "test-rc"}, "template": {
            "metadata": {"labels": {"name": "test-rc"}},
            "spec": {"containers": [{"name": "test-rc", "image": ctx.images().pause()}]}}},
    }))?;
    let api = ctx.api::<ReplicationController>();
    api.create(&PostParams::default(), &rc).await?;
    wait_used(ctx, &name, &[("replicationcontrollers", "1")]).await?;
    api.delete("test-rc", &DeleteParams::background()).await?;
    wait_used(ctx, &name, &[("replicationcontrollers", "0")]).await
}

/// ResourceQuota, object count quota, replicaSet: a ReplicaSet MUST be counted under
/// count/replicasets.apps once created and released once deleted.
async fn life_of_a_replica_set(ctx: &Ctx) -> CaseResult {
    let (name, quotas) = create_with_quota(ctx, test_quota("test-quota")).await?;
    let counted = "count/replicasets.apps";
    wait_used(ctx, &name, &[("resourcequotas", &quotas), (counted, "0")]).await?;
    let rs: ReplicaSet = from_json(json!({
        "metadata": {"name": "test-rs"},
        "spec": {"replicas": 0, "selector": {"matchLabels": {"name": "test-rs"}}, "template": {
            "metadata": {"labels": {"name": "test-rs"}},
            "spec": {"terminationGracePeriodSeconds": 0,
                "containers": [{"name": "test-rs", "image": ctx.images().pause()}]}}},
    }))?;
    let api = ctx.api::<ReplicaSet>();
    api.create(&PostParams::default(), &rs).await?;
    wait_used(ctx, &name, &[(counted, "1")]).await?;
    api.delete("test-rs", &DeleteParams::default()).await?;
    wait_used(ctx, &name, &[(counted, "0")]).await
}

/// Upstream's newTestResourceQuotaWithScope.
fn scoped_quota(name: &str, scope: &str) -> Value {
    let mut hard = json!({"pods": "5"});
    if scope.ends_with("Terminating") {
        hard["requests.cpu"] = json!("1");
        hard["requests.memory"] = json!("500Mi");
        hard["limits.cpu"] = json!("2");
        hard["limits.memory"] = json!("1Gi");
    }
    json!({"metadata": {"name": name}, "spec": {"hard": hard, "scopes": [scope]}})
}

const ZERO_COMPUTE: &[(&str, &str)] = &[
    ("pods", "0"),
    ("requests.cpu", "0"),
    ("requests.memory", "0"),
    ("limits.cpu", "0"),
    ("limits.memory", "0"),
];
const ONE_POD_COMPUTE: &[(&str, &str)] = &[
    ("pods", "1"),
    ("requests.cpu", "500m"),
    ("requests.memory", "200Mi"),
    ("limits.cpu", "1"),
    ("limits.memory", "400Mi"),
];

/// ResourceQuota, quota scope, Terminating and NotTerminating: a long-running pod MUST be counted by
/// the NotTerminating quota only, a pod with activeDeadlineSeconds by the Terminating one only;
/// deleting each MUST release its usage.
async fn terminating_scopes(ctx: &Ctx) -> CaseResult {
    let (terminating, not_terminating) = ("quota-terminating", "quota-not-terminating");
    create_quota(ctx, scoped_quota(terminating, "Terminating")).await?;
    wait_used(ctx, terminating, &[("pods", "0")]).await?;
    create_quota(ctx, scoped_quota(not_terminating, "NotTerminating")).await?;
    wait_used(ctx, not_terminating, &[("pods", "0")]).await?;
    let (requests, limits) = (
        json!({"cpu": "500m", "memory": "200Mi"}),
        json!({"cpu": "1", "memory": "400Mi"}),
    );
    let pods = ctx.api::<Pod>();
    let zero = DeleteParams::default().grace_period(0);

    let long_running = quota_pod(ctx, "test-pod", requests.clone(), limits.clone())?;
    pods.create(&PostParams::default(), &long_running).await?;
    wait_used(ctx, not_terminating, ONE_POD_COMPUTE).await?;
    ensure_used(ctx, terminating, ZERO_COMPUTE).await?;
    pods.delete("test-pod", &zero).await?;
    wait_used(ctx, not_terminating, ZERO_COMPUTE).await?;

    let mut deadline = quota_pod(ctx, "terminating-pod", requests, limits)?;
    if let Some(s) = deadline.spec.as_mut() {
        s.active_deadline_seconds = Some(3600);
    }
    pods.create(&PostParams::default(), &deadline).await?;
    wait_used(ctx, terminating, ONE_POD_COMPUTE).await?;
    ensure_used(ctx, not_terminating, ZERO_COMPUTE).await?;
    pods.delete("terminating-pod", &zero).await?;
    wait_used(ctx, terminating, ZERO_COMPUTE).await
}

/// ResourceQuota, quota scope, BestEffort and NotBestEffort: a pod without requests or limits MUST
/// be counted by the BestEffort quota only, one with them by the NotBestEffort one only; deleting
/// each MUST release its usage.
async fn best_effort_scopes(ctx: &Ctx) -> CaseResult {
    let (best, not_best) = ("quota-besteffort", "quota-not-besteffort");
    create_quota(ctx, scoped_quota(best, "BestEffort")).await?;
    wait_used(ctx, best, &[("pods", "0")]).await?;
    create_quota(ctx, scoped_quota(not_best, "NotBestEffort")).await?;
    wait_used(ctx, not_best, &[("pods", "0")]).await?;
    let pods = ctx.api::<Pod>();
    let zero = DeleteParams::default().grace_period(0);
    for (pod, requests, limits, counted, ignored) in [
        ("pfpod", json!({}), json!({}), best, not_best),
        (
            "burstable-pod",
            json!({"cpu": "500m", "memory": "200Mi"}),
            json!({"cpu": "1", "memory": "400Mi"}),
            not_best,
            best,
        ),
    ] {
        pods.create(
            &PostParams::default(),
            &quota_pod(ctx, pod, requests, limits)?,
        )
        .await?;
        wait_used(ctx, counted, &[("pods", "1")]).await?;
        wait_used(ctx, ignored, &[("pods", "0")]).await?;
        pods.delete(pod, &zero).await?;
        wait_used(ctx, counted, &[("pods", "0")]).await?;
    }
    Ok(())
}

fn hard_of(q: &ResourceQuota, resource: &str) -> String {
    to_json(q)["spec"]["hard"][resource]
        .as_str()
        .unwrap_or("")
        .to_string()
}

/// ResourceQuota, update and delete: a quota limiting cpu and memory MUST be created; an update of
/// both limits MUST succeed and show; once deleted, it MUST NOT be found.
async fn update_and_delete(ctx: &Ctx) -> CaseResult {
    let api = ctx.api::<ResourceQuota>();
    let mut quota = json!({"metadata": {"name": "test-quota"},
        "spec": {"hard": {"cpu": "1", "memory": "500Mi"}}});
    create_quota(ctx, quota.clone()).await?;
    let got = api.get("test-quota").await?;
    must!(
        same_quantity(&hard_of(&got, "cpu"), "1")
            && same_quantity(&hard_of(&got, "memory"), "500Mi"),
        "the created quota's hard limits: {}",
        to_json(&got)["spec"]
    );
    // Upstream updates the object it created, which names no resourceVersion: an unconditional
    // update, which ResourceQuota allows. Naming the one just read would race the quota
    // controller's status write (a 409 upstream's entry never sees).
    quota["spec"]["hard"] = json!({"cpu": "2", "memory": "1Gi"});
    let updated = api
        .replace("test-quota", &PostParams::default(), &from_json(quota)?)
        .await?;
    for q in [updated, api.get("test-quota").await?] {
        must!(
            same_quantity(&hard_of(&q, "cpu"), "2") && same_quantity(&hard_of(&q, "memory"), "1Gi"),
            "the updated quota's hard limits: {}",
            to_json(&q)["spec"]
        );
    }
    api.delete("test-quota", &DeleteParams::default()).await?;
    must!(
        api.get_opt("test-quota").await?.is_none(),
        "the deleted quota is still found"
    );
    Ok(())
}

/// ResourceQuota, manage lifecycle: create MUST succeed; a list across namespaces by label MUST find
/// it; a strategic-merge patch of a label and the memory limit MUST show both with a newer
/// resourceVersion; a deletecollection by label MUST remove it.
async fn lifecycle(ctx: &Ctx) -> CaseResult {
    let name = format!("e2e-quota-{}", &ctx.ns[ctx.ns.len() - 5..]);
    let api = ctx.api::<ResourceQuota>();
    create_quota(
        ctx,
        json!({"metadata": {"name": name, "labels": {"e2e-rq-label": name}},
            "spec": {"hard": {"cpu": "1", "memory": "500Mi"}}}),
    )
    .await?;
    let got = api.get(&name).await?;
    must!(
        same_quantity(&hard_of(&got, "cpu"), "1")
            && same_quantity(&hard_of(&got, "memory"), "500Mi"),
        "the created quota's hard limits: {}",
        to_json(&got)["spec"]
    );
    let all: Api<ResourceQuota> = Api::all(ctx.client.clone());
    let listed = all.list(&by_label("e2e-rq-label", &name)).await?;
    must_eq!(
        listed.items.len(),
        1,
        "quotas listed by label across namespaces"
    );
    let patched = api
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Strategic(json!({"metadata": {"labels": {name.as_str(): "patched"}},
                "spec": {"hard": {"memory": "750Mi"}}})),
        )
        .await?;
    must_eq!(
        patched
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(&name))
            .map(String::as_str),
        Some("patched"),
        "the patched label"
    );
    must!(
        same_quantity(&hard_of(&patched, "memory"), "750Mi"),
        "the patched memory limit is {}",
        hard_of(&patched, "memory")
    );
    let rv = |q: &ResourceQuota| {
        q.metadata
            .resource_version
            .as_deref()
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    must!(
        rv(&patched) > rv(&listed.items[0]),
        "the patched quota's resourceVersion is not newer"
    );
    api.delete_collection(&DeleteParams::default(), &by_label("e2e-rq-label", &name))
        .await?;
    must!(
        api.get_opt(&name).await?.is_none(),
        "the quota is still found after deletecollection"
    );
    Ok(())
}

fn hard_status(q: &Value) -> (String, String) {
    let h = &q["status"]["hard"];
    (
        h["cpu"].as_str().unwrap_or("").to_string(),
        h["memory"].as_str().unwrap_or("").to_string(),
    )
}

/// Waits until the quota's status.hard reads (cpu, memory).
async fn wait_status_hard(ctx: &Ctx, name: &str, cpu: &str, memory: &str) -> CaseResult {
    let api = ctx.api::<ResourceQuota>();
    ctx.wait(
        &format!("resourcequota {name} status.hard cpu={cpu} memory={memory}"),
        QUOTA_TIMEOUT,
        || async {
            let (c, m) = hard_status(&to_json(&api.get(name).await?));
            Ok(if same_quantity(&c, cpu) && same_quantity(&m, memory) {
                Ok(())
            } else {
                Err(format!("cpu={c} memory={m}"))
            })
        },
    )
    .await
}

/// ResourceQuota, apply changes to status: an update of /status setting hard to the spec's MUST
/// succeed and show; a patch of the spec's hard MUST succeed; a patch of /status MUST succeed and
/// status.hard MUST then equal the new spec; GET /status MUST report it; a second /status patch
/// MUST succeed and show, leave the spec unchanged, and the status MUST come back to the spec.
async fn status_changes(ctx: &Ctx) -> CaseResult {
    let name = format!("e2e-rq-status-{}", &ctx.ns[ctx.ns.len() - 5..]);
    let api = ctx.api::<ResourceQuota>();
    create_quota(
        ctx,
        json!({"metadata": {"name": name, "labels": {"e2e-rq-label": name}},
            "spec": {"hard": {"cpu": "500m", "memory": "500Mi"}}}),
    )
    .await?;
    let initial = api.get(&name).await?;
    must!(
        same_quantity(&hard_of(&initial, "cpu"), "500m")
            && same_quantity(&hard_of(&initial, "memory"), "500Mi"),
        "the created quota's hard limits: {}",
        to_json(&initial)["spec"]
    );
    let mut attempts = 0;
    loop {
        let mut q = to_json(&api.get(&name).await?);
        q["status"] = json!({"hard": q["spec"]["hard"].clone()});
        match api
            .replace_status(
                &name,
                &PostParams::default(),
                &from_json::<ResourceQuota>(q)?,
            )
            .await
        {
            Ok(_) => break,
            Err(kube::Error::Api(e)) if e.code == 409 && attempts < 5 => attempts += 1,
            Err(e) => return Err(e.into()),
        }
    }
    wait_status_hard(ctx, &name, "500m", "500Mi").await?;

    let patched = api
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"hard": {"cpu": "1", "memory": "1Gi"}}})),
        )
        .await?;
    must!(
        same_quantity(&hard_of(&patched, "cpu"), "1"),
        "the patched spec: {}",
        to_json(&patched)["spec"]
    );
    api.patch_status(
        &name,
        &PatchParams::default(),
        &Patch::Strategic(json!({"status": {"hard": {"cpu": "1", "memory": "1Gi"}}})),
    )
    .await?;
    wait_status_hard(ctx, &name, "1", "1Gi").await?;

    let ar = ApiResource::erase::<ResourceQuota>(&());
    let dynamic: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), &ctx.ns, &ar);
    let status = dynamic.get_subresource("status", &name).await?;
    let (c, m) = hard_status(&serde_json::to_value(&status).unwrap_or_default());
    must!(
        same_quantity(&c, "1") && same_quantity(&m, "1Gi"),
        "GET /status reports hard cpu={c} memory={m}"
    );

    let repatched = api
        .patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Strategic(json!({"status": {"hard": {"cpu": "2", "memory": "2Gi"}}})),
        )
        .await?;
    let (c, m) = hard_status(&to_json(&repatched));
    must!(
        same_quantity(&c, "2") && same_quantity(&m, "2Gi"),
        "the /status patch answered hard cpu={c} memory={m}"
    );
    must!(
        same_quantity(&hard_of(&repatched, "cpu"), "1")
            && same_quantity(&hard_of(&repatched, "memory"), "1Gi"),
        "patching /status changed the spec: {}",
        to_json(&repatched)["spec"]
    );
    // The controller puts status.hard back to the spec (upstream: on its next full resync).
    ctx.wait(
        &format!("resourcequota {name} status.hard reset to the spec"),
        Duration::from_secs(360),
        || async {
            let q = to_json(&api.get(&name).await?);
            let (c, m) = hard_status(&q);
            let spec = (
                q["spec"]["hard"]["cpu"].as_str().unwrap_or("").to_string(),
                q["spec"]["hard"]["memory"]
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
            );
            Ok(
                if same_quantity(&c, "1")
                    && same_quantity(&m, "1Gi")
                    && same_quantity(&spec.0, "1")
                    && same_quantity(&spec.1, "1Gi")
                {
                    Ok(())
                } else {
                    Err(format!("spec {spec:?}, status cpu={c} memory={m}"))
                },
            )
        },
    )
    .await
}
