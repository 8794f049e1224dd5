//! The `cri` runtime against real containerd, runc and CNI on a lab host (root; CI runs as root).
//! `kiln lab up` makes a host with its own namespaces; the test installs the CNI plugins, writes the
//! containerd config and starts containerd there, then runs `kiln-cri-smoke` (the kubelet's CRI runtime
//! without an API server) on the host: pods are pulled from the lab registry, served over the pod network,
//! crash-looped, liveness-restarted, OOM-killed at their memory limit, and finally stopped and removed.

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::lab::{is_root, Lab};

struct Smoke(Child);

impl Drop for Smoke {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The last status line per pod, and every line seen.
#[derive(Default)]
struct Seen {
    lines: Vec<String>,
    last: std::collections::HashMap<String, serde_json::Value>,
}

impl Seen {
    fn take(&mut self, line: String) {
        if let Some(rest) = line.strip_prefix("STATUS ") {
            let (name, json) = rest.split_once(' ').unwrap();
            self.last
                .insert(name.to_string(), serde_json::from_str(json).unwrap());
        }
        self.lines.push(line);
    }

    fn ctr(&self, pod: &str) -> Option<&serde_json::Value> {
        self.last.get(pod)?.pointer("/containerStatuses/0")
    }

    /// restartCount of the pod's container, in the order the statuses were printed.
    fn restart_counts(&self, pod: &str) -> Vec<i64> {
        let prefix = format!("STATUS {pod} ");
        self.lines
            .iter()
            .filter_map(|l| l.strip_prefix(&prefix))
            .filter_map(|j| serde_json::from_str::<serde_json::Value>(j).ok())
            .filter_map(|v| v.pointer("/containerStatuses/0/restartCount")?.as_i64())
            .collect()
    }
}

fn wait_for(
    rx: &mpsc::Receiver<String>,
    seen: &mut Seen,
    secs: u64,
    what: &str,
    mut done: impl FnMut(&Seen) -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !done(seen) {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(
            !left.is_zero(),
            "timed out after {secs}s waiting for {what}; last statuses: {:#?}",
            seen.last
        );
        match rx.recv_timeout(left.min(Duration::from_millis(500))) {
            Ok(line) => seen.take(line),
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                panic!(
                    "kiln-cri-smoke ended while waiting for {what}: {:#?}",
                    seen.lines
                )
            }
        }
    }
}

#[test]
#[ignore = "needs root: a lab host (CI runs it with --include-ignored)"]
fn cri_runtime_runs_pods_on_containerd_in_a_lab_host() {
    assert!(is_root(), "needs root: a lab host");
    let here = std::path::PathBuf::from(common::lab::manifest_dir()).join("tests/cri");
    let lab = Lab::up("kubelet-cri");
    let setup = std::fs::read_to_string(here.join("host-setup.sh")).unwrap();
    assert!(lab.sh(&setup, b"").contains("containerd-up"));
    lab.put(
        Path::new(env!("CARGO_BIN_EXE_kiln-cri-smoke")),
        "/usr/local/bin/kiln-cri-smoke",
        "0755",
    );
    for pod in ["web", "crash", "sick", "oom"] {
        lab.put(
            &here.join(format!("{pod}.yaml")),
            &format!("/tmp/smoke/{pod}.yaml"),
            "0644",
        );
    }

    // Its log goes to the host's /var/log/kiln-cri-smoke.log; stdout is the status stream.
    let child = lab
        .exec(&[
            "sh",
            "-c",
            "exec /usr/local/bin/kiln-cri-smoke \"$@\" 2>/var/log/kiln-cri-smoke.log",
            "kiln-cri-smoke",
            "--pod-infra-container-image=10.250.0.1:5000/kiln/pause:1",
            "--pod-cidr=10.244.1.0/24",
            "--node-name=host1",
            "--node-ip=10.250.0.11",
            "--restart-backoff-base=1",
            "--release-file=/tmp/smoke/release",
            "--timeout-secs=240",
            "--pod-cgroups",
            "--pod-max-pids=1000",
            "/tmp/smoke/web.yaml",
            "/tmp/smoke/crash.yaml",
            "/tmp/smoke/sick.yaml",
            "/tmp/smoke/oom.yaml",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut smoke = Smoke(child);
    let stdout = smoke.0.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let mut seen = Seen::default();

    // The CNI conflist the runtime wrote for the pod CIDR.
    wait_for(&rx, &mut seen, 60, "the runtime", |s| {
        s.lines
            .iter()
            .any(|l| l.starts_with("RUNTIME containerd://"))
    });
    let conf = lab.sh("cat /etc/cni/net.d/10-kiln.conflist", b"");
    assert!(
        conf.contains("\"10.244.1.0/24\"") && conf.contains("\"cni0\""),
        "{conf}"
    );

    // web: pulled (imagePullPolicy Always) from the lab registry, Ready once its httpGet readiness
    // probe passes, with a pod IP from the node's CIDR that answers from the host.
    wait_for(&rx, &mut seen, 120, "web Running and Ready", |s| {
        s.last.get("web").is_some_and(|v| {
            v["phase"] == "Running"
                && v["conditions"].as_array().is_some_and(|c| {
                    c.iter()
                        .any(|c| c["type"] == "Ready" && c["status"] == "True")
                })
        })
    });
    let web = seen.last["web"].clone();
    let ip = web["podIP"].as_str().unwrap().to_string();
    assert!(ip.starts_with("10.244.1."), "{web}");
    assert_eq!(web["hostIP"], "10.250.0.11");
    assert!(web["containerStatuses"][0]["containerID"]
        .as_str()
        .unwrap()
        .starts_with("containerd://"));
    let body = lab.sh(&format!("timeout 3 busybox wget -qO- http://{ip}/"), b"");
    assert_eq!(
        body.trim(),
        "hello-web",
        "env from fieldRef reached the container"
    );
    // hostPort 8080 on the node's address (CNI portmap).
    let body = lab.sh("timeout 3 busybox wget -qO- http://10.250.0.11:8080/", b"");
    assert_eq!(body.trim(), "hello-web", "hostPort");

    // crash: exits 3 every run; restarted with growing restartCount, CrashLoopBackOff between runs,
    // lastState.terminated with the exit code; each run has its own log file.
    wait_for(&rx, &mut seen, 120, "crash restarted 3 times", |s| {
        s.ctr("crash")
            .is_some_and(|c| c["restartCount"].as_i64().unwrap_or(0) >= 3)
    });
    let counts = seen.restart_counts("crash");
    assert!(counts.windows(2).all(|w| w[0] <= w[1]), "{counts:?}");
    assert!(seen
        .lines
        .iter()
        .any(|l| l.starts_with("STATUS crash ") && l.contains("CrashLoopBackOff")));
    let last = &seen.ctr("crash").unwrap()["lastState"]["terminated"];
    assert_eq!(last["exitCode"], 3, "{last}");
    assert_eq!(last["reason"], "Error");
    let logs = lab.sh(
        "cat /var/log/pods/default_crash_uid-crash/main/0.log /var/log/pods/default_crash_uid-crash/main/1.log",
        b"",
    );
    assert_eq!(
        logs.lines()
            .filter(|l| l.ends_with(" stdout F run"))
            .count(),
        2,
        "{logs}"
    );

    // sick: its exec liveness probe starts failing after ~3 s; the kubelet kills and restarts it.
    wait_for(
        &rx,
        &mut seen,
        120,
        "sick restarted by its liveness probe",
        |s| {
            s.ctr("sick").is_some_and(|c| {
                c["restartCount"].as_i64().unwrap_or(0) >= 1
                    && c["lastState"]["terminated"]["exitCode"] == 137
            })
        },
    );

    // oom: its limits reach its cgroup (memory 32Mi, a 20 ms CFS quota per 100 ms, 204 shares); past
    // the memory limit the kernel kills it: OOMKilled with exit code 137, then restarted.
    wait_for(&rx, &mut seen, 120, "oom OOM-killed and restarted", |s| {
        s.ctr("oom").is_some_and(|c| {
            c["restartCount"].as_i64().unwrap_or(0) >= 1
                && c["lastState"]["terminated"]["reason"] == "OOMKilled"
        })
    });
    let last = &seen.ctr("oom").unwrap()["lastState"]["terminated"];
    assert_eq!(last["exitCode"], 137, "{last}");
    let log = lab.sh("cat /var/log/pods/default_oom_uid-oom/main/0.log", b"");
    let printed: Vec<&str> = log
        .lines()
        .filter_map(|l| l.rsplit(" stdout F ").next())
        .collect();
    assert_eq!(printed, ["33554432", "20000", "204"], "{log}");

    // Pod cgroups by QoS class, with upstream's pod-level limits, the containers' cgroups below them.
    let cg = |p: &str| {
        lab.sh(&format!("cat /sys/fs/cgroup/{p}"), b"")
            .trim()
            .to_string()
    };
    assert_eq!(
        cg("memory/kubepods/poduid-oom/memory.limit_in_bytes"),
        "33554432"
    );
    assert_eq!(cg("cpu/kubepods/poduid-oom/cpu.cfs_quota_us"), "20000");
    assert_eq!(cg("cpu/kubepods/poduid-oom/cpu.shares"), "204");
    assert_eq!(cg("cpu/kubepods/burstable/poduid-crash/cpu.shares"), "102");
    assert_eq!(
        cg("cpu/kubepods/burstable/poduid-crash/cpu.cfs_quota_us"),
        "-1"
    );
    assert_eq!(
        cg("memory/kubepods/burstable/poduid-crash/memory.limit_in_bytes"),
        "67108864"
    );
    assert_eq!(cg("cpu/kubepods/besteffort/poduid-web/cpu.shares"), "2");
    assert_eq!(cg("pids/kubepods/besteffort/poduid-web/pids.max"), "1000");
    assert_eq!(cg("cpu/kubepods/besteffort/cpu.shares"), "2");
    let web_ctrs = lab.sh(
        "ls /sys/fs/cgroup/memory/kubepods/besteffort/poduid-web/",
        b"",
    );
    assert!(
        web_ctrs.lines().any(|l| l.len() == 64),
        "the sandbox and container cgroups live in the pod's: {web_ctrs}"
    );

    // Stop everything: the smoke binary stops each pod (StopContainer with grace, StopPodSandbox,
    // RemoveContainer, RemovePodSandbox) and checks no sandbox of ours is left.
    lab.sh("touch /tmp/smoke/release", b"");
    wait_for(&rx, &mut seen, 120, "CLEAN", |s| {
        s.lines
            .iter()
            .any(|l| l == "CLEAN" || l.starts_with("LEFTOVER"))
    });
    assert!(seen.lines.iter().any(|l| l == "CLEAN"), "{:#?}", seen.lines);
    let status = smoke.0.wait().unwrap();
    assert!(status.success(), "kiln-cri-smoke: {status}");
    assert_eq!(lab.sh("ctr -n k8s.io containers ls -q", b"").trim(), "");
    // The pods' cgroups went with them; the tiers stay for the next pods.
    let left = lab.sh(
        "ls /sys/fs/cgroup/memory/kubepods/ /sys/fs/cgroup/cpu/kubepods/",
        b"",
    );
    assert!(!left.contains("poduid-"), "{left}");
    assert!(
        left.contains("burstable") && left.contains("besteffort"),
        "{left}"
    );
    // CNI DEL ran for every sandbox: no IP is left reserved.
    let reserved = lab.sh("ls /var/lib/cni/networks/kiln/", b"");
    assert!(!reserved.contains("10.244.1."), "{reserved}");
}
