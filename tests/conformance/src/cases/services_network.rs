//! sig-network Services entries, written from upstream's test/e2e/network/service.go: the API's own
//! Service, listing and deleting Services, the /status lifecycle, Endpoints' lifecycle, endpoints
//! following pods, type changes and session affinity. Where upstream reaches a Service from its
//! jig's exec pod (`nc`/`curl`), an agnhost client pod in the namespace does, with busybox `wget`
//! (TCP, the backends are agnhost's HTTP servers) and its own netexec's /dial (UDP): same targets,
//! same expectations. kiln's
//! Services are kiln-proxy's nftables rules on each node. The helpers here are shared with the
//! EndpointSlice and pod-networking entries.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Endpoints, Node, Pod, ReplicationController, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent};
use kube::ResourceExt;
use serde_json::{json, Value};

use super::api_ops::update_with_retry;
use super::replication::{pods_created, suffix, until, watch_labelled};
use super::{case, Case};
use crate::ctx::{by_label, from_json, to_json, Ctx};
use crate::error::CaseResult;
use crate::{must, must_eq};

pub const CASES: &[Case] = &[
    case!(
        "[sig-network] Services should provide secure master service [Conformance]",
        "services",
        secure_master_service
    ),
    case!(
        "[sig-network] Services should find a service from listing all namespaces [Conformance]",
        "services",
        find_in_all_namespaces
    ),
    case!(
        "[sig-network] Services should delete a collection of services [Conformance]",
        "services",
        delete_collection
    ),
    case!(
        "[sig-network] Services should complete a service status lifecycle [Conformance]",
        "services",
        status_lifecycle
    ),
    case!(
        "[sig-network] Services should test the lifecycle of an Endpoint [Conformance]",
        "services",
        endpoint_lifecycle
    ),
    case!(
        "[sig-network] Services should serve a basic endpoint from pods [Conformance]",
        "services",
        basic_endpoint
    ),
    case!(
        "[sig-network] Services should serve multiport endpoints from pods [Conformance]",
        "services",
        multiport_endpoints
    ),
    case!(
        "[sig-network] Services should serve endpoints on same port and different protocols [Conformance]",
        "services",
        same_port_different_protocols
    ),
    case!(
        "[sig-network] Services should be able to create a functioning NodePort service [Conformance]",
        "services",
        functioning_node_port
    ),
    case!(
        "[sig-network] Services should be able to change the type from ClusterIP to ExternalName [Conformance]",
        "services",
        cluster_ip_to_external_name
    ),
    case!(
        "[sig-network] Services should be able to change the type from NodePort to ExternalName [Conformance]",
        "services",
        node_port_to_external_name
    ),
    case!(
        "[sig-network] Services should be able to change the type from ExternalName to ClusterIP [Conformance]",
        "services",
        external_name_to_cluster_ip
    ),
    case!(
        "[sig-network] Services should be able to change the type from ExternalName to NodePort [Conformance]",
        "services",
        external_name_to_node_port
    ),
    case!(
        "[sig-network] Services should have session affinity work for service with type clusterIP [LinuxOnly] [Conformance]",
        "services",
        affinity_cluster_ip
    ),
    case!(
        "[sig-network] Services should be able to switch session affinity for service with type clusterIP [LinuxOnly] [Conformance]",
        "services",
        affinity_switch_cluster_ip
    ),
    case!(
        "[sig-network] Services should have session affinity work for NodePort service [LinuxOnly] [Conformance]",
        "services",
        affinity_node_port
    ),
    case!(
        "[sig-network] Services should be able to switch session affinity for NodePort service [LinuxOnly] [Conformance]",
        "services",
        affinity_switch_node_port
    ),
];

/// Upstream's KubeProxyLagTimeout: how long a Service change may take to reach the nodes' rules.
pub(super) const PROXY_LAG: Duration = Duration::from_secs(120);
/// Upstream's ServiceStartTimeout: how long endpoints may take to follow pods.
const ENDPOINTS_WAIT: Duration = Duration::from_secs(180);
/// How long a watch event may take.
const WATCH_WAIT: Duration = Duration::from_secs(60);
/// agnhost serve-hostname's port (upstream's ServeHostnameImage answers there).
const SERVE_HOSTNAME_PORT: i32 = 9376;
/// Upstream's AffinityConfirmCount: this many answers in a row from one pod prove affinity.
const AFFINITY_CONFIRM: usize = 15;
/// The cluster's DNS domain.
const ZONE: &str = "cluster.local";

/// Create a Service written as JSON.
pub(super) async fn create_service(ctx: &Ctx, v: Value) -> CaseResult<Service> {
    let svc: Service = from_json(v)?;
    Ok(ctx
        .api::<Service>()
        .create(&PostParams::default(), &svc)
        .await?)
}

fn cluster_ip(svc: &Service) -> String {
    svc.spec
        .as_ref()
        .and_then(|s| s.cluster_ip.clone())
        .unwrap_or_default()
}

fn node_ports(svc: &Service) -> Vec<i32> {
    svc.spec
        .as_ref()
        .and_then(|s| s.ports.as_ref())
        .map(|ps| ps.iter().map(|p| p.node_port.unwrap_or(0)).collect())
        .unwrap_or_default()
}

/// `host:port` for a URL or nc (IPv6 addresses bracketed).
pub(super) fn host_port(host: &str, port: i32) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// A pod to reach Services from (upstream's CreateExecPodOrFail), optionally on a given node or in
/// the host's network namespace (upstream's hostexec pod); Ready when this returns. It is an agnhost
/// pod: its busybox tools make the TCP requests, and its netexec (HTTP only, on $CLIENT_PORT) dials
/// UDP for it, since the lab's busybox `nc` has no `-u`. A host-network client's port is random so
/// clients of parallel cases on one node do not collide.
pub(super) async fn client_pod(
    ctx: &Ctx,
    name: &str,
    node: Option<&str>,
    host_network: bool,
) -> CaseResult<()> {
    let port = if host_network {
        20000 + rand::random::<u16>() % 10000
    } else {
        8090
    };
    let mut spec = json!({
        "terminationGracePeriodSeconds": 0,
        "hostNetwork": host_network,
        "containers": [{"name": "client", "image": ctx.images().agnhost(),
            "command": ["/agnhost"],
            "args": ["netexec", format!("--http-port={port}"), "--udp-port=-1"],
            "env": [{"name": "CLIENT_PORT", "value": port.to_string()}]}],
    });
    if let Some(n) = node {
        spec["nodeName"] = json!(n);
    }
    ctx.create_pod(&from_json(
        json!({"metadata": {"name": name}, "spec": spec}),
    )?)
    .await?;
    ctx.wait_ready(name).await?;
    Ok(())
}

/// `sh -c script` in a client pod: its stdout, or the failure as text.
pub(super) async fn sh(ctx: &Ctx, pod: &str, script: &str) -> Result<String, String> {
    ctx.exec(pod, "client", &["sh", "-c", script])
        .await
        .map_err(|e| e.to_string())
}

/// One HTTP GET from the client pod (busybox wget under a 5 s `timeout`: the lab's busybox wget
/// crashes on `-T`): the body, or why it failed.
pub(super) async fn http_get(
    ctx: &Ctx,
    pod: &str,
    target: &str,
    path: &str,
) -> Result<String, String> {
    sh(
        ctx,
        pod,
        &format!("timeout 5 wget -q -O- 'http://{target}{path}'"),
    )
    .await
}

/// netexec's /dial answer (`{"responses": [...], "errors": [...]}`): the responses.
pub(super) fn dial_responses(body: &str) -> Vec<String> {
    serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|v| v.get("responses").cloned())
        .and_then(|r| serde_json::from_value(r).ok())
        .unwrap_or_default()
}

/// One UDP request from the client pod (its netexec's /dial, protocol udp, one try): the answer, or
/// why none came.
pub(super) async fn udp_ask(
    ctx: &Ctx,
    pod: &str,
    host: &str,
    port: i32,
    request: &str,
) -> Result<String, String> {
    let body = sh(
        ctx,
        pod,
        &format!("timeout 10 wget -q -O- \"http://127.0.0.1:$CLIENT_PORT/dial?request={request}&protocol=udp&host={host}&port={port}&tries=1\""),
    )
    .await?;
    dial_responses(&body)
        .into_iter()
        .next()
        .ok_or_else(|| format!("no UDP answer: {body}"))
}

/// Upstream's testReachableInTime: `target` MUST answer an HTTP GET from the client pod within the
/// proxy's lag; returns the answer.
async fn reachable(ctx: &Ctx, pod: &str, target: &str) -> CaseResult<String> {
    ctx.wait(
        &format!("{target} to answer from {pod}"),
        PROXY_LAG,
        || async { Ok(http_get(ctx, pod, target, "/").await) },
    )
    .await
}

/// The InternalIP and ExternalIP addresses of the ready, untainted, schedulable nodes (upstream's
/// GetBoundedReadySchedulableNodes, then each node's internal and external addresses).
async fn node_addresses(ctx: &Ctx) -> CaseResult<Vec<String>> {
    let nodes = ctx.all::<Node>().list(&ListParams::default()).await?;
    let mut out = Vec::new();
    for n in nodes.items {
        let spec = n.spec.clone().unwrap_or_default();
        let tainted = spec
            .taints
            .iter()
            .flatten()
            .any(|t| t.effect == "NoSchedule" || t.effect == "NoExecute");
        let status = n.status.clone().unwrap_or_default();
        let ready = status
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        if tainted || spec.unschedulable.unwrap_or(false) || !ready {
            continue;
        }
        for a in status.addresses.iter().flatten() {
            if a.type_ == "InternalIP" || a.type_ == "ExternalIP" {
                out.push(a.address.clone());
            }
        }
    }
    must!(!out.is_empty(), "no schedulable node has an address");
    Ok(out)
}

/// Upstream's CheckServiceReachability for ClusterIP and NodePort Services: the Service MUST
/// answer on its name and ClusterIP at every service port, and a NodePort Service on every node's
/// address at every node port.
async fn check_reachability(ctx: &Ctx, svc: &Service, pod: &str) -> CaseResult {
    let name = svc.name_any();
    let ip = cluster_ip(svc);
    let spec = svc.spec.clone().unwrap_or_default();
    for p in spec.ports.iter().flatten() {
        reachable(ctx, pod, &host_port(&name, p.port)).await?;
        reachable(ctx, pod, &host_port(&ip, p.port)).await?;
        if spec.type_.as_deref() == Some("NodePort") {
            let np = p.node_port.unwrap_or(0);
            must!(
                np > 0,
                "NodePort Service {name} has no node port on {}",
                p.port
            );
            for addr in node_addresses(ctx).await? {
                reachable(ctx, pod, &host_port(&addr, np)).await?;
            }
        }
    }
    Ok(())
}

/// Upstream's SanityCheckService: the Service's type and what the type implies (a ClusterIP but
/// no node ports for ClusterIP; a ClusterIP and node ports in range for NodePort; neither for
/// ExternalName).
fn sanity_check(svc: &Service, want: &str) -> CaseResult {
    let spec = svc.spec.clone().unwrap_or_default();
    let name = svc.name_any();
    must_eq!(
        spec.type_.as_deref().unwrap_or("ClusterIP"),
        want,
        "type of {name}"
    );
    let ip = cluster_ip(svc);
    let ports = node_ports(svc);
    match want {
        "ExternalName" => {
            must!(
                ip.is_empty(),
                "ExternalName Service {name} MUST NOT have a ClusterIP, has {ip:?}"
            );
            must!(
                ports.iter().all(|p| *p == 0),
                "ExternalName Service {name} MUST NOT keep node ports, has {ports:?}"
            );
        }
        "ClusterIP" => {
            must!(
                !ip.is_empty() && ip != "None",
                "ClusterIP Service {name} got no ClusterIP"
            );
            must!(
                ports.iter().all(|p| *p == 0),
                "ClusterIP Service {name} has node ports {ports:?}"
            );
        }
        _ => {
            must!(
                !ip.is_empty() && ip != "None",
                "{want} Service {name} got no ClusterIP"
            );
            must!(
                !ports.is_empty() && ports.iter().all(|p| (30000..=32767).contains(p)),
                "{want} Service {name} MUST have node ports in 30000-32767, has {ports:?}"
            );
        }
    }
    Ok(())
}

/// Upstream's CreateServicePods / StartServeHostnameService: a ReplicationController named `name`
/// of agnhost serve-hostname pods labelled `name=<name>`, running and Ready; returns their names
/// (what serve-hostname answers).
async fn serve_hostname_rc(ctx: &Ctx, name: &str, replicas: usize) -> CaseResult<BTreeSet<String>> {
    let rc: ReplicationController = from_json(json!({
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"name": name},
            "template": {
                "metadata": {"labels": {"name": name}},
                "spec": {
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{"name": name, "image": ctx.images().agnhost(),
                        "command": ["/agnhost"], "args": ["serve-hostname"],
                        "ports": [{"containerPort": SERVE_HOSTNAME_PORT}]}],
                },
            },
        },
    }))?;
    ctx.api::<ReplicationController>()
        .create(&PostParams::default(), &rc)
        .await?;
    let pods = pods_created(ctx, name, replicas).await?;
    let mut names = BTreeSet::new();
    for p in pods {
        let n = p.name_any();
        ctx.wait_ready(&n).await?;
        names.insert(n);
    }
    Ok(names)
}

/// A ClusterIP/NodePort Service `name` selecting `name=<name>` on port 80 (TCP) to serve-hostname.
fn serve_hostname_service(name: &str, type_: &str, affinity: Option<&str>) -> Value {
    let mut spec = json!({
        "type": type_,
        "selector": {"name": name},
        "ports": [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": SERVE_HOSTNAME_PORT}],
    });
    if let Some(a) = affinity {
        spec["sessionAffinity"] = json!(a);
    }
    json!({"metadata": {"name": name}, "spec": spec})
}

/// Kubernetes Service: the `kubernetes` Service MUST exist in the default namespace.
async fn secure_master_service(ctx: &Ctx) -> CaseResult {
    let svc = Api::<Service>::namespaced(ctx.client.clone(), "default")
        .get_opt("kubernetes")
        .await?;
    must!(svc.is_some(), "no Service default/kubernetes");
    Ok(())
}

/// Find Kubernetes Service in default Namespace: listing Services in all namespaces MUST include
/// `kubernetes` in `default`.
async fn find_in_all_namespaces(ctx: &Ctx) -> CaseResult {
    let all = Api::<Service>::all(ctx.client.clone())
        .list(&ListParams::default())
        .await?;
    must!(
        all.items
            .iter()
            .any(|s| s.name_any() == "kubernetes" && s.namespace().as_deref() == Some("default")),
        "no default/kubernetes among {} Services listed in all namespaces",
        all.items.len()
    );
    Ok(())
}

/// Service, deletes a collection: three labelled Services (two `delete`, one `keep`) MUST all be
/// found by the label; deleting the collection selected by `e2e-test-service=delete` MUST succeed
/// and leave exactly one of them.
async fn delete_collection(ctx: &Ctx) -> CaseResult {
    let svcs = ctx.api::<Service>();
    for (which, value) in [("a", "delete"), ("b", "delete"), ("c", "keep")] {
        create_service(
            ctx,
            json!({
                "metadata": {"name": format!("e2e-svc-{which}-{}", suffix()),
                    "labels": {"e2e-test-service": value}},
                "spec": {"type": "ClusterIP", "ports": [{"name": "http", "protocol": "TCP",
                    "port": 8888, "targetPort": 80}]},
            }),
        )
        .await?;
    }
    let lp = ListParams::default().labels("e2e-test-service");
    must_eq!(
        svcs.list(&lp).await?.items.len(),
        3,
        "labelled Services found"
    );
    svcs.delete_collection(
        &DeleteParams::default(),
        &ListParams::default().labels("e2e-test-service=delete"),
    )
    .await?;
    let left = ctx
        .wait("the collection's Services gone", WATCH_WAIT, || async {
            let items = svcs.list(&lp).await?.items;
            Ok(if items.len() == 1 {
                Ok(items)
            } else {
                Err(format!("{} labelled Services", items.len()))
            })
        })
        .await?;
    must!(
        left[0].name_any().starts_with("e2e-svc-c-"),
        "the Service left is {}, want e2e-svc-c-*",
        left[0].name_any()
    );
    Ok(())
}

/// Service, complete ServiceStatus lifecycle: a Service MUST be created and read through
/// /status; a /status patch (load-balancer ingress), a /status update (a condition) and a patch of
/// the Service (a label) MUST each be applied and seen on a watch; the deletion too.
async fn status_lifecycle(ctx: &Ctx) -> CaseResult {
    let svcs = ctx.api::<Service>();
    let name = format!("test-service-{}", suffix());
    let sel = "test-service-static=true";
    let mut watch = watch_labelled(&svcs, sel).await?;
    create_service(
        ctx,
        json!({
            "metadata": {"name": name, "labels": {"test-service-static": "true"}},
            "spec": {"type": "LoadBalancer", "loadBalancerClass": "example.com/internal-vip",
                "ports": [{"name": "http", "protocol": "TCP", "port": 80, "targetPort": 80}]},
        }),
    )
    .await?;
    until(
        &mut watch,
        "the Service ADDED",
        WATCH_WAIT,
        |e| matches!(e, WatchEvent::Added(s) if s.name_any() == name),
    )
    .await?;

    let gvk = kube::core::GroupVersionKind::gvk("", "v1", "Service");
    let (ar, _) = kube::discovery::pinned_kind(&ctx.client, &gvk).await?;
    let dynamic: Api<kube::core::DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), &ctx.ns, &ar);
    let via_status = dynamic.get_subresource("status", &name).await?;
    must_eq!(
        via_status.metadata.name.as_deref(),
        Some(name.as_str()),
        "the Service read through /status"
    );

    let lb = json!({"ingress": [{"ip": "203.0.113.1"}]});
    let patched = svcs
        .patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"annotations": {"patchedstatus": "true"}},
                "status": {"loadBalancer": lb}}),
            ),
        )
        .await?;
    must_eq!(
        to_json(&patched).pointer("/status/loadBalancer"),
        Some(&lb),
        "patched status"
    );
    must_eq!(
        patched.annotations().get("patchedstatus").map(String::as_str),
        Some("true"),
        "annotation set by the /status patch (upstream's service status strategy resets only the spec)"
    );
    until(&mut watch, "the /status patch", WATCH_WAIT, |e| {
        matches!(e, WatchEvent::Modified(s)
            if to_json(s).pointer("/status/loadBalancer") == Some(&lb)
                && s.annotations().get("patchedstatus").map(String::as_str) == Some("true"))
    })
    .await?;

    let condition = json!({"type": "StatusUpdate", "status": "True", "reason": "E2E",
        "message": "Set from e2e test", "lastTransitionTime": "2024-01-01T00:00:00Z"});
    let updated = update_with_retry(&svcs, &name, true, |s| {
        if let Some(st) = s.status.as_mut() {
            st.conditions = from_json(json!([condition])).ok();
        }
    })
    .await?;
    let has_condition = |s: &Service| {
        s.status
            .as_ref()
            .and_then(|st| st.conditions.as_ref())
            .is_some_and(|cs| {
                cs.iter()
                    .any(|c| c.type_ == "StatusUpdate" && c.reason == "E2E")
            })
    };
    must!(
        has_condition(&updated),
        "the updated status lacks the StatusUpdate condition: {:?}",
        updated.status
    );
    until(
        &mut watch,
        "the /status update",
        WATCH_WAIT,
        |e| matches!(e, WatchEvent::Modified(s) if has_condition(s)),
    )
    .await?;

    let patched = svcs
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"test-service": "patched"}}})),
        )
        .await?;
    must_eq!(
        patched.labels().get("test-service").map(String::as_str),
        Some("patched"),
        "patched label"
    );
    until(&mut watch, "the Service patch", WATCH_WAIT, |e| {
        matches!(e, WatchEvent::Modified(s)
            if s.labels().get("test-service").map(String::as_str) == Some("patched"))
    })
    .await?;

    svcs.delete(&name, &DeleteParams::default()).await?;
    until(
        &mut watch,
        "the Service DELETED",
        WATCH_WAIT,
        |e| matches!(e, WatchEvent::Deleted(s) if s.name_any() == name),
    )
    .await?;
    Ok(())
}

/// Endpoint resource lifecycle: an Endpoints object MUST be created and found (listing all
/// namespaces by label); updated with a label, MUST show it; patched with a new address and port,
/// MUST show them; deleted by its label, a watch MUST see the DELETED event.
async fn endpoint_lifecycle(ctx: &Ctx) -> CaseResult {
    let eps = ctx.api::<Endpoints>();
    let name = "example-custom-endpoints";
    let sel = "test-endpoint-static=true";
    let mut watch = watch_labelled(&eps, sel).await?;
    let ep: Endpoints = from_json(json!({
        "metadata": {"name": name, "labels": {"test-endpoint-static": "true"}},
        "subsets": [{"addresses": [{"ip": "10.0.0.24"}],
            "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}],
    }))?;
    eps.create(&PostParams::default(), &ep).await?;
    until(
        &mut watch,
        "the Endpoints ADDED",
        WATCH_WAIT,
        |e| matches!(e, WatchEvent::Added(o) if o.name_any() == name),
    )
    .await?;
    let all = Api::<Endpoints>::all(ctx.client.clone())
        .list(&ListParams::default().labels(sel))
        .await?;
    must!(
        all.items
            .iter()
            .any(|e| e.name_any() == name && e.namespace().as_deref() == Some(ctx.ns.as_str())),
        "Endpoints {name} not found listing all namespaces by {sel}"
    );

    update_with_retry(&eps, name, false, |e| {
        e.labels_mut()
            .insert("test-service".into(), "updated".into());
    })
    .await?;
    until(&mut watch, "the Endpoints update", WATCH_WAIT, |e| {
        matches!(e, WatchEvent::Modified(o)
            if o.labels().get("test-service").map(String::as_str) == Some("updated"))
    })
    .await?;
    let got = eps.get(name).await?;
    must_eq!(
        got.labels().get("test-service").map(String::as_str),
        Some("updated"),
        "label after update"
    );

    eps.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({
            "metadata": {"labels": {"test-service": "patched"}},
            "subsets": [{"addresses": [{"ip": "10.0.0.25"}],
                "ports": [{"name": "http-test", "port": 8080, "protocol": "TCP"}]}],
        })),
    )
    .await?;
    until(&mut watch, "the Endpoints patch", WATCH_WAIT, |e| {
        matches!(e, WatchEvent::Modified(o)
            if o.labels().get("test-service").map(String::as_str) == Some("patched"))
    })
    .await?;
    let got = to_json(&eps.get(name).await?);
    must_eq!(
        got.pointer("/subsets/0/addresses/0/ip"),
        Some(&json!("10.0.0.25")),
        "patched address"
    );
    must_eq!(
        got.pointer("/subsets/0/ports/0/port"),
        Some(&json!(8080)),
        "patched port"
    );
    must_eq!(
        got.pointer("/subsets/0/ports/0/name"),
        Some(&json!("http-test")),
        "patched port name"
    );

    eps.delete_collection(&DeleteParams::default(), &ListParams::default().labels(sel))
        .await?;
    until(
        &mut watch,
        "the Endpoints DELETED",
        WATCH_WAIT,
        |e| matches!(e, WatchEvent::Deleted(o) if o.name_any() == name),
    )
    .await?;
    must!(
        eps.list(&ListParams::default().labels(sel))
            .await?
            .items
            .is_empty(),
        "Endpoints left after deletecollection"
    );
    Ok(())
}

/// Pod name → ports, as the Service's Endpoints and EndpointSlices show them.
type PortsByPod = BTreeMap<String, BTreeSet<i32>>;

/// What the Endpoints object of `svc` holds (pod name by targetRef → ports).
async fn endpoints_ports(ctx: &Ctx, svc: &str) -> CaseResult<PortsByPod> {
    let mut out = PortsByPod::new();
    if let Some(ep) = ctx.api::<Endpoints>().get_opt(svc).await? {
        for s in ep.subsets.iter().flatten() {
            let ports: Vec<i32> = s.ports.iter().flatten().map(|p| p.port).collect();
            for a in s.addresses.iter().flatten() {
                let pod = a
                    .target_ref
                    .as_ref()
                    .and_then(|r| r.name.clone())
                    .unwrap_or_default();
                out.entry(pod).or_default().extend(ports.iter().copied());
            }
        }
    }
    Ok(out)
}

/// What the EndpointSlices of `svc` hold (pod name by targetRef → ports).
async fn slices_ports(ctx: &Ctx, svc: &str) -> CaseResult<PortsByPod> {
    let mut out = PortsByPod::new();
    let slices = ctx
        .api::<EndpointSlice>()
        .list(&by_label("kubernetes.io/service-name", svc))
        .await?;
    for s in slices.items {
        let ports: Vec<i32> = s.ports.iter().flatten().filter_map(|p| p.port).collect();
        for e in s.endpoints {
            let pod = e
                .target_ref
                .as_ref()
                .and_then(|r| r.name.clone())
                .unwrap_or_default();
            out.entry(pod).or_default().extend(ports.iter().copied());
        }
    }
    Ok(out)
}

/// Upstream's validateEndpointsPortsOrFail: the Service's endpoints MUST become exactly `want`
/// (pod name → ports), in its Endpoints and in its EndpointSlices.
pub(super) async fn expect_endpoints(ctx: &Ctx, svc: &str, want: &[(&str, &[i32])]) -> CaseResult {
    let want: PortsByPod = want
        .iter()
        .map(|(p, ports)| (p.to_string(), ports.iter().copied().collect()))
        .collect();
    ctx.wait(
        &format!("endpoints of {svc} to be {want:?}"),
        ENDPOINTS_WAIT,
        || async {
            let eps = endpoints_ports(ctx, svc).await?;
            let slices = slices_ports(ctx, svc).await?;
            Ok(if eps == want && slices == want {
                Ok(())
            } else {
                Err(format!("Endpoints {eps:?}, EndpointSlices {slices:?}"))
            })
        },
    )
    .await
}

/// An agnhost netexec pod labelled `labels` with the given container ports (name, port, protocol)
/// and netexec flags; Running when this returns.
async fn netexec_pod(
    ctx: &Ctx,
    name: &str,
    labels: Value,
    ports: Value,
    args: &[&str],
) -> CaseResult {
    let mut all_args = vec!["netexec"];
    all_args.extend_from_slice(args);
    ctx.create_pod(&from_json(json!({
        "metadata": {"name": name, "labels": labels},
        "spec": {"terminationGracePeriodSeconds": 0, "containers": [{"name": "agnhost-container",
            "image": ctx.images().agnhost(), "command": ["/agnhost"], "args": all_args,
            "ports": ports}]},
    }))?)
    .await?;
    ctx.wait_running(name).await?;
    Ok(())
}

async fn delete_pod(ctx: &Ctx, name: &str) -> CaseResult {
    ctx.api::<Pod>()
        .delete(name, &DeleteParams::default().grace_period(0))
        .await?;
    Ok(())
}

/// The pod `target` (`host:port`) forwards to MUST become `pod` (netexec's /hostname).
async fn forwards_to(ctx: &Ctx, client: &str, target: &str, pod: &str) -> CaseResult {
    ctx.wait(
        &format!("{target} to forward to {pod}"),
        PROXY_LAG,
        || async {
            Ok(match http_get(ctx, client, target, "/hostname").await {
                Ok(h) if h.trim() == pod => Ok(()),
                Ok(h) => Err(format!("answered {:?}", h.trim())),
                Err(e) => Err(e),
            })
        },
    )
    .await
}

/// Service, endpoints: a Service without pods MUST show no endpoints; with pod1, pod1's port; with
/// pod2 too, both; after pod1's deletion only pod2's; after pod2's, none. Traffic to the Service
/// MUST reach the pods behind it.
async fn basic_endpoint(ctx: &Ctx) -> CaseResult {
    let svc = "endpoint-test2";
    let labels = json!({"name": svc});
    create_service(
        ctx,
        json!({"metadata": {"name": svc}, "spec": {"selector": labels,
            "ports": [{"port": 80, "protocol": "TCP", "targetPort": 80}]}}),
    )
    .await?;
    expect_endpoints(ctx, svc, &[]).await?;
    let ports = json!([{"containerPort": 80}]);
    netexec_pod(
        ctx,
        "pod1",
        labels.clone(),
        ports.clone(),
        &["--http-port", "80"],
    )
    .await?;
    expect_endpoints(ctx, svc, &[("pod1", &[80])]).await?;
    client_pod(ctx, "execpod", None, false).await?;
    forwards_to(ctx, "execpod", &host_port(svc, 80), "pod1").await?;
    netexec_pod(ctx, "pod2", labels, ports, &["--http-port", "80"]).await?;
    expect_endpoints(ctx, svc, &[("pod1", &[80]), ("pod2", &[80])]).await?;
    delete_pod(ctx, "pod1").await?;
    expect_endpoints(ctx, svc, &[("pod2", &[80])]).await?;
    forwards_to(ctx, "execpod", &host_port(svc, 80), "pod2").await?;
    delete_pod(ctx, "pod2").await?;
    expect_endpoints(ctx, svc, &[]).await
}

/// Service, endpoints with multiple ports: a two-port Service without pods MUST show no endpoints;
/// pod1 (serving the first port's target) MUST show on it; pod2 (the second's) too; after pod1's
/// deletion only pod2; after pod2's, none. Each port MUST reach its pod.
async fn multiport_endpoints(ctx: &Ctx) -> CaseResult {
    let svc = "multi-endpoint-test";
    let labels = json!({"name": svc});
    let (port1, port2, target1, target2) = (80, 81, 100, 101);
    create_service(
        ctx,
        json!({"metadata": {"name": svc}, "spec": {"selector": labels, "ports": [
            {"name": "portname1", "port": port1, "protocol": "TCP", "targetPort": "svc1"},
            {"name": "portname2", "port": port2, "protocol": "TCP", "targetPort": "svc2"}]}}),
    )
    .await?;
    expect_endpoints(ctx, svc, &[]).await?;
    let t1 = target1.to_string();
    let t2 = target2.to_string();
    netexec_pod(
        ctx,
        "pod1",
        labels.clone(),
        json!([{"name": "svc1", "containerPort": target1}]),
        &["--http-port", &t1],
    )
    .await?;
    expect_endpoints(ctx, svc, &[("pod1", &[target1])]).await?;
    netexec_pod(
        ctx,
        "pod2",
        labels,
        json!([{"name": "svc2", "containerPort": target2}]),
        &["--http-port", &t2],
    )
    .await?;
    expect_endpoints(ctx, svc, &[("pod1", &[target1]), ("pod2", &[target2])]).await?;
    client_pod(ctx, "execpod", None, false).await?;
    forwards_to(ctx, "execpod", &host_port(svc, port1), "pod1").await?;
    forwards_to(ctx, "execpod", &host_port(svc, port2), "pod2").await?;
    delete_pod(ctx, "pod1").await?;
    expect_endpoints(ctx, svc, &[("pod2", &[target2])]).await?;
    delete_pod(ctx, "pod2").await?;
    expect_endpoints(ctx, svc, &[]).await
}

/// Whether the Service's port answers (TCP: netexec's /hostname over HTTP; UDP: `hostname` over
/// nc) with the pod's name.
async fn answers(ctx: &Ctx, client: &str, ip: &str, port: i32, udp: bool, pod: &str) -> bool {
    let got = if udp {
        udp_ask(ctx, client, ip, port, "hostname").await
    } else {
        http_get(ctx, client, &host_port(ip, port), "/hostname").await
    };
    got.is_ok_and(|h| h.trim() == pod)
}

/// Wait until the TCP and UDP sides of `ip:port` answer (or not) as `want` says.
async fn expect_protocols(
    ctx: &Ctx,
    client: &str,
    ip: &str,
    port: i32,
    want: [bool; 2],
) -> CaseResult {
    ctx.wait(
        &format!("{ip}:{port} to answer over TCP={} UDP={}", want[0], want[1]),
        PROXY_LAG,
        || async {
            let got = [
                answers(ctx, client, ip, port, false, "pod1").await,
                answers(ctx, client, ip, port, true, "pod1").await,
            ];
            Ok(if got == want {
                Ok(())
            } else {
                Err(format!("TCP answers {}, UDP answers {}", got[0], got[1]))
            })
        },
    )
    .await
}

/// Service, same port different protocols: a Service with TCP and UDP on port 80 MUST forward
/// both; with only TCP, TCP MUST connect and UDP MUST NOT; with only UDP, the reverse.
async fn same_port_different_protocols(ctx: &Ctx) -> CaseResult {
    let svc = "multiprotocol-test";
    let labels = json!({"name": svc});
    let tcp = json!({"name": "tcp-port", "port": 80, "protocol": "TCP", "targetPort": 80});
    let udp = json!({"name": "udp-port", "port": 80, "protocol": "UDP", "targetPort": 80});
    let created = create_service(
        ctx,
        json!({"metadata": {"name": svc}, "spec": {"selector": labels, "ports": [tcp, udp]}}),
    )
    .await?;
    let ip = cluster_ip(&created);
    netexec_pod(
        ctx,
        "pod1",
        labels,
        json!([{"name": "tcp-port", "containerPort": 80, "protocol": "TCP"},
            {"name": "udp-port", "containerPort": 80, "protocol": "UDP"}]),
        &["--http-port", "80", "--udp-port", "80"],
    )
    .await?;
    expect_endpoints(ctx, svc, &[("pod1", &[80])]).await?;
    client_pod(ctx, "execpod", None, false).await?;
    expect_protocols(ctx, "execpod", &ip, 80, [true, true]).await?;
    for (ports, want) in [(json!([tcp]), [true, false]), (json!([udp]), [false, true])] {
        ctx.api::<Service>()
            .patch(
                svc,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"ports": ports}})),
            )
            .await?;
        expect_protocols(ctx, "execpod", &ip, 80, want).await?;
    }
    Ok(())
}

/// Service, NodePort Service: a TCP NodePort Service MUST be reachable from a client pod on its
/// name and ClusterIP at the service port, and on every node's addresses at the node port.
async fn functioning_node_port(ctx: &Ctx) -> CaseResult {
    let name = "nodeport-test";
    let svc = create_service(ctx, serve_hostname_service(name, "NodePort", None)).await?;
    sanity_check(&svc, "NodePort")?;
    serve_hostname_rc(ctx, name, 2).await?;
    client_pod(ctx, "execpod", None, false).await?;
    check_reachability(ctx, &svc, "execpod").await
}

/// Upstream's createAndGetExternalServiceFQDN: the `externalsvc` ClusterIP Service over two
/// serve-hostname pods; returns its FQDN and ClusterIP.
async fn external_service(ctx: &Ctx) -> CaseResult<(String, String)> {
    let name = "externalsvc";
    let svc = create_service(ctx, serve_hostname_service(name, "ClusterIP", None)).await?;
    serve_hostname_rc(ctx, name, 2).await?;
    Ok((format!("{name}.{}.svc.{ZONE}", ctx.ns), cluster_ip(&svc)))
}

/// Change `name`'s type to ExternalName pointing at `externalsvc`: the update MUST succeed, leave no
/// ClusterIP nor node port, and the name MUST resolve (A record through the CNAME) to externalsvc's
/// ClusterIP from a client pod.
async fn to_external_name(ctx: &Ctx, name: &str) -> CaseResult {
    let (fqdn, ip) = external_service(ctx).await?;
    let updated = update_with_retry(&ctx.api::<Service>(), name, false, |s| {
        if let Some(spec) = s.spec.as_mut() {
            spec.type_ = Some("ExternalName".into());
            spec.external_name = Some(fqdn.clone());
        }
    })
    .await?;
    sanity_check(&updated, "ExternalName")?;
    client_pod(ctx, "execpod", None, false).await?;
    let own = format!("{name}.{}.svc.{ZONE}", ctx.ns);
    ctx.wait(&format!("{own} to resolve to {ip}"), PROXY_LAG, || async {
        Ok(match sh(ctx, "execpod", &format!("nslookup {own}")).await {
            Ok(out) if out.contains(&ip) => Ok(()),
            Ok(out) => Err(format!("nslookup answered {out:?}")),
            Err(e) => Err(e),
        })
    })
    .await
}

/// Service, change type, ClusterIP to ExternalName.
async fn cluster_ip_to_external_name(ctx: &Ctx) -> CaseResult {
    let name = "clusterip-service";
    let svc = create_service(ctx, serve_hostname_service(name, "ClusterIP", None)).await?;
    sanity_check(&svc, "ClusterIP")?;
    to_external_name(ctx, name).await
}

/// Service, change type, NodePort to ExternalName (the node port MUST be released).
async fn node_port_to_external_name(ctx: &Ctx) -> CaseResult {
    let name = "nodeport-service";
    let svc = create_service(ctx, serve_hostname_service(name, "NodePort", None)).await?;
    sanity_check(&svc, "NodePort")?;
    to_external_name(ctx, name).await
}

/// An ExternalName Service (foo.example.com, no ClusterIP) changed to `type_` on port 80/TCP: the
/// update MUST succeed with a ClusterIP (and node ports for NodePort), and the Service MUST be
/// reachable on its name and ClusterIP (and the nodes' node port).
async fn from_external_name(ctx: &Ctx, type_: &str) -> CaseResult {
    let name = "externalname-service";
    let svc = create_service(
        ctx,
        json!({"metadata": {"name": name}, "spec": {"type": "ExternalName",
            "externalName": "foo.example.com", "selector": {"name": name}}}),
    )
    .await?;
    sanity_check(&svc, "ExternalName")?;
    serve_hostname_rc(ctx, name, 2).await?;
    let updated = update_with_retry(&ctx.api::<Service>(), name, false, |s| {
        if let Some(spec) = s.spec.as_mut() {
            spec.type_ = Some(type_.into());
            spec.external_name = None;
            spec.ports = from_json(json!([{"name": "http", "port": 80, "protocol": "TCP",
                "targetPort": SERVE_HOSTNAME_PORT}]))
            .ok();
        }
    })
    .await?;
    sanity_check(&updated, type_)?;
    client_pod(ctx, "execpod", None, false).await?;
    check_reachability(ctx, &updated, "execpod").await
}

async fn external_name_to_cluster_ip(ctx: &Ctx) -> CaseResult {
    from_external_name(ctx, "ClusterIP").await
}

async fn external_name_to_node_port(ctx: &Ctx) -> CaseResult {
    from_external_name(ctx, "NodePort").await
}

/// Upstream's checkAffinity: 16 requests in a row from the client pod to `target`; with `hold` all
/// MUST come from one pod (at least AffinityConfirmCount answers), without it more than one pod
/// MUST answer. Polled until it holds, within the proxy's lag.
async fn check_affinity(ctx: &Ctx, client: &str, target: &str, hold: bool) -> CaseResult {
    let script =
        format!("for i in $(seq 0 15); do echo; timeout 5 wget -q -O- http://{target}/; done");
    ctx.wait(
        &format!(
            "affinity {} on {target}",
            if hold { "to hold" } else { "not to hold" }
        ),
        PROXY_LAG,
        || async {
            let out = match sh(ctx, client, &script).await {
                Ok(o) => o,
                Err(e) => return Ok(Err(e)),
            };
            let hosts: Vec<&str> = out
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .collect();
            let distinct: BTreeSet<&str> = hosts.iter().copied().collect();
            let ok = if hold {
                hosts.len() >= AFFINITY_CONFIRM && distinct.len() == 1
            } else {
                distinct.len() > 1
            };
            Ok(if ok {
                Ok(())
            } else {
                Err(format!("answers {hosts:?}"))
            })
        },
    )
    .await
}

/// Upstream's execAffinityTestForNonLBService(WithTransition): a ClusterIP/NodePort Service with
/// sessionAffinity ClientIP over three serve-hostname replicas MUST get a ClusterIP (and node
/// ports), be reachable on name and ClusterIP (and node ports), and keep a client on one pod;
/// switched, with None more than one pod MUST answer, back with ClientIP one again.
async fn affinity(ctx: &Ctx, type_: &str, switch: bool) -> CaseResult {
    let name = match (type_, switch) {
        ("NodePort", false) => "affinity-nodeport",
        ("NodePort", true) => "affinity-nodeport-transition",
        (_, false) => "affinity-clusterip",
        (_, true) => "affinity-clusterip-transition",
    };
    let svc = create_service(ctx, serve_hostname_service(name, type_, Some("ClientIP"))).await?;
    sanity_check(&svc, type_)?;
    serve_hostname_rc(ctx, name, 3).await?;
    client_pod(ctx, "execpod-affinity", None, false).await?;
    check_reachability(ctx, &svc, "execpod-affinity").await?;
    let target = if type_ == "NodePort" {
        let addr = node_addresses(ctx).await?.remove(0);
        host_port(&addr, node_ports(&svc)[0])
    } else {
        host_port(&cluster_ip(&svc), 80)
    };
    check_affinity(ctx, "execpod-affinity", &target, true).await?;
    if !switch {
        return Ok(());
    }
    for (setting, hold) in [("None", false), ("ClientIP", true)] {
        let updated = update_with_retry(&ctx.api::<Service>(), name, false, |s| {
            if let Some(spec) = s.spec.as_mut() {
                spec.session_affinity = Some(setting.into());
            }
        })
        .await?;
        must_eq!(
            updated
                .spec
                .as_ref()
                .and_then(|s| s.session_affinity.as_deref()),
            Some(setting),
            "sessionAffinity after the update"
        );
        check_affinity(ctx, "execpod-affinity", &target, hold).await?;
    }
    Ok(())
}

async fn affinity_cluster_ip(ctx: &Ctx) -> CaseResult {
    affinity(ctx, "ClusterIP", false).await
}

async fn affinity_switch_cluster_ip(ctx: &Ctx) -> CaseResult {
    affinity(ctx, "ClusterIP", true).await
}

async fn affinity_node_port(ctx: &Ctx) -> CaseResult {
    affinity(ctx, "NodePort", false).await
}

async fn affinity_switch_node_port(ctx: &Ctx) -> CaseResult {
    affinity(ctx, "NodePort", true).await
}
