//! A pod whose containers have all ended for good (phase Succeeded or Failed) gives its sandbox back at
//! once, as upstream's pod worker does when it syncs a terminated pod (SyncTerminatingPod →
//! KillPod → StopPodSandbox): containerd's CNI DEL frees the pod's address and its network namespace.
//! The stopped sandbox and the exited containers stay (their logs, `kubectl logs`) until the pod is
//! deleted ([`PodWorker::kill`] removes them), and the status keeps the last podIP as upstream's
//! status does. Without this, a node's completed Job pods kept their addresses until deleted, and past
//! the 253 of a node's /24 no new pod could start. A child of the worker to use its private state.

use super::*;

impl PodWorker {
    /// True once the pod has ended and its sandbox was stopped: nothing more to sync.
    pub(super) fn is_finished(&self) -> bool {
        self.sandbox_released
    }

    /// Stops the sandbox of a pod whose phase has become final; retried next sync on an error.
    pub(super) async fn release_terminal_sandbox(&mut self) {
        if self.sandbox_released {
            return;
        }
        let status = self.status();
        let phase = crate::pod_phase::pod_phase(&status.init_containers, &status.containers);
        if !crate::pod_phase::is_terminal(phase) {
            return;
        }
        let Some(sandbox) = self.sandbox_id.clone() else {
            // Never had one (it failed before its sandbox ran): nothing holds an address.
            self.sandbox_released = true;
            return;
        };
        match self.cri.stop_pod_sandbox(&sandbox).await {
            Ok(()) => {
                tracing::info!(pod = %self.key, sandbox = %sandbox, phase, "pod ended; its sandbox is stopped");
                self.sandbox_released = true;
            }
            Err(e) if e.is_not_found() => self.sandbox_released = true,
            Err(e) => {
                tracing::warn!(pod = %self.key, sandbox = %sandbox, error = %e, "stopping an ended pod's sandbox; retrying")
            }
        }
    }
}
