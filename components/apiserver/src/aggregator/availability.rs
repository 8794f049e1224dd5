//! Upstream's availability controller for service-backed APIServices: the Service must exist and
//! have a ready endpoint on the APIService's port, and GET `/apis/<group>/<version>` over TLS must
//! answer 2xx; the result is the Available condition (Passed, ServiceNotFound, ServicePortError,
//! EndpointsNotFound, MissingEndpoints, FailedDiscoveryCheck). Checked every RESYNC and whenever an
//! APIService, or a Service or EndpointSlice in a namespace one points at, changes. Every apiserver
//! of an HA control plane runs it; status writes are compare-and-swap, so they converge.

use std::time::Duration;

use http_body_util::{BodyExt, Empty};
use serde_json::{json, Value};
use tokio::sync::watch;

use super::resolve::{resolve, Resolution};
use super::{client, headers, local, Aggregator, AggregatorError, Backend, FrontProxy};
use crate::registry::apiregistration::APISERVICES;
use crate::registry::lifecycle::now_rfc3339;
use crate::registry::services::{ENDPOINT_SLICES, SERVICES};
use crate::registry::Registry;
use crate::storage::{Store, StoreEvent};

/// Upstream re-checks about this often, so a dead extension server shows within seconds.
pub const RESYNC: Duration = Duration::from_secs(10);
/// Upstream's discovery client timeout.
const CHECK_TIMEOUT: Duration = Duration::from_secs(5);
const RETRY: Duration = Duration::from_secs(1);
/// Largest discovery document kept.
const MAX_DISCOVERY: usize = 3 * 1024 * 1024;

/// One check's verdict, and the resource list it read.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub status: &'static str,
    pub reason: &'static str,
    pub message: String,
    pub resources: Option<Value>,
}

impl Outcome {
    fn failed(reason: &'static str, message: String) -> Outcome {
        Outcome {
            status: "False",
            reason,
            message,
            resources: None,
        }
    }
}

/// The discovery path an extension server must serve (`/api/v1` for a delegated core group).
fn discovery_path(backend: &Backend) -> String {
    if backend.name == "v1." {
        format!("/api/{}", backend.version)
    } else {
        format!("/apis/{}/{}", backend.group, backend.version)
    }
}

pub async fn check(store: &Store, front_proxy: Option<&FrontProxy>, backend: &Backend) -> Outcome {
    let endpoint = match resolve(store, &backend.service).await {
        Ok(Resolution::Ready(e)) => e,
        Ok(other) => {
            let (reason, message) = other.failure(&backend.service).unwrap_or_default();
            return Outcome::failed(reason, message);
        }
        Err(e) => {
            let svc = &backend.service;
            return Outcome {
                status: "Unknown",
                reason: "ServiceAccessError",
                message: format!(
                    "service/{} in {:?} cannot be checked due to: {e}",
                    svc.name, svc.namespace
                ),
                resources: None,
            };
        }
    };
    let path = discovery_path(backend);
    let url = format!("https://{}:{}{path}", endpoint.host, endpoint.port);
    let failing = |why: String| {
        Outcome::failed(
            "FailedDiscoveryCheck",
            format!("failing or missing response from {url}: {why}"),
        )
    };
    let connector = match client::connector(backend, front_proxy) {
        Ok(c) => c,
        Err(e) => return failing(e.to_string()),
    };
    let mut req = http::Request::get(path.as_str())
        .header(http::header::ACCEPT, "application/json")
        .header(
            http::header::HOST,
            format!("{}:{}", endpoint.server_name, backend.service.port),
        )
        .body(Empty::<bytes::Bytes>::new())
        .expect("static request parts");
    // As upstream: the check asks as system:kube-aggregator in system:masters, so the extension
    // server's own authorization never makes it fail.
    headers::set_identity(
        req.headers_mut(),
        "system:kube-aggregator",
        &["system:masters".to_string()],
        &Default::default(),
    );
    let attempt = async {
        let resp = client::send(&endpoint, &connector, req).await?;
        let status = resp.status();
        if !status.is_success() {
            return Err(format!("bad status from {url}: {}", status.as_u16()));
        }
        let body = http_body_util::Limited::new(resp.into_body(), MAX_DISCOVERY)
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        Ok(serde_json::from_slice::<Value>(&body).ok())
    };
    match tokio::time::timeout(CHECK_TIMEOUT, attempt).await {
        Err(_) => Outcome::failed(
            "FailedDiscoveryCheck",
            format!("timed out waiting for {url}"),
        ),
        Ok(Err(why)) => failing(why),
        Ok(Ok(doc)) => Outcome {
            status: "True",
            reason: "Passed",
            message: "all checks passed".into(),
            resources: doc.filter(|d| d["kind"] == "APIResourceList"),
        },
    }
}

/// The APIService with its Available condition set to the outcome; lastTransitionTime moves only
/// when the status does.
pub fn with_outcome(obj: &Value, outcome: &Outcome) -> Value {
    let previous = obj["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Available");
    let since = match previous {
        Some(p) if p["status"] == outcome.status => p["lastTransitionTime"].clone(),
        _ => json!(now_rfc3339()),
    };
    let mut updated = obj.clone();
    local::set_available(
        &mut updated,
        json!({"type": "Available", "status": outcome.status, "lastTransitionTime": since,
               "reason": outcome.reason, "message": outcome.message}),
    );
    updated
}

/// Reads the stored APIServices into the proxy's view without checking anything, so a restarted
/// apiserver routes by the last written availability from its first request on.
pub async fn load(store: &Store, aggregator: &Aggregator) -> Result<(), AggregatorError> {
    let (stored, _) = local::list(store).await?;
    let backends = stored
        .iter()
        .filter_map(|(_, o)| Backend::from_apiservice(o))
        .collect();
    aggregator.set_backends(backends);
    Ok(())
}

/// One pass: Local APIServices, then every service-backed one checked (concurrently) and its
/// condition written. Returns the revision read.
pub async fn reconcile(
    store: &Store,
    registry: &Registry,
    aggregator: &Aggregator,
) -> Result<i64, AggregatorError> {
    let (stored, revision) = local::list(store).await?;
    local::ensure(store, registry, &stored).await?;
    let remote: Vec<_> = stored
        .iter()
        .filter_map(|(item, obj)| Some((item, obj, Backend::from_apiservice(obj)?)))
        .collect();
    let front_proxy = aggregator.front_proxy.as_deref();
    let outcomes = futures::future::join_all(
        remote
            .iter()
            .map(|(_, _, backend)| check(store, front_proxy, backend)),
    )
    .await;
    let mut backends = Vec::new();
    for ((item, obj, mut backend), outcome) in remote.into_iter().zip(outcomes) {
        let updated = with_outcome(obj, &outcome);
        if updated != *obj {
            if backend.available != (outcome.status == "True") {
                tracing::info!(apiservice = %backend.name, status = outcome.status,
                    reason = outcome.reason, message = %outcome.message, "changing APIService availability");
            }
            local::write(store, item, &updated).await?;
        }
        backend.available = outcome.status == "True";
        backend.resources = outcome.resources;
        backends.push(backend);
    }
    aggregator.set_backends(backends);
    Ok(revision)
}

/// Whether a Service or EndpointSlice change can matter to an APIService.
fn relevant(key: &str, backends: &[Backend]) -> bool {
    backends.iter().any(|b| {
        let svc = &b.service;
        key == SERVICES.key(Some(&svc.namespace), &svc.name)
            || key.starts_with(&ENDPOINT_SLICES.key_prefix(Some(&svc.namespace)))
    })
}

fn event_key(e: &StoreEvent) -> &str {
    match e {
        StoreEvent::Put { current, .. } => &current.key,
        StoreEvent::Delete { key, .. } => key,
        StoreEvent::Compacted { .. } => "",
    }
}

/// Runs passes until `stop`.
pub async fn run(
    store: Store,
    registry: Registry,
    aggregator: Aggregator,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        let revision = match reconcile(&store, &registry, &aggregator).await {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e, "APIService availability pass failed");
                tokio::select! {
                    _ = stop.changed() => return,
                    _ = tokio::time::sleep(RETRY) => continue,
                }
            }
        };
        let watches = futures::future::try_join3(
            store.watch(&APISERVICES.key_prefix(None), revision + 1),
            store.watch(&SERVICES.key_prefix(None), revision + 1),
            store.watch(&ENDPOINT_SLICES.key_prefix(None), revision + 1),
        )
        .await;
        let (mut apiservices, mut services, mut slices) = match watches {
            Ok(w) => w,
            Err(e) => {
                tracing::warn!(error = %e, "APIService watch failed");
                tokio::select! {
                    _ = stop.changed() => return,
                    _ = tokio::time::sleep(RETRY) => continue,
                }
            }
        };
        let backends = aggregator.backends();
        let resync = tokio::time::sleep(RESYNC);
        tokio::pin!(resync);
        loop {
            let events = tokio::select! {
                _ = stop.changed() => return,
                _ = &mut resync => break,
                _ = apiservices.next() => break,
                e = services.next() => e,
                e = slices.next() => e,
            };
            match events {
                Ok(Some(events)) if events.iter().any(|e| relevant(event_key(e), &backends)) => {
                    break
                }
                Ok(Some(_)) => continue,
                // The stream ended or failed: a fresh pass opens new ones.
                _ => break,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregator::ServiceRef;

    fn backend() -> Backend {
        Backend {
            name: "v1beta1.metrics.example.com".into(),
            group: "metrics.example.com".into(),
            version: "v1beta1".into(),
            group_priority: 100,
            version_priority: 100,
            service: ServiceRef {
                namespace: "kube-system".into(),
                name: "metrics".into(),
                port: 443,
            },
            ca_bundle: Vec::new(),
            insecure: true,
            available: false,
            resources: None,
        }
    }

    #[test]
    fn discovery_checks_ask_for_the_group_version() {
        assert_eq!(
            discovery_path(&backend()),
            "/apis/metrics.example.com/v1beta1"
        );
        let mut core = backend();
        core.name = "v1.".into();
        core.version = "v1".into();
        assert_eq!(discovery_path(&core), "/api/v1");
    }

    #[test]
    fn the_transition_time_moves_only_with_the_status() {
        let obj = json!({"status": {"conditions": [{"type": "Available", "status": "False",
            "lastTransitionTime": "2020-01-01T00:00:00Z", "reason": "MissingEndpoints", "message": "x"}]}});
        let same = with_outcome(&obj, &Outcome::failed("ServiceNotFound", "gone".into()));
        let c = &same["status"]["conditions"][0];
        assert_eq!(c["lastTransitionTime"], "2020-01-01T00:00:00Z");
        assert_eq!(
            (c["reason"].as_str(), c["message"].as_str()),
            (Some("ServiceNotFound"), Some("gone"))
        );
        let passed = Outcome {
            status: "True",
            reason: "Passed",
            message: "all checks passed".into(),
            resources: None,
        };
        let flipped = with_outcome(&obj, &passed);
        assert_ne!(
            flipped["status"]["conditions"][0]["lastTransitionTime"],
            "2020-01-01T00:00:00Z"
        );
        assert_eq!(
            with_outcome(&flipped, &passed),
            flipped,
            "no change, no write"
        );
    }

    #[test]
    fn only_services_and_slices_an_apiservice_points_at_trigger_a_pass() {
        let bs = [backend()];
        assert!(relevant(&SERVICES.key(Some("kube-system"), "metrics"), &bs));
        assert!(relevant(
            &ENDPOINT_SLICES.key(Some("kube-system"), "metrics-abc"),
            &bs
        ));
        assert!(!relevant(&SERVICES.key(Some("default"), "web"), &bs));
        assert!(!relevant(
            &ENDPOINT_SLICES.key(Some("default"), "web-1"),
            &bs
        ));
    }
}
