//! The kubelet's status manager: pod statuses are handed over here and posted by a task of their own, so
//! that a slow API server (or many pods changing at once) never holds up admitting and stopping pods in
//! the workload loop. Only the newest status of each pod is kept; up to [`IN_FLIGHT`] pods are posted
//! side by side, each as soon as a slot frees (no batch waits for its slowest post); a failed post is
//! retried after a pause unless a newer status has replaced it.
//!
//! A post is one request: a JSON patch of the status subresource that first tests the pod's UID (a pod
//! deleted and re-created under the same name is not this status's pod), then sets the whole status. The
//! API server applies it to the current object, so there is no read-modify-write round trip and no
//! resourceVersion conflict to retry.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::stream::{FuturesUnordered, StreamExt};
use k8s_openapi::api::core::v1::{Pod, PodStatus as ApiPodStatus};
use kube::Client;
use tokio::sync::{watch, Notify};
use tokio::time::Instant;

/// Status updates in flight at once (the real kubelet's status manager is bounded by its client QPS).
const IN_FLIGHT: usize = 16;
const RETRY_AFTER: Duration = Duration::from_secs(1);

#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    #[error("pod {pod}: {source}")]
    Api {
        pod: String,
        #[source]
        source: kube::Error,
    },
    #[error("pod {pod}: building the status patch: {message}")]
    Request { pod: String, message: String },
}

struct Pending {
    pod: Pod,
    status: ApiPodStatus,
    /// Bumped by every hand-over, so a failed post does not bring back an older status.
    generation: u64,
    /// Not posted before this (a retry after a failure).
    not_before: Option<Instant>,
}

#[derive(Clone, Default)]
pub struct StatusManager {
    pending: Arc<Mutex<HashMap<String, Pending>>>,
    wake: Arc<Notify>,
    generation: Arc<std::sync::atomic::AtomicU64>,
}

impl StatusManager {
    /// Queues `status` for `pod` (keyed by uid), replacing one not yet posted.
    pub fn set(&self, uid: &str, pod: &Pod, mut status: ApiPodStatus) {
        // The whole status is replaced: keep the QoS class the API server gave the pod at creation
        // (upstream's kubelet reports the same class, computed the same way).
        if status.qos_class.is_none() {
            status.qos_class = pod.status.as_ref().and_then(|s| s.qos_class.clone());
        }
        let generation = self
            .generation
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.lock().insert(
            uid.to_string(),
            Pending {
                pod: pod.clone(),
                status,
                generation,
                not_before: None,
            },
        );
        self.wake.notify_one();
    }

    /// Forgets a pod's pending status (the pod is gone).
    pub fn forget(&self, uid: &str) {
        self.lock().remove(uid);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Pending>> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes up to `room` statuses that are due and whose pod has no post in flight (one post per pod
    /// at a time keeps them in order); returns them and the earliest time a held-back retry is due.
    fn take_due(
        &self,
        in_flight: &HashSet<String>,
        room: usize,
        now: Instant,
    ) -> (Vec<(String, Pending)>, Option<Instant>) {
        let mut pending = self.lock();
        let mut next_retry: Option<Instant> = None;
        let mut due: Vec<String> = Vec::new();
        for (uid, p) in pending.iter() {
            if in_flight.contains(uid) {
                continue;
            }
            match p.not_before {
                Some(at) if at > now => next_retry = Some(next_retry.map_or(at, |n| n.min(at))),
                _ => due.push(uid.clone()),
            }
        }
        // Oldest hand-over first, so a steady stream of new pods cannot starve an older one.
        due.sort_by_key(|u| pending[u].generation);
        due.truncate(room);
        let taken = due
            .into_iter()
            .filter_map(|u| pending.remove(&u).map(|p| (u, p)))
            .collect();
        (taken, next_retry)
    }

    /// Puts a failed post back for a retry, unless a newer status was handed over meanwhile.
    fn retry(&self, uid: String, mut p: Pending) {
        let mut pending = self.lock();
        if pending
            .get(&uid)
            .is_none_or(|q| q.generation < p.generation)
        {
            p.not_before = Some(Instant::now() + RETRY_AFTER);
            pending.insert(uid, p);
        }
    }

    /// Posts queued statuses until `shutdown`.
    pub async fn run(self, client: Client, mut shutdown: watch::Receiver<bool>) {
        let mut in_flight: HashSet<String> = HashSet::new();
        let mut posts = FuturesUnordered::new();
        loop {
            let (batch, next_retry) =
                self.take_due(&in_flight, IN_FLIGHT - in_flight.len(), Instant::now());
            for (uid, p) in batch {
                in_flight.insert(uid.clone());
                let client = client.clone();
                posts.push(async move {
                    let r = post_status(&client, &p.pod, &p.status).await;
                    (uid, p, r)
                });
            }
            let retry_at = next_retry.unwrap_or_else(|| Instant::now() + Duration::from_secs(3600));
            tokio::select! {
                Some((uid, p, r)) = posts.next(), if !posts.is_empty() => {
                    in_flight.remove(&uid);
                    if let Err(e) = r {
                        tracing::debug!(error = %e, "posting pod status; retrying");
                        self.retry(uid, p);
                    }
                }
                _ = self.wake.notified() => {}
                _ = tokio::time::sleep_until(retry_at), if next_retry.is_some() => {}
                _ = shutdown.wait_for(|s| *s) => return,
            }
        }
    }
}

/// The JSON patch that sets `status` on the pod with `uid` (and fails on any other).
pub fn status_patch(uid: &str, status: &ApiPodStatus) -> serde_json::Value {
    serde_json::json!([
        {"op": "test", "path": "/metadata/uid", "value": uid},
        {"op": "add", "path": "/status", "value": status},
    ])
}

pub async fn post_status(
    client: &Client,
    p: &Pod,
    status: &ApiPodStatus,
) -> Result<(), StatusError> {
    let ns = p.metadata.namespace.as_deref().unwrap_or("default");
    let name = p.metadata.name.as_deref().unwrap_or_default();
    let pod = format!("{ns}/{name}");
    let uid = p.metadata.uid.as_deref().unwrap_or_default();
    let body =
        serde_json::to_vec(&status_patch(uid, status)).map_err(|e| StatusError::Request {
            pod: pod.clone(),
            message: e.to_string(),
        })?;
    let req = http::Request::patch(format!("/api/v1/namespaces/{ns}/pods/{name}/status"))
        .header(http::header::CONTENT_TYPE, "application/json-patch+json")
        .body(body)
        .map_err(|e| StatusError::Request {
            pod: pod.clone(),
            message: e.to_string(),
        })?;
    match client.request::<Pod>(req).await {
        Ok(_) => Ok(()),
        // The pod is gone: nothing to report.
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        // The UID test failed (the name now belongs to another pod), or the status itself is invalid:
        // posting it again cannot succeed.
        Err(kube::Error::Api(s)) if s.code == 422 => {
            if !s.message.contains("test failed") {
                tracing::warn!(%pod, error = %s.message, "the API server refused the pod's status");
            }
            Ok(())
        }
        Err(source) => Err(StatusError::Api { pod, source }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(uid: &str) -> Pod {
        let mut p = Pod::default();
        p.metadata.uid = Some(uid.into());
        p
    }

    #[test]
    fn patch_tests_the_uid_then_sets_the_whole_status() {
        let st = ApiPodStatus {
            phase: Some("Running".into()),
            ..Default::default()
        };
        let v = status_patch("u1", &st);
        assert_eq!(v[0]["op"], "test");
        assert_eq!(v[0]["path"], "/metadata/uid");
        assert_eq!(v[0]["value"], "u1");
        assert_eq!(v[1]["op"], "add");
        assert_eq!(v[1]["path"], "/status");
        assert_eq!(v[1]["value"]["phase"], "Running");
    }

    #[tokio::test]
    async fn takes_oldest_first_skips_in_flight_and_holds_back_retries() {
        let m = StatusManager::default();
        for u in ["a", "b", "c", "d"] {
            m.set(u, &pod(u), ApiPodStatus::default());
        }
        let in_flight = HashSet::from(["b".to_string()]);
        let now = Instant::now();
        let (taken, next) = m.take_due(&in_flight, 2, now);
        let names: Vec<&str> = taken.iter().map(|(u, _)| u.as_str()).collect();
        assert_eq!(names, ["a", "c"]);
        assert!(next.is_none());
        // A failed post comes back held until RETRY_AFTER.
        let (uid, p) = taken.into_iter().next().unwrap();
        m.retry(uid, p);
        let (taken, next) = m.take_due(&HashSet::new(), 10, Instant::now());
        let names: Vec<&str> = taken.iter().map(|(u, _)| u.as_str()).collect();
        assert_eq!(names, ["b", "d"]);
        assert!(next.is_some());
    }

    #[tokio::test]
    async fn a_newer_status_wins_over_a_failed_older_post() {
        let m = StatusManager::default();
        m.set("a", &pod("a"), ApiPodStatus::default());
        let (mut taken, _) = m.take_due(&HashSet::new(), 1, Instant::now());
        let newer = ApiPodStatus {
            phase: Some("Running".into()),
            ..Default::default()
        };
        m.set("a", &pod("a"), newer);
        let (uid, old) = taken.remove(0);
        m.retry(uid, old);
        let (taken, _) = m.take_due(&HashSet::new(), 1, Instant::now());
        assert_eq!(taken[0].1.status.phase.as_deref(), Some("Running"));
        assert!(taken[0].1.not_before.is_none());
    }
}
