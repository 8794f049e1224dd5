//! sig-node entries on the /etc/hosts the kubelet gives containers: when it is the kubelet's own file
//! (kubelet_etc_hosts.go) and the hostAliases it carries (kubelet.go). kiln's agnhost image names
//! /agnhost as its command, not its entrypoint, so its containers here give `command: [/agnhost]`.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use serde_json::{json, Value};

use super::{case, Case};
use crate::ctx::{from_json, Ctx};
use crate::error::{CaseError, CaseResult};

pub const CASES: &[Case] = &[
    case!(
        "[sig-node] KubeletManagedEtcHosts should test kubelet managed /etc/hosts file [NodeConformance] [Conformance]",
        "e2e-kubelet-etc-hosts",
        kubelet_managed_etc_hosts
    ),
    case!(
        "[sig-node] Kubelet when scheduling an agnhost Pod with hostAliases should write entries to /etc/hosts [NodeConformance] [Conformance]",
        "kubelet-test",
        host_aliases
    ),
];

/// The first line of a kubelet-managed hosts file (a hostNetwork pod's reads "… (host network).").
const MANAGED_HEADER: &str = "# Kubernetes-managed hosts file.";
const ETC_HOSTS: &str = "/etc/hosts";
/// Where the containers mount the node's /etc/hosts, to compare.
const ETC_HOSTS_ORIGINAL: &str = "/etc/hosts-original";
const POD: &str = "test-pod";
const HOST_NETWORK_POD: &str = "test-host-network-pod";

/// Upstream's NewAgnhostContainer without args: agnhost `pause`.
fn agnhost_container(ctx: &Ctx, name: &str, mount_paths: &[&str]) -> Value {
    let mounts: Vec<Value> = mount_paths
        .iter()
        .map(|p| json!({"name": "host-etc-hosts", "mountPath": p}))
        .collect();
    json!({
        "name": name,
        "image": ctx.images().agnhost(),
        "command": ["/agnhost"],
        "args": ["pause"],
        "volumeMounts": mounts,
    })
}

/// A pod of `containers` with the node's /etc/hosts as hostPath volume `host-etc-hosts`
/// (FileOrCreate), created and waited Ready (upstream's CreateSync).
async fn create_sync(
    ctx: &Ctx,
    name: &str,
    host_network: bool,
    containers: Vec<Value>,
) -> CaseResult {
    let pod: Pod = from_json(json!({
        "metadata": {"name": name},
        "spec": {
            "hostNetwork": host_network,
            "containers": containers,
            "volumes": [{
                "name": "host-etc-hosts",
                "hostPath": {"path": ETC_HOSTS, "type": "FileOrCreate"},
            }],
        },
    }))?;
    ctx.create_pod(&pod).await?;
    ctx.wait_ready(name).await?;
    Ok(())
}

/// Upstream's assertManagedStatus: for up to 30 s, the container's /etc/hosts and the node's (at
/// /etc/hosts-original) MUST both have content, and "managed" (starts with the kubelet's header and
/// differs from the node's) MUST be `want_managed`.
async fn assert_managed(ctx: &Ctx, pod: &str, container: &str, want_managed: bool) -> CaseResult {
    let start = Instant::now();
    let mut last = String::new();
    while start.elapsed() < Duration::from_secs(30) {
        let hosts = ctx.exec(pod, container, &["cat", ETC_HOSTS]).await?;
        let original = ctx
            .exec(pod, container, &["cat", ETC_HOSTS_ORIGINAL])
            .await?;
        if !hosts.is_empty() && !original.is_empty() {
            let managed = hosts.starts_with(MANAGED_HEADER) && hosts != original;
            if managed == want_managed {
                return Ok(());
            }
        }
        last = hosts;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(CaseError::Failed(format!(
        "{pod}/{container}: /etc/hosts should {}be kubelet-managed; it contains {last:?}",
        if want_managed { "" } else { "not " }
    )))
}

/// Kubelet, managed etc hosts: in a pod with hostNetwork=false, containers busybox-1 and busybox-2
/// MUST get the kubelet-managed /etc/hosts; busybox-3, which mounts the node's /etc/hosts at
/// /etc/hosts itself, MUST NOT; in a hostNetwork=true pod neither container's /etc/hosts MUST be
/// kubelet-managed.
async fn kubelet_managed_etc_hosts(ctx: &Ctx) -> CaseResult {
    let original = [ETC_HOSTS_ORIGINAL];
    let both = [ETC_HOSTS_ORIGINAL, ETC_HOSTS];
    create_sync(
        ctx,
        POD,
        false,
        vec![
            agnhost_container(ctx, "busybox-1", &original),
            agnhost_container(ctx, "busybox-2", &original),
            agnhost_container(ctx, "busybox-3", &both),
        ],
    )
    .await?;
    create_sync(
        ctx,
        HOST_NETWORK_POD,
        true,
        vec![
            agnhost_container(ctx, "busybox-1", &original),
            agnhost_container(ctx, "busybox-2", &original),
        ],
    )
    .await?;
    for (pod, container, managed) in [
        (POD, "busybox-1", true),
        (POD, "busybox-2", true),
        (POD, "busybox-3", false),
        (HOST_NETWORK_POD, "busybox-1", false),
        (HOST_NETWORK_POD, "busybox-2", false),
    ] {
        assert_managed(ctx, pod, container, managed).await?;
    }
    Ok(())
}

/// Kubelet, hostAliases: a pod with hostAliases 123.45.67.89 → foo, bar whose agnhost container
/// prints /etc/hosts (`etc-hosts`) and ends: its log MUST hold the line `123.45.67.89\tfoo\tbar`.
async fn host_aliases(ctx: &Ctx) -> CaseResult {
    let pod: Pod = from_json(json!({
        "metadata": {"name": "agnhost-host-aliases"},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{
                "name": "agnhost-container",
                "image": ctx.images().agnhost(),
        "command": ["/agnhost"],
                "args": ["etc-hosts"],
            }],
            "hostAliases": [{"ip": "123.45.67.89", "hostnames": ["foo", "bar"]}],
        },
    }))?;
    ctx.expect_output(&pod, "agnhost-container", &["123.45.67.89\tfoo\tbar"])
        .await?;
    Ok(())
}
