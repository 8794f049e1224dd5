//! The static pod source: polls --pod-manifest-path, compares each file's config hash, and starts, restarts
//! or stops pods in the runtime. It needs no API server, which is how the control plane itself gets started.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use tokio::sync::watch;

use crate::manifest::{is_manifest_file, read_static_pod};
use crate::runtime::{PodStatus, Runtime};

/// One manifest file and the pod made from it.
struct Entry {
    pod: Pod,
    uid: String,
    /// False when the runtime refused the pod (bad spec): not retried until the file changes.
    running: bool,
}

/// What one pass changed, by pod name (for tests and logs).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SyncReport {
    pub started: Vec<String>,
    pub restarted: Vec<String>,
    pub stopped: Vec<String>,
}

impl SyncReport {
    pub fn is_empty(&self) -> bool {
        self.started.is_empty() && self.restarted.is_empty() && self.stopped.is_empty()
    }
}

pub struct StaticPods {
    dir: PathBuf,
    node_name: String,
    runtime: Arc<dyn Runtime>,
    entries: tokio::sync::Mutex<BTreeMap<PathBuf, Entry>>,
    /// The static pods currently wanted, readable without awaiting (for mirror pods).
    current: Mutex<Vec<Pod>>,
    /// Last error per file, so a broken file is logged once per change, not every poll.
    errors: Mutex<HashMap<PathBuf, String>>,
}

fn name(pod: &Pod) -> String {
    pod.metadata.name.clone().unwrap_or_default()
}

impl StaticPods {
    pub fn new(dir: impl Into<PathBuf>, node_name: &str, runtime: Arc<dyn Runtime>) -> Self {
        StaticPods {
            dir: dir.into(),
            node_name: node_name.to_string(),
            runtime,
            entries: Default::default(),
            current: Default::default(),
            errors: Default::default(),
        }
    }

    fn note_error(&self, path: &Path, message: String) {
        let mut errors = self.errors.lock().unwrap_or_else(|p| p.into_inner());
        if errors.get(path) != Some(&message) {
            tracing::warn!(file = %path.display(), error = %message, "static pod manifest");
            errors.insert(path.to_path_buf(), message);
        }
    }

    fn clear_error(&self, path: &Path) {
        self.errors
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(path);
    }

    fn read_dir(&self) -> Vec<PathBuf> {
        let Ok(rd) = std::fs::read_dir(&self.dir) else {
            // A missing directory means no static pods (a worker), not an error worth repeating.
            return Vec::new();
        };
        let mut files: Vec<PathBuf> = rd
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| is_manifest_file(p))
            .collect();
        files.sort();
        files
    }

    /// One pass over the directory.
    pub async fn sync_once(&self) -> SyncReport {
        let mut report = SyncReport::default();
        let mut entries = self.entries.lock().await;
        let files = self.read_dir();
        // Removed files stop their pods.
        let gone: Vec<PathBuf> = entries
            .keys()
            .filter(|p| !files.contains(p))
            .cloned()
            .collect();
        for path in gone {
            if let Some(e) = entries.remove(&path) {
                self.stop(&e).await;
                report.stopped.push(name(&e.pod));
            }
            self.clear_error(&path);
        }
        for path in files {
            let pod = match read_static_pod(&path, &self.node_name) {
                Ok(p) => p,
                Err(e) => {
                    // A file being rewritten may be briefly invalid; the running pod stays until it parses.
                    self.note_error(&path, e.to_string());
                    continue;
                }
            };
            let uid = pod.metadata.uid.clone().unwrap_or_default();
            let previous = entries.get(&path).map(|e| e.uid.clone());
            if previous.as_deref() == Some(uid.as_str()) {
                continue;
            }
            if let Some(old) = entries.remove(&path) {
                self.stop(&old).await;
                report.restarted.push(name(&pod));
            } else {
                report.started.push(name(&pod));
            }
            let running = match self.runtime.run_pod(&pod).await {
                Ok(()) => {
                    self.clear_error(&path);
                    true
                }
                Err(e) => {
                    self.note_error(&path, e.to_string());
                    false
                }
            };
            entries.insert(path, Entry { pod, uid, running });
        }
        *self.current.lock().unwrap_or_else(|p| p.into_inner()) = entries
            .values()
            .filter(|e| e.running)
            .map(|e| e.pod.clone())
            .collect();
        if !report.is_empty() {
            tracing::info!(?report, "static pods changed");
        }
        report
    }

    async fn stop(&self, e: &Entry) {
        if e.running {
            if let Err(err) = self.runtime.stop_pod(&e.uid, None).await {
                tracing::warn!(pod = %name(&e.pod), error = %err, "stopping static pod");
            }
        }
    }

    /// The running static pods with their runtime status.
    pub fn pods(&self) -> Vec<(Pod, Option<PodStatus>)> {
        let pods = self
            .current
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        pods.into_iter()
            .map(|p| {
                let st = p
                    .metadata
                    .uid
                    .as_deref()
                    .and_then(|u| self.runtime.pod_status(u));
                (p, st)
            })
            .collect()
    }

    /// Polls until `shutdown` turns true, then stops every static pod.
    pub async fn run(self: Arc<Self>, every: Duration, mut shutdown: watch::Receiver<bool>) {
        loop {
            self.sync_once().await;
            tokio::select! {
                _ = tokio::time::sleep(every) => {}
                _ = shutdown.wait_for(|s| *s) => break,
            }
        }
        self.stop_all().await;
    }

    pub async fn stop_all(&self) {
        let mut entries = self.entries.lock().await;
        let all = std::mem::take(&mut *entries);
        // In parallel: each pod may wait out its own grace period.
        futures::future::join_all(all.values().map(|e| self.stop(e))).await;
        self.current
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }
}
