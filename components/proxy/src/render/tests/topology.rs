//! Rendering with topology: PreferSameNode hints for kube-dns (53/UDP + 53/TCP on node IPs, as
//! kiln-dns runs hostNetwork on every node) and `internalTrafficPolicy: Local`.

use super::*;
use crate::model::NodeTopology;

/// An endpoint on `node` (its node IP), hinted for its node as the EndpointSlice controller does for
/// PreferSameNode when it is ready.
fn on_node(addr: &str, node: &str, ready: bool) -> Endpoint {
    Endpoint {
        ready,
        serving: ready,
        node_name: Some(node.into()),
        for_nodes: if ready { vec![node.into()] } else { vec![] },
        ..Endpoint::ready(addr.parse().unwrap())
    }
}

fn kube_dns(this_node: &str, endpoints: Vec<Endpoint>) -> ProxyState {
    let mut s = ProxyState {
        services: vec![svc(
            "kube-system",
            "kube-dns",
            "10.96.0.10",
            vec![
                port("dns", Protocol::Udp, 53, TargetPort::Number(53), None),
                port("dns-tcp", Protocol::Tcp, 53, TargetPort::Number(53), None),
                port(
                    "metrics",
                    Protocol::Tcp,
                    9153,
                    TargetPort::Number(9153),
                    None,
                ),
            ],
        )],
        topology: NodeTopology {
            name: this_node.into(),
            zone: None,
        },
        ..Default::default()
    };
    let ports = [
        ("dns", Protocol::Udp, 53),
        ("dns-tcp", Protocol::Tcp, 53),
        ("metrics", Protocol::Tcp, 9153),
    ]
    .into_iter()
    .map(|(name, protocol, port)| EndpointPort {
        name: name.into(),
        protocol,
        port,
    })
    .collect();
    s.add_endpoints(
        ("kube-system".into(), "kube-dns".into()),
        vec![EndpointGroup { endpoints, ports }],
    );
    s
}

fn dnat_line<'a>(script: &'a str, chain_name: &str) -> &'a str {
    chain(script, chain_name)[1]
}

#[test]
fn prefer_same_node_sends_dns_to_this_nodes_instance() {
    let eps = || {
        vec![
            on_node("10.250.0.11", "n1", true),
            on_node("10.250.0.12", "n2", true),
            on_node("10.250.0.13", "n3", true),
        ]
    };
    let r = render(&kube_dns("n2", eps()), &node());
    for proto in ["udp", "tcp"] {
        assert_eq!(
            dnat_line(&r.script, &format!("svc-kube-system/kube-dns/{proto}/53")),
            format!(
                "meta l4proto {proto} dnat to numgen random mod 1 map {{ 0 : 10.250.0.12 . 53 }}"
            ),
        );
    }
    assert_eq!(r.endpoints, 3, "one per port");
    let other = render(&kube_dns("n1", eps()), &node());
    assert!(dnat_line(&other.script, "svc-kube-system/kube-dns/udp/53")
        .ends_with("{ 0 : 10.250.0.11 . 53 }"));
}

#[test]
fn dns_falls_back_to_the_other_nodes_when_this_nodes_instance_is_not_ready_or_gone() {
    let all_others =
        "meta l4proto udp dnat to numgen random mod 2 map { 0 : 10.250.0.11 . 53, 1 : 10.250.0.13 . 53 }";
    let not_ready = kube_dns(
        "n2",
        vec![
            on_node("10.250.0.11", "n1", true),
            on_node("10.250.0.12", "n2", false),
            on_node("10.250.0.13", "n3", true),
        ],
    );
    let r = render(&not_ready, &node());
    assert_eq!(
        dnat_line(&r.script, "svc-kube-system/kube-dns/udp/53"),
        all_others
    );
    let gone = kube_dns(
        "n2",
        vec![
            on_node("10.250.0.11", "n1", true),
            on_node("10.250.0.13", "n3", true),
        ],
    );
    let r = render(&gone, &node());
    assert_eq!(
        dnat_line(&r.script, "svc-kube-system/kube-dns/udp/53"),
        all_others
    );
}

#[test]
fn without_hints_every_ready_endpoint_serves() {
    let plain = |a: &str, n: &str| Endpoint {
        node_name: Some(n.into()),
        ..Endpoint::ready(a.parse().unwrap())
    };
    let r = render(
        &kube_dns(
            "n2",
            vec![plain("10.250.0.11", "n1"), plain("10.250.0.12", "n2")],
        ),
        &node(),
    );
    assert!(dnat_line(&r.script, "svc-kube-system/kube-dns/udp/53").contains("mod 2"));
}

#[test]
fn a_topology_change_rebuilds_the_fragment() {
    let eps = || {
        vec![
            on_node("10.250.0.11", "n1", true),
            on_node("10.250.0.12", "n2", true),
        ]
    };
    let a = kube_dns("n1", eps());
    let prev = build(&a, &node()).table;
    let b = kube_dns("n2", eps());
    let reused = build_reusing(&b, &node(), Some(&prev));
    assert_eq!(reused, build(&b, &node()), "not the stale fragment of n1");
}

/// web with `internalTrafficPolicy: Local`, endpoints on n1 and n2, seen from `this_node`.
fn local_web(this_node: &str, node_port: Option<u16>) -> ProxyState {
    let mut s = ProxyState {
        services: vec![svc(
            "default",
            "web",
            "10.96.0.20",
            vec![port(
                "",
                Protocol::Tcp,
                80,
                TargetPort::Number(8080),
                node_port,
            )],
        )],
        topology: NodeTopology {
            name: this_node.into(),
            zone: None,
        },
        ..Default::default()
    };
    s.services[0].internal_local = true;
    let ep = |a: &str, n: &str| Endpoint {
        node_name: Some(n.into()),
        ..Endpoint::ready(a.parse().unwrap())
    };
    s.add_endpoints(
        ("default".into(), "web".into()),
        vec![EndpointGroup {
            endpoints: vec![ep("10.244.1.2", "n1"), ep("10.244.2.2", "n2")],
            ports: vec![],
        }],
    );
    s
}

#[test]
fn internal_traffic_policy_local_uses_this_nodes_endpoints_only() {
    let r = render(&local_web("n1", None), &node());
    assert_eq!(
        dnat_line(&r.script, "svc-default/web/tcp/80"),
        "meta l4proto tcp dnat to numgen random mod 1 map { 0 : 10.244.1.2 . 8080 }"
    );
    assert_eq!(r.endpoints, 1);
}

#[test]
fn internal_traffic_policy_local_without_a_local_endpoint_drops() {
    let r = render(&local_web("n3", None), &node());
    assert!(
        r.script.contains("10.96.0.20 . tcp . 80 : drop"),
        "{}",
        r.script
    );
    assert!(!r.script.contains("svc-default/web"), "no service chain");
    assert_eq!((r.service_ports, r.endpoints, r.rejecting), (1, 0, 0));
    let mut none = local_web("n3", None);
    none.endpoints.clear();
    let r = render(&none, &node());
    assert!(r
        .script
        .contains("10.96.0.20 . tcp . 80 : goto reject-service"));
}

#[test]
fn the_node_port_of_a_local_service_follows_the_cluster_policy() {
    let r = render(&local_web("n3", Some(30080)), &node());
    assert!(r.script.contains("10.96.0.20 . tcp . 80 : drop"));
    assert_eq!(
        chain(&r.script, "np-default/web/tcp/80"),
        [
            MARK_MASQ,
            "meta l4proto tcp dnat to numgen random mod 2 map { 0 : 10.244.1.2 . 8080, 1 : 10.244.2.2 . 8080 }"
        ]
    );
    // on n1 the ClusterIP goes local, the NodePort still everywhere
    let r = render(&local_web("n1", Some(30080)), &node());
    assert!(dnat_line(&r.script, "svc-default/web/tcp/80").contains("mod 1"));
    assert!(chain(&r.script, "np-default/web/tcp/80")[1].contains("mod 2"));
    assert_eq!(r.endpoints, 2);
    // with affinity each endpoint chain is declared once for both
    let mut sticky = local_web("n1", Some(30080));
    sticky.services[0].affinity_timeout = Some(60);
    let r = render(&sticky, &node());
    assert_eq!(
        r.script
            .matches("chain ep-default/web/tcp/80__10.244.1.2/8080 {")
            .count(),
        1
    );
    assert_eq!(r.script.matches("  set affinity-").count(), 2);
}
