//! The pod phase the kubelet reports, from its containers' statuses (upstream's getPhase): Pending until
//! the init sequence is done and every app container has run, Running while any runs or will restart,
//! then Succeeded or Failed for good. Below both the runtime's pod worker, which gives a terminal pod's
//! sandbox back as soon as the phase is final, and the status it posts ([`crate::mirror`]), so the two
//! can never disagree on when a pod has ended.

use crate::container_status::{ContainerState, ContainerStatus};
use crate::init_containers::{self, Progress};

/// The phase of a pod with these init and app container statuses.
pub fn pod_phase(inits: &[ContainerStatus], containers: &[ContainerStatus]) -> &'static str {
    match init_containers::progress(inits, containers) {
        Progress::Complete => app_phase(inits, containers),
        Progress::Failed => "Failed",
        Progress::Running { .. } => "Pending",
    }
}

/// Succeeded or Failed: the pod's containers have all ended and none will run again.
pub fn is_terminal(phase: &str) -> bool {
    matches!(phase, "Succeeded" | "Failed")
}

/// The phase once the init sequence is complete, from the app containers (and running sidecars).
pub fn app_phase(inits: &[ContainerStatus], cs: &[ContainerStatus]) -> &'static str {
    if cs.iter().any(|c| c.is_running()) {
        return "Running";
    }
    let never_ran = |c: &ContainerStatus| {
        matches!(c.state, ContainerState::Waiting { .. }) && c.last_termination.is_none()
    };
    if cs.is_empty() || cs.iter().any(never_ran) {
        return "Pending";
    }
    // The app containers have all exited; sidecars still running (until the kubelet stops them)
    // keep the pod Running, as upstream's getPhase.
    if inits.iter().any(|c| c.restartable && c.is_running()) {
        return "Running";
    }
    // An exit about to be restarted (shown as Terminated until the back-off shows) is not final.
    let all_terminated = cs
        .iter()
        .all(|c| matches!(c.state, ContainerState::Terminated(_)) && !c.restarting);
    if !all_terminated {
        // Waiting to restart after a crash: kubectl shows Running with CrashLoopBackOff.
        return "Running";
    }
    let all_ok = cs
        .iter()
        .all(|c| matches!(&c.state, ContainerState::Terminated(t) if t.exit_code == 0));
    if all_ok {
        "Succeeded"
    } else {
        "Failed"
    }
}
