//! The proxy's view of the cluster: Services, their ready endpoints and the node's own settings.
//!
//! Pure data, no I/O. [`from_service`], [`from_endpoints`] and [`from_endpoint_slice`] turn the API objects
//! into these types, so rendering can be tested on plain values and the runtime only shuffles objects.

use std::collections::BTreeMap;
use std::fmt;
use std::net::Ipv4Addr;
use std::str::FromStr;

use k8s_openapi::api::core::v1::{Endpoints, Service};
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
}

/// One port of an endpoint group.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct EndpointPort {
    pub name: String,
    pub protocol: Protocol,
    pub port: u16,
}

/// Ready addresses that share a port list (an Endpoints subset or an EndpointSlice).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EndpointGroup {
    pub addresses: Vec<Ipv4Addr>,
    pub ports: Vec<EndpointPort>,
}

/// Key of a Service: (namespace, name).
pub type ServiceKey = (String, String);

/// Everything one sync renders from.
#[derive(Debug, Clone, Default)]
pub struct ProxyState {
    pub services: Vec<ServiceInfo>,
    pub endpoints: BTreeMap<ServiceKey, Vec<EndpointGroup>>,
}

impl ProxyState {
    /// Adds endpoint groups for a service (slices of one service accumulate).
    pub fn add_endpoints(&mut self, key: ServiceKey, groups: Vec<EndpointGroup>) {
        self.endpoints.entry(key).or_default().extend(groups);
    }
}

/// A Service port's resolved backends, sorted and without duplicates.
///
/// Endpoint ports are matched by the service port's name (the endpoints controller resolves named
/// targetPorts and stores the number under the service port's name). Two fallbacks cover hand-written
/// endpoints: a port named like a named targetPort, and a numeric targetPort when the group lists no ports.
pub fn resolve_backends(port: &ServicePort, groups: &[EndpointGroup]) -> Vec<(Ipv4Addr, u16)> {
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
        out.extend(g.addresses.iter().map(|a| (*a, number)));
    }
    out.sort();
    out.dedup();
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

/// Ready addresses of an Endpoints object (notReadyAddresses are left out), keyed by its Service.
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
        .map(|s| EndpointGroup {
            addresses: s
                .addresses
                .iter()
                .flatten()
                .filter_map(|a| a.ip.parse().ok())
                .collect(),
            ports: s
                .ports
                .iter()
                .flatten()
                .filter_map(|p| endpoint_port(p.name.as_ref(), p.protocol.as_deref(), Some(p.port)))
                .collect(),
        })
        .collect();
    Some((key, groups))
}

/// Ready IPv4 endpoints of an EndpointSlice, keyed by the Service named in its label.
/// `conditions.ready` unset means ready (API contract).
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
    let addresses = slice
        .endpoints
        .iter()
        .filter(|e| e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true))
        .flat_map(|e| e.addresses.iter().filter_map(|a| a.parse().ok()))
        .collect();
    let ports = slice
        .ports
        .iter()
        .flatten()
        .filter_map(|p| endpoint_port(p.name.as_ref(), p.protocol.as_deref(), p.port))
        .collect();
    Some((key, vec![EndpointGroup { addresses, ports }]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ip(s: &str) -> Ipv4Addr {
        s.parse().unwrap()
    }

    #[test]
    fn cidr_parses_and_contains() {
        let c: Ipv4Cidr = "10.244.0.0/16".parse().unwrap();
        assert!(c.contains(ip("10.244.3.7")));
        assert!(!c.contains(ip("10.245.0.1")));
        assert_eq!(c.to_string(), "10.244.0.0/16");
        assert!("10.244.0.0".parse::<Ipv4Cidr>().is_err());
        assert!("10.244.0.0/33".parse::<Ipv4Cidr>().is_err());
    }

    #[test]
    fn service_conversion_reads_ports_nodeports_and_affinity() {
        let svc: Service = serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "apps"},
            "spec": {"type": "NodePort", "clusterIP": "10.96.0.10", "sessionAffinity": "ClientIP",
                "ports": [
                    {"name": "http", "port": 80, "targetPort": "http", "nodePort": 30080},
                    {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 5353, "nodePort": 30053},
                    {"name": "sctp", "port": 9, "protocol": "SCTP"}
                ]}
        }))
        .unwrap();
        let s = from_service(&svc).unwrap();
        assert_eq!(s.cluster_ip, ip("10.96.0.10"));
        assert_eq!(s.affinity_timeout, Some(DEFAULT_AFFINITY_TIMEOUT_SECONDS));
        assert_eq!(s.ports.len(), 2, "SCTP is not rendered");
        assert_eq!(s.ports[0].target_port, TargetPort::Name("http".into()));
        assert_eq!(s.ports[0].node_port, Some(30080));
        assert_eq!(s.ports[1].protocol, Protocol::Udp);
        assert_eq!(s.ports[1].target_port, TargetPort::Number(5353));
    }

    #[test]
    fn headless_and_clusterip_nodeport_fields() {
        let headless: Service = serde_json::from_value(json!({
            "metadata": {"name": "h", "namespace": "d"},
            "spec": {"clusterIP": "None", "ports": [{"port": 80}]}
        }))
        .unwrap();
        assert!(from_service(&headless).is_none());
        // a nodePort on a ClusterIP service (left over from a type change) is not served
        let cip: Service = serde_json::from_value(json!({
            "metadata": {"name": "c", "namespace": "d"},
            "spec": {"clusterIP": "10.96.0.5", "ports": [{"port": 80, "nodePort": 30001}]}
        }))
        .unwrap();
        let s = from_service(&cip).unwrap();
        assert_eq!(s.ports[0].node_port, None);
        assert_eq!(s.ports[0].target_port, TargetPort::Number(80));
    }

    #[test]
    fn endpoints_keep_only_ready_addresses() {
        let ep: Endpoints = serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "apps"},
            "subsets": [{"addresses": [{"ip": "10.244.1.2"}], "notReadyAddresses": [{"ip": "10.244.1.3"}],
                         "ports": [{"name": "http", "port": 8080}]}]
        }))
        .unwrap();
        let (key, groups) = from_endpoints(&ep).unwrap();
        assert_eq!(key, ("apps".to_string(), "web".to_string()));
        assert_eq!(groups[0].addresses, vec![ip("10.244.1.2")]);
        assert_eq!(groups[0].ports[0].port, 8080);
    }

    #[test]
    fn endpoint_slices_keep_only_ready_endpoints() {
        let slice: EndpointSlice = serde_json::from_value(json!({
            "metadata": {"name": "web-abc", "namespace": "apps", "labels": {SERVICE_NAME_LABEL: "web"}},
            "addressType": "IPv4",
            "endpoints": [
                {"addresses": ["10.244.1.2"], "conditions": {"ready": true}},
                {"addresses": ["10.244.1.3"], "conditions": {"ready": false}},
                {"addresses": ["10.244.2.2"]}
            ],
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]
        }))
        .unwrap();
        let (key, groups) = from_endpoint_slice(&slice).unwrap();
        assert_eq!(key.1, "web");
        assert_eq!(
            groups[0].addresses,
            vec![ip("10.244.1.2"), ip("10.244.2.2")]
        );
    }

    #[test]
    fn backends_resolve_by_port_name_then_target_name_then_number() {
        let port = |name: &str, t: TargetPort| ServicePort {
            name: name.into(),
            protocol: Protocol::Tcp,
            port: 80,
            target_port: t,
            node_port: None,
        };
        let g = EndpointGroup {
            addresses: vec![ip("10.244.2.2"), ip("10.244.1.2")],
            ports: vec![
                EndpointPort {
                    name: "http".into(),
                    protocol: Protocol::Tcp,
                    port: 8080,
                },
                EndpointPort {
                    name: "metrics".into(),
                    protocol: Protocol::Tcp,
                    port: 9090,
                },
                EndpointPort {
                    name: "http".into(),
                    protocol: Protocol::Udp,
                    port: 1,
                },
            ],
        };
        let groups = [g];
        let by_name = resolve_backends(&port("http", TargetPort::Number(1234)), &groups);
        assert_eq!(
            by_name,
            vec![(ip("10.244.1.2"), 8080), (ip("10.244.2.2"), 8080)]
        );
        let by_target = resolve_backends(&port("web", TargetPort::Name("metrics".into())), &groups);
        assert_eq!(by_target[0].1, 9090);
        // a group with ports but none matching contributes nothing
        assert!(resolve_backends(&port("other", TargetPort::Number(80)), &groups).is_empty());
        let bare = [EndpointGroup {
            addresses: vec![ip("10.244.1.9")],
            ports: vec![],
        }];
        assert_eq!(
            resolve_backends(&port("", TargetPort::Number(81)), &bare),
            vec![(ip("10.244.1.9"), 81)]
        );
        assert!(resolve_backends(&port("", TargetPort::Name("x".into())), &bare).is_empty());
    }
}
