//! Service variables on values: names and values for unnamed, named and multiple ports, the master
//! Service, enableServiceLinks, and the wait for the first list.

use super::*;

fn svc(ns: &str, name: &str, ip: &str, ports: serde_json::Value) -> Arc<Service> {
    Arc::new(
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": ns},
            "spec": {"clusterIP": ip, "ports": ports}
        }))
        .unwrap(),
    )
}

fn pod(ns: &str, spec: serde_json::Value) -> Pod {
    let mut v = serde_json::json!({
        "metadata": {"name": "p", "namespace": ns, "uid": "u1"},
        "spec": {"containers": [{"name": "c", "image": "i"}]}
    });
    for (k, val) in spec.as_object().unwrap() {
        v["spec"][k] = val.clone();
    }
    serde_json::from_value(v).unwrap()
}

fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
    v.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn kubernetes() -> Arc<Service> {
    svc(
        "default",
        "kubernetes",
        "10.96.0.1",
        serde_json::json!([{"name": "https", "port": 443, "protocol": "TCP", "targetPort": 6443}]),
    )
}

const KUBERNETES_VARS: &[(&str, &str)] = &[
    ("KUBERNETES_SERVICE_HOST", "10.96.0.1"),
    ("KUBERNETES_SERVICE_PORT", "443"),
    ("KUBERNETES_SERVICE_PORT_HTTPS", "443"),
    ("KUBERNETES_PORT", "tcp://10.96.0.1:443"),
    ("KUBERNETES_PORT_443_TCP", "tcp://10.96.0.1:443"),
    ("KUBERNETES_PORT_443_TCP_PROTO", "tcp"),
    ("KUBERNETES_PORT_443_TCP_PORT", "443"),
    ("KUBERNETES_PORT_443_TCP_ADDR", "10.96.0.1"),
];

#[test]
fn the_kubernetes_service_as_every_pod_sees_it() {
    assert_eq!(service_vars(&kubernetes()), pairs(KUBERNETES_VARS));
}

#[test]
fn one_unnamed_port() {
    let s = svc(
        "apps",
        "web",
        "10.96.3.4",
        serde_json::json!([{"port": 80}]),
    );
    assert_eq!(
        service_vars(&s),
        pairs(&[
            ("WEB_SERVICE_HOST", "10.96.3.4"),
            ("WEB_SERVICE_PORT", "80"),
            ("WEB_PORT", "tcp://10.96.3.4:80"),
            ("WEB_PORT_80_TCP", "tcp://10.96.3.4:80"),
            ("WEB_PORT_80_TCP_PROTO", "tcp"),
            ("WEB_PORT_80_TCP_PORT", "80"),
            ("WEB_PORT_80_TCP_ADDR", "10.96.3.4"),
        ])
    );
}

#[test]
fn several_named_ports_with_dashes_and_protocols() {
    // Port names with dashes are upper-cased like Service names; the first port is the default one.
    let s = svc(
        "apps",
        "my-db",
        "10.96.7.8",
        serde_json::json!([
            {"name": "sql-main", "port": 5432, "protocol": "TCP"},
            {"name": "stats", "port": 9187, "protocol": "UDP"},
            {"name": "sctp-x", "port": 7000, "protocol": "SCTP"}
        ]),
    );
    assert_eq!(
        service_vars(&s),
        pairs(&[
            ("MY_DB_SERVICE_HOST", "10.96.7.8"),
            ("MY_DB_SERVICE_PORT", "5432"),
            ("MY_DB_SERVICE_PORT_SQL_MAIN", "5432"),
            ("MY_DB_SERVICE_PORT_STATS", "9187"),
            ("MY_DB_SERVICE_PORT_SCTP_X", "7000"),
            ("MY_DB_PORT", "tcp://10.96.7.8:5432"),
            ("MY_DB_PORT_5432_TCP", "tcp://10.96.7.8:5432"),
            ("MY_DB_PORT_5432_TCP_PROTO", "tcp"),
            ("MY_DB_PORT_5432_TCP_PORT", "5432"),
            ("MY_DB_PORT_5432_TCP_ADDR", "10.96.7.8"),
            ("MY_DB_PORT_9187_UDP", "udp://10.96.7.8:9187"),
            ("MY_DB_PORT_9187_UDP_PROTO", "udp"),
            ("MY_DB_PORT_9187_UDP_PORT", "9187"),
            ("MY_DB_PORT_9187_UDP_ADDR", "10.96.7.8"),
            ("MY_DB_PORT_7000_SCTP", "sctp://10.96.7.8:7000"),
            ("MY_DB_PORT_7000_SCTP_PROTO", "sctp"),
            ("MY_DB_PORT_7000_SCTP_PORT", "7000"),
            ("MY_DB_PORT_7000_SCTP_ADDR", "10.96.7.8"),
        ])
    );
}

#[test]
fn ipv6_cluster_ips_are_bracketed_in_urls() {
    let s = svc(
        "apps",
        "v6",
        "fd00:10:96::5",
        serde_json::json!([{"port": 8080}]),
    );
    let v = service_vars(&s);
    assert!(v.contains(&("V6_PORT".into(), "tcp://[fd00:10:96::5]:8080".into())));
    assert!(v.contains(&("V6_PORT_8080_TCP_ADDR".into(), "fd00:10:96::5".into())));
}

#[test]
fn headless_and_external_name_services_have_no_variables() {
    assert!(service_vars(&svc("apps", "h", "None", serde_json::json!([{"port": 80}]))).is_empty());
    assert!(service_vars(&svc("apps", "e", "", serde_json::json!([]))).is_empty());
}

fn names(v: &[(String, String)]) -> Vec<&str> {
    v.iter().map(|(k, _)| k.as_str()).collect()
}

#[test]
fn a_pod_sees_its_namespace_and_the_kubernetes_service() {
    let all = vec![
        kubernetes(),
        svc(
            "apps",
            "web",
            "10.96.3.4",
            serde_json::json!([{"port": 80}]),
        ),
        svc(
            "apps",
            "headless",
            "None",
            serde_json::json!([{"port": 80}]),
        ),
        svc(
            "other",
            "db",
            "10.96.9.9",
            serde_json::json!([{"port": 5432}]),
        ),
        svc(
            "default",
            "not-master",
            "10.96.1.1",
            serde_json::json!([{"port": 1}]),
        ),
    ];
    let got = for_pod(&pod("apps", serde_json::json!({})), Listed::Synced(&all)).unwrap();
    let mut want: Vec<&str> = KUBERNETES_VARS.iter().map(|(k, _)| *k).collect();
    want.extend([
        "WEB_SERVICE_HOST",
        "WEB_SERVICE_PORT",
        "WEB_PORT",
        "WEB_PORT_80_TCP",
        "WEB_PORT_80_TCP_PROTO",
        "WEB_PORT_80_TCP_PORT",
        "WEB_PORT_80_TCP_ADDR",
    ]);
    assert_eq!(names(&got), want);
    // A pod of `default` sees all of default's Services.
    let got = for_pod(&pod("default", serde_json::json!({})), Listed::Synced(&all)).unwrap();
    assert!(names(&got).contains(&"NOT_MASTER_SERVICE_HOST"));
    assert!(!names(&got).contains(&"WEB_SERVICE_HOST"));
}

#[test]
fn enable_service_links_false_keeps_only_the_kubernetes_service() {
    let all = vec![
        svc(
            "apps",
            "web",
            "10.96.3.4",
            serde_json::json!([{"port": 80}]),
        ),
        kubernetes(),
    ];
    let p = pod("apps", serde_json::json!({"enableServiceLinks": false}));
    assert_eq!(
        for_pod(&p, Listed::Synced(&all)).unwrap(),
        pairs(KUBERNETES_VARS)
    );
    // Even in `default`, only the master Service.
    let p = pod("default", serde_json::json!({"enableServiceLinks": false}));
    let with_other = vec![
        kubernetes(),
        svc(
            "default",
            "web",
            "10.96.3.4",
            serde_json::json!([{"port": 80}]),
        ),
    ];
    assert_eq!(
        for_pod(&p, Listed::Synced(&with_other)).unwrap(),
        pairs(KUBERNETES_VARS)
    );
}

#[test]
fn a_kubernetes_service_of_the_pods_namespace_replaces_the_masters() {
    // Upstream's map: the namespace's own `kubernetes` wins over default's.
    let all = vec![
        kubernetes(),
        svc(
            "apps",
            "kubernetes",
            "10.96.5.5",
            serde_json::json!([{"port": 8443}]),
        ),
    ];
    let got = for_pod(&pod("apps", serde_json::json!({})), Listed::Synced(&all)).unwrap();
    assert_eq!(
        got[0],
        ("KUBERNETES_SERVICE_HOST".into(), "10.96.5.5".into())
    );
    // Without service links the namespace's does not count.
    let p = pod("apps", serde_json::json!({"enableServiceLinks": false}));
    let got = for_pod(&p, Listed::Synced(&all)).unwrap();
    assert_eq!(
        got[0],
        ("KUBERNETES_SERVICE_HOST".into(), "10.96.0.1".into())
    );
}

#[test]
fn api_pods_wait_for_the_first_list_static_pods_do_not() {
    let api_pod = pod("apps", serde_json::json!({}));
    assert_eq!(
        for_pod(&api_pod, Listed::NotSynced)
            .unwrap_err()
            .to_string(),
        "services have not yet been read at least once, cannot construct envvars"
    );
    let mut static_pod = pod("kube-system", serde_json::json!({}));
    static_pod.metadata.annotations = Some(
        [(CONFIG_SOURCE.to_string(), "file".to_string())]
            .into_iter()
            .collect(),
    );
    assert_eq!(for_pod(&static_pod, Listed::NotSynced).unwrap(), vec![]);
    assert_eq!(for_pod(&api_pod, Listed::NoApi).unwrap(), vec![]);
}
