//! The running server: watches of Services and EndpointSlices applied to the index event by event,
//! the DNS loops on UDP and TCP, and the health/metrics port.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::Api;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::Client;
use tokio::net::{TcpListener, UdpSocket};
use tokio::task::JoinHandle;

use crate::cache::Cache;
use crate::config::DnsConfig;
use crate::forward::Forwarder;
use crate::health::{self, Health, HealthError, Watched};
use crate::index::{Index, ZoneSettings};
use crate::model::{self, ModelError, ServiceInfo, ServiceKey, SliceInfo};
use crate::resolver::{Resolver, SharedIndex};
use crate::server;

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("--kubeconfig {path}: {message}")]
    Kubeconfig { path: String, message: String },
    #[error("--listen {addr}: cannot bind {proto}: {source}")]
    Listen {
        addr: SocketAddr,
        proto: &'static str,
        source: std::io::Error,
    },
    #[error(transparent)]
    Health(#[from] HealthError),
}

/// A client built from the kubeconfig file, like kiln-proxy's.
pub async fn load_client(cfg: &DnsConfig) -> Result<Client, RunError> {
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

/// Serves until `shutdown` resolves.
pub async fn run(cfg: DnsConfig, shutdown: impl Future<Output = ()>) -> Result<(), RunError> {
    let client = load_client(&cfg).await?;
    let running = start(cfg, client).await?;
    shutdown.await;
    tracing::info!("stopping");
    running.stop();
    Ok(())
}

/// A started server; its tasks stop when it is stopped or dropped.
#[derive(Debug)]
pub struct Running {
    /// Where DNS is served (UDP and TCP).
    pub dns_addr: SocketAddr,
    pub health_addr: SocketAddr,
    pub index: SharedIndex,
    pub health: Arc<Health>,
    tasks: Vec<JoinHandle<()>>,
}

impl Running {
    pub fn stop(mut self) {
        self.abort();
    }

    fn abort(&mut self) {
        for t in self.tasks.drain(..) {
            t.abort();
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.abort();
    }
}

/// UDP and TCP on the same address; with port 0, on the same free port.
async fn bind(addr: SocketAddr) -> Result<(UdpSocket, TcpListener), RunError> {
    let fail = |proto, source| RunError::Listen {
        addr,
        proto,
        source,
    };
    let tries = if addr.port() == 0 { 16 } else { 1 };
    let mut last = None;
    for _ in 0..tries {
        let udp = UdpSocket::bind(addr).await.map_err(|e| fail("udp", e))?;
        let bound = udp.local_addr().map_err(|e| fail("udp", e))?;
        match TcpListener::bind(bound).await {
            Ok(tcp) => return Ok((udp, tcp)),
            Err(e) => last = Some(e),
        }
    }
    Err(fail(
        "tcp",
        last.unwrap_or_else(|| std::io::Error::other("no port")),
    ))
}

/// Binds the DNS and health addresses and starts the watches and loops.
pub async fn start(cfg: DnsConfig, client: Client) -> Result<Running, RunError> {
    let (udp, tcp) = bind(cfg.listen).await?;
    let dns_addr = udp.local_addr().map_err(|source| RunError::Listen {
        addr: cfg.listen,
        proto: "udp",
        source,
    })?;
    let health = Health::new();
    let (health_addr, health_task) = health::serve(cfg.health_bind_address, health.clone()).await?;
    let settings = ZoneSettings {
        zone: cfg.cluster_domain.clone(),
        ttl: cfg.ttl,
        ns_addresses: cfg.ns_addresses(),
    };
    let index: SharedIndex = Arc::new(RwLock::new(Index::awaiting_sync(settings)));
    if cfg.upstreams.is_empty() {
        tracing::warn!("no upstream resolvers: names outside the cluster zone get SERVFAIL");
    }
    let forwarder = Forwarder::new(
        cfg.upstreams.clone(),
        cfg.forward_timeout,
        health.metrics.clone(),
    );
    let resolver = Arc::new(Resolver::new(
        index.clone(),
        Cache::new(cfg.cache_size),
        forwarder,
        health.clone(),
    ));
    let tasks = vec![
        health_task,
        tokio::spawn(watch::<Service>(
            Api::all(client.clone()),
            index.clone(),
            health.clone(),
        )),
        tokio::spawn(watch::<EndpointSlice>(
            Api::all(client),
            index.clone(),
            health.clone(),
        )),
        tokio::spawn(server::serve_udp(udp, resolver.clone())),
        tokio::spawn(server::serve_tcp(tcp, resolver)),
    ];
    tracing::info!(
        %dns_addr,
        %health_addr,
        zone = %cfg.cluster_domain,
        upstreams = ?cfg.upstreams,
        "serving DNS"
    );
    Ok(Running {
        dns_addr,
        health_addr,
        index,
        health,
        tasks,
    })
}

/// A watched kind: how its objects become index entries.
trait Indexed:
    kube::Resource<DynamicType = ()>
    + Clone
    + std::fmt::Debug
    + k8s_openapi::serde::de::DeserializeOwned
    + Send
    + Sync
    + 'static
{
    type Info: Send;
    const WHAT: Watched;
    fn info(&self) -> Result<Self::Info, ModelError>;
    fn upsert(index: &mut Index, info: Self::Info);
    fn remove(index: &mut Index, obj: &Self);
    fn replace(index: &mut Index, list: Vec<Self::Info>);
}

impl Indexed for Service {
    type Info = ServiceInfo;
    const WHAT: Watched = Watched::Services;
    fn info(&self) -> Result<ServiceInfo, ModelError> {
        model::service_info(self)
    }
    fn upsert(index: &mut Index, info: ServiceInfo) {
        index.upsert_service(info);
    }
    fn remove(index: &mut Index, obj: &Self) {
        let m = &obj.metadata;
        if let (Some(ns), Some(name)) = (&m.namespace, &m.name) {
            index.remove_service(&ServiceKey::new(ns, name));
        }
    }
    fn replace(index: &mut Index, list: Vec<ServiceInfo>) {
        index.replace_services(list);
    }
}

impl Indexed for EndpointSlice {
    type Info = SliceInfo;
    const WHAT: Watched = Watched::EndpointSlices;
    fn info(&self) -> Result<SliceInfo, ModelError> {
        model::slice_info(self)
    }
    fn upsert(index: &mut Index, info: SliceInfo) {
        index.upsert_slice(info);
    }
    fn remove(index: &mut Index, obj: &Self) {
        if let Ok(key) = model::slice_key(obj) {
            index.remove_slice(&key);
        }
    }
    fn replace(index: &mut Index, list: Vec<SliceInfo>) {
        index.replace_slices(list);
    }
}

/// Applies one kind's watch events to the index as they come. A (re)list is collected and swapped
/// in at its end, so the index never lacks the objects a relist has not delivered yet.
async fn watch<K: Indexed>(api: Api<K>, index: SharedIndex, health: Arc<Health>) {
    let kind = std::any::type_name::<K>();
    let mut stream =
        std::pin::pin!(watcher::watcher(api, watcher::Config::default()).default_backoff());
    let mut listing: Vec<K::Info> = Vec::new();
    let mut last_error: Option<String> = None;
    let info = |obj: &K| {
        obj.info()
            .map_err(|e| tracing::debug!(kind, name = ?obj.meta().name, reason = %e, "no records"))
            .ok()
    };
    while let Some(ev) = stream.next().await {
        let ev = match ev {
            Ok(ev) => ev,
            Err(e) => {
                let msg = e.to_string();
                if last_error.as_deref() != Some(msg.as_str()) {
                    tracing::warn!(kind, error = %msg, "watch failed; retrying");
                    last_error = Some(msg);
                }
                continue;
            }
        };
        if last_error.take().is_some() {
            tracing::info!(kind, "watch recovered");
        }
        let mut idx = index.write().unwrap_or_else(|e| e.into_inner());
        match ev {
            Event::Init => listing.clear(),
            Event::InitApply(obj) => listing.extend(info(&obj)),
            Event::InitDone => {
                K::replace(&mut idx, std::mem::take(&mut listing));
                health.synced(K::WHAT);
                // both watches mark under the index lock, so the second one sees the first's mark
                if health.ready() {
                    idx.mark_synced();
                }
            }
            Event::Apply(obj) => match info(&obj) {
                Some(i) => K::upsert(&mut idx, i),
                // e.g. an ExternalName emptied: whatever it answered before is gone
                None => K::remove(&mut idx, &obj),
            },
            Event::Delete(obj) => K::remove(&mut idx, &obj),
        }
        health.metrics.set_index(idx.stats());
    }
}
