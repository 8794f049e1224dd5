//! What an object counts against a ResourceQuota, as upstream's quota evaluators
//! (pkg/quota/v1/evaluator/core): every object counts `count/<resource>[.<group>]`; the core kinds
//! also count under their legacy names (`pods`, `services`, `secrets`, …); pods add their compute
//! requests and limits (`requests.cpu` and its alias `cpu`, `limits.memory`, `requests.<extended>`,
//! …), Services their node ports and load balancers, claims their storage (also per storage class).
//! Scopes (`Terminating`, `BestEffort`, `PriorityClass`, …) select pods only: a scoped quota counts
//! no other kind. Pure functions over JSON, so the API server's admission and the
//! controller-manager's resourcequota controller count alike.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::quantity::{self, Milli};

/// An amount of one resource, and whether it prints with a binary suffix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Amount {
    pub value: Milli,
    pub binary: bool,
}

impl Amount {
    pub fn count(n: i128) -> Amount {
        Amount {
            value: Milli(n * 1000),
            binary: false,
        }
    }

    /// A serialized quantity (None when malformed).
    pub fn of(v: &Value) -> Option<Amount> {
        let text = v
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| v.to_string());
        Some(Amount {
            value: quantity::of(v)?,
            binary: quantity::is_binary(&text),
        })
    }

    pub fn text(&self) -> String {
        quantity::format(self.value, self.binary)
    }

    /// The sum keeps the format of whichever side is not zero (upstream keeps its operand's).
    pub fn plus(self, o: Amount) -> Amount {
        Amount {
            value: self.value + o.value,
            binary: if self.value == Milli::ZERO {
                o.binary
            } else {
                self.binary
            },
        }
    }
}

/// Resource name → amount.
pub type Usage = BTreeMap<String, Amount>;

/// Adds `b` into `a`.
pub fn add(a: &mut Usage, b: &Usage) {
    for (k, v) in b {
        let sum = a.get(k).map_or(*v, |cur| cur.plus(*v));
        a.insert(k.clone(), sum);
    }
}

/// A ResourceList (`{"cpu": "1", …}`) as usage; malformed quantities are left out.
pub fn resource_list(v: &Value) -> Usage {
    v.as_object()
        .into_iter()
        .flatten()
        .filter_map(|(k, q)| Some((k.clone(), Amount::of(q)?)))
        .collect()
}

/// The JSON ResourceList of a usage, in canonical text.
pub fn to_resource_list(u: &Usage) -> Value {
    Value::Object(
        u.iter()
            .map(|(k, v)| (k.clone(), Value::String(v.text())))
            .collect(),
    )
}

/// The core kinds counted under a legacy name besides `count/<resource>`.
const LEGACY_COUNTED: &[&str] = &[
    "pods",
    "services",
    "replicationcontrollers",
    "resourcequotas",
    "secrets",
    "configmaps",
    "persistentvolumeclaims",
];

/// The resource names of the object-count form: `count/pods`, `count/replicasets.apps`.
pub fn count_name(group: &str, plural: &str) -> String {
    if group.is_empty() {
        format!("count/{plural}")
    } else {
        format!("count/{plural}.{group}")
    }
}

/// Whether a pod still counts: not Succeeded or Failed (upstream's QuotaV1Pod; a pod being deleted
/// stops counting when the kubelet confirms, i.e. when it is gone).
pub fn pod_counts(pod: &Value) -> bool {
    !matches!(
        pod["status"]["phase"].as_str(),
        Some("Succeeded") | Some("Failed")
    )
}

/// Standard compute resources, whose requests also count under the bare name.
const COMPUTE: &[&str] = &["cpu", "memory", "ephemeral-storage"];

fn is_hugepages(name: &str) -> bool {
    name.starts_with("hugepages-")
}

/// Extended resources: a domain-prefixed name outside kubernetes.io (`example.com/dongle`).
fn is_extended(name: &str) -> bool {
    name.contains('/') && !name.contains("kubernetes.io/")
}

/// A container's requests and limits; an unset request defaults to its limit (upstream defaults
/// the pod that way before the quota sees it).
fn container_resources(c: &Value) -> (Usage, Usage) {
    let limits = resource_list(&c["resources"]["limits"]);
    let mut requests = resource_list(&c["resources"]["requests"]);
    for (k, v) in &limits {
        requests.entry(k.clone()).or_insert(*v);
    }
    (requests, limits)
}

/// max(a, b) per resource.
fn max_into(a: &mut Usage, b: &Usage) {
    for (k, v) in b {
        match a.get(k) {
            Some(cur) if cur.value >= v.value => {}
            _ => {
                a.insert(k.clone(), *v);
            }
        }
    }
}

/// The pod's effective requests and limits: the sum over containers, at least the largest init
/// container's, plus the pod's overhead (upstream's PodRequests/PodLimits).
pub fn pod_resources(pod: &Value) -> (Usage, Usage) {
    let spec = &pod["spec"];
    let (mut requests, mut limits) = (Usage::new(), Usage::new());
    for c in spec["containers"].as_array().into_iter().flatten() {
        let (r, l) = container_resources(c);
        add(&mut requests, &r);
        add(&mut limits, &l);
    }
    for c in spec["initContainers"].as_array().into_iter().flatten() {
        let (r, l) = container_resources(c);
        max_into(&mut requests, &r);
        max_into(&mut limits, &l);
    }
    let overhead = resource_list(&spec["overhead"]);
    if !overhead.is_empty() {
        add(&mut requests, &overhead);
        let limited: Vec<String> = limits.keys().cloned().collect();
        for k in limited {
            if let Some(o) = overhead.get(&k) {
                let sum = limits[&k].plus(*o);
                limits.insert(k, sum);
            }
        }
    }
    (requests, limits)
}

/// What a pod counts beyond `pods`: its compute requests and limits under quota names.
fn pod_usage(pod: &Value) -> Usage {
    let mut u = Usage::new();
    let (requests, limits) = pod_resources(pod);
    for (name, amount) in &requests {
        if COMPUTE.contains(&name.as_str()) {
            u.insert(name.clone(), *amount);
            u.insert(format!("requests.{name}"), *amount);
        } else if is_hugepages(name) || is_extended(name) {
            u.insert(format!("requests.{name}"), *amount);
        }
    }
    for (name, amount) in &limits {
        if COMPUTE.contains(&name.as_str()) || is_hugepages(name) {
            u.insert(format!("limits.{name}"), *amount);
        }
    }
    // Tracked resources the pod does not use count as zero, so status shows them.
    for name in [
        "cpu",
        "memory",
        "requests.cpu",
        "requests.memory",
        "limits.cpu",
        "limits.memory",
    ] {
        u.entry(name.into()).or_insert(Amount {
            value: Milli::ZERO,
            binary: name.ends_with("memory"),
        });
    }
    u
}

/// What a Service counts: its node ports (NodePort, and LoadBalancer unless it opts out of them)
/// and load balancers.
fn service_usage(svc: &Value) -> Usage {
    let spec = &svc["spec"];
    let type_ = spec["type"].as_str().unwrap_or("ClusterIP");
    let ports = spec["ports"].as_array().map_or(0, Vec::len) as i128;
    let node_ports = match type_ {
        "NodePort" => ports,
        "LoadBalancer" if spec["allocateLoadBalancerNodePorts"] != Value::Bool(false) => ports,
        _ => 0,
    };
    let lbs = i128::from(type_ == "LoadBalancer");
    Usage::from([
        ("services.nodeports".into(), Amount::count(node_ports)),
        ("services.loadbalancers".into(), Amount::count(lbs)),
    ])
}

/// The `<class>.storageclass.storage.k8s.io/<resource>` name.
pub fn by_storage_class(class: &str, resource: &str) -> String {
    format!("{class}.storageclass.storage.k8s.io/{resource}")
}

/// What a claim counts: its requested storage, overall and for its class.
fn claim_usage(pvc: &Value) -> Usage {
    let mut u = Usage::new();
    let storage = Amount::of(&pvc["spec"]["resources"]["requests"]["storage"]).unwrap_or(Amount {
        value: Milli::ZERO,
        binary: true,
    });
    u.insert("requests.storage".into(), storage);
    if let Some(class) = pvc["spec"]["storageClassName"]
        .as_str()
        .filter(|c| !c.is_empty())
    {
        u.insert(
            by_storage_class(class, "persistentvolumeclaims"),
            Amount::count(1),
        );
        u.insert(by_storage_class(class, "requests.storage"), storage);
    }
    u
}

/// Everything `obj` (of `group`/`plural`) counts against a quota in its namespace; empty for a pod
/// that no longer counts.
pub fn usage(group: &str, plural: &str, obj: &Value) -> Usage {
    let core = group.is_empty();
    if core && plural == "pods" && !pod_counts(obj) {
        return Usage::new();
    }
    let mut u = Usage::from([(count_name(group, plural), Amount::count(1))]);
    if core && LEGACY_COUNTED.contains(&plural) {
        u.insert(plural.to_string(), Amount::count(1));
    }
    match (core, plural) {
        (true, "pods") => add(&mut u, &pod_usage(obj)),
        (true, "services") => add(&mut u, &service_usage(obj)),
        (true, "persistentvolumeclaims") => add(&mut u, &claim_usage(obj)),
        _ => {}
    }
    u
}

/// A pod's QoS class is BestEffort: no container (init included) requests or limits cpu or memory.
pub fn is_best_effort(pod: &Value) -> bool {
    let spec = &pod["spec"];
    !spec["containers"]
        .as_array()
        .into_iter()
        .chain(spec["initContainers"].as_array())
        .flatten()
        .any(|c| {
            ["requests", "limits"].iter().any(|k| {
                let list = &c["resources"][*k];
                ["cpu", "memory"]
                    .iter()
                    .any(|r| Amount::of(&list[*r]).is_some_and(|a| a.value != Milli::ZERO))
            })
        })
}

/// The pod's QoS class as upstream's GetPodQOS: BestEffort without any cpu or memory request or
/// limit, Guaranteed when every container limits both and requests exactly that (an unset request
/// is its limit), else Burstable.
pub fn qos_class(pod: &Value) -> &'static str {
    if is_best_effort(pod) {
        return "BestEffort";
    }
    let spec = &pod["spec"];
    let guaranteed = spec["containers"]
        .as_array()
        .into_iter()
        .chain(spec["initContainers"].as_array())
        .flatten()
        .all(|c| {
            ["cpu", "memory"].iter().all(|r| {
                let limit = quantity::of(&c["resources"]["limits"][*r]);
                let request = quantity::of(&c["resources"]["requests"][*r]).or(limit);
                limit.is_some() && request == limit
            })
        });
    if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

/// Whether one scope (with its selector operator and values) selects the pod.
fn scope_selects(scope: &str, operator: &str, values: &[&str], pod: &Value) -> bool {
    let spec = &pod["spec"];
    match scope {
        "Terminating" => spec["activeDeadlineSeconds"]
            .as_i64()
            .is_some_and(|s| s >= 0),
        "NotTerminating" => spec["activeDeadlineSeconds"].as_i64().is_none_or(|s| s < 0),
        "BestEffort" => is_best_effort(pod),
        "NotBestEffort" => !is_best_effort(pod),
        "PriorityClass" => {
            let class = spec["priorityClassName"].as_str().unwrap_or("");
            match operator {
                "Exists" => !class.is_empty(),
                "DoesNotExist" => class.is_empty(),
                "In" => values.contains(&class),
                "NotIn" => !values.contains(&class),
                _ => false,
            }
        }
        "CrossNamespacePodAffinity" => {
            let affinity = &spec["affinity"];
            ["podAffinity", "podAntiAffinity"].iter().any(|kind| {
                ["requiredDuringSchedulingIgnoredDuringExecution"]
                    .iter()
                    .flat_map(|k| affinity[*kind][*k].as_array().into_iter().flatten())
                    .chain(
                        affinity[*kind]["preferredDuringSchedulingIgnoredDuringExecution"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .map(|w| &w["podAffinityTerm"]),
                    )
                    .any(|t| {
                        t["namespaces"].as_array().is_some_and(|n| !n.is_empty())
                            || t["namespaceSelector"].is_object()
                    })
            })
        }
        _ => false,
    }
}

/// Whether the quota's scopes (spec.scopes and spec.scopeSelector) select the object: an unscoped
/// quota selects everything; a scoped one only pods, each of its scopes holding.
pub fn selects(quota: &Value, group: &str, plural: &str, obj: &Value) -> bool {
    let spec = &quota["spec"];
    let scopes: Vec<(&str, &str, Vec<&str>)> = spec["scopes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(|s| (s, "Exists", Vec::new()))
        .chain(
            spec["scopeSelector"]["matchExpressions"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|e| {
                    (
                        e["scopeName"].as_str().unwrap_or(""),
                        e["operator"].as_str().unwrap_or(""),
                        e["values"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .filter_map(Value::as_str)
                            .collect(),
                    )
                }),
        )
        .collect();
    if scopes.is_empty() {
        return true;
    }
    group.is_empty()
        && plural == "pods"
        && scopes
            .iter()
            .all(|(scope, op, values)| scope_selects(scope, op, values, obj))
}

/// The part of `usage` a quota tracks (the names in its spec.hard).
pub fn tracked(quota: &Value, usage: &Usage) -> Usage {
    let hard = &quota["spec"]["hard"];
    usage
        .iter()
        .filter(|(k, _)| hard.get(k.as_str()).is_some())
        .map(|(k, v)| (k.clone(), *v))
        .collect()
}

/// Compute resources a quota limits that every container of a pod must then declare, as
/// upstream's pod evaluator requires; (resource, container names lacking it).
pub fn missing_declarations(quota: &Value, pod: &Value) -> Vec<(String, Vec<String>)> {
    let hard = &quota["spec"]["hard"];
    let mut out = Vec::new();
    for (quota_name, kind, resource) in [
        ("requests.cpu", "requests", "cpu"),
        ("cpu", "requests", "cpu"),
        ("requests.memory", "requests", "memory"),
        ("memory", "requests", "memory"),
        ("limits.cpu", "limits", "cpu"),
        ("limits.memory", "limits", "memory"),
    ] {
        if hard.get(quota_name).is_none() || out.iter().any(|(n, _)| n == quota_name) {
            continue;
        }
        let lacking: Vec<String> = pod["spec"]["containers"]
            .as_array()
            .into_iter()
            .flatten()
            .chain(
                pod["spec"]["initContainers"]
                    .as_array()
                    .into_iter()
                    .flatten(),
            )
            .filter(|c| {
                let (requests, limits) = container_resources(c);
                let list = if kind == "requests" { requests } else { limits };
                !list.contains_key(resource)
            })
            .filter_map(|c| c["name"].as_str().map(str::to_string))
            .collect();
        if !lacking.is_empty() {
            out.push((quota_name.to_string(), lacking));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod(requests: Value, limits: Value) -> Value {
        json!({"spec": {"containers": [{"name": "pause", "resources": {"requests": requests, "limits": limits}}]}})
    }

    fn text(u: &Usage, k: &str) -> String {
        u.get(k).map(Amount::text).unwrap_or_else(|| "-".into())
    }

    #[test]
    fn a_pod_counts_its_requests_limits_and_extended_resources() {
        let p = pod(
            json!({"cpu": "500m", "memory": "252Mi", "ephemeral-storage": "30Gi", "example.com/dongle": "2"}),
            json!({"example.com/dongle": "2"}),
        );
        let u = usage("", "pods", &p);
        assert_eq!(text(&u, "pods"), "1");
        assert_eq!(text(&u, "count/pods"), "1");
        assert_eq!(text(&u, "cpu"), "500m");
        assert_eq!(text(&u, "requests.cpu"), "500m");
        assert_eq!(text(&u, "memory"), "252Mi");
        assert_eq!(text(&u, "ephemeral-storage"), "30Gi");
        assert_eq!(text(&u, "requests.example.com/dongle"), "2");
        assert_eq!(text(&u, "limits.cpu"), "0");
        // Extended resources have no limits.* name.
        assert_eq!(text(&u, "limits.example.com/dongle"), "-");
        let mut done = p.clone();
        done["status"] = json!({"phase": "Succeeded"});
        assert!(usage("", "pods", &done).is_empty());
    }

    #[test]
    fn init_containers_and_overhead() {
        let p = json!({"spec": {
            "containers": [
                {"name": "a", "resources": {"requests": {"cpu": "100m"}, "limits": {"cpu": "200m"}}},
                {"name": "b", "resources": {"limits": {"cpu": "300m"}}},
            ],
            "initContainers": [{"name": "i", "resources": {"requests": {"cpu": "1"}}}],
            "overhead": {"cpu": "10m"},
        }});
        let u = usage("", "pods", &p);
        // requests: max(100m + 300m (request defaults to limit), 1) + 10m.
        assert_eq!(text(&u, "requests.cpu"), "1010m");
        assert_eq!(text(&u, "limits.cpu"), "510m");
    }

    #[test]
    fn services_claims_and_other_kinds() {
        let np = json!({"spec": {"type": "NodePort", "ports": [{"port": 80}]}});
        let u = usage("", "services", &np);
        assert_eq!(
            (
                text(&u, "services"),
                text(&u, "services.nodeports"),
                text(&u, "services.loadbalancers")
            ),
            ("1".into(), "1".into(), "0".into())
        );
        let lb = json!({"spec": {"type": "LoadBalancer", "ports": [{"port": 80}], "allocateLoadBalancerNodePorts": false}});
        let u = usage("", "services", &lb);
        assert_eq!(text(&u, "services.nodeports"), "0");
        assert_eq!(text(&u, "services.loadbalancers"), "1");
        let pvc = json!({"spec": {"storageClassName": "gold", "resources": {"requests": {"storage": "1Gi"}}}});
        let u = usage("", "persistentvolumeclaims", &pvc);
        assert_eq!(text(&u, "requests.storage"), "1Gi");
        assert_eq!(
            text(&u, "gold.storageclass.storage.k8s.io/requests.storage"),
            "1Gi"
        );
        assert_eq!(
            text(
                &u,
                "gold.storageclass.storage.k8s.io/persistentvolumeclaims"
            ),
            "1"
        );
        let u = usage("apps", "replicasets", &json!({}));
        assert_eq!(u.keys().collect::<Vec<_>>(), ["count/replicasets.apps"]);
    }

    #[test]
    fn scopes_select_pods_only() {
        let scoped = |s: &str| json!({"spec": {"scopes": [s], "hard": {"pods": "5"}}});
        let best_effort = pod(json!({}), json!({}));
        let burstable = pod(json!({"cpu": "500m"}), json!({"cpu": "1"}));
        let mut terminating = burstable.clone();
        terminating["spec"]["activeDeadlineSeconds"] = json!(3600);
        assert!(selects(&scoped("BestEffort"), "", "pods", &best_effort));
        assert!(!selects(&scoped("BestEffort"), "", "pods", &burstable));
        assert!(selects(&scoped("NotBestEffort"), "", "pods", &burstable));
        assert!(selects(&scoped("Terminating"), "", "pods", &terminating));
        assert!(!selects(&scoped("Terminating"), "", "pods", &burstable));
        assert!(selects(&scoped("NotTerminating"), "", "pods", &burstable));
        assert!(!selects(
            &scoped("BestEffort"),
            "",
            "configmaps",
            &json!({})
        ));
        assert!(selects(&json!({"spec": {}}), "", "configmaps", &json!({})));
        let selector = json!({"spec": {"scopeSelector": {"matchExpressions": [
            {"scopeName": "PriorityClass", "operator": "In", "values": ["high"]}]}}});
        let mut high = best_effort.clone();
        high["spec"]["priorityClassName"] = json!("high");
        assert!(selects(&selector, "", "pods", &high));
        assert!(!selects(&selector, "", "pods", &best_effort));
    }

    #[test]
    fn qos_classes() {
        assert_eq!(qos_class(&pod(json!({}), json!({}))), "BestEffort");
        assert_eq!(
            qos_class(&pod(json!({"cpu": "100m"}), json!({}))),
            "Burstable"
        );
        assert_eq!(
            qos_class(&pod(json!({}), json!({"cpu": "1", "memory": "1Gi"}))),
            "Guaranteed"
        );
        assert_eq!(
            qos_class(&pod(
                json!({"cpu": "500m"}),
                json!({"cpu": "1", "memory": "1Gi"})
            )),
            "Burstable"
        );
    }

    #[test]
    fn declarations_a_quota_requires() {
        let quota = json!({"spec": {"hard": {"limits.cpu": "2", "requests.memory": "1Gi"}}});
        let p = pod(json!({"memory": "100Mi"}), json!({}));
        assert_eq!(
            missing_declarations(&quota, &p),
            [("limits.cpu".to_string(), vec!["pause".to_string()])]
        );
    }
}
