//! Resource quantities and pod requests, computed the way kube-scheduler does (requests of app
//! containers summed, init containers as a maximum, pod overhead added; "non-zero" defaults for
//! scoring pods that request nothing). Besides cpu, memory, ephemeral-storage and pods, every
//! "scalar" resource (extended resources such as `example.com/foo`, `hugepages-*`, prefixed native
//! ones) is counted by name, as upstream's `ScalarResources`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Node, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum QuantityError {
    #[error("invalid quantity {0:?}")]
    Invalid(String),
}

/// Upstream's defaults for containers without requests, used only by scoring so that such pods
/// still spread (DefaultMilliCPURequest, DefaultMemoryRequest).
pub const DEFAULT_MILLI_CPU_REQUEST: i64 = 100;
pub const DEFAULT_MEMORY_REQUEST: i64 = 200 * 1024 * 1024;

/// The resources the scheduler accounts for. `pods` is meaningful for allocatable only.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Resources {
    pub milli_cpu: i64,
    pub memory: i64,
    pub ephemeral_storage: i64,
    pub pods: i64,
    /// Scalar resources by name (whole units), absent when zero.
    pub scalar: BTreeMap<String, i64>,
}

/// upstream's IsScalarResourceName: extended resources (a domain other than kubernetes.io),
/// prefixed native ones (`*kubernetes.io/*`) and huge pages. The quota-only `requests.*` names
/// never reach a pod's resources.
pub fn is_scalar_resource(name: &str) -> bool {
    (name.contains('/') && !name.starts_with("requests.")) || name.starts_with("hugepages-")
}

impl Resources {
    pub fn add(&mut self, other: &Resources) {
        self.milli_cpu += other.milli_cpu;
        self.memory += other.memory;
        self.ephemeral_storage += other.ephemeral_storage;
        self.pods += other.pods;
        for (name, v) in &other.scalar {
            *self.scalar.entry(name.clone()).or_insert(0) += v;
        }
    }

    pub fn sub(&mut self, other: &Resources) {
        self.milli_cpu -= other.milli_cpu;
        self.memory -= other.memory;
        self.ephemeral_storage -= other.ephemeral_storage;
        self.pods -= other.pods;
        for (name, v) in &other.scalar {
            let left = self.scalar.entry(name.clone()).or_insert(0);
            *left -= v;
            if *left == 0 {
                self.scalar.remove(name);
            }
        }
    }

    fn max(&mut self, other: &Resources) {
        self.milli_cpu = self.milli_cpu.max(other.milli_cpu);
        self.memory = self.memory.max(other.memory);
        self.ephemeral_storage = self.ephemeral_storage.max(other.ephemeral_storage);
        for (name, v) in &other.scalar {
            let mine = self.scalar.entry(name.clone()).or_insert(0);
            *mine = (*mine).max(*v);
        }
    }

    /// A scalar resource's amount (0 when absent).
    pub fn scalar(&self, name: &str) -> i64 {
        self.scalar.get(name).copied().unwrap_or(0)
    }

    fn from_list(list: Option<&BTreeMap<String, Quantity>>) -> Resources {
        let Some(list) = list else {
            return Resources::default();
        };
        let get = |name: &str| list.get(name).map(|q| q.0.as_str());
        Resources {
            milli_cpu: get("cpu").and_then(|q| milli_value(q).ok()).unwrap_or(0),
            memory: get("memory").and_then(|q| value(q).ok()).unwrap_or(0),
            ephemeral_storage: get("ephemeral-storage")
                .and_then(|q| value(q).ok())
                .unwrap_or(0),
            pods: get("pods").and_then(|q| value(q).ok()).unwrap_or(0),
            scalar: list
                .iter()
                .filter(|(name, _)| is_scalar_resource(name))
                .filter_map(|(name, q)| Some((name.clone(), value(&q.0).ok()?)))
                .filter(|(_, v)| *v != 0)
                .collect(),
        }
    }
}

/// A quantity as a number of base units ("100m" = 0.1, "1Ki" = 1024, "1e3" = 1000).
pub fn parse_quantity(q: &str) -> Result<f64, QuantityError> {
    let invalid = || QuantityError::Invalid(q.to_string());
    let s = q.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(split);
    if number.is_empty() {
        return Err(invalid());
    }
    let number: f64 = number.parse().map_err(|_| invalid())?;
    let multiplier = match suffix {
        "" => 1.0,
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024.0,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        exp if exp.starts_with(['e', 'E']) => {
            let e: i32 = exp[1..].parse().map_err(|_| invalid())?;
            10f64.powi(e)
        }
        _ => return Err(invalid()),
    };
    Ok(number * multiplier)
}

/// Rounded up, like resource.Quantity.Value().
pub fn value(q: &str) -> Result<i64, QuantityError> {
    Ok(round_up(parse_quantity(q)?))
}

/// Thousandths, rounded up, like resource.Quantity.MilliValue().
pub fn milli_value(q: &str) -> Result<i64, QuantityError> {
    Ok(round_up(parse_quantity(q)? * 1000.0))
}

/// Ceil that forgives float noise ("0.1" * 1000 must be 100, not 101).
fn round_up(v: f64) -> i64 {
    let r = v.round();
    if (v - r).abs() < 1e-6 {
        r as i64
    } else {
        v.ceil() as i64
    }
}

/// status.allocatable (capacity when a node reports no allocatable).
pub fn node_allocatable(node: &Node) -> Resources {
    let status = node.status.as_ref();
    let list = status
        .and_then(|s| s.allocatable.as_ref())
        .or_else(|| status.and_then(|s| s.capacity.as_ref()));
    Resources::from_list(list)
}

fn container_requests(c: &Container) -> Resources {
    let r = c.resources.as_ref();
    // A limit without a request defaults the request (apiserver defaulting); do the same here so
    // an apiserver that does not default yet still yields upstream's numbers.
    let mut requests = Resources::from_list(r.and_then(|r| r.requests.as_ref()));
    let limits = Resources::from_list(r.and_then(|r| r.limits.as_ref()));
    let has_request = |name: &str| {
        r.and_then(|r| r.requests.as_ref())
            .is_some_and(|m| m.contains_key(name))
    };
    if !has_request("cpu") {
        requests.milli_cpu = limits.milli_cpu;
    }
    if !has_request("memory") {
        requests.memory = limits.memory;
    }
    if !has_request("ephemeral-storage") {
        requests.ephemeral_storage = limits.ephemeral_storage;
    }
    for (name, v) in &limits.scalar {
        if !has_request(name) {
            requests.scalar.insert(name.clone(), *v);
        }
    }
    requests
}

fn is_sidecar(c: &Container) -> bool {
    c.restart_policy.as_deref() == Some("Always")
}

/// The pod's effective request: app containers and sidecars summed, each regular init container
/// (plus the sidecars started before it) as a floor, plus the pod overhead.
pub fn pod_requests(pod: &Pod) -> Resources {
    let Some(spec) = pod.spec.as_ref() else {
        return Resources::default();
    };
    let mut total = Resources::default();
    for c in &spec.containers {
        total.add(&container_requests(c));
    }
    let mut sidecars = Resources::default();
    let mut init_floor = Resources::default();
    for c in spec.init_containers.iter().flatten() {
        let r = container_requests(c);
        if is_sidecar(c) {
            sidecars.add(&r);
            total.add(&r);
        } else {
            let mut with_sidecars = r.clone();
            with_sidecars.add(&sidecars);
            init_floor.max(&with_sidecars);
        }
    }
    total.max(&init_floor);
    total.add(&Resources::from_list(spec.overhead.as_ref()));
    total
}

/// (milliCPU, memory) with upstream's defaults for containers that request nothing; scoring only.
pub fn non_zero_requests(pod: &Pod) -> (i64, i64) {
    let Some(spec) = pod.spec.as_ref() else {
        return (0, 0);
    };
    let mut cpu = 0;
    let mut mem = 0;
    for c in &spec.containers {
        let r = container_requests(c);
        let requests = c.resources.as_ref().and_then(|r| r.requests.as_ref());
        let limits = c.resources.as_ref().and_then(|r| r.limits.as_ref());
        let set = |k: &str| {
            requests.is_some_and(|m| m.contains_key(k)) || limits.is_some_and(|m| m.contains_key(k))
        };
        cpu += if set("cpu") {
            r.milli_cpu
        } else {
            DEFAULT_MILLI_CPU_REQUEST
        };
        mem += if set("memory") {
            r.memory
        } else {
            DEFAULT_MEMORY_REQUEST
        };
    }
    (cpu, mem)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn quantities_parse_like_kubernetes() {
        assert_eq!(milli_value("100m").unwrap(), 100);
        assert_eq!(milli_value("0.1").unwrap(), 100);
        assert_eq!(milli_value("2").unwrap(), 2000);
        assert_eq!(milli_value("1.5").unwrap(), 1500);
        assert_eq!(value("128Mi").unwrap(), 128 * 1024 * 1024);
        assert_eq!(value("1Gi").unwrap(), 1 << 30);
        assert_eq!(value("1G").unwrap(), 1_000_000_000);
        assert_eq!(value("1e3").unwrap(), 1000);
        assert_eq!(value("110").unwrap(), 110);
        assert_eq!(value("500k").unwrap(), 500_000);
        assert!(value("12Q").is_err());
        assert!(value("Mi").is_err());
    }

    fn pod(spec: serde_json::Value) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": spec})).unwrap()
    }

    #[test]
    fn requests_sum_containers_and_take_init_maximum() {
        let p = pod(json!({
            "initContainers": [
                {"name": "i", "image": "x", "resources": {"requests": {"cpu": "2", "memory": "1Gi"}}}
            ],
            "containers": [
                {"name": "a", "image": "x", "resources": {"requests": {"cpu": "500m", "memory": "256Mi"}}},
                {"name": "b", "image": "x", "resources": {"limits": {"cpu": "250m"}}}
            ],
            "overhead": {"cpu": "10m"}
        }));
        let r = pod_requests(&p);
        assert_eq!(r.milli_cpu, 2010);
        assert_eq!(r.memory, 1 << 30);
    }

    #[test]
    fn non_zero_requests_use_upstream_defaults() {
        let p = pod(json!({"containers": [
            {"name": "a", "image": "x"},
            {"name": "b", "image": "x", "resources": {"requests": {"cpu": "1"}}}
        ]}));
        assert_eq!(non_zero_requests(&p), (1100, 2 * DEFAULT_MEMORY_REQUEST));
        assert_eq!(pod_requests(&p).milli_cpu, 1000);
        assert_eq!(pod_requests(&p).memory, 0);
    }

    #[test]
    fn extended_resources_are_counted_by_name() {
        let p = pod(json!({
            "initContainers": [
                {"name": "i", "image": "x", "resources": {"limits": {"example.com/fakecpu": "300"}}}
            ],
            "containers": [
                {"name": "a", "image": "x", "resources": {"requests": {"scheduling.k8s.io/foo": "2"},
                                                         "limits": {"scheduling.k8s.io/foo": "2"}}},
                {"name": "b", "image": "x", "resources": {"limits": {"example.com/fakecpu": "200", "hugepages-2Mi": "4Mi"}}}
            ]
        }));
        let r = pod_requests(&p);
        assert_eq!(r.scalar("scheduling.k8s.io/foo"), 2);
        assert_eq!(
            r.scalar("example.com/fakecpu"),
            300,
            "the init container's floor"
        );
        assert_eq!(r.scalar("hugepages-2Mi"), 4 << 20);
        let node: Node = serde_json::from_value(json!({"status": {
            "capacity": {"cpu": "2", "example.com/fakecpu": "1k"},
            "allocatable": {"cpu": "2", "example.com/fakecpu": "1000", "pods": "110"}
        }}))
        .unwrap();
        let alloc = node_allocatable(&node);
        assert_eq!(alloc.scalar("example.com/fakecpu"), 1000);
        assert_eq!(alloc.scalar("cpu"), 0, "native names are not scalar");
        let mut used = Resources::default();
        used.add(&r);
        used.sub(&r);
        assert_eq!(used, Resources::default(), "a zero scalar leaves no entry");
        assert!(is_scalar_resource("example.com/fakecpu"));
        assert!(is_scalar_resource("kubernetes.io/batch"));
        assert!(!is_scalar_resource("ephemeral-storage"));
        assert!(!is_scalar_resource("requests.example.com/foo"));
    }
}
