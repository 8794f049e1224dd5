//! kiln-proxy sync time (bench/proxy-sync.sh), run as root inside a network namespace of its own so the
//! nftables rules never touch the machine's: the store and kiln-apiserver (the shared harness, in-process
//! on the namespace's 127.0.0.1) hold N Services × E ready endpoints, then the release `kiln-proxy` binary
//! starts and is timed
//! - cold: from its start to the table holding every object (full sync);
//! - per change: from an EndpointSlice update's write to the rules holding it, `rounds` times.
//!
//! "Holding" is read off the proxy's /metrics: `kiln_proxy_rules_synced_resource_version{resource}` says
//! which resourceVersion the applied rules include and `…_timestamp_seconds` when that sync finished, so
//! the latency does not depend on how often the benchmark polls. Each change is also checked in the
//! kernel (`nft list chain` of the Service's chain holds the new endpoint in its DNAT map).
//!
//! Anchor, measured in the same namespace once the proxy has stopped: `nft -f` alone of the same full
//! table (the kernel floor of a full sync) and of the same one-change update batches (the floor of a
//! change), built with kiln-proxy's own renderer from the same objects.

use std::collections::BTreeMap;
use std::io::Write;
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kiln_proxy::model::{from_endpoint_slice, from_service, NodeConfig, ProxyState};
use kiln_proxy::render::{build, update_script, Table};
use kiln_testkit::{free_port, Cluster};
use kube::api::{Api, PostParams};
use serde_json::json;

use crate::harness::metrics;
use crate::stats::{summarize, Summary};

#[derive(Debug, thiserror::Error)]
pub enum ProxySyncError {
    #[error("API: {0}")]
    Api(#[from] kube::Error),
    #[error("cannot start {0}: {1}")]
    Spawn(String, std::io::Error),
    #[error("nft: {0}")]
    Nft(String),
    #[error("kiln-proxy did not reach {what} within {waited:?}; its log: {log}")]
    Timeout {
        what: String,
        waited: Duration,
        log: String,
    },
    #[error("change {round}: {detail}")]
    Check { round: usize, detail: String },
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct ProxySyncReport {
    pub services: usize,
    pub endpoints_per_service: usize,
    /// kiln-proxy started → table applied with every Service and endpoint.
    pub full_sync_ms: f64,
    /// Of `full_sync_ms`, the time the proxy spent syncing (all syncs until then: build + nft), from its
    /// metrics; the rest is process start and listing the objects.
    pub full_sync_proxy_ms: f64,
    /// Of that, the time in nft.
    pub full_sync_nft_ms: f64,
    /// EndpointSlice update written (request sent) → rules hold it.
    pub change: Summary,
    /// The proxy's own sync duration per change (build + diff + nft), p50.
    pub change_sync_p50_ms: f64,
    /// Of that, the time in nft, p50.
    pub change_nft_p50_ms: f64,
    /// How long the API write itself took (inside `change`), p50.
    pub change_write_p50_ms: f64,
    /// Changes that replaced the whole table instead of updating it (expected 0).
    pub change_full_replaces: u64,
    /// Anchor: `nft -f` of the same full table into an empty namespace, median.
    pub nft_full_ms: f64,
    /// Anchor: `nft -f` of the same one-change update batch, median and p99.
    pub nft_change: Summary,
}

/// The namespace's nft, timed.
fn nft(script: &str) -> Result<Duration, ProxySyncError> {
    let start = Instant::now();
    let mut child = Command::new("nft")
        .args(["-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| ProxySyncError::Spawn("nft".into(), e))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(script.as_bytes())
            .map_err(|e| ProxySyncError::Nft(e.to_string()))?;
    }
    let out = child
        .wait_with_output()
        .map_err(|e| ProxySyncError::Nft(e.to_string()))?;
    if !out.status.success() {
        return Err(ProxySyncError::Nft(
            String::from_utf8_lossy(&out.stderr).into_owned(),
        ));
    }
    Ok(start.elapsed())
}

/// What `nft ARGS` prints, or `None` when it fails.
fn nft_out(args: &[&str]) -> Option<String> {
    let out = Command::new("nft")
        .args(args)
        .stderr(Stdio::null())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

fn service(i: usize) -> Service {
    serde_json::from_value(json!({
        "metadata": {"name": format!("bench-{i:04}"), "namespace": "default"},
        "spec": {"ports": [{"port": 80, "targetPort": 8080, "protocol": "TCP"}]}
    }))
    .expect("service JSON")
}

/// Endpoint `k` of service `i`: distinct pod IPs in 10.244.0.0/16.
fn endpoint_ip(i: usize, k: usize) -> String {
    let n = i * 16 + k + 1;
    format!("10.244.{}.{}", n / 250, n % 250 + 1)
}

fn slice(i: usize, addresses: &[String]) -> EndpointSlice {
    serde_json::from_value(json!({
        "metadata": {"name": format!("bench-{i:04}-1"), "namespace": "default",
                     "labels": {"kubernetes.io/service-name": format!("bench-{i:04}")}},
        "addressType": "IPv4",
        "endpoints": addresses.iter()
            .map(|a| json!({"addresses": [a], "conditions": {"ready": true}}))
            .collect::<Vec<_>>(),
        "ports": [{"port": 8080, "protocol": "TCP"}]
    }))
    .expect("slice JSON")
}

fn rv_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> u64 {
    meta.resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

const SYNCED_RV: &str = "kiln_proxy_rules_synced_resource_version";
const SYNCED_AT: &str = "kiln_proxy_rules_synced_timestamp_seconds";

fn label(metric: &str, resource: &str) -> String {
    format!("{metric}{{resource=\"{resource}\"}}")
}

struct Proxy {
    child: Child,
    addr: SocketAddr,
    log: std::path::PathBuf,
}

impl Proxy {
    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    /// Polls /metrics until every `(resource, rv)` is synced; returns the metrics and the latest of the
    /// sync timestamps.
    async fn wait_synced(
        &self,
        want: &[(&str, u64)],
        limit: Duration,
    ) -> Result<(BTreeMap<String, f64>, f64), ProxySyncError> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(m) = metrics(self.addr).await {
                let done = want.iter().all(|(r, rv)| {
                    m.get(&label(SYNCED_RV, r))
                        .is_some_and(|v| *v as u64 >= *rv)
                });
                if done {
                    let at = want
                        .iter()
                        .filter_map(|(r, _)| m.get(&label(SYNCED_AT, r)).copied())
                        .fold(0.0, f64::max);
                    return Ok((m, at));
                }
            }
            if Instant::now() > deadline {
                return Err(ProxySyncError::Timeout {
                    what: format!("{want:?}"),
                    waited: limit,
                    log: self.log_tail(),
                });
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        // SIGTERM (kiln-proxy leaves its rules in place on exit)
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}

fn unix(t: SystemTime) -> f64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

pub async fn run(
    proxy_bin: &str,
    services: usize,
    per_service: usize,
    rounds: usize,
) -> Result<ProxySyncReport, ProxySyncError> {
    assert!(per_service <= 16, "endpoint_ip() spaces services 16 apart");
    let c = Cluster::start().await;
    let client = c.admin().await;
    let svc_api: Api<Service> = Api::namespaced(client.clone(), "default");
    let slice_api: Api<EndpointSlice> = Api::namespaced(client.clone(), "default");

    // the objects, 32 requests in flight
    let created: Vec<Result<(Service, EndpointSlice), kube::Error>> =
        futures::stream::iter(0..services)
            .map(|i| {
                let (svc_api, slice_api) = (svc_api.clone(), slice_api.clone());
                async move {
                    let s = svc_api.create(&PostParams::default(), &service(i)).await?;
                    let addrs: Vec<String> = (0..per_service).map(|k| endpoint_ip(i, k)).collect();
                    let e = slice_api
                        .create(&PostParams::default(), &slice(i, &addrs))
                        .await?;
                    Ok((s, e))
                }
            })
            .buffered(32)
            .collect()
            .await;
    let mut svcs = Vec::with_capacity(services);
    let mut slices = Vec::with_capacity(services);
    for r in created {
        let (s, e) = r?;
        svcs.push(s);
        slices.push(e);
    }
    let svc_rv = svcs.iter().map(|s| rv_of(&s.metadata)).max().unwrap_or(0);
    let slice_rv = slices.iter().map(|s| rv_of(&s.metadata)).max().unwrap_or(0);

    // cold start
    let port = free_port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().expect("address");
    let log = c.dir.path().join("kiln-proxy.log");
    let log_file =
        std::fs::File::create(&log).map_err(|e| ProxySyncError::Spawn(proxy_bin.into(), e))?;
    let started = SystemTime::now();
    let child = Command::new(proxy_bin)
        .arg(format!("--kubeconfig={}", c.admin_kubeconfig.display()))
        .args(["--hostname-override", "bench"])
        .arg(format!("--healthz-bind-address={addr}"))
        .arg(format!("--metrics-bind-address={addr}"))
        .stdout(Stdio::null())
        .stderr(log_file)
        .spawn()
        .map_err(|e| ProxySyncError::Spawn(proxy_bin.into(), e))?;
    let proxy = Proxy { child, addr, log };
    let (m, at) = proxy
        .wait_synced(
            &[("services", svc_rv), ("endpointslices", slice_rv)],
            Duration::from_secs(300),
        )
        .await?;
    let full_sync_ms = (at - unix(started)) * 1000.0;
    let gauge_ms =
        |m: &BTreeMap<String, f64>, name: &str| m.get(name).copied().unwrap_or(0.0) * 1000.0;
    let full_sync_proxy_ms = gauge_ms(&m, "kiln_proxy_sync_duration_seconds_sum");
    let full_sync_nft_ms = gauge_ms(&m, "kiln_proxy_sync_nft_seconds_sum");
    let in_table = m.get("kiln_proxy_endpoints").copied().unwrap_or(0.0) as usize;
    // (the apiserver's own `kubernetes` Service adds its endpoint)
    if in_table < services * per_service {
        return Err(ProxySyncError::Check {
            round: 0,
            detail: format!(
                "{in_table} endpoints in the table, want {}",
                services * per_service
            ),
        });
    }
    let full_before = m
        .get("kiln_proxy_sync_full_applies_total")
        .copied()
        .unwrap_or(0.0);
    tokio::time::sleep(Duration::from_millis(500)).await;

    // one change at a time: endpoint k of a service moves to a new address
    let mut latencies = Vec::with_capacity(rounds);
    let mut syncs = Vec::with_capacity(rounds);
    let mut nfts = Vec::with_capacity(rounds);
    let mut writes = Vec::with_capacity(rounds);
    let mut last_metrics = m;
    for round in 0..rounds {
        let i = (round * 37) % services;
        let k = round % per_service;
        let new_ip = format!("10.245.{}.{}", round / 250, round % 250 + 1);
        let mut s = slices[i].clone();
        s.endpoints[k].addresses = vec![new_ip.clone()];
        let name = s.metadata.name.clone().unwrap_or_default();
        let t = SystemTime::now();
        let w = Instant::now();
        let updated = slice_api.replace(&name, &PostParams::default(), &s).await?;
        writes.push(w.elapsed());
        let rv = rv_of(&updated.metadata);
        slices[i] = updated;
        let (m, at) = proxy
            .wait_synced(&[("endpointslices", rv)], Duration::from_secs(30))
            .await?;
        latencies.push(Duration::from_secs_f64((at - unix(t)).max(0.0)));
        let ms = |v: f64| Duration::from_secs_f64(v / 1000.0);
        syncs.push(ms(gauge_ms(&m, "kiln_proxy_last_sync_duration_seconds")));
        nfts.push(ms(gauge_ms(&m, "kiln_proxy_last_sync_nft_seconds")));
        last_metrics = m;
        let chain = format!("svc-default/bench-{i:04}/tcp/80");
        let listed = nft_out(&["list", "chain", "ip", "kiln", &chain]).unwrap_or_default();
        if !listed.contains(&format!(" {new_ip} . 8080")) {
            return Err(ProxySyncError::Check {
                round,
                detail: format!(
                    "{new_ip} not in chain {chain} after the proxy reported the sync: {listed}"
                ),
            });
        }
        // an isolated change each time (the proxy syncs at most once per --min-sync-period, 100 ms)
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    let change_full_replaces = (last_metrics
        .get("kiln_proxy_sync_full_applies_total")
        .copied()
        .unwrap_or(0.0)
        - full_before) as u64;
    drop(proxy);

    // anchors: nft alone, with the same table and the same kind of update, built by kiln-proxy's renderer
    let node = NodeConfig {
        cluster_cidr: "10.244.0.0/16".parse().expect("cidr"),
    };
    let state_of = |slices: &[EndpointSlice]| {
        let mut st = ProxyState {
            services: svcs.iter().filter_map(from_service).collect(),
            ..Default::default()
        };
        for (key, g) in slices.iter().filter_map(from_endpoint_slice) {
            st.add_endpoints(key, g);
        }
        st
    };
    let table: Table = build(&state_of(&slices), &node).table;
    let script = table.script();
    let mut full = Vec::new();
    for _ in 0..5 {
        nft("table ip kiln {}\ndelete table ip kiln\n")?;
        full.push(nft(&script)?);
    }
    full.sort();
    let nft_full_ms = full[full.len() / 2].as_secs_f64() * 1000.0;
    let mut last = table;
    let mut one = Vec::new();
    for round in 0..rounds {
        let i = (round * 37) % services;
        let k = round % per_service;
        slices[i].endpoints[k].addresses =
            vec![format!("10.246.{}.{}", round / 250, round % 250 + 1)];
        let next = build(&state_of(&slices), &node).table;
        let update = update_script(&last, &next).ok_or_else(|| ProxySyncError::Check {
            round,
            detail: "anchor change not expressible as an update".into(),
        })?;
        one.push(nft(&update)?);
        last = next;
    }
    nft("table ip kiln {}\ndelete table ip kiln\n")?;

    let median = |mut v: Vec<Duration>| {
        v.sort();
        v.get(v.len() / 2).map_or(0.0, |d| d.as_secs_f64() * 1000.0)
    };
    Ok(ProxySyncReport {
        services,
        endpoints_per_service: per_service,
        full_sync_ms,
        full_sync_proxy_ms,
        full_sync_nft_ms,
        change: summarize(latencies, 0, Duration::ZERO),
        change_sync_p50_ms: median(syncs),
        change_nft_p50_ms: median(nfts),
        change_write_p50_ms: median(writes),
        change_full_replaces,
        nft_full_ms,
        nft_change: summarize(one, 0, Duration::ZERO),
    })
}
