//! `/healthz` (kube-proxy's answer: 200 with `lastUpdated` while syncs keep up), `/livez`, `/readyz` and
//! Prometheus `/metrics` with sync counts and durations.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

#[derive(Debug, thiserror::Error)]
pub enum HealthError {
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

#[derive(Debug, Default, Clone)]
struct Counters {
    last_updated: Option<SystemTime>,
    /// Oldest change (or periodic resync) not yet applied.
    queued_since: Option<SystemTime>,
    syncs: u64,
    applies: u64,
    full_applies: u64,
    errors: u64,
    duration_sum: f64,
    nft_sum: f64,
    last_duration: f64,
    last_nft: f64,
    service_ports: usize,
    endpoints: usize,
    routes: usize,
    /// Per watched resource: the highest resourceVersion in the rules, and when it got there.
    synced: std::collections::BTreeMap<&'static str, (u64, SystemTime)>,
}

/// Shared between the sync loop and the HTTP server.
#[derive(Debug)]
pub struct Health {
    /// A queued change older than this means syncs are stuck (kube-proxy uses 2 × sync period).
    stale_after: Duration,
    counters: Mutex<Counters>,
}

/// What one finished sync reports.
#[derive(Debug, Clone, Copy, Default)]
pub struct SyncReport {
    pub ok: bool,
    /// The table was changed (false when the built table was unchanged).
    pub applied: bool,
    /// The change replaced the whole table (rather than updating the parts that changed).
    pub full: bool,
    pub duration: Duration,
    /// Of `duration`, the time spent applying rules with nft (the rest: building, diffing, routes).
    pub nft: Duration,
    pub service_ports: usize,
    pub endpoints: usize,
    pub routes: usize,
}

impl Health {
    pub fn new(sync_period: Duration) -> Arc<Self> {
        Arc::new(Health {
            stale_after: sync_period * 2,
            counters: Mutex::default(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Counters> {
        self.counters.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A change arrived; the next successful sync clears it.
    pub fn queued(&self) {
        self.lock().queued_since.get_or_insert_with(SystemTime::now);
    }

    pub fn record(&self, r: SyncReport) {
        let mut c = self.lock();
        c.syncs += 1;
        c.duration_sum += r.duration.as_secs_f64();
        c.nft_sum += r.nft.as_secs_f64();
        c.last_duration = r.duration.as_secs_f64();
        c.last_nft = r.nft.as_secs_f64();
        if r.ok {
            c.last_updated = Some(SystemTime::now());
            c.queued_since = None;
            c.applies += u64::from(r.applied);
            c.full_applies += u64::from(r.applied && r.full);
            c.service_ports = r.service_ports;
            c.endpoints = r.endpoints;
            c.routes = r.routes;
        } else {
            c.errors += 1;
        }
    }

    /// The rules now hold every `resource` object up to resourceVersion `rv` (the newest seen on that
    /// resource's watch before the sync built the table; one watch delivers in resourceVersion order).
    /// The time is recorded when `rv` first appears, so a benchmark can take write → rules from it.
    pub fn rules_synced(&self, resource: &'static str, rv: u64) {
        let mut c = self.lock();
        let e = c
            .synced
            .entry(resource)
            .or_insert((0, SystemTime::UNIX_EPOCH));
        if rv > e.0 {
            *e = (rv, SystemTime::now());
        }
    }

    /// Healthy once a sync succeeded and no change waits longer than `stale_after`.
    pub fn healthy_at(&self, now: SystemTime) -> bool {
        let c = self.lock();
        c.last_updated.is_some()
            && c.queued_since
                .is_none_or(|q| now.duration_since(q).unwrap_or_default() <= self.stale_after)
    }

    fn healthz_body(&self, now: SystemTime) -> String {
        let last = self.lock().last_updated;
        serde_json::json!({
            "lastUpdated": last.map(rfc3339).unwrap_or_default(),
            "currentTime": rfc3339(now),
            "nodeEligible": true,
        })
        .to_string()
    }

    pub fn metrics_text(&self) -> String {
        let c = self.lock().clone();
        let last = c
            .last_updated
            .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
            .map_or(0.0, |d| d.as_secs_f64());
        let mut s = String::new();
        let mut metric = |name: &str, kind: &str, help: &str, value: String| {
            s.push_str(&format!(
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}\n"
            ));
        };
        metric(
            "kiln_proxy_sync_total",
            "counter",
            "Syncs of the nftables table and routes.",
            c.syncs.to_string(),
        );
        metric(
            "kiln_proxy_sync_applied_total",
            "counter",
            "Syncs that rewrote the nftables table.",
            c.applies.to_string(),
        );
        metric(
            "kiln_proxy_sync_full_applies_total",
            "counter",
            "Syncs that replaced the whole nftables table (the others updated only what changed).",
            c.full_applies.to_string(),
        );
        metric(
            "kiln_proxy_sync_errors_total",
            "counter",
            "Syncs that failed.",
            c.errors.to_string(),
        );
        metric(
            "kiln_proxy_sync_duration_seconds_sum",
            "counter",
            "Total time spent syncing.",
            c.duration_sum.to_string(),
        );
        metric(
            "kiln_proxy_sync_nft_seconds_sum",
            "counter",
            "Of the time spent syncing, the time spent in nft.",
            c.nft_sum.to_string(),
        );
        metric(
            "kiln_proxy_sync_duration_seconds_count",
            "counter",
            "Number of timed syncs.",
            c.syncs.to_string(),
        );
        metric(
            "kiln_proxy_last_sync_duration_seconds",
            "gauge",
            "Duration of the last sync.",
            c.last_duration.to_string(),
        );
        metric(
            "kiln_proxy_last_sync_nft_seconds",
            "gauge",
            "Of the last sync, the time spent in nft (0 when the table was unchanged).",
            c.last_nft.to_string(),
        );
        metric(
            "kiln_proxy_last_sync_timestamp_seconds",
            "gauge",
            "Unix time of the last successful sync.",
            last.to_string(),
        );
        metric(
            "kiln_proxy_service_ports",
            "gauge",
            "Service ports with endpoints in the table.",
            c.service_ports.to_string(),
        );
        metric(
            "kiln_proxy_endpoints",
            "gauge",
            "Endpoints (service port × backend) in the table.",
            c.endpoints.to_string(),
        );
        metric(
            "kiln_proxy_routes",
            "gauge",
            "host-gw routes kiln keeps.",
            c.routes.to_string(),
        );
        // labelled by resource (services, endpointslices or endpoints)
        let rv = "kiln_proxy_rules_synced_resource_version";
        s.push_str(&format!(
            "# HELP {rv} Highest resourceVersion of the resource whose objects are all in the applied rules.\n# TYPE {rv} gauge\n"
        ));
        for (resource, (v, _)) in &c.synced {
            s.push_str(&format!("{rv}{{resource=\"{resource}\"}} {v}\n"));
        }
        let ts = "kiln_proxy_rules_synced_timestamp_seconds";
        s.push_str(&format!(
            "# HELP {ts} Unix time of the sync that brought the rules to that resourceVersion.\n# TYPE {ts} gauge\n"
        ));
        for (resource, (_, t)) in &c.synced {
            let secs = t
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64());
            s.push_str(&format!("{ts}{{resource=\"{resource}\"}} {secs:.6}\n"));
        }
        s
    }
}

fn rfc3339(t: SystemTime) -> String {
    time::OffsetDateTime::from(t)
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

async fn healthz(State(h): State<Arc<Health>>) -> Response {
    let now = SystemTime::now();
    let code = if h.healthy_at(now) {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (
        code,
        [(header::CONTENT_TYPE, "application/json")],
        h.healthz_body(now),
    )
        .into_response()
}

async fn metrics(State(h): State<Arc<Health>>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        h.metrics_text(),
    )
        .into_response()
}

pub fn router(health: Arc<Health>) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(healthz))
        .route("/livez", get(|| async { "ok" }))
        .route("/metrics", get(metrics))
        .with_state(health)
}

/// Binds `addr` and serves [`router`] in the background; returns the bound address (port 0 → real port).
pub async fn serve(addr: SocketAddr, health: Arc<Health>) -> Result<SocketAddr, HealthError> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| HealthError::Bind { addr, source })?;
    let local = listener
        .local_addr()
        .map_err(|source| HealthError::Bind { addr, source })?;
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, router(health)).await {
            tracing::error!(%local, error = %e, "health server stopped");
        }
    });
    Ok(local)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn healthy_after_first_sync_until_a_change_waits_too_long() {
        let h = Health::new(Duration::from_secs(30));
        let now = SystemTime::now();
        assert!(!h.healthy_at(now), "no sync yet");
        h.record(SyncReport {
            ok: true,
            applied: true,
            ..Default::default()
        });
        assert!(h.healthy_at(SystemTime::now()));
        h.queued();
        assert!(h.healthy_at(SystemTime::now() + Duration::from_secs(59)));
        assert!(!h.healthy_at(SystemTime::now() + Duration::from_secs(61)));
        h.record(SyncReport {
            ok: true,
            ..Default::default()
        });
        assert!(h.healthy_at(SystemTime::now() + Duration::from_secs(61)));
    }

    #[test]
    fn metrics_count_syncs_errors_and_applies() {
        let h = Health::new(Duration::from_secs(30));
        h.record(SyncReport {
            ok: true,
            applied: true,
            endpoints: 2,
            ..Default::default()
        });
        h.record(SyncReport {
            ok: true,
            ..Default::default()
        });
        h.record(SyncReport {
            ok: false,
            ..Default::default()
        });
        let m = h.metrics_text();
        assert!(m.contains("\nkiln_proxy_sync_total 3\n"), "{m}");
        assert!(m.contains("\nkiln_proxy_sync_applied_total 1\n"));
        assert!(m.contains("\nkiln_proxy_sync_errors_total 1\n"));
        assert!(m.contains("\nkiln_proxy_sync_full_applies_total 0\n"));
        h.rules_synced("endpointslices", 42);
        h.rules_synced("endpointslices", 41);
        let m = h.metrics_text();
        assert!(
            m.contains(
                "\nkiln_proxy_rules_synced_resource_version{resource=\"endpointslices\"} 42\n"
            ),
            "{m}"
        );
        assert!(m.contains(
            "\nkiln_proxy_rules_synced_timestamp_seconds{resource=\"endpointslices\"} 1"
        ));
        assert!(h
            .healthz_body(SystemTime::now())
            .contains("\"lastUpdated\":\"20"));
    }
}
