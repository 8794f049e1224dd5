//! Leaked CNI IP reservations released, on a lab host (root) with the real containerd, host-local IPAM,
//! kiln-apiserver and kubectl:
//!
//! 1. A reservation left from before the kubelet started (made-up owner, an hour old) is released by the
//!    pass that runs once the runtime has reconciled (the periodic interval is an hour here).
//! 2. With a pod running and the kubelet restarted (the pod adopted) on a 2 s interval and a 10 min grace,
//!    a fresh unowned reservation and an hour-old one are planted: the old one is released (logged with its
//!    IP and owner), the fresh one and the pod's own reservation stay, and the pod runs on untouched.

mod common;

use common::lab::{is_root, wait_sh, Lab};
use serde_json::Value;

const KUBECTL: &str = "kubectl --kubeconfig /etc/kiln/admin.conf";
const IMAGE: &str = "10.250.0.1:5000/kiln/busybox:1";
const DIR: &str = "/var/lib/cni/networks/kiln";

fn kubelet(gc_interval: &str) -> String {
    format!(
        "setsid /usr/local/bin/kiln-kubelet --kubeconfig /etc/kiln/kubelet.conf \
           --hostname-override host1 --node-ip 10.250.0.11 --pod-cidr 10.244.1.0/24 \
           --pod-infra-container-image 10.250.0.1:5000/kiln/pause:1 --eviction-hard 'nodefs.available<1Gi,imagefs.available<1Gi' \
           --cni-gc-interval {gc_interval} --cni-gc-grace 10m \
           >>/var/log/kiln-kubelet.log 2>&1 </dev/null & echo $! >/run/kiln-kubelet.pid"
    )
}

/// Writes a reservation file the way host-local does (`ID\r\nIFNAME`), dated `when` (touch -d).
fn plant(lab: &Lab, ip: &str, owner: &str, when: &str) {
    lab.sh(
        &format!(
            "mkdir -p {DIR} && printf '%s\\r\\n%s' {owner} eth0 > {DIR}/{ip} && touch -d '{when}' {DIR}/{ip}"
        ),
        b"",
    );
}

fn exists(lab: &Lab, ip: &str) -> bool {
    lab.sh(&format!("test -e {DIR}/{ip} && echo yes; true"), b"")
        .trim()
        == "yes"
}

fn gc_starts(lab: &Lab) -> usize {
    lab.sh(
        "grep -c 'CNI IP reservation GC started' /var/log/kiln-kubelet.log; true",
        b"",
    )
    .trim()
    .parse()
    .unwrap_or(0)
}

/// (containerID, restartCount) once the pod runs.
fn running(lab: &Lab, what: &str) -> (Value, Value) {
    let out = wait_sh(
        lab,
        &format!("{KUBECTL} get pod web -o json"),
        120,
        what,
        |o| {
            serde_json::from_str::<Value>(o).is_ok_and(|p| {
                p["status"]["phase"] == "Running"
                    && p["status"]["containerStatuses"][0]["state"]["running"].is_object()
                    && p["status"]["podIP"].is_string()
            })
        },
    );
    let p: Value = serde_json::from_str(&out).unwrap();
    let c = &p["status"]["containerStatuses"][0];
    (c["containerID"].clone(), c["restartCount"].clone())
}

#[test]
#[ignore = "needs root: a lab host (CI runs it with --include-ignored)"]
fn leaked_ip_reservations_are_released() {
    assert!(is_root(), "needs root: a lab host");
    let (lab, _dir) =
        common::lab::up_with_control_plane("kcnigc", common::lab::APISERVER_WITH_KUBELET_CLIENT);
    let stale = "a".repeat(64);
    let leaked = "b".repeat(64);
    let fresh = "c".repeat(64);
    // 1. Left by an earlier life of the node; only the start-up pass can release it.
    plant(&lab, "10.244.1.250", &stale, "1 hour ago");
    lab.sh(&kubelet("1h"), b"");
    wait_sh(
        &lab,
        &format!("test -e {DIR}/10.244.1.250 || echo released"),
        120,
        "the reservation left before the start released",
        |o| o.trim() == "released",
    );
    assert_eq!(gc_starts(&lab), 1);

    // 2. A running pod; its reservation names its sandbox in host-local's format.
    lab.sh(
        &format!(
            "{KUBECTL} run web --image {IMAGE} --restart Never \
               --overrides '{{\"spec\":{{\"nodeName\":\"host1\"}}}}' -- sleep 100000"
        ),
        b"",
    );
    let (container, restarts) = running(&lab, "web Running");
    let pod: Value =
        serde_json::from_str(&lab.sh(&format!("{KUBECTL} get pod web -o json"), b"")).unwrap();
    let pod_ip = pod["status"]["podIP"].as_str().unwrap().to_string();
    let own = lab.sh(&format!("cat {DIR}/{pod_ip}"), b"");
    eprintln!("host-local's reservation of {pod_ip}: {own:?}");
    let (owner, ifname) = own.split_once("\r\n").expect("ID\\r\\nIFNAME");
    assert_eq!(ifname, "eth0");
    let sandboxes = lab.sh("ctr -n k8s.io containers ls -q", b"");
    assert!(
        sandboxes.lines().any(|id| id == owner),
        "{owner} is a sandbox: {sandboxes}"
    );

    // The kubelet restarted with a short interval: the pod is adopted, then the periodic passes run.
    lab.sh("kill $(cat /run/kiln-kubelet.pid)", b"");
    wait_sh(
        &lab,
        "kill -0 $(cat /run/kiln-kubelet.pid) 2>/dev/null || echo gone",
        60,
        "the first kubelet gone",
        |o| o.trim() == "gone",
    );
    lab.sh(&kubelet("2s"), b"");
    wait_sh(
        &lab,
        "grep -c 'CNI IP reservation GC started' /var/log/kiln-kubelet.log",
        120,
        "the restarted kubelet's GC started",
        |o| o.trim() == "2",
    );
    // Fresh first: every pass that sees the old one has seen the fresh one too.
    plant(&lab, "10.244.1.201", &fresh, "now");
    plant(&lab, "10.244.1.200", &leaked, "1 hour ago");
    wait_sh(
        &lab,
        &format!("test -e {DIR}/10.244.1.200 || echo released"),
        60,
        "the leaked reservation released",
        |o| o.trim() == "released",
    );
    assert!(exists(&lab, "10.244.1.201"), "the fresh reservation stays");
    assert!(exists(&lab, &pod_ip), "the pod's reservation stays");
    assert!(exists(&lab, "last_reserved_ip.0") && exists(&lab, "lock"));
    let log = lab.sh(
        "grep 'released a leaked CNI IP reservation' /var/log/kiln-kubelet.log",
        b"",
    );
    eprintln!("kubelet's releases:\n{log}");
    let released: Vec<&str> = log.lines().collect();
    assert_eq!(released.len(), 2, "{log}");
    assert!(released[0].contains("ip=10.244.1.250") && released[0].contains(&stale));
    assert!(released[1].contains("ip=10.244.1.200") && released[1].contains(&leaked));
    assert_eq!(
        running(&lab, "web still Running"),
        (container, restarts),
        "the pod was neither restarted nor recreated"
    );

    // Its own reservation goes with the pod (CNI DEL), not through the GC.
    lab.sh(&format!("{KUBECTL} delete pod web --timeout=90s"), b"");
    wait_sh(
        &lab,
        &format!("test -e {DIR}/{pod_ip} || echo released"),
        60,
        "the pod's reservation released by CNI DEL",
        |o| o.trim() == "released",
    );
    assert!(exists(&lab, "10.244.1.201"), "the fresh reservation stays");
    // Every process goes with the lab (dropped here).
}
