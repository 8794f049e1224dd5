use super::*;
use serde_json::json;

fn ip(s: &str) -> Ipv4Addr {
    s.parse().unwrap()
}

#[test]
fn cidr_parses_and_contains() {
    let c: Ipv4Cidr = "10.244.0.0/16".parse().unwrap();
    assert!(c.contains(ip("10.244.3.7")));
    assert!(!c.contains(ip("10.245.0.1")));
    assert_eq!(c.to_string(), "10.244.0.0/16");
    assert!("10.244.0.0".parse::<Ipv4Cidr>().is_err());
    assert!("10.244.0.0/33".parse::<Ipv4Cidr>().is_err());
}

#[test]
fn service_conversion_reads_ports_nodeports_and_affinity() {
    let svc: Service = serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "apps"},
        "spec": {"type": "NodePort", "clusterIP": "10.96.0.10", "sessionAffinity": "ClientIP",
            "ports": [
                {"name": "http", "port": 80, "targetPort": "http", "nodePort": 30080},
                {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 5353, "nodePort": 30053},
                {"name": "sctp", "port": 9, "protocol": "SCTP"}
            ]}
    }))
    .unwrap();
    let s = from_service(&svc).unwrap();
    assert_eq!(s.cluster_ip, ip("10.96.0.10"));
    assert_eq!(s.affinity_timeout, Some(DEFAULT_AFFINITY_TIMEOUT_SECONDS));
    assert_eq!(s.ports.len(), 2, "SCTP is not rendered");
    assert_eq!(s.ports[0].target_port, TargetPort::Name("http".into()));
    assert_eq!(s.ports[0].node_port, Some(30080));
    assert_eq!(s.ports[1].protocol, Protocol::Udp);
    assert_eq!(s.ports[1].target_port, TargetPort::Number(5353));
}

#[test]
fn headless_and_clusterip_nodeport_fields() {
    let headless: Service = serde_json::from_value(json!({
        "metadata": {"name": "h", "namespace": "d"},
        "spec": {"clusterIP": "None", "ports": [{"port": 80}]}
    }))
    .unwrap();
    assert!(from_service(&headless).is_none());
    // a nodePort on a ClusterIP service (left over from a type change) is not served
    let cip: Service = serde_json::from_value(json!({
        "metadata": {"name": "c", "namespace": "d"},
        "spec": {"clusterIP": "10.96.0.5", "ports": [{"port": 80, "nodePort": 30001}]}
    }))
    .unwrap();
    let s = from_service(&cip).unwrap();
    assert_eq!(s.ports[0].node_port, None);
    assert_eq!(s.ports[0].target_port, TargetPort::Number(80));
}

fn addrs(g: &EndpointGroup, pick: impl Fn(&Endpoint) -> bool) -> Vec<Ipv4Addr> {
    g.endpoints
        .iter()
        .filter(|e| pick(e))
        .map(|e| e.addr)
        .collect()
}

#[test]
fn endpoints_mark_not_ready_addresses() {
    let ep: Endpoints = serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "apps"},
        "subsets": [{"addresses": [{"ip": "10.244.1.2", "nodeName": "n1"}],
                     "notReadyAddresses": [{"ip": "10.244.1.3"}],
                     "ports": [{"name": "http", "port": 8080}]}]
    }))
    .unwrap();
    let (key, groups) = from_endpoints(&ep).unwrap();
    assert_eq!(key, ("apps".to_string(), "web".to_string()));
    assert_eq!(
        addrs(&groups[0], |e| e.ready && e.serving),
        [ip("10.244.1.2")]
    );
    assert_eq!(
        addrs(&groups[0], |e| !e.ready && !e.serving),
        [ip("10.244.1.3")]
    );
    assert_eq!(groups[0].endpoints[0].node_name.as_deref(), Some("n1"));
    assert_eq!(groups[0].ports[0].port, 8080);
}

#[test]
fn endpoint_slices_carry_conditions_node_and_hints() {
    let slice: EndpointSlice = serde_json::from_value(json!({
        "metadata": {"name": "web-abc", "namespace": "apps", "labels": {SERVICE_NAME_LABEL: "web"}},
        "addressType": "IPv4",
        "endpoints": [
            {"addresses": ["10.244.1.2", "10.244.1.9"], "conditions": {"ready": true}, "nodeName": "n1",
             "hints": {"forNodes": [{"name": "n1"}], "forZones": [{"name": "z1"}]}},
            {"addresses": ["10.244.1.3"], "conditions": {"ready": false, "serving": true, "terminating": true}},
            {"addresses": ["10.244.2.2"]}
        ],
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]
    }))
    .unwrap();
    let (key, groups) = from_endpoint_slice(&slice).unwrap();
    assert_eq!(key.1, "web");
    let g = &groups[0];
    assert_eq!(
        addrs(g, |_| true),
        [ip("10.244.1.2"), ip("10.244.1.3"), ip("10.244.2.2")],
        "one endpoint per entry: its first address"
    );
    assert_eq!(addrs(g, |e| e.ready), [ip("10.244.1.2"), ip("10.244.2.2")]);
    assert_eq!(addrs(g, |e| e.serving && e.terminating), [ip("10.244.1.3")]);
    let first = &g.endpoints[0];
    assert_eq!(first.node_name.as_deref(), Some("n1"));
    assert_eq!(
        (first.for_nodes.as_slice(), first.for_zones.as_slice()),
        (&["n1".to_string()][..], &["z1".to_string()][..])
    );
    let unset = &g.endpoints[2];
    assert!(
        unset.ready && unset.serving && !unset.terminating,
        "unset conditions"
    );
    assert!(unset.for_nodes.is_empty() && unset.for_zones.is_empty());
}

#[test]
fn internal_traffic_policy_local_is_read() {
    let svc = |policy: serde_json::Value| -> Service {
        serde_json::from_value(json!({
            "metadata": {"name": "s", "namespace": "d"},
            "spec": {"clusterIP": "10.96.0.5", "ports": [{"port": 80}], "internalTrafficPolicy": policy}
        }))
        .unwrap()
    };
    assert!(from_service(&svc(json!("Local"))).unwrap().internal_local);
    assert!(!from_service(&svc(json!("Cluster"))).unwrap().internal_local);
    assert!(!from_service(&svc(json!(null))).unwrap().internal_local);
}

#[test]
fn endpoints_resolve_by_port_name_then_target_name_then_number() {
    let port = |name: &str, t: TargetPort| ServicePort {
        name: name.into(),
        protocol: Protocol::Tcp,
        port: 80,
        target_port: t,
        node_port: None,
    };
    let g = EndpointGroup::ready(
        &[ip("10.244.2.2"), ip("10.244.1.2")],
        vec![
            EndpointPort {
                name: "http".into(),
                protocol: Protocol::Tcp,
                port: 8080,
            },
            EndpointPort {
                name: "metrics".into(),
                protocol: Protocol::Tcp,
                port: 9090,
            },
            EndpointPort {
                name: "http".into(),
                protocol: Protocol::Udp,
                port: 1,
            },
        ],
    );
    let groups = [g];
    let backends = |p: &ServicePort, groups: &[EndpointGroup]| -> Vec<Backend> {
        resolve_endpoints(p, groups)
            .into_iter()
            .map(|(e, port)| (e.addr, port))
            .collect()
    };
    let by_name = backends(&port("http", TargetPort::Number(1234)), &groups);
    assert_eq!(
        by_name,
        vec![(ip("10.244.1.2"), 8080), (ip("10.244.2.2"), 8080)]
    );
    let by_target = backends(&port("web", TargetPort::Name("metrics".into())), &groups);
    assert_eq!(by_target[0].1, 9090);
    // a group with ports but none matching contributes nothing
    assert!(backends(&port("other", TargetPort::Number(80)), &groups).is_empty());
    let bare = [EndpointGroup::ready(&[ip("10.244.1.9")], vec![])];
    assert_eq!(
        backends(&port("", TargetPort::Number(81)), &bare),
        vec![(ip("10.244.1.9"), 81)]
    );
    assert!(backends(&port("", TargetPort::Name("x".into())), &bare).is_empty());
}

#[test]
fn duplicate_addresses_keep_the_ready_entry() {
    let mut stale = Endpoint::ready(ip("10.244.1.2"));
    stale.ready = false;
    stale.serving = false;
    let groups = [
        EndpointGroup {
            endpoints: vec![stale],
            ports: vec![],
        },
        EndpointGroup::ready(&[ip("10.244.1.2")], vec![]),
    ];
    let p = ServicePort {
        name: String::new(),
        protocol: Protocol::Tcp,
        port: 80,
        target_port: TargetPort::Number(80),
        node_port: None,
    };
    let got = resolve_endpoints(&p, &groups);
    assert_eq!(got.len(), 1);
    assert!(got[0].0.ready);
}
