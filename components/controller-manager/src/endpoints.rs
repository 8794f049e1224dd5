//! endpoint: for every Service with a selector, an Endpoints object of the same name listing the
//! selected pods' IPs — Ready pods in `addresses`, the others in `notReadyAddresses` — with the
//! service's ports resolved against each pod (a named targetPort is looked up in the pod's
//! containers). Services without a selector are left alone (their Endpoints are the user's); the
//! Endpoints object goes when its Service goes.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{
    EndpointAddress, EndpointPort, EndpointSubset, Endpoints, ObjectReference, Pod, Service,
    ServicePort,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{watcher, WatchStreamExt};

use crate::context::{spawn_reflector, Context};
use crate::pods::is_ready;

/// Upstream's annotation on Endpoints that leader election (not this controller) maintains.
const LEADER_ANNOTATION: &str = "control-plane.alpha.kubernetes.io/leader";
/// Marks the Endpoints / EndpointSlices of a Service without a ClusterIP.
pub const HEADLESS_LABEL: &str = "service.kubernetes.io/headless";

#[derive(Debug, thiserror::Error)]
pub enum EndpointsError {
    #[error("{action} Endpoints {key}: {source}")]
    Api {
        action: &'static str,
        key: String,
        source: kube::Error,
    },
}

/// The service's pod selector, if it has one (an empty map counts as none, like upstream).
pub fn service_selector(svc: &Service) -> Option<&BTreeMap<String, String>> {
    svc.spec
        .as_ref()?
        .selector
        .as_ref()
        .filter(|s| !s.is_empty())
}

/// Whether a service selector (a plain label map) selects the pod.
pub fn selects(selector: &BTreeMap<String, String>, pod: &Pod) -> bool {
    let labels = pod.metadata.labels.as_ref();
    selector
        .iter()
        .all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v))
}

pub fn publishes_not_ready(svc: &Service) -> bool {
    svc.spec
        .as_ref()
        .and_then(|s| s.publish_not_ready_addresses)
        .unwrap_or(false)
}

/// The pod's IPv4 address, if it has one yet.
pub fn pod_ip(pod: &Pod) -> Option<&str> {
    let status = pod.status.as_ref()?;
    let ip = status.pod_ip.as_deref().filter(|ip| !ip.is_empty())?;
    Some(ip)
}

pub fn is_terminal(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// The container port a service port reaches on this pod: a number is taken as is (defaulting to
/// the service port), a name is looked up among the pod's container ports with the same protocol.
pub fn resolve_target_port(sp: &ServicePort, pod: &Pod) -> Option<i32> {
    let protocol = sp.protocol.as_deref().unwrap_or("TCP");
    match &sp.target_port {
        None => Some(sp.port),
        Some(IntOrString::Int(0)) => Some(sp.port),
        Some(IntOrString::Int(n)) => Some(*n),
        Some(IntOrString::String(name)) => {
            if let Ok(n) = name.parse::<i32>() {
                return Some(n);
            }
            pod.spec
                .as_ref()?
                .containers
                .iter()
                .flat_map(|c| c.ports.iter().flatten())
                .find(|p| {
                    p.name.as_deref() == Some(name.as_str())
                        && p.protocol.as_deref().unwrap_or("TCP") == protocol
                })
                .map(|p| p.container_port)
        }
    }
}

/// The endpoint ports of one pod for this service; a port that cannot be resolved on this pod is
/// left out, so the pod is listed only under the ports it really serves (as upstream does).
pub fn pod_ports(svc: &Service, pod: &Pod) -> Vec<EndpointPort> {
    let ports = svc
        .spec
        .as_ref()
        .and_then(|s| s.ports.clone())
        .unwrap_or_default();
    let mut out: Vec<EndpointPort> = ports
        .iter()
        .filter_map(|sp| {
            Some(EndpointPort {
                name: sp.name.clone(),
                port: resolve_target_port(sp, pod)?,
                protocol: Some(sp.protocol.clone().unwrap_or_else(|| "TCP".into())),
                app_protocol: sp.app_protocol.clone(),
            })
        })
        .collect();
    out.sort_by(|a, b| (&a.name, a.port).cmp(&(&b.name, b.port)));
    out
}

pub fn target_ref(pod: &Pod) -> ObjectReference {
    ObjectReference {
        kind: Some("Pod".into()),
        namespace: pod.metadata.namespace.clone(),
        name: pod.metadata.name.clone(),
        uid: pod.metadata.uid.clone(),
        ..Default::default()
    }
}

/// Upstream's ShouldSetHostname: a pod's hostname names its endpoint when the pod's subdomain is the
/// Service (the StatefulSet / headless-Service DNS pattern: `<hostname>.<service>.<ns>.svc`).
pub fn should_set_hostname(pod: &Pod, svc: &Service) -> bool {
    let Some(spec) = pod.spec.as_ref() else {
        return false;
    };
    spec.hostname.as_deref().is_some_and(|h| !h.is_empty())
        && spec.subdomain.is_some()
        && spec.subdomain == svc.metadata.name
        && pod.metadata.namespace == svc.metadata.namespace
}

fn address(pod: &Pod, svc: &Service, ip: &str) -> EndpointAddress {
    EndpointAddress {
        ip: ip.to_string(),
        hostname: pod
            .spec
            .as_ref()
            .and_then(|s| s.hostname.clone())
            .filter(|_| should_set_hostname(pod, svc)),
        node_name: pod.spec.as_ref().and_then(|s| s.node_name.clone()),
        target_ref: Some(target_ref(pod)),
    }
}

/// The subsets for a service over the pods of its namespace, repacked like upstream: addresses
/// with identical port lists share a subset; everything sorted so equal inputs give equal output.
pub fn desired_subsets(svc: &Service, pods: &[Arc<Pod>]) -> Vec<EndpointSubset> {
    let Some(selector) = service_selector(svc) else {
        return Vec::new();
    };
    let tolerate_unready = publishes_not_ready(svc);
    let has_ports = svc
        .spec
        .as_ref()
        .and_then(|s| s.ports.as_ref())
        .is_some_and(|p| !p.is_empty());
    // port list (as JSON, for ordering) → (ports, ready, not ready)
    type Group = (
        Vec<EndpointPort>,
        Vec<EndpointAddress>,
        Vec<EndpointAddress>,
    );
    let mut groups: BTreeMap<String, Group> = BTreeMap::new();
    for pod in pods {
        if !selects(selector, pod) || is_terminal(pod) {
            continue;
        }
        // Upstream drops terminating pods from Endpoints unless not-ready ones are published.
        if pod.metadata.deletion_timestamp.is_some() && !tolerate_unready {
            continue;
        }
        let Some(ip) = pod_ip(pod) else { continue };
        let ports = pod_ports(svc, pod);
        if has_ports && ports.is_empty() {
            continue;
        }
        let key = serde_json::to_string(&ports).unwrap_or_default();
        let group = groups
            .entry(key)
            .or_insert_with(|| (ports, Vec::new(), Vec::new()));
        if tolerate_unready || is_ready(pod) {
            group.1.push(address(pod, svc, ip));
        } else {
            group.2.push(address(pod, svc, ip));
        }
    }
    groups
        .into_values()
        .map(|(ports, mut ready, mut not_ready)| {
            ready.sort_by(|a, b| a.ip.cmp(&b.ip));
            not_ready.sort_by(|a, b| a.ip.cmp(&b.ip));
            EndpointSubset {
                addresses: (!ready.is_empty()).then_some(ready),
                not_ready_addresses: (!not_ready.is_empty()).then_some(not_ready),
                ports: (!ports.is_empty()).then_some(ports),
            }
        })
        .collect()
}

/// The whole Endpoints object the service should have (labels copied from the service).
pub fn desired_endpoints(svc: &Service, pods: &[Arc<Pod>]) -> Endpoints {
    let mut labels = svc.metadata.labels.clone().unwrap_or_default();
    let headless = svc.spec.as_ref().and_then(|s| s.cluster_ip.as_deref()) == Some("None");
    if headless {
        labels.insert(HEADLESS_LABEL.into(), String::new());
    }
    let subsets = desired_subsets(svc, pods);
    Endpoints {
        metadata: ObjectMeta {
            name: svc.metadata.name.clone(),
            namespace: svc.metadata.namespace.clone(),
            labels: (!labels.is_empty()).then_some(labels),
            ..Default::default()
        },
        subsets: (!subsets.is_empty()).then_some(subsets),
    }
}

/// Whether the stored object already says what we want (labels and subsets).
pub fn endpoints_up_to_date(current: &Endpoints, desired: &Endpoints) -> bool {
    let norm = |s: &Option<Vec<EndpointSubset>>| s.clone().unwrap_or_default();
    let labels = |e: &Endpoints| e.metadata.labels.clone().unwrap_or_default();
    norm(&current.subsets) == norm(&desired.subsets) && labels(current) == labels(desired)
}

/// The services of the pod's namespace a pod event may change: those selecting it now, and those
/// whose current objects still list it (its labels may have changed, or it went away).
pub fn services_for_pod(
    services: &Store<Service>,
    listed: impl Fn(&str, &str) -> bool,
    pod: &Pod,
) -> Vec<ObjectRef<Service>> {
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let pod_name = pod.metadata.name.clone().unwrap_or_default();
    services
        .state()
        .iter()
        .filter(|s| s.metadata.namespace.as_deref() == Some(ns.as_str()))
        .filter(|s| {
            service_selector(s).is_some_and(|sel| selects(sel, pod))
                || listed(s.metadata.name.as_deref().unwrap_or_default(), &pod_name)
        })
        .map(|s| ObjectRef::from_obj(s.as_ref()))
        .collect()
}

fn endpoints_list_pod(ep: &Endpoints, pod: &str) -> bool {
    ep.subsets.iter().flatten().any(|s| {
        s.addresses
            .iter()
            .flatten()
            .chain(s.not_ready_addresses.iter().flatten())
            .any(|a| {
                a.target_ref
                    .as_ref()
                    .is_some_and(|r| r.name.as_deref() == Some(pod))
            })
    })
}

struct State {
    ctx: Context,
}

/// The pods a service selects, listed from the API. Not from a cache: the event that triggered
/// this sync comes from another watch, and a cache that has not caught up with it yet would make
/// us write stale addresses with nothing left to trigger a correction.
pub async fn selected_pods(
    client: &kube::Client,
    svc: &Service,
) -> Result<Vec<Arc<Pod>>, kube::Error> {
    let Some(selector) = service_selector(svc) else {
        return Ok(Vec::new());
    };
    let labels: Vec<String> = selector.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let ns = svc.metadata.namespace.clone().unwrap_or_default();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let list = pods
        .list(&ListParams::default().labels(&labels.join(",")))
        .await?;
    Ok(list.items.into_iter().map(Arc::new).collect())
}

pub async fn run(ctx: Context) {
    let (endpoints, _ep_task) = spawn_reflector::<Endpoints>(&ctx.client);
    if endpoints.wait_until_ready().await.is_err() {
        return;
    }
    let api: Api<Service> = Api::all(ctx.client.clone());
    let controller = Controller::new(api.clone(), watcher::Config::default());
    let svc_store = controller.store();
    let state = Arc::new(State { ctx: ctx.clone() });
    let ep_store = endpoints.clone();
    let client = ctx.client.clone();
    let leftovers = move || {
        endpoints
            .state()
            .iter()
            .filter(|ep| {
                !ep.metadata
                    .annotations
                    .as_ref()
                    .is_some_and(|a| a.contains_key(LEADER_ANNOTATION))
            })
            .map(|ep| {
                (
                    ep.metadata.namespace.clone().unwrap_or_default(),
                    ep.metadata.name.clone().unwrap_or_default(),
                )
            })
            .collect()
    };
    let deletions = delete_with_services(api, leftovers, move |ns, name| {
        let client = client.clone();
        async move { delete_endpoints(&client, &ns, &name).await }
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
                        ep_store
                            .get(&ObjectRef::new(svc).within(&ns))
                            .is_some_and(|ep| endpoints_list_pod(&ep, p))
                    },
                    &pod,
                )
            },
        )
        .run(reconcile, error_policy, state)
        .for_each(|_| async {});
    tokio::join!(sync, deletions);
}

/// Calls `delete(ns, service)` when a Service is deleted, and at start-up for every
/// `(ns, service)` that `leftovers` names whose service no longer exists — objects left behind by
/// services deleted while no controller ran (like upstream's checkLeftoverEndpoints).
pub async fn delete_with_services<L, D, Fut>(api: Api<Service>, leftovers: L, delete: D)
where
    L: Fn() -> Vec<(String, String)>,
    D: Fn(String, String) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let stream = watcher(api, watcher::Config::default()).default_backoff();
    let mut stream = std::pin::pin!(stream);
    let mut initial: HashSet<(String, String)> = HashSet::new();
    let key = |s: &Service| {
        (
            s.metadata.namespace.clone().unwrap_or_default(),
            s.metadata.name.clone().unwrap_or_default(),
        )
    };
    while let Some(event) = stream.next().await {
        match event {
            Ok(watcher::Event::Delete(svc)) => {
                let (ns, name) = key(&svc);
                delete(ns, name).await;
            }
            Ok(watcher::Event::Init) => initial.clear(),
            Ok(watcher::Event::InitApply(svc)) => {
                initial.insert(key(&svc));
            }
            Ok(watcher::Event::InitDone) => {
                let existing = std::mem::take(&mut initial);
                for k in leftovers() {
                    if !existing.contains(&k) {
                        delete(k.0, k.1).await;
                    }
                }
            }
            Ok(watcher::Event::Apply(_)) => {}
            Err(e) => tracing::debug!(error = %e, "service watch failed; retrying"),
        }
    }
}

async fn delete_endpoints(client: &kube::Client, ns: &str, name: &str) {
    let api: Api<Endpoints> = Api::namespaced(client.clone(), ns);
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => tracing::info!(endpoints = %format!("{ns}/{name}"), "deleted with its service"),
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => tracing::warn!(endpoints = %format!("{ns}/{name}"), error = %e, "delete failed"),
    }
}

async fn reconcile(svc: Arc<Service>, st: Arc<State>) -> Result<Action, EndpointsError> {
    if service_selector(&svc).is_none() || svc.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let ns = svc.metadata.namespace.clone().unwrap_or_default();
    let name = svc.metadata.name.clone().unwrap_or_default();
    let key = format!("{ns}/{name}");
    let err = |action| {
        let key = key.clone();
        move |source| EndpointsError::Api {
            action,
            key,
            source,
        }
    };
    let pods = selected_pods(&st.ctx.client, &svc)
        .await
        .map_err(err("listing pods"))?;
    let desired = desired_endpoints(&svc, &pods);
    let api: Api<Endpoints> = Api::namespaced(st.ctx.client.clone(), &ns);
    // Read through the API, not the cache: a stale cache would make us overwrite newer data.
    match api.get_opt(&name).await.map_err(err("reading"))? {
        None => {
            api.create(&PostParams::default(), &desired)
                .await
                .map_err(err("creating"))?;
        }
        Some(current) if !endpoints_up_to_date(&current, &desired) => {
            let mut next = desired;
            next.metadata.resource_version = current.metadata.resource_version.clone();
            next.metadata.annotations = current.metadata.annotations.clone();
            api.replace(&name, &PostParams::default(), &next)
                .await
                .map_err(err("updating"))?;
        }
        Some(_) => {}
    }
    Ok(Action::requeue(Duration::from_secs(300)))
}

fn error_policy(_svc: Arc<Service>, err: &EndpointsError, _st: Arc<State>) -> Action {
    tracing::warn!(error = %err, "endpoint");
    Action::requeue(Duration::from_secs(2))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn svc(target_port: serde_json::Value) -> Service {
        serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web"}},
            "spec": {"selector": {"app": "web"}, "clusterIP": "10.96.0.10",
                "ports": [{"name": "http", "port": 80, "targetPort": target_port, "protocol": "TCP"}]}
        }))
        .unwrap()
    }

    fn pod(name: &str, ip: Option<&str>, ready: bool, app: &str) -> Arc<Pod> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}"),
                    "labels": {"app": app}},
                "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i",
                    "ports": [{"name": "web", "containerPort": 8080}]}]},
                "status": {"phase": "Running", "podIP": ip,
                    "conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}]}
            }))
            .unwrap(),
        )
    }

    #[test]
    fn ready_and_not_ready_pods_with_numeric_target_port() {
        let pods = vec![
            pod("b", Some("10.244.0.3"), true, "web"),
            pod("a", Some("10.244.0.2"), true, "web"),
            pod("c", Some("10.244.0.4"), false, "web"),
            pod("no-ip", None, true, "web"),
            pod("other", Some("10.244.0.9"), true, "db"),
        ];
        let ep = desired_endpoints(&svc(json!(9376)), &pods);
        let subsets = ep.subsets.unwrap();
        assert_eq!(subsets.len(), 1);
        let s = &subsets[0];
        let ips: Vec<_> = s
            .addresses
            .iter()
            .flatten()
            .map(|a| a.ip.as_str())
            .collect();
        assert_eq!(ips, ["10.244.0.2", "10.244.0.3"]);
        let nr = s.not_ready_addresses.as_ref().unwrap();
        assert_eq!(nr[0].ip, "10.244.0.4");
        let a = &s.addresses.as_ref().unwrap()[0];
        assert_eq!(a.node_name.as_deref(), Some("n1"));
        let r = a.target_ref.as_ref().unwrap();
        assert_eq!(
            (r.kind.as_deref(), r.name.as_deref()),
            (Some("Pod"), Some("a"))
        );
        let port = &s.ports.as_ref().unwrap()[0];
        assert_eq!((port.name.as_deref(), port.port), (Some("http"), 9376));
        assert_eq!(ep.metadata.labels.unwrap()["app"], "web");
    }

    #[test]
    fn named_target_port_resolves_per_pod_and_unresolvable_pods_are_left_out() {
        let mut other: Pod = (*pod("x", Some("10.244.0.7"), true, "web")).clone();
        other.spec.as_mut().unwrap().containers[0]
            .ports
            .as_mut()
            .unwrap()[0]
            .name = Some("other".into());
        let pods = vec![pod("a", Some("10.244.0.2"), true, "web"), Arc::new(other)];
        let subsets = desired_subsets(&svc(json!("web")), &pods);
        assert_eq!(subsets.len(), 1);
        assert_eq!(subsets[0].ports.as_ref().unwrap()[0].port, 8080);
        assert_eq!(subsets[0].addresses.as_ref().unwrap().len(), 1);
        // No targetPort: the service port.
        let subsets = desired_subsets(&svc(serde_json::Value::Null), &pods);
        assert_eq!(subsets[0].ports.as_ref().unwrap()[0].port, 80);
        assert_eq!(subsets[0].addresses.as_ref().unwrap().len(), 2);
    }

    #[test]
    fn no_selector_means_no_endpoints_and_publish_not_ready_counts_all_ready() {
        let mut s = svc(json!(80));
        s.spec.as_mut().unwrap().selector = None;
        assert!(service_selector(&s).is_none());
        assert!(desired_subsets(&s, &[pod("a", Some("10.244.0.2"), true, "web")]).is_empty());
        let mut s = svc(json!(80));
        s.spec.as_mut().unwrap().publish_not_ready_addresses = Some(true);
        let subsets = desired_subsets(&s, &[pod("a", Some("10.244.0.2"), false, "web")]);
        assert!(subsets[0].not_ready_addresses.is_none());
        assert_eq!(subsets[0].addresses.as_ref().unwrap().len(), 1);
    }

    #[test]
    fn up_to_date_ignores_empty_versus_missing() {
        let desired = desired_endpoints(&svc(json!(80)), &[]);
        let mut current = desired.clone();
        current.subsets = Some(Vec::new());
        assert!(endpoints_up_to_date(&current, &desired));
        let other = desired_endpoints(
            &svc(json!(80)),
            &[pod("a", Some("10.244.0.2"), true, "web")],
        );
        assert!(!endpoints_up_to_date(&current, &other));
    }

    #[test]
    fn hostname_is_published_for_pods_whose_subdomain_is_the_service() {
        let named = |name: &str, subdomain: Option<&str>| {
            let mut p: Pod = (*pod(name, Some("10.244.0.2"), true, "web")).clone();
            let spec = p.spec.as_mut().unwrap();
            spec.hostname = Some(format!("{name}-host"));
            spec.subdomain = subdomain.map(String::from);
            Arc::new(p)
        };
        let svc = svc(json!(80));
        assert!(should_set_hostname(&named("a", Some("web")), &svc));
        assert!(!should_set_hostname(&named("a", Some("db")), &svc));
        assert!(!should_set_hostname(&named("a", None), &svc));
        let mut elsewhere: Pod = (*named("a", Some("web"))).clone();
        elsewhere.metadata.namespace = Some("other".into());
        assert!(!should_set_hostname(&elsewhere, &svc), "another namespace");
        let subsets = desired_subsets(&svc, &[named("a", Some("web"))]);
        let a = &subsets[0].addresses.as_ref().unwrap()[0];
        assert_eq!(a.hostname.as_deref(), Some("a-host"));
    }
}
