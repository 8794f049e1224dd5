//! Node allocatable, as upstream's kubelet computes it: what pods may use of the node's capacity once
//! the system (`--system-reserved`), the Kubernetes daemons (`--kube-reserved`) and the hard eviction
//! thresholds (`memory.available`, `nodefs.available` of `--eviction-hard`) have their share —
//! `allocatable = capacity - system-reserved - kube-reserved - hard eviction`, never below zero. The
//! scheduler places pods against it, and with `--enforce-node-allocatable=pods` (the default) the
//! `kubepods` cgroup is limited to capacity minus the reservations, so pods together cannot starve
//! the host.

use std::collections::BTreeMap;

use kiln_common::quantity::{self, Milli};

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum AllocatableError {
    #[error("--{flag}: {entry:?}: {message}")]
    Invalid {
        flag: &'static str,
        entry: String,
        message: String,
    },
}

/// The resources upstream lets `--system-reserved` / `--kube-reserved` name.
const RESERVABLE: &[&str] = &["cpu", "memory", "ephemeral-storage", "pid"];

/// A reservation: resource → amount (milli-units; `pid` counts processes).
pub type Reserved = BTreeMap<String, Milli>;

/// Parses `cpu=100m,memory=256Mi,ephemeral-storage=1Gi,pid=1000` (upstream's ConfigurationMap).
pub fn parse_reserved(flag: &'static str, input: &str) -> Result<Reserved, AllocatableError> {
    let mut out = Reserved::new();
    for entry in input.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let invalid = |message: String| AllocatableError::Invalid {
            flag,
            entry: entry.to_string(),
            message,
        };
        let (name, value) = entry
            .split_once('=')
            .ok_or_else(|| invalid("expected resource=quantity".into()))?;
        let name = name.trim();
        if !RESERVABLE.contains(&name) && !name.starts_with("hugepages-") {
            return Err(invalid(format!(
                "cannot reserve {name:?}: only cpu, memory, ephemeral-storage, pid and hugepages-<size>"
            )));
        }
        let q = quantity::parse(value.trim()).map_err(|e| invalid(e.to_string()))?;
        if q.0 < 0 {
            return Err(invalid(format!(
                "resource quantity for {name:?} is negative"
            )));
        }
        if out.insert(name.to_string(), q).is_some() {
            return Err(invalid(format!("{name} is given twice")));
        }
    }
    Ok(out)
}

/// The hard eviction thresholds that come off allocatable: `memory.available` (of memory) and
/// `nodefs.available` (of ephemeral-storage), each as bytes or a percentage of capacity.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EvictionReserve {
    pub memory: Option<Threshold>,
    pub nodefs: Option<Threshold>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Threshold {
    Bytes(u64),
    Percent(f64),
}

impl Threshold {
    fn of(self, capacity: i128) -> i128 {
        match self {
            Threshold::Bytes(b) => i128::from(b) * 1000,
            // Upstream rounds a percentage of capacity down.
            Threshold::Percent(p) => ((capacity / 1000) as f64 * p / 100.0) as i128 * 1000,
        }
    }
}

/// The memory and nodefs thresholds of an `--eviction-hard` value (already validated by the eviction
/// manager's parser; what does not parse here reserves nothing).
pub fn eviction_reserve(eviction_hard: &str) -> EvictionReserve {
    let mut out = EvictionReserve::default();
    for part in eviction_hard.split(',') {
        let Some((name, value)) = part.trim().split_once('<') else {
            continue;
        };
        let value = value.trim();
        let t = match value.strip_suffix('%') {
            Some(p) => p.trim().parse().ok().map(Threshold::Percent),
            None => crate::eviction::thresholds::parse_bytes(value)
                .ok()
                .map(Threshold::Bytes),
        };
        match name.trim() {
            "memory.available" => out.memory = t,
            "nodefs.available" => out.nodefs = t,
            _ => {}
        }
    }
    out
}

/// Capacity minus the reservations (per resource; `pods` and extended resources pass through), minus
/// the hard eviction thresholds for memory and ephemeral-storage — upstream's GetNodeAllocatable.
pub fn allocatable(
    capacity: &BTreeMap<String, String>,
    reserved: &[&Reserved],
    eviction: &EvictionReserve,
) -> BTreeMap<String, String> {
    capacity
        .iter()
        .map(|(name, cap)| {
            let Ok(Milli(total)) = quantity::parse(cap) else {
                return (name.clone(), cap.clone());
            };
            let mut left = total;
            for r in reserved {
                left -= r.get(name).map_or(0, |m| m.0);
            }
            left -= match name.as_str() {
                "memory" => eviction.memory.map_or(0, |t| t.of(total)),
                "ephemeral-storage" => eviction.nodefs.map_or(0, |t| t.of(total)),
                _ => 0,
            };
            let binary = quantity::is_binary(cap) || matches!(name.as_str(), "memory");
            (name.clone(), quantity::format(Milli(left.max(0)), binary))
        })
        .collect()
}

/// What the `kubepods` cgroup may use: capacity minus the reservations, without the eviction
/// thresholds (upstream's getNodeAllocatableInternalAbsolute — pods may dip into the eviction
/// margin; the eviction manager, not the cgroup, answers that).
pub fn pods_share(
    capacity: &BTreeMap<String, String>,
    reserved: &[&Reserved],
) -> BTreeMap<String, String> {
    allocatable(capacity, reserved, &EvictionReserve::default())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn capacity() -> BTreeMap<String, String> {
        [
            ("cpu", "2"),
            ("memory", "4Gi"),
            ("ephemeral-storage", "100Gi"),
            ("pods", "110"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    }

    #[test]
    fn reservations_and_hard_eviction_come_off_capacity() {
        let system = parse_reserved("system-reserved", "cpu=100m,memory=256Mi").unwrap();
        let kube = parse_reserved(
            "kube-reserved",
            "cpu=200m,memory=256Mi,ephemeral-storage=1Gi",
        )
        .unwrap();
        let eviction = eviction_reserve("memory.available<512Mi,nodefs.available<10%");
        let a = allocatable(&capacity(), &[&system, &kube], &eviction);
        assert_eq!(a["cpu"], "1700m");
        assert_eq!(a["memory"], "3Gi");
        // 100Gi - 1Gi - 10 % of 100Gi (10Gi, rounded down to bytes).
        assert_eq!(a["ephemeral-storage"], "89Gi");
        assert_eq!(a["pods"], "110");
        let share = pods_share(&capacity(), &[&system, &kube]);
        assert_eq!(share["memory"], "3584Mi");
    }

    #[test]
    fn without_reservations_allocatable_is_capacity() {
        let a = allocatable(&capacity(), &[], &EvictionReserve::default());
        assert_eq!(a, capacity());
    }

    #[test]
    fn reserving_more_than_there_is_leaves_zero() {
        let r = parse_reserved("kube-reserved", "memory=8Gi").unwrap();
        assert_eq!(
            allocatable(&capacity(), &[&r], &Default::default())["memory"],
            "0"
        );
    }

    #[test]
    fn bad_reservations_name_the_flag_and_entry() {
        let e = parse_reserved("system-reserved", "cpu=100m,gpu=1").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("--system-reserved: \"gpu=1\": cannot reserve"),
            "{e}"
        );
        let e = parse_reserved("kube-reserved", "memory=-1Gi").unwrap_err();
        assert!(e.to_string().contains("negative"), "{e}");
        let e = parse_reserved("kube-reserved", "memory").unwrap_err();
        assert!(e.to_string().contains("expected resource=quantity"), "{e}");
        let e = parse_reserved("kube-reserved", "cpu=lots").unwrap_err();
        assert!(e.to_string().contains("regular expression"), "{e}");
        assert_eq!(
            parse_reserved("kube-reserved", "").unwrap(),
            Reserved::new()
        );
    }
}
