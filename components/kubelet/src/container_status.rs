//! A container's state as the runtimes report it and the kubelet's pod logic reads it (init
//! containers, sidecars, the API status): plain data below [`crate::runtime`], with the
//! restartPolicy that decides whether an exited container runs again.

use std::time::SystemTime;

/// Why and how a container run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Terminated {
    pub exit_code: i32,
    pub signal: Option<i32>,
    /// Completed (exit 0), Error, or StartError when it could not be started.
    pub reason: String,
    pub message: Option<String>,
    pub started_at: Option<SystemTime>,
    pub finished_at: SystemTime,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ContainerState {
    Waiting {
        reason: String,
        message: Option<String>,
    },
    Running {
        pid: u32,
        started_at: SystemTime,
    },
    Terminated(Terminated),
}

/// One container as the runtime knows it, enough for the API's ContainerStatus.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerStatus {
    pub name: String,
    pub image: String,
    /// `<handler>://<id>`, as ContainerStatus.containerID.
    pub container_id: String,
    pub restart_count: i32,
    pub state: ContainerState,
    pub last_termination: Option<Terminated>,
    /// Running and passing its readiness probe (if it has one).
    pub ready: bool,
    /// Exited (the state is Terminated) and to be started again per restartPolicy: the pod is not
    /// finished, whatever the exit code.
    pub restarting: bool,
    /// Running and past its startupProbe (if it has one): ContainerStatus.started.
    pub started: bool,
    /// An init container with restartPolicy Always (a sidecar, [`crate::sidecars`]).
    pub restartable: bool,
    /// The identity the runtime started the container's first process with (CRI ContainerStatus
    /// `user`); None where the runtime does not report it (containerd before 2.0), and then the API
    /// status has no `user` either, as upstream's.
    pub user: Option<LinuxUser>,
}

/// A container's Linux uid, gid and supplemental groups, as the runtime reports them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LinuxUser {
    pub uid: i64,
    pub gid: i64,
    pub supplemental_groups: Vec<i64>,
}

impl ContainerStatus {
    pub fn is_running(&self) -> bool {
        matches!(self.state, ContainerState::Running { .. })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestartPolicy {
    Always,
    OnFailure,
    Never,
}

impl RestartPolicy {
    pub fn parse(s: Option<&str>) -> Self {
        match s {
            Some("OnFailure") => RestartPolicy::OnFailure,
            Some("Never") => RestartPolicy::Never,
            _ => RestartPolicy::Always,
        }
    }

    pub fn restarts_after(self, exit_code: i32) -> bool {
        match self {
            RestartPolicy::Always => true,
            RestartPolicy::OnFailure => exit_code != 0,
            RestartPolicy::Never => false,
        }
    }
}
