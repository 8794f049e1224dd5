//! Restarts under running pods, on a lab host (root) with the real containerd, kiln-apiserver and kubectl:
//! containerd restarting while the kubelet runs, then the kubelet and containerd both killed (SIGKILL; the
//! containerd shims keep the containers running) and started again. The pods are adopted, not restarted:
//! the same containers run (containerd's own list and the pods' containerID agree), restartCount is
//! unchanged, readiness is probed and reported again, logs (current and --previous) are still served, a
//! pod created afterwards runs, and deleting the adopted pods removes every container.

mod common;

use common::lab::{is_root, wait_sh, Lab};

const KUBECTL: &str = "kubectl --kubeconfig /etc/kiln/admin.conf";
const KUBELET: &str = "setsid /usr/local/bin/kiln-kubelet --kubeconfig /etc/kiln/kubelet.conf \
    --hostname-override host1 --node-ip 10.250.0.11 --pod-cidr 10.244.1.0/24 --restart-backoff-base 1 \
    --pod-infra-container-image 10.250.0.1:5000/kiln/pause:1 --eviction-hard 'nodefs.available<1Gi,imagefs.available<1Gi' >>/var/log/kiln-kubelet.log 2>&1 </dev/null & \
    echo $! >/run/kiln-kubelet.pid";
const CONTAINERD: &str = "setsid containerd --config /etc/containerd/config.toml \
    >>/var/log/containerd.log 2>&1 </dev/null &
    for i in $(seq 100); do ctr version >/dev/null 2>&1 && break; sleep 0.1; done; ctr version >/dev/null";

/// What the API shows of a pod's only container: (containerID, restartCount, ready).
#[derive(Debug, Clone, PartialEq)]
struct Facts {
    id: String,
    restarts: i64,
    ready: bool,
}

fn facts(o: &str) -> Option<Facts> {
    let p: serde_json::Value = serde_json::from_str(o).ok()?;
    let c = &p["status"]["containerStatuses"][0];
    let ready = p["status"]["conditions"]
        .as_array()?
        .iter()
        .any(|c| c["type"] == "Ready" && c["status"] == "True");
    Some(Facts {
        id: c["containerID"].as_str()?.to_string(),
        restarts: c["restartCount"].as_i64()?,
        ready: ready && c["state"]["running"].is_object(),
    })
}

fn wait_pod(lab: &Lab, pod: &str, what: &str, ok: impl Fn(&Facts) -> bool) -> Facts {
    let out = wait_sh(
        lab,
        &format!("{KUBECTL} get pod {pod} -o json"),
        120,
        &format!("{pod} {what}"),
        |o| facts(o).is_some_and(|f| ok(&f)),
    );
    facts(&out).unwrap()
}

/// Every container containerd has (sandboxes' pause containers included), sorted.
fn containers(lab: &Lab) -> Vec<String> {
    let mut ids: Vec<String> = lab
        .sh("ctr -n k8s.io containers ls -q", b"")
        .lines()
        .map(String::from)
        .collect();
    ids.sort();
    ids
}

fn task_running(lab: &Lab, id: &str) -> bool {
    let id = id.trim_start_matches("containerd://");
    lab.sh("ctr -n k8s.io tasks ls", b"")
        .lines()
        .any(|l| l.starts_with(id) && l.contains("RUNNING"))
}

/// steady's readiness follows /www/ready.html: removing it must show NotReady, restoring it Ready. Proves
/// the pod's worker probes (over the pod IP) and reports again.
fn readiness_round_trip(lab: &Lab) {
    lab.sh(&format!("{KUBECTL} exec steady -- rm /www/ready.html"), b"");
    wait_pod(lab, "steady", "NotReady", |f| !f.ready);
    lab.sh(
        &format!("{KUBECTL} exec steady -- sh -c 'echo ok > /www/ready.html'"),
        b"",
    );
    wait_pod(lab, "steady", "Ready again", |f| f.ready);
}

fn logs(lab: &Lab, args: &str) -> String {
    lab.sh(&format!("{KUBECTL} logs {args}"), b"")
}

#[test]
#[ignore = "needs root: a lab host (CI runs it with --include-ignored)"]
fn kubelet_and_containerd_restarts_leave_pods_running() {
    assert!(is_root(), "needs root: a lab host");
    let here = std::path::PathBuf::from(common::lab::manifest_dir()).join("tests/cri");
    let (lab, _dir) =
        common::lab::up_with_control_plane("t-adopt", common::lab::APISERVER_WITH_KUBELET_CLIENT);
    lab.put(&here.join("adopt-pods.yaml"), "/tmp/pods.yaml", "0644");
    lab.sh(KUBELET, b"");
    wait_sh(
        &lab,
        &format!("{KUBECTL} get node host1 -o json"),
        90,
        "node host1 Ready",
        |o| {
            serde_json::from_str::<serde_json::Value>(o).is_ok_and(|n| {
                n["status"]["conditions"].as_array().is_some_and(|c| {
                    c.iter()
                        .any(|c| c["type"] == "Ready" && c["status"] == "True")
                })
            })
        },
    );
    lab.sh(&format!("{KUBECTL} apply -f /tmp/pods.yaml"), b"");
    let steady = wait_pod(&lab, "steady", "Ready", |f| f.ready);
    let crashonce = wait_pod(&lab, "crashonce", "Ready after one crash", |f| {
        f.ready && f.restarts == 1
    });
    assert_eq!(steady.restarts, 0);
    let before = containers(&lab);
    // Two sandboxes, steady's container, crashonce's two runs (the first kept for --previous).
    assert_eq!(before.len(), 5, "{before:?}");
    assert_eq!(logs(&lab, "crashonce --previous").trim(), "first-run");

    // 1. containerd restarts under the running kubelet: CRI calls fail for a while, nothing restarts.
    let unavailable = "grep -c 'Unavailable' /var/log/kiln-kubelet.log; true";
    let seen: u32 = lab.sh(unavailable, b"").trim().parse().unwrap_or(0);
    lab.sh("kill -9 $(pidof containerd)", b"");
    assert!(
        processes_outlive_containerd(&lab),
        "the containers outlive containerd"
    );
    wait_sh(
        &lab,
        unavailable,
        60,
        "the kubelet to notice containerd is gone",
        |o| o.trim().parse::<u32>().unwrap_or(0) > seen,
    );
    lab.sh(CONTAINERD, b"");
    readiness_round_trip(&lab);
    assert_eq!(containers(&lab), before, "no container made or removed");
    assert_eq!(wait_pod(&lab, "steady", "Ready", |f| f.ready), steady);
    assert_eq!(wait_pod(&lab, "crashonce", "Ready", |f| f.ready), crashonce);
    assert!(task_running(&lab, &steady.id) && task_running(&lab, &crashonce.id));

    // 2. Both die at once (SIGKILL; the shims keep the containers running) and start again.
    lab.sh(
        "kill -9 $(cat /run/kiln-kubelet.pid) $(pidof containerd)",
        b"",
    );
    assert!(
        processes_outlive_containerd(&lab),
        "the containers outlive containerd"
    );
    lab.sh(CONTAINERD, b"");
    lab.sh(KUBELET, b"");
    wait_sh(
        &lab,
        "grep -c 'adopted the running pod' /var/log/kiln-kubelet.log",
        90,
        "the restarted kubelet to adopt both pods",
        |o| o.trim() == "2",
    );
    assert_eq!(containers(&lab), before, "no container made or removed");
    assert!(task_running(&lab, &steady.id) && task_running(&lab, &crashonce.id));
    readiness_round_trip(&lab);
    assert_eq!(wait_pod(&lab, "steady", "Ready", |f| f.ready), steady);
    assert_eq!(wait_pod(&lab, "crashonce", "Ready", |f| f.ready), crashonce);
    // Logs through the restarted kubelet's server: the current run and the one before.
    assert_eq!(logs(&lab, "crashonce").trim(), "second-run");
    assert_eq!(logs(&lab, "crashonce --previous").trim(), "first-run");
    assert!(logs(&lab, "steady").contains("steady-up"));

    // A pod created after the restart runs.
    lab.sh(
        &format!(
            "{KUBECTL} run late --image 10.250.0.1:5000/kiln/busybox:1 --restart Never \
                  --overrides '{{\"spec\":{{\"nodeName\":\"host1\"}}}}' -- sleep 100000"
        ),
        b"",
    );
    wait_pod(&lab, "late", "Running", |f| f.ready);

    // The adopted pods are stopped and removed like any other.
    lab.sh(
        &format!("{KUBECTL} delete pod steady crashonce late --timeout=90s"),
        b"",
    );
    assert_eq!(
        lab.sh(&format!("{KUBECTL} get pods -o name"), b"").trim(),
        ""
    );
    assert_eq!(lab.sh("ctr -n k8s.io containers ls -q", b"").trim(), "");
}

/// With containerd down, the containers' processes still run under their shims.
fn processes_outlive_containerd(lab: &Lab) -> bool {
    let out = lab.sh(
        "for i in $(seq 50); do pidof containerd >/dev/null || break; sleep 0.1; done
         pidof containerd >/dev/null && echo containerd-alive
         pgrep -c -x httpd; pgrep -c -x sleep; true",
        b"",
    );
    !out.contains("containerd-alive") && out.lines().all(|l| l.trim() != "0")
}
