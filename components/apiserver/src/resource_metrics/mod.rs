//! metrics.k8s.io/v1beta1 (NodeMetrics, PodMetrics) served by the API server itself, as
//! metrics-server serves it behind the aggregation layer: each node's kubelet `/stats/summary` is
//! fetched with the apiserver-kubelet-client certificate (the client `pods/log` uses) and kept for
//! [`RESOLUTION`] (metrics-server's default metric resolution), so `kubectl top` and the HPA
//! controller asking every 15 s cost each kubelet one request per period. Only get and list: there
//! is nothing to watch or write. See docs/architecture.md ("Resource metrics").

pub mod convert;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::response::Response;
use futures::future::{join_all, BoxFuture};
use futures::FutureExt;
use serde_json::{json, Value};
use tokio::sync::Mutex;

use crate::kubelet_client::{kubelet_address, KubeletClient};
use crate::registry::lifecycle::{from_stored, now_rfc3339};
use crate::registry::resources::{NODES, PODS};
use crate::registry::ResourceSpec;
use crate::request_path::ResourcePath;
use crate::selectors::LabelSelector;
use crate::status::{ok_json, ApiError};
use crate::storage::Store;

/// How long a node's Summary is reused.
pub const RESOLUTION: Duration = Duration::from_secs(15);
/// A kubelet that does not answer within this is left out of the answer (metrics-server's
/// scrape timeout is 10 s; kubectl's own default is 30 s).
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(5);

/// Fetches one node's Summary; a trait so the cache is tested without kubelets.
pub trait SummaryFetcher: Send + Sync {
    fn fetch<'a>(&'a self, node: &'a Value) -> BoxFuture<'a, Result<Value, String>>;
}

/// Summaries by node name, with when they were fetched.
#[derive(Default)]
pub struct Cache {
    entries: Mutex<HashMap<String, (Instant, Value)>>,
}

impl Cache {
    /// The Summary of each node (fresh or at most [`RESOLUTION`] old); nodes whose kubelet
    /// fails are left out, as metrics-server leaves out nodes it cannot scrape.
    pub async fn summaries(
        &self,
        fetcher: &dyn SummaryFetcher,
        nodes: &[Value],
    ) -> HashMap<String, Value> {
        // One refresh at a time: concurrent callers wait for it and reuse its answers.
        let mut entries = self.entries.lock().await;
        let now = Instant::now();
        let names: Vec<String> = nodes
            .iter()
            .map(|n| {
                n["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string()
            })
            .collect();
        entries.retain(|name, _| names.contains(name));
        let stale: Vec<(&String, &Value)> = names
            .iter()
            .zip(nodes)
            .filter(|(name, _)| {
                entries
                    .get(*name)
                    .is_none_or(|(at, _)| now.duration_since(*at) >= RESOLUTION)
            })
            .collect();
        let fetched = join_all(stale.iter().map(|(name, node)| async move {
            let r = tokio::time::timeout(SCRAPE_TIMEOUT, fetcher.fetch(node))
                .await
                .unwrap_or_else(|_| Err("timed out".into()));
            ((*name).clone(), r)
        }))
        .await;
        for (name, r) in fetched {
            match r {
                Ok(summary) => {
                    entries.insert(name, (Instant::now(), summary));
                }
                Err(e) => {
                    tracing::debug!(node = %name, error = %e, "scraping the kubelet's summary");
                    entries.remove(&name);
                }
            }
        }
        entries
            .iter()
            .map(|(k, (_, v))| (k.clone(), v.clone()))
            .collect()
    }
}

/// The real fetcher: GET https://<node>:<port>/stats/summary.
pub struct KubeletFetcher<'a>(pub &'a KubeletClient);

impl SummaryFetcher for KubeletFetcher<'_> {
    fn fetch<'a>(&'a self, node: &'a Value) -> BoxFuture<'a, Result<Value, String>> {
        self.get_summary(node).boxed()
    }
}

impl KubeletFetcher<'_> {
    async fn get_summary(&self, node: &Value) -> Result<Value, String> {
        let (host, port) = kubelet_address(node).ok_or("the node reports no address")?;
        let addr: SocketAddr = tokio::net::lookup_host((host.as_str(), port))
            .await
            .ok()
            .and_then(|mut a| a.next())
            .ok_or_else(|| format!("cannot resolve {host}"))?;
        let req = http::Request::get("/stats/summary")
            .header(http::header::HOST, addr.to_string())
            .body(Body::empty())
            .map_err(|e| e.to_string())?;
        let resp = self.0.send(addr, req).await.map_err(|e| e.to_string())?;
        let status = resp.status();
        let body = http_body_util::BodyExt::collect(resp.into_body())
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        if !status.is_success() {
            return Err(format!(
                "{status}: {}",
                String::from_utf8_lossy(&body)
                    .chars()
                    .take(200)
                    .collect::<String>()
            ));
        }
        serde_json::from_slice(&body).map_err(|e| e.to_string())
    }
}

async fn list_stored(store: &Store, prefix: &str) -> Result<Vec<Value>, ApiError> {
    let (items, _) = store
        .list(prefix)
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?;
    items
        .iter()
        .map(|i| from_stored(&i.value, i.mod_revision))
        .collect()
}

fn selector(query: &HashMap<String, String>) -> Result<LabelSelector, ApiError> {
    LabelSelector::parse(query.get("labelSelector").map(String::as_str).unwrap_or(""))
        .map_err(|e| ApiError::bad_request(e.to_string()))
}

fn list_of(spec: &ResourceSpec, items: Vec<Value>) -> Value {
    json!({
        "kind": spec.list_kind,
        "apiVersion": convert::API_VERSION,
        "metadata": {},
        "items": items,
    })
}

/// get/list of nodes or pods in metrics.k8s.io (the caller has authorized the request); `cache`
/// holds the kubelets' recent summaries.
pub async fn serve(
    store: &Store,
    kubelet: &KubeletClient,
    cache: &Cache,
    spec: &'static ResourceSpec,
    rp: &ResourcePath,
    verb: &str,
    query: &HashMap<String, String>,
) -> Result<Response, ApiError> {
    if rp.subresource.is_some() {
        return Err(ApiError::path_not_found());
    }
    if !matches!(verb, "get" | "list") {
        return Err(ApiError::method_not_allowed(verb, spec.group, spec.plural));
    }
    let sel = selector(query)?;
    let nodes = list_stored(store, &NODES.key_prefix(None)).await?;
    let fetcher = KubeletFetcher(kubelet);
    let now = now_rfc3339();
    if spec.kind == "NodeMetrics" {
        let wanted: Vec<Value> = nodes
            .into_iter()
            .filter(|n| match &rp.name {
                Some(name) => n["metadata"]["name"] == name.as_str(),
                None => sel.matches(n),
            })
            .collect();
        let summaries = cache.summaries(&fetcher, &wanted).await;
        let items: Vec<Value> = wanted
            .iter()
            .filter_map(|n| {
                let name = n["metadata"]["name"].as_str()?;
                convert::node_metrics(n, summaries.get(name)?, &now)
            })
            .collect();
        return match &rp.name {
            Some(name) => items
                .into_iter()
                .next()
                .map(|m| ok_json(&m))
                // metrics-server names its kinds in NotFound (`nodemetrics.metrics.k8s.io`).
                .ok_or_else(|| ApiError::not_found(spec.group, "nodemetrics", name)),
            None => Ok(ok_json(&list_of(spec, items))),
        };
    }
    let pods = list_stored(store, &PODS.key_prefix(rp.namespace.as_deref())).await?;
    let wanted: Vec<Value> = pods
        .into_iter()
        .filter(|p| p["status"]["phase"] == "Running")
        .filter(|p| match &rp.name {
            Some(name) => p["metadata"]["name"] == name.as_str(),
            None => sel.matches(p),
        })
        .collect();
    let on: Vec<&str> = wanted
        .iter()
        .filter_map(|p| p["spec"]["nodeName"].as_str())
        .collect();
    let their_nodes: Vec<Value> = nodes
        .into_iter()
        .filter(|n| {
            n["metadata"]["name"]
                .as_str()
                .is_some_and(|m| on.contains(&m))
        })
        .collect();
    let summaries = cache.summaries(&fetcher, &their_nodes).await;
    let items: Vec<Value> = wanted
        .iter()
        .filter_map(|p| {
            let summary = summaries.get(p["spec"]["nodeName"].as_str()?)?;
            convert::pod_metrics(p, summary, &now)
        })
        .collect();
    match &rp.name {
        Some(name) => items
            .into_iter()
            .next()
            .map(|m| ok_json(&m))
            .ok_or_else(|| {
                let ns = rp.namespace.as_deref().unwrap_or_default();
                ApiError::not_found(spec.group, "podmetrics", &format!("{ns}/{name}"))
            }),
        None => Ok(ok_json(&list_of(spec, items))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    struct Counting(AtomicUsize);

    impl SummaryFetcher for Counting {
        fn fetch<'a>(&'a self, node: &'a Value) -> BoxFuture<'a, Result<Value, String>> {
            self.0.fetch_add(1, Ordering::SeqCst);
            let r = if node["metadata"]["name"] == "down" {
                Err("connection refused".into())
            } else {
                Ok(json!({"node": {"nodeName": node["metadata"]["name"]}}))
            };
            futures::future::ready(r).boxed()
        }
    }

    #[tokio::test]
    async fn summaries_are_reused_within_the_resolution() {
        let cache = Cache::default();
        let f = Counting(AtomicUsize::new(0));
        let nodes = vec![
            json!({"metadata": {"name": "n1"}}),
            json!({"metadata": {"name": "down"}}),
        ];
        let got = cache.summaries(&f, &nodes).await;
        assert_eq!(got.len(), 1, "a failing kubelet is left out");
        assert_eq!(got["n1"]["node"]["nodeName"], "n1");
        assert_eq!(f.0.load(Ordering::SeqCst), 2);
        let _ = cache.summaries(&f, &nodes[..1]).await;
        assert_eq!(f.0.load(Ordering::SeqCst), 2, "n1 is cached");
        // An expired entry is fetched again.
        {
            let mut e = cache.entries.lock().await;
            let entry = e.get_mut("n1").unwrap();
            entry.0 = Instant::now() - RESOLUTION;
        }
        let _ = cache.summaries(&f, &nodes[..1]).await;
        assert_eq!(f.0.load(Ordering::SeqCst), 3);
    }
}
