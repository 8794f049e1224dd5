//! kiln-apiserver under load, as its own process (so its RSS is its own) over the harness's store
//! (etcd 3.4, or kiln-store with `KILN_TEST_STORE_BIN`): create N pods; `kubectl get pods -A` (as is,
//! and in one request), the server's part of it (its Table pages back to back) and a raw LIST of all
//! of them; creates and updates at a steady rate with W watchers open, measuring each
//! request's latency and each watcher's delay from a create's start to its ADDED event; RSS idle
//! (before any pod) and loaded (after the steady phase), plus the peak.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use kiln_testkit::client_from_kubeconfig;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;

use crate::harness::{memory_mib, ms, start_apiserver, RunDir, StartError};
use crate::stats::percentile;

#[derive(Debug, thiserror::Error)]
pub enum ApiserverBenchError {
    #[error(transparent)]
    Start(#[from] StartError),
    #[error("kiln-apiserver did not become ready: {0}")]
    NotReady(String),
    #[error("API: {0}")]
    Api(#[from] kube::Error),
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
    #[error("building the Table page request: {0}")]
    Request(#[from] http::Error),
    #[error("decoding a Table page: {0}")]
    Decode(#[from] serde_json::Error),
}

#[derive(Debug, serde::Serialize)]
pub struct ApiserverResult {
    pub pods: usize,
    pub create_all_seconds: f64,
    /// Median wall time of `kubectl get pods -A` (3 runs), kubectl's own start included. kubectl
    /// reads pages of 500 through client-go's default rate limiter (5 requests/s, burst 10), so
    /// 10 000 pods (20 pages) take at least 2 s however fast the server is.
    pub kubectl_get_pods_ms: f64,
    /// The same with `--chunk-size=0`: one request, no rate limit; kubectl's decode and print of
    /// every row plus the server's one Table.
    pub kubectl_get_pods_unpaged_ms: f64,
    /// The server's part of `kubectl get pods -A`: its Table pages of 500 requested back to back on
    /// one connection (median of 3 walks).
    pub table_pages_ms: f64,
    /// One LIST of every pod as JSON through kube-rs.
    pub list_all_ms: f64,
    pub rate: f64,
    pub steady_seconds: u64,
    pub create_p50_ms: f64,
    pub create_p99_ms: f64,
    pub update_p50_ms: f64,
    pub update_p99_ms: f64,
    pub errors: usize,
    pub watchers: usize,
    pub fanout_p50_ms: f64,
    pub fanout_p99_ms: f64,
    pub rss_idle_mib: f64,
    pub rss_loaded_mib: f64,
    pub rss_peak_mib: f64,
}

fn pod(name: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"bench": "apiserver"}},
        "spec": {"containers": [{"name": "c", "image": "kiln/pause:1",
            "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}
    }))
    .expect("pod JSON")
}

async fn kubectl_get_pods(
    kubeconfig: &Path,
    extra: &[&str],
) -> Result<Duration, ApiserverBenchError> {
    let mut runs = Vec::new();
    for _ in 0..3 {
        let t = Instant::now();
        let out = tokio::process::Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(["get", "pods", "-A", "--no-headers"])
            .args(extra)
            .output()
            .await?;
        runs.push(t.elapsed());
        if !out.status.success() {
            return Err(ApiserverBenchError::NotReady(
                String::from_utf8_lossy(&out.stderr).into_owned(),
            ));
        }
    }
    runs.sort();
    Ok(runs[1])
}

/// kubectl's `Accept` for `get`: server-side printing.
const TABLE_ACCEPT: &str = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";

/// What a Table page's walk needs: its continue token (rows only counted, not decoded).
#[derive(serde::Deserialize)]
struct TablePage {
    metadata: TableMeta,
    rows: Vec<serde::de::IgnoredAny>,
}

#[derive(serde::Deserialize)]
struct TableMeta {
    #[serde(rename = "continue", default)]
    continue_: String,
}

/// Every pod as kubectl's Table pages of 500 (`limit` + `continue`), back to back; the median of 3.
async fn table_pages(client: &kube::Client, pods: usize) -> Result<Duration, ApiserverBenchError> {
    let mut runs = Vec::new();
    for _ in 0..3 {
        let t = Instant::now();
        let (mut token, mut rows) = (String::new(), 0);
        loop {
            let mut uri = "/api/v1/pods?limit=500".to_string();
            if !token.is_empty() {
                // The token is URL-safe base64; only its padding needs escaping.
                uri.push_str(&format!("&continue={}", token.replace('=', "%3D")));
            }
            let req = http::Request::get(uri)
                .header(http::header::ACCEPT, TABLE_ACCEPT)
                .body(Vec::new())?;
            let page: TablePage = serde_json::from_str(&client.request_text(req).await?)?;
            rows += page.rows.len();
            token = page.metadata.continue_;
            if token.is_empty() {
                break;
            }
        }
        runs.push(t.elapsed());
        if rows < pods {
            return Err(ApiserverBenchError::NotReady(format!(
                "the Table pages held {rows} rows, not {pods}"
            )));
        }
    }
    runs.sort();
    Ok(runs[1])
}

pub async fn run(
    bin: &str,
    pods: usize,
    rate: f64,
    steady_seconds: u64,
    watchers: usize,
) -> Result<ApiserverResult, ApiserverBenchError> {
    let dir = RunDir::create("apiserver")?;
    measure(bin, &dir.0, pods, rate, steady_seconds, watchers).await
}

async fn measure(
    bin: &str,
    dir: &Path,
    pods: usize,
    rate: f64,
    steady_seconds: u64,
    watchers: usize,
) -> Result<ApiserverResult, ApiserverBenchError> {
    let server = start_apiserver(bin, dir).await?;
    let kubeconfig = server.kubeconfig.clone();
    let pid = server.child.id();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss_idle_mib = memory_mib(pid, "VmRSS:");

    let client = client_from_kubeconfig(&kubeconfig).await;
    let api: Api<Pod> = Api::namespaced(client.clone(), "default");
    let t = Instant::now();
    // The slowest create and every failure, so a stall or a lost answer shows as one.
    let slowest: Arc<Mutex<(Duration, String)>> = Arc::default();
    let failed: Arc<Mutex<Vec<String>>> = Arc::default();
    futures::stream::iter(0..pods)
        .for_each_concurrent(32, |i| {
            let (api, slowest, failed) = (api.clone(), slowest.clone(), failed.clone());
            async move {
                let name = format!("p-{i:05}");
                let started = Instant::now();
                let created = api.create(&PostParams::default(), &pod(&name)).await;
                let took = started.elapsed();
                let mut s = slowest.lock().unwrap_or_else(|p| p.into_inner());
                if took > s.0 {
                    *s = (took, name.clone());
                }
                if let Err(e) = created {
                    let mut f = failed.lock().unwrap_or_else(|p| p.into_inner());
                    f.push(format!("{name} after {} ms: {e}", took.as_millis()));
                }
            }
        })
        .await;
    let create_all_seconds = t.elapsed().as_secs_f64();
    eprintln!("kiln-bench apiserver: {pods} pods created in {create_all_seconds:.1} s");
    {
        let s = slowest.lock().unwrap_or_else(|p| p.into_inner());
        eprintln!(
            "kiln-bench apiserver: slowest create {} ms ({})",
            s.0.as_millis(),
            s.1
        );
        let f = failed.lock().unwrap_or_else(|p| p.into_inner());
        for e in f.iter().take(5) {
            eprintln!("kiln-bench apiserver: create failed: {e}");
        }
        if !f.is_empty() {
            eprintln!("kiln-bench apiserver: {} creates failed", f.len());
        }
    }
    let kubectl_get_pods_ms = ms(kubectl_get_pods(&kubeconfig, &[]).await?);
    eprintln!("kiln-bench apiserver: kubectl get pods -A took {kubectl_get_pods_ms:.0} ms");
    let kubectl_get_pods_unpaged_ms = ms(kubectl_get_pods(&kubeconfig, &["--chunk-size=0"]).await?);
    let table_pages_ms = ms(table_pages(&client, pods).await?);
    eprintln!(
        "kiln-bench apiserver: unpaged {kubectl_get_pods_unpaged_ms:.0} ms; its Table pages {table_pages_ms:.0} ms"
    );
    let t = Instant::now();
    let all = api.list(&ListParams::default()).await?;
    let list_all_ms = ms(t.elapsed());
    eprintln!("kiln-bench apiserver: LIST took {list_all_ms:.0} ms; steady phase");
    let rv = all.metadata.resource_version.unwrap_or_default();

    // Watchers: each records, per created pod, the delay from the create's start to its ADDED event.
    let started: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let delays: Arc<Mutex<Vec<Duration>>> = Arc::default();
    let mut watch_tasks = Vec::new();
    for _ in 0..watchers {
        let api: Api<Pod> = Api::namespaced(client.clone(), "default");
        let (started, delays, rv) = (started.clone(), delays.clone(), rv.clone());
        let params = WatchParams::default()
            .labels("load=steady")
            .timeout(steady_seconds as u32 + 60);
        let mut stream = api.watch(&params, &rv).await?.boxed();
        watch_tasks.push(tokio::spawn(async move {
            while let Ok(Some(ev)) = stream.try_next().await {
                if let WatchEvent::Added(p) = ev {
                    let name = p.metadata.name.unwrap_or_default();
                    let at = started.lock().expect("lock").get(&name).copied();
                    if let Some(at) = at {
                        delays.lock().expect("lock").push(at.elapsed());
                    }
                }
            }
        }));
    }

    // Steady phase: one request per tick, creates and updates alternating.
    let creates: Arc<Mutex<Vec<Duration>>> = Arc::default();
    let updates: Arc<Mutex<Vec<Duration>>> = Arc::default();
    let errors: Arc<Mutex<usize>> = Arc::default();
    let total = (rate * steady_seconds as f64) as usize;
    let mut ticker = tokio::time::interval(Duration::from_secs_f64(1.0 / rate.max(0.1)));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut inflight = Vec::with_capacity(total);
    for i in 0..total {
        ticker.tick().await;
        let (api, started) = (api.clone(), started.clone());
        let (creates, updates, errors) = (creates.clone(), updates.clone(), errors.clone());
        inflight.push(tokio::spawn(async move {
            let t = Instant::now();
            let ok = if i % 2 == 0 {
                let name = format!("load-{i:06}");
                let mut p = pod(&name);
                p.metadata
                    .labels
                    .get_or_insert_with(Default::default)
                    .insert("load".into(), "steady".into());
                started.lock().expect("lock").insert(name, t);
                let r = api.create(&PostParams::default(), &p).await.is_ok();
                creates.lock().expect("lock").push(t.elapsed());
                r
            } else {
                let name = format!("p-{:05}", (i / 2) % pods.max(1));
                let patch = json!({"metadata": {"annotations": {"bench/round": i.to_string()}}});
                let r = api
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .is_ok();
                updates.lock().expect("lock").push(t.elapsed());
                r
            };
            if !ok {
                *errors.lock().expect("lock") += 1;
            }
        }));
    }
    for h in inflight {
        let _ = h.await;
    }
    // Let the watchers drain the last events, then stop them.
    tokio::time::sleep(Duration::from_secs(2)).await;
    for h in &watch_tasks {
        h.abort();
    }
    let rss_loaded_mib = memory_mib(pid, "VmRSS:");
    let rss_peak_mib = memory_mib(pid, "VmHWM:");
    let sorted = |v: &Arc<Mutex<Vec<Duration>>>| {
        let mut v = v.lock().expect("lock").clone();
        v.sort();
        v
    };
    let (c, u, d) = (sorted(&creates), sorted(&updates), sorted(&delays));
    let errors = *errors.lock().expect("lock");
    drop(server);
    Ok(ApiserverResult {
        pods,
        create_all_seconds,
        kubectl_get_pods_ms,
        kubectl_get_pods_unpaged_ms,
        table_pages_ms,
        list_all_ms,
        rate,
        steady_seconds,
        create_p50_ms: ms(percentile(&c, 50.0)),
        create_p99_ms: ms(percentile(&c, 99.0)),
        update_p50_ms: ms(percentile(&u, 50.0)),
        update_p99_ms: ms(percentile(&u, 99.0)),
        errors,
        watchers,
        fanout_p50_ms: ms(percentile(&d, 50.0)),
        fanout_p99_ms: ms(percentile(&d, 99.0)),
        rss_idle_mib,
        rss_loaded_mib,
        rss_peak_mib,
    })
}
