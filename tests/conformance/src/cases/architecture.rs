//! sig-architecture entries (test/e2e/architecture/conformance.go): what conformance itself needs
//! of the cluster. Each case restates the entry's MUSTs in its doc comment.

use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::api::ListParams;

use super::{case, Case};
use crate::ctx::Ctx;
use crate::error::CaseResult;

pub const CASES: &[Case] = &[case!(
    "[sig-architecture] Conformance Tests should have at least two untainted nodes [Conformance]",
    "conformance-tests",
    two_untainted_nodes
)];

/// Upstream's WaitForAllNodesSchedulable timeout.
const ALL_SCHEDULABLE: Duration = Duration::from_secs(600);

fn is_ready(n: &Node) -> bool {
    n.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// IsNodeSchedulable: ready, not cordoned, and its network not marked unavailable.
fn is_schedulable(n: &Node) -> bool {
    let cordoned = n
        .spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false);
    let no_network = n
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| {
            c.iter()
                .any(|c| c.type_ == "NetworkUnavailable" && c.status == "True")
        });
    is_ready(n) && !cordoned && !no_network
}

/// Taints upstream's readiness wait lets a node keep (its default `--non-blocking-taints`).
const NON_BLOCKING_TAINTS: &[&str] = &["node-role.kubernetes.io/control-plane"];

/// A NoSchedule or NoExecute taint, other than `allowed`, keeps ordinary pods off (upstream's
/// isNodeUntainted with a toleration-less pod).
fn is_tainted(n: &Node, allowed: &[&str]) -> bool {
    n.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|t| {
            t.iter().any(|t| {
                (t.effect == "NoSchedule" || t.effect == "NoExecute")
                    && !allowed.contains(&t.key.as_str())
            })
        })
}

fn name(n: &Node) -> String {
    n.metadata.name.clone().unwrap_or_default()
}

/// Conformance tests minimum number of nodes: every node MUST become schedulable and untainted but
/// for a control plane's taint (upstream's WaitForAllNodesSchedulable), and at least two nodes
/// MUST then be ready, schedulable and untainted (GetReadySchedulableNodes).
async fn two_untainted_nodes(ctx: &Ctx) -> CaseResult {
    let api = ctx.all::<Node>();
    ctx.wait("every node schedulable", ALL_SCHEDULABLE, || async {
        let nodes = api.list(&ListParams::default()).await?.items;
        let not: Vec<String> = nodes
            .iter()
            .filter(|n| !is_schedulable(n) || is_tainted(n, NON_BLOCKING_TAINTS))
            .map(name)
            .collect();
        Ok(if not.is_empty() {
            Ok(())
        } else {
            Err(format!("not schedulable or tainted: {not:?}"))
        })
    })
    .await?;
    let nodes = api.list(&ListParams::default()).await?.items;
    let usable: Vec<String> = nodes
        .iter()
        .filter(|n| is_schedulable(n) && !is_tainted(n, &[]))
        .map(name)
        .collect();
    crate::must!(
        usable.len() >= 2,
        "Conformance requires at least two nodes: ready, schedulable, untainted nodes are {usable:?} of {:?}",
        nodes.iter().map(name).collect::<Vec<_>>()
    );
    Ok(())
}
