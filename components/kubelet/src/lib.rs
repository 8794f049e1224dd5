//! kiln-kubelet: the node agent. Runs static pods from a manifest directory on the `kiln-host` runtime,
//! registers the Node, keeps its Lease and reports mirror pods; runs the workload pods bound to its node on
//! containerd over CRI ([`workloads`], [`runtime::cri`]) and writes the node's CNI config.
//!
//! Static pods start without an API server (the control plane is made of them); the [`agent`] keeps retrying
//! until the API server answers.

pub mod agent;
pub mod allocatable;
pub mod api_client;
pub mod apiserver_lb;
pub mod apparmor;
pub mod cgroupfs;
pub mod cni;
pub mod cni_gc;
pub mod condition_times;
pub mod config;
pub mod config_file;
pub mod container_status;
pub mod cri_log;
pub mod dns_config;
pub mod env;
pub mod env_resources;
pub mod etc_hosts;
pub mod events;
pub mod eviction;
pub mod host_ports;
pub mod init_containers;
pub mod lease;
pub mod local_path;
pub mod local_path_plan;
pub mod logs;
pub mod manifest;
pub mod mirror;
pub mod node;
pub mod pod_admit;
pub mod pod_hostname;
pub mod pod_objects;
pub mod pod_phase;
pub mod pod_resize;
pub mod qos_cgroups;
pub mod qos_manager;
pub mod runtime;
pub mod server;
pub mod service_env;
pub mod services;
pub mod sidecars;
pub mod static_pods;
pub mod status_manager;
pub mod sysctl_admission;
pub mod termination_message;
pub mod tls_bootstrap;
pub mod volumes;
pub mod workloads;

use std::sync::Arc;

use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use agent::AgentState;
pub use config::{Flags, KubeletConfig};
use runtime::cri::{CriRuntime, GrpcCri, WorkerConfig};
use runtime::{Backoff, HostRuntime, Runtime};
use static_pods::StaticPods;

#[derive(Debug, thiserror::Error)]
pub enum KubeletError {
    #[error("creating {path}: {source}")]
    Dir {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Cni(#[from] cni::CniError),
    #[error(transparent)]
    Cri(#[from] runtime::cri::grpc::GrpcError),
    #[error("cleanup: {0}")]
    Cleanup(String),
    #[error(transparent)]
    ApiServerLb(#[from] apiserver_lb::LbError),
    #[error("kubelet server: {0}")]
    Server(#[from] server::ServerError),
    #[error("pods' cgroups: {0}")]
    Cgroups(#[from] cgroupfs::CgroupError),
}

/// `kiln-kubelet --cleanup`: remove every kiln-managed pod sandbox (and with it its containers) through
/// CRI. Returns how many were removed.
pub async fn cleanup_workloads(endpoint: &str) -> Result<usize, KubeletError> {
    let client = Arc::new(GrpcCri::new(endpoint)?);
    let rt = CriRuntime::new(
        client,
        WorkerConfig {
            log_root: std::path::PathBuf::from("/var/log/pods"),
            pause_image: String::new(),
            backoff: Backoff {
                base: std::time::Duration::from_secs(10),
                max: std::time::Duration::from_secs(300),
            },
            node_name: String::new(),
            node_ip: String::new(),
            pods_root: std::path::PathBuf::from("/var/lib/kiln/kubelet/pods"),
            secrets_in_memory: false,
            allocatable: Default::default(),
            dns: Default::default(),
            node_hosts_file: etc_hosts::NODE_HOSTS.into(),
            cgroups: None,
            pod_pids_limit: None,
        },
        std::time::Duration::from_secs(1),
    );
    // A runtime that knows no pods treats every sandbox it labelled as unknown: all are removed.
    let removed = rt
        .remove_unknown_sandboxes()
        .await
        .map_err(|e| KubeletError::Cleanup(e.to_string()))?;
    // Then their volumes (tmpfs unmounted), under the default root dir.
    volumes::remove_orphans(std::path::Path::new("/var/lib/kiln/kubelet/pods"), &[])
        .map_err(|e| KubeletError::Cleanup(e.to_string()))?;
    // And the pods' cgroups, now empty, with kubepods and its tiers.
    cgroupfs::Cgroups::remove(&cgroupfs::HostCgroups::detect(), qos_cgroups::KUBEPODS)?;
    Ok(removed)
}

/// A running kubelet. Dropping it without `shutdown` still kills the pods' processes (runtime drop).
pub struct KubeletHandle {
    pub runtime: Arc<HostRuntime>,
    /// The workload pods' runtime, when CRI is configured.
    pub cri_runtime: Option<Arc<CriRuntime>>,
    pub static_pods: Arc<StaticPods>,
    pub agent_state: watch::Receiver<AgentState>,
    /// The node's API client as the agent loads it (again after each certificate rotation).
    pub api_client: Arc<api_client::ClientSwitch>,
    shutdown: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl KubeletHandle {
    /// Stops the agent and every static pod (SIGTERM, grace, SIGKILL), then returns.
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        for t in self.tasks {
            let _ = t.await;
        }
    }

    /// Resolves when the kubelet's tasks end (they end only on shutdown).
    pub async fn wait(&mut self) {
        for t in self.tasks.iter_mut() {
            let _ = t.await;
        }
    }
}

/// Starts the kubelet: the static pod loop right away, the node agent beside it.
pub async fn run(cfg: KubeletConfig) -> Result<KubeletHandle, KubeletError> {
    for dir in [&cfg.root_dir, &cfg.pod_log_dir] {
        std::fs::create_dir_all(dir).map_err(|source| KubeletError::Dir {
            path: dir.display().to_string(),
            source,
        })?;
    }
    tracing::info!(node = %cfg.node_name, ip = %cfg.node_ip, manifests = %cfg.pod_manifest_path.display(), "starting kiln-kubelet");
    let runtime = Arc::new(HostRuntime::new(
        &cfg.pod_log_dir,
        cfg.backoff_base,
        cfg.backoff_max,
        &cfg.node_name,
        cfg.node_ip,
    ));
    let dyn_runtime: Arc<dyn Runtime> = runtime.clone();
    let static_pods = Arc::new(StaticPods::new(
        &cfg.pod_manifest_path,
        &cfg.node_name,
        dyn_runtime.clone(),
    ));
    let (shutdown, shutdown_rx) = watch::channel(false);
    // First: everything below that talks to the API may go through it.
    if let Some((listen, backends)) = &cfg.apiserver_lb {
        apiserver_lb::start(*listen, backends.clone(), shutdown_rx.clone()).await?;
    }
    let pods_task = tokio::spawn(
        static_pods
            .clone()
            .run(cfg.file_check_frequency, shutdown_rx.clone()),
    );
    let mut tasks = vec![pods_task];
    let clients = Arc::new(api_client::ClientSwitch::default());
    // The eviction manager (with the workload pods) sets it; the node agent reports it.
    let (pressure, pressure_rx) = eviction::pressure_channel();
    // The CRI runtime's features (supplementalGroupsPolicy), once read; None: not reported.
    let (features_tx, features_rx) = watch::channel(None);
    let cri_runtime = match &cfg.cri {
        Some(cri) => {
            let rt = start_cri(&cfg, cri)?;
            if let Some(cgroups) = rt.worker_config().cgroups.clone() {
                let pods = rt.clone();
                tasks.push(tokio::spawn(qos_manager::run(
                    cgroups,
                    move || {
                        pods.pods_with_status()
                            .into_iter()
                            .map(|(p, _)| p)
                            .collect()
                    },
                    shutdown_rx.clone(),
                )));
            }
            tasks.push(tokio::spawn(run_workloads(
                cfg.clone(),
                rt.clone(),
                clients.clone(),
                pressure,
                features_tx,
                shutdown_rx.clone(),
            )));
            Some(rt)
        }
        None => None,
    };
    if let Some(settings) = &cfg.server {
        let pods = Arc::new(server::pods::KubeletPods {
            static_pods: static_pods.clone(),
            cri: cri_runtime.clone(),
        });
        let server = server::start(&cfg, settings, pods).await?;
        tasks.push(tokio::spawn(server.run(shutdown_rx.clone())));
    }
    let (agent, agent_state) = agent::NodeAgent::new(cfg, dyn_runtime, static_pods.clone());
    let mut agent = agent
        .with_clients(clients.clone())
        .with_pressure(pressure_rx)
        .with_runtime_features(features_rx);
    if let Some(cri) = &cri_runtime {
        agent = agent.with_container_runtime(cri.clone());
    }
    tasks.push(tokio::spawn(agent.run(shutdown_rx)));
    Ok(KubeletHandle {
        runtime,
        cri_runtime,
        static_pods,
        agent_state,
        api_client: clients,
        shutdown,
        tasks,
    })
}

fn start_cri(
    cfg: &KubeletConfig,
    cri: &config::CriSettings,
) -> Result<Arc<CriRuntime>, KubeletError> {
    if let Some(cidr) = &cri.pod_cidr {
        cni::write_conflist(&cri.cni_conf_dir, cidr)?;
    }
    check_host_resolv_conf(&cfg.dns);
    // kubepods and its QoS tiers before any pod (upstream refuses to start without them too).
    let cgroups: Option<Arc<dyn cgroupfs::Cgroups>> = if cfg.pod_cgroups {
        let host = Arc::new(cgroupfs::HostCgroups::detect());
        qos_manager::set_up(host.as_ref(), &qos_manager::kubepods_limits(cfg))?;
        Some(host)
    } else {
        None
    };
    let client = Arc::new(GrpcCri::new(&cri.endpoint)?);
    Ok(Arc::new(CriRuntime::new(
        client,
        WorkerConfig {
            log_root: cfg.pod_log_dir.clone(),
            pause_image: cri.pause_image.clone(),
            backoff: Backoff {
                base: cfg.backoff_base,
                max: cfg.backoff_max,
            },
            node_name: cfg.node_name.clone(),
            node_ip: cfg.node_ip.to_string(),
            pods_root: cfg.root_dir.join("pods"),
            secrets_in_memory: true,
            // resourceFieldRef reads what the Node reports as allocatable (node.rs).
            allocatable: node_allocatable(cfg),
            dns: cfg.dns.clone(),
            node_hosts_file: etc_hosts::NODE_HOSTS.into(),
            cgroups,
            pod_pids_limit: cfg.pod_pids_limit,
        },
        cri.sync_period,
    )))
}

/// The node's allocatable cpu and memory (capacity less reservations and hard eviction).
fn node_allocatable(cfg: &KubeletConfig) -> env_resources::NodeAllocatable {
    let capacity = [
        ("cpu".to_string(), cfg.capacity_cpu.clone()),
        ("memory".to_string(), cfg.capacity_memory.clone()),
    ]
    .into_iter()
    .collect();
    let a = cfg.allocatable(&capacity);
    env_resources::NodeAllocatable {
        cpu: a["cpu"].clone(),
        memory: a["memory"].clone(),
    }
}

/// Upstream's start-up look at the host resolver file: pods cannot start while it is unreadable, and a
/// search line near the resolver's limits is cut in every pod.
fn check_host_resolv_conf(dns: &dns_config::DnsSettings) {
    let Some(path) = dns.resolv_conf.as_deref() else {
        return;
    };
    match dns_config::read_host_resolv_conf(Some(path)) {
        Ok(Some(host)) => {
            if let Some(w) = dns_config::host_limits_warning(&host, path, &dns.cluster_domain) {
                tracing::warn!("{w}");
            }
        }
        Ok(None) => {}
        Err(e) => {
            tracing::warn!(error = %e, "reading the host's resolv.conf (pods' DNS derives from it)")
        }
    }
    if dns.cluster_dns.is_empty() {
        tracing::warn!("no --cluster-dns: ClusterFirst pods fall back to the Default DNS policy");
    }
}

/// Without --pod-cidr, the node's CIDR is the one the controller-manager's nodeipam assigns: wait for
/// spec.podCIDR on our Node, then write the CNI config for it (CRI is not ready without one).
async fn ensure_cni_config(cfg: &KubeletConfig, client: &kube::Client) -> Result<(), String> {
    let Some(cri) = &cfg.cri else { return Ok(()) };
    if cri.pod_cidr.is_some() {
        return Ok(());
    }
    let nodes: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(client.clone());
    let node = nodes.get(&cfg.node_name).await.map_err(|e| e.to_string())?;
    let cidr = node
        .spec
        .and_then(|s| s.pod_cidr)
        .ok_or_else(|| format!("node {} has no spec.podCIDR yet", cfg.node_name))?;
    cni::write_conflist(&cri.cni_conf_dir, &cidr).map_err(|e| e.to_string())?;
    Ok(())
}

/// Waits for the container runtime and the API server (both may come up after the kubelet), then syncs
/// workload pods; the first sync adopts the pods a previous kubelet run left running
/// ([`runtime::cri::CriRuntime::reconcile`]).
async fn run_workloads(
    cfg: KubeletConfig,
    rt: Arc<CriRuntime>,
    clients: Arc<api_client::ClientSwitch>,
    pressure: watch::Sender<eviction::Pressure>,
    features_tx: watch::Sender<Option<bool>>,
    mut shutdown: watch::Receiver<bool>,
) {
    // The agent loads (and bootstraps) the credentials; this loop follows its client through rotations.
    let client = tokio::select! {
        c = clients.client() => c,
        _ = shutdown.wait_for(|s| *s) => return,
    };
    // Watched from now on, so the first list is done before pods start (an API pod's containers wait
    // for it, as upstream's).
    rt.set_services(Arc::new(services::ServiceCache::start(
        client.clone(),
        shutdown.clone(),
    )));
    let mut last_error = String::new();
    loop {
        let step = async {
            ensure_cni_config(&cfg, &client).await?;
            rt.ready().await.map_err(|e| e.to_string())?;
            Ok::<_, String>(())
        };
        match step.await {
            Ok(()) => break,
            Err(e) => {
                if e != last_error {
                    tracing::warn!(error = %e, "workload pods are waiting for the container runtime / API server");
                    last_error = e;
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(std::time::Duration::from_secs(1)) => {}
            _ = shutdown.wait_for(|s| *s) => return,
        }
    }
    rt.set_objects(Arc::new(pod_objects::ApiObjects::new(
        client.clone(),
        pod_objects::kubeconfig_ca(&cfg.kubeconfig),
    )));
    // Events queue from the first pod on; the sink posts them with the kubelet's client.
    let (recorder, sink) = events::api_recorder(&cfg.node_name, events::QUEUE);
    tokio::spawn(sink.run(client.clone(), shutdown.clone()));
    let recorder: Arc<dyn events::EventRecorder> = Arc::new(recorder);
    rt.set_recorder(recorder.clone());
    let handlers = admit_handlers(&cfg, &rt, &features_tx).await;
    let workload_rt = start_eviction(&cfg, &rt, &client, recorder, pressure, &shutdown, handlers);
    // Leaked CNI IP reservations: released once the runtime has reconciled, then periodically.
    if let Some(cri) = &cfg.cri {
        let gc = cni_gc::run(
            rt.cri().clone(),
            cri.cni_gc.clone(),
            rt.adopted(),
            shutdown.clone(),
        );
        tokio::spawn(gc);
    }
    local_path::start(
        client.clone(),
        &cfg.node_name,
        &cfg.local_path_dir,
        shutdown.clone(),
    );
    tracing::info!(runtime = %rt.version(), "workload pods: watching this node's pods");
    let node_ip = cfg.node_ip.to_string();
    workloads::WorkloadPods::new(&cfg.node_name, &node_ip, workload_rt)
        .run(client, shutdown)
        .await;
}

/// The admit handlers new workload pods pass (upstream's order: sysctls, the node's features,
/// AppArmor); what the host and runtime support is read once, here.
async fn admit_handlers(
    cfg: &KubeletConfig,
    rt: &Arc<CriRuntime>,
    features_tx: &watch::Sender<Option<bool>>,
) -> Vec<Arc<dyn pod_admit::AdmitHandler>> {
    let mut handlers: Vec<Arc<dyn pod_admit::AdmitHandler>> = Vec::new();
    // The patterns were checked when the flags were read; only the kernel version is new here.
    match sysctl_admission::Allowlist::for_host(&cfg.allowed_unsafe_sysctls) {
        Ok(w) => handlers.push(Arc::new(w)),
        Err(e) => tracing::error!(error = %e, "--allowed-unsafe-sysctls"),
    }
    let features = rt
        .cri()
        .supplemental_groups_policy()
        .await
        .unwrap_or_else(|e| {
            tracing::warn!(error = %e, "reading the runtime's features");
            None
        });
    // The node status reports them (status.features) as upstream's NodeFeatures setter does.
    features_tx.send_replace(features);
    handlers.push(Arc::new(pod_admit::SupplementalGroupsPolicy {
        runtime_supports: features.unwrap_or(false),
    }));
    handlers.push(Arc::new(pod_admit::AppArmor {
        host_enabled: apparmor::host_enabled(std::path::Path::new("/sys")),
    }));
    handlers
}

/// Starts the eviction manager; returns the runtime the workload loop uses (admission behind it).
fn start_eviction(
    cfg: &KubeletConfig,
    rt: &Arc<CriRuntime>,
    client: &kube::Client,
    recorder: Arc<dyn events::EventRecorder>,
    pressure: watch::Sender<eviction::Pressure>,
    shutdown: &watch::Receiver<bool>,
    handlers: Vec<Arc<dyn pod_admit::AdmitHandler>>,
) -> Arc<dyn Runtime> {
    let failer: Arc<dyn eviction::PodFailer> = Arc::new(eviction::admission::ApiFailer {
        client: client.clone(),
    });
    let evicted = eviction::admission::Evicted::default();
    let gate: Arc<dyn Runtime> = Arc::new(
        eviction::admission::AdmissionGate::new(
            rt.clone(),
            pressure.subscribe(),
            evicted.clone(),
            failer.clone(),
            recorder.clone(),
        )
        .with_handlers(handlers),
    );
    let disk = Arc::new(eviction::fs::HostDisk {
        pods_root: cfg.root_dir.join("pods"),
        log_root: cfg.pod_log_dir.clone(),
    });
    let manager = eviction::Manager::new(
        cfg.eviction.clone(),
        &cfg.root_dir,
        disk,
        rt.clone(),
        failer,
        recorder,
        pressure,
        evicted,
    )
    .with_resources(
        Arc::new(eviction::host::HostResources::detect()),
        eviction::thresholds::parse_bytes(&cfg.capacity_memory).unwrap_or(0),
    );
    tokio::spawn(manager.run(shutdown.clone()));
    gate
}
