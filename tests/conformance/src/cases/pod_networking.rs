//! sig-network pod-networking entries, written from upstream's test/e2e/common/network/networking.go
//! (with the e2enetwork NetworkingTestConfig it drives) and test/e2e/network/hostport.go: a
//! netserver pod per schedulable node (agnhost netexec, HTTP 8083, UDP 8081), a test-container pod
//! whose netexec /dial reaches them pod to pod, and a host-network pod reaching them from the node.
//! Upstream's host pod runs curl and nc; here a host-network agnhost pod runs busybox wget for HTTP
//! and its own netexec /dial for UDP (the lab's busybox nc has no -u): same requests, same
//! expectations.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use serde_json::json;

use super::services_network::{client_pod, dial_responses, host_port, http_get, udp_ask};
use super::{case, Case};
use crate::ctx::{from_json, Ctx};
use crate::error::{CaseError, CaseResult};
use crate::must;

pub const CASES: &[Case] = &[
    case!(
        "[sig-network] Networking Granular Checks: Pods should function for intra-pod communication: http [NodeConformance] [Conformance]",
        "pod-network-test",
        intra_pod_http
    ),
    case!(
        "[sig-network] Networking Granular Checks: Pods should function for intra-pod communication: udp [NodeConformance] [Conformance]",
        "pod-network-test",
        intra_pod_udp
    ),
    case!(
        "[sig-network] Networking Granular Checks: Pods should function for node-pod communication: http [LinuxOnly] [NodeConformance] [Conformance]",
        "pod-network-test",
        node_pod_http
    ),
    case!(
        "[sig-network] Networking Granular Checks: Pods should function for node-pod communication: udp [LinuxOnly] [NodeConformance] [Conformance]",
        "pod-network-test",
        node_pod_udp
    ),
    case!(
        "[sig-network] HostPort validates that there is no conflict between pods with same hostPort but different hostIP and protocol [LinuxOnly] [Conformance]",
        "hostport",
        host_port_conflicts
    ),
];

/// e2enetwork's EndpointHTTPPort, EndpointUDPPort and testContainerHTTPPort.
const ENDPOINT_HTTP: i32 = 8083;
const ENDPOINT_UDP: i32 = 8081;
const TEST_CONTAINER_HTTP: i32 = 9080;
/// How long each pod-to-pod check may retry (upstream: maxTries dials a second apart, then more
/// polling; generous here on a loaded lab).
const DIAL_WAIT: Duration = Duration::from_secs(60);

/// Ready, schedulable, untainted nodes (upstream's GetBoundedReadySchedulableNodes) with their
/// first InternalIP.
async fn schedulable_nodes(ctx: &Ctx) -> CaseResult<Vec<(String, String)>> {
    let mut out = Vec::new();
    for n in ctx.ready_schedulable_nodes().await? {
        let ip = n
            .status
            .as_ref()
            .and_then(|s| s.addresses.as_ref())
            .and_then(|a| a.iter().find(|a| a.type_ == "InternalIP"))
            .map(|a| a.address.clone());
        if let Some(ip) = ip {
            out.push((n.name_any(), ip));
        }
    }
    must!(!out.is_empty(), "no ready schedulable node");
    Ok(out)
}

/// An agnhost netexec pod on `node` with the given flags and container ports; Ready when this
/// returns, with its pod IP.
async fn netexec_on(ctx: &Ctx, name: &str, node: &str, http: i32, udp: i32) -> CaseResult<String> {
    ctx.create_pod(&from_json(json!({
        "metadata": {"name": name, "labels": {"selector-pod-network-test": "true"}},
        "spec": {"nodeName": node, "terminationGracePeriodSeconds": 0, "containers": [{
            "name": "webserver", "image": ctx.images().agnhost(), "command": ["/agnhost"],
            "args": ["netexec", format!("--http-port={http}"), format!("--udp-port={udp}")],
            "ports": [{"name": "http", "containerPort": http},
                {"name": "udp", "containerPort": udp, "protocol": "UDP"}],
        }]},
    }))?)
    .await?;
    let pod: Pod = ctx.wait_ready(name).await?;
    pod.status
        .and_then(|s| s.pod_ip)
        .ok_or_else(|| CaseError::Failed(format!("pod {name} has no IP")))
}

/// Upstream's NewCoreNetworkingTestConfig: netserver-N on each schedulable node, the
/// test-container-pod on the first, and the host-network client there; returns the netservers'
/// (name, IP) and the test container's IP.
async fn setup(ctx: &Ctx) -> CaseResult<(Vec<(String, String)>, String)> {
    let nodes = schedulable_nodes(ctx).await?;
    let mut servers = Vec::new();
    for (i, (node, _)) in nodes.iter().enumerate() {
        let name = format!("netserver-{i}");
        let ip = netexec_on(ctx, &name, node, ENDPOINT_HTTP, ENDPOINT_UDP).await?;
        servers.push((name, ip));
    }
    let test_ip = netexec_on(
        ctx,
        "test-container-pod",
        &nodes[0].0,
        TEST_CONTAINER_HTTP,
        ENDPOINT_UDP,
    )
    .await?;
    client_pod(ctx, "host-test-container-pod", Some(&nodes[0].0), true).await?;
    Ok((servers, test_ip))
}

/// Upstream's DialFromTestContainer: from the host pod, ask the test container's netexec to /dial
/// each netserver (`request=hostname`, one try); each MUST answer with its own name.
async fn intra_pod(ctx: &Ctx, protocol: &str) -> CaseResult {
    let (servers, test_ip) = setup(ctx).await?;
    let port = if protocol == "udp" {
        ENDPOINT_UDP
    } else {
        ENDPOINT_HTTP
    };
    for (name, ip) in &servers {
        let path =
            format!("/dial?request=hostname&protocol={protocol}&host={ip}&port={port}&tries=1");
        ctx.wait(
            &format!("{protocol} dial from test-container-pod to {name}"),
            DIAL_WAIT,
            || async {
                let body = match http_get(
                    ctx,
                    "host-test-container-pod",
                    &host_port(&test_ip, TEST_CONTAINER_HTTP),
                    &path,
                )
                .await
                {
                    Ok(b) => b,
                    Err(e) => return Ok(Err(e)),
                };
                Ok(if dial_responses(&body).contains(name) {
                    Ok(())
                } else {
                    Err(format!("dial answered {body:?}"))
                })
            },
        )
        .await?;
    }
    Ok(())
}

/// Upstream's DialFromNode: from the host-network pod, each netserver MUST answer `hostName` with
/// its own name (HTTP GET /hostName, or `hostName` over UDP).
async fn node_pod(ctx: &Ctx, udp: bool) -> CaseResult {
    let (servers, _) = setup(ctx).await?;
    for (name, ip) in &servers {
        ctx.wait(
            &format!("{name} to answer from the node"),
            DIAL_WAIT,
            || async {
                let got = if udp {
                    udp_ask(ctx, "host-test-container-pod", ip, ENDPOINT_UDP, "hostName").await
                } else {
                    http_get(
                        ctx,
                        "host-test-container-pod",
                        &host_port(ip, ENDPOINT_HTTP),
                        "/hostName",
                    )
                    .await
                };
                Ok(match got {
                    Ok(h) if h.trim() == name => Ok(()),
                    Ok(h) => Err(format!("answered {:?}", h.trim())),
                    Err(e) => Err(e),
                })
            },
        )
        .await?;
    }
    Ok(())
}

async fn intra_pod_http(ctx: &Ctx) -> CaseResult {
    intra_pod(ctx, "http").await
}

async fn intra_pod_udp(ctx: &Ctx) -> CaseResult {
    intra_pod(ctx, "udp").await
}

async fn node_pod_http(ctx: &Ctx) -> CaseResult {
    node_pod(ctx, false).await
}

async fn node_pod_udp(ctx: &Ctx) -> CaseResult {
    node_pod(ctx, true).await
}

/// The hostPort every pod here asks for (upstream's 54323).
const HOST_PORT: i32 = 54323;

/// Upstream's createHostPortPodOnNode: agnhost netexec (HTTP and UDP on 8080) on `node`, container
/// port 8080 published at HOST_PORT on `host_ip` with `protocol`.
fn host_port_pod(
    ctx: &Ctx,
    name: &str,
    node: &str,
    host_ip: &str,
    protocol: &str,
) -> CaseResult<Pod> {
    from_json(json!({
        "metadata": {"name": name},
        "spec": {"nodeName": node, "terminationGracePeriodSeconds": 0, "containers": [{
            "name": "agnhost", "image": ctx.images().agnhost(), "command": ["/agnhost"],
            "args": ["netexec", "--http-port=8080", "--udp-port=8080"],
            "ports": [{"containerPort": 8080, "protocol": protocol, "hostPort": HOST_PORT,
                "hostIP": host_ip}],
        }]},
    }))
}

/// Scheduling, HostPort matching and HostIP and Protocol not-matching: pods with the same hostPort
/// MUST all run on one node when their hostIP (127.0.0.1 vs the node's IP) or protocol (TCP vs
/// UDP) differs, and each MUST be reached at its own hostIP and protocol from the node.
async fn host_port_conflicts(ctx: &Ctx) -> CaseResult {
    let (node, node_ip) = schedulable_nodes(ctx).await?.remove(0);
    let pods = [
        ("pod1", "127.0.0.1", "TCP"),
        ("pod2", node_ip.as_str(), "TCP"),
        ("pod3", node_ip.as_str(), "UDP"),
    ];
    for (name, ip, proto) in pods {
        ctx.create_pod(&host_port_pod(ctx, name, &node, ip, proto)?)
            .await?;
        ctx.wait_running(name).await?;
    }
    client_pod(ctx, "e2e-host-exec", Some(&node), true).await?;
    for (name, ip, proto) in pods {
        ctx.wait(
            &format!("{name} to answer at {ip}:{HOST_PORT}/{proto}"),
            DIAL_WAIT,
            || async {
                let got = if proto == "UDP" {
                    udp_ask(ctx, "e2e-host-exec", ip, HOST_PORT, "hostname").await
                } else {
                    http_get(ctx, "e2e-host-exec", &host_port(ip, HOST_PORT), "/hostname").await
                };
                Ok(match got {
                    Ok(h) if h.trim() == name => Ok(()),
                    Ok(h) => Err(format!("answered {:?}", h.trim())),
                    Err(e) => Err(e),
                })
            },
        )
        .await?;
    }
    Ok(())
}
