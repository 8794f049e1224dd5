//! Liveness and readiness probes of a running container, after its startup probe ([`super::init_sync`]):
//! a liveness failure past its threshold kills the container (restarted per its policy), readiness sets
//! `ready`. A child of the worker to use its private state.

use super::*;

impl PodWorker {
    pub(super) async fn probe(&mut self, i: usize, id: &str, now: Instant) {
        // Liveness and readiness wait for the startup probe.
        if !self.startup_probe(i, id, now).await {
            return;
        }
        let cri = self.cri.clone();
        let pod_ip = self.pod_ip.clone();
        let key = self.key.clone();
        let spec = self.ctrs[i].spec.clone();
        if let (Some(p), true) = (
            spec.liveness_probe.clone(),
            self.ctrs[i].liveness.as_ref().is_some_and(|s| s.due(now)),
        ) {
            let outcome = probe::run(&p, &spec, id, pod_ip.as_deref(), cri.as_ref()).await;
            if let Outcome::Failure(m) = &outcome {
                tracing::info!(pod = %key, container = %spec.name, "liveness probe failed: {m}");
                self.event(
                    Some(i),
                    EventType::Warning,
                    "Unhealthy",
                    format!("Liveness probe failed: {m}"),
                );
            }
            let state = self.ctrs[i].liveness.as_mut().expect("checked above");
            if state.record(now, outcome) && !state.result {
                let why = self.probe_kill_message(i, "liveness");
                tracing::info!(pod = %key, container = %spec.name, "{why}");
                self.ctrs[i].ready = false;
                if let Err(e) = self.stop_one(i, id, self.grace, why).await {
                    tracing::warn!(pod = %key, container = %spec.name, error = %e, "stopping unhealthy container");
                }
                return;
            }
        }
        let Some(p) = spec.readiness_probe.clone() else {
            self.ctrs[i].ready = true;
            return;
        };
        let Some(due) = self.ctrs[i].readiness.as_ref().map(|s| s.due(now)) else {
            self.ctrs[i].ready = true;
            return;
        };
        if due {
            let outcome = probe::run(&p, &spec, id, pod_ip.as_deref(), cri.as_ref()).await;
            if let Outcome::Failure(m) = &outcome {
                self.event(
                    Some(i),
                    EventType::Warning,
                    "Unhealthy",
                    format!("Readiness probe failed: {m}"),
                );
            }
            let state = self.ctrs[i].readiness.as_mut().expect("checked above");
            if state.record(now, outcome) {
                tracing::info!(pod = %key, container = %spec.name, ready = state.result, "readiness changed");
            }
        }
        let c = &mut self.ctrs[i];
        c.ready = c.readiness.as_ref().is_some_and(|s| s.result);
    }
}
