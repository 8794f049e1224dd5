//! The kubelet's NodePorts admission: a pod asking for a host port another admitted pod on this node
//! already holds is rejected (upstream's kubelet runs the scheduler's NodePorts filter at admission),
//! so a pod bound by name to a node, or scheduled on a stale view, fails instead of fighting over
//! the port — and its controller (a StatefulSet, say) makes a new one.

use k8s_openapi::api::core::v1::Pod;

/// Upstream's reason and message (`Pod was rejected: ` is added by the rejection).
pub const REASON: &str = "NodePorts";
pub const MESSAGE: &str =
    "Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports";

/// One host port a pod asks for: protocol, host IP ("" and 0.0.0.0 mean every address), port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPort {
    pub protocol: String,
    pub ip: String,
    pub port: i32,
}

/// The host ports of the pod's containers (init containers included, as upstream counts them).
pub fn host_ports(p: &Pod) -> Vec<HostPort> {
    let Some(spec) = p.spec.as_ref() else {
        return Vec::new();
    };
    spec.init_containers
        .iter()
        .flatten()
        .chain(&spec.containers)
        .flat_map(|c| c.ports.iter().flatten())
        .filter_map(|port| {
            let hp = port.host_port.filter(|p| *p > 0)?;
            Some(HostPort {
                protocol: port.protocol.clone().unwrap_or_else(|| "TCP".into()),
                ip: port.host_ip.clone().unwrap_or_default(),
                port: hp,
            })
        })
        .collect()
}

fn wildcard(ip: &str) -> bool {
    ip.is_empty() || ip == "0.0.0.0" || ip == "::"
}

/// Do two host ports collide? Same protocol and port, and the same address or either on all of them.
pub fn conflict(a: &HostPort, b: &HostPort) -> bool {
    a.protocol == b.protocol
        && a.port == b.port
        && (wildcard(&a.ip) || wildcard(&b.ip) || a.ip == b.ip)
}

/// Does `wanted` collide with any port already held?
pub fn fits<'a>(wanted: &[HostPort], held: impl IntoIterator<Item = &'a HostPort>) -> bool {
    let held: Vec<&HostPort> = held.into_iter().collect();
    !wanted.iter().any(|w| held.iter().any(|h| conflict(w, h)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(ports: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "uid": "u"},
            "spec": {"containers": [{"name": "c", "image": "i", "ports": ports}]}
        }))
        .unwrap()
    }

    #[test]
    fn only_ports_with_a_host_port_count_tcp_by_default() {
        let p = pod(serde_json::json!([
            {"containerPort": 80},
            {"containerPort": 80, "hostPort": 8080},
            {"containerPort": 53, "hostPort": 53, "protocol": "UDP", "hostIP": "10.0.0.1"}
        ]));
        assert_eq!(
            host_ports(&p),
            [
                HostPort {
                    protocol: "TCP".into(),
                    ip: "".into(),
                    port: 8080
                },
                HostPort {
                    protocol: "UDP".into(),
                    ip: "10.0.0.1".into(),
                    port: 53
                },
            ]
        );
    }

    #[test]
    fn a_port_collides_on_the_same_protocol_and_a_shared_address() {
        let hp = |proto: &str, ip: &str, port| HostPort {
            protocol: proto.into(),
            ip: ip.into(),
            port,
        };
        assert!(conflict(&hp("TCP", "", 80), &hp("TCP", "10.0.0.1", 80)));
        assert!(conflict(
            &hp("TCP", "0.0.0.0", 80),
            &hp("TCP", "0.0.0.0", 80)
        ));
        assert!(!conflict(
            &hp("TCP", "10.0.0.1", 80),
            &hp("TCP", "10.0.0.2", 80)
        ));
        assert!(!conflict(&hp("TCP", "", 80), &hp("UDP", "", 80)));
        assert!(!conflict(&hp("TCP", "", 80), &hp("TCP", "", 81)));
        let held = [hp("TCP", "", 21017)];
        assert!(!fits(&[hp("TCP", "", 21017)], &held));
        assert!(fits(&[hp("TCP", "", 21018)], &held));
        assert!(fits(&[], &held));
    }
}
