//! The final state of the containers a pod kill stopped: read from the runtime after StopContainer
//! and before RemoveContainer loses it, so the pod's last status carries each container's real
//! exit (0/Completed for one that exits cleanly on SIGTERM, as upstream's kubelet reports it), not
//! a blanket 137. A child of [`super`] to use the worker's private state.

use super::super::api::CriContainer;
use super::*;

/// The terminated state of an exited CRI container: the runtime's reason when it gives one
/// (containerd's Completed, Error, OOMKilled), else Completed for exit 0 and Error otherwise.
pub(super) fn terminated(st: &CriContainer, message: Option<String>) -> Terminated {
    let reason = if !st.reason.is_empty() {
        st.reason.clone()
    } else if st.exit_code == 0 {
        "Completed".into()
    } else {
        "Error".into()
    };
    Terminated {
        exit_code: st.exit_code,
        signal: None,
        reason,
        message,
        started_at: from_nanos(st.started_at),
        finished_at: from_nanos(st.finished_at).unwrap_or_else(SystemTime::now),
    }
}

impl PodWorker {
    /// Records how each container in `stopped` that was running ended. One the runtime no longer
    /// knows, or that did not exit, keeps its last state: the deleted pod's status then reports it
    /// killed (137), as upstream does for a container it could not inspect.
    pub(super) async fn record_final_states(&mut self, stopped: &[(usize, String)]) {
        for (i, id) in stopped {
            if !matches!(self.ctrs[*i].state, ContainerState::Running { .. }) {
                continue;
            }
            match self.cri.container_status(id).await {
                Ok(st) if st.state == CriState::Exited => {
                    let message = self.exit_message(*i, &st);
                    let last = terminated(&st, message);
                    tracing::info!(pod = %self.key, container = %self.ctrs[*i].spec.name, exit_code = last.exit_code, reason = %last.reason, "container stopped");
                    self.ctrs[*i].state = ContainerState::Terminated(last);
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::debug!(pod = %self.key, container = %self.ctrs[*i].spec.name, error = %e, "status of a stopped container")
                }
            }
        }
    }
}
