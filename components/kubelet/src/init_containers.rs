//! Init containers: run one at a time, in order, each to a successful exit, before any app container
//! starts. A failed one is restarted per the pod's restartPolicy (Always counts as OnFailure: a finished
//! init container is never rerun), with the usual back-off; under Never the pod fails. While they run
//! the pod is Pending with Initialized=False, and `kubectl get pods` shows `Init:<done>/<total>` from
//! status.initContainerStatuses. The worker drives the containers; the rules are here, pure. Sidecars
//! (restartable init containers, [`crate::sidecars`]) count as done once started, not completed.

use crate::container_status::{ContainerState, ContainerStatus, RestartPolicy};

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

/// An app container that has run (running, exited, or waiting after a run): the pod was initialized
/// before (upstream's HasAnyRegularContainerStarted).
fn has_run(c: &ContainerStatus) -> bool {
    !matches!(c.state, ContainerState::Waiting { .. }) || c.last_termination.is_some()
}

/// Where the init sequence stands, from the init containers' and the app containers' statuses. A
/// sidecar is done once started; after an app container has run, a sidecar restarting does not put
/// the pod back into initialization (upstream's Initialized condition).
pub fn progress(inits: &[ContainerStatus], containers: &[ContainerStatus]) -> Progress {
    // Whatever the sidecars before it do (upstream's getPhase counts failures first).
    if inits.iter().any(|c| !c.restartable && failed(c)) {
        return Progress::Failed;
    }
    let initialized_before = containers.iter().any(has_run);
    let done = inits
        .iter()
        .take_while(|c| {
            if c.restartable {
                initialized_before || c.started
            } else {
                succeeded(c)
            }
        })
        .count();
    if done == inits.len() {
        Progress::Complete
    } else {
        Progress::Running { done }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::container_status::Terminated;
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
            started: false,
            restartable: false,
            user: None,
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
        assert_eq!(progress(&[], &[]), Progress::Complete);
        assert_eq!(
            progress(
                &[c(waiting("PodInitializing")), c(waiting("PodInitializing"))],
                &[]
            ),
            Progress::Running { done: 0 }
        );
        assert_eq!(
            progress(&[c(exited(0)), c(waiting("CrashLoopBackOff"))], &[]),
            Progress::Running { done: 1 }
        );
        assert_eq!(
            progress(&[c(exited(0)), c(exited(0))], &[]),
            Progress::Complete
        );
        assert_eq!(
            progress(&[c(exited(0)), c(exited(2))], &[]),
            Progress::Failed
        );
    }

    fn sidecar(state: ContainerState, started: bool) -> ContainerStatus {
        ContainerStatus {
            restartable: true,
            user: None,
            started,
            ..c(state)
        }
    }

    fn running() -> ContainerState {
        ContainerState::Running {
            pid: 1,
            started_at: SystemTime::now(),
        }
    }

    #[test]
    fn a_sidecar_counts_once_started() {
        let app = [c(waiting("PodInitializing"))];
        assert_eq!(
            progress(
                &[sidecar(running(), false), c(waiting("PodInitializing"))],
                &app
            ),
            Progress::Running { done: 0 },
            "running but its startup probe has not passed"
        );
        assert_eq!(
            progress(
                &[sidecar(running(), true), c(waiting("PodInitializing"))],
                &app
            ),
            Progress::Running { done: 1 }
        );
        assert_eq!(
            progress(&[sidecar(running(), true), c(exited(0))], &app),
            Progress::Complete
        );
        // An exited sidecar is never a failed pod: it is restarted.
        assert_eq!(
            progress(&[sidecar(exited(1), false)], &app),
            Progress::Running { done: 0 }
        );
    }

    #[test]
    fn a_restarting_sidecar_does_not_undo_initialization() {
        let app = [c(running())];
        assert_eq!(
            progress(
                &[sidecar(waiting("CrashLoopBackOff"), false), c(exited(0))],
                &app
            ),
            Progress::Complete
        );
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
