//! endpointslicemirroring: a Service without a selector gets its Endpoints from whoever writes them
//! (an operator, an external load balancer); upstream mirrors those custom Endpoints into
//! EndpointSlices so everything that reads slices (kiln-proxy, kiln-dns) sees them too. One slice per
//! (address type, port list), labelled with the Service's name and managed by
//! `endpointslicemirroring-controller.k8s.io`, owned by the Endpoints (so the garbage collector removes
//! them with it). Endpoints labelled `endpointslice.kubernetes.io/skip-mirror: "true"`, and those of a
//! Service that has a selector (the endpoint controller's own) or of no Service, are not mirrored:
//! their mirrored slices are deleted. As upstream's pkg/controller/endpointslicemirroring.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{EndpointAddress, Endpoints, Service};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;

use crate::context::Context;
use crate::endpointslice::{MANAGED_BY_LABEL, SERVICE_NAME_LABEL};

pub const MIRRORING_MANAGED_BY: &str = "endpointslicemirroring-controller.k8s.io";
pub const SKIP_MIRROR_LABEL: &str = "endpointslice.kubernetes.io/skip-mirror";
/// upstream's --mirroring-max-endpoints-per-subset default; also the most a mirrored slice holds.
pub const MAX_ENDPOINTS_PER_SUBSET: usize = 1000;
/// Annotations of the Endpoints that are not carried over.
const DROPPED_ANNOTATIONS: &[&str] = &[
    "endpoints.kubernetes.io/last-change-trigger-time",
    "kubectl.kubernetes.io/last-applied-configuration",
];

#[derive(Debug, thiserror::Error)]
pub enum MirroringError {
    #[error("{action} mirrored EndpointSlices of {key}: {source}")]
    Api {
        action: &'static str,
        key: String,
        source: kube::Error,
    },
}

/// Whether `endpoints` is to be mirrored, given its Service (None: there is none).
pub fn should_mirror(endpoints: &Endpoints, service: Option<&Service>) -> bool {
    let skip = endpoints
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(SKIP_MIRROR_LABEL))
        .is_some_and(|v| v == "true");
    let selectorless = service.is_some_and(|s| {
        s.spec
            .as_ref()
            .and_then(|s| s.selector.as_ref())
            .is_none_or(|sel| sel.is_empty())
    });
    !skip && selectorless && endpoints.metadata.deletion_timestamp.is_none()
}

fn address_type(ip: &str) -> Option<&'static str> {
    match ip.parse::<IpAddr>().ok()? {
        IpAddr::V4(_) => Some("IPv4"),
        IpAddr::V6(_) => Some("IPv6"),
    }
}

fn to_endpoint(a: &EndpointAddress, ready: bool) -> Endpoint {
    Endpoint {
        addresses: vec![a.ip.clone()],
        conditions: Some(EndpointConditions {
            ready: Some(ready),
            ..Default::default()
        }),
        hostname: a.hostname.clone().filter(|h| !h.is_empty()),
        node_name: a.node_name.clone(),
        target_ref: a.target_ref.clone(),
        ..Default::default()
    }
}

/// One port as a slice's identity sees it: name, number, protocol, appProtocol.
pub type PortKey = (String, i32, String, Option<String>);
/// A slice's identity among the mirrored ones: its address type and sorted ports.
pub type SliceKey = (String, Vec<PortKey>);

fn ports_key(ports: &[EndpointPort]) -> Vec<PortKey> {
    let mut key: Vec<PortKey> = ports
        .iter()
        .map(|p| {
            (
                p.name.clone().unwrap_or_default(),
                p.port.unwrap_or_default(),
                p.protocol.clone().unwrap_or_default(),
                p.app_protocol.clone(),
            )
        })
        .collect();
    key.sort();
    key
}

fn key_of(slice: &EndpointSlice) -> SliceKey {
    (
        slice.address_type.clone(),
        ports_key(slice.ports.as_deref().unwrap_or_default()),
    )
}

/// The mirrored slices `endpoints` should have, keyed by address type and ports (unnamed: created
/// with generateName). Subsets with the same ports share a slice; each holds at most
/// [`MAX_ENDPOINTS_PER_SUBSET`] endpoints, the rest are left out as upstream truncates.
pub fn desired_slices(endpoints: &Endpoints) -> BTreeMap<SliceKey, EndpointSlice> {
    let name = endpoints.metadata.name.clone().unwrap_or_default();
    let mut labels = endpoints.metadata.labels.clone().unwrap_or_default();
    labels.insert(SERVICE_NAME_LABEL.into(), name.clone());
    labels.insert(MANAGED_BY_LABEL.into(), MIRRORING_MANAGED_BY.into());
    let mut annotations = endpoints.metadata.annotations.clone().unwrap_or_default();
    annotations.retain(|k, _| !DROPPED_ANNOTATIONS.contains(&k.as_str()));
    let owner = OwnerReference {
        api_version: "v1".into(),
        kind: "Endpoints".into(),
        name: name.clone(),
        uid: endpoints.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    };
    let mut out: BTreeMap<SliceKey, EndpointSlice> = BTreeMap::new();
    for subset in endpoints.subsets.iter().flatten() {
        let mut ports: Vec<EndpointPort> = subset
            .ports
            .iter()
            .flatten()
            .map(|p| EndpointPort {
                name: Some(p.name.clone().unwrap_or_default()),
                port: Some(p.port),
                protocol: Some(p.protocol.clone().unwrap_or_else(|| "TCP".into())),
                app_protocol: p.app_protocol.clone(),
            })
            .collect();
        ports.sort_by(|a, b| (&a.name, a.port).cmp(&(&b.name, b.port)));
        let ready = subset.addresses.iter().flatten().map(|a| (a, true));
        let not_ready = subset
            .not_ready_addresses
            .iter()
            .flatten()
            .map(|a| (a, false));
        for (address, is_ready) in ready.chain(not_ready) {
            let Some(family) = address_type(&address.ip) else {
                continue;
            };
            let slice = out
                .entry((family.to_string(), ports_key(&ports)))
                .or_insert_with(|| EndpointSlice {
                    metadata: ObjectMeta {
                        generate_name: Some(format!("{name}-")),
                        namespace: endpoints.metadata.namespace.clone(),
                        labels: Some(labels.clone()),
                        annotations: (!annotations.is_empty()).then(|| annotations.clone()),
                        owner_references: Some(vec![owner.clone()]),
                        ..Default::default()
                    },
                    address_type: family.to_string(),
                    endpoints: Vec::new(),
                    ports: Some(ports.clone()),
                });
            if slice.endpoints.len() < MAX_ENDPOINTS_PER_SUBSET {
                slice.endpoints.push(to_endpoint(address, is_ready));
            }
        }
    }
    out
}

/// What to do with the existing mirrored slices to reach `desired`.
#[derive(Debug, Default, PartialEq)]
pub struct Plan {
    pub create: Vec<EndpointSlice>,
    /// Existing slices (with name and resourceVersion) carrying the desired content.
    pub update: Vec<EndpointSlice>,
    pub delete: Vec<String>,
}

pub fn plan(existing: &[EndpointSlice], mut desired: BTreeMap<SliceKey, EndpointSlice>) -> Plan {
    let mut p = Plan::default();
    for current in existing {
        let cname = current.metadata.name.clone().unwrap_or_default();
        match desired.remove(&key_of(current)) {
            None => p.delete.push(cname),
            Some(want) => {
                let same = current.endpoints == want.endpoints
                    && current.metadata.labels == want.metadata.labels
                    && current.metadata.annotations == want.metadata.annotations;
                if !same {
                    let mut next = want;
                    next.metadata.generate_name = None;
                    next.metadata.name = Some(cname);
                    next.metadata.resource_version = current.metadata.resource_version.clone();
                    p.update.push(next);
                }
            }
        }
    }
    p.create = desired.into_values().collect();
    p
}

fn mirrored_selector(service: &str) -> String {
    format!("{SERVICE_NAME_LABEL}={service},{MANAGED_BY_LABEL}={MIRRORING_MANAGED_BY}")
}

pub async fn run(ctx: Context) {
    let endpoints: Api<Endpoints> = Api::all(ctx.client.clone());
    let services: Api<Service> = Api::all(ctx.client.clone());
    let controller = Controller::new(endpoints, watcher::Config::default());
    controller
        .watches(services, watcher::Config::default(), |svc: Service| {
            Some(
                ObjectRef::<Endpoints>::new(svc.metadata.name.as_deref()?)
                    .within(svc.metadata.namespace.as_deref()?),
            )
        })
        .watches(
            Api::<EndpointSlice>::all(ctx.client.clone()),
            watcher::Config::default()
                .labels(&format!("{MANAGED_BY_LABEL}={MIRRORING_MANAGED_BY}")),
            |slice: EndpointSlice| {
                let service = slice
                    .metadata
                    .labels
                    .as_ref()?
                    .get(SERVICE_NAME_LABEL)?
                    .clone();
                Some(
                    ObjectRef::<Endpoints>::new(&service)
                        .within(slice.metadata.namespace.as_deref()?),
                )
            },
        )
        .run(reconcile, error_policy, Arc::new(ctx))
        .for_each(|_| async {})
        .await;
}

async fn reconcile(endpoints: Arc<Endpoints>, ctx: Arc<Context>) -> Result<Action, MirroringError> {
    let ns = endpoints.metadata.namespace.clone().unwrap_or_default();
    let name = endpoints.metadata.name.clone().unwrap_or_default();
    let key = format!("{ns}/{name}");
    let err = |action| {
        let key = key.clone();
        move |source| MirroringError::Api {
            action,
            key,
            source,
        }
    };
    let service = Api::<Service>::namespaced(ctx.client.clone(), &ns)
        .get_opt(&name)
        .await
        .map_err(err("reading the Service for"))?;
    let slices: Api<EndpointSlice> = Api::namespaced(ctx.client.clone(), &ns);
    let existing = slices
        .list(&ListParams::default().labels(&mirrored_selector(&name)))
        .await
        .map_err(err("listing"))?
        .items;
    let desired = if should_mirror(&endpoints, service.as_ref()) {
        desired_slices(&endpoints)
    } else {
        BTreeMap::new()
    };
    let p = plan(&existing, desired);
    for gone in &p.delete {
        match slices.delete(gone, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(err("deleting")(e)),
        }
    }
    for next in &p.update {
        let n = next.metadata.name.clone().unwrap_or_default();
        slices
            .replace(&n, &PostParams::default(), next)
            .await
            .map_err(err("updating"))?;
    }
    for new in &p.create {
        slices
            .create(&PostParams::default(), new)
            .await
            .map_err(err("creating"))?;
    }
    if !(p.create.is_empty() && p.update.is_empty() && p.delete.is_empty()) {
        tracing::debug!(endpoints = %key, created = p.create.len(), updated = p.update.len(), deleted = p.delete.len(), "mirrored");
    }
    Ok(Action::requeue(Duration::from_secs(300)))
}

fn error_policy(_e: Arc<Endpoints>, err: &MirroringError, _ctx: Arc<Context>) -> Action {
    tracing::warn!(error = %err, "endpointslicemirroring");
    Action::requeue(Duration::from_secs(2))
}

#[cfg(test)]
#[path = "endpointslice_mirroring_tests.rs"]
mod tests;
