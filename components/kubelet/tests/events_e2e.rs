//! The kubelet's Events, lifecycle hooks and resourceFieldRef env on a lab host (root), with the real
//! containerd and kubectl: etcd, kiln-apiserver and kiln-kubelet run on the host (as in cri_e2e.rs).
//! `kubectl get events --field-selector involvedObject.name=…` shows Pulled/Created/Started from the
//! kubelet for a pod, BackOff for a crashing one and Unhealthy (count > 1: one aggregated object) for a
//! failing readiness probe; `kubectl describe pod` lists them; postStart and preStop exec hooks leave
//! their files in a hostPath; the env from resourceFieldRef has the limits, requests and the node's
//! allocatable.

mod common;

use std::time::{Duration, Instant};

use common::lab::{is_root, wait_sh, Lab};

const KUBECTL: &str = "kubectl --kubeconfig /etc/kiln/admin.conf";
const OUT: &str = "/var/lib/kiln-events-test";

/// The events of pod `name`, through the API server's field selector.
fn events(lab: &Lab, name: &str) -> Vec<serde_json::Value> {
    let out = lab.sh(
        &format!("{KUBECTL} get events --field-selector involvedObject.name={name} -o json"),
        b"",
    );
    let list: serde_json::Value = serde_json::from_str(&out).unwrap();
    list["items"].as_array().cloned().unwrap_or_default()
}

/// Waits until pod `name` has an event for which `pick` holds; returns it.
fn wait_event(
    lab: &Lab,
    name: &str,
    what: &str,
    pick: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let all = events(lab, name);
        if let Some(e) = all.iter().find(|e| pick(e)) {
            return e.clone();
        }
        if Instant::now() > deadline {
            let logs = lab.sh("tail -n 40 /var/log/kiln-kubelet.log", b"");
            panic!(
                "no {what} event for pod {name} after 120s; events:\n{}\nkubelet log:\n{logs}",
                serde_json::to_string_pretty(&all).unwrap()
            );
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn reason_is(reason: &'static str) -> impl Fn(&serde_json::Value) -> bool {
    move |e| e["reason"] == reason
}

#[test]
#[ignore = "needs root: a lab host (CI runs it with --include-ignored)"]
fn kubelet_events_hooks_and_resource_env_on_containerd() {
    assert!(is_root(), "needs root: a lab host");
    let here = std::path::PathBuf::from(common::lab::manifest_dir()).join("tests/cri");
    let (lab, _dir) = common::lab::up_with_control_plane("t-events", common::lab::APISERVER_ONLY);
    lab.put(&here.join("events-hooks.yaml"), "/tmp/pods.yaml", "0644");
    lab.sh(
        "setsid /usr/local/bin/kiln-kubelet --kubeconfig /etc/kiln/kubelet.conf --hostname-override host1 \
           --node-ip 10.250.0.11 --pod-cidr 10.244.1.0/24 --restart-backoff-base 1 --capacity-cpu 3 \
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

    // hooks: Pulled, Created, Started from the kubelet, about its container.
    let started = wait_event(&lab, "hooks", "Started", reason_is("Started"));
    assert_eq!(started["type"], "Normal");
    assert_eq!(started["message"], "Started container main");
    assert_eq!(started["source"]["component"], "kubelet");
    assert_eq!(started["source"]["host"], "host1");
    assert_eq!(started["reportingComponent"], "kubelet");
    assert_eq!(started["reportingInstance"], "host1");
    assert_eq!(started["involvedObject"]["kind"], "Pod");
    assert_eq!(
        started["involvedObject"]["fieldPath"],
        "spec.containers{main}"
    );
    let uid = lab.sh(
        &format!("{KUBECTL} get pod hooks -o jsonpath='{{.metadata.uid}}'"),
        b"",
    );
    assert_eq!(started["involvedObject"]["uid"], uid.trim());
    let reasons: Vec<String> = events(&lab, "hooks")
        .iter()
        .map(|e| e["reason"].as_str().unwrap_or_default().to_string())
        .collect();
    for r in ["Pulled", "Created", "Started"] {
        assert!(reasons.iter().any(|x| x == r), "{r} missing in {reasons:?}");
    }

    // postStart ran in the container (its file in the hostPath); the env from resourceFieldRef:
    // 64Mi in Mi, 250m in m, and the node's 3 CPUs for the missing cpu limit.
    wait_sh(
        &lab,
        &format!("cat {OUT}/poststart"),
        60,
        "the postStart file",
        |o| o.trim() == "started",
    );
    let env = wait_sh(&lab, &format!("cat {OUT}/env"), 60, "the env file", |o| {
        !o.trim().is_empty()
    });
    assert_eq!(env.trim(), "64 250 3");

    // kubectl describe finds them (field selector on name, namespace, kind and uid).
    let describe = lab.sh(&format!("{KUBECTL} describe pod hooks"), b"");
    let section = describe
        .split("Events:")
        .nth(1)
        .unwrap_or_else(|| panic!("no Events section:\n{describe}"));
    assert!(
        section.contains("Started") && section.contains("kubelet"),
        "{describe}"
    );

    // crash: BackOff, a warning about its container.
    let backoff = wait_event(&lab, "crash", "BackOff", reason_is("BackOff"));
    assert_eq!(backoff["type"], "Warning");
    let msg = backoff["message"].as_str().unwrap();
    assert!(
        msg.starts_with("Back-off restarting failed container main in pod crash_default("),
        "{msg}"
    );

    // unready: Unhealthy, repeated failures counted on one object (the recorder patches count).
    let unhealthy = wait_event(&lab, "unready", "Unhealthy count>1", |e| {
        e["reason"] == "Unhealthy" && e["count"].as_i64().unwrap_or(0) >= 2
    });
    assert_eq!(unhealthy["type"], "Warning");
    assert!(unhealthy["message"]
        .as_str()
        .unwrap()
        .starts_with("Readiness probe failed:"));
    let same: Vec<_> = events(&lab, "unready")
        .into_iter()
        .filter(|e| e["reason"] == "Unhealthy" && e["message"] == unhealthy["message"])
        .collect();
    assert_eq!(same.len(), 1, "one object per repeated event: {same:?}");

    // Deleting hooks runs its preStop hook (inside the grace period) and records Killing.
    lab.sh(&format!("{KUBECTL} delete pod hooks --timeout=90s"), b"");
    assert_eq!(
        lab.sh(&format!("cat {OUT}/prestop"), b"").trim(),
        "stopping"
    );
    let killing = wait_event(&lab, "hooks", "Killing", reason_is("Killing"));
    assert_eq!(killing["message"], "Stopping container main");

    lab.sh(
        &format!("{KUBECTL} delete pod crash unready --timeout=90s"),
        b"",
    );
}
