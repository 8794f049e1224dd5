//! The kiln-kubelet binary on a lab host, end to end (root): etcd and kiln-apiserver run on the host's
//! loopback, containerd on the host, and the kubelet registers the node, sees pods bound to it through its
//! watch, runs them over CRI and reports their status; `kubectl delete` stops them gracefully and the
//! kubelet removes the objects. Everything is driven with the real kubectl on the host.

mod common;

use common::lab::{is_root, wait_sh, Lab};

const KUBECTL: &str = "kubectl --kubeconfig /etc/kiln/admin.conf";

fn pod_json(lab: &Lab, name: &str) -> serde_json::Value {
    serde_json::from_str(&lab.sh(&format!("{KUBECTL} get pod {name} -o json"), b"")).unwrap()
}

#[test]
#[ignore = "needs root: a lab host (CI runs it with --include-ignored)"]
fn kubelet_runs_bound_pods_on_containerd_and_reports_them() {
    assert!(is_root(), "needs root: a lab host");
    let here = std::path::PathBuf::from(common::lab::manifest_dir()).join("tests/cri");
    let (lab, _dir) =
        common::lab::up_with_control_plane("kubelet-e2e", common::lab::APISERVER_ONLY);
    lab.put(&here.join("pods-e2e.yaml"), "/tmp/pods.yaml", "0644");

    // The kubelet, as a host process (it dies with the lab).
    lab.sh(
        "setsid /usr/local/bin/kiln-kubelet --kubeconfig /etc/kiln/kubelet.conf --hostname-override host1 \
           --node-ip 10.250.0.11 --pod-cidr 10.244.1.0/24 --restart-backoff-base 1 \
           --pod-infra-container-image 10.250.0.1:5000/kiln/pause:1 --eviction-hard 'nodefs.available<1Gi,imagefs.available<1Gi' >/var/log/kiln-kubelet.log 2>&1 </dev/null &",
        b"",
    );
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

    // web: Running and Ready (readiness probe), pod IP from the node's CIDR, serving from the pod network.
    wait_sh(
        &lab,
        &format!("{KUBECTL} get pod web -o json"),
        120,
        "web Ready",
        |o| {
            serde_json::from_str::<serde_json::Value>(o).is_ok_and(|p| {
                p["status"]["conditions"].as_array().is_some_and(|c| {
                    c.iter()
                        .any(|c| c["type"] == "Ready" && c["status"] == "True")
                })
            })
        },
    );
    let web = pod_json(&lab, "web");
    assert_eq!(web["status"]["phase"], "Running");
    assert_eq!(web["status"]["hostIP"], "10.250.0.11");
    let ip = web["status"]["podIP"].as_str().unwrap().to_string();
    assert!(ip.starts_with("10.244.1."), "{ip}");
    let body = lab.sh(&format!("timeout 3 busybox wget -qO- http://{ip}/"), b"");
    assert_eq!(body.trim(), "hello-web-on-host1");

    // crash: restarted with a growing restartCount, last exit 1, as kubectl shows it.
    wait_sh(
        &lab,
        &format!("{KUBECTL} get pod crash -o json"),
        120,
        "crash restarted twice",
        |o| {
            serde_json::from_str::<serde_json::Value>(o).is_ok_and(|p| {
                let c = &p["status"]["containerStatuses"][0];
                c["restartCount"].as_i64().unwrap_or(0) >= 2
                    && c["lastState"]["terminated"]["exitCode"] == 1
            })
        },
    );
    let table = lab.sh(&format!("{KUBECTL} get pods"), b"");
    assert!(table.contains("web") && table.contains("1/1"), "{table}");

    // Graceful delete: kubectl waits until the kubelet stopped the pods and removed the objects.
    lab.sh(
        &format!("{KUBECTL} delete pod web crash --timeout=90s"),
        b"",
    );
    let left = lab.sh(&format!("{KUBECTL} get pods -o name"), b"");
    assert_eq!(left.trim(), "", "pods left: {left}");
    assert_eq!(lab.sh("ctr -n k8s.io containers ls -q", b"").trim(), "");
}
