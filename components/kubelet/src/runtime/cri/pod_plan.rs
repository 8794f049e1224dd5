//! The pod worker's planning step, as upstream's `computePodActions`: what one sync does, decided as data
//! from what the pod asks for and what the runtime was seen to run. No runtime, no clock (`now` comes in),
//! no I/O: the worker observes (CRI status calls), asks here, then acts through its CRI client in the order
//! the plan gives ([`super::PodWorker::sync`]).
//!
//! - Pod level ([`compute_pod_actions`]): kill a sandbox that is not ready or gone, set the volumes up (or
//!   refresh them), create the sandbox.
//! - Init containers: which to sync next is [`crate::sidecars::plan`] (regular ones one by one to their
//!   successful exit, sidecars until started); the app containers only once it says initialized.
//! - Container level ([`plan_container`]): probe a running container; decide a new exit (done per
//!   restartPolicy, or restarted after the crash-loop back-off); show it, wait out the back-off
//!   (CrashLoopBackOff), or start the container.
//!
//! Containers are killed outside the plan, by what a sync runs: a failed liveness or startup probe, a
//! failed postStart hook, the sidecars once the app containers are done, the pod's deletion.

use std::time::{Duration, Instant, SystemTime};

use crate::container_status::{RestartPolicy, Terminated};
use crate::runtime::Backoff;

/// How long an exit that will be restarted after a back-off is shown as such (at most half the
/// back-off): upstream's pod worker retries a crash-looping pod's sync every ~10 s.
pub(super) const EXIT_SHOWN_FOR: Duration = Duration::from_secs(5);

/// What the worker saw of the pod's sandbox as a sync began (CRI PodSandboxStatus).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum SandboxSeen {
    /// The pod has none: a new pod, or its last one was removed.
    Absent,
    Ready,
    /// Its pause process or its network is gone.
    NotReady,
    /// The runtime no longer knows it.
    Gone,
    /// The runtime did not answer.
    Unknown,
}

/// The pod-level facts a sync is planned from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct PodSeen {
    pub sandbox: SandboxSeen,
    /// The pod's volumes have been set up (once; they stay until the pod is killed).
    pub volumes_set_up: bool,
    /// The API-backed volumes are due to be re-read ([`super::VOLUME_RESYNC`]).
    pub volume_refresh_due: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum VolumeStep {
    Keep,
    /// Set them up; the pod goes on only once that worked.
    SetUp,
    /// A new pod: set them up side by side with its sandbox, which does not depend on them (the first
    /// sync costs the slower of the two, not their sum).
    SetUpBesideSandbox,
    /// Rewrite the API-backed ones from the current objects.
    Refresh,
}

/// One sync's pod-level actions, in the order the worker takes them: kill the sandbox, the volumes,
/// create the sandbox; then the containers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct PodActions {
    /// The sandbox's state is unknown: nothing this sync.
    pub wait: bool,
    /// Kill and remove the sandbox (its containers go with it), for this reason; a new one follows.
    pub kill_sandbox: Option<&'static str>,
    pub volumes: VolumeStep,
    pub create_sandbox: bool,
}

/// The pod-level actions for what was seen.
pub(super) fn compute_pod_actions(seen: &PodSeen) -> PodActions {
    let kill_sandbox = match seen.sandbox {
        SandboxSeen::Unknown => {
            return PodActions {
                wait: true,
                kill_sandbox: None,
                volumes: VolumeStep::Keep,
                create_sandbox: false,
            }
        }
        SandboxSeen::NotReady => Some("not ready"),
        SandboxSeen::Gone => Some("gone"),
        SandboxSeen::Absent | SandboxSeen::Ready => None,
    };
    let create_sandbox = seen.sandbox != SandboxSeen::Ready;
    let volumes = match (seen.volumes_set_up, create_sandbox) {
        (false, true) => VolumeStep::SetUpBesideSandbox,
        (false, false) => VolumeStep::SetUp,
        (true, _) if seen.volume_refresh_due => VolumeStep::Refresh,
        (true, _) => VolumeStep::Keep,
    };
    PodActions {
        wait: false,
        kill_sandbox,
        volumes,
        create_sandbox,
    }
}

/// What the worker saw of a container's current run (CRI ContainerStatus, an exit as the kubelet
/// reports it: `kill_status`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum ContainerSeen {
    /// None created yet, or the last one went with its sandbox.
    NotCreated,
    Running {
        started_at: SystemTime,
    },
    /// Exited, never started (StartError) or lost (ContainerStatusUnknown).
    Exited(Terminated),
    /// The runtime did not answer.
    Unknown,
}

/// A container's restart bookkeeping, as the plan reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) struct RestartTrack {
    /// Terminated and not restarting (restartPolicy).
    pub done: bool,
    /// The current run's exit has been acted on.
    pub exit_handled: bool,
    pub restart_count: i32,
    pub restart_at: Option<Instant>,
    /// Until then the status still shows the exit before it turns to CrashLoopBackOff.
    pub exit_shown_until: Option<Instant>,
}

/// What becomes of a newly seen exit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ExitPlan {
    /// Not restarted (restartPolicy): the container is done.
    Final,
    /// Restarted at `at` (`delay` from now; zero: in this sync). A delayed restart shows the exit
    /// until `show_until` (upstream reports an exit in the sync that sees it, and the back-off only in
    /// its next sync, ~10 s on: `kubectl get pods` shows Error before CrashLoopBackOff).
    Restart {
        delay: Duration,
        at: Instant,
        show_until: Option<Instant>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ContainerStep {
    /// Nothing more for it this sync.
    Nothing,
    /// Running: take its start time and probe it.
    Probe { started_at: SystemTime },
    /// Its exit is still shown.
    ShowExit,
    /// Waiting out its back-off: CrashLoopBackOff.
    BackOff,
    /// Pull (per policy), create and start it.
    Start,
}

/// One container's part of a sync.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct ContainerPlan {
    /// A newly seen exit and what becomes of it.
    pub exit: Option<ExitPlan>,
    /// The exit shown so far has been shown long enough: it becomes the last termination.
    pub exit_shown_over: bool,
    pub step: ContainerStep,
}

impl ContainerPlan {
    fn step(step: ContainerStep) -> Self {
        ContainerPlan {
            exit: None,
            exit_shown_over: false,
            step,
        }
    }
}

/// A container's plan for this sync: the first restart is immediate, then `backoff.base` doubling up to
/// `backoff.max` (the kubelet's crash-loop back-off).
pub(super) fn plan_container(
    track: &RestartTrack,
    seen: &ContainerSeen,
    policy: RestartPolicy,
    backoff: Backoff,
    now: Instant,
) -> ContainerPlan {
    if track.done {
        return ContainerPlan::step(ContainerStep::Nothing);
    }
    let exited = match seen {
        ContainerSeen::NotCreated => return ContainerPlan::step(ContainerStep::Start),
        ContainerSeen::Unknown => return ContainerPlan::step(ContainerStep::Nothing),
        ContainerSeen::Running { started_at } => {
            return ContainerPlan::step(ContainerStep::Probe {
                started_at: *started_at,
            })
        }
        ContainerSeen::Exited(t) => t,
    };
    let mut exit = None;
    let mut restart_at = track.restart_at;
    if !track.exit_handled {
        if !policy.restarts_after(exited.exit_code) {
            return ContainerPlan {
                exit: Some(ExitPlan::Final),
                ..ContainerPlan::step(ContainerStep::Nothing)
            };
        }
        let delay = match track.restart_count {
            n if n <= 0 => Duration::ZERO,
            n => backoff.delay(n as u32 - 1),
        };
        let at = now + delay;
        if !delay.is_zero() {
            return ContainerPlan {
                exit: Some(ExitPlan::Restart {
                    delay,
                    at,
                    show_until: Some(now + (delay / 2).min(EXIT_SHOWN_FOR)),
                }),
                ..ContainerPlan::step(ContainerStep::Nothing)
            };
        }
        exit = Some(ExitPlan::Restart {
            delay,
            at,
            show_until: None,
        });
        restart_at = Some(at);
    }
    if track.exit_shown_until.is_some_and(|until| now < until) {
        return ContainerPlan {
            exit,
            ..ContainerPlan::step(ContainerStep::ShowExit)
        };
    }
    let step = if restart_at.is_some_and(|at| now < at) {
        ContainerStep::BackOff
    } else {
        ContainerStep::Start
    };
    ContainerPlan {
        exit,
        exit_shown_over: track.exit_shown_until.is_some(),
        step,
    }
}

#[cfg(test)]
#[path = "pod_plan_tests.rs"]
mod tests;
