//! `resourceFieldRef` values (the downward API's container resources), for env vars ([`value`]) and
//! downwardAPI volume files ([`volume_value`]): `limits.*` and `requests.*` of cpu, memory,
//! ephemeral-storage and hugepages, divided by the divisor (default 1) and rounded up, as upstream does
//! (pkg/api/v1/resource). A container without a cpu or memory limit reads the node's allocatable instead
//! (pkg/kubelet/kubelet_resources.go); requests without a value fall back to the container's own limit
//! (the API's defaulting), else 0. Quantities are parsed exactly (decimal and binary suffixes,
//! exponents), not through floats.

use k8s_openapi::api::core::v1::{Container, Pod, ResourceFieldSelector};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResourceError {
    #[error("unsupported container resource: {0:?}")]
    Unsupported(String),
    #[error("invalid quantity {0:?}")]
    Quantity(String),
    #[error("divisor {0:?} must be positive")]
    Divisor(String),
    #[error("container {0:?} not found in the pod")]
    NoContainer(String),
    #[error("a downwardAPI volume's resourceFieldRef must name its containerName")]
    NoContainerName,
    #[error("{0} has no limit and the node's allocatable {0} is not known")]
    NoAllocatable(String),
}

/// The node's allocatable resources as the kubelet reports them in its Node status.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeAllocatable {
    pub cpu: String,
    pub memory: String,
}

/// A non-negative quantity as an exact fraction `num / den`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Exact {
    num: u128,
    den: u128,
}

impl Exact {
    /// Rounded up to a whole number of `1/scale` units (scale 1: Value(), 1000: MilliValue()).
    fn ceil_scaled(self, scale: u128) -> u128 {
        (self.num * scale).div_ceil(self.den)
    }
}

fn parse(q: &str) -> Result<Exact, ResourceError> {
    let bad = || ResourceError::Quantity(q.to_string());
    let s = q.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(split);
    let number = number.strip_prefix('+').unwrap_or(number);
    let (int, frac) = number.split_once('.').unwrap_or((number, ""));
    if int.is_empty() && frac.is_empty() {
        return Err(bad());
    }
    let digits = format!("{int}{frac}");
    if !digits.chars().all(|c| c.is_ascii_digit()) || digits.len() > 30 {
        return Err(bad());
    }
    let mut num: u128 = digits.parse().map_err(|_| bad())?;
    let mut exp10: i32 = -(frac.len() as i32);
    let mut den: u128 = 1;
    match suffix {
        "" => {}
        "n" => exp10 -= 9,
        "u" => exp10 -= 6,
        "m" => exp10 -= 3,
        "k" => exp10 += 3,
        "M" => exp10 += 6,
        "G" => exp10 += 9,
        "T" => exp10 += 12,
        "P" => exp10 += 15,
        "E" => exp10 += 18,
        "Ki" | "Mi" | "Gi" | "Ti" | "Pi" | "Ei" => {
            let k = "KMGTPE".find(&suffix[..1]).unwrap_or(0) as u32 + 1;
            num = num.checked_mul(1u128 << (10 * k)).ok_or_else(bad)?;
        }
        e if e.starts_with(['e', 'E']) => {
            exp10 += e[1..].parse::<i32>().map_err(|_| bad())?;
        }
        _ => return Err(bad()),
    }
    if !(-30..=30).contains(&exp10) {
        return Err(bad());
    }
    if exp10 >= 0 {
        num = num.checked_mul(10u128.pow(exp10 as u32)).ok_or_else(bad)?;
    } else {
        den = 10u128.pow((-exp10) as u32);
    }
    Ok(Exact { num, den })
}

/// A quantity's value rounded up to a whole number (upstream's `Quantity.Value()`).
pub fn quantity_value(q: &str) -> Result<u128, ResourceError> {
    parse(q).map(|e| e.ceil_scaled(1))
}

fn quantity<'a>(
    list: Option<
        &'a std::collections::BTreeMap<
            String,
            k8s_openapi::apimachinery::pkg::api::resource::Quantity,
        >,
    >,
    name: &str,
) -> Option<&'a str> {
    list.and_then(|m| m.get(name)).map(|q| q.0.as_str())
}

/// The container of `pod` named `name` (app or init container), as upstream's findContainerInPod.
fn container<'a>(pod: &'a Pod, name: &str) -> Result<&'a Container, ResourceError> {
    pod.spec
        .iter()
        .flat_map(|s| {
            s.containers
                .iter()
                .chain(s.init_containers.iter().flatten())
        })
        .find(|c| c.name == name)
        .ok_or_else(|| ResourceError::NoContainer(name.to_string()))
}

fn named(sel: &ResourceFieldSelector) -> Option<&str> {
    sel.container_name.as_deref().filter(|n| !n.is_empty())
}

/// The env value of `sel` for container `own` of `pod` (or the container `sel.containerName` names).
pub fn value(
    pod: &Pod,
    own: &Container,
    sel: &ResourceFieldSelector,
    node: &NodeAllocatable,
) -> Result<String, ResourceError> {
    let c = match named(sel) {
        None => own,
        Some(name) => container(pod, name)?,
    };
    of_container(c, sel, node)
}

/// A downwardAPI volume file's value: there the selector names its container (the API requires it).
pub fn volume_value(
    pod: &Pod,
    sel: &ResourceFieldSelector,
    node: &NodeAllocatable,
) -> Result<String, ResourceError> {
    let name = named(sel).ok_or(ResourceError::NoContainerName)?;
    of_container(container(pod, name)?, sel, node)
}

/// `sel` read from container `c`'s resources, the node's allocatable standing in for unset limits.
fn of_container(
    c: &Container,
    sel: &ResourceFieldSelector,
    node: &NodeAllocatable,
) -> Result<String, ResourceError> {
    let unsupported = || ResourceError::Unsupported(sel.resource.clone());
    let (kind, res) = sel.resource.split_once('.').ok_or_else(unsupported)?;
    if !matches!(res, "cpu" | "memory" | "ephemeral-storage") && !res.starts_with("hugepages-") {
        return Err(unsupported());
    }
    let r = c.resources.as_ref();
    let limits = r.and_then(|r| r.limits.as_ref());
    let requests = r.and_then(|r| r.requests.as_ref());
    let amount: String = match kind {
        "limits" => match (quantity(limits, res), res) {
            (Some(q), _) => q.to_string(),
            (None, "cpu") if !node.cpu.is_empty() => node.cpu.clone(),
            (None, "memory") if !node.memory.is_empty() => node.memory.clone(),
            (None, "cpu" | "memory" | "ephemeral-storage") => {
                return Err(ResourceError::NoAllocatable(res.to_string()))
            }
            (None, _) => "0".into(),
        },
        "requests" => quantity(requests, res)
            .or_else(|| quantity(limits, res))
            .unwrap_or("0")
            .to_string(),
        _ => return Err(unsupported()),
    };
    let divisor = sel.divisor.as_ref().map(|d| d.0.as_str()).unwrap_or("1");
    let amount = parse(&amount)?;
    let div = parse(divisor)?;
    // cpu in thousandths (a divisor of 1m gives millicores), the others in whole units.
    let scale = if res == "cpu" { 1000 } else { 1 };
    let (a, d) = (amount.ceil_scaled(scale), div.ceil_scaled(scale));
    if d == 0 {
        return Err(ResourceError::Divisor(divisor.to_string()));
    }
    Ok(a.div_ceil(d).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(resources: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p"},
            "spec": {"containers": [
                {"name": "main", "resources": resources},
                {"name": "side", "resources": {"limits": {"memory": "1Gi"}}}
            ]}
        }))
        .unwrap()
    }

    fn node() -> NodeAllocatable {
        NodeAllocatable {
            cpu: "4".into(),
            memory: "8Gi".into(),
        }
    }

    fn get(p: &Pod, resource: &str, divisor: Option<&str>) -> Result<String, ResourceError> {
        let sel: ResourceFieldSelector =
            serde_json::from_value(serde_json::json!({"resource": resource, "divisor": divisor}))
                .unwrap();
        value(p, &p.spec.as_ref().unwrap().containers[0], &sel, &node())
    }

    #[test]
    fn limits_and_requests_with_divisors_round_up() {
        let p = pod(serde_json::json!({
            "limits": {"cpu": "250m", "memory": "64Mi"},
            "requests": {"cpu": "100m", "memory": "32Mi"}
        }));
        assert_eq!(get(&p, "limits.cpu", None).unwrap(), "1");
        assert_eq!(get(&p, "limits.cpu", Some("1m")).unwrap(), "250");
        assert_eq!(get(&p, "requests.cpu", Some("1m")).unwrap(), "100");
        assert_eq!(get(&p, "limits.memory", None).unwrap(), "67108864");
        assert_eq!(get(&p, "limits.memory", Some("1Mi")).unwrap(), "64");
        assert_eq!(get(&p, "requests.memory", Some("1Mi")).unwrap(), "32");
        // 64Mi in M (10^6) is 67.1…: rounded up.
        assert_eq!(get(&p, "limits.memory", Some("1M")).unwrap(), "68");
        assert_eq!(get(&p, "requests.cpu", Some("0.1")).unwrap(), "1");
    }

    #[test]
    fn without_limits_the_node_allocatable_and_requests_follow_limits() {
        let none = pod(serde_json::json!({}));
        assert_eq!(get(&none, "limits.cpu", None).unwrap(), "4");
        assert_eq!(get(&none, "limits.memory", Some("1Gi")).unwrap(), "8");
        assert_eq!(get(&none, "requests.cpu", None).unwrap(), "0");
        assert_eq!(get(&none, "requests.memory", None).unwrap(), "0");
        let limited = pod(serde_json::json!({"limits": {"cpu": "1500m"}}));
        assert_eq!(get(&limited, "requests.cpu", Some("1m")).unwrap(), "1500");
        assert_eq!(get(&limited, "limits.cpu", None).unwrap(), "2");
    }

    #[test]
    fn another_container_by_name_and_errors() {
        let p = pod(serde_json::json!({}));
        let sel: ResourceFieldSelector = serde_json::from_value(
            serde_json::json!({"containerName": "side", "resource": "limits.memory", "divisor": "1Mi"}),
        )
        .unwrap();
        let main = &p.spec.as_ref().unwrap().containers[0];
        assert_eq!(value(&p, main, &sel, &node()).unwrap(), "1024");
        assert!(matches!(
            get(&p, "limits.gpu", None),
            Err(ResourceError::Unsupported(_))
        ));
        assert!(matches!(
            get(&p, "limits.cpu", Some("0")),
            Err(ResourceError::Divisor(_))
        ));
        assert!(matches!(
            get(&p, "limits.cpu", Some("x1")),
            Err(ResourceError::Quantity(_))
        ));
        let unknown = NodeAllocatable::default();
        let sel: ResourceFieldSelector =
            serde_json::from_value(serde_json::json!({"resource": "limits.cpu"})).unwrap();
        assert!(matches!(
            value(&p, main, &sel, &unknown),
            Err(ResourceError::NoAllocatable(_))
        ));
    }

    #[test]
    fn volume_files_name_their_container() {
        let p = pod(serde_json::json!({"requests": {"cpu": "250m"}, "limits": {"cpu": "1250m"}}));
        let sel =
            |v: serde_json::Value| -> ResourceFieldSelector { serde_json::from_value(v).unwrap() };
        let main_cpu = sel(serde_json::json!({"containerName": "main", "resource": "limits.cpu"}));
        assert_eq!(volume_value(&p, &main_cpu, &node()).unwrap(), "2");
        let side_cpu = sel(serde_json::json!({"containerName": "side", "resource": "limits.cpu"}));
        assert_eq!(volume_value(&p, &side_cpu, &node()).unwrap(), "4");
        let unnamed = sel(serde_json::json!({"resource": "limits.cpu"}));
        assert_eq!(
            volume_value(&p, &unnamed, &node()),
            Err(ResourceError::NoContainerName)
        );
        let missing = sel(serde_json::json!({"containerName": "gone", "resource": "limits.cpu"}));
        assert_eq!(
            volume_value(&p, &missing, &node()),
            Err(ResourceError::NoContainer("gone".into()))
        );
    }

    #[test]
    fn quantities_parse_exactly() {
        let v = |q: &str| parse(q).unwrap().ceil_scaled(1000);
        assert_eq!(v("0.1"), 100);
        assert_eq!(v("100m"), 100);
        assert_eq!(v("1e3"), 1_000_000);
        assert_eq!(v("1Ki"), 1_024_000);
        assert_eq!(v("1.5Gi"), 1_610_612_736_000);
        assert_eq!(v("1n"), 1);
        assert!(parse("-1").is_err());
        assert!(parse("Mi").is_err());
    }
}
