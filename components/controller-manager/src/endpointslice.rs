//! endpointslice: the discovery.k8s.io/v1 view of the same data the endpoint controller writes —
//! per Service with a selector, IPv4 EndpointSlices labelled `kubernetes.io/service-name`, one per
//! distinct port list. Each endpoint is upstream's podToEndpoint (staging/src/k8s.io/endpointslice):
//! ready / serving / terminating conditions, nodeName, the node's zone, the pod's hostname for the
//! headless-Service DNS pattern, and the topology hints `spec.trafficDistribution` asks for
//! ([`crate::trafficdist`]). Slices are owned by their Service and deleted with it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod, Service};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;

use crate::context::{spawn_reflector, Context};
use crate::endpoints::{
    delete_with_services, is_terminal, pod_ip, pod_ports, publishes_not_ready, selected_pods,
    selects, service_selector, services_for_pod, should_set_hostname, target_ref, HEADLESS_LABEL,
};
use crate::pods::is_ready;
use crate::trafficdist::reconcile_hints;

pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
pub const MANAGED_BY_LABEL: &str = "endpointslice.kubernetes.io/managed-by";
pub const MANAGED_BY: &str = "endpointslice-controller.k8s.io";
/// The node label an endpoint's `zone` comes from.
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";

#[derive(Debug, thiserror::Error)]
pub enum EndpointSliceError {
    #[error("{action} EndpointSlices of {key}: {source}")]
    Api {
        action: &'static str,
        key: String,
        source: kube::Error,
    },
}

/// FNV-1a, 32 bits: a stable, dependency-free hash for names derived from content.
pub fn fnv32a(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5u32, |h, b| {
        (h ^ u32::from(*b)).wrapping_mul(0x0100_0193)
    })
}

fn owner(svc: &Service) -> OwnerReference {
    OwnerReference {
        api_version: "v1".into(),
        kind: "Service".into(),
        name: svc.metadata.name.clone().unwrap_or_default(),
        uid: svc.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// Upstream's podToEndpoint. `serving` is the pod's readiness; `ready` is never true for a
/// terminating pod (for compatibility with Endpoints), unless the Service publishes not-ready
/// addresses, which makes every endpoint ready.
pub fn pod_to_endpoint(pod: &Pod, svc: &Service, ip: &str, zone: Option<String>) -> Endpoint {
    let serving = is_ready(pod);
    let terminating = pod.metadata.deletion_timestamp.is_some();
    let ready = publishes_not_ready(svc) || (serving && !terminating);
    let spec = pod.spec.as_ref();
    Endpoint {
        addresses: vec![ip.to_string()],
        conditions: Some(EndpointConditions {
            ready: Some(ready),
            serving: Some(serving),
            terminating: Some(terminating),
        }),
        hostname: spec
            .and_then(|s| s.hostname.clone())
            .filter(|_| should_set_hostname(pod, svc)),
        node_name: spec
            .and_then(|s| s.node_name.clone())
            .filter(|n| !n.is_empty()),
        zone: zone.filter(|z| !z.is_empty()),
        target_ref: Some(target_ref(pod)),
        ..Default::default()
    }
}

/// Upstream's setEndpointSliceLabels: the Service's labels except the reserved ones, the headless
/// marker when the Service has no ClusterIP, then the service-name and managed-by labels.
fn slice_labels(svc: &Service) -> BTreeMap<String, String> {
    let reserved = [SERVICE_NAME_LABEL, MANAGED_BY_LABEL, HEADLESS_LABEL];
    let mut labels: BTreeMap<String, String> = svc
        .metadata
        .labels
        .clone()
        .unwrap_or_default()
        .into_iter()
        .filter(|(k, _)| !reserved.contains(&k.as_str()))
        .collect();
    let cluster_ip = svc.spec.as_ref().and_then(|s| s.cluster_ip.as_deref());
    if matches!(cluster_ip, None | Some("" | "None")) {
        labels.insert(HEADLESS_LABEL.into(), String::new());
    }
    labels.insert(
        SERVICE_NAME_LABEL.into(),
        svc.metadata.name.clone().unwrap_or_default(),
    );
    labels.insert(MANAGED_BY_LABEL.into(), MANAGED_BY.into());
    labels
}

/// The slices the service should have, keyed by name. Names are derived from the service name and
/// the port list, so a retried reconcile finds, rather than duplicates, what it created before.
/// `zone_of` gives a node's zone label, if the node is known and has one.
pub fn desired_slices(
    svc: &Service,
    pods: &[Arc<Pod>],
    zone_of: &dyn Fn(&str) -> Option<String>,
) -> BTreeMap<String, EndpointSlice> {
    let mut out = BTreeMap::new();
    let Some(selector) = service_selector(svc) else {
        return out;
    };
    let svc_name = svc.metadata.name.clone().unwrap_or_default();
    let traffic_distribution = svc
        .spec
        .as_ref()
        .and_then(|s| s.traffic_distribution.as_deref());
    let has_ports = svc
        .spec
        .as_ref()
        .and_then(|s| s.ports.as_ref())
        .is_some_and(|p| !p.is_empty());
    let mut groups: BTreeMap<String, (Vec<EndpointPort>, Vec<Endpoint>)> = BTreeMap::new();
    for pod in pods {
        if !selects(selector, pod) || is_terminal(pod) {
            continue;
        }
        let Some(ip) = pod_ip(pod) else { continue };
        if ip.contains(':') {
            continue; // IPv4 slices only
        }
        let core_ports = pod_ports(svc, pod);
        if has_ports && core_ports.is_empty() {
            continue;
        }
        let ports: Vec<EndpointPort> = core_ports
            .into_iter()
            .map(|p| EndpointPort {
                // Always set, "" for an unnamed port, as upstream's reconciler does: `kubectl
                // describe service` dereferences it to match the Service's port names.
                name: Some(p.name.unwrap_or_default()),
                port: Some(p.port),
                protocol: p.protocol,
                app_protocol: p.app_protocol,
            })
            .collect();
        let zone = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .and_then(zone_of);
        let endpoint = pod_to_endpoint(pod, svc, ip, zone);
        let key = serde_json::to_string(&ports).unwrap_or_default();
        groups
            .entry(key)
            .or_insert_with(|| (ports, Vec::new()))
            .1
            .push(endpoint);
    }
    if groups.is_empty() {
        // Upstream keeps one empty placeholder slice, so consumers can tell "no endpoints" apart
        // from "not processed yet".
        groups.insert("[]".into(), (Vec::new(), Vec::new()));
    }
    let labels = slice_labels(svc);
    for (key, (ports, mut endpoints)) in groups {
        endpoints.sort_by(|a, b| a.addresses.cmp(&b.addresses));
        reconcile_hints(traffic_distribution, &mut endpoints);
        let prefix: String = svc_name.chars().take(200).collect();
        let name = format!("{prefix}-{:08x}", fnv32a(key.as_bytes()));
        out.insert(
            name.clone(),
            EndpointSlice {
                metadata: ObjectMeta {
                    name: Some(name),
                    namespace: svc.metadata.namespace.clone(),
                    labels: Some(labels.clone()),
                    owner_references: Some(vec![owner(svc)]),
                    ..Default::default()
                },
                address_type: "IPv4".into(),
                endpoints,
                ports: (!ports.is_empty()).then_some(ports),
            },
        );
    }
    out
}

pub fn slice_up_to_date(current: &EndpointSlice, desired: &EndpointSlice) -> bool {
    current.endpoints == desired.endpoints
        && current.ports.clone().unwrap_or_default() == desired.ports.clone().unwrap_or_default()
        && current.metadata.labels == desired.metadata.labels
        && current.address_type == desired.address_type
}

struct State {
    ctx: Context,
    nodes: Store<Node>,
}

impl State {
    fn zone_of(&self, node: &str) -> Option<String> {
        self.nodes
            .get(&ObjectRef::new(node))?
            .metadata
            .labels
            .as_ref()?
            .get(ZONE_LABEL)
            .cloned()
    }
}

fn managed_selector(service: &str) -> String {
    format!("{SERVICE_NAME_LABEL}={service},{MANAGED_BY_LABEL}={MANAGED_BY}")
}

fn slice_lists_pod(slice: &EndpointSlice, pod: &str) -> bool {
    slice.endpoints.iter().any(|e| {
        e.target_ref
            .as_ref()
            .is_some_and(|r| r.name.as_deref() == Some(pod))
    })
}

pub async fn run(ctx: Context) {
    // Only where the apiserver serves the group (an older one may not).
    let probe: Api<EndpointSlice> = Api::all(ctx.client.clone());
    if let Err(e) = probe.list(&ListParams::default().limit(1)).await {
        tracing::warn!(error = %e, "discovery.k8s.io/v1 endpointslices not served; endpointslice controller idle");
        return;
    }
    let (slices, _slices_task) = spawn_reflector::<EndpointSlice>(&ctx.client);
    // Nodes only for endpoint zones: a cache that lags a little writes the zone one resync later.
    let (nodes, _nodes_task) = spawn_reflector::<Node>(&ctx.client);
    if slices.wait_until_ready().await.is_err() || nodes.wait_until_ready().await.is_err() {
        return;
    }
    let api: Api<Service> = Api::all(ctx.client.clone());
    let controller = Controller::new(api.clone(), watcher::Config::default());
    let svc_store = controller.store();
    let state = Arc::new(State {
        ctx: ctx.clone(),
        nodes,
    });
    let mapper_slices = slices.clone();
    let managed = |s: &EndpointSlice| {
        let labels = s.metadata.labels.clone().unwrap_or_default();
        (labels.get(MANAGED_BY_LABEL).map(String::as_str) == Some(MANAGED_BY))
            .then(|| labels.get(SERVICE_NAME_LABEL).cloned())
            .flatten()
    };
    let leftovers = move || {
        slices
            .state()
            .iter()
            .filter_map(|s| {
                Some((
                    s.metadata.namespace.clone().unwrap_or_default(),
                    managed(s)?,
                ))
            })
            .collect()
    };
    let client = ctx.client.clone();
    let deletions = delete_with_services(api, leftovers, move |ns, service| {
        let api: Api<EndpointSlice> = Api::namespaced(client.clone(), &ns);
        async move {
            let lp = ListParams::default().labels(&managed_selector(&service));
            if let Err(e) = api.delete_collection(&DeleteParams::default(), &lp).await {
                tracing::warn!(service = %format!("{ns}/{service}"), error = %e, "deleting endpointslices");
            }
        }
    });
    let sync = controller
        .watches(
            Api::<Pod>::all(ctx.client.clone()),
            watcher::Config::default(),
            move |pod: Pod| {
                let ns = pod.metadata.namespace.clone().unwrap_or_default();
                services_for_pod(
                    &svc_store,
                    |svc, p| {
                        mapper_slices.state().iter().any(|s| {
                            s.metadata.namespace.as_deref() == Some(ns.as_str())
                                && managed(s).as_deref() == Some(svc)
                                && slice_lists_pod(s, p)
                        })
                    },
                    &pod,
                )
            },
        )
        .run(reconcile, error_policy, state)
        .for_each(|_| async {});
    tokio::join!(sync, deletions);
}

async fn reconcile(svc: Arc<Service>, st: Arc<State>) -> Result<Action, EndpointSliceError> {
    if service_selector(&svc).is_none() || svc.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let ns = svc.metadata.namespace.clone().unwrap_or_default();
    let name = svc.metadata.name.clone().unwrap_or_default();
    let key = format!("{ns}/{name}");
    let err = |action| {
        let key = key.clone();
        move |source| EndpointSliceError::Api {
            action,
            key,
            source,
        }
    };
    let pods = selected_pods(&st.ctx.client, &svc)
        .await
        .map_err(err("listing pods"))?;
    let mut desired = desired_slices(&svc, &pods, &|node| st.zone_of(node));
    let api: Api<EndpointSlice> = Api::namespaced(st.ctx.client.clone(), &ns);
    let existing = api
        .list(&ListParams::default().labels(&managed_selector(&name)))
        .await
        .map_err(err("listing"))?;
    for current in existing.items {
        let cname = current.metadata.name.clone().unwrap_or_default();
        match desired.remove(&cname) {
            None => {
                api.delete(&cname, &DeleteParams::default())
                    .await
                    .map_err(err("deleting"))?;
            }
            Some(want) if !slice_up_to_date(&current, &want) => {
                let mut next = want;
                next.metadata.resource_version = current.metadata.resource_version.clone();
                api.replace(&cname, &PostParams::default(), &next)
                    .await
                    .map_err(err("updating"))?;
            }
            Some(_) => {}
        }
    }
    for slice in desired.into_values() {
        api.create(&PostParams::default(), &slice)
            .await
            .map_err(err("creating"))?;
    }
    Ok(Action::requeue(Duration::from_secs(300)))
}

fn error_policy(_svc: Arc<Service>, err: &EndpointSliceError, _st: Arc<State>) -> Action {
    tracing::warn!(error = %err, "endpointslice");
    Action::requeue(Duration::from_secs(2))
}

#[cfg(test)]
#[path = "endpointslice_tests.rs"]
mod tests;
