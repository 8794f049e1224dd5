//! The running proxy: reflectors on Services, endpoints and Nodes feed a rate-limited sync loop (a change
//! after a quiet period syncs at once; at most one sync per `--min-sync-period` during a burst).

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{Endpoints, Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::Api;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher::Event;
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Client, Resource};
use tokio::sync::Notify;

use crate::config::{EndpointsApi, ProxyConfig};
use crate::conntrack::{Conntrack, ConntrackCli};
use crate::health::{self, Health, HealthError};
use crate::model::{
    from_endpoint_slice, from_endpoints, from_service, NodeConfig, NodeTopology, ProxyState,
};
use crate::netfilter::{Netfilter, NetfilterError, NftCli};
use crate::proxier::Proxier;
use crate::routes::{node_info, HostRoutes, IpRoutes, RouteError};
use crate::sysctl::{self, SysctlError};

/// The node label that names its zone (topology hints match it).
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("kubeconfig {path}: {message}")]
    Kubeconfig { path: String, message: String },
    #[error(transparent)]
    Health(#[from] HealthError),
    #[error(transparent)]
    Sysctl(#[from] SysctlError),
    #[error("cleanup: {0}")]
    CleanupRules(#[from] NetfilterError),
    #[error("cleanup: {0}")]
    CleanupRoutes(#[from] RouteError),
}

/// `--cleanup`: removes the `kiln` table and every route kiln installed. Safe to run twice.
pub fn cleanup(nft: &dyn Netfilter, routes: &dyn HostRoutes) -> Result<(), RunError> {
    nft.delete_table()?;
    for r in routes.list()? {
        routes.delete(&r)?;
    }
    Ok(())
}

async fn load_client(cfg: &ProxyConfig) -> Result<Client, RunError> {
    let err = |message: String| RunError::Kubeconfig {
        path: cfg.kubeconfig.display().to_string(),
        message,
    };
    let kc = Kubeconfig::read_from(&cfg.kubeconfig).map_err(|e| err(e.to_string()))?;
    let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .map_err(|e| err(e.to_string()))?;
    Client::try_from(config).map_err(|e| err(e.to_string()))
}

/// Starts a reflector for `api`; every event pokes `changed`. Returns the store and the newest
/// resourceVersion the store holds (what a sync built from it includes). Watch errors are logged once per
/// distinct message (the watcher retries with backoff by itself).
fn reflect<K>(api: Api<K>, changed: Arc<Notify>, health: Arc<Health>) -> (Store<K>, Arc<AtomicU64>)
where
    K: kube::Resource
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    let (reader, writer) = reflector::store();
    let stream = reflector::reflector(
        writer,
        watcher(api, watcher::Config::default()).default_backoff(),
    );
    let seen = Arc::new(AtomicU64::new(0));
    tokio::spawn(drive(
        stream,
        changed,
        health,
        seen.clone(),
        std::any::type_name::<K>(),
    ));
    (reader, seen)
}

/// resourceVersion as the integer kiln-apiserver (and etcd) make it; 0 when it is not one.
fn resource_version<K: Resource>(k: &K) -> u64 {
    k.meta()
        .resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

async fn drive<S, K>(
    stream: S,
    changed: Arc<Notify>,
    health: Arc<Health>,
    seen: Arc<AtomicU64>,
    kind: &'static str,
) where
    S: Stream<Item = Result<Event<K>, watcher::Error>>,
    K: Resource,
{
    let mut stream = std::pin::pin!(stream);
    let mut last_error: Option<String> = None;
    // a (re)list reaches the store only at InitDone, so its versions count from then
    let mut listing = 0;
    while let Some(ev) = stream.next().await {
        match ev {
            Ok(ev) => {
                if last_error.take().is_some() {
                    tracing::info!(kind, "watch recovered");
                }
                match &ev {
                    Event::Apply(k) | Event::Delete(k) => {
                        seen.fetch_max(resource_version(k), Ordering::SeqCst);
                    }
                    Event::Init => listing = 0,
                    Event::InitApply(k) => listing = listing.max(resource_version(k)),
                    Event::InitDone => {
                        seen.fetch_max(listing, Ordering::SeqCst);
                    }
                }
                health.queued();
                changed.notify_one();
            }
            Err(e) => {
                let msg = e.to_string();
                if last_error.as_deref() != Some(msg.as_str()) {
                    tracing::warn!(kind, error = %msg, "watch failed; retrying");
                    last_error = Some(msg);
                }
            }
        }
    }
}

#[derive(Clone)]
enum EndpointStore {
    Slices(Store<EndpointSlice>),
    Endpoints(Store<Endpoints>),
}

impl EndpointStore {
    async fn wait_until_ready(&self) {
        let _ = match self {
            EndpointStore::Slices(s) => s.wait_until_ready().await,
            EndpointStore::Endpoints(s) => s.wait_until_ready().await,
        };
    }
}

/// This node's name and zone label (the Node may not be listed yet: no zone then).
fn topology(node_name: &str, nodes: &Store<Node>) -> NodeTopology {
    let zone = nodes
        .state()
        .iter()
        .find(|n| n.metadata.name.as_deref() == Some(node_name))
        .and_then(|n| n.metadata.labels.as_ref()?.get(ZONE_LABEL).cloned())
        .filter(|z| !z.is_empty());
    NodeTopology {
        name: node_name.to_string(),
        zone,
    }
}

fn snapshot(
    services: &Store<Service>,
    endpoints: &EndpointStore,
    topology: NodeTopology,
) -> ProxyState {
    let mut state = ProxyState {
        topology,
        services: services
            .state()
            .iter()
            .filter_map(|s| from_service(s))
            .collect(),
        ..Default::default()
    };
    let groups: Vec<_> = match endpoints {
        EndpointStore::Slices(s) => s
            .state()
            .iter()
            .filter_map(|e| from_endpoint_slice(e))
            .collect(),
        EndpointStore::Endpoints(s) => s.state().iter().filter_map(|e| from_endpoints(e)).collect(),
    };
    for (key, g) in groups {
        state.add_endpoints(key, g);
    }
    state
}

/// Runs on this host's kernel (`nft`, `conntrack`, `ip`) until `shutdown` resolves.
pub async fn run(cfg: ProxyConfig, shutdown: impl Future<Output = ()>) -> Result<(), RunError> {
    let nft: Arc<dyn Netfilter> = Arc::new(NftCli::default());
    let conntrack: Arc<dyn Conntrack> = Arc::new(ConntrackCli::default());
    let routes: Arc<dyn HostRoutes> = Arc::new(IpRoutes::default());
    run_with(cfg, nft, conntrack, routes, shutdown).await
}

/// Runs against the given kernel interfaces until `shutdown` resolves. Rules and routes stay in place on
/// exit (like kube-proxy), so traffic keeps flowing while the proxy restarts.
pub async fn run_with(
    cfg: ProxyConfig,
    nft: Arc<dyn Netfilter>,
    conntrack: Arc<dyn Conntrack>,
    routes: Arc<dyn HostRoutes>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), RunError> {
    sysctl::ensure(&cfg.proc_sys)?;
    let client = load_client(&cfg).await?;
    let health = Health::new(cfg.sync_period);
    let addr = health::serve(cfg.healthz_bind_address, health.clone()).await?;
    tracing::info!(%addr, "health server listening");
    if cfg.metrics_bind_address != cfg.healthz_bind_address {
        let addr = health::serve(cfg.metrics_bind_address, health.clone()).await?;
        tracing::info!(%addr, "metrics server listening");
    }

    let changed = Arc::new(Notify::new());
    let (services, services_rv) = reflect(
        Api::<Service>::all(client.clone()),
        changed.clone(),
        health.clone(),
    );
    let (endpoints, endpoints_rv, endpoints_resource) = match cfg.endpoints_api {
        EndpointsApi::Endpointslices => {
            let (s, rv) = reflect(Api::all(client.clone()), changed.clone(), health.clone());
            (EndpointStore::Slices(s), rv, "endpointslices")
        }
        EndpointsApi::Endpoints => {
            let (s, rv) = reflect(Api::all(client.clone()), changed.clone(), health.clone());
            (EndpointStore::Endpoints(s), rv, "endpoints")
        }
    };
    let (nodes, _) = reflect(Api::<Node>::all(client), changed.clone(), health.clone());

    // A part syncs once its lists are complete: syncing rules before the Services were listed would
    // briefly drop the ones not seen yet. Rules and routes wait independently, so an API server that does
    // not serve Services (yet) still gets host-gw routes.
    let rules_ready = Arc::new(AtomicBool::new(false));
    let nodes_ready = Arc::new(AtomicBool::new(false));
    {
        let (services, endpoints, ready, notify) = (
            services.clone(),
            endpoints.clone(),
            rules_ready.clone(),
            changed.clone(),
        );
        tokio::spawn(async move {
            let _ = services.wait_until_ready().await;
            endpoints.wait_until_ready().await;
            ready.store(true, Ordering::SeqCst);
            notify.notify_one();
        });
        let (nodes, ready, notify) = (nodes.clone(), nodes_ready.clone(), changed.clone());
        tokio::spawn(async move {
            let _ = nodes.wait_until_ready().await;
            ready.store(true, Ordering::SeqCst);
            notify.notify_one();
        });
    }
    tracing::info!(node = %cfg.node_name, "waiting for the initial lists");

    let node = NodeConfig {
        cluster_cidr: cfg.cluster_cidr,
    };
    let mut proxier = Some(Proxier::new(
        node,
        cfg.node_name.clone(),
        nft,
        conntrack,
        routes,
    ));
    let mut shutdown = std::pin::pin!(shutdown);
    let mut periodic = tokio::time::interval(cfg.sync_period);
    let mut verify = true;
    let mut last_sync: Option<tokio::time::Instant> = None;
    loop {
        tokio::select! {
            _ = changed.notified() => {
                // rate limit, not delay: a change after a quiet period syncs at once; during a burst the
                // changes that arrive within min_sync_period of the last sync share the next one
                if let Some(last) = last_sync {
                    tokio::select! {
                        _ = tokio::time::sleep_until(last + cfg.min_sync_period) => {}
                        _ = &mut shutdown => break,
                    }
                }
            }
            _ = periodic.tick() => verify = true,
            _ = &mut shutdown => break,
        }
        let rules_ok = rules_ready.load(Ordering::SeqCst);
        let nodes_ok = nodes_ready.load(Ordering::SeqCst);
        if !rules_ok && !nodes_ok {
            continue;
        }
        last_sync = Some(tokio::time::Instant::now());
        // read before the snapshot: the stores already hold everything up to these versions
        let rvs = (
            services_rv.load(Ordering::SeqCst),
            endpoints_rv.load(Ordering::SeqCst),
        );
        let state =
            rules_ok.then(|| snapshot(&services, &endpoints, topology(&cfg.node_name, &nodes)));
        let node_list: Option<Vec<_>> =
            nodes_ok.then(|| nodes.state().iter().filter_map(|n| node_info(n)).collect());
        let node_ip = cfg.node_ip.or_else(|| {
            node_list
                .iter()
                .flatten()
                .find(|n| n.name == cfg.node_name)
                .and_then(|n| n.internal_ip)
        });
        let Some(mut p) = proxier.take() else { break };
        // nft and ip are short-lived child processes; keep them off the async workers
        let joined = tokio::task::spawn_blocking(move || {
            let (report, result) = p.sync(state.as_ref(), node_list.as_deref(), node_ip, verify);
            (p, report, result)
        })
        .await;
        let (p, report, result) = match joined {
            Ok(done) => done,
            Err(e) => {
                tracing::error!(error = %e, "sync task panicked");
                break;
            }
        };
        proxier = Some(p);
        health.record(report);
        if rules_ok && result.is_ok() {
            health.rules_synced("services", rvs.0);
            health.rules_synced(endpoints_resource, rvs.1);
        }
        verify = false;
        if let Err(e) = result {
            tracing::error!(error = %e, "sync failed; retrying");
            verify = true;
            tokio::select! {
                _ = tokio::time::sleep(RETRY_DELAY) => changed.notify_one(),
                _ = &mut shutdown => break,
            }
        }
    }
    tracing::info!("stopping; nftables rules and routes stay in place");
    Ok(())
}

/// How long a failed sync waits before the retry (keeps a broken nft from spinning a core).
pub const RETRY_DELAY: Duration = Duration::from_secs(1);
