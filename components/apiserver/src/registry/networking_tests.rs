use serde_json::json;

use super::*;

fn fields(c: &[Cause]) -> Vec<&str> {
    c.iter().map(|c| c.field.as_str()).collect()
}

fn svc(name: &str, port: serde_json::Value) -> serde_json::Value {
    json!({"service": {"name": name, "port": port}})
}

#[test]
fn an_ingress_needs_a_backend_or_rules() {
    let none = ingress_validation(&json!({"spec": {}}));
    assert_eq!(fields(&none), ["spec.rules"]);
    assert!(none[0]
        .message
        .contains("either `defaultBackend` or `rules`"));
    let ok = json!({"spec": {"defaultBackend": svc("default-backend", json!({"number": 8080})),
        "rules": [{"host": "foo.bar.com", "http": {"paths": [
            {"path": "/", "pathType": "ImplementationSpecific",
             "backend": svc("test-backend", json!({"number": 8080}))}]}}]}});
    assert!(ingress_validation(&ok).is_empty());
}

#[test]
fn ingress_rules_are_checked_as_upstream() {
    let bad = json!({"spec": {"rules": [
        {"host": "10.0.0.1", "http": {"paths": [
            {"path": "relative", "pathType": "Prefix", "backend": svc("Bad_Name", json!({"number": 70000}))},
            {"path": "/", "backend": svc("web", json!({"name": "http", "number": 80}))},
            {"path": "/", "pathType": "Sometimes", "backend": {}}]}},
        {"host": "a.*.com"}]}});
    assert_eq!(
        fields(&ingress_validation(&bad)),
        [
            "spec.rules[0].host",
            "spec.rules[0].http.paths[0].path",
            "spec.rules[0].http.paths[0].backend.service.name",
            "spec.rules[0].http.paths[0].backend.service.port.number",
            "spec.rules[0].http.paths[1].pathType",
            "spec.rules[0].http.paths[1].backend.service.port",
            "spec.rules[0].http.paths[2].pathType",
            "spec.rules[0].http.paths[2].backend",
            "spec.rules[1].host",
        ]
    );
    let wildcard = json!({"spec": {"rules": [{"host": "*.example.com"}]}});
    assert!(ingress_validation(&wildcard).is_empty());
}

#[test]
fn ingress_classes_default_scope_and_keep_their_controller() {
    let mut obj = json!({"spec": {"controller": "example.com/controller",
        "parameters": {"kind": "fookind", "name": "fooname"}}});
    ingress_class_defaults(&mut obj);
    assert_eq!(obj["spec"]["parameters"]["scope"], "Cluster");
    assert!(ingress_class_validation(&obj).is_empty());
    let ns_scope = json!({"spec": {"controller": "example.com/controller",
        "parameters": {"kind": "k", "name": "n", "scope": "Namespace"}}});
    assert_eq!(
        fields(&ingress_class_validation(&ns_scope)),
        ["spec.parameters.namespace"]
    );
    let bad = ingress_class_validation(&json!({"spec": {"controller": "no-domain"}}));
    assert_eq!(fields(&bad), ["spec.controller"]);
    let upd = ingress_class_update_validation(
        &json!({"spec": {"controller": "a.io/x"}}),
        &json!({"spec": {"controller": "b.io/x"}}),
    );
    assert!(upd[0].message.ends_with("field is immutable"));
}

#[test]
fn network_policies_default_types_and_protocols() {
    let mut obj = json!({"spec": {"podSelector": {},
        "egress": [{"ports": [{"port": 53}]}], "ingress": [{}]}});
    network_policy_defaults(&mut obj);
    assert_eq!(obj["spec"]["policyTypes"], json!(["Ingress", "Egress"]));
    assert_eq!(obj["spec"]["egress"][0]["ports"][0]["protocol"], "TCP");
    let mut ingress_only = json!({"spec": {"podSelector": {}}});
    network_policy_defaults(&mut ingress_only);
    assert_eq!(ingress_only["spec"]["policyTypes"], json!(["Ingress"]));
    assert!(network_policy_validation(&obj).is_empty());
}

#[test]
fn network_policy_peers_and_ports_are_checked() {
    let bad = json!({"spec": {"podSelector": {}, "policyTypes": ["Sideways"],
        "ingress": [{"ports": [{"protocol": "ICMP", "port": 0}, {"port": "http", "endPort": 90}],
                     "from": [{}, {"ipBlock": {"cidr": "10.0.0.0/33"}, "podSelector": {}}]}]}});
    assert_eq!(
        fields(&network_policy_validation(&bad)),
        [
            "spec.ingress[0].ports[0].protocol",
            "spec.ingress[0].ports[0].port",
            "spec.ingress[0].ports[1].endPort",
            "spec.ingress[0].from[0]",
            "spec.ingress[0].from[1]",
            "spec.ingress[0].from[1].ipBlock.cidr",
            "spec.policyTypes[0]",
        ]
    );
}

#[test]
fn columns_read_as_kubectl_prints_them() {
    let ing = json!({"spec": {"rules": [{"host": "a.com"}, {}, {"host": "c.com"}, {"host": "d.com"}],
        "tls": [{"hosts": ["a.com"]}]},
        "status": {"loadBalancer": {"ingress": [{"ip": "169.1.1.1"}, {"hostname": "lb.example"}]}}});
    assert_eq!(ingress_hosts(&ing, 0), "a.com,*,c.com + 1 more...");
    assert_eq!(ingress_class(&ing, 0), "<none>");
    assert_eq!(ingress_address(&ing, 0), "169.1.1.1,lb.example");
    assert_eq!(ingress_ports(&ing, 0), "80, 443");
    let class = json!({"spec": {"controller": "example.com/c",
        "parameters": {"apiGroup": "k8s.example.com", "kind": "IngressParameters", "name": "p"}}});
    assert_eq!(
        class_parameters(&class, 0),
        "IngressParameters.k8s.example.com/p"
    );
    let pol = json!({"spec": {"podSelector": {"matchLabels": {"app": "db"},
        "matchExpressions": [{"key": "tier", "operator": "In", "values": ["a", "b"]}]}}});
    assert_eq!(policy_pod_selector(&pol, 0), "app=db,tier in (a,b)");
    assert_eq!(
        policy_pod_selector(&json!({"spec": {"podSelector": {}}}), 0),
        "<none>"
    );
}
