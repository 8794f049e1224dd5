//! The scheduling loop's side of preemption: after the PostFilter chose victims, the pod is
//! nominated to their node (in the cache at once, in its status with the FailedScheduling
//! condition), lower-priority pods nominated there lose that, and the victims are evicted in a task
//! of their own; until it reports, the pod is not tried again. PodDisruptionBudgets come from a
//! watch of their own.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::runtime::watcher;

use super::SchedulingLoop;
use crate::cache::pdb_key;
use crate::fit_error::FitError;
use crate::pod_info::{pod_key, PodInfo, PodKey};
use crate::preemption_exec::{self, KubePreemptionApi, Plan, PreemptionError};
use crate::preemption_verdict::Nomination;

/// A preemption's API calls finished.
pub(super) struct PreemptionDone {
    key: PodKey,
    result: Result<(), PreemptionError>,
}

impl SchedulingLoop {
    /// Acts on the PostFilter's verdict for an unschedulable pod; returns what to write as its
    /// `status.nominatedNodeName` (`""` clears it), None to leave it.
    pub(super) fn post_filter_outcome(&mut self, pod: &Arc<Pod>, fit: &FitError) -> Option<String> {
        self.metrics.preemption_attempt();
        let key = pod_key(pod);
        match &fit.nomination {
            Nomination::Unchanged => None,
            Nomination::Clear => {
                self.cache.nominator_mut().remove(&key);
                Some(String::new())
            }
            Nomination::Preempt(candidate) => {
                let info = PodInfo::new(pod);
                let lower: Vec<PodInfo> = self
                    .cache
                    .nominator()
                    .pods_on(&candidate.node)
                    .filter(|p| p.priority < info.priority && p.key != key)
                    .cloned()
                    .collect();
                let nominator = self.cache.nominator_mut();
                for p in &lower {
                    nominator.remove(&p.key);
                }
                nominator.nominate(info.clone(), &candidate.node);
                self.metrics.preemption_victims(candidate.victims.len());
                let victims: Vec<&str> = candidate.victims.iter().map(|v| v.key.as_str()).collect();
                tracing::info!(pod = %key, node = %candidate.node, ?victims, "preempting");
                let plan = Plan {
                    preemptor_uid: info.uid,
                    scheduler_name: pod
                        .spec
                        .as_ref()
                        .and_then(|s| s.scheduler_name.clone())
                        .unwrap_or_else(|| "default-scheduler".into()),
                    node: candidate.node.clone(),
                    victims: candidate.victims.clone(),
                    lower_nominated: lower,
                };
                self.preempting.insert(key.clone());
                let client = self.client.clone();
                let recorder = self.recorder.clone();
                let tx = self.preempt_tx.clone();
                tokio::spawn(async move {
                    let api = KubePreemptionApi {
                        client,
                        recorder: &recorder,
                    };
                    let result = preemption_exec::execute(&api, &plan).await;
                    let _ = tx.send(PreemptionDone { key, result });
                });
                Some(candidate.node.clone())
            }
        }
    }

    /// The pod may be tried again: its victims may already be gone (their deletion events found it
    /// parked), or an API call failed and another attempt should decide afresh.
    pub(super) fn on_preemption_done(&mut self, done: PreemptionDone) {
        self.preempting.remove(&done.key);
        if let Err(e) = &done.result {
            tracing::warn!(pod = %done.key, error = %e, "preemption failed; retrying after backoff");
        }
        self.queue.activate(&done.key, Instant::now());
    }

    pub(super) fn on_pdb_event(&mut self, ev: watcher::Event<PodDisruptionBudget>) {
        match ev {
            watcher::Event::Init => self.relist_pdbs = Some(HashSet::new()),
            watcher::Event::InitApply(pdb) => {
                if let Some(seen) = self.relist_pdbs.as_mut() {
                    seen.insert(pdb_key(&pdb));
                }
                self.cache.upsert_pdb(pdb);
            }
            watcher::Event::InitDone => {
                if let Some(seen) = self.relist_pdbs.take() {
                    self.cache.retain_pdbs(|k| seen.contains(k));
                }
                self.synced.pdbs = true;
            }
            watcher::Event::Apply(pdb) => self.cache.upsert_pdb(pdb),
            watcher::Event::Delete(pdb) => self.cache.remove_pdb(&pdb_key(&pdb)),
        }
    }
}
