//! Which endpoints a Service port's traffic may go to from this node: upstream kube-proxy's
//! `CategorizeEndpoints` (pkg/proxy/topology.go, 1.33/1.34), on plain values.
//!
//! - Cluster traffic (`internalTrafficPolicy: Cluster`, and NodePort traffic) goes to the ready
//!   endpoints, narrowed by the hints the EndpointSlice controller writes for
//!   `spec.trafficDistribution`: when every ready endpoint has node hints and one names this node, only
//!   the endpoints hinted for this node (PreferSameNode); otherwise the same with zone hints and this
//!   node's zone (PreferSameZone / PreferClose); otherwise all of them. Only ready endpoints count, so a
//!   node whose own endpoint is not ready (or gone) falls back to the others at once.
//! - Local traffic (`internalTrafficPolicy: Local`) goes to this node's ready endpoints only.
//! - Each falls back to endpoints that are serving while terminating when it has no ready one (upstream's
//!   ProxyTerminatingEndpoints, GA in 1.28), so a rollout does not drop connections.

use crate::model::{Backend, Endpoint, NodeTopology};

impl NodeTopology {
    fn is_local(&self, e: &Endpoint) -> bool {
        !self.name.is_empty() && e.node_name.as_deref() == Some(self.name.as_str())
    }
}

/// The hints cluster traffic follows (upstream's topologyMode).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopologyMode {
    /// No usable hints: every ready endpoint.
    All,
    /// The endpoints whose `forNodes` names this node.
    SameNode,
    /// The endpoints whose `forZones` names this node's zone.
    SameZone,
}

/// A Service port's endpoints as this node uses them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Categorized {
    /// For Cluster-policy traffic, topology applied; empty when the port never uses that policy.
    pub cluster: Vec<Backend>,
    /// For Local-policy traffic; empty when the port never uses that policy.
    pub local: Vec<Backend>,
    /// Whether any node has a usable endpoint (true even when this node may use none of them): a port
    /// without one rejects, a Local one with only remote endpoints drops.
    pub has_any: bool,
}

/// Upstream's topologyModeFromHints: node hints first, then zone hints, each only when every ready
/// endpoint carries one and some endpoint is hinted for this node (zone).
pub fn topology_mode(endpoints: &[(&Endpoint, u16)], node: &NodeTopology) -> TopologyMode {
    let mut has_ready = false;
    let (mut all_node_hints, mut for_node) = (true, false);
    let (mut all_zone_hints, mut for_zone) = (true, false);
    for (e, _) in endpoints.iter().filter(|(e, _)| e.ready) {
        has_ready = true;
        if e.for_nodes.is_empty() {
            all_node_hints = false;
        } else if !node.name.is_empty() && e.for_nodes.contains(&node.name) {
            for_node = true;
        }
        if e.for_zones.is_empty() {
            all_zone_hints = false;
        } else if node.zone.as_ref().is_some_and(|z| e.for_zones.contains(z)) {
            for_zone = true;
        }
    }
    if !has_ready {
        return TopologyMode::All;
    }
    if all_node_hints && for_node {
        return TopologyMode::SameNode;
    }
    if all_zone_hints && for_zone {
        return TopologyMode::SameZone;
    }
    TopologyMode::All
}

fn available(e: &Endpoint, mode: TopologyMode, node: &NodeTopology) -> bool {
    match mode {
        TopologyMode::All => true,
        TopologyMode::SameNode => e.for_nodes.contains(&node.name),
        TopologyMode::SameZone => node.zone.as_ref().is_some_and(|z| e.for_zones.contains(z)),
    }
}

fn pick(endpoints: &[(&Endpoint, u16)], keep: impl Fn(&Endpoint) -> bool) -> Vec<Backend> {
    endpoints
        .iter()
        .filter(|(e, _)| keep(e))
        .map(|(e, port)| (e.addr, *port))
        .collect()
}

/// Splits one Service port's endpoints (as [`crate::model::resolve_endpoints`] gives them) into what
/// Cluster and Local traffic use on this node. `uses_cluster` / `uses_local`: whether the port carries
/// traffic under that policy at all (upstream's UsesClusterEndpoints / UsesLocalEndpoints).
pub fn categorize(
    endpoints: &[(&Endpoint, u16)],
    uses_cluster: bool,
    uses_local: bool,
    node: &NodeTopology,
) -> Categorized {
    let mut out = Categorized::default();
    if uses_cluster {
        let mode = topology_mode(endpoints, node);
        out.cluster = pick(endpoints, |e| e.ready && available(e, mode, node));
        // Topology was already ignored unless some ready endpoint matched it, so an empty list here
        // means no ready endpoint anywhere: no topology for this best-effort fallback either.
        if out.cluster.is_empty() {
            out.cluster = pick(endpoints, |e| e.serving && e.terminating);
        }
        out.has_any = !out.cluster.is_empty();
    }
    if uses_local {
        let usable = |e: &Endpoint| e.ready || (e.serving && e.terminating);
        out.has_any |= endpoints.iter().any(|(e, _)| usable(e));
        out.local = pick(endpoints, |e| node.is_local(e) && e.ready);
        if out.local.is_empty() {
            out.local = pick(endpoints, |e| {
                node.is_local(e) && e.serving && e.terminating
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn ep(last: u8, node: &str, ready: bool, for_nodes: &[&str], for_zones: &[&str]) -> Endpoint {
        Endpoint {
            addr: Ipv4Addr::new(10, 244, 0, last),
            ready,
            serving: ready,
            terminating: false,
            node_name: (!node.is_empty()).then(|| node.to_string()),
            for_nodes: for_nodes.iter().map(|s| s.to_string()).collect(),
            for_zones: for_zones.iter().map(|s| s.to_string()).collect(),
        }
    }

    /// Endpoints hinted as the EndpointSlice controller does for PreferSameNode: a node hint (and a
    /// zone hint when the node has a zone) on ready endpoints only.
    fn same_node(last: u8, node: &str, ready: bool) -> Endpoint {
        if ready {
            ep(last, node, true, &[node], &[])
        } else {
            ep(last, node, false, &[], &[])
        }
    }

    fn on(node: &str, zone: Option<&str>) -> NodeTopology {
        NodeTopology {
            name: node.into(),
            zone: zone.map(String::from),
        }
    }

    fn cluster(eps: &[Endpoint], node: &NodeTopology) -> Vec<u8> {
        let with_ports: Vec<(&Endpoint, u16)> = eps.iter().map(|e| (e, 53)).collect();
        categorize(&with_ports, true, false, node)
            .cluster
            .iter()
            .map(|(a, _)| a.octets()[3])
            .collect()
    }

    #[test]
    fn prefer_same_node_uses_the_local_endpoint() {
        let eps = [
            same_node(1, "n1", true),
            same_node(2, "n2", true),
            same_node(3, "n3", true),
        ];
        assert_eq!(cluster(&eps, &on("n2", None)), [2]);
        assert_eq!(cluster(&eps, &on("n1", None)), [1]);
    }

    #[test]
    fn falls_back_to_all_when_the_local_endpoint_is_not_ready_or_absent() {
        let not_ready = [
            same_node(1, "n1", true),
            same_node(2, "n2", false),
            same_node(3, "n3", true),
        ];
        assert_eq!(cluster(&not_ready, &on("n2", None)), [1, 3]);
        let absent = [same_node(1, "n1", true), same_node(3, "n3", true)];
        assert_eq!(cluster(&absent, &on("n2", None)), [1, 3]);
    }

    #[test]
    fn a_ready_endpoint_without_hints_disables_topology() {
        let eps = [same_node(1, "n1", true), ep(2, "n2", true, &[], &[])];
        assert_eq!(cluster(&eps, &on("n1", None)), [1, 2]);
    }

    #[test]
    fn no_hints_means_every_ready_endpoint() {
        let eps = [
            ep(1, "n1", true, &[], &[]),
            ep(2, "n2", true, &[], &[]),
            ep(3, "n2", false, &[], &[]),
        ];
        assert_eq!(cluster(&eps, &on("n2", Some("z1"))), [1, 2]);
    }

    #[test]
    fn zone_hints_apply_when_node_hints_do_not_match() {
        // PreferSameNode also writes zone hints; a node without an endpoint of its own then stays in
        // its zone
        let eps = [
            ep(1, "n1", true, &["n1"], &["z1"]),
            ep(2, "n2", true, &["n2"], &["z2"]),
            ep(3, "n3", true, &["n3"], &["z1"]),
        ];
        assert_eq!(cluster(&eps, &on("n4", Some("z1"))), [1, 3]);
        assert_eq!(cluster(&eps, &on("n2", Some("z2"))), [2], "node first");
        assert_eq!(
            cluster(&eps, &on("n4", None)),
            [1, 2, 3],
            "no zone label: all"
        );
        assert_eq!(cluster(&eps, &on("n4", Some("z9"))), [1, 2, 3]);
        let zones_only = [
            ep(1, "n1", true, &[], &["z1"]),
            ep(2, "n2", true, &[], &["z2"]),
        ];
        assert_eq!(cluster(&zones_only, &on("n1", Some("z2"))), [2]);
    }

    #[test]
    fn terminating_endpoints_serve_only_when_nothing_is_ready() {
        let mut leaving = same_node(1, "n1", false);
        leaving.serving = true;
        leaving.terminating = true;
        let mut gone = same_node(2, "n2", false);
        gone.terminating = true;
        assert_eq!(cluster(&[leaving.clone(), gone], &on("n1", None)), [1]);
        assert_eq!(
            cluster(&[leaving, same_node(3, "n3", true)], &on("n1", None)),
            [3]
        );
        let nothing: Vec<(&Endpoint, u16)> = Vec::new();
        assert!(!categorize(&nothing, true, true, &on("n1", None)).has_any);
    }

    #[test]
    fn local_policy_uses_only_this_nodes_endpoints() {
        let eps = [
            ep(1, "n1", true, &[], &[]),
            ep(2, "n2", true, &[], &[]),
            ep(3, "n2", false, &[], &[]),
        ];
        let with_ports: Vec<(&Endpoint, u16)> = eps.iter().map(|e| (e, 80)).collect();
        let c = categorize(&with_ports, false, true, &on("n2", None));
        assert_eq!(c.local, [(Ipv4Addr::new(10, 244, 0, 2), 80)]);
        assert!(
            c.cluster.is_empty(),
            "the port never uses Cluster endpoints"
        );
        assert!(c.has_any);
        let elsewhere = categorize(&with_ports, false, true, &on("n3", None));
        assert!(
            elsewhere.local.is_empty() && elsewhere.has_any,
            "no local endpoint: traffic is dropped, not rejected"
        );
        let unnamed = categorize(&with_ports, false, true, &on("", None));
        assert!(
            unnamed.local.is_empty(),
            "without a node name nothing is local"
        );
    }
}
