//! The Service environment variables a container starts with, as upstream's kubelet makes them
//! (getServiceEnvVarMap, pkg/kubelet/envvars): for each Service with a cluster IP that the pod sees —
//! the `kubernetes` Service of `default` always, and with `enableServiceLinks` (the default) every Service
//! of the pod's namespace — `<NAME>_SERVICE_HOST`, `<NAME>_SERVICE_PORT` (first port),
//! `<NAME>_SERVICE_PORT_<PORTNAME>` (named ports), and the Docker-link style `<NAME>_PORT` (first port),
//! `<NAME>_PORT_<port>_<PROTO>` with `_PROTO`, `_PORT`, `_ADDR`. Pure, tested on values; the Services
//! come from [`crate::services`]. [`crate::env::build`] puts them under the container's own env.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Pod, Service};

use crate::manifest::CONFIG_SOURCE;

/// The namespace and name of the API server's own Service, whose variables every pod gets.
const MASTER_NAMESPACE: &str = "default";
const MASTER_SERVICES: &[&str] = &["kubernetes"];

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ServiceEnvError {
    /// Upstream's message: a pod from the API waits until the Services were listed once, so it does not
    /// start without KUBERNETES_SERVICE_HOST after a kubelet restart.
    #[error("services have not yet been read at least once, cannot construct envvars")]
    NotSynced,
}

/// What the kubelet knows of the cluster's Services at a container's start.
#[derive(Debug, Clone, Copy)]
pub enum Listed<'a> {
    /// No API client (no Services source): no service variables, as upstream without a lister.
    NoApi,
    /// The Services source has not completed its first list.
    NotSynced,
    Synced(&'a [Arc<Service>]),
}

/// A Service name as a variable prefix: upper case, `-` → `_`.
fn var_name(name: &str) -> String {
    name.to_uppercase().replace('-', "_")
}

/// A cluster IP that routes: not empty, not `None` (headless), which ExternalName Services lack too.
fn cluster_ip(s: &Service) -> Option<&str> {
    s.spec
        .as_ref()
        .and_then(|sp| sp.cluster_ip.as_deref())
        .filter(|ip| !ip.is_empty() && *ip != "None")
}

/// `ip:port`, with brackets for IPv6.
fn host_port(ip: &str, port: i32) -> String {
    if ip.contains(':') {
        format!("[{ip}]:{port}")
    } else {
        format!("{ip}:{port}")
    }
}

/// The variables of one Service, in upstream's order.
pub fn service_vars(s: &Service) -> Vec<(String, String)> {
    let Some(ip) = cluster_ip(s) else {
        return Vec::new();
    };
    let prefix = var_name(s.metadata.name.as_deref().unwrap_or_default());
    let ports = s
        .spec
        .as_ref()
        .and_then(|sp| sp.ports.as_deref())
        .unwrap_or_default();
    let mut out = vec![(format!("{prefix}_SERVICE_HOST"), ip.to_string())];
    // A Service with a cluster IP has ports (validation); without, there is nothing more to say.
    let Some(first) = ports.first() else {
        return out;
    };
    out.push((format!("{prefix}_SERVICE_PORT"), first.port.to_string()));
    for p in ports {
        if let Some(name) = p.name.as_deref().filter(|n| !n.is_empty()) {
            out.push((
                format!("{prefix}_SERVICE_PORT_{}", var_name(name)),
                p.port.to_string(),
            ));
        }
    }
    for (i, p) in ports.iter().enumerate() {
        let proto = p
            .protocol
            .as_deref()
            .filter(|v| !v.is_empty())
            .unwrap_or("TCP");
        let lower = proto.to_lowercase();
        let url = format!("{lower}://{}", host_port(ip, p.port));
        if i == 0 {
            // Docker's links special-case the first port.
            out.push((format!("{prefix}_PORT"), url.clone()));
        }
        let port_prefix = format!("{prefix}_PORT_{}_{}", p.port, proto.to_uppercase());
        out.push((port_prefix.clone(), url));
        out.push((format!("{port_prefix}_PROTO"), lower));
        out.push((format!("{port_prefix}_PORT"), p.port.to_string()));
        out.push((format!("{port_prefix}_ADDR"), ip.to_string()));
    }
    out
}

/// A static pod (from a manifest file): upstream does not make it wait for the Services.
fn is_static(pod: &Pod) -> bool {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(CONFIG_SOURCE))
        .is_some_and(|s| s != "api")
}

/// The Services `pod` sees, by name: the master Services of `default`, and with service links those of
/// its namespace (one there named like a master Service replaces it, as upstream's map does).
fn visible<'a>(pod: &Pod, services: &'a [Arc<Service>]) -> BTreeMap<String, &'a Service> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let links = pod
        .spec
        .as_ref()
        .and_then(|s| s.enable_service_links)
        // The API server defaults it to true.
        .unwrap_or(true);
    let mut out: BTreeMap<String, &Service> = BTreeMap::new();
    for s in services {
        if cluster_ip(s).is_none() {
            continue;
        }
        let name = s.metadata.name.clone().unwrap_or_default();
        let s_ns = s.metadata.namespace.as_deref().unwrap_or_default();
        if s_ns == MASTER_NAMESPACE && MASTER_SERVICES.contains(&name.as_str()) {
            out.entry(name).or_insert(s);
        } else if s_ns == ns && links {
            out.insert(name, s);
        }
    }
    out
}

/// The Service variables of `pod`'s containers, sorted by Service name (each Service's in upstream's
/// order). A pod from the API fails (to be retried) until the Services were listed once; a static pod
/// starts with whatever is known.
pub fn for_pod(pod: &Pod, listed: Listed<'_>) -> Result<Vec<(String, String)>, ServiceEnvError> {
    let services = match listed {
        Listed::NoApi => return Ok(Vec::new()),
        Listed::NotSynced if is_static(pod) => return Ok(Vec::new()),
        Listed::NotSynced => return Err(ServiceEnvError::NotSynced),
        Listed::Synced(s) => s,
    };
    let mut out: Vec<(String, String)> = Vec::new();
    for s in visible(pod, services).values() {
        for (k, v) in service_vars(s) {
            // Two Services cannot normally make the same name; if they do, the first keeps it.
            if !out.iter().any(|(have, _)| *have == k) {
                out.push((k, v));
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
#[path = "service_env_tests.rs"]
mod tests;
