//! The kiln-host runtime with real processes: logs, restart policy with backoff, group stop.

mod common;

use std::time::Duration;

use common::{eventually, pod, process_gone};
use kiln_kubelet::container_status::ContainerState;
use kiln_kubelet::runtime::{HostRuntime, Runtime};

fn runtime(logs: &std::path::Path) -> HostRuntime {
    HostRuntime::new(
        logs,
        Duration::from_millis(100),
        Duration::from_millis(800),
        "node-a",
        "127.0.0.1".parse().unwrap(),
    )
}

fn running_pid(rt: &HostRuntime, uid: &str) -> Option<u32> {
    match rt.pod_status(uid)?.containers[0].state {
        ContainerState::Running { pid, .. } => Some(pid),
        _ => None,
    }
}

#[tokio::test]
async fn runs_the_command_with_env_and_writes_logs() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime(dir.path());
    let p = pod(
        "echo",
        "uid-1",
        "Always",
        "echo $GREETING from $MY_NODE; echo err >&2; sleep 100",
        5,
    );
    rt.run_pod(&p).await.unwrap();
    let log = dir.path().join("kube-system_echo_uid-1/main/0.log");
    let text = eventually(10, "log line", || async {
        std::fs::read_to_string(&log)
            .ok()
            .filter(|t| t.contains("err"))
    })
    .await;
    assert!(text.contains("hi from node-a"), "{text}");
    assert!(running_pid(&rt, "uid-1").is_some());
    assert_eq!(
        rt.pod_status("uid-1").unwrap().containers[0].restart_count,
        0
    );
    rt.stop_pod("uid-1", Some(Duration::from_secs(5)))
        .await
        .unwrap();
    assert!(rt.pod_status("uid-1").is_none());
}

#[tokio::test]
async fn always_restarts_with_backoff_and_a_log_per_run() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime(dir.path());
    rt.run_pod(&pod("crash", "uid-2", "Always", "echo run; exit 3", 1))
        .await
        .unwrap();
    let mut saw_backoff = false;
    let status = eventually(30, "three restarts", || {
        let s = rt.pod_status("uid-2").unwrap().containers[0].clone();
        if let ContainerState::Waiting { reason, .. } = &s.state {
            saw_backoff |= reason == "CrashLoopBackOff";
        }
        async move { (s.restart_count >= 3).then_some(s) }
    })
    .await;
    assert!(saw_backoff, "never observed CrashLoopBackOff");
    let last = status.last_termination.expect("last termination recorded");
    assert_eq!((last.exit_code, last.reason.as_str()), (3, "Error"));
    for n in 0..3 {
        let p = dir
            .path()
            .join(format!("kube-system_crash_uid-2/main/{n}.log"));
        assert_eq!(
            std::fs::read_to_string(&p).unwrap(),
            "run\n",
            "{}",
            p.display()
        );
    }
    rt.stop_pod("uid-2", None).await.unwrap();
}

#[tokio::test]
async fn never_and_on_failure_leave_the_container_terminated() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime(dir.path());
    rt.run_pod(&pod("never", "uid-3", "Never", "exit 7", 1))
        .await
        .unwrap();
    rt.run_pod(&pod("done", "uid-4", "OnFailure", "exit 0", 1))
        .await
        .unwrap();
    for (uid, code, reason) in [("uid-3", 7, "Error"), ("uid-4", 0, "Completed")] {
        let t = eventually(10, "termination", || async {
            match &rt.pod_status(uid).unwrap().containers[0].state {
                ContainerState::Terminated(t) => Some(t.clone()),
                _ => None,
            }
        })
        .await;
        assert_eq!((t.exit_code, t.reason.as_str()), (code, reason));
        assert_eq!(rt.pod_status(uid).unwrap().containers[0].restart_count, 0);
    }
}

#[tokio::test]
async fn stop_terms_the_group_then_kills_what_ignores_it() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime(dir.path());
    let pidfile = dir.path().join("child.pid");
    // The shell ignores SIGTERM, and so does its background child: only SIGKILL of the group ends them.
    let script = format!(
        "trap '' TERM; sh -c \"trap '' TERM; echo \\$\\$ > {}; exec sleep 1000\" & wait; wait",
        pidfile.display()
    );
    rt.run_pod(&pod("stubborn", "uid-5", "Always", &script, 1))
        .await
        .unwrap();
    let child: i32 = eventually(10, "child pid", || async {
        std::fs::read_to_string(&pidfile)
            .ok()
            .and_then(|s| s.trim().parse().ok())
    })
    .await;
    let leader = running_pid(&rt, "uid-5").unwrap() as i32;
    assert!(!process_gone(child) && !process_gone(leader));
    rt.stop_pod("uid-5", Some(Duration::from_secs(1)))
        .await
        .unwrap();
    eventually(10, "group killed", || async {
        (process_gone(child) && process_gone(leader)).then_some(())
    })
    .await;
}

#[tokio::test]
async fn stop_with_a_cooperative_process_ends_within_grace() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime(dir.path());
    rt.run_pod(&pod("polite", "uid-6", "Always", "exec sleep 1000", 30))
        .await
        .unwrap();
    let pid = eventually(10, "running", || async { running_pid(&rt, "uid-6") }).await as i32;
    // sleep dies of SIGTERM right away; the 30 s grace would only matter if it did not.
    rt.stop_pod("uid-6", None).await.unwrap();
    assert!(process_gone(pid));
}

#[tokio::test]
async fn a_pod_without_command_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime(dir.path());
    let mut p = pod("bad", "uid-7", "Always", "true", 1);
    let c = &mut p.spec.as_mut().unwrap().containers[0];
    c.command = None;
    c.args = None;
    let err = rt.run_pod(&p).await.unwrap_err().to_string();
    assert!(err.contains("needs a command"), "{err}");
    assert!(rt.pod_uids().is_empty());
}

#[tokio::test]
async fn dropping_the_runtime_kills_its_processes() {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime(dir.path());
    rt.run_pod(&pod("dropped", "uid-8", "Always", "exec sleep 1000", 30))
        .await
        .unwrap();
    let pid = eventually(10, "running", || async { running_pid(&rt, "uid-8") }).await as i32;
    drop(rt);
    eventually(10, "killed on drop", || async {
        process_gone(pid).then_some(())
    })
    .await;
}
