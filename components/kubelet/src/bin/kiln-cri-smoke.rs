//! kiln-cri-smoke: runs pods through the kubelet's `cri` runtime without an API server, printing each pod's
//! API status (as the kubelet would report it) whenever it changes. Used by the lab test on a real host
//! with containerd; also handy to debug a node's CRI setup.
//!
//! Output lines: `RUNTIME <version>`, `STATUS <pod name> <PodStatus JSON>`, `STOPPED <pod name>`, and
//! `CLEAN` once no sandbox of ours is left (exit 0). It stops the pods when `--release-file` appears or
//! after `--timeout-secs` (exit 2).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::Parser;
use k8s_openapi::api::core::v1::Pod;
use kiln_kubelet::cgroupfs::{Cgroups, HostCgroups};
use kiln_kubelet::config::KubeletConfig;
use kiln_kubelet::mirror::api_status;
use kiln_kubelet::qos_manager;
use kiln_kubelet::runtime::cri::{spec, CriRuntime, GrpcCri, WorkerConfig};
use kiln_kubelet::runtime::{Backoff, Runtime};

#[derive(Parser)]
#[command(name = "kiln-cri-smoke")]
struct Args {
    #[arg(long, default_value = "unix:///run/containerd/containerd.sock")]
    container_runtime_endpoint: String,
    #[arg(long)]
    pod_infra_container_image: String,
    /// Writes the CNI conflist for this CIDR into --cni-conf-dir first.
    #[arg(long)]
    pod_cidr: Option<String>,
    #[arg(long, default_value = "/etc/cni/net.d")]
    cni_conf_dir: PathBuf,
    #[arg(long, default_value = "/var/log/pods")]
    pod_log_dir: PathBuf,
    #[arg(long, default_value = "smoke-node")]
    node_name: String,
    #[arg(long, default_value = "127.0.0.1")]
    node_ip: String,
    #[arg(long, default_value_t = 10)]
    restart_backoff_base: u64,
    #[arg(long)]
    release_file: PathBuf,
    #[arg(long, default_value_t = 300)]
    timeout_secs: u64,
    /// Make and limit kubepods, its QoS tiers and each pod's cgroup, as the kubelet does.
    #[arg(long)]
    pod_cgroups: bool,
    /// With --pod-cgroups: every pod's pids.max.
    #[arg(long)]
    pod_max_pids: Option<i64>,
    /// Pod manifests (YAML or JSON), each with metadata.uid set.
    pods: Vec<PathBuf>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let a = Args::parse();
    if let Some(cidr) = &a.pod_cidr {
        kiln_kubelet::cni::write_conflist(&a.cni_conf_dir, cidr)?;
    }
    let mut pods = Vec::new();
    for p in &a.pods {
        let bytes = std::fs::read(p).with_context(|| format!("reading {}", p.display()))?;
        let pod: Pod =
            serde_norway::from_slice(&bytes).with_context(|| format!("parsing {}", p.display()))?;
        if pod.metadata.uid.as_deref().unwrap_or_default().is_empty() {
            bail!("{}: metadata.uid is required", p.display());
        }
        pods.push(pod);
    }
    let cgroups: Option<Arc<dyn Cgroups>> = if a.pod_cgroups {
        let host = Arc::new(HostCgroups::detect());
        let capacity = KubeletConfig::new(&a.node_name, "127.0.0.1".parse()?);
        qos_manager::set_up(host.as_ref(), &qos_manager::kubepods_limits(&capacity))?;
        Some(host)
    } else {
        None
    };
    let cri = Arc::new(GrpcCri::new(&a.container_runtime_endpoint)?);
    let rt = CriRuntime::new(
        cri.clone(),
        WorkerConfig {
            log_root: a.pod_log_dir.clone(),
            pause_image: a.pod_infra_container_image.clone(),
            backoff: Backoff {
                base: Duration::from_secs(a.restart_backoff_base.max(1)),
                max: Duration::from_secs(300),
            },
            node_name: a.node_name.clone(),
            node_ip: a.node_ip.clone(),
            // No API server here: emptyDir and hostPath volumes only.
            pods_root: std::path::PathBuf::from("/var/lib/kiln/kubelet/pods"),
            secrets_in_memory: false,
            allocatable: Default::default(),
            // No cluster DNS here: ClusterFirst pods fall back to the host's resolver.
            dns: Default::default(),
            node_hosts_file: kiln_kubelet::etc_hosts::NODE_HOSTS.into(),
            cgroups,
            pod_pids_limit: a.pod_max_pids,
        },
        Duration::from_millis(500),
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(a.timeout_secs);
    loop {
        match rt.ready().await {
            Ok(()) => break,
            Err(e) if tokio::time::Instant::now() > deadline => {
                bail!("runtime never became ready: {e}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
    println!("RUNTIME {}", rt.version());
    let removed = rt.remove_unknown_sandboxes().await?;
    if removed > 0 {
        eprintln!("removed {removed} stale sandboxes");
    }
    for p in &pods {
        rt.run_pod(p).await?;
    }
    let mut last: Vec<String> = vec![String::new(); pods.len()];
    let mut timed_out = false;
    while !a.release_file.exists() {
        if tokio::time::Instant::now() > deadline {
            timed_out = true;
            break;
        }
        for (i, p) in pods.iter().enumerate() {
            let uid = p.metadata.uid.as_deref().unwrap_or_default();
            if let Some(st) = rt.pod_status(uid) {
                let line =
                    serde_json::to_string(&api_status(&st, &a.node_ip, st.pod_ip.as_deref()))?;
                if line != last[i] {
                    println!(
                        "STATUS {} {line}",
                        p.metadata.name.as_deref().unwrap_or_default()
                    );
                    last[i] = line;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut failed = false;
    for p in &pods {
        let uid = p.metadata.uid.as_deref().unwrap_or_default();
        match rt.stop_pod(uid, Some(Duration::from_secs(5))).await {
            Ok(()) => println!("STOPPED {}", p.metadata.name.as_deref().unwrap_or_default()),
            Err(e) => {
                eprintln!(
                    "stopping {}: {e}",
                    p.metadata.name.as_deref().unwrap_or_default()
                );
                failed = true;
            }
        }
    }
    let left = kiln_kubelet::runtime::cri::CriApi::list_pod_sandboxes(
        cri.as_ref(),
        [(
            spec::LABEL_MANAGED_BY.to_string(),
            spec::MANAGED_BY.to_string(),
        )]
        .into(),
    )
    .await?;
    if left.is_empty() && !failed {
        println!("CLEAN");
    } else {
        println!(
            "LEFTOVER {}",
            left.iter()
                .map(|s| s.id.as_str())
                .collect::<Vec<_>>()
                .join(",")
        );
        std::process::exit(1);
    }
    if timed_out {
        eprintln!("timed out after {}s", a.timeout_secs);
        std::process::exit(2);
    }
    Ok(())
}
