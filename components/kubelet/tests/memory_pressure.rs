//! Memory and PID pressure end to end, on a lab host (root) with the real containerd, kiln-apiserver and
//! kubectl. A lab host has its own cgroup and pid namespaces, so its root cgroup's working set and its
//! task count are the host's own. The kubelet gets `--capacity-memory` = the host's working set before it
//! starts + 600Mi and `memory.available<250Mi`, and a `pid.available` threshold 250 tasks below what is
//! left before it starts:
//!
//! 1. A BestEffort pod holds 400 MiB (a `tail` buffering a line that never ends): MemoryPressure=True
//!    (KubeletHasInsufficientMemory), the pod is evicted (Failed, reason Evicted, upstream's memory
//!    message naming the container, an Evicted event). While the condition holds a new BestEffort pod
//!    is rejected ("The node had condition: [MemoryPressure]. ") and a Burstable one runs; after the
//!    transition period MemoryPressure=False.
//! 2. A pod forks 500 `sleep`s: PIDPressure=True, the pod is evicted ("The node was low on resource:
//!    pids. …"), the Burstable pod stays; after the transition period PIDPressure=False.

mod common;

use common::lab::{is_root, wait_sh, Lab};
use serde_json::Value;

const KUBECTL: &str = "kubectl --kubeconfig /etc/kiln/admin.conf";
const TRANSITION: &str = "30s";
const IMAGE: &str = "10.250.0.1:5000/kiln/busybox:1";
const MI: u64 = 1 << 20;

/// The host's root cgroup working set, as the kubelet computes it (v1: usage less total_inactive_file;
/// v2: memory.current, or anon + file at the real root, less inactive_file).
const WORKING_SET: &str = r#"
if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
  d=/sys/fs/cgroup
  u=$(cat $d/memory.current 2>/dev/null || awk '$1=="anon"||$1=="file"{s+=$2} END{print s}' $d/memory.stat)
  i=$(awk '$1=="inactive_file"{print $2}' $d/memory.stat)
else
  d=/sys/fs/cgroup/memory
  u=$(cat $d/memory.usage_in_bytes)
  i=$(awk '$1=="total_inactive_file"{print $2}' $d/memory.stat)
fi
echo $((u - i))"#;

/// The tasks left: min(pid_max, threads-max) less the threads under /proc.
const PIDS_LEFT: &str = r#"
m=$(cat /proc/sys/kernel/pid_max); t=$(cat /proc/sys/kernel/threads-max)
[ "$t" -lt "$m" ] && m=$t
n=$(ls -d /proc/[0-9]*/task/[0-9]* 2>/dev/null | wc -l)
echo $((m - n))"#;

fn wait_json(lab: &Lab, cmd: &str, secs: u64, what: &str, ok: impl Fn(&Value) -> bool) -> Value {
    let out = wait_sh(lab, cmd, secs, what, |o| {
        serde_json::from_str::<Value>(o).is_ok_and(|v| ok(&v))
    });
    serde_json::from_str(&out).unwrap()
}

fn condition<'a>(obj: &'a Value, type_: &str) -> Option<&'a Value> {
    obj["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

fn node_condition(lab: &Lab, type_: &str, status: &str, secs: u64) -> Value {
    let node = wait_json(
        lab,
        &format!("{KUBECTL} get node host1 -o json"),
        secs,
        &format!("{type_}={status}"),
        |n| condition(n, type_).is_some_and(|c| c["status"] == status),
    );
    condition(&node, type_).unwrap().clone()
}

fn pod(lab: &Lab, name: &str, what: &str, ok: impl Fn(&Value) -> bool) -> Value {
    wait_json(
        lab,
        &format!("{KUBECTL} get pod {name} -o json"),
        120,
        &format!("{name} {what}"),
        ok,
    )
}

fn running(p: &Value) -> bool {
    p["status"]["phase"] == "Running"
        && p["status"]["containerStatuses"][0]["state"]["running"].is_object()
}

fn evicted(p: &Value) -> bool {
    p["status"]["phase"] == "Failed" && p["status"]["reason"] == "Evicted"
}

/// A pod on host1 running `script`; `resources` is the container's resources JSON.
fn run_pod(lab: &Lab, name: &str, script: &str, resources: &str) {
    let manifest = serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeName": "host1",
            "terminationGracePeriodSeconds": 5,
            "containers": [{
                "name": "main", "image": IMAGE,
                "command": ["/bin/sh", "-c", script],
                "resources": serde_json::from_str::<Value>(resources).unwrap(),
            }],
        },
    });
    lab.sh(
        &format!("{KUBECTL} apply -f -"),
        manifest.to_string().as_bytes(),
    );
}

fn event_of(lab: &Lab, name: &str) -> Value {
    let events = wait_json(
        lab,
        &format!("{KUBECTL} get events -o json"),
        60,
        &format!("the Evicted event of {name}"),
        |e| {
            e["items"].as_array().is_some_and(|i| {
                i.iter()
                    .any(|e| e["involvedObject"]["name"] == name && e["reason"] == "Evicted")
            })
        },
    );
    events["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["involvedObject"]["name"] == name && e["reason"] == "Evicted")
        .unwrap()
        .clone()
}

#[test]
#[ignore = "needs root: a lab host (CI runs it with --include-ignored)"]
fn memory_and_pid_pressure_evict_pods_and_recover() {
    assert!(is_root(), "needs root: a lab host");
    let (lab, _dir) =
        common::lab::up_with_control_plane("ev", common::lab::APISERVER_WITH_KUBELET_CLIENT);
    // The control plane and containerd settle before the host's usage is measured.
    wait_sh(
        &lab,
        &format!("{KUBECTL} get namespace default -o name"),
        60,
        "the API server serving",
        |o| o.trim() == "namespace/default",
    );
    let working_set: u64 = lab.sh(WORKING_SET, b"").trim().parse().unwrap();
    let pids_left: u64 = lab.sh(PIDS_LEFT, b"").trim().parse().unwrap();
    let capacity = working_set + 600 * MI;
    let pid_threshold = pids_left - 250;
    eprintln!("host working set {working_set}, capacity {capacity}, pids left {pids_left}");
    lab.sh(
        &format!(
            "setsid /usr/local/bin/kiln-kubelet --kubeconfig /etc/kiln/kubelet.conf \
               --hostname-override host1 --node-ip 10.250.0.11 --pod-cidr 10.244.1.0/24 \
               --pod-infra-container-image 10.250.0.1:5000/kiln/pause:1 \
               --capacity-memory {capacity} \
               --eviction-hard 'memory.available<250Mi,pid.available<{pid_threshold},nodefs.available<1Gi,imagefs.available<1Gi' \
               --eviction-pressure-transition-period {TRANSITION} --eviction-monitoring-interval 1s \
               >>/var/log/kiln-kubelet.log 2>&1 </dev/null &"
        ),
        b"",
    );
    let ready = |n: &Value| condition(n, "Ready").is_some_and(|c| c["status"] == "True");
    wait_json(
        &lab,
        &format!("{KUBECTL} get node host1 -o json"),
        90,
        "node host1 Ready",
        ready,
    );
    let idle = node_condition(&lab, "MemoryPressure", "False", 60);
    assert_eq!(idle["reason"], "KubeletHasSufficientMemory");
    assert_eq!(idle["message"], "kubelet has sufficient memory available");
    let idle = node_condition(&lab, "PIDPressure", "False", 60);
    assert_eq!(idle["reason"], "KubeletHasSufficientPID");

    // 1. A BestEffort pod holds 400 MiB: tail keeps the one unterminated line it reads until EOF,
    // which never comes.
    run_pod(
        &lab,
        "hog",
        "(dd if=/dev/zero bs=1M count=400 2>/dev/null; exec sleep 100000) | tail",
        "{}",
    );
    let pressure = node_condition(&lab, "MemoryPressure", "True", 120);
    assert_eq!(pressure["reason"], "KubeletHasInsufficientMemory");
    assert_eq!(
        pressure["message"],
        "kubelet has insufficient memory available"
    );
    // While the condition holds (the transition period): BestEffort pods are rejected, others run.
    run_pod(&lab, "late", "exec sleep 100000", "{}");
    run_pod(
        &lab,
        "sized",
        "exec sleep 100000",
        r#"{"requests": {"memory": "10Mi"}}"#,
    );
    let late = pod(&lab, "late", "rejected", evicted);
    assert_eq!(
        late["status"]["message"],
        "Pod was rejected: The node had condition: [MemoryPressure]. "
    );
    pod(&lab, "sized", "Running under memory pressure", running);

    let hog = pod(&lab, "hog", "Failed/Evicted", evicted);
    let msg = hog["status"]["message"].as_str().unwrap().to_string();
    assert!(
        msg.starts_with(
            "The node was low on resource: memory. Threshold quantity: 250Mi, available: "
        ),
        "{msg}"
    );
    assert!(
        msg.contains("Container main was using ")
            && msg.ends_with(", request is 0, has larger consumption of memory. "),
        "{msg}"
    );
    assert!(
        condition(&hog, "DisruptionTarget").is_some_and(|c| c["reason"] == "TerminationByKubelet"),
        "{hog}"
    );
    let event = event_of(&lab, "hog");
    assert_eq!(event["type"], "Warning");
    assert_eq!(event["message"].as_str(), Some(msg.as_str()));
    let relieved = node_condition(&lab, "MemoryPressure", "False", 120);
    assert_eq!(relieved["reason"], "KubeletHasSufficientMemory");
    assert_eq!(
        condition(&lab_node(&lab), "PIDPressure").unwrap()["status"],
        "False"
    );

    // 2. A pod forks 500 processes.
    run_pod(
        &lab,
        "forker",
        "for i in $(seq 500); do sleep 100000 & done; wait",
        "{}",
    );
    let pressure = node_condition(&lab, "PIDPressure", "True", 120);
    assert_eq!(pressure["reason"], "KubeletHasInsufficientPID");
    assert_eq!(
        pressure["message"],
        "kubelet has insufficient PID available"
    );
    let forker = pod(&lab, "forker", "Failed/Evicted", evicted);
    let msg = forker["status"]["message"].as_str().unwrap();
    assert!(
        msg.starts_with("The node was low on resource: pids. Threshold quantity: ")
            && msg.ends_with(". ")
            && !msg.contains("Container"),
        "{msg}"
    );
    let relieved = node_condition(&lab, "PIDPressure", "False", 120);
    assert_eq!(relieved["reason"], "KubeletHasSufficientPID");
    let sized = pod(&lab, "sized", "still Running", running);
    assert_eq!(sized["status"]["containerStatuses"][0]["restartCount"], 0);
    assert_eq!(
        condition(&lab_node(&lab), "MemoryPressure").unwrap()["status"],
        "False"
    );

    lab.sh(
        &format!("{KUBECTL} delete pod hog late sized forker --timeout=90s"),
        b"",
    );
    eprintln!(
        "kubelet's eviction log:\n{}",
        lab.sh(
            "grep -E 'evict|Pressure|rejected' /var/log/kiln-kubelet.log | tail -n 40; true",
            b""
        )
    );
}

fn lab_node(lab: &Lab) -> Value {
    serde_json::from_str(&lab.sh(&format!("{KUBECTL} get node host1 -o json"), b"")).unwrap()
}
