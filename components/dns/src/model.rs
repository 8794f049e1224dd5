//! What DNS needs of a Service and an EndpointSlice, taken from the API objects (pure, no I/O).

use std::net::IpAddr;

use hickory_proto::rr::Name;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;

/// The label tying an EndpointSlice to its Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// Pre-`publishNotReadyAddresses` way of asking for not-ready endpoints (the spec still names it).
pub const TOLERATE_UNREADY: &str = "service.alpha.kubernetes.io/tolerate-unready-endpoints";

/// `namespace/name` of a Service.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ServiceKey {
    pub namespace: String,
    pub name: String,
}

impl ServiceKey {
    pub fn new(namespace: &str, name: &str) -> Self {
        ServiceKey {
            namespace: namespace.to_ascii_lowercase(),
            name: name.to_ascii_lowercase(),
        }
    }
}

impl std::fmt::Display for ServiceKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// `namespace/name` of an EndpointSlice.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SliceKey {
    pub namespace: String,
    pub name: String,
}

/// A named port: `_<name>._<protocol>` in SRV names. Unnamed ports get no SRV record.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Port {
    /// Lowercase.
    pub name: String,
    /// Lowercase: `tcp`, `udp` or `sctp`.
    pub protocol: String,
    pub port: u16,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServiceKind {
    /// The ClusterIPs (one per family).
    ClusterIp(Vec<IpAddr>),
    /// `clusterIP: None`: the name answers with the endpoints.
    Headless,
    /// `type: ExternalName`: a CNAME to this name.
    ExternalName(Name),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceInfo {
    pub key: ServiceKey,
    pub kind: ServiceKind,
    pub ports: Vec<Port>,
    /// `publishNotReadyAddresses` (or the tolerate-unready annotation): not-ready endpoints count too.
    pub publish_not_ready: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointInfo {
    pub addresses: Vec<IpAddr>,
    /// The endpoint's `hostname` when it is a valid DNS label (lowercase).
    pub hostname: Option<String>,
    pub ready: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SliceInfo {
    pub key: SliceKey,
    /// The Service it belongs to (its `kubernetes.io/service-name` label).
    pub service: ServiceKey,
    pub endpoints: Vec<EndpointInfo>,
    pub ports: Vec<Port>,
}

/// Why an object gives no DNS records (logged by the watcher at debug level).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ModelError {
    #[error("no namespace or name")]
    NoName,
    #[error("ExternalName service without a valid externalName ({0:?})")]
    ExternalName(String),
    #[error("no ClusterIP allocated yet")]
    NoClusterIp,
    #[error("no {SERVICE_NAME_LABEL} label")]
    NoServiceLabel,
    #[error("addressType {0} carries no IP addresses")]
    AddressType(String),
}

/// A DNS label as Kubernetes names are (RFC 1123), lowercased; None otherwise.
pub fn dns_label(s: &str) -> Option<String> {
    let ok = !s.is_empty()
        && s.len() <= 63
        && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-');
    ok.then(|| s.to_ascii_lowercase())
}

fn port(name: Option<&str>, protocol: Option<&str>, number: i32) -> Option<Port> {
    let name = dns_label(name.unwrap_or(""))?;
    let protocol = protocol.unwrap_or("TCP").to_ascii_lowercase();
    let port = u16::try_from(number).ok().filter(|p| *p != 0)?;
    Some(Port {
        name,
        protocol,
        port,
    })
}

pub fn service_info(svc: &Service) -> Result<ServiceInfo, ModelError> {
    let meta = &svc.metadata;
    let (Some(ns), Some(name)) = (meta.namespace.as_deref(), meta.name.as_deref()) else {
        return Err(ModelError::NoName);
    };
    let key = ServiceKey::new(ns, name);
    let spec = svc.spec.clone().unwrap_or_default();
    let kind = if spec.type_.as_deref() == Some("ExternalName") {
        let ext = spec.external_name.clone().unwrap_or_default();
        let trimmed = ext.trim().trim_end_matches('.');
        let target = Name::from_ascii(format!("{trimmed}."))
            .ok()
            .filter(|n| !trimmed.is_empty() && n.num_labels() > 0)
            .ok_or_else(|| ModelError::ExternalName(ext.clone()))?;
        ServiceKind::ExternalName(target.to_lowercase())
    } else {
        let mut ips: Vec<&str> = spec
            .cluster_ips
            .iter()
            .flatten()
            .map(String::as_str)
            .collect();
        if ips.is_empty() {
            ips.extend(spec.cluster_ip.as_deref());
        }
        if ips.contains(&"None") {
            ServiceKind::Headless
        } else {
            let parsed: Vec<IpAddr> = ips.iter().filter_map(|ip| ip.parse().ok()).collect();
            if parsed.is_empty() {
                return Err(ModelError::NoClusterIp);
            }
            ServiceKind::ClusterIp(parsed)
        }
    };
    let ports = spec
        .ports
        .iter()
        .flatten()
        .filter_map(|p| port(p.name.as_deref(), p.protocol.as_deref(), p.port))
        .collect();
    let tolerate = meta
        .annotations
        .as_ref()
        .and_then(|a| a.get(TOLERATE_UNREADY))
        .is_some_and(|v| v.eq_ignore_ascii_case("true"));
    Ok(ServiceInfo {
        key,
        kind,
        ports,
        publish_not_ready: spec.publish_not_ready_addresses.unwrap_or(false) || tolerate,
    })
}

pub fn slice_key(slice: &EndpointSlice) -> Result<SliceKey, ModelError> {
    let meta = &slice.metadata;
    match (meta.namespace.as_deref(), meta.name.as_deref()) {
        (Some(ns), Some(name)) => Ok(SliceKey {
            namespace: ns.to_ascii_lowercase(),
            name: name.to_string(),
        }),
        _ => Err(ModelError::NoName),
    }
}

pub fn slice_info(slice: &EndpointSlice) -> Result<SliceInfo, ModelError> {
    let key = slice_key(slice)?;
    let service = slice
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(SERVICE_NAME_LABEL))
        .ok_or(ModelError::NoServiceLabel)?;
    if !matches!(slice.address_type.as_str(), "IPv4" | "IPv6") {
        return Err(ModelError::AddressType(slice.address_type.clone()));
    }
    let endpoints = slice
        .endpoints
        .iter()
        .map(|e| EndpointInfo {
            addresses: e.addresses.iter().filter_map(|a| a.parse().ok()).collect(),
            hostname: e.hostname.as_deref().and_then(dns_label),
            // the API says a missing `ready` is unknown, to be read as ready
            ready: e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true),
        })
        .filter(|e| !e.addresses.is_empty())
        .collect();
    let ports = slice
        .ports
        .iter()
        .flatten()
        .filter_map(|p| port(p.name.as_deref(), p.protocol.as_deref(), p.port?))
        .collect();
    Ok(SliceInfo {
        service: ServiceKey::new(&key.namespace, service),
        key,
        endpoints,
        ports,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn svc(v: serde_json::Value) -> Service {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn cluster_ip_headless_and_external_name() {
        let s = service_info(&svc(json!({
            "metadata": {"namespace": "Default", "name": "web"},
            "spec": {"clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10", "fd00::10"],
                     "ports": [{"name": "http", "port": 80}, {"port": 81},
                               {"name": "DNS", "port": 53, "protocol": "UDP"}]}
        })))
        .unwrap();
        assert_eq!(s.key, ServiceKey::new("default", "web"));
        assert_eq!(
            s.kind,
            ServiceKind::ClusterIp(vec![
                "10.96.0.10".parse().unwrap(),
                "fd00::10".parse().unwrap()
            ])
        );
        assert_eq!(
            s.ports,
            [
                Port {
                    name: "http".into(),
                    protocol: "tcp".into(),
                    port: 80
                },
                Port {
                    name: "dns".into(),
                    protocol: "udp".into(),
                    port: 53
                },
            ],
            "unnamed ports have no SRV record"
        );
        assert!(!s.publish_not_ready);

        let h = service_info(&svc(json!({
            "metadata": {"namespace": "db", "name": "pg",
                         "annotations": {TOLERATE_UNREADY: "true"}},
            "spec": {"clusterIP": "None"}
        })))
        .unwrap();
        assert_eq!(h.kind, ServiceKind::Headless);
        assert!(
            h.publish_not_ready,
            "the tolerate-unready annotation counts"
        );
        let h = service_info(&svc(json!({
            "metadata": {"namespace": "db", "name": "pg"},
            "spec": {"clusterIP": "None", "publishNotReadyAddresses": true}
        })))
        .unwrap();
        assert!(h.publish_not_ready);

        let e = service_info(&svc(json!({
            "metadata": {"namespace": "default", "name": "ext"},
            "spec": {"type": "ExternalName", "externalName": "WWW.Example.com."}
        })))
        .unwrap();
        assert_eq!(
            e.kind,
            ServiceKind::ExternalName(Name::from_ascii("www.example.com.").unwrap())
        );
    }

    #[test]
    fn services_without_records() {
        let pending = svc(json!({"metadata": {"namespace": "a", "name": "b"}, "spec": {}}));
        assert_eq!(service_info(&pending), Err(ModelError::NoClusterIp));
        let no_ext = svc(json!({"metadata": {"namespace": "a", "name": "b"},
                                "spec": {"type": "ExternalName"}}));
        assert!(matches!(
            service_info(&no_ext),
            Err(ModelError::ExternalName(_))
        ));
        let nameless = svc(json!({"metadata": {}, "spec": {"clusterIP": "10.96.0.1"}}));
        assert_eq!(service_info(&nameless), Err(ModelError::NoName));
    }

    #[test]
    fn slices() {
        let s: EndpointSlice = serde_json::from_value(json!({
            "metadata": {"namespace": "db", "name": "pg-abc",
                         "labels": {SERVICE_NAME_LABEL: "pg"}},
            "addressType": "IPv4",
            "endpoints": [
                {"addresses": ["10.244.1.5"], "hostname": "pg-0", "conditions": {"ready": true}},
                {"addresses": ["10.244.1.6"], "hostname": "Not_A_Label", "conditions": {"ready": false}},
                {"addresses": ["10.244.1.7"]},
                {"addresses": ["garbage"]}
            ],
            "ports": [{"name": "pg", "port": 5432, "protocol": "TCP"}, {"port": 9}]
        }))
        .unwrap();
        let info = slice_info(&s).unwrap();
        assert_eq!(info.service, ServiceKey::new("db", "pg"));
        assert_eq!(
            info.endpoints.len(),
            3,
            "endpoints without a usable address are dropped"
        );
        assert_eq!(info.endpoints[0].hostname.as_deref(), Some("pg-0"));
        assert!(info.endpoints[0].ready);
        assert_eq!(info.endpoints[1].hostname, None);
        assert!(!info.endpoints[1].ready);
        assert!(
            info.endpoints[2].ready,
            "a missing ready condition reads as ready"
        );
        assert_eq!(
            info.ports,
            [Port {
                name: "pg".into(),
                protocol: "tcp".into(),
                port: 5432
            }]
        );

        let mut fqdn = s.clone();
        fqdn.address_type = "FQDN".into();
        assert!(matches!(slice_info(&fqdn), Err(ModelError::AddressType(_))));
        let mut unlabelled = s;
        unlabelled.metadata.labels = None;
        assert_eq!(slice_info(&unlabelled), Err(ModelError::NoServiceLabel));
    }
}
