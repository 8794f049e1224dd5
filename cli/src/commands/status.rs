//! `kiln status`: the cluster at a glance — nodes, the control plane's static pods, every store member.

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::ListParams;

use super::cluster::{runtime, ClusterArgs};
use crate::bootstrap::phases::wait::admin_client;

fn ready(conds: Option<&Vec<k8s_openapi::api::core::v1::NodeCondition>>) -> &'static str {
    match conds
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .map(|c| c.status.as_str())
    {
        Some("True") => "Ready",
        Some("False") => "NotReady",
        _ => "Unknown",
    }
}

pub fn run(cluster: ClusterArgs) -> anyhow::Result<i32> {
    let ctx = cluster.context(vec![], 0)?;
    runtime()?.block_on(async {
        let client = admin_client(&ctx).await?;
        let nodes: kube::Api<Node> = kube::Api::all(client.clone());
        let pods: kube::Api<Pod> = kube::Api::namespaced(client, "kube-system");
        println!(
            "{:<10} {:<9} {:<15} {:<16} VERSION",
            "NODE", "STATUS", "ADDRESS", "POD CIDR"
        );
        for n in nodes.list(&ListParams::default()).await?.items {
            let status = n.status.as_ref();
            let addr = status
                .and_then(|s| s.addresses.as_ref())
                .and_then(|a| a.iter().find(|a| a.type_ == "InternalIP"))
                .map(|a| a.address.clone())
                .unwrap_or_default();
            println!(
                "{:<10} {:<9} {:<15} {:<16} {}",
                n.metadata.name.unwrap_or_default(),
                ready(status.and_then(|s| s.conditions.as_ref())),
                addr,
                n.spec.and_then(|s| s.pod_cidr).unwrap_or_default(),
                status
                    .and_then(|s| s.node_info.as_ref())
                    .map(|i| i.kubelet_version.clone())
                    .unwrap_or_default()
            );
        }
        println!();
        println!(
            "{:<34} {:<10} {:<8} RESTARTS",
            "CONTROL PLANE / NODE PODS", "NODE", "READY"
        );
        for p in pods
            .list(&ListParams::default().labels("tier in (control-plane,node)"))
            .await?
            .items
        {
            let st = p.status.as_ref();
            let ok = st
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
            let restarts: i32 = st
                .and_then(|s| s.container_statuses.as_ref())
                .map(|cs| cs.iter().map(|c| c.restart_count).sum())
                .unwrap_or(0);
            println!(
                "{:<34} {:<10} {:<8} {restarts}",
                p.metadata.name.unwrap_or_default(),
                p.spec.and_then(|s| s.node_name).unwrap_or_default(),
                if ok { "yes" } else { "no" }
            );
        }
        println!();
        for h in ctx.cluster.config.controllers() {
            match crate::snapshot::store_status(&ctx, h).await {
                Ok((rev, objects)) => println!(
                    "store {:<10} healthy: revision {rev}, {objects} objects",
                    h.name
                ),
                Err(e) => println!("store {:<10} UNHEALTHY: {e}", h.name),
            }
        }
        Ok::<_, anyhow::Error>(())
    })?;
    Ok(0)
}
