//! The kubelet's server on :10250 end to end on a lab host (root): etcd, kiln-apiserver (with its
//! kubelet-client certificate) and kiln-kubelet run on the host, containerd runs the pods, and the real
//! kubectl goes through the API server to the kubelet: `kubectl logs` (current run, `--previous`,
//! `--tail`, `--timestamps`, `-f`) of a container that keeps failing and of a static (kiln-host) pod
//! through its mirror pod, `kubectl exec` (output, exit code, stdin, `-it`) and `kubectl attach`.
//! The server's authentication and authorization are checked directly with curl: no certificate → 401,
//! a certificate whose user may not proxy to the node → 403 (SubjectAccessReview).

mod common;

use std::path::Path;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use common::lab::{is_root, wait_sh, Lab};

const KUBECTL: &str = "kubectl --kubeconfig /etc/kiln/admin.conf";

fn run(lab: &Lab, script: &str, stdin: Option<&[u8]>) -> Output {
    let mut cmd = lab.exec(&["sh", "-c", script]);
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    match stdin {
        None => cmd.stdin(Stdio::null()).output().unwrap(),
        Some(bytes) => {
            use std::io::Write;
            let mut child = cmd.stdin(Stdio::piped()).spawn().unwrap();
            child.stdin.take().unwrap().write_all(bytes).unwrap();
            child.wait_with_output().unwrap()
        }
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn restart_count(lab: &Lab, pod: &str) -> i64 {
    let p: serde_json::Value =
        serde_json::from_str(&lab.sh(&format!("{KUBECTL} get pod {pod} -o json"), b"")).unwrap();
    p["status"]["containerStatuses"][0]["restartCount"]
        .as_i64()
        .unwrap_or(0)
}

/// The run id of a logger run's output (`line1 ID`, `line2 ID`, `line3 ID`), if it is complete.
fn run_id(out: &str) -> Option<String> {
    let lines: Vec<&str> = out.lines().collect();
    let [l1, l2, l3] = lines.as_slice() else {
        return None;
    };
    let id = l1.strip_prefix("line1 ")?;
    (!id.is_empty() && *l2 == format!("line2 {id}") && *l3 == format!("line3 {id}"))
        .then(|| id.to_string())
}

/// What kubectl shows of the logger's runs, read while its restartCount stood still.
struct Runs {
    restart_count: i64,
    current: String,
    previous: String,
    tail: String,
    timestamped: String,
}

fn stable_runs(lab: &Lab) -> Runs {
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let before = restart_count(lab, "logger");
        let kubectl =
            |args: &str| text(&run(lab, &format!("{KUBECTL} logs logger {args}"), None).stdout);
        let runs = Runs {
            restart_count: before,
            current: kubectl(""),
            previous: kubectl("--previous"),
            tail: kubectl("--tail=1"),
            timestamped: kubectl("--tail=1 --timestamps"),
        };
        // A restart in between (or a run that has not printed yet) mixes two runs: read again.
        if before >= 1
            && restart_count(lab, "logger") == before
            && run_id(&runs.previous).is_some()
            && run_id(&runs.current).is_some_and(|id| {
                // The same run for every call (tail and timestamps are checked by the caller).
                runs.tail.contains(&id) && runs.timestamped.contains(&id)
            })
        {
            return runs;
        }
        assert!(
            Instant::now() < deadline,
            "no stable view of logger's runs: current {:?}, previous {:?}, tail {:?}, timestamped {:?}",
            runs.current,
            runs.previous,
            runs.tail,
            runs.timestamped
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

#[test]
#[ignore = "needs root: a lab host (CI runs it with --include-ignored)"]
fn kubectl_logs_and_exec_reach_the_kubelet_server() {
    assert!(is_root(), "needs root: a lab host");
    let here = std::path::PathBuf::from(common::lab::manifest_dir()).join("tests/cri");
    let (lab, _dir) = common::lab::up_with_control_plane(
        "kubelet-srv",
        common::lab::APISERVER_WITH_KUBELET_CLIENT,
    );
    lab.put(&here.join("server-pods.yaml"), "/tmp/pods.yaml", "0644");
    lab.put(
        &here.join("server-static.yaml"),
        "/etc/kiln/manifests/hello.yaml",
        "0644",
    );

    // The kubelet serves on the default --port 10250 with a self-signed certificate and the default
    // --client-ca-file /etc/kiln/pki/ca.crt.
    lab.sh(
        "setsid /usr/local/bin/kiln-kubelet --kubeconfig /etc/kiln/kubelet.conf --hostname-override host1 \
           --node-ip 10.250.0.11 --pod-cidr 10.244.1.0/24 --restart-backoff-base 1 \
           --pod-infra-container-image 10.250.0.1:5000/kiln/pause:1 --eviction-hard 'nodefs.available<1Gi,imagefs.available<1Gi' >/var/log/kiln-kubelet.log 2>&1 </dev/null &",
        b"",
    );
    let node = wait_sh(
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
    let node: serde_json::Value = serde_json::from_str(&node).unwrap();
    assert_eq!(
        node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"],
        10250
    );
    lab.sh(&format!("{KUBECTL} apply -f /tmp/pods.yaml"), b"");
    wait_sh(
        &lab,
        &format!("{KUBECTL} get pod sleeper -o jsonpath={{.status.phase}}"),
        120,
        "sleeper Running",
        |o| o == "Running",
    );

    // exec: output, the remote exit code, stdin.
    let out = run(
        &lab,
        &format!("{KUBECTL} exec sleeper -- cat /etc/hostname"),
        None,
    );
    assert!(out.status.success(), "kubectl exec: {}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), "sleeper");
    let out = run(
        &lab,
        &format!("{KUBECTL} exec sleeper -- sh -c 'echo to-out; echo to-err >&2; exit 3'"),
        None,
    );
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "to-out\n");
    assert!(
        text(&out.stderr).contains("to-err"),
        "{}",
        text(&out.stderr)
    );
    let out = run(
        &lab,
        &format!("{KUBECTL} exec -i sleeper -- tr a-z A-Z"),
        Some(b"through stdin\n"),
    );
    assert!(
        out.status.success(),
        "kubectl exec -i: {}",
        text(&out.stderr)
    );
    assert_eq!(text(&out.stdout), "THROUGH STDIN\n");
    // -it: a terminal in the container (script(1) gives kubectl a terminal of its own).
    let out = run(
        &lab,
        &format!("script -qec '{KUBECTL} exec -it sleeper -- tty' /dev/null"),
        Some(b""),
    );
    assert!(
        text(&out.stdout).contains("/dev/pts/"),
        "kubectl exec -it: {}{}",
        text(&out.stdout),
        text(&out.stderr)
    );

    // attach: the container's own output; timeout(1) ends the session.
    wait_sh(
        &lab,
        &format!("{KUBECTL} get pod talker -o jsonpath={{.status.phase}}"),
        120,
        "talker Running",
        |o| o == "Running",
    );
    let out = run(&lab, &format!("timeout 5 {KUBECTL} attach talker"), None);
    assert!(
        text(&out.stdout).contains("tick\n"),
        "kubectl attach: {}{}",
        text(&out.stdout),
        text(&out.stderr)
    );

    // logs: wait for a restart, then compare what kubectl shows with the runs' files on the host.
    wait_sh(
        &lab,
        &format!(
            "{KUBECTL} get pod logger -o jsonpath={{.status.containerStatuses[0].restartCount}}"
        ),
        180,
        "logger restarted",
        |o| o.trim().parse::<i64>().is_ok_and(|n| n >= 1),
    );
    let runs = stable_runs(&lab);
    let current = run_id(&runs.current).unwrap();
    let previous = run_id(&runs.previous).unwrap();
    assert_ne!(current, previous, "--previous shows the current run");
    // Which run file holds each id (the API's restartCount may lag the kubelet's by a sync).
    let run_of = |id: &str| -> i64 {
        let path = lab.sh(
            &format!("grep -l 'stdout F line3 {id}' /var/log/pods/default_logger_*/main/*.log"),
            b"",
        );
        let name = Path::new(path.trim())
            .file_name()
            .unwrap()
            .to_str()
            .unwrap();
        name.strip_suffix(".log").unwrap().parse().unwrap()
    };
    let (current_run, previous_run) = (run_of(&current), run_of(&previous));
    assert!(
        current_run >= runs.restart_count,
        "{current_run} < {}",
        runs.restart_count
    );
    assert_eq!(previous_run, current_run - 1);
    assert_eq!(runs.tail, format!("line3 {current}\n"));
    let (ts, rest) = runs.timestamped.split_once(' ').unwrap();
    assert!(
        ts.starts_with("20") && ts.ends_with('Z') && ts.contains('T'),
        "{}",
        runs.timestamped
    );
    assert_eq!(rest, format!("line3 {current}\n"));
    // -f ends once the followed run is over (or right away when the container is between runs).
    let out = run(&lab, &format!("timeout 60 {KUBECTL} logs -f logger"), None);
    assert!(
        out.status.success(),
        "kubectl logs -f: {}",
        text(&out.stderr)
    );
    assert!(
        run_id(&text(&out.stdout)).is_some(),
        "{}",
        text(&out.stdout)
    );

    // A static (kiln-host) pod's log, through its mirror pod; exec is refused with a reason.
    wait_sh(
        &lab,
        &format!("{KUBECTL} logs -n kube-system hello-host1"),
        60,
        "static pod log",
        |o| o == "static-hello\n",
    );
    let out = run(
        &lab,
        &format!("{KUBECTL} exec -n kube-system hello-host1 -- true"),
        None,
    );
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("kiln-host"),
        "{}",
        text(&out.stderr)
    );

    // The server itself: /healthz for anyone, 401 without a client certificate, 403 for a user the
    // API server does not allow nodes/proxy, and /pods and /metrics for the apiserver's client cert.
    let curl = "curl -sk -o /dev/null -w '%{http_code}'";
    assert_eq!(
        lab.sh("curl -sk https://10.250.0.11:10250/healthz", b""),
        "ok"
    );
    assert_eq!(
        lab.sh(&format!("{curl} https://10.250.0.11:10250/pods"), b""),
        "401"
    );
    lab.sh(
        "grep client-certificate-data /etc/kiln/kubelet.conf | awk '{print $2}' | base64 -d >/tmp/node.crt
         grep client-key-data /etc/kiln/kubelet.conf | awk '{print $2}' | base64 -d >/tmp/node.key",
        b"",
    );
    assert_eq!(
        lab.sh(
            &format!(
                "{curl} --cert /tmp/node.crt --key /tmp/node.key https://10.250.0.11:10250/pods"
            ),
            b""
        ),
        "403"
    );
    let client = "--cert /etc/kiln/pki/apiserver-kubelet-client.crt --key /etc/kiln/pki/apiserver-kubelet-client.key";
    let pods: serde_json::Value = serde_json::from_str(&lab.sh(
        &format!("curl -sk {client} https://10.250.0.11:10250/pods"),
        b"",
    ))
    .unwrap();
    assert_eq!(pods["kind"], "PodList");
    let names: Vec<&str> = pods["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["metadata"]["name"].as_str())
        .collect();
    assert!(
        names.contains(&"sleeper") && names.contains(&"logger"),
        "{names:?}"
    );
    let metrics = lab.sh(
        &format!("curl -sk {client} https://10.250.0.11:10250/metrics"),
        b"",
    );
    assert!(metrics.contains("kubelet_running_pods "), "{metrics}");
    assert!(
        metrics.contains("kiln_kubelet_http_requests_total{path=\"exec\",code=\"101\"}"),
        "{metrics}"
    );

    lab.sh(
        &format!("{KUBECTL} delete pod sleeper logger talker --timeout=90s"),
        b"",
    );
}
