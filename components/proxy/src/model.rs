//! The proxy's view of the cluster: Services, their endpoints (with the conditions, node and topology
//! hints [`crate::topology`] chooses by) and the node's own settings.
//!
//! Pure data, no I/O. [`from_service`], [`from_endpoints`] and [`from_endpoint_slice`] turn the API objects
//! into these types, so rendering can be tested on plain values and the runtime only shuffles objects.

use std::collections::BTreeMap;
use std::fmt;
use std::net::Ipv4Addr;
use std::str::FromStr;

use k8s_openapi::api::core::v1::{EndpointAddress, Endpoints, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// Label that ties an EndpointSlice to its Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// Default idle timeout of ClientIP session affinity (Kubernetes default: 3 h).
pub const DEFAULT_AFFINITY_TIMEOUT_SECONDS: u32 = 10800;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ModelError {
    #[error("invalid IPv4 CIDR {0:?}")]
    Cidr(String),
}

/// An IPv4 network in CIDR notation, validated (host bits may be set; nft accepts and masks them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Ipv4Cidr {
    pub addr: Ipv4Addr,
    pub prefix: u8,
}

impl Ipv4Cidr {
    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        let mask = if self.prefix == 0 {
            0
        } else {
            u32::MAX << (32 - u32::from(self.prefix))
        };
        u32::from(self.addr) & mask == u32::from(ip) & mask
    }
}

impl FromStr for Ipv4Cidr {
    type Err = ModelError;
    fn from_str(s: &str) -> Result<Self, ModelError> {
        let err = || ModelError::Cidr(s.to_string());
        let (addr, prefix) = s.split_once('/').ok_or_else(err)?;
        let addr: Ipv4Addr = addr.parse().map_err(|_| err())?;
        let prefix: u8 = prefix.parse().map_err(|_| err())?;
        if prefix > 32 {
            return Err(err());
        }
        Ok(Ipv4Cidr { addr, prefix })
    }
}

impl fmt::Display for Ipv4Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

/// The node's own settings that shape the rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeConfig {
    /// Pod network of the whole cluster; ClusterIP traffic from outside it is masqueraded.
    pub cluster_cidr: Ipv4Cidr,
}

/// This node as topology sees it: the data [`crate::topology`] picks this node's endpoints by.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodeTopology {
    /// The node's name (`--hostname-override`); empty: no endpoint is local, no node hint applies.
    pub name: String,
    /// The node's `topology.kubernetes.io/zone` label.
    pub zone: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Protocol {
    Tcp,
    Udp,
}

impl Protocol {
    /// Kubernetes spelling ("TCP", the default when unset); `None` for protocols nft rules here do not cover.
    pub fn from_k8s(p: Option<&str>) -> Option<Protocol> {
        match p.unwrap_or("TCP") {
            "TCP" => Some(Protocol::Tcp),
            "UDP" => Some(Protocol::Udp),
            _ => None,
        }
    }

    /// nft keyword.
    pub fn nft(self) -> &'static str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum TargetPort {
    Number(u16),
    Name(String),
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ServicePort {
    /// Port name; endpoints carry the same name (the endpoints controller copies it).
    pub name: String,
    pub protocol: Protocol,
    pub port: u16,
    pub target_port: TargetPort,
    pub node_port: Option<u16>,
}

/// A Service as the proxy sees it. Headless and ExternalName services never become one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceInfo {
    pub namespace: String,
    pub name: String,
    pub cluster_ip: Ipv4Addr,
    pub ports: Vec<ServicePort>,
    /// ClientIP session affinity timeout in seconds, when enabled.
    pub affinity_timeout: Option<u32>,
    /// `internalTrafficPolicy: Local`: ClusterIP traffic goes to this node's endpoints only.
    pub internal_local: bool,
}

/// One port of an endpoint group.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct EndpointPort {
    pub name: String,
    pub protocol: Protocol,
    pub port: u16,
}

/// One endpoint as kube-proxy reads it from an EndpointSlice (its first address; upstream ignores the
/// others) or an Endpoints subset.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Endpoint {
    pub addr: Ipv4Addr,
    pub ready: bool,
    /// Ready or not, the endpoint still answers (differs from `ready` while it terminates).
    pub serving: bool,
    pub terminating: bool,
    /// The node the endpoint runs on: it is local when this is this node.
    pub node_name: Option<String>,
    /// `hints.forNodes` names (PreferSameNode), empty when there are none.
    pub for_nodes: Vec<String>,
    /// `hints.forZones` names (PreferSameZone / PreferClose), empty when there are none.
    pub for_zones: Vec<String>,
}

impl Endpoint {
    /// A ready endpoint on no particular node, without hints.
    pub fn ready(addr: Ipv4Addr) -> Endpoint {
        Endpoint {
            addr,
            ready: true,
            serving: true,
            terminating: false,
            node_name: None,
            for_nodes: Vec::new(),
            for_zones: Vec::new(),
        }
    }
}

/// Endpoints that share a port list (an Endpoints subset or an EndpointSlice), ready or not.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EndpointGroup {
    pub endpoints: Vec<Endpoint>,
    pub ports: Vec<EndpointPort>,
}

impl EndpointGroup {
    /// A group of ready endpoints without node or hints (hand-written Endpoints, tests).
    pub fn ready(addresses: &[Ipv4Addr], ports: Vec<EndpointPort>) -> EndpointGroup {
        EndpointGroup {
            endpoints: addresses.iter().copied().map(Endpoint::ready).collect(),
            ports,
        }
    }
}

/// A DNAT target: endpoint address and port.
pub type Backend = (Ipv4Addr, u16);

/// Key of a Service: (namespace, name).
pub type ServiceKey = (String, String);

/// Everything one sync renders from.
#[derive(Debug, Clone, Default)]
pub struct ProxyState {
    pub services: Vec<ServiceInfo>,
    pub endpoints: BTreeMap<ServiceKey, Vec<EndpointGroup>>,
    /// This node's name and zone, which endpoints are local and which hints apply (empty name: none).
    pub topology: NodeTopology,
}

impl ProxyState {
    /// Adds endpoint groups for a service (slices of one service accumulate).
    pub fn add_endpoints(&mut self, key: ServiceKey, groups: Vec<EndpointGroup>) {
        self.endpoints.entry(key).or_default().extend(groups);
    }
}

/// A Service port's endpoints with the port each is reached on, sorted by (address, port) and without
/// duplicates (two slices listing one address: the ready entry wins).
///
/// Endpoint ports are matched by the service port's name (the endpoints controller resolves named
/// targetPorts and stores the number under the service port's name). Two fallbacks cover hand-written
/// endpoints: a port named like a named targetPort, and a numeric targetPort when the group lists no ports.
pub fn resolve_endpoints<'a>(
    port: &ServicePort,
    groups: &'a [EndpointGroup],
) -> Vec<(&'a Endpoint, u16)> {
    let mut out = Vec::new();
    for g in groups {
        let same_proto = |p: &&EndpointPort| p.protocol == port.protocol;
        let by_name = g
            .ports
            .iter()
            .filter(same_proto)
            .find(|p| p.name == port.name);
        let by_target = || match &port.target_port {
            TargetPort::Name(n) => g.ports.iter().filter(same_proto).find(|p| &p.name == n),
            TargetPort::Number(_) => None,
        };
        let number = match (by_name.or_else(by_target), &port.target_port) {
            (Some(p), _) => p.port,
            (None, TargetPort::Number(n)) if g.ports.is_empty() => *n,
            _ => continue,
        };
        out.extend(g.endpoints.iter().map(|e| (e, number)));
    }
    out.sort_by_key(|(e, p)| (e.addr, *p, !e.ready, !e.serving));
    out.dedup_by_key(|(e, p)| (e.addr, *p));
    out
}

/// Converts a Service; `None` for headless, ExternalName, non-IPv4 or unallocated services.
pub fn from_service(svc: &Service) -> Option<ServiceInfo> {
    let spec = svc.spec.as_ref()?;
    if spec.type_.as_deref() == Some("ExternalName") {
        return None;
    }
    let cluster_ip: Ipv4Addr = spec.cluster_ip.as_deref()?.parse().ok()?;
    let mut ports: Vec<ServicePort> = spec
        .ports
        .iter()
        .flatten()
        .filter_map(|p| {
            let protocol = Protocol::from_k8s(p.protocol.as_deref())?;
            let port = u16::try_from(p.port).ok()?;
            let target_port = match &p.target_port {
                None => TargetPort::Number(port),
                Some(IntOrString::Int(n)) => TargetPort::Number(u16::try_from(*n).ok()?),
                Some(IntOrString::String(s)) => match s.parse::<u16>() {
                    Ok(n) => TargetPort::Number(n),
                    Err(_) => TargetPort::Name(s.clone()),
                },
            };
            let wants_node_port =
                matches!(spec.type_.as_deref(), Some("NodePort" | "LoadBalancer"));
            let node_port = p
                .node_port
                .filter(|_| wants_node_port)
                .and_then(|n| u16::try_from(n).ok())
                .filter(|n| *n != 0);
            Some(ServicePort {
                name: p.name.clone().unwrap_or_default(),
                protocol,
                port,
                target_port,
                node_port,
            })
        })
        .collect();
    ports.sort_by_key(|p| (p.protocol, p.port));
    let affinity_timeout = (spec.session_affinity.as_deref() == Some("ClientIP")).then(|| {
        spec.session_affinity_config
            .as_ref()
            .and_then(|c| c.client_ip.as_ref())
            .and_then(|c| c.timeout_seconds)
            .and_then(|t| u32::try_from(t).ok())
            .filter(|t| *t > 0)
            .unwrap_or(DEFAULT_AFFINITY_TIMEOUT_SECONDS)
    });
    Some(ServiceInfo {
        namespace: svc
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into()),
        name: svc.metadata.name.clone()?,
        cluster_ip,
        ports,
        affinity_timeout,
        internal_local: spec.internal_traffic_policy.as_deref() == Some("Local"),
    })
}

fn endpoint_port(
    name: Option<&String>,
    protocol: Option<&str>,
    port: Option<i32>,
) -> Option<EndpointPort> {
    Some(EndpointPort {
        name: name.cloned().unwrap_or_default(),
        protocol: Protocol::from_k8s(protocol)?,
        port: u16::try_from(port?).ok()?,
    })
}

/// The addresses of an Endpoints object, keyed by its Service: `addresses` ready (and serving),
/// `notReadyAddresses` neither, as upstream's Endpoints-based proxy read them.
pub fn from_endpoints(ep: &Endpoints) -> Option<(ServiceKey, Vec<EndpointGroup>)> {
    let key = (
        ep.metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into()),
        ep.metadata.name.clone()?,
    );
    let groups = ep
        .subsets
        .iter()
        .flatten()
        .map(|s| {
            let listed = |list: &Option<Vec<EndpointAddress>>, ready: bool| {
                list.iter()
                    .flatten()
                    .filter_map(|a| {
                        Some(Endpoint {
                            addr: a.ip.parse().ok()?,
                            ready,
                            serving: ready,
                            terminating: false,
                            node_name: a.node_name.clone(),
                            for_nodes: Vec::new(),
                            for_zones: Vec::new(),
                        })
                    })
                    .collect::<Vec<_>>()
            };
            let mut endpoints = listed(&s.addresses, true);
            endpoints.extend(listed(&s.not_ready_addresses, false));
            EndpointGroup {
                endpoints,
                ports: s
                    .ports
                    .iter()
                    .flatten()
                    .filter_map(|p| {
                        endpoint_port(p.name.as_ref(), p.protocol.as_deref(), Some(p.port))
                    })
                    .collect(),
            }
        })
        .collect();
    Some((key, groups))
}

/// The IPv4 endpoints of an EndpointSlice, keyed by the Service named in its label. Conditions as
/// kube-proxy reads them: `ready` and `serving` unset mean true, `terminating` unset means false.
/// Only the first address counts (upstream ignores the others).
pub fn from_endpoint_slice(slice: &EndpointSlice) -> Option<(ServiceKey, Vec<EndpointGroup>)> {
    if slice.address_type != "IPv4" {
        return None;
    }
    let service = slice
        .metadata
        .labels
        .as_ref()?
        .get(SERVICE_NAME_LABEL)?
        .clone();
    let key = (
        slice
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into()),
        service,
    );
    let endpoints = slice
        .endpoints
        .iter()
        .filter_map(|e| {
            let addr = e.addresses.first()?.parse().ok()?;
            let c = e.conditions.as_ref();
            let hints = e.hints.as_ref();
            Some(Endpoint {
                addr,
                ready: c.and_then(|c| c.ready).unwrap_or(true),
                serving: c.and_then(|c| c.serving).unwrap_or(true),
                terminating: c.and_then(|c| c.terminating).unwrap_or(false),
                node_name: e.node_name.clone(),
                for_nodes: hints
                    .and_then(|h| h.for_nodes.as_ref())
                    .map(|l| l.iter().map(|n| n.name.clone()).collect())
                    .unwrap_or_default(),
                for_zones: hints
                    .and_then(|h| h.for_zones.as_ref())
                    .map(|l| l.iter().map(|z| z.name.clone()).collect())
                    .unwrap_or_default(),
            })
        })
        .collect();
    let ports = slice
        .ports
        .iter()
        .flatten()
        .filter_map(|p| endpoint_port(p.name.as_ref(), p.protocol.as_deref(), p.port))
        .collect();
    Some((key, vec![EndpointGroup { endpoints, ports }]))
}

#[cfg(test)]
#[path = "model_tests.rs"]
mod tests;
