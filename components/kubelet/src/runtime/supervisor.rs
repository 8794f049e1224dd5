//! One supervised host process per container: spawn in its own session, log to a file per run, restart per
//! restartPolicy with the kubelet's backoff, and on stop SIGTERM the whole group, wait the grace, SIGKILL.

use std::fs::{File, OpenOptions};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::process::Command;
use tokio::sync::watch;

use crate::container_status::{ContainerState, ContainerStatus, RestartPolicy, Terminated};

/// The kubelet's crash-loop backoff: `base`, doubling per restart, capped at `max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    pub base: Duration,
    pub max: Duration,
}

impl Backoff {
    pub fn delay(&self, restarts_so_far: u32) -> Duration {
        let factor = 1u32 << restarts_so_far.min(16);
        self.base.saturating_mul(factor).min(self.max)
    }
}

/// Everything needed to (re)start one container's process.
#[derive(Debug, Clone)]
pub struct ProcessSpec {
    pub pod_key: String,
    pub container: String,
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    pub working_dir: Option<PathBuf>,
    /// Log file of run `n` (the restart count).
    pub log_dir: PathBuf,
    pub restart_policy: RestartPolicy,
    pub backoff: Backoff,
}

/// Commands to a supervisor: `Some(grace)` = stop with that grace.
pub type StopSignal = watch::Receiver<Option<Duration>>;

pub type SharedStatus = Arc<Mutex<ContainerStatus>>;

fn set_state(status: &SharedStatus, f: impl FnOnce(&mut ContainerStatus)) {
    let mut s = status.lock().unwrap_or_else(|p| p.into_inner());
    f(&mut s);
}

fn open_log(spec: &ProcessSpec, restart: i32) -> std::io::Result<File> {
    std::fs::create_dir_all(&spec.log_dir)?;
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(spec.log_dir.join(format!("{restart}.log")))
}

fn spawn(spec: &ProcessSpec, restart: i32) -> std::io::Result<tokio::process::Child> {
    let log = open_log(spec, restart)?;
    let mut cmd = Command::new(&spec.argv[0]);
    cmd.args(&spec.argv[1..])
        .env_clear()
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .current_dir(
            spec.working_dir
                .clone()
                .unwrap_or_else(|| PathBuf::from("/")),
        );
    // Its own session and process group, so stopping the container reaches every process it forked.
    // SAFETY: setsid is async-signal-safe and touches nothing of the parent.
    unsafe {
        cmd.pre_exec(|| {
            nix::unistd::setsid()
                .map(|_| ())
                .map_err(std::io::Error::from)
        });
    }
    cmd.spawn()
}

fn signal_group(pid: u32, sig: Signal) {
    // ESRCH (the group is gone) is the normal end.
    let _ = killpg(Pid::from_raw(pid as i32), sig);
}

/// Kills a running container's group immediately (used when the runtime is dropped).
pub fn kill_now(status: &SharedStatus) {
    let s = status.lock().unwrap_or_else(|p| p.into_inner());
    if let ContainerState::Running { pid, .. } = s.state {
        signal_group(pid, Signal::SIGKILL);
    }
}

fn exit_info(status: std::process::ExitStatus) -> (i32, Option<i32>) {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => (code, None),
        // Like a shell and the container runtimes: killed by signal N exits 128+N.
        (None, Some(sig)) => (128 + sig, Some(sig)),
        _ => (-1, None),
    }
}

/// Runs the container until it stops for good (policy) or a stop is requested.
pub async fn supervise(spec: ProcessSpec, status: SharedStatus, mut stop: StopSignal) {
    let mut restart: i32 = 0;
    // Doublings of the backoff so far; separate from the restart count because a healthy run resets it.
    let mut backoff_steps: u32 = 0;
    loop {
        if stop.borrow().is_some() {
            return;
        }
        let started = SystemTime::now();
        let t0 = Instant::now();
        let ended = match spawn(&spec, restart) {
            Err(e) => {
                tracing::warn!(pod = %spec.pod_key, container = %spec.container, error = %e, "container could not start");
                Terminated {
                    exit_code: 128,
                    signal: None,
                    reason: "StartError".into(),
                    message: Some(e.to_string()),
                    started_at: None,
                    finished_at: SystemTime::now(),
                }
            }
            Ok(mut child) => {
                let pid = child.id().unwrap_or(0);
                tracing::info!(pod = %spec.pod_key, container = %spec.container, pid, restart, "container started");
                set_state(&status, |s| {
                    s.container_id = format!(
                        "kiln-host://{}-{}-{}",
                        spec.pod_key.replace('/', "-"),
                        spec.container,
                        restart
                    );
                    s.state = ContainerState::Running {
                        pid,
                        started_at: started,
                    };
                });
                let outcome = tokio::select! {
                    r = child.wait() => Ok(r),
                    g = stop.wait_for(|s| s.is_some()) => Err(g.ok().and_then(|g| *g).unwrap_or_default()),
                };
                let exit = match outcome {
                    Ok(r) => r,
                    Err(grace) => {
                        terminate(&spec, &mut child, pid, grace).await;
                        let (code, signal) = child
                            .try_wait()
                            .ok()
                            .flatten()
                            .map(exit_info)
                            .unwrap_or((137, Some(9)));
                        set_state(&status, |s| {
                            s.state = ContainerState::Terminated(Terminated {
                                exit_code: code,
                                signal,
                                reason: if code == 0 {
                                    "Completed".into()
                                } else {
                                    "Error".into()
                                },
                                message: None,
                                started_at: Some(started),
                                finished_at: SystemTime::now(),
                            })
                        });
                        return;
                    }
                };
                // Leftovers of the group (daemonized children) die with the container, as in a real one.
                signal_group(pid, Signal::SIGKILL);
                let (code, signal) = exit.map(exit_info).unwrap_or((-1, None));
                tracing::info!(pod = %spec.pod_key, container = %spec.container, code, "container exited");
                Terminated {
                    exit_code: code,
                    signal,
                    reason: if code == 0 {
                        "Completed".into()
                    } else {
                        "Error".into()
                    },
                    message: None,
                    started_at: Some(started),
                    finished_at: SystemTime::now(),
                }
            }
        };
        let code = ended.exit_code;
        if !spec.restart_policy.restarts_after(code) {
            set_state(&status, |s| s.state = ContainerState::Terminated(ended));
            return;
        }
        // A run that stayed up twice the maximum backoff is healthy again: the kubelet resets the backoff.
        if t0.elapsed() >= spec.backoff.max * 2 {
            backoff_steps = 0;
        }
        let delay = spec.backoff.delay(backoff_steps);
        backoff_steps += 1;
        set_state(&status, |s| {
            s.last_termination = Some(ended);
            s.state = ContainerState::Waiting {
                reason: "CrashLoopBackOff".into(),
                message: Some(format!(
                    "back-off {}s restarting failed container={}",
                    delay.as_secs(),
                    spec.container
                )),
            };
        });
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = stop.wait_for(|s| s.is_some()) => return,
        }
        restart += 1;
        set_state(&status, |s| s.restart_count = restart);
    }
}

async fn terminate(
    spec: &ProcessSpec,
    child: &mut tokio::process::Child,
    pid: u32,
    grace: Duration,
) {
    tracing::info!(pod = %spec.pod_key, container = %spec.container, pid, grace_secs = grace.as_secs(), "stopping container");
    signal_group(pid, Signal::SIGTERM);
    if tokio::time::timeout(grace, child.wait()).await.is_err() {
        tracing::info!(pod = %spec.pod_key, container = %spec.container, pid, "grace period over, killing");
    }
    // SIGKILL the group even if the leader exited: its children may have ignored SIGTERM.
    signal_group(pid, Signal::SIGKILL);
    let _ = tokio::time::timeout(Duration::from_secs(5), child.wait()).await;
}
