//! Service → ready endpoint for an APIService, with the outcome named the way upstream's
//! availability controller reports it (ServiceNotFound, ServicePortError, EndpointsNotFound,
//! MissingEndpoints), so one lookup serves both the check and the proxy.

use serde_json::Value;

use super::{AggregatorError, ServiceRef};
use crate::registry::lifecycle::from_stored;
use crate::registry::services::{ready_slice_endpoint, ENDPOINT_SLICES, SERVICES};
use crate::storage::Store;

/// Where requests for an APIService go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub host: String,
    pub port: u16,
    /// What the serving certificate must name: `<svc>.<ns>.svc`.
    pub server_name: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolution {
    Ready(Endpoint),
    ServiceNotFound,
    ServicePortError,
    EndpointsNotFound,
    MissingEndpoints { port_name: String },
}

impl Resolution {
    /// The Available=False reason and message upstream writes for a failed lookup.
    pub fn failure(&self, svc: &ServiceRef) -> Option<(&'static str, String)> {
        let (name, ns) = (&svc.name, &svc.namespace);
        Some(match self {
            Resolution::Ready(_) => return None,
            Resolution::ServiceNotFound => (
                "ServiceNotFound",
                format!("service/{name} in {ns:?} is not present"),
            ),
            Resolution::ServicePortError => (
                "ServicePortError",
                format!("service/{name} in {ns:?} is not listening on port {}", svc.port),
            ),
            Resolution::EndpointsNotFound => (
                "EndpointsNotFound",
                format!("cannot find endpointslices for service/{name} in {ns:?}"),
            ),
            Resolution::MissingEndpoints { port_name } => (
                "MissingEndpoints",
                format!(
                    "endpointslices for service/{name} in {ns:?} have no addresses with port name {port_name:?}"
                ),
            ),
        })
    }
}

/// Picks a ready endpoint from the Service and its EndpointSlices (already filtered by the
/// `kubernetes.io/service-name` label). ExternalName Services go to their DNS name.
pub fn pick(svc_ref: &ServiceRef, service: Option<&Value>, slices: &[Value]) -> Resolution {
    let Some(service) = service else {
        return Resolution::ServiceNotFound;
    };
    let server_name = format!("{}.{}.svc", svc_ref.name, svc_ref.namespace);
    if service["spec"]["type"] == "ExternalName" {
        return Resolution::Ready(Endpoint {
            host: service["spec"]["externalName"]
                .as_str()
                .unwrap_or("")
                .to_string(),
            port: svc_ref.port,
            server_name,
        });
    }
    let Some(port) = service["spec"]["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["port"].as_u64() == Some(u64::from(svc_ref.port)))
    else {
        return Resolution::ServicePortError;
    };
    let port_name = port["name"].as_str().unwrap_or("").to_string();
    if slices.is_empty() {
        return Resolution::EndpointsNotFound;
    }
    let found = slices
        .iter()
        .find_map(|slice| ready_slice_endpoint(slice, &port_name));
    match found {
        Some((host, port)) => Resolution::Ready(Endpoint {
            host,
            port,
            server_name,
        }),
        None => Resolution::MissingEndpoints { port_name },
    }
}

/// Reads the Service and its EndpointSlices from the store and picks an endpoint.
pub async fn resolve(store: &Store, svc: &ServiceRef) -> Result<Resolution, AggregatorError> {
    let service = match store
        .get(&SERVICES.key(Some(&svc.namespace), &svc.name))
        .await?
    {
        Some(v) => from_stored(&v.value, v.mod_revision).ok(),
        None => None,
    };
    let (items, _) = store
        .list(&ENDPOINT_SLICES.key_prefix(Some(&svc.namespace)))
        .await?;
    let slices: Vec<Value> = items
        .iter()
        .filter_map(|i| from_stored(&i.value, i.mod_revision).ok())
        .filter(|s| s["metadata"]["labels"]["kubernetes.io/service-name"] == svc.name.as_str())
        .collect();
    Ok(pick(svc, service.as_ref(), &slices))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn svc_ref() -> ServiceRef {
        ServiceRef {
            namespace: "kube-system".into(),
            name: "metrics".into(),
            port: 443,
        }
    }

    fn service() -> Value {
        json!({"spec": {"ports": [{"name": "https", "port": 443, "targetPort": 4443}]}})
    }

    fn slice(ready: bool, port_name: &str) -> Value {
        json!({"endpoints": [{"addresses": ["10.0.0.9"], "conditions": {"ready": false}},
                             {"addresses": ["127.0.0.1"], "conditions": {"ready": ready}}],
               "ports": [{"name": port_name, "port": 4443}]})
    }

    #[test]
    fn a_ready_endpoint_with_the_service_ports_name_is_chosen() {
        assert_eq!(
            pick(&svc_ref(), Some(&service()), &[slice(true, "https")]),
            Resolution::Ready(Endpoint {
                host: "127.0.0.1".into(),
                port: 4443,
                server_name: "metrics.kube-system.svc".into(),
            })
        );
    }

    #[test]
    fn failures_carry_upstreams_reasons_and_messages() {
        let r = svc_ref();
        let reason = |res: Resolution| res.failure(&r).unwrap();
        assert_eq!(
            reason(pick(&r, None, &[])),
            (
                "ServiceNotFound",
                "service/metrics in \"kube-system\" is not present".into()
            )
        );
        let other_port = json!({"spec": {"ports": [{"port": 8443}]}});
        assert_eq!(
            reason(pick(&r, Some(&other_port), &[])),
            (
                "ServicePortError",
                "service/metrics in \"kube-system\" is not listening on port 443".into()
            )
        );
        assert_eq!(
            reason(pick(&r, Some(&service()), &[])).0,
            "EndpointsNotFound"
        );
        assert_eq!(
            reason(pick(&r, Some(&service()), &[slice(false, "https")])),
            (
                "MissingEndpoints",
                "endpointslices for service/metrics in \"kube-system\" have no addresses with port name \"https\"".into()
            )
        );
        assert_eq!(
            reason(pick(&r, Some(&service()), &[slice(true, "http")])).0,
            "MissingEndpoints"
        );
    }
}
