//! The kubelet's status manager: pod statuses are handed over here and posted by a task of their own, so
//! that a slow API server (or many pods changing at once) never holds up admitting and stopping pods in
//! the workload loop. Only the newest status of each pod is kept; several are posted side by side; a
//! failed post is retried after a pause unless a newer status has replaced it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Pod, PodStatus as ApiPodStatus};
use kube::api::{Api, PostParams};
use kube::Client;
use tokio::sync::{watch, Notify};

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
}

struct Pending {
    pod: Pod,
    status: ApiPodStatus,
    /// Bumped by every hand-over, so a failed post does not bring back an older status.
    generation: u64,
}

#[derive(Clone, Default)]
pub struct StatusManager {
    pending: Arc<Mutex<HashMap<String, Pending>>>,
    wake: Arc<Notify>,
    generation: Arc<std::sync::atomic::AtomicU64>,
}

impl StatusManager {
    /// Queues `status` for `pod` (keyed by uid), replacing one not yet posted.
    pub fn set(&self, uid: &str, pod: &Pod, status: ApiPodStatus) {
        let generation = self
            .generation
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.lock().insert(
            uid.to_string(),
            Pending {
                pod: pod.clone(),
                status,
                generation,
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

    /// Posts queued statuses until `shutdown`.
    pub async fn run(self, client: Client, mut shutdown: watch::Receiver<bool>) {
        loop {
            let batch: Vec<(String, Pending)> = self.lock().drain().collect();
            if batch.is_empty() {
                tokio::select! {
                    _ = self.wake.notified() => continue,
                    _ = shutdown.wait_for(|s| *s) => return,
                }
            }
            let failed: Vec<(String, Pending)> = futures::stream::iter(batch)
                .map(|(uid, p)| {
                    let client = client.clone();
                    async move {
                        match post_status(&client, &p.pod, p.status.clone()).await {
                            Ok(()) => None,
                            Err(e) => {
                                tracing::debug!(error = %e, "posting pod status; retrying");
                                Some((uid, p))
                            }
                        }
                    }
                })
                .buffer_unordered(IN_FLIGHT)
                .filter_map(|r| async move { r })
                .collect()
                .await;
            if failed.is_empty() {
                continue;
            }
            {
                let mut pending = self.lock();
                for (uid, p) in failed {
                    // A newer status handed over meanwhile wins.
                    if pending
                        .get(&uid)
                        .is_none_or(|q| q.generation < p.generation)
                    {
                        pending.insert(uid, p);
                    }
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(RETRY_AFTER) => {}
                _ = shutdown.wait_for(|s| *s) => return,
            }
        }
    }
}

async fn post_status(client: &Client, p: &Pod, status: ApiPodStatus) -> Result<(), StatusError> {
    let ns = p.metadata.namespace.as_deref().unwrap_or("default");
    let name = p.metadata.name.as_deref().unwrap_or_default();
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let err = |source| StatusError::Api {
        pod: format!("{ns}/{name}"),
        source,
    };
    // GET + PUT: the PUT carries the current resourceVersion, so a concurrent change is a conflict,
    // retried on the next pass.
    let mut current = match api.get_status(name).await {
        Ok(c) => c,
        // The pod is gone: nothing to report.
        Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
        Err(e) => return Err(err(e)),
    };
    if current.metadata.uid != p.metadata.uid {
        return Ok(());
    }
    current.status = Some(status);
    api.replace_status(name, &PostParams::default(), &current)
        .await
        .map_err(err)?;
    Ok(())
}
