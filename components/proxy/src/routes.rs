//! host-gw: a route to every other node's pod CIDR via that node's InternalIP.
//!
//! kiln's routes carry their own route protocol number ([`ROUTE_PROTO`]), so listing and cleanup only ever
//! see and remove what kiln installed, never the host's other routes.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::sync::Mutex;

use k8s_openapi::api::core::v1::Node;

use crate::host::{HostCommand, HostError};
use crate::model::Ipv4Cidr;

/// Route protocol number marking kiln's routes (`ip route … proto 252`).
pub const ROUTE_PROTO: &str = "252";

#[derive(Debug, thiserror::Error)]
pub enum RouteError {
    #[error("ip route: {0}")]
    Ip(#[from] HostError),
    #[error("cannot parse route {0:?}")]
    Parse(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Route {
    pub dst: Ipv4Cidr,
    pub via: Ipv4Addr,
}

/// A node as host-gw needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeRouteInfo {
    pub name: String,
    pub pod_cidr: Option<Ipv4Cidr>,
    pub internal_ip: Option<Ipv4Addr>,
}

pub fn node_info(node: &Node) -> Option<NodeRouteInfo> {
    let name = node.metadata.name.clone()?;
    let spec = node.spec.as_ref();
    let pod_cidr = spec
        .and_then(|s| s.pod_cidr.as_deref())
        .and_then(|c| c.parse().ok());
    let internal_ip = node
        .status
        .as_ref()
        .and_then(|s| s.addresses.as_ref())
        .and_then(|a| {
            a.iter()
                .filter(|a| a.type_ == "InternalIP")
                .find_map(|a| a.address.parse().ok())
        });
    Some(NodeRouteInfo {
        name,
        pod_cidr,
        internal_ip,
    })
}

/// Routes this node wants: one per OTHER node that has a pod CIDR and an InternalIP.
/// `self_name` and `self_ip` both identify this node (either may be unknown).
pub fn desired_routes(
    nodes: &[NodeRouteInfo],
    self_name: &str,
    self_ip: Option<Ipv4Addr>,
) -> BTreeSet<Route> {
    nodes
        .iter()
        .filter(|n| n.name != self_name)
        .filter_map(|n| {
            let via = n.internal_ip?;
            (Some(via) != self_ip).then_some(Route {
                dst: n.pod_cidr?,
                via,
            })
        })
        .collect()
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RouteOp {
    Replace(Route),
    Delete(Route),
}

/// What turns `current` (kiln's routes in the kernel) into `desired`. Deletes first, so a pod CIDR that
/// moved to another node is re-pointed rather than briefly duplicated.
pub fn plan_routes(current: &BTreeSet<Route>, desired: &BTreeSet<Route>) -> Vec<RouteOp> {
    let mut ops: Vec<RouteOp> = current
        .iter()
        .filter(|r| !desired.iter().any(|d| d.dst == r.dst))
        .map(|r| RouteOp::Delete(*r))
        .collect();
    ops.extend(desired.difference(current).map(|r| RouteOp::Replace(*r)));
    ops
}

/// Parses `ip -4 route show proto 252` output: `10.244.2.0/24 via 10.250.0.12 dev eth0 …`.
pub fn parse_routes(out: &str) -> Result<BTreeSet<Route>, RouteError> {
    let mut routes = BTreeSet::new();
    for line in out.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let bad = || RouteError::Parse(line.to_string());
        let mut words = line.split_whitespace();
        let dst = words.next().ok_or_else(bad)?;
        // iproute prints a /32 without the prefix
        let dst = if dst.contains('/') {
            dst.parse()
        } else {
            format!("{dst}/32").parse()
        }
        .map_err(|_| bad())?;
        let mut via = None;
        while let Some(w) = words.next() {
            if w == "via" {
                via = words.next().and_then(|v| v.parse().ok());
            }
        }
        // a kiln route without a gateway is not one kiln made; leave it alone
        if let Some(via) = via {
            routes.insert(Route { dst, via });
        }
    }
    Ok(routes)
}

pub trait HostRoutes: Send + Sync {
    /// kiln's routes currently in the main table.
    fn list(&self) -> Result<BTreeSet<Route>, RouteError>;
    fn replace(&self, route: &Route) -> Result<(), RouteError>;
    fn delete(&self, route: &Route) -> Result<(), RouteError>;
}

/// The `ip` tool.
#[derive(Debug, Clone, Default)]
pub struct IpRoutes {
    pub host: HostCommand,
}

impl HostRoutes for IpRoutes {
    fn list(&self) -> Result<BTreeSet<Route>, RouteError> {
        let out = self
            .host
            .run("ip", &["-4", "route", "show", "proto", ROUTE_PROTO], None)?;
        parse_routes(&out)
    }

    fn replace(&self, r: &Route) -> Result<(), RouteError> {
        let (dst, via) = (r.dst.to_string(), r.via.to_string());
        let args = [
            "-4",
            "route",
            "replace",
            &dst,
            "via",
            &via,
            "proto",
            ROUTE_PROTO,
        ];
        self.host.run("ip", &args, None)?;
        Ok(())
    }

    fn delete(&self, r: &Route) -> Result<(), RouteError> {
        let (dst, via) = (r.dst.to_string(), r.via.to_string());
        let args = [
            "-4",
            "route",
            "del",
            &dst,
            "via",
            &via,
            "proto",
            ROUTE_PROTO,
        ];
        self.host.run("ip", &args, None)?;
        Ok(())
    }
}

/// Test double: an in-memory route table that records each change.
#[derive(Debug, Default)]
pub struct RecordingRoutes {
    pub table: Mutex<BTreeSet<Route>>,
    pub ops: Mutex<Vec<RouteOp>>,
}

impl HostRoutes for RecordingRoutes {
    fn list(&self) -> Result<BTreeSet<Route>, RouteError> {
        Ok(self.table.lock().unwrap_or_else(|e| e.into_inner()).clone())
    }
    fn replace(&self, r: &Route) -> Result<(), RouteError> {
        let mut t = self.table.lock().unwrap_or_else(|e| e.into_inner());
        t.retain(|x| x.dst != r.dst);
        t.insert(*r);
        self.ops
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(RouteOp::Replace(*r));
        Ok(())
    }
    fn delete(&self, r: &Route) -> Result<(), RouteError> {
        self.table
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(r);
        self.ops
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(RouteOp::Delete(*r));
        Ok(())
    }
}

/// Brings kiln's routes to `desired`; returns the operations done. Stops at the first failure.
pub fn sync_routes(
    routes: &dyn HostRoutes,
    desired: &BTreeSet<Route>,
) -> Result<Vec<RouteOp>, RouteError> {
    let ops = plan_routes(&routes.list()?, desired);
    for op in &ops {
        match op {
            RouteOp::Replace(r) => routes.replace(r)?,
            RouteOp::Delete(r) => routes.delete(r)?,
        }
    }
    Ok(ops)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn route(dst: &str, via: &str) -> Route {
        Route {
            dst: dst.parse().unwrap(),
            via: via.parse().unwrap(),
        }
    }

    fn node(name: &str, cidr: Option<&str>, ip: Option<&str>) -> NodeRouteInfo {
        NodeRouteInfo {
            name: name.into(),
            pod_cidr: cidr.map(|c| c.parse().unwrap()),
            internal_ip: ip.map(|i| i.parse().unwrap()),
        }
    }

    #[test]
    fn node_info_reads_pod_cidr_and_internal_ip() {
        let n: Node = serde_json::from_value(json!({
            "metadata": {"name": "host2"},
            "spec": {"podCIDR": "10.244.2.0/24"},
            "status": {"addresses": [{"type": "Hostname", "address": "host2"},
                                     {"type": "InternalIP", "address": "10.250.0.12"}]}
        }))
        .unwrap();
        assert_eq!(
            node_info(&n).unwrap(),
            node("host2", Some("10.244.2.0/24"), Some("10.250.0.12"))
        );
    }

    #[test]
    fn desired_routes_skip_self_and_incomplete_nodes() {
        let nodes = [
            node("host1", Some("10.244.1.0/24"), Some("10.250.0.11")),
            node("host2", Some("10.244.2.0/24"), Some("10.250.0.12")),
            node("host3", None, Some("10.250.0.13")),
            node("host4", Some("10.244.4.0/24"), None),
            node("other-name", Some("10.244.9.0/24"), Some("10.250.0.11")),
        ];
        let d = desired_routes(&nodes, "host1", Some("10.250.0.11".parse().unwrap()));
        assert_eq!(
            d.into_iter().collect::<Vec<_>>(),
            vec![route("10.244.2.0/24", "10.250.0.12")]
        );
    }

    #[test]
    fn plan_deletes_gone_nodes_and_repoints_moved_cidrs() {
        let current: BTreeSet<_> = [
            route("10.244.2.0/24", "10.250.0.12"),
            route("10.244.3.0/24", "10.250.0.13"),
        ]
        .into();
        let desired: BTreeSet<_> = [
            route("10.244.2.0/24", "10.250.0.22"),
            route("10.244.4.0/24", "10.250.0.14"),
        ]
        .into();
        assert_eq!(
            plan_routes(&current, &desired),
            vec![
                RouteOp::Delete(route("10.244.3.0/24", "10.250.0.13")),
                RouteOp::Replace(route("10.244.2.0/24", "10.250.0.22")),
                RouteOp::Replace(route("10.244.4.0/24", "10.250.0.14")),
            ]
        );
        assert!(plan_routes(&desired, &desired).is_empty());
    }

    #[test]
    fn parses_ip_route_output() {
        let out = "10.244.2.0/24 via 10.250.0.12 dev eth0 \n10.244.3.5 via 10.250.0.13 dev eth0 onlink\n10.9.0.0/16 dev eth0 scope link\n";
        let r = parse_routes(out).unwrap();
        assert_eq!(
            r.into_iter().collect::<Vec<_>>(),
            vec![
                route("10.244.2.0/24", "10.250.0.12"),
                route("10.244.3.5/32", "10.250.0.13")
            ]
        );
        assert!(parse_routes("garbage line").is_err());
    }

    #[test]
    fn sync_applies_the_plan_to_the_host() {
        let host = RecordingRoutes::default();
        host.table
            .lock()
            .unwrap()
            .insert(route("10.244.3.0/24", "10.250.0.13"));
        let desired: BTreeSet<_> = [route("10.244.2.0/24", "10.250.0.12")].into();
        sync_routes(&host, &desired).unwrap();
        assert_eq!(*host.table.lock().unwrap(), desired);
        assert!(
            sync_routes(&host, &desired).unwrap().is_empty(),
            "second sync changes nothing"
        );
    }
}
