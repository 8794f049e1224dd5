//! Disk pressure end to end, on a lab host (root) with the real containerd, kiln-apiserver, the
//! controller-manager's node lifecycle controller and kubectl. The kubelet's root dir is a 64 MiB tmpfs
//! mounted on the lab host (its own mount namespace: nothing of the machine fills up) and
//! `--eviction-hard nodefs.available<24Mi`:
//!
//! 1. A pod writes 48 MiB into its emptyDir: DiskPressure=True on the Node, the pod is evicted (Failed,
//!    reason Evicted, upstream's message, an Evicted event); its emptyDir goes with it, the pressure ends
//!    and, after the transition period, DiskPressure=False. The other pod was never touched.
//! 2. Pressure from outside the pods (a file in the root dir): the Node is tainted
//!    `node.kubernetes.io/disk-pressure:NoSchedule`, the remaining pod is evicted, a new pod is rejected
//!    ("The node had condition: [DiskPressure]. ") and a system-node-critical pod still runs. The file
//!    removed: condition False, taint gone, new pods run again.

mod common;

use common::lab::{bin, is_root, wait_sh, Lab};
use serde_json::Value;

const KUBECTL: &str = "kubectl --kubeconfig /etc/kiln/admin.conf";
const TRANSITION: &str = "15s";
const IMAGE: &str = "10.250.0.1:5000/kiln/busybox:1";

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

fn disk_pressure(lab: &Lab, status: &str) -> Value {
    let node = wait_json(
        lab,
        &format!("{KUBECTL} get node host1 -o json"),
        120,
        &format!("DiskPressure={status}"),
        |n| condition(n, "DiskPressure").is_some_and(|c| c["status"] == status),
    );
    condition(&node, "DiskPressure").unwrap().clone()
}

fn tainted(node: &Value) -> bool {
    node["spec"]["taints"].as_array().is_some_and(|t| {
        t.iter()
            .any(|t| t["key"] == "node.kubernetes.io/disk-pressure" && t["effect"] == "NoSchedule")
    })
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

fn run_pod(lab: &Lab, name: &str, extra_spec: &str) {
    lab.sh(
        &format!(
            "{KUBECTL} run {name} --image {IMAGE} --restart Never \
               --overrides '{{\"spec\":{{\"nodeName\":\"host1\"{extra_spec}}}}}' -- sleep 100000"
        ),
        b"",
    );
}

#[test]
#[ignore = "needs root: a lab host (CI runs it with --include-ignored)"]
fn disk_pressure_evicts_pods_and_recovers() {
    assert!(is_root(), "needs root: a lab host");
    let here = std::path::PathBuf::from(common::lab::manifest_dir()).join("tests/cri");
    let (lab, _dir) =
        common::lab::up_with_control_plane("kdisk", common::lab::APISERVER_WITH_KUBELET_CLIENT);
    lab.put(&here.join("disk-pressure.yaml"), "/tmp/pods.yaml", "0644");
    lab.put(
        &bin("kiln-controller-manager"),
        "/usr/local/bin/kiln-controller-manager",
        "0755",
    );
    lab.sh(
        &format!(
            "mkdir -p /var/lib/kiln/kubelet
             mount -t tmpfs -o size=64m kdisk-nodefs /var/lib/kiln/kubelet
             setsid /usr/local/bin/kiln-controller-manager --kubeconfig /etc/kiln/admin.conf \
               --controllers nodelifecycle --leader-elect=false --node-monitor-period 1s \
               >/var/log/kiln-controller-manager.log 2>&1 </dev/null &
             setsid /usr/local/bin/kiln-kubelet --kubeconfig /etc/kiln/kubelet.conf \
               --hostname-override host1 --node-ip 10.250.0.11 --pod-cidr 10.244.1.0/24 \
               --pod-infra-container-image 10.250.0.1:5000/kiln/pause:1 \
               --eviction-hard 'nodefs.available<24Mi' --eviction-pressure-transition-period {TRANSITION} \
               --eviction-monitoring-interval 1s \
               >>/var/log/kiln-kubelet.log 2>&1 </dev/null &"
        ),
        b"",
    );
    wait_json(
        &lab,
        &format!("{KUBECTL} get node host1 -o json"),
        90,
        "node host1 Ready",
        |n| condition(n, "Ready").is_some_and(|c| c["status"] == "True"),
    );
    let fs = lab.sh("stat -f -c '%T %b %S' /var/lib/kiln/kubelet", b"");
    assert!(
        fs.starts_with("tmpfs"),
        "the root dir is the test's tmpfs: {fs}"
    );
    let idle = disk_pressure(&lab, "False");
    assert_eq!(idle["reason"], "KubeletHasNoDiskPressure");
    assert_eq!(idle["message"], "kubelet has no disk pressure");

    // 1. A pod fills its emptyDir.
    lab.sh(&format!("{KUBECTL} apply -f /tmp/pods.yaml"), b"");
    pod(&lab, "hog", "Running", running);
    let calm = pod(&lab, "calm", "Running", running);
    let calm_id = calm["status"]["containerStatuses"][0]["containerID"].clone();
    // dd may be killed by the eviction before it ends: its exit status does not matter.
    lab.sh(
        &format!(
            "{KUBECTL} exec hog -- dd if=/dev/zero of=/data/fill bs=1M count=48 >/dev/null 2>&1; true"
        ),
        b"",
    );
    let pressure = disk_pressure(&lab, "True");
    assert_eq!(pressure["reason"], "KubeletHasDiskPressure");
    assert_eq!(pressure["message"], "kubelet has disk pressure");
    let hog = pod(&lab, "hog", "Failed/Evicted", evicted);
    let msg = hog["status"]["message"].as_str().unwrap();
    assert!(
        msg.starts_with(
            "The node was low on resource: ephemeral-storage. Threshold quantity: 24Mi, available: "
        ),
        "{msg}"
    );
    assert!(
        condition(&hog, "DisruptionTarget").is_some_and(|c| c["reason"] == "TerminationByKubelet"),
        "{hog}"
    );
    let terminated = &hog["status"]["containerStatuses"][0]["state"]["terminated"];
    assert_eq!(terminated["exitCode"], 137, "{hog}");
    let events = wait_json(
        &lab,
        &format!("{KUBECTL} get events -o json"),
        60,
        "the Evicted event of hog",
        |e| {
            e["items"].as_array().is_some_and(|i| {
                i.iter()
                    .any(|e| e["involvedObject"]["name"] == "hog" && e["reason"] == "Evicted")
            })
        },
    );
    let event = events["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["involvedObject"]["name"] == "hog" && e["reason"] == "Evicted")
        .unwrap();
    assert_eq!(event["type"], "Warning");
    assert_eq!(event["message"].as_str(), Some(msg));
    // The emptyDir went with the pod: the pressure ends, the condition after the transition period.
    let relieved = disk_pressure(&lab, "False");
    assert_eq!(relieved["reason"], "KubeletHasNoDiskPressure");
    let calm = pod(&lab, "calm", "still Running", running);
    assert_eq!(
        calm["status"]["containerStatuses"][0]["containerID"], calm_id,
        "calm was neither evicted nor restarted"
    );
    assert_eq!(calm["status"]["containerStatuses"][0]["restartCount"], 0);
    assert!(
        lab.sh("ctr -n k8s.io containers ls -q", b"")
            .lines()
            .count()
            == 2,
        "hog's container and sandbox are gone; calm's remain"
    );

    // 2. Pressure the pods cannot relieve.
    lab.sh(
        "dd if=/dev/zero of=/var/lib/kiln/kubelet/ballast bs=1M count=48 2>/dev/null",
        b"",
    );
    disk_pressure(&lab, "True");
    wait_json(
        &lab,
        &format!("{KUBECTL} get node host1 -o json"),
        60,
        "the disk-pressure taint",
        tainted,
    );
    pod(&lab, "calm", "Failed/Evicted", evicted);
    run_pod(&lab, "late", "");
    let late = pod(&lab, "late", "rejected", evicted);
    assert_eq!(
        late["status"]["message"],
        "Pod was rejected: The node had condition: [DiskPressure]. "
    );
    run_pod(
        &lab,
        "critical",
        ",\"priorityClassName\":\"system-node-critical\"",
    );
    pod(&lab, "critical", "Running under pressure", running);

    lab.sh("rm /var/lib/kiln/kubelet/ballast", b"");
    disk_pressure(&lab, "False");
    wait_json(
        &lab,
        &format!("{KUBECTL} get node host1 -o json"),
        60,
        "the disk-pressure taint removed",
        |n| !tainted(n),
    );
    let critical = pod(&lab, "critical", "Running", running);
    assert_eq!(
        critical["status"]["containerStatuses"][0]["restartCount"],
        0
    );
    run_pod(&lab, "after", "");
    pod(&lab, "after", "Running", running);

    lab.sh(
        &format!("{KUBECTL} delete pod hog calm late critical after --timeout=90s"),
        b"",
    );
    assert_eq!(lab.sh("ctr -n k8s.io containers ls -q", b"").trim(), "");
    eprintln!(
        "kubelet's eviction log:\n{}",
        lab.sh(
            "grep -E 'evict|DiskPressure|rejected' /var/log/kiln-kubelet.log | tail -n 40; true",
            b""
        )
    );
    // The tmpfs and every process go with the lab (dropped here).
}
