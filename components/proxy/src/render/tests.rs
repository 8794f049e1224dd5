use super::*;
use crate::model::{Endpoint, EndpointGroup, EndpointPort, TargetPort};

mod topology;

fn node() -> NodeConfig {
    NodeConfig {
        cluster_cidr: "10.244.0.0/16".parse().unwrap(),
    }
}

fn port(
    name: &str,
    protocol: Protocol,
    port: u16,
    target: TargetPort,
    node_port: Option<u16>,
) -> ServicePort {
    ServicePort {
        name: name.into(),
        protocol,
        port,
        target_port: target,
        node_port,
    }
}

fn svc(ns: &str, name: &str, ip: &str, ports: Vec<ServicePort>) -> ServiceInfo {
    ServiceInfo {
        namespace: ns.into(),
        name: name.into(),
        cluster_ip: ip.parse().unwrap(),
        ports,
        affinity_timeout: None,
        internal_local: false,
    }
}

fn group(addrs: &[&str], ports: &[(&str, Protocol, u16)]) -> EndpointGroup {
    EndpointGroup {
        endpoints: addrs
            .iter()
            .map(|a| Endpoint::ready(a.parse().unwrap()))
            .collect(),
        ports: ports
            .iter()
            .map(|(n, p, port)| EndpointPort {
                name: n.to_string(),
                protocol: *p,
                port: *port,
            })
            .collect(),
    }
}

fn web_state() -> ProxyState {
    let mut s = ProxyState {
        services: vec![svc(
            "default",
            "web",
            "10.96.0.10",
            vec![port("", Protocol::Tcp, 80, TargetPort::Number(8080), None)],
        )],
        ..Default::default()
    };
    s.add_endpoints(
        ("default".into(), "web".into()),
        vec![group(
            &["10.244.2.2", "10.244.1.2"],
            &[("", Protocol::Tcp, 8080)],
        )],
    );
    s
}

/// Lines of one chain's body, trimmed.
fn chain<'a>(script: &'a str, name: &str) -> Vec<&'a str> {
    let head = format!("  chain {name} {{\n");
    let start = script
        .find(&head)
        .unwrap_or_else(|| panic!("no chain {name} in\n{script}"))
        + head.len();
    let body = &script[start..];
    body[..body.find("\n  }").unwrap()]
        .lines()
        .map(str::trim)
        .collect()
}

#[test]
fn cluster_ip_with_two_endpoints_is_exactly_this_table() {
    let r = render(&web_state(), &node());
    let expected_dynamic = "  chain svc-default/web/tcp/80 {
    ip saddr != 10.244.0.0/16 meta mark set meta mark | 0x4000
    meta l4proto tcp dnat to numgen random mod 2 map { 0 : 10.244.1.2 . 8080, 1 : 10.244.2.2 . 8080 }
  }
}
";
    let expected = format!(
        "table ip kiln {{}}
delete table ip kiln
table ip kiln {{
  map service-ips {{
    type ipv4_addr . inet_proto . inet_service : verdict
    elements = {{
      10.96.0.10 . tcp . 80 : goto svc-default/web/tcp/80
    }}
  }}
  map service-nodeports {{
    type inet_proto . inet_service : verdict
  }}
  map no-endpoint-services {{
    type ipv4_addr . inet_proto . inet_service : verdict
  }}
  map no-endpoint-nodeports {{
    type inet_proto . inet_service : verdict
  }}
  set hairpin {{
    type ipv4_addr . ipv4_addr
    elements = {{
      10.244.1.2 . 10.244.1.2,
      10.244.2.2 . 10.244.2.2
    }}
  }}
{BASE_CHAINS}{expected_dynamic}"
    );
    assert_eq!(r.script, expected);
    assert_eq!((r.service_ports, r.endpoints, r.rejecting), (1, 2, 0));
}

#[test]
fn node_port_is_matched_on_local_addresses_and_always_masqueraded() {
    let mut s = web_state();
    s.services[0].ports[0].node_port = Some(30080);
    let r = render(&s, &node());
    assert!(
        r.script
            .contains("      tcp . 30080 : goto np-default/web/tcp/80\n"),
        "{}",
        r.script
    );
    assert_eq!(
        chain(&r.script, "np-default/web/tcp/80"),
        [MARK_MASQ, "goto svc-default/web/tcp/80"]
    );
    assert!(chain(&r.script, "services")
        .contains(&"fib daddr type local meta l4proto . th dport vmap @service-nodeports"));
    // the ClusterIP still works alongside
    assert!(r
        .script
        .contains("10.96.0.10 . tcp . 80 : goto svc-default/web/tcp/80"));
}

#[test]
fn service_without_ready_endpoints_rejects() {
    let mut s = web_state();
    s.services[0].ports[0].node_port = Some(30080);
    s.endpoints.clear();
    let r = render(&s, &node());
    assert_eq!((r.service_ports, r.endpoints, r.rejecting), (0, 0, 1));
    assert!(r
        .script
        .contains("      10.96.0.10 . tcp . 80 : goto reject-service\n"));
    assert!(r
        .script
        .contains("      tcp . 30080 : goto reject-service\n"));
    assert!(
        !r.script.contains("chain svc-"),
        "no DNAT chain for an empty service"
    );
    assert_eq!(
        chain(&r.script, "reject-service"),
        ["meta l4proto tcp reject with tcp reset", "reject"]
    );
    // rejected from the filter hooks a new connection passes: local (output/input) and routed (forward)
    assert!(chain(&r.script, "filter-output").contains(&"ct state new jump endpoints-check"));
    assert!(chain(&r.script, "filter-forward").contains(&"ct state new jump endpoints-check"));
    assert!(chain(&r.script, "filter-input")
        .contains(&"ct state new fib daddr type local jump nodeport-endpoints-check"));
}

#[test]
fn named_target_port_resolves_through_endpoint_port_names() {
    let mut s = ProxyState {
        services: vec![svc(
            "apps",
            "api",
            "10.96.0.20",
            vec![
                port(
                    "http",
                    Protocol::Tcp,
                    80,
                    TargetPort::Name("web".into()),
                    None,
                ),
                port(
                    "metrics",
                    Protocol::Tcp,
                    9100,
                    TargetPort::Name("prom".into()),
                    None,
                ),
            ],
        )],
        ..Default::default()
    };
    s.add_endpoints(
        ("apps".into(), "api".into()),
        vec![group(
            &["10.244.1.5"],
            &[("http", Protocol::Tcp, 8080), ("prom", Protocol::Tcp, 9091)],
        )],
    );
    let r = render(&s, &node());
    assert_eq!(
        chain(&r.script, "svc-apps/api/tcp/80").last(),
        Some(&"meta l4proto tcp dnat to numgen random mod 1 map { 0 : 10.244.1.5 . 8080 }")
    );
    assert!(
        chain(&r.script, "svc-apps/api/tcp/9100")[1].ends_with("{ 0 : 10.244.1.5 . 9091 }"),
        "named by the targetPort"
    );
}

#[test]
fn udp_ports_use_udp_keys_and_dnat() {
    let mut s = ProxyState {
        services: vec![svc(
            "kube-system",
            "dns",
            "10.96.0.10",
            vec![
                port("dns", Protocol::Udp, 53, TargetPort::Number(53), None),
                port("dns-tcp", Protocol::Tcp, 53, TargetPort::Number(53), None),
            ],
        )],
        ..Default::default()
    };
    s.add_endpoints(
        ("kube-system".into(), "dns".into()),
        vec![group(
            &["10.244.1.3"],
            &[
                ("dns", Protocol::Udp, 5353),
                ("dns-tcp", Protocol::Tcp, 5353),
            ],
        )],
    );
    let r = render(&s, &node());
    assert!(r
        .script
        .contains("10.96.0.10 . udp . 53 : goto svc-kube-system/dns/udp/53"));
    assert!(r
        .script
        .contains("10.96.0.10 . tcp . 53 : goto svc-kube-system/dns/tcp/53"));
    assert_eq!(
        chain(&r.script, "svc-kube-system/dns/udp/53"),
        [
            "ip saddr != 10.244.0.0/16 meta mark set meta mark | 0x4000",
            "meta l4proto udp dnat to numgen random mod 1 map { 0 : 10.244.1.3 . 5353 }"
        ]
    );
    assert_eq!(
        chain(&r.script, "svc-kube-system/dns/tcp/53")[1],
        "meta l4proto tcp dnat to numgen random mod 1 map { 0 : 10.244.1.3 . 5353 }",
        "same port number, its own chain and endpoint port"
    );
    assert_eq!((r.service_ports, r.endpoints), (2, 2));
    // without endpoints both reject, each under its own protocol key
    s.endpoints.clear();
    let r = render(&s, &node());
    for proto in ["udp", "tcp"] {
        assert!(r
            .script
            .contains(&format!("10.96.0.10 . {proto} . 53 : goto reject-service")));
    }
}

#[test]
fn masquerade_marks_and_hairpin() {
    let r = render(&web_state(), &node());
    assert_eq!(MARK_MASQ, "meta mark set meta mark | 0x4000");
    let post = chain(&r.script, "postrouting");
    // an endpoint reaching itself through the service (hairpin: after DNAT, source == destination) is
    // masqueraded; the set holds `addr . addr` of every endpoint
    assert_eq!(
        post[1],
        "ct status dnat ip saddr . ip daddr @hairpin meta mark set meta mark | 0x4000"
    );
    assert!(r.script.contains("      10.244.2.2 . 10.244.2.2\n"));
    assert_eq!(
        post[2],
        "meta mark & 0x4000 == 0x4000 meta mark set meta mark & 0xffffbfff masquerade fully-random"
    );
    // ClusterIP traffic from outside the pod network is masqueraded, pod traffic is not
    assert_eq!(
        chain(&r.script, "svc-default/web/tcp/80")[0],
        "ip saddr != 10.244.0.0/16 meta mark set meta mark | 0x4000"
    );
    // no chain per endpoint and no jump out of the service chain
    assert!(!r.script.contains("chain ep-"));
    assert!(!chain(&r.script, "svc-default/web/tcp/80")
        .iter()
        .any(|r| r.contains("jump") || r.contains("goto")));
    assert_eq!(MASQ_MARK, 0x4000);
    // nft 1.0.6 rejects `priority dstnat` on a nat output chain
    assert_eq!(
        chain(&r.script, "output")[0],
        "type nat hook output priority -100; policy accept;"
    );
}

#[test]
fn output_is_deterministic_whatever_the_input_order() {
    let mut a = web_state();
    a.services.push(svc(
        "alpha",
        "one",
        "10.96.0.30",
        vec![
            port("b", Protocol::Udp, 90, TargetPort::Number(90), Some(30090)),
            port("a", Protocol::Tcp, 80, TargetPort::Number(80), Some(30081)),
        ],
    ));
    a.add_endpoints(
        ("alpha".into(), "one".into()),
        vec![
            group(&["10.244.3.3", "10.244.3.1"], &[]),
            group(&["10.244.3.2", "10.244.3.1"], &[]),
        ],
    );
    let mut b = a.clone();
    b.services.reverse();
    for s in &mut b.services {
        s.ports.reverse();
    }
    for g in b.endpoints.values_mut() {
        g.reverse();
        for e in g.iter_mut() {
            e.endpoints.reverse();
        }
    }
    let (ra, rb) = (render(&a, &node()), render(&b, &node()));
    assert_eq!(ra.script, rb.script);
    assert_eq!(ra, render(&a, &node()), "same input, same output");
    // duplicates across groups collapse into one endpoint
    assert!(ra.script.contains("numgen random mod 3 map"));
    // an address in two groups (and two ports) is one hairpin element
    assert_eq!(
        ra.script.matches("      10.244.3.1 . 10.244.3.1").count(),
        1
    );
    // map elements are sorted
    let np = ra.script.find("udp . 30090").unwrap();
    assert!(ra.script.find("tcp . 30081").unwrap() < np);
}

#[test]
fn session_affinity_pins_clients_to_their_endpoint() {
    let mut s = web_state();
    s.services[0].affinity_timeout = Some(600);
    let r = render(&s, &node());
    let ep = "default/web/tcp/80__10.244.1.2/8080";
    assert!(r.script.contains(&format!(
        "  set affinity-{ep} {{\n    type ipv4_addr\n    flags dynamic,timeout\n    timeout 600s\n  }}\n"
    )));
    // affinity services keep a chain per endpoint, so the set goes with its endpoint
    let svc = chain(&r.script, "svc-default/web/tcp/80");
    assert_eq!(svc[1], format!("ip saddr @affinity-{ep} goto ep-{ep}"));
    assert!(svc[3]
        .starts_with("numgen random mod 2 vmap { 0 : goto ep-default/web/tcp/80__10.244.1.2/8080"));
    assert_eq!(
        chain(&r.script, &format!("ep-{ep}")),
        [
            format!("update @affinity-{ep} {{ ip saddr }}"),
            "meta l4proto tcp dnat to 10.244.1.2:8080".to_string()
        ]
    );
}

#[test]
fn clashing_keys_and_bad_names_are_skipped_not_fatal() {
    let mut s = web_state();
    s.services[0].ports[0].node_port = Some(30080);
    s.services.push(svc(
        "default",
        "zz-copy",
        "10.96.0.10",
        vec![port("", Protocol::Tcp, 80, TargetPort::Number(80), None)],
    ));
    s.services.push(svc(
        "default",
        "zz-np",
        "10.96.0.11",
        vec![port(
            "",
            Protocol::Tcp,
            80,
            TargetPort::Number(80),
            Some(30080),
        )],
    ));
    s.services.push(svc(
        "default",
        "Bad;name",
        "10.96.0.12",
        vec![port("", Protocol::Tcp, 80, TargetPort::Number(80), None)],
    ));
    let r = render(&s, &node());
    assert_eq!(r.skipped.len(), 3, "{:?}", r.skipped);
    assert!(!r.script.contains("Bad;name"));
    // the service that lost its NodePort keeps its ClusterIP (rejecting: it has no endpoints)
    assert!(r
        .script
        .contains("10.96.0.11 . tcp . 80 : goto reject-service"));
    assert_eq!(r.script.matches(". 30080 :").count(), 1);
}

#[test]
fn empty_state_renders_empty_maps() {
    let r = render(&ProxyState::default(), &node());
    assert!(!r.script.contains("elements"));
    assert!(r.script.starts_with(&cleanup_script()));
    assert!(r.script.ends_with("  }\n}\n"));
}
