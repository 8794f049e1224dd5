use super::*;
use serde_json::json;

fn no_zone(_: &str) -> Option<String> {
    None
}

fn svc() -> Service {
    serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "default", "uid": "svc-uid"},
        "spec": {"selector": {"app": "web"}, "clusterIP": "10.96.0.20",
            "ports": [{"name": "http", "port": 80, "targetPort": "web", "protocol": "TCP"}]}
    }))
    .unwrap()
}

fn pod(name: &str, ip: &str, ready: bool, terminating: bool) -> Arc<Pod> {
    Arc::new(
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default", "labels": {"app": "web"},
                "deletionTimestamp": if terminating {json!("2025-01-01T00:00:00Z")} else {json!(null)}},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i",
                "ports": [{"name": "web", "containerPort": 8080}]}]},
            "status": {"phase": "Running", "podIP": ip,
                "conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}]}
        }))
        .unwrap(),
    )
}

#[test]
fn one_ipv4_slice_with_conditions_and_named_port() {
    let slices = desired_slices(
        &svc(),
        &[
            pod("a", "10.244.0.2", true, false),
            pod("b", "10.244.0.3", false, false),
            pod("c", "10.244.0.4", true, true),
        ],
        &no_zone,
    );
    assert_eq!(slices.len(), 1);
    let (name, s) = slices.into_iter().next().unwrap();
    assert!(name.starts_with("web-"));
    assert_eq!(s.address_type, "IPv4");
    let labels = s.metadata.labels.as_ref().unwrap();
    assert_eq!(labels[SERVICE_NAME_LABEL], "web");
    assert_eq!(labels[MANAGED_BY_LABEL], MANAGED_BY);
    assert_eq!(
        s.metadata.owner_references.as_ref().unwrap()[0].uid,
        "svc-uid"
    );
    assert_eq!(s.ports.as_ref().unwrap()[0].port, Some(8080));
    let conds: Vec<_> = s
        .endpoints
        .iter()
        .map(|e| {
            let c = e.conditions.clone().unwrap();
            (e.addresses[0].as_str(), c.ready, c.serving, c.terminating)
        })
        .collect();
    assert_eq!(
        conds,
        [
            ("10.244.0.2", Some(true), Some(true), Some(false)),
            ("10.244.0.3", Some(false), Some(false), Some(false)),
            ("10.244.0.4", Some(false), Some(true), Some(true)),
        ]
    );
}

/// `kubectl describe service` dereferences each slice port's name to match it against the Service's
/// port names: an unnamed Service port must give `name: ""`, never an absent name (kubectl panics).
#[test]
fn an_unnamed_service_port_gives_a_slice_port_named_empty() {
    let mut unnamed = svc();
    unnamed.spec.as_mut().unwrap().ports = Some(vec![serde_json::from_value(
        json!({"port": 80, "targetPort": 8080, "protocol": "TCP"}),
    )
    .unwrap()]);
    let s = only_slice(&unnamed, &[pod("a", "10.244.0.2", true, false)], &no_zone);
    let port = &s.ports.as_ref().unwrap()[0];
    assert_eq!((port.name.as_deref(), port.port), (Some(""), Some(8080)));
    let wire = serde_json::to_value(&s).unwrap();
    assert_eq!(wire["ports"][0]["name"], json!(""), "{wire}");
}

#[test]
fn no_pods_gives_a_stable_placeholder() {
    let a = desired_slices(&svc(), &[], &no_zone);
    let b = desired_slices(&svc(), &[], &no_zone);
    assert_eq!(a.len(), 1);
    assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
    assert!(a.values().next().unwrap().endpoints.is_empty());
    let full = desired_slices(&svc(), &[pod("a", "10.244.0.2", true, false)], &no_zone);
    assert!(!slice_up_to_date(
        a.values().next().unwrap(),
        full.values().next().unwrap()
    ));
    assert_eq!(fnv32a(b"a"), 0xe40c292c);
}

fn only_slice(
    svc: &Service,
    pods: &[Arc<Pod>],
    zone_of: &dyn Fn(&str) -> Option<String>,
) -> EndpointSlice {
    let slices = desired_slices(svc, pods, zone_of);
    assert_eq!(slices.len(), 1);
    slices.into_values().next().unwrap()
}

fn with_spec(
    pod: Arc<Pod>,
    node: &str,
    hostname: Option<&str>,
    subdomain: Option<&str>,
) -> Arc<Pod> {
    let mut p = (*pod).clone();
    let spec = p.spec.as_mut().unwrap();
    spec.node_name = Some(node.into());
    spec.hostname = hostname.map(String::from);
    spec.subdomain = subdomain.map(String::from);
    Arc::new(p)
}

#[test]
fn endpoints_carry_node_zone_target_and_hostname_for_their_subdomain() {
    let zones = |node: &str| (node == "n1").then(|| "z1".to_string());
    let pods = [
        with_spec(
            pod("a", "10.244.0.2", true, false),
            "n1",
            Some("web-0"),
            Some("web"),
        ),
        with_spec(
            pod("b", "10.244.0.3", true, false),
            "n2",
            Some("b"),
            Some("other"),
        ),
        with_spec(pod("c", "10.244.0.4", true, false), "n2", Some("c"), None),
    ];
    let s = only_slice(&svc(), &pods, &zones);
    let a = &s.endpoints[0];
    assert_eq!(
        a.hostname.as_deref(),
        Some("web-0"),
        "subdomain == service name"
    );
    assert_eq!(a.node_name.as_deref(), Some("n1"));
    assert_eq!(a.zone.as_deref(), Some("z1"));
    let r = a.target_ref.as_ref().unwrap();
    assert_eq!(
        (r.kind.as_deref(), r.name.as_deref(), r.namespace.as_deref()),
        (Some("Pod"), Some("a"), Some("default"))
    );
    assert_eq!(s.endpoints[1].hostname, None, "another subdomain");
    assert_eq!(s.endpoints[2].hostname, None, "no subdomain");
    assert_eq!(s.endpoints[1].zone, None, "node without a zone label");
    assert!(!s
        .metadata
        .labels
        .as_ref()
        .unwrap()
        .contains_key(HEADLESS_LABEL));
}

#[test]
fn publish_not_ready_addresses_makes_every_endpoint_ready_but_not_serving() {
    let mut svc = svc();
    svc.spec.as_mut().unwrap().publish_not_ready_addresses = Some(true);
    let s = only_slice(
        &svc,
        &[
            pod("b", "10.244.0.3", false, false),
            pod("c", "10.244.0.4", true, true),
        ],
        &no_zone,
    );
    let conds: Vec<_> = s
        .endpoints
        .iter()
        .map(|e| {
            let c = e.conditions.clone().unwrap();
            (c.ready, c.serving, c.terminating)
        })
        .collect();
    assert_eq!(
        conds,
        [
            (Some(true), Some(false), Some(false)),
            (Some(true), Some(true), Some(true)),
        ]
    );
}

#[test]
fn prefer_same_node_hints_each_ready_endpoint_with_its_node_and_clears_when_unset() {
    let mut svc = svc();
    svc.spec.as_mut().unwrap().traffic_distribution = Some("PreferSameNode".into());
    let zones = |node: &str| (node == "n1").then(|| "z1".to_string());
    let pods = [
        with_spec(pod("a", "10.244.0.2", true, false), "n1", None, None),
        with_spec(pod("b", "10.244.0.3", true, false), "n2", None, None),
        with_spec(pod("c", "10.244.0.4", false, false), "n3", None, None),
    ];
    let hinted = only_slice(&svc, &pods, &zones);
    let hints: Vec<serde_json::Value> = hinted
        .endpoints
        .iter()
        .map(|e| serde_json::to_value(&e.hints).unwrap())
        .collect();
    assert_eq!(
        hints,
        [
            json!({"forNodes": [{"name": "n1"}], "forZones": [{"name": "z1"}]}),
            json!({"forNodes": [{"name": "n2"}]}),
            json!(null),
        ]
    );
    svc.spec.as_mut().unwrap().traffic_distribution = None;
    let plain = only_slice(&svc, &pods, &zones);
    assert!(plain.endpoints.iter().all(|e| e.hints.is_none()));
    assert!(
        !slice_up_to_date(&hinted, &plain),
        "dropping trafficDistribution rewrites the slice without hints"
    );
    svc.spec.as_mut().unwrap().traffic_distribution = Some("PreferClose".into());
    let close = only_slice(&svc, &pods, &zones);
    assert_eq!(
        serde_json::to_value(&close.endpoints[0].hints).unwrap(),
        json!({"forZones": [{"name": "z1"}]})
    );
    assert_eq!(close.endpoints[1].hints, None, "no zone known for n2");
}

#[test]
fn trafficdistribution_and_hints_survive_the_api_types() {
    // kiln-apiserver stores objects through k8s-openapi's types (v1_33): both fields round-trip
    let svc: Service = serde_json::from_value(json!({
        "metadata": {"name": "kube-dns", "namespace": "kube-system"},
        "spec": {"trafficDistribution": "PreferSameNode", "ports": [{"port": 53}]}
    }))
    .unwrap();
    assert_eq!(
        serde_json::to_value(&svc).unwrap()["spec"]["trafficDistribution"],
        "PreferSameNode"
    );
    let slice: EndpointSlice = serde_json::from_value(json!({
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["10.250.0.11"], "hints": {"forNodes": [{"name": "n1"}]}}]
    }))
    .unwrap();
    assert_eq!(
        serde_json::to_value(&slice).unwrap()["endpoints"][0]["hints"],
        json!({"forNodes": [{"name": "n1"}]})
    );
}

#[test]
fn headless_services_get_the_headless_label_and_reserved_labels_are_not_copied() {
    let mut svc = svc();
    svc.spec.as_mut().unwrap().cluster_ip = Some("None".into());
    svc.metadata.labels = Some(
        [
            ("app".to_string(), "web".to_string()),
            (MANAGED_BY_LABEL.to_string(), "someone-else".to_string()),
        ]
        .into(),
    );
    let s = only_slice(&svc, &[], &no_zone);
    let labels = s.metadata.labels.unwrap();
    assert_eq!(labels[HEADLESS_LABEL], "");
    assert_eq!(labels["app"], "web");
    assert_eq!(labels[MANAGED_BY_LABEL], MANAGED_BY);
}
