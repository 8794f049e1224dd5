//! Builds the `kiln` nftables table from a [`ProxyState`] ([`build`]: a [`Table`] value) and renders it as
//! one `nft -f` script ([`render`]), or as an update of the table applied before ([`update_script`]).
//!
//! The whole script declares the table, deletes it and declares it again with every map, set and chain, so
//! nft applies it as ONE transaction: the old rules are replaced atomically, and a first run (no table yet)
//! works too. Output is sorted, so an unchanged state builds an equal table and the proxy can skip the
//! reload by comparing values.
//!
//! Layout (kube-proxy's nftables mode, with endpoints in anonymous maps instead of one chain each):
//! - `prerouting` / `output` (nat) jump to `services`, which looks the packet up in the `service-ips` map
//!   (ClusterIP . proto . port) and, for local destinations, in `service-nodeports` (proto . port).
//!   Maps keep the per-packet cost flat with thousands of Services.
//! - `svc-…` (one chain per service port) marks ClusterIP traffic from outside the pod CIDR for masquerade
//!   (the return path with host-gw would be asymmetric) and DNATs with
//!   `numgen random mod N map { i : addr . port }`; `np-…` always marks (NodePort) and goes to `svc-…`.
//!   An endpoint change rewrites the rules of one chain and adds no chain and no jump: nf_tables then
//!   validates a jump graph of one chain per service port instead of one per endpoint, and nft's cache
//!   of the table stays small (one change: p50 80 → 34 ms at 1 000 Services × 10 endpoints, see
//!   bench/README.md).
//! - Services with ClientIP affinity keep one `ep-…` chain per endpoint: their affinity sets (the clients
//!   that last reached that endpoint) are deleted with the endpoint, so a client never sticks to a gone one.
//! - `postrouting` marks hairpin traffic (a pod reaching itself through a service: after DNAT, source ==
//!   destination, found in the `hairpin` set of `addr . addr` over all endpoints), then masquerades packets
//!   carrying mark 0x4000 and clears the bit.
//! - Services without ready endpoints are in `no-endpoint-*` maps checked from filter hooks, and are
//!   rejected (TCP reset / ICMP port unreachable), so clients see "connection refused" at once.
//! - Which endpoints a port DNATs to is [`crate::topology`]'s choice (topology hints,
//!   `internalTrafficPolicy: Local`). A Local port with endpoints on other nodes only is dropped
//!   (`no-endpoint-services` → `drop`, as upstream: the Service exists, this node may not reach it); its
//!   NodePort, which follows the Cluster policy, then DNATs in `np-…` itself.

use std::collections::{BTreeSet, HashMap};
use std::net::Ipv4Addr;
use std::sync::Arc;

use crate::model::{
    resolve_endpoints, Backend, EndpointGroup, NodeConfig, NodeTopology, Protocol, ProxyState,
    ServiceInfo, ServicePort,
};
use crate::topology::categorize;

mod table;
pub use table::{update_script, Flat, Fragment, Table};
use table::{NO_ENDPOINT_NODEPORTS, NO_ENDPOINT_SERVICES, SERVICE_IPS, SERVICE_NODEPORTS};

/// Name of the table kiln owns (family ip).
pub const TABLE: &str = "kiln";
/// Packet mark bit that asks `postrouting` to masquerade (kube-proxy's value).
pub const MASQ_MARK: u32 = 0x4000;
/// The statement that sets [`MASQ_MARK`] (inline rather than a `jump`: a jump would make every rewritten
/// service chain an edge more of the graph the kernel validates).
const MARK_MASQ: &str = "meta mark set meta mark | 0x4000";

/// A rendered table with what went into it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendered {
    pub script: String,
    /// Service ports with at least one endpoint.
    pub service_ports: usize,
    /// Endpoints (one per service port and backend).
    pub endpoints: usize,
    /// Service ports that reject (no ready endpoints).
    pub rejecting: usize,
    /// Service ports left out, with the reason (bad names, duplicate ClusterIP/NodePort keys).
    pub skipped: Vec<String>,
}

/// The table as data with what went into it (see [`Rendered`] for the fields).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Built {
    pub table: Table,
    pub service_ports: usize,
    pub endpoints: usize,
    pub rejecting: usize,
    pub skipped: Vec<String>,
}

/// The script that removes the table (and succeeds when it is already gone).
pub fn cleanup_script() -> String {
    format!("table ip {TABLE} {{}}\ndelete table ip {TABLE}\n")
}

/// Kubernetes names are DNS labels; anything else could break out of an nft identifier, so it is skipped.
fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
}

/// The stable part of every chain name of one service port: `<ns>/<name>/<proto>/<port>`.
fn port_id(svc: &ServiceInfo, p: &ServicePort) -> String {
    format!(
        "{}/{}/{}/{}",
        svc.namespace,
        svc.name,
        p.protocol.nft(),
        p.port
    )
}

/// The whole table as one `nft -f` script (a full, atomic replace).
pub fn render(state: &ProxyState, node: &NodeConfig) -> Rendered {
    let b = build(state, node);
    Rendered {
        script: b.table.script(),
        service_ports: b.service_ports,
        endpoints: b.endpoints,
        rejecting: b.rejecting,
        skipped: b.skipped,
    }
}

/// The table as data, for comparing and diffing syncs (the proxy's path; [`render`] prints it whole).
pub fn build(state: &ProxyState, node: &NodeConfig) -> Built {
    build_reusing(state, node, None)
}

/// [`build`], taking the fragments of Services whose inputs did not change from `prev` (the table the
/// previous sync built) instead of rendering them again. The result is the same either way.
pub fn build_reusing(state: &ProxyState, node: &NodeConfig, prev: Option<&Table>) -> Built {
    let prev: HashMap<(&str, &str), &Arc<Fragment>> = prev
        .map(|t| {
            t.fragments
                .iter()
                .map(|f| ((f.service.namespace.as_str(), f.service.name.as_str()), f))
                .collect()
        })
        .unwrap_or_default();
    let mut services: Vec<&ServiceInfo> = state.services.iter().collect();
    services.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));

    let mut out = Built {
        table: Table::default(),
        service_ports: 0,
        endpoints: 0,
        rejecting: 0,
        skipped: Vec::new(),
    };
    let mut cluster_keys: BTreeSet<(Ipv4Addr, Protocol, u16)> = BTreeSet::new();
    let mut node_keys: BTreeSet<(Protocol, u16)> = BTreeSet::new();
    for svc in services {
        if !valid_name(&svc.namespace) || !valid_name(&svc.name) {
            out.skipped
                .push(format!("{}/{}: invalid name", svc.namespace, svc.name));
            continue;
        }
        let groups = state
            .endpoints
            .get(&(svc.namespace.clone(), svc.name.clone()))
            .map(Vec::as_slice)
            .unwrap_or_default();
        let mut ports: Vec<&ServicePort> = svc.ports.iter().collect();
        ports.sort_by_key(|p| (p.protocol, p.port));
        let mut served = Vec::with_capacity(ports.len());
        for port in ports {
            if !cluster_keys.insert((svc.cluster_ip, port.protocol, port.port)) {
                out.skipped.push(format!(
                    "{}: ClusterIP {}:{} already served",
                    port_id(svc, port),
                    svc.cluster_ip,
                    port.port
                ));
                continue;
            }
            let mut port = port.clone();
            if let Some(np) = port.node_port {
                if !node_keys.insert((port.protocol, np)) {
                    // keep the ClusterIP working without the clashing NodePort
                    out.skipped.push(format!(
                        "{}: NodePort {np} already served",
                        port_id(svc, &port)
                    ));
                    port.node_port = None;
                }
            }
            served.push(port);
        }
        let fresh = |served: Vec<ServicePort>| {
            let service = ServiceInfo {
                ports: served,
                ..svc.clone()
            };
            Arc::new(fragment(service, groups.to_vec(), node, &state.topology))
        };
        let frag = match prev.get(&(svc.namespace.as_str(), svc.name.as_str())) {
            Some(f)
                if f.service.ports == served
                    && f.service.cluster_ip == svc.cluster_ip
                    && f.service.affinity_timeout == svc.affinity_timeout
                    && f.service.internal_local == svc.internal_local
                    && f.groups == groups
                    && f.cidr == node.cluster_cidr
                    && f.topology == state.topology =>
            {
                Arc::clone(f)
            }
            _ => fresh(served),
        };
        out.service_ports += frag.service_ports;
        out.endpoints += frag.endpoints;
        out.rejecting += frag.rejecting;
        out.table.fragments.push(frag);
    }
    out
}

/// Renders one Service (its ports already cleared of clashes) with its endpoint groups.
fn fragment(
    service: ServiceInfo,
    groups: Vec<EndpointGroup>,
    node: &NodeConfig,
    topology: &NodeTopology,
) -> Fragment {
    let cidr = node.cluster_cidr;
    let mut f = Fragment {
        service,
        groups,
        cidr,
        topology: topology.clone(),
        elements: Vec::new(),
        sets: Vec::new(),
        chains: Vec::new(),
        hairpin: Vec::new(),
        service_ports: 0,
        endpoints: 0,
        rejecting: 0,
    };
    let svc = f.service.clone();
    for port in &svc.ports {
        let id = port_id(&svc, port);
        let proto = port.protocol.nft();
        let cluster_key = format!("{} . {proto} . {}", svc.cluster_ip, port.port);
        // NodePort traffic follows the Cluster policy (externalTrafficPolicy Local is not modelled)
        let uses_cluster = !svc.internal_local || port.node_port.is_some();
        let chosen = categorize(
            &resolve_endpoints(port, &f.groups),
            uses_cluster,
            svc.internal_local,
            topology,
        );
        if !chosen.has_any {
            f.rejecting += 1;
            f.elements.push((
                NO_ENDPOINT_SERVICES,
                cluster_key,
                "goto reject-service".into(),
            ));
            if let Some(np) = port.node_port {
                f.elements.push((
                    NO_ENDPOINT_NODEPORTS,
                    format!("{proto} . {np}"),
                    "goto reject-service".into(),
                ));
            }
            continue;
        }
        let internal = if svc.internal_local {
            &chosen.local
        } else {
            &chosen.cluster
        };
        let mut reachable: Vec<Backend> = internal.clone();
        if port.node_port.is_some() {
            reachable.extend(chosen.cluster.iter().copied());
        }
        reachable.sort();
        reachable.dedup();
        f.service_ports += 1;
        f.endpoints += reachable.len();
        f.hairpin.extend(reachable.iter().map(|(ip, _)| *ip));
        if internal.is_empty() {
            f.elements
                .push((NO_ENDPOINT_SERVICES, cluster_key, "drop".into()));
        } else {
            f.elements
                .push((SERVICE_IPS, cluster_key, format!("goto svc-{id}")));
        }
        let mut endpoint_chains = Vec::new();
        if let Some(np) = port.node_port {
            f.elements.push((
                SERVICE_NODEPORTS,
                format!("{proto} . {np}"),
                format!("goto np-{id}"),
            ));
            let mut rules = vec![MARK_MASQ.to_string()];
            if internal == &chosen.cluster {
                rules.push(format!("goto svc-{id}"));
            } else {
                rules.extend(dnat(
                    &id,
                    proto,
                    &chosen.cluster,
                    svc.affinity_timeout,
                    &mut endpoint_chains,
                ));
            }
            f.chains.push((format!("np-{id}"), rules));
        }
        if !internal.is_empty() {
            let mut rules = vec![format!("ip saddr != {cidr} {MARK_MASQ}")];
            rules.extend(dnat(
                &id,
                proto,
                internal,
                svc.affinity_timeout,
                &mut endpoint_chains,
            ));
            f.chains.push((format!("svc-{id}"), rules));
        }
        if let Some(timeout) = svc.affinity_timeout {
            let mut seen = BTreeSet::new();
            for (ep, rules) in endpoint_chains {
                if seen.insert(ep.clone()) {
                    f.sets.push((format!("affinity-{ep}"), timeout));
                    f.chains.push((format!("ep-{ep}"), rules));
                }
            }
        }
    }
    f.hairpin.sort();
    f.hairpin.dedup();
    f
}

/// The rules that DNAT a service port's packet to one of `backends` at random. With ClientIP affinity
/// they jump to one chain per endpoint instead (pushed to `endpoint_chains` as (id, rules)), whose set
/// of recent clients pins a client to its endpoint (see the module docs).
fn dnat(
    id: &str,
    proto: &str,
    backends: &[Backend],
    affinity: Option<u32>,
    endpoint_chains: &mut Vec<(String, Vec<String>)>,
) -> Vec<String> {
    if affinity.is_none() {
        let map: Vec<String> = backends
            .iter()
            .enumerate()
            .map(|(i, (ip, tp))| format!("{i} : {ip} . {tp}"))
            .collect();
        return vec![format!(
            "meta l4proto {proto} dnat to numgen random mod {} map {{ {} }}",
            backends.len(),
            map.join(", ")
        )];
    }
    let ep_ids: Vec<String> = backends
        .iter()
        .map(|(ip, tp)| format!("{id}__{ip}/{tp}"))
        .collect();
    let mut rules: Vec<String> = ep_ids
        .iter()
        .map(|ep| format!("ip saddr @affinity-{ep} goto ep-{ep}"))
        .collect();
    let vmap: Vec<String> = ep_ids
        .iter()
        .enumerate()
        .map(|(i, ep)| format!("{i} : goto ep-{ep}"))
        .collect();
    rules.push(format!(
        "numgen random mod {} vmap {{ {} }}",
        ep_ids.len(),
        vmap.join(", ")
    ));
    for ((ip, tp), ep) in backends.iter().zip(ep_ids) {
        endpoint_chains.push((
            ep.clone(),
            vec![
                format!("update @affinity-{ep} {{ ip saddr }}"),
                format!("meta l4proto {proto} dnat to {ip}:{tp}"),
            ],
        ));
    }
    rules
}

/// Hooks and helper chains that do not depend on the Services (never part of an incremental update). nft 1.0.6 rejects `priority dstnat` for a
/// nat output chain, hence -100. The filter hooks run at -110, before anything else could accept.
const BASE_CHAINS: &str = "  chain prerouting {
    type nat hook prerouting priority dstnat; policy accept;
    jump services
  }
  chain output {
    type nat hook output priority -100; policy accept;
    jump services
  }
  chain postrouting {
    type nat hook postrouting priority srcnat; policy accept;
    ct status dnat ip saddr . ip daddr @hairpin meta mark set meta mark | 0x4000
    meta mark & 0x4000 == 0x4000 meta mark set meta mark & 0xffffbfff masquerade fully-random
  }
  chain filter-input {
    type filter hook input priority -110; policy accept;
    ct state new jump endpoints-check
    ct state new fib daddr type local jump nodeport-endpoints-check
  }
  chain filter-forward {
    type filter hook forward priority -110; policy accept;
    ct state new jump endpoints-check
  }
  chain filter-output {
    type filter hook output priority -110; policy accept;
    ct state new jump endpoints-check
    ct state new fib daddr type local jump nodeport-endpoints-check
  }
  chain endpoints-check {
    ip daddr . meta l4proto . th dport vmap @no-endpoint-services
  }
  chain nodeport-endpoints-check {
    meta l4proto . th dport vmap @no-endpoint-nodeports
  }
  chain reject-service {
    meta l4proto tcp reject with tcp reset
    reject
  }
  chain services {
    ip daddr . meta l4proto . th dport vmap @service-ips
    fib daddr type local meta l4proto . th dport vmap @service-nodeports
  }
";

#[cfg(test)]
mod tests;
