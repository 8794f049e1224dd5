//! The worker's init sequence with sidecars ([`crate::sidecars`]) and its startup probes. A child of
//! [`super`] to reach the worker's private state.
//!
//! - Each sync asks [`sidecars::plan`] which init containers to sync, syncs them, and asks again (a
//!   regular init container that just completed, or a sidecar that just started, lets the next one
//!   start in the same sync) until the plan names nothing new.
//! - A startup probe holds a container's liveness and readiness probes off until it succeeds; until then
//!   the container is not `started` (a sidecar does not let the next init container start) and not
//!   ready. Reaching its failureThreshold kills the container, which is restarted per its policy.
//! - Once every app container has finished for good (restartPolicy Never/OnFailure), or a regular init
//!   container failed for good, the sidecars are stopped, the last one first, and not restarted.
//! - On pod termination ([`TerminationOrder`]) every container's preStop hook runs at once; a sidecar
//!   then waits (within its grace period) for the app containers and the sidecars after it to stop.

use std::collections::{HashMap, HashSet};

use tokio::sync::watch;

use super::*;
use crate::sidecars::{self, InitView};

impl PodWorker {
    fn init_views(&self) -> Vec<InitView> {
        self.ctrs[..self.n_init]
            .iter()
            .map(|c| InitView {
                restartable: c.restartable,
                succeeded: c.succeeded(),
                failed: !c.restartable
                    && c.done
                    && matches!(&c.state, ContainerState::Terminated(t) if t.exit_code != 0),
                started: c.started && matches!(c.state, ContainerState::Running { .. }),
            })
            .collect()
    }

    /// Syncs the init containers the plan names; true once the pod is initialized (the app containers
    /// may be synced).
    pub(super) async fn sync_init(&mut self, now: Instant) -> bool {
        let mut synced = vec![false; self.n_init];
        loop {
            let plan = sidecars::plan(&self.init_views(), self.initialized);
            if plan.failed {
                self.stop_sidecars(now).await;
                return false;
            }
            let todo: Vec<usize> = plan.sync.into_iter().filter(|&i| !synced[i]).collect();
            if todo.is_empty() {
                if plan.initialized && !self.initialized {
                    tracing::info!(pod = %self.key, "pod initialized");
                    self.initialized = true;
                }
                return plan.initialized;
            }
            for i in todo {
                self.sync_container(i, now).await;
                synced[i] = true;
            }
        }
    }

    /// After the app containers' sync: once none of them will run again, the sidecars have nothing left
    /// to serve and are stopped (upstream kills the pod's remaining containers then).
    pub(super) async fn finish_sidecars(&mut self, now: Instant) {
        let apps_done = self.ctrs[self.n_init..].iter().all(|c| c.done);
        let live_sidecar = self.ctrs[..self.n_init]
            .iter()
            .any(|c| c.restartable && !c.done);
        if apps_done && live_sidecar {
            self.stop_sidecars(now).await;
        }
    }

    /// Stops every sidecar, the last one first, each with its preStop hook and the pod's grace period,
    /// and keeps it from restarting.
    async fn stop_sidecars(&mut self, now: Instant) {
        for i in (0..self.n_init).rev() {
            if !self.ctrs[i].restartable || self.ctrs[i].done {
                continue;
            }
            self.ctrs[i].policy = RestartPolicy::Never;
            let running = matches!(self.ctrs[i].state, ContainerState::Running { .. });
            if let (true, Some(id)) = (running, self.ctrs[i].id.clone()) {
                let why = format!("Stopping container {}", self.ctrs[i].spec.name);
                if let Err(e) = self.stop_one(i, &id, self.grace, why).await {
                    tracing::warn!(pod = %self.key, container = %self.ctrs[i].spec.name, error = %e, "stopping sidecar");
                }
                // Sees the exit; with policy Never it is final.
                self.sync_container(i, now).await;
                if !self.ctrs[i].done {
                    // Still running (the stop failed): tried again next sync.
                    continue;
                }
            }
            let c = &mut self.ctrs[i];
            c.done = true;
            c.ready = false;
            c.restart_at = None;
            if !matches!(c.state, ContainerState::Terminated(_)) {
                if let Some(t) = c.last_termination.clone() {
                    c.state = ContainerState::Terminated(t);
                }
            }
        }
    }

    /// Container `i`'s startup probe, if it has not started yet; true once started (no startup probe:
    /// at once). Reaching the failure threshold kills the container (restarted per its policy).
    pub(super) async fn startup_probe(&mut self, i: usize, id: &str, now: Instant) -> bool {
        if self.ctrs[i].started {
            return true;
        }
        let spec = self.ctrs[i].spec.clone();
        let (Some(p), Some(due)) = (
            spec.startup_probe.clone(),
            self.ctrs[i].startup.as_ref().map(|s| s.due(now)),
        ) else {
            self.ctrs[i].started = true;
            return true;
        };
        if !due {
            return false;
        }
        let outcome = probe::run(&p, &spec, id, self.pod_ip.as_deref(), self.cri.as_ref()).await;
        if let Outcome::Failure(m) = &outcome {
            tracing::info!(pod = %self.key, container = %spec.name, "startup probe failed: {m}");
            self.event(
                Some(i),
                EventType::Warning,
                "Unhealthy",
                format!("Startup probe failed: {m}"),
            );
        }
        let state = self.ctrs[i].startup.as_mut().expect("checked above");
        state.record(now, outcome);
        if state.result {
            tracing::info!(pod = %self.key, container = %spec.name, "startup probe succeeded");
            self.ctrs[i].started = true;
            return true;
        }
        if state.failed_out() {
            let why = self.probe_kill_message(i, "startup");
            tracing::info!(pod = %self.key, container = %spec.name, "{why}");
            // The probe's own terminationGracePeriodSeconds, else the pod's (upstream).
            let grace = p
                .termination_grace_period_seconds
                .map(|s| Duration::from_secs(s.max(0) as u64))
                .unwrap_or(self.grace);
            if let Err(e) = self.stop_one(i, id, grace, why).await {
                tracing::warn!(pod = %self.key, container = %spec.name, error = %e, "stopping container that failed its startup probe");
            }
        }
        false
    }

    /// The Killing event's message for a container that failed its `kind` probe (upstream's texts).
    pub(super) fn probe_kill_message(&self, i: usize, kind: &str) -> String {
        let c = &self.ctrs[i];
        let name = &c.spec.name;
        if c.restartable {
            format!("Init container {name} failed {kind} probe")
        } else if c.policy == RestartPolicy::Never {
            format!("Container {name} failed {kind} probe")
        } else {
            format!("Container {name} failed {kind} probe, will be restarted")
        }
    }
}

/// Upstream's termination ordering while a pod is killed: which running containers each must outlive
/// ([`sidecars::termination_prerequisites`]) and which are still running.
pub(super) struct TerminationOrder {
    waits_for: HashMap<usize, Vec<usize>>,
    running: watch::Sender<HashSet<usize>>,
}

impl TerminationOrder {
    /// The order for stopping `running` (container indexes) of `w`.
    pub(super) fn new(w: &PodWorker, running: &[usize]) -> Self {
        let restartable: Vec<bool> = w.ctrs[..w.n_init].iter().map(|c| c.restartable).collect();
        TerminationOrder {
            waits_for: sidecars::termination_prerequisites(running, w.n_init, &restartable),
            running: watch::Sender::new(running.iter().copied().collect()),
        }
    }

    /// Waits, at most `limit`, until every container `i` must outlive has stopped; returns how long it
    /// waited.
    pub(super) async fn wait_for_turn(&self, i: usize, limit: Duration) -> Duration {
        let Some(deps) = self.waits_for.get(&i).filter(|d| !d.is_empty()) else {
            return Duration::ZERO;
        };
        let started = Instant::now();
        let mut rx = self.running.subscribe();
        let turn = rx.wait_for(|running| deps.iter().all(|d| !running.contains(d)));
        if tokio::time::timeout(limit, turn).await.is_err() {
            tracing::info!(
                container = i,
                "the containers it outlives did not stop within the grace period"
            );
        }
        started.elapsed()
    }

    /// Container `i` has been stopped (or its stop failed): those waiting for it may go on.
    pub(super) fn terminated(&self, i: usize) {
        self.running.send_modify(|r| {
            r.remove(&i);
        });
    }
}

#[cfg(test)]
#[path = "sidecar_tests.rs"]
mod tests;
