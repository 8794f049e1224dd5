use super::*;
use crate::model::EndpointInfo;

pub(crate) fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

pub(crate) fn port(name: &str, protocol: &str, port: u16) -> Port {
    Port {
        name: name.into(),
        protocol: protocol.into(),
        port,
    }
}

pub(crate) fn cluster_ip(ns: &str, name: &str, ips: &[&str], ports: Vec<Port>) -> ServiceInfo {
    ServiceInfo {
        key: ServiceKey::new(ns, name),
        kind: ServiceKind::ClusterIp(ips.iter().map(|s| ip(s)).collect()),
        ports,
        publish_not_ready: false,
    }
}

pub(crate) fn headless(ns: &str, name: &str, ports: Vec<Port>) -> ServiceInfo {
    ServiceInfo {
        key: ServiceKey::new(ns, name),
        kind: ServiceKind::Headless,
        ports,
        publish_not_ready: false,
    }
}

pub(crate) fn ep(addr: &str, hostname: Option<&str>, ready: bool) -> EndpointInfo {
    EndpointInfo {
        addresses: vec![ip(addr)],
        hostname: hostname.map(str::to_string),
        ready,
    }
}

pub(crate) fn slice(
    ns: &str,
    name: &str,
    service: &str,
    endpoints: Vec<EndpointInfo>,
    ports: Vec<Port>,
) -> SliceInfo {
    SliceInfo {
        key: SliceKey {
            namespace: ns.into(),
            name: name.into(),
        },
        service: ServiceKey::new(ns, service),
        endpoints,
        ports,
    }
}

fn host_ips(index: &Index, ns: &str, svc: &str) -> Vec<(String, Vec<IpAddr>)> {
    index
        .service(ns, svc)
        .map(|v| {
            v.hosts()
                .iter()
                .map(|host| (host.label.to_string(), host.addresses.to_vec()))
                .collect()
        })
        .unwrap_or_default()
}

fn ptr_names(index: &Index, addr: &str) -> Vec<String> {
    index.ptr(ip(addr)).map(|n| n.to_ascii()).collect()
}

#[test]
fn service_added_changed_removed() {
    let mut idx = Index::new(ZoneSettings::default());
    let s0 = idx.serial();
    assert!(idx.upsert_service(cluster_ip("default", "web", &["10.96.0.10"], vec![])));
    let v = idx.service("default", "web").unwrap();
    assert_eq!(v.name().to_ascii(), "web.default.svc.cluster.local.");
    assert_eq!(v.addresses(), [ip("10.96.0.10")]);
    assert!(idx.has_namespace("default") && idx.has_namespace("DEFAULT"));
    assert_eq!(
        ptr_names(&idx, "10.96.0.10"),
        ["web.default.svc.cluster.local."]
    );
    assert!(idx.serial() > s0);

    // the same object again changes nothing (no rebuild, same serial)
    let s1 = idx.serial();
    assert!(!idx.upsert_service(cluster_ip("default", "web", &["10.96.0.10"], vec![])));
    assert_eq!(idx.serial(), s1);

    // a new ClusterIP: the old PTR goes, the new one comes
    assert!(idx.upsert_service(cluster_ip("default", "web", &["10.96.0.11"], vec![])));
    assert!(ptr_names(&idx, "10.96.0.10").is_empty());
    assert_eq!(
        ptr_names(&idx, "10.96.0.11"),
        ["web.default.svc.cluster.local."]
    );

    assert!(idx.remove_service(&ServiceKey::new("default", "web")));
    assert!(idx.service("default", "web").is_none());
    assert!(ptr_names(&idx, "10.96.0.11").is_empty());
    assert!(
        !idx.has_namespace("default"),
        "the namespace had only this Service"
    );
    assert!(!idx.remove_service(&ServiceKey::new("default", "web")));
    assert_eq!(idx.stats(), IndexStats::default());
}

#[test]
fn headless_endpoints_follow_readiness() {
    let mut idx = Index::new(ZoneSettings::default());
    idx.upsert_service(headless("db", "pg", vec![port("pg", "tcp", 5432)]));
    let pg = |idx: &Index| idx.service("db", "pg").unwrap().addresses().to_vec();
    assert!(pg(&idx).is_empty(), "no slice yet");

    idx.upsert_slice(slice(
        "db",
        "pg-1",
        "pg",
        vec![
            ep("10.244.1.5", Some("pg-0"), true),
            ep("10.244.1.6", Some("pg-1"), false),
            ep("10.244.2.7", None, true),
        ],
        vec![port("pg", "tcp", 5432)],
    ));
    assert_eq!(pg(&idx), [ip("10.244.1.5"), ip("10.244.2.7")], "ready only");
    assert_eq!(
        host_ips(&idx, "db", "pg"),
        [
            ("10-244-2-7".to_string(), vec![ip("10.244.2.7")]),
            ("pg-0".to_string(), vec![ip("10.244.1.5")]),
        ]
    );
    assert_eq!(
        ptr_names(&idx, "10.244.1.5"),
        ["pg-0.pg.db.svc.cluster.local."]
    );
    assert_eq!(
        ptr_names(&idx, "10.244.2.7"),
        ["10-244-2-7.pg.db.svc.cluster.local."]
    );
    assert!(
        ptr_names(&idx, "10.244.1.6").is_empty(),
        "not ready: no PTR"
    );

    // pg-1 becomes ready
    idx.upsert_slice(slice(
        "db",
        "pg-1",
        "pg",
        vec![
            ep("10.244.1.5", Some("pg-0"), true),
            ep("10.244.1.6", Some("pg-1"), true),
        ],
        vec![port("pg", "tcp", 5432)],
    ));
    assert_eq!(pg(&idx), [ip("10.244.1.5"), ip("10.244.1.6")]);
    assert_eq!(
        ptr_names(&idx, "10.244.1.6"),
        ["pg-1.pg.db.svc.cluster.local."]
    );
    assert!(
        ptr_names(&idx, "10.244.2.7").is_empty(),
        "gone from the slice"
    );

    // a second slice of the same Service adds to it; removing the first keeps the second
    idx.upsert_slice(slice(
        "db",
        "pg-2",
        "pg",
        vec![ep("fd00::7", Some("pg-2"), true)],
        vec![port("pg", "tcp", 5432)],
    ));
    assert_eq!(pg(&idx).len(), 3);
    assert!(idx.remove_slice(&SliceKey {
        namespace: "db".into(),
        name: "pg-1".into()
    }));
    assert_eq!(pg(&idx), [ip("fd00::7")]);
    assert_eq!(
        ptr_names(&idx, "fd00::7"),
        ["pg-2.pg.db.svc.cluster.local."]
    );
    assert_eq!(idx.stats().slices, 1);
}

#[test]
fn publish_not_ready_addresses_counts_every_endpoint() {
    let mut idx = Index::new(ZoneSettings::default());
    idx.upsert_slice(slice(
        "db",
        "pg-1",
        "pg",
        vec![ep("10.244.1.5", Some("pg-0"), false)],
        vec![],
    ));
    idx.upsert_service(headless("db", "pg", vec![]));
    assert!(
        idx.service("db", "pg").unwrap().addresses().is_empty(),
        "a slice seen before its Service counts once the Service exists"
    );
    let mut publish = headless("db", "pg", vec![]);
    publish.publish_not_ready = true;
    idx.upsert_service(publish);
    assert_eq!(
        idx.service("db", "pg").unwrap().addresses(),
        [ip("10.244.1.5")]
    );
    assert_eq!(
        host_ips(&idx, "db", "pg"),
        [("pg-0".to_string(), vec![ip("10.244.1.5")])]
    );
}

#[test]
fn slice_moving_to_another_service_updates_both() {
    let mut idx = Index::new(ZoneSettings::default());
    idx.upsert_service(headless("default", "a", vec![]));
    idx.upsert_service(headless("default", "b", vec![]));
    let eps = vec![ep("10.244.1.5", None, true)];
    idx.upsert_slice(slice("default", "s", "a", eps.clone(), vec![]));
    assert_eq!(idx.service("default", "a").unwrap().addresses().len(), 1);
    idx.upsert_slice(slice("default", "s", "b", eps, vec![]));
    assert!(idx.service("default", "a").unwrap().addresses().is_empty());
    assert_eq!(idx.service("default", "b").unwrap().addresses().len(), 1);
    assert_eq!(
        ptr_names(&idx, "10.244.1.5"),
        ["10-244-1-5.b.default.svc.cluster.local."]
    );
}

#[test]
fn relist_replaces_only_what_changed() {
    let mut idx = Index::new(ZoneSettings::default());
    idx.upsert_service(cluster_ip("default", "web", &["10.96.0.10"], vec![]));
    idx.upsert_service(cluster_ip("default", "old", &["10.96.0.20"], vec![]));
    idx.upsert_slice(slice(
        "default",
        "old-1",
        "old",
        vec![ep("10.244.1.1", None, true)],
        vec![],
    ));
    idx.replace_services(vec![
        cluster_ip("default", "web", &["10.96.0.10"], vec![]),
        cluster_ip("kube-system", "kube-dns", &["10.96.0.10"], vec![]),
    ]);
    idx.replace_slices(vec![]);
    assert!(idx.service("default", "old").is_none());
    assert!(idx.service("kube-system", "kube-dns").is_some());
    assert!(ptr_names(&idx, "10.96.0.20").is_empty());
    assert!(ptr_names(&idx, "10.244.1.1").is_empty());
    // two Services may share an address (while one is being replaced): both names reverse-resolve
    let mut names = ptr_names(&idx, "10.96.0.10");
    names.sort();
    assert_eq!(
        names,
        [
            "kube-dns.kube-system.svc.cluster.local.",
            "web.default.svc.cluster.local."
        ]
    );
    assert_eq!(idx.stats().services, 2);
    assert_eq!(idx.stats().slices, 0);
}

#[test]
fn record_counts() {
    let mut idx = Index::new(ZoneSettings::default());
    idx.upsert_service(cluster_ip(
        "default",
        "web",
        &["10.96.0.10"],
        vec![port("http", "tcp", 80)],
    ));
    // A + SRV + PTR
    assert_eq!(idx.stats().records, 3);
    idx.upsert_slice(slice(
        "default",
        "web-1",
        "web",
        vec![ep("10.244.1.5", None, true)],
        vec![],
    ));
    // + the endpoint's host A and PTR
    assert_eq!(idx.stats().records, 5);
    idx.remove_service(&ServiceKey::new("default", "web"));
    assert_eq!(idx.stats().records, 0);
}

#[test]
fn derived_hostnames_and_reverse_names() {
    assert_eq!(ip_hostname(ip("10.244.1.5")), "10-244-1-5");
    assert_eq!(
        ip_hostname(ip("fd00::1")),
        "fd00-0000-0000-0000-0000-0000-0000-0001"
    );
    let n = |s: &str| Name::from_ascii(s).unwrap();
    assert_eq!(
        reverse_ip(&n("10.0.96.10.in-addr.arpa.")),
        Some(ip("10.96.0.10"))
    );
    assert_eq!(
        reverse_ip(&n("10.0.96.10.IN-ADDR.ARPA.")),
        Some(ip("10.96.0.10"))
    );
    assert_eq!(reverse_ip(&n("0.96.10.in-addr.arpa.")), None, "partial");
    assert_eq!(reverse_ip(&n("x.0.96.10.in-addr.arpa.")), None);
    let v6 = "1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.8.b.d.0.1.0.0.2.ip6.arpa.";
    assert_eq!(reverse_ip(&n(v6)), Some(ip("2001:db8::1")));
    assert_eq!(reverse_ip(&n("example.com.")), None);
}
