use super::*;
use serde_json::json;

fn endpoints(v: serde_json::Value) -> Endpoints {
    serde_json::from_value(v).unwrap()
}

fn service(selector: Option<serde_json::Value>) -> Service {
    let mut spec = json!({"ports": [{"port": 80}]});
    if let Some(s) = selector {
        spec["selector"] = s;
    }
    serde_json::from_value(json!({"metadata": {"name": "ext", "namespace": "ns"}, "spec": spec}))
        .unwrap()
}

fn custom() -> Endpoints {
    endpoints(json!({
        "metadata": {"name": "ext", "namespace": "ns", "uid": "u1",
            "labels": {"team": "a", "endpointslice.kubernetes.io/managed-by": "someone"},
            "annotations": {"note": "x", "endpoints.kubernetes.io/last-change-trigger-time": "t"}},
        "subsets": [
            {"addresses": [{"ip": "10.1.2.3", "hostname": "h1"}, {"ip": "fd00::1"}],
             "notReadyAddresses": [{"ip": "10.1.2.4", "nodeName": "n1"}, {"ip": "bogus"}],
             "ports": [{"name": "web", "port": 9000, "protocol": "TCP"}]},
            {"addresses": [{"ip": "10.9.9.9"}],
             "ports": [{"name": "web", "port": 9000, "protocol": "TCP"}]},
            {"addresses": [{"ip": "10.1.1.1"}], "ports": [{"name": "dns", "port": 53, "protocol": "UDP"}]}
        ]
    }))
}

#[test]
fn only_selectorless_services_endpoints_are_mirrored_unless_skipped() {
    let ep = custom();
    assert!(should_mirror(&ep, Some(&service(None))));
    assert!(should_mirror(&ep, Some(&service(Some(json!({}))))));
    assert!(!should_mirror(
        &ep,
        Some(&service(Some(json!({"app": "x"}))))
    ));
    assert!(!should_mirror(&ep, None), "no Service, nothing mirrored");
    let mut skipped = ep.clone();
    skipped
        .metadata
        .labels
        .as_mut()
        .unwrap()
        .insert(SKIP_MIRROR_LABEL.into(), "true".into());
    assert!(!should_mirror(&skipped, Some(&service(None))));
}

#[test]
fn one_slice_per_address_type_and_ports_with_upstreams_metadata() {
    let d = desired_slices(&custom());
    let summary: Vec<(String, Vec<String>, usize)> = d
        .iter()
        .map(|((family, ports), s)| {
            (
                family.clone(),
                ports.iter().map(|p| format!("{}:{}", p.0, p.1)).collect(),
                s.endpoints.len(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            ("IPv4".to_string(), vec!["dns:53".to_string()], 1),
            ("IPv4".to_string(), vec!["web:9000".to_string()], 3),
            ("IPv6".to_string(), vec!["web:9000".to_string()], 1),
        ],
        "subsets with the same ports share a slice; the bad IP is left out"
    );
    let web = &d[&("IPv4".to_string(), d.keys().nth(1).unwrap().1.clone())];
    let labels = web.metadata.labels.as_ref().unwrap();
    assert_eq!(labels[SERVICE_NAME_LABEL], "ext");
    assert_eq!(
        labels[MANAGED_BY_LABEL], MIRRORING_MANAGED_BY,
        "the managed-by label is overridden"
    );
    assert_eq!(labels["team"], "a");
    let ann = web.metadata.annotations.as_ref().unwrap();
    assert_eq!(ann.len(), 1, "the trigger time is dropped: {ann:?}");
    let owner = &web.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str()),
        ("Endpoints", "u1")
    );
    assert_eq!(web.metadata.generate_name.as_deref(), Some("ext-"));
    let ready: Vec<(String, bool)> = web
        .endpoints
        .iter()
        .map(|e| {
            (
                e.addresses[0].clone(),
                e.conditions.as_ref().unwrap().ready.unwrap(),
            )
        })
        .collect();
    assert_eq!(
        ready,
        vec![
            ("10.1.2.3".into(), true),
            ("10.1.2.4".into(), false),
            ("10.9.9.9".into(), true)
        ]
    );
    assert_eq!(web.endpoints[0].hostname.as_deref(), Some("h1"));
    assert_eq!(web.endpoints[1].node_name.as_deref(), Some("n1"));
}

#[test]
fn a_subset_is_truncated_at_the_limit() {
    let addresses: Vec<_> = (0..MAX_ENDPOINTS_PER_SUBSET + 5)
        .map(|i| json!({"ip": format!("10.0.{}.{}", i / 250, i % 250)}))
        .collect();
    let ep = endpoints(json!({"metadata": {"name": "big", "namespace": "ns"},
        "subsets": [{"addresses": addresses, "ports": [{"port": 80}]}]}));
    let d = desired_slices(&ep);
    assert_eq!(d.len(), 1);
    assert_eq!(
        d.values().next().unwrap().endpoints.len(),
        MAX_ENDPOINTS_PER_SUBSET
    );
}

#[test]
fn the_plan_updates_in_place_creates_and_deletes() {
    let desired = desired_slices(&custom());
    let mut existing: Vec<EndpointSlice> = desired.values().cloned().collect();
    for (i, s) in existing.iter_mut().enumerate() {
        s.metadata.name = Some(format!("ext-{i}"));
        s.metadata.resource_version = Some("7".into());
    }
    assert_eq!(
        plan(&existing, desired.clone()),
        Plan::default(),
        "up to date"
    );

    // The Endpoints change: web's IPv4 slice loses an address, dns goes, a new port list comes.
    let mut ep = custom();
    let subsets = ep.subsets.as_mut().unwrap();
    subsets.pop();
    subsets[1].ports.as_mut().unwrap()[0].port = 9001;
    let p = plan(&existing, desired_slices(&ep));
    assert_eq!(p.delete, vec!["ext-0".to_string()], "dns:53 is gone");
    assert_eq!(p.update.len(), 1);
    assert_eq!(p.update[0].metadata.name.as_deref(), Some("ext-1"));
    assert_eq!(p.update[0].metadata.resource_version.as_deref(), Some("7"));
    assert_eq!(p.update[0].endpoints.len(), 2);
    assert_eq!(p.create.len(), 1);
    assert_eq!(p.create[0].ports.as_ref().unwrap()[0].port, Some(9001));
    // Not mirrored any more: everything goes.
    assert_eq!(plan(&existing, BTreeMap::new()).delete.len(), 3);
}
