//! Renders the whole `kiln` nftables table from a [`ProxyState`], as one `nft -f` script.
//!
//! The script declares the table, deletes it and declares it again with every map, set and chain, so nft
//! applies it as ONE transaction: the old rules are replaced atomically, and a first run (no table yet)
//! works too. Output is sorted, so an unchanged state renders byte-identical text and the proxy can skip
//! the reload by comparing strings.
//!
//! Layout (kube-proxy's nftables mode, trimmed to what kiln serves):
//! - `prerouting` / `output` (nat) jump to `services`, which looks the packet up in the `service-ips` map
//!   (ClusterIP . proto . port) and, for local destinations, in `service-nodeports` (proto . port).
//!   Maps keep the per-packet cost flat with thousands of Services.
//! - `svc-…` marks ClusterIP traffic from outside the pod CIDR for masquerade (the return path with host-gw
//!   would be asymmetric) and picks an endpoint with `numgen random`; `np-…` always marks (NodePort).
//! - `ep-…` marks hairpin traffic (pod → own service → itself) and DNATs.
//! - `postrouting` masquerades packets carrying mark 0x4000 and clears the bit.
//! - Services without ready endpoints are in `no-endpoint-*` maps checked from filter hooks, and are
//!   rejected (TCP reset / ICMP port unreachable), so clients see "connection refused" at once.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::net::Ipv4Addr;

use crate::model::{resolve_backends, NodeConfig, Protocol, ProxyState, ServiceInfo, ServicePort};

/// Name of the table kiln owns (family ip).
pub const TABLE: &str = "kiln";
/// Packet mark bit that asks `postrouting` to masquerade (kube-proxy's value).
pub const MASQ_MARK: u32 = 0x4000;

/// A rendered table with what went into it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendered {
    pub script: String,
    /// Service ports with at least one endpoint.
    pub service_ports: usize,
    /// Endpoint chains (one per service port and backend).
    pub endpoints: usize,
    /// Service ports that reject (no ready endpoints).
    pub rejecting: usize,
    /// Service ports left out, with the reason (bad names, duplicate ClusterIP/NodePort keys).
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

struct PortPlan<'a> {
    svc: &'a ServiceInfo,
    port: ServicePort,
    id: String,
    backends: Vec<(Ipv4Addr, u16)>,
}

pub fn render(state: &ProxyState, node: &NodeConfig) -> Rendered {
    let mut services: Vec<&ServiceInfo> = state.services.iter().collect();
    services.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));

    let mut skipped = Vec::new();
    let mut cluster_keys: BTreeSet<(Ipv4Addr, Protocol, u16)> = BTreeSet::new();
    let mut node_keys: BTreeSet<(Protocol, u16)> = BTreeSet::new();
    let mut plans = Vec::new();
    for svc in services {
        if !valid_name(&svc.namespace) || !valid_name(&svc.name) {
            skipped.push(format!("{}/{}: invalid name", svc.namespace, svc.name));
            continue;
        }
        let groups = state
            .endpoints
            .get(&(svc.namespace.clone(), svc.name.clone()))
            .map(Vec::as_slice)
            .unwrap_or_default();
        let mut ports: Vec<&ServicePort> = svc.ports.iter().collect();
        ports.sort_by_key(|p| (p.protocol, p.port));
        for port in ports {
            let id = port_id(svc, port);
            if !cluster_keys.insert((svc.cluster_ip, port.protocol, port.port)) {
                skipped.push(format!(
                    "{id}: ClusterIP {}:{} already served",
                    svc.cluster_ip, port.port
                ));
                continue;
            }
            let mut port = port.clone();
            if let Some(np) = port.node_port {
                if !node_keys.insert((port.protocol, np)) {
                    // keep the ClusterIP working without the clashing NodePort
                    skipped.push(format!("{id}: NodePort {np} already served"));
                    port.node_port = None;
                }
            }
            let backends = resolve_backends(&port, groups);
            plans.push(PortPlan {
                svc,
                port,
                id,
                backends,
            });
        }
    }
    let mut out = render_plans(&plans, node);
    out.skipped = skipped;
    out
}

fn render_plans(plans: &[PortPlan<'_>], node: &NodeConfig) -> Rendered {
    let cidr = node.cluster_cidr;
    let mut service_ips = Vec::new();
    let mut service_nodeports = Vec::new();
    let mut reject_ips = Vec::new();
    let mut reject_nodeports = Vec::new();
    let mut sets = String::new();
    let mut chains = String::new();
    let (mut service_ports, mut endpoints, mut rejecting) = (0, 0, 0);

    for plan in plans {
        let (svc, port, id) = (plan.svc, &plan.port, &plan.id);
        let proto = port.protocol.nft();
        let cluster_key = format!("{} . {proto} . {}", svc.cluster_ip, port.port);
        if plan.backends.is_empty() {
            rejecting += 1;
            reject_ips.push(format!("{cluster_key} : goto reject-service"));
            if let Some(np) = port.node_port {
                reject_nodeports.push(format!("{proto} . {np} : goto reject-service"));
            }
            continue;
        }
        service_ports += 1;
        service_ips.push(format!("{cluster_key} : goto svc-{id}"));
        if let Some(np) = port.node_port {
            service_nodeports.push(format!("{proto} . {np} : goto np-{id}"));
            let _ = writeln!(
                chains,
                "  chain np-{id} {{\n    jump mark-masq\n    goto svc-{id}\n  }}"
            );
        }

        let ep_ids: Vec<String> = plan
            .backends
            .iter()
            .map(|(ip, tp)| format!("{id}__{ip}/{tp}"))
            .collect();
        let _ = writeln!(chains, "  chain svc-{id} {{");
        let _ = writeln!(chains, "    ip saddr != {cidr} jump mark-masq");
        if svc.affinity_timeout.is_some() {
            for ep in &ep_ids {
                let _ = writeln!(chains, "    ip saddr @affinity-{ep} goto ep-{ep}");
            }
        }
        let vmap: Vec<String> = ep_ids
            .iter()
            .enumerate()
            .map(|(i, ep)| format!("{i} : goto ep-{ep}"))
            .collect();
        let _ = writeln!(
            chains,
            "    numgen random mod {} vmap {{ {} }}\n  }}",
            ep_ids.len(),
            vmap.join(", ")
        );

        for ((ip, tp), ep) in plan.backends.iter().zip(&ep_ids) {
            endpoints += 1;
            let _ = writeln!(chains, "  chain ep-{ep} {{");
            // hairpin: a pod reaching itself through the service must see the node as the source
            let _ = writeln!(chains, "    ip saddr {ip} jump mark-masq");
            if let Some(timeout) = svc.affinity_timeout {
                let _ = writeln!(
                    sets,
                    "  set affinity-{ep} {{\n    type ipv4_addr\n    flags dynamic,timeout\n    timeout {timeout}s\n  }}"
                );
                let _ = writeln!(chains, "    update @affinity-{ep} {{ ip saddr }}");
            }
            let _ = writeln!(chains, "    meta l4proto {proto} dnat to {ip}:{tp}\n  }}");
        }
    }

    let mut s = String::new();
    s.push_str(&cleanup_script());
    let _ = writeln!(s, "table ip {TABLE} {{");
    let map = |s: &mut String, name: &str, key: &str, mut elems: Vec<String>| {
        elems.sort();
        let _ = writeln!(s, "  map {name} {{\n    type {key} : verdict");
        if !elems.is_empty() {
            let _ = writeln!(
                s,
                "    elements = {{\n      {}\n    }}",
                elems.join(",\n      ")
            );
        }
        let _ = writeln!(s, "  }}");
    };
    let cluster = "ipv4_addr . inet_proto . inet_service";
    let nodeport = "inet_proto . inet_service";
    map(&mut s, "service-ips", cluster, service_ips);
    map(&mut s, "service-nodeports", nodeport, service_nodeports);
    map(&mut s, "no-endpoint-services", cluster, reject_ips);
    map(&mut s, "no-endpoint-nodeports", nodeport, reject_nodeports);
    s.push_str(&sets);
    s.push_str(BASE_CHAINS);
    s.push_str(&chains);
    s.push_str("}\n");
    Rendered {
        script: s,
        service_ports,
        endpoints,
        rejecting,
        skipped: Vec::new(),
    }
}

/// Hooks and helper chains that do not depend on the Services. nft 1.0.6 rejects `priority dstnat` for a
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
  chain mark-masq {
    meta mark set meta mark | 0x4000
  }
  chain services {
    ip daddr . meta l4proto . th dport vmap @service-ips
    fib daddr type local meta l4proto . th dport vmap @service-nodeports
  }
";

#[cfg(test)]
mod tests;
