//! Service ClusterIP and NodePort allocation. Each allocated value is one store key
//! (`/registry/kiln/serviceips/<ip>`, `/registry/kiln/servicenodeports/<port>`) claimed in the same
//! transaction that writes the Service (see `Store::create_claiming`), so two Services never get one
//! value and the state survives restarts. This module only picks free values and checks ranges.

use std::collections::HashSet;
use std::net::Ipv4Addr;
use std::ops::RangeInclusive;

use rand::Rng;
use serde_json::{json, Value};

use crate::registry::services::{wants_node_ports, NODE_PORT_PREFIX, SERVICE_IP_PREFIX};
use crate::registry::ResourceSpec;
use crate::status::{ApiError, Cause};
use crate::storage::Store;

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum AllocatorError {
    #[error("invalid --service-cluster-ip-range {0:?}: want an IPv4 CIDR like 10.96.0.0/12")]
    BadRange(String),
    #[error("--service-cluster-ip-range {0} is too small (at least a /29 is needed)")]
    TooSmall(String),
}

/// The default NodePort range (`--service-node-port-range`).
pub const NODE_PORTS: RangeInclusive<u16> = 30000..=32767;

#[derive(Debug, Clone)]
pub struct ServiceAllocator {
    cidr: String,
    network: u32,
    size: u32,
    ports: RangeInclusive<u16>,
}

impl ServiceAllocator {
    pub fn new(cidr: &str, ports: RangeInclusive<u16>) -> Result<Self, AllocatorError> {
        let bad = || AllocatorError::BadRange(cidr.to_string());
        let (ip, len) = cidr.split_once('/').ok_or_else(bad)?;
        let ip: Ipv4Addr = ip.parse().map_err(|_| bad())?;
        let len: u32 = len.parse().map_err(|_| bad())?;
        if len > 29 {
            return Err(AllocatorError::TooSmall(cidr.to_string()));
        }
        let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
        Ok(ServiceAllocator {
            cidr: cidr.to_string(),
            network: u32::from(ip) & mask,
            size: 1u32 << (32 - len),
            ports,
        })
    }

    /// The first address of the range: the `kubernetes` service's ClusterIP.
    pub fn first_ip(&self) -> Ipv4Addr {
        Ipv4Addr::from(self.network + 1)
    }

    fn offset(&self, ip: &str) -> Option<u32> {
        let ip: Ipv4Addr = ip.parse().ok()?;
        let off = u32::from(ip).wrapping_sub(self.network);
        (off > 0 && off < self.size - 1).then_some(off)
    }

    /// Upstream's static band (the low addresses, for Services that ask for a fixed IP like DNS);
    /// dynamic allocation prefers the addresses above it.
    fn static_band(&self) -> u32 {
        (self.size / 16).clamp(16, 256)
    }

    fn pick_ip(&self, used: &HashSet<String>) -> Option<String> {
        let mut rng = rand::rng();
        let sb = self.static_band().min(self.size - 1);
        let bands = [(sb, self.size - 1), (2, sb)];
        for (lo, hi) in bands {
            if lo >= hi {
                continue;
            }
            let span = hi - lo;
            let start = rng.random_range(0..span);
            // A random start, then linear probing: bounded, and uniform enough for a sparse range.
            for i in 0..span.min(1 << 20) {
                let ip = Ipv4Addr::from(self.network + lo + (start + i) % span).to_string();
                if !used.contains(&ip) {
                    return Some(ip);
                }
            }
        }
        None
    }

    fn pick_port(&self, used: &HashSet<String>) -> Option<i64> {
        let lo = i64::from(*self.ports.start());
        let span = i64::from(*self.ports.end()) - lo + 1;
        let start = rand::rng().random_range(0..span);
        (0..span)
            .map(|i| lo + (start + i) % span)
            .find(|p| !used.contains(&p.to_string()))
    }

    /// Fills in a Service's empty ClusterIP and NodePorts and checks the given ones, on create
    /// (`old` = None) and update. A no-op for kinds without reservations.
    pub async fn prepare(
        &self,
        store: &Store,
        spec: &ResourceSpec,
        obj: &mut Value,
        old: Option<&Value>,
    ) -> Result<(), ApiError> {
        if spec.reservations.is_none() || spec.plural != "services" {
            return Ok(());
        }
        let name = obj["metadata"]["name"].as_str().unwrap_or("").to_string();
        let invalid = |c: Cause| ApiError::invalid("", "Service", &name, vec![c]);
        let external_name = obj["spec"]["type"] == "ExternalName";

        // ClusterIP: immutable once set (except by turning into / out of ExternalName).
        let old_ip = old
            .filter(|o| o["spec"]["type"] != "ExternalName")
            .and_then(|o| o["spec"]["clusterIP"].as_str())
            .unwrap_or("")
            .to_string();
        let new_ip = obj["spec"]["clusterIP"].as_str().unwrap_or("").to_string();
        if external_name {
            if let Some(s) = obj["spec"].as_object_mut() {
                s.remove("clusterIP");
                s.remove("clusterIPs");
            }
        } else if !old_ip.is_empty() && new_ip.is_empty() {
            obj["spec"]["clusterIP"] = json!(old_ip);
            obj["spec"]["clusterIPs"] = json!([old_ip]);
        } else if !old_ip.is_empty() && new_ip != old_ip {
            return Err(invalid(Cause::invalid_raw(
                "spec.clusterIPs[0]",
                &format!("{new_ip:?}"),
                "may not change once set",
            )));
        } else if new_ip.is_empty() {
            let used = self.used(store, SERVICE_IP_PREFIX).await?;
            let ip = self.pick_ip(&used).ok_or_else(|| {
                ApiError::internal(format!(
                    "failed to allocate a serviceIP: range is full ({})",
                    self.cidr
                ))
            })?;
            obj["spec"]["clusterIP"] = json!(ip);
            obj["spec"]["clusterIPs"] = json!([ip]);
        } else if new_ip != "None" && self.offset(&new_ip).is_none() && old_ip != new_ip {
            return Err(invalid(Cause::invalid_raw(
                "spec.clusterIPs",
                &format!("[]string{{{new_ip:?}}}"),
                &format!(
                    "failed to allocate IP {new_ip}: the provided IP ({new_ip}) is not in the valid range. The range of valid IPs is {}",
                    self.cidr
                ),
            )));
        }

        // NodePorts: kept across updates when omitted, allocated when missing, range-checked.
        let node_ports = wants_node_ports(obj);
        let old_ports: Vec<Value> = old
            .and_then(|o| o["spec"]["ports"].as_array().cloned())
            .unwrap_or_default();
        let mut used: Option<HashSet<String>> = None;
        let count = obj["spec"]["ports"].as_array().map_or(0, Vec::len);
        for i in 0..count {
            let port = &mut obj["spec"]["ports"][i];
            if !node_ports {
                if let Some(p) = port.as_object_mut() {
                    p.remove("nodePort");
                }
                continue;
            }
            match port["nodePort"].as_i64().filter(|n| *n != 0) {
                Some(np) => {
                    let in_range = u16::try_from(np).is_ok_and(|p| self.ports.contains(&p));
                    if !in_range {
                        return Err(invalid(Cause::invalid_raw(
                            &format!("spec.ports[{i}].nodePort"),
                            &np.to_string(),
                            &format!(
                                "provided port is not in the valid range. The range of valid ports is {}-{}",
                                self.ports.start(),
                                self.ports.end()
                            ),
                        )));
                    }
                }
                None => {
                    let same = old_ports
                        .iter()
                        .find(|o| o["port"] == port["port"] && o["protocol"] == port["protocol"]);
                    if let Some(np) = same.and_then(|o| o["nodePort"].as_i64()) {
                        port["nodePort"] = json!(np);
                        continue;
                    }
                    if used.is_none() {
                        used = Some(self.used(store, NODE_PORT_PREFIX).await?);
                    }
                    let taken = used.get_or_insert_with(HashSet::new);
                    let np = self.pick_port(taken).ok_or_else(|| {
                        ApiError::internal("failed to allocate a nodePort: range is full")
                    })?;
                    taken.insert(np.to_string());
                    obj["spec"]["ports"][i]["nodePort"] = json!(np);
                }
            }
        }
        Ok(())
    }

    /// The values already held, from the reservation keys under `prefix`.
    async fn used(&self, store: &Store, prefix: &str) -> Result<HashSet<String>, ApiError> {
        let (items, _) = store
            .list(prefix)
            .await
            .map_err(crate::storage_status::store_error)?;
        Ok(items
            .into_iter()
            .filter_map(|v| v.key.strip_prefix(prefix).map(str::to_string))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn range_parses_and_first_ip_is_the_kubernetes_service() {
        let a = ServiceAllocator::new("10.96.0.0/12", NODE_PORTS).unwrap();
        assert_eq!(a.first_ip(), Ipv4Addr::new(10, 96, 0, 1));
        assert_eq!(a.static_band(), 256);
        assert!(a.offset("10.111.255.254").is_some());
        assert!(a.offset("10.112.0.1").is_none());
        assert!(a.offset("10.96.0.0").is_none());
        assert!(ServiceAllocator::new("10.96.0.0", NODE_PORTS).is_err());
        assert!(ServiceAllocator::new("10.96.0.0/30", NODE_PORTS).is_err());
    }

    #[test]
    fn dynamic_ips_prefer_the_upper_band_and_skip_used() {
        let a = ServiceAllocator::new("10.96.0.0/28", NODE_PORTS).unwrap();
        // /28: 16 addresses, static band 16 → only the lower band [2, 16) is usable (minus broadcast).
        let mut used = HashSet::new();
        for _ in 0..13 {
            let ip = a.pick_ip(&used).unwrap();
            assert!(a.offset(&ip).is_some_and(|o| o >= 2), "{ip}");
            assert!(used.insert(ip));
        }
        assert_eq!(a.pick_ip(&used), None);
    }

    #[test]
    fn ports_come_from_the_range() {
        let a = ServiceAllocator::new("10.96.0.0/12", 30000..=30001).unwrap();
        let mut used = HashSet::new();
        used.insert("30000".to_string());
        assert_eq!(a.pick_port(&used), Some(30001));
        used.insert("30001".to_string());
        assert_eq!(a.pick_port(&used), None);
    }
}
