//! Workload pod env, volumes and init containers on real containerd in a lab host (root), driven with
//! the real kubectl against kiln-apiserver (with a service-account signing key, so TokenRequest works):
//! an init container gated by the test shows `Init:0/1` (Pending, Initialized=False), then writes into
//! an emptyDir; the app container sees env from configMapKeyRef, secretKeyRef and fieldRef, a read-only
//! configMap volume, a secret volume (0644 files, as upstream) and the service-account volume, and
//! reports them to a hostPath the test reads (plus a subPath mount, a Memory emptyDir and `$(VAR)` in args). A ConfigMap update
//! reaches the running container's file; a missing ConfigMap is CreateContainerConfigError with upstream's
//! message; deleting the pod removes its volume dirs (the tmpfs unmounted first).

mod common;

use common::lab::{is_root, wait_sh, Lab};

const KUBECTL: &str = "kubectl --kubeconfig /etc/kiln/admin.conf";

fn pod_json(lab: &Lab, name: &str) -> serde_json::Value {
    serde_json::from_str(&lab.sh(&format!("{KUBECTL} get pod {name} -o json"), b"")).unwrap()
}

fn condition(p: &serde_json::Value, t: &str) -> String {
    p["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == t))
        .map(|c| c["status"].as_str().unwrap_or_default().to_string())
        .unwrap_or_default()
}

#[test]
#[ignore = "needs root: a lab host (CI runs it with --include-ignored)"]
fn env_volumes_and_init_containers_on_containerd() {
    assert!(is_root(), "needs root: a lab host");
    let here = std::path::PathBuf::from(common::lab::manifest_dir()).join("tests/cri");
    let (lab, _dir) = common::lab::up_with_control_plane(
        "kubelet-vols",
        &["ca.crt", "apiserver.crt", "apiserver.key", "sa.key"],
    );
    lab.put(&here.join("volumes-e2e.yaml"), "/tmp/vols.yaml", "0644");

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
            serde_json::from_str::<serde_json::Value>(o)
                .is_ok_and(|n| condition(&n, "Ready") == "True")
        },
    );
    lab.sh(&format!("{KUBECTL} apply -f /tmp/vols.yaml"), b"");

    // The init container runs (gated): Init:0/1, Pending, Initialized=False, the app not started.
    wait_sh(
        &lab,
        &format!("{KUBECTL} get pod vols -o json"),
        120,
        "the init container running",
        |o| {
            serde_json::from_str::<serde_json::Value>(o).is_ok_and(|p| {
                !p["status"]["initContainerStatuses"][0]["state"]["running"].is_null()
            })
        },
    );
    let table = lab.sh(&format!("{KUBECTL} get pod vols"), b"");
    assert!(table.contains("Init:0/1"), "{table}");
    let p = pod_json(&lab, "vols");
    assert_eq!(p["status"]["phase"], "Pending", "{p}");
    assert_eq!(condition(&p, "Initialized"), "False");
    assert_eq!(
        p["status"]["containerStatuses"][0]["state"]["waiting"]["reason"],
        "PodInitializing"
    );
    lab.sh("touch /var/lib/kiln/e2e/gate/open", b"");

    // The app's report.
    let report = wait_sh(
        &lab,
        "cat /var/lib/kiln/e2e/out/env.txt",
        120,
        "the app's report",
        |o| o.contains("SA_CA="),
    );
    // The status follows within a sync or two.
    let p = wait_sh(
        &lab,
        &format!("{KUBECTL} get pod vols -o json"),
        60,
        "vols Running",
        |o| {
            serde_json::from_str::<serde_json::Value>(o)
                .is_ok_and(|p| p["status"]["phase"] == "Running")
        },
    );
    let p: serde_json::Value = serde_json::from_str(&p).unwrap();
    assert_eq!(condition(&p, "Initialized"), "True");
    assert_eq!(
        p["status"]["initContainerStatuses"][0]["state"]["terminated"]["reason"],
        "Completed"
    );
    let ip = p["status"]["podIP"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(ip.starts_with("10.244.1."), "{ip}");
    let line = |key: &str| {
        report
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{key}=")))
            .unwrap_or_else(|| panic!("no {key} in {report}"))
            .to_string()
    };
    assert_eq!(line("GREETING"), "hello");
    assert_eq!(line("PASSWORD"), "s3cret");
    assert_eq!(
        line("POD"),
        format!("vols NS=default NODE=host1 IP={ip}"),
        "{report}"
    );
    assert_eq!(line("MARKER"), "init-was-here", "emptyDir shared with init");
    assert_eq!(line("CFG_GREETING"), "hello");
    assert_eq!(line("SECRET"), "s3cret");
    assert_eq!(
        line("SECRET_MODE"),
        "644",
        "secret files default to 0644 (defaultMode 420), as upstream"
    );
    assert_eq!(line("SA_NS"), "default");
    let token_bytes: usize = line("SA_TOKEN_BYTES").trim().parse().unwrap();
    assert!(token_bytes > 100, "a JWT: {report}");
    assert_eq!(line("SA_CA"), "-----BEGIN CERTIFICATE-----");
    assert_eq!(
        line("CFG_WRITABLE"),
        "no",
        "configMap volumes are read-only"
    );
    assert_eq!(
        line("SUBPATH"),
        "hello",
        "a configMap key mounted by subPath"
    );
    assert_eq!(line("MEM_FS"), "tmpfs", "emptyDir medium Memory");
    assert_eq!(line("SECRET_FS"), "tmpfs", "secrets stay off the disk");
    assert_eq!(line("ARG"), "hello", "$(VAR) in args expands from the env");

    // A ConfigMap update reaches the running container's view.
    wait_sh(
        &lab,
        "cat /var/lib/kiln/e2e/out/color",
        60,
        "the first color",
        |o| o.trim() == "blue",
    );
    lab.sh(
        &format!(
            "{KUBECTL} patch configmap app-config --type merge -p '{{\"data\":{{\"color\":\"green\"}}}}'"
        ),
        b"",
    );
    wait_sh(
        &lab,
        "cat /var/lib/kiln/e2e/out/color",
        90,
        "the updated color inside the container",
        |o| o.trim() == "green",
    );

    // The pod with a missing ConfigMap waits with upstream's reason and message.
    let broken = wait_sh(
        &lab,
        &format!("{KUBECTL} get pod broken -o json"),
        120,
        "broken: CreateContainerConfigError",
        |o| {
            serde_json::from_str::<serde_json::Value>(o).is_ok_and(|p| {
                p["status"]["containerStatuses"][0]["state"]["waiting"]["reason"]
                    == "CreateContainerConfigError"
            })
        },
    );
    let broken: serde_json::Value = serde_json::from_str(&broken).unwrap();
    assert_eq!(
        broken["status"]["containerStatuses"][0]["state"]["waiting"]["message"],
        "configmap \"absent\" not found"
    );

    // Deleting the pods removes their volume directories.
    let uid = p["metadata"]["uid"].as_str().unwrap().to_string();
    assert!(lab.sh("ls /var/lib/kiln/kubelet/pods", b"").contains(&uid));
    lab.sh(
        &format!("{KUBECTL} delete pod vols broken --timeout=90s"),
        b"",
    );
    wait_sh(
        &lab,
        "ls /var/lib/kiln/kubelet/pods",
        60,
        "the pod's volume dirs removed",
        |o| !o.contains(&uid),
    );
    assert_eq!(lab.sh("ctr -n k8s.io containers ls -q", b"").trim(), "");
}
