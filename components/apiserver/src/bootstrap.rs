//! Objects every cluster has, reconciled at start like upstream's bootstrap controllers: the
//! `kubernetes` Service (first IP of the service range, 443 → the secure port) with its Endpoints and
//! EndpointSlice pointing at this apiserver's advertise address.

use std::net::SocketAddr;

use serde_json::{json, Value};

use crate::allocator::ServiceAllocator;
use crate::registry::lifecycle::{from_stored, prepare_create, to_stored, FieldValidation};
use crate::registry::services::{ENDPOINTS, ENDPOINT_SLICES, SERVICES};
use crate::registry::ResourceSpec;
use crate::storage::{Store, StoreError};

#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    #[error("store: {0}")]
    Store(#[from] StoreError),
    #[error("building {what}: {message}")]
    Invalid { what: String, message: String },
}

fn build(spec: &ResourceSpec, ns: &str, obj: Value) -> Result<Value, BootstrapError> {
    prepare_create(spec, Some(ns), obj, FieldValidation::Strict).map_err(|e| {
        BootstrapError::Invalid {
            what: spec.kind.to_string(),
            message: e.message,
        }
    })
}

/// Creates `obj` or, when it exists with different content at `compare`, replaces that part.
async fn upsert(
    store: &Store,
    spec: &ResourceSpec,
    obj: Value,
    compare: &[&str],
) -> Result<(), BootstrapError> {
    let ns = obj["metadata"]["namespace"]
        .as_str()
        .unwrap_or("")
        .to_string();
    let name = obj["metadata"]["name"].as_str().unwrap_or("").to_string();
    let key = spec.key(Some(&ns), &name);
    for _ in 0..5 {
        match store.get(&key).await? {
            None => match store.create(&key, to_stored(&obj)).await {
                Ok(_) => return Ok(()),
                Err(StoreError::AlreadyExists) => continue,
                Err(e) => return Err(e.into()),
            },
            Some(current) => {
                let mut stored =
                    from_stored(&current.value, current.mod_revision).map_err(|e| {
                        BootstrapError::Invalid {
                            what: spec.kind.to_string(),
                            message: e.message,
                        }
                    })?;
                if compare.iter().all(|f| stored[*f] == obj[*f]) {
                    return Ok(());
                }
                for f in compare {
                    stored[*f] = obj[*f].clone();
                }
                match store
                    .update(&key, to_stored(&stored), current.mod_revision)
                    .await
                {
                    Ok(_) => return Ok(()),
                    Err(StoreError::Conflict | StoreError::NotFound) => continue,
                    Err(e) => return Err(e.into()),
                }
            }
        }
    }
    Ok(())
}

/// The `kubernetes` Service in `default`, and its Endpoints/EndpointSlice when `advertise` is a
/// routable address (not 0.0.0.0).
pub async fn kubernetes_service(
    store: &Store,
    allocator: &ServiceAllocator,
    advertise: SocketAddr,
) -> Result<(), BootstrapError> {
    let ip = allocator.first_ip().to_string();
    let port = advertise.port();
    let svc = build(
        &SERVICES,
        "default",
        json!({
            "metadata": {"name": "kubernetes", "namespace": "default",
                         "labels": {"component": "apiserver", "provider": "kubernetes"}},
            "spec": {"type": "ClusterIP", "clusterIP": ip, "sessionAffinity": "None",
                     "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": port}]},
        }),
    )?;
    let claims: Vec<(String, Vec<u8>)> = (SERVICES.reservations.map(|f| f(&svc)))
        .unwrap_or_default()
        .into_iter()
        .map(|r| (r.key, b"default/kubernetes".to_vec()))
        .collect();
    match store
        .create_claiming(
            &SERVICES.key(Some("default"), "kubernetes"),
            to_stored(&svc),
            &claims,
        )
        .await
    {
        Ok(_) => tracing::info!(cluster_ip = %ip, "created the kubernetes service"),
        Err(StoreError::AlreadyExists) => {}
        Err(StoreError::Taken(key)) => {
            tracing::warn!(%key, "the kubernetes service's ClusterIP is held by another service")
        }
        Err(e) => return Err(e.into()),
    }
    if advertise.ip().is_unspecified() {
        tracing::warn!("no --advertise-address: the kubernetes service gets no endpoints");
        return Ok(());
    }
    let addr = advertise.ip().to_string();
    let ep = build(
        &ENDPOINTS,
        "default",
        json!({
            "metadata": {"name": "kubernetes", "namespace": "default",
                         "labels": {"endpointslice.kubernetes.io/skip-mirror": "true"}},
            "subsets": [{"addresses": [{"ip": addr}],
                         "ports": [{"name": "https", "port": port, "protocol": "TCP"}]}],
        }),
    )?;
    upsert(store, &ENDPOINTS, ep, &["subsets"]).await?;
    let slice = build(
        &ENDPOINT_SLICES,
        "default",
        json!({
            "metadata": {"name": "kubernetes", "namespace": "default",
                         "labels": {"kubernetes.io/service-name": "kubernetes"}},
            "addressType": if advertise.is_ipv4() { "IPv4" } else { "IPv6" },
            "endpoints": [{"addresses": [addr], "conditions": {"ready": true}}],
            "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
        }),
    )?;
    upsert(store, &ENDPOINT_SLICES, slice, &["endpoints", "ports"]).await?;
    Ok(())
}
