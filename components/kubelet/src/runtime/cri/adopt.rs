//! Adopting a pod that a previous run of the kubelet started: instead of a fresh worker that would make a
//! new sandbox, the worker takes over the sandbox still running and the containers in it, so a kubelet
//! restart leaves healthy pods alone. A child of [`super`] to fill in the worker's private state.
//!
//! Per spec container, the container with the highest attempt is the current one and the exited one
//! before it is kept as `previous` (`kubectl logs --previous`); its attempt is the restart count. A
//! running container stays untouched; an exited one is seen as a fresh exit by the next sync and handled
//! per restartPolicy. Probes start over, as upstream's after a kubelet restart: readiness is false until
//! its first success (the initial delay counted from the container's start, so a long-running container
//! is probed at the first sync), liveness is assumed to pass until it fails.

use std::collections::HashMap;

use super::super::api::{CriContainer, Sandbox};
use super::*;

/// Instant of a wall-clock time in the past (`now` when unknown or in the future).
fn instant_of(at: Option<SystemTime>, now: Instant) -> Instant {
    let elapsed = at
        .and_then(|t| SystemTime::now().duration_since(t).ok())
        .unwrap_or_default();
    now.checked_sub(elapsed).unwrap_or(now)
}

/// How a container that is no longer running ended, from its CRI status.
fn terminated_of(c: &CriContainer) -> Terminated {
    Terminated {
        exit_code: c.exit_code,
        signal: None,
        reason: if !c.reason.is_empty() {
            c.reason.clone()
        } else if c.exit_code == 0 {
            "Completed".into()
        } else {
            "Error".into()
        },
        message: Some(c.message.clone()).filter(|m| !m.is_empty()),
        started_at: from_nanos(c.started_at),
        finished_at: from_nanos(c.finished_at).unwrap_or_else(SystemTime::now),
    }
}

impl PodWorker {
    /// Takes over `sandbox` (ready, of this pod) and `found`, its containers with their CRI statuses.
    /// Returns the ids of containers the worker does not keep (older runs, names the spec lacks) for the
    /// caller to remove.
    pub fn adopt(
        &mut self,
        sandbox: &Sandbox,
        found: &[CriContainer],
        now: Instant,
    ) -> Vec<String> {
        let mut by_name: HashMap<&str, Vec<&CriContainer>> = HashMap::new();
        for c in found {
            let name = c
                .labels
                .get(spec::LABEL_CONTAINER_NAME)
                .map(String::as_str)
                .unwrap_or(&c.name);
            by_name.entry(name).or_default().push(c);
        }
        for runs in by_name.values_mut() {
            runs.sort_by_key(|c| std::cmp::Reverse(c.attempt));
        }
        let mut surplus: Vec<String> = Vec::new();
        for c in found {
            let name = c
                .labels
                .get(spec::LABEL_CONTAINER_NAME)
                .map(String::as_str)
                .unwrap_or(&c.name);
            if !self.ctrs.iter().any(|s| s.spec.name == name) && !self.is_ephemeral(name) {
                surplus.push(c.id.clone());
            }
        }
        let n_init = self.n_init;
        let apps_found = self.ctrs[n_init..]
            .iter()
            .any(|c| by_name.contains_key(c.spec.name.as_str()));
        for (i, c) in self.ctrs.iter_mut().enumerate() {
            let Some(runs) = by_name.get(c.spec.name.as_str()) else {
                // (A sidecar whose container is gone is started again by the next sync.)
                if i < n_init && apps_found && !c.restartable {
                    // Its container is gone but the app containers run: it completed before them.
                    c.done = true;
                    c.exit_handled = true;
                    c.state = ContainerState::Terminated(Terminated {
                        exit_code: 0,
                        signal: None,
                        reason: "Completed".into(),
                        message: None,
                        started_at: None,
                        finished_at: SystemTime::now(),
                    });
                }
                continue;
            };
            let current = runs[0];
            c.id = Some(current.id.clone());
            c.runs = current.attempt + 1;
            if let Some(prev) = runs.get(1) {
                c.previous = Some(prev.id.clone());
                if prev.state != CriState::Running {
                    c.last_termination = Some(terminated_of(prev));
                }
            }
            surplus.extend(runs.iter().skip(2).map(|r| r.id.clone()));
            match current.state {
                CriState::Running => {
                    let started_at = from_nanos(current.started_at).unwrap_or_else(SystemTime::now);
                    c.state = ContainerState::Running { pid: 0, started_at };
                    let started = instant_of(Some(started_at), now);
                    c.readiness = c
                        .spec
                        .readiness_probe
                        .as_ref()
                        .map(|p| ProbeState::new(p, started, false));
                    c.liveness = c
                        .spec
                        .liveness_probe
                        .as_ref()
                        .map(|p| ProbeState::new(p, started, true));
                    // The startup probe too starts over: liveness and readiness wait for it again.
                    c.startup = c
                        .spec
                        .startup_probe
                        .as_ref()
                        .map(|p| ProbeState::new(p, started, false));
                    c.started = c.startup.is_none();
                    c.ready = c.readiness.is_none() && c.started;
                }
                CriState::Exited if i < n_init && !c.restartable && current.exit_code == 0 => {
                    c.done = true;
                    c.exit_handled = true;
                    c.state = ContainerState::Terminated(terminated_of(current));
                }
                // Exited (or never started): the next sync sees the exit and acts per restartPolicy.
                _ => c.exit_handled = false,
            }
        }
        self.adopt_ephemeral(found);
        // App containers ran: the pod was initialized (only its sidecars are synced before them).
        self.initialized = apps_found;
        self.sandbox_id = Some(sandbox.id.clone());
        self.pod_ip = if self.host_network {
            Some(self.cfg.node_ip.clone())
        } else {
            // A stopped sandbox has no network left: the address the pod was reported with.
            sandbox
                .ip
                .clone()
                .or_else(|| self.pod.status.as_ref().and_then(|s| s.pod_ip.clone()))
        };
        if !sandbox.ready {
            self.adopt_ended(&by_name);
        }
        // The pod keeps the start time it was reported with.
        if let Some(t) = self.pod.status.as_ref().and_then(|s| s.start_time.as_ref()) {
            self.started_at = SystemTime::from(t.0);
        }
        tracing::info!(pod = %self.key, sandbox = %sandbox.id, ip = ?self.pod_ip, containers = found.len() - surplus.len(), "adopted the running pod");
        surplus
    }

    /// The stopped sandbox of a pod that may have ended before the restart (its sandbox is stopped
    /// as soon as it ends, [`super::terminal_sandbox`], and the restart may come before its status
    /// was posted): app containers whose exit is final under the pod's policy are taken as
    /// terminated, and if that ends the pod it stays ended — never a new sandbox and a second run
    /// of a completed container (upstream's computePodActions: no sandbox for a pod that will not
    /// restart). Otherwise the next sync replaces the sandbox as for any lost one.
    fn adopt_ended(&mut self, by_name: &HashMap<&str, Vec<&CriContainer>>) {
        let n_init = self.n_init;
        for c in &mut self.ctrs[n_init..] {
            let Some(current) = by_name.get(c.spec.name.as_str()).and_then(|r| r.first()) else {
                continue;
            };
            let final_exit = current.state == CriState::Exited
                && match c.policy {
                    RestartPolicy::Never => true,
                    RestartPolicy::OnFailure => current.exit_code == 0,
                    RestartPolicy::Always => false,
                };
            if final_exit {
                c.state = ContainerState::Terminated(terminated_of(current));
                c.done = true;
                c.exit_handled = true;
                c.ready = false;
            }
        }
        let status = self.status();
        let phase = crate::pod_phase::pod_phase(&status.init_containers, &status.containers);
        if crate::pod_phase::is_terminal(phase) {
            tracing::info!(pod = %self.key, phase, "adopted a pod that ended before the restart");
            self.sandbox_released = true;
        }
    }
}
