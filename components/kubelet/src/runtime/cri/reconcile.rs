//! Start-up reconciliation with what containerd already runs: a restarted kubelet (or one whose node
//! rebooted) finds the sandboxes it labelled in an earlier run. A ready sandbox of a pod this node should
//! still run is adopted with its containers ([`super::worker::PodWorker::adopt`]), so the kubelet's
//! restart does not restart healthy pods; every other sandbox (pods deleted or moved away, sandboxes that
//! are not ready because the host rebooted or the pause process died) is stopped and removed, and its pod
//! is started afresh by the workload loop if still wanted.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::api::{CriContainer, Sandbox};
use super::*;
use crate::container_status::RestartPolicy;
use crate::volumes;

/// What [`CriRuntime::reconcile`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reconciled {
    /// Pod uids whose sandbox was adopted.
    pub adopted: Vec<String>,
    /// Sandboxes stopped and removed.
    pub removed: usize,
}

impl CriRuntime {
    /// Adopts the ready sandboxes of `wanted` (this node's pods from the API's first full list) that this
    /// runtime does not run yet, removes every other sandbox it labelled, then the volume directories of
    /// pods that are neither. An error (the runtime not answering) leaves the rest for the next call.
    pub async fn reconcile(&self, wanted: &[Pod]) -> Result<Reconciled, RuntimeError> {
        let labels = HashMap::from([(
            spec::LABEL_MANAGED_BY.to_string(),
            spec::MANAGED_BY.to_string(),
        )]);
        let sandboxes = self
            .cri
            .list_pod_sandboxes(labels)
            .await
            .map_err(|e| self.not_ready(e.to_string()))?;
        let wanted: HashMap<&str, &Pod> = wanted
            .iter()
            .filter_map(|p| p.metadata.uid.as_deref().map(|u| (u, p)))
            .filter(|(u, _)| !u.is_empty())
            .collect();
        let known: HashSet<String> = self.pod_uids().into_iter().collect();
        let mut by_uid: BTreeMap<String, Vec<Sandbox>> = BTreeMap::new();
        for sb in sandboxes {
            let uid = sb
                .labels
                .get(spec::LABEL_POD_UID)
                .cloned()
                .unwrap_or_default();
            by_uid.entry(uid).or_default().push(sb);
        }
        let mut done = Reconciled::default();
        for (uid, mut list) in by_uid {
            if known.contains(&uid) {
                // Started by this run: its worker owns its sandboxes.
                continue;
            }
            // One ready sandbox is adopted (the newest, should there be several); the rest go. A
            // pod that may have ended (a policy other than Always) keeps its stopped sandbox: the
            // worker sees whether its containers are done ([`PodWorker::adopt`]).
            list.sort_by_key(|s| std::cmp::Reverse(s.ready));
            let adopt = match wanted.get(uid.as_str()) {
                Some(pod) if list.first().is_some_and(|s| s.ready || may_have_ended(pod)) => {
                    Some((*pod, list.remove(0)))
                }
                _ => None,
            };
            for sb in &list {
                let why = if wanted.contains_key(uid.as_str()) {
                    "not ready; the pod is started again"
                } else {
                    "its pod is no longer bound to this node"
                };
                tracing::info!(sandbox = %sb.id, pod_uid = %uid, why, "removing a sandbox left by an earlier run");
                // RemovePodSandbox also removes the sandbox's containers.
                let _ = self.cri.stop_pod_sandbox(&sb.id).await;
                match self.cri.remove_pod_sandbox(&sb.id).await {
                    Ok(()) => done.removed += 1,
                    Err(e) if e.is_not_found() => {}
                    Err(e) => return Err(self.not_ready(e.to_string())),
                }
            }
            if let Some((pod, sb)) = adopt {
                self.adopt_pod(pod, &sb).await?;
                done.adopted.push(uid);
            }
        }
        let mut keep: Vec<String> = wanted.keys().map(|u| u.to_string()).collect();
        keep.extend(known);
        // Leftovers must not keep workloads from running: logged, retried at the next start.
        if let Err(e) = volumes::remove_orphans(&self.cfg.pods_root, &keep) {
            tracing::warn!(error = %e, "removing volumes of pods this kubelet no longer runs");
        }
        Ok(done)
    }

    /// Takes `pod`'s running sandbox over: its containers with their statuses go to a new worker, which
    /// syncs once (probes, volumes) before its status is published, so the first status reported after
    /// a restart is the pod's real one.
    async fn adopt_pod(&self, pod: &Pod, listed_sb: &Sandbox) -> Result<(), RuntimeError> {
        // The list carries no network: the pod IP comes from PodSandboxStatus.
        let sb = &Sandbox {
            labels: listed_sb.labels.clone(),
            ..self
                .cri
                .pod_sandbox_status(&listed_sb.id)
                .await
                .map_err(|e| self.not_ready(e.to_string()))?
        };
        let listed = self
            .cri
            .list_containers(&sb.id)
            .await
            .map_err(|e| self.not_ready(e.to_string()))?;
        let mut found: Vec<CriContainer> = Vec::with_capacity(listed.len());
        for c in listed {
            match self.cri.container_status(&c.id).await {
                Ok(st) => found.push(CriContainer {
                    labels: if st.labels.is_empty() {
                        c.labels
                    } else {
                        st.labels.clone()
                    },
                    ..st
                }),
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(self.not_ready(e.to_string())),
            }
        }
        let mut w = match self.make_worker(pod) {
            Ok(w) => w,
            Err(e) => {
                // Not a spec this kubelet can run: the workload loop refuses it; its sandbox goes.
                tracing::warn!(sandbox = %sb.id, error = %e, "cannot adopt the pod; removing its sandbox");
                let _ = self.cri.stop_pod_sandbox(&sb.id).await;
                let _ = self.cri.remove_pod_sandbox(&sb.id).await;
                return Ok(());
            }
        };
        let now = Instant::now();
        for id in w.adopt(sb, &found, now) {
            if let Err(e) = self.cri.remove_container(&id).await {
                if !e.is_not_found() {
                    tracing::warn!(pod = %w.key(), container = %id, error = %e, "removing an old container");
                }
            }
        }
        w.sync(now).await;
        self.spawn_worker(pod, w)
    }
}

#[cfg(test)]
#[path = "reconcile_tests.rs"]
mod tests;

/// A pod whose containers are not all restarted whatever their exit (restartPolicy Never or
/// OnFailure): its stopped sandbox may be that of a pod that ended.
fn may_have_ended(pod: &Pod) -> bool {
    let policy = pod.spec.as_ref().and_then(|s| s.restart_policy.as_deref());
    RestartPolicy::parse(policy) != RestartPolicy::Always
}
