//! Init containers: run one at a time, in order, each to a successful exit, before any app container
//! starts. A failed one is restarted per the pod's restartPolicy (Always counts as OnFailure: a finished
//! init container is never rerun), with the usual back-off; under Never the pod fails. While they run
//! the pod is Pending with Initialized=False, and `kubectl get pods` shows `Init:<done>/<total>` from
//! status.initContainerStatuses. The worker drives the containers; the rules are here, pure.

use crate::runtime::{ContainerState, ContainerStatus, RestartPolicy};

/// How an init container is restarted under the pod's policy.
pub fn restart_policy(pod: RestartPolicy) -> RestartPolicy {
    match pod {
        RestartPolicy::Never => RestartPolicy::Never,
        RestartPolicy::Always | RestartPolicy::OnFailure => RestartPolicy::OnFailure,
    }
}

/// Where a pod's init sequence stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    /// Every init container exited 0 (or there are none): app containers may run.
    Complete,
    /// One failed and will not be restarted (restartPolicy Never): the pod has failed.
    Failed,
    /// `done` of them have completed; the next is running, waiting or backing off.
    Running { done: usize },
}

fn succeeded(c: &ContainerStatus) -> bool {
    matches!(&c.state, ContainerState::Terminated(t) if t.exit_code == 0)
}

/// A terminated (not waiting to restart) init container with a non-zero exit is final.
fn failed(c: &ContainerStatus) -> bool {
    !c.restarting && matches!(&c.state, ContainerState::Terminated(t) if t.exit_code != 0)
}

pub fn progress(inits: &[ContainerStatus]) -> Progress {
    let done = inits.iter().take_while(|c| succeeded(c)).count();
    if done == inits.len() {
        Progress::Complete
    } else if failed(&inits[done]) {
        Progress::Failed
    } else {
        Progress::Running { done }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::Terminated;
    use std::time::SystemTime;

    fn c(state: ContainerState) -> ContainerStatus {
        ContainerStatus {
            name: "i".into(),
            image: "img".into(),
            container_id: String::new(),
            restart_count: 0,
            state,
            last_termination: None,
            ready: false,
            restarting: false,
        }
    }

    fn exited(code: i32) -> ContainerState {
        ContainerState::Terminated(Terminated {
            exit_code: code,
            signal: None,
            reason: if code == 0 { "Completed" } else { "Error" }.into(),
            message: None,
            started_at: None,
            finished_at: SystemTime::now(),
        })
    }

    fn waiting(reason: &str) -> ContainerState {
        ContainerState::Waiting {
            reason: reason.into(),
            message: None,
        }
    }

    #[test]
    fn progress_counts_completed_ones_in_order() {
        assert_eq!(progress(&[]), Progress::Complete);
        assert_eq!(
            progress(&[c(waiting("PodInitializing")), c(waiting("PodInitializing"))]),
            Progress::Running { done: 0 }
        );
        assert_eq!(
            progress(&[c(exited(0)), c(waiting("CrashLoopBackOff"))]),
            Progress::Running { done: 1 }
        );
        assert_eq!(progress(&[c(exited(0)), c(exited(0))]), Progress::Complete);
        assert_eq!(progress(&[c(exited(0)), c(exited(2))]), Progress::Failed);
    }

    #[test]
    fn always_restarts_init_containers_only_on_failure() {
        assert_eq!(
            restart_policy(RestartPolicy::Always),
            RestartPolicy::OnFailure
        );
        assert_eq!(
            restart_policy(RestartPolicy::OnFailure),
            RestartPolicy::OnFailure
        );
        assert_eq!(restart_policy(RestartPolicy::Never), RestartPolicy::Never);
    }
}
