//! Issue #25 on one 2-host lab with real kubectl: `kubectl port-forward` to an agnhost netexec pod
//! (kubectl 1.32's SPDY-over-WebSocket tunnel and kubectl 1.29's plain SPDY), the runtime's error for
//! a port nothing listens on, and `kubectl debug` adding an ephemeral container that targets the
//! pod's container: it runs once, sees the target's processes (`ps`), reports its status and is
//! never restarted. Issue #30 on the same pod: kubectl 1.32's exec over WebSocket v5 (translated
//! to SPDY by the API server) with stdin to EOF, a non-zero exit code, a TTY and its size, and
//! `kubectl cp` both ways; kube-rs's exec reads the output that follows its stdin close (v5's CLOSE);
//! kubectl 1.27's SPDY exec still works and is not translated.

use std::io::Read;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kiln_tests::{run, stdout, Cluster, TestLab};

#[path = "portforward_debug/kube_rs_exec.rs"]
mod kube_rs_exec;

const AGNHOST: &str = "10.250.0.1:5000/kiln/agnhost:1";
const BUSYBOX: &str = "10.250.0.1:5000/kiln/busybox:1";
/// The lab network's own address: kubectl listens there, inside the lab netns.
const LISTEN: &str = "10.250.0.1";

/// The kubectl next to the installed one, of another version (`kubectl.1.29`).
fn kubectl_version(v: &str) -> String {
    let which = Command::new("sh")
        .args(["-c", "readlink -f \"$(command -v kubectl)\""])
        .output()
        .unwrap();
    let path = PathBuf::from(String::from_utf8_lossy(&which.stdout).trim());
    let other = path.with_file_name(format!("kubectl.{v}"));
    assert!(other.exists(), "{} is not installed", other.display());
    other.to_string_lossy().into_owned()
}

/// `kubectl port-forward pod/<pod> <local>:<remote>` running in the lab network until dropped.
struct Forward {
    child: Child,
}

impl Forward {
    fn start(c: &Cluster, kubectl: &str, pod: &str, ports: &str) -> Forward {
        let child = c
            .lab
            .in_lab(&[
                kubectl,
                "--kubeconfig",
                &c.admin,
                "port-forward",
                "--address",
                LISTEN,
                &format!("pod/{pod}"),
                ports,
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        Forward { child }
    }

    /// Stops kubectl and returns what it printed (stdout, stderr).
    fn finish(mut self) -> (String, String) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let mut out = String::new();
        let mut err = String::new();
        if let Some(mut s) = self.child.stdout.take() {
            let _ = s.read_to_string(&mut out);
        }
        if let Some(mut s) = self.child.stderr.take() {
            let _ = s.read_to_string(&mut err);
        }
        (out, err)
    }
}

impl Drop for Forward {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One HTTP GET from inside the lab network (none of it leaves the lab netns).
fn get(c: &Cluster, url: &str) -> Option<String> {
    let o = run(&mut c.lab.in_lab(&["curl", "-sS", "--max-time", "3", url]));
    o.status.success().then(|| stdout(&o))
}

/// Waits (up to 60 s) until something listens on `port` in the lab network: kubectl's forward.
fn wait_listening(c: &Cluster, port: u16) {
    let probe = format!("ss -Hltn 'sport = :{port}' | grep -q .");
    c.wait(&format!("kubectl to listen on {port}"), 60, || {
        if shell(c, &probe).status.success() {
            Ok(())
        } else {
            Err("not listening".to_string())
        }
    });
}

fn jsonpath(c: &Cluster, what: &str, path: &str) -> String {
    c.try_kubectl(&["get", what, "-o", &format!("jsonpath={path}")])
        .unwrap_or_default()
}

#[test]
#[ignore = "needs root: builds lab hosts (CI runs it with --include-ignored)"]
fn port_forward_and_ephemeral_containers() {
    // KILN_TEST_LAB names the lab where several people share a machine.
    let name = std::env::var("KILN_TEST_LAB").unwrap_or_else(|_| "t-pf".into());
    let lab = TestLab::up_with_images(&name, 2, true, &["agnhost"]);
    let c = Cluster::on(lab, "");
    c.kiln(&["init", "--wait-timeout", "150"]);
    c.kubectl(&[
        "run",
        "web",
        "--image",
        AGNHOST,
        "--restart=Never",
        "--",
        "netexec",
        "--http-port=8080",
    ]);
    c.kubectl(&["wait", "--for=condition=Ready", "pod/web", "--timeout=180s"]);
    port_forward(&c);
    exec_over_websockets(&c);
    debug(&c);
}

/// `apiserver_stream_translator_requests_total{code="200"}`: exec/attach sessions the API server
/// translated from WebSocket v5 to SPDY and that ended with the command's own exit.
fn translated_sessions(c: &Cluster) -> u64 {
    c.kubectl(&["get", "--raw", "/metrics"])
        .lines()
        .find_map(|l| l.strip_prefix("apiserver_stream_translator_requests_total{code=\"200\"} "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

/// kubectl run in the lab through `sh -c` (pipes, a pseudo-terminal from `script`).
fn shell(c: &Cluster, script: &str) -> std::process::Output {
    run(&mut c.lab.in_lab(&["sh", "-c", script]))
}

/// Issue #30: kubectl 1.32 (WebSocket v5 by default) and 1.27 (SPDY) exec into `web`.
fn exec_over_websockets(c: &Cluster) {
    let k = format!("kubectl --kubeconfig {} --request-timeout=30s", c.admin);
    let before = translated_sessions(c);

    // stdin to EOF: v5's CLOSE signal half-closes the command's stdin, so `cat` ends.
    let o = shell(c, &format!("echo hi | timeout 30 {k} exec -i web -- cat"));
    assert!(o.status.success(), "exec -i: {o:?}");
    assert_eq!(stdout(&o), "hi");

    // A non-zero exit: the Status on the error channel carries the code, kubectl exits with it.
    let o = shell(
        c,
        &format!("timeout 30 {k} exec web -- sh -c 'echo out; exit 3'"),
    );
    assert_eq!(o.status.code(), Some(3), "{o:?}");
    assert_eq!(stdout(&o), "out");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("command terminated with exit code 3"), "{err}");

    // A TTY: the terminal's size reaches the container through the resize channel.
    let o = shell(
        c,
        &format!(
            "timeout 30 script -qec \"stty cols 101 rows 31; {k} exec -it web -- sh -c 'sleep 1; stty -a'\" /dev/null"
        ),
    );
    let out = stdout(&o);
    assert!(out.contains("rows 31; columns 101"), "exec -it: {o:?}");

    // kubectl cp both ways (tar over exec, stdin to EOF one way, stdout the other).
    let dir = std::env::temp_dir().join(format!("kiln-ws-cp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let data: Vec<u8> = (0..300_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    let src = dir.join("blob");
    let back = dir.join("back");
    std::fs::write(&src, &data).unwrap();
    // -v=6: should a copy ever stall, its stderr shows which of cp's execs (`test -d`, then `tar`)
    // did and how far the upgrade got.
    let o = shell(
        c,
        &format!("timeout 60 {k} -v=6 cp {} web:/tmp/blob", src.display()),
    );
    assert!(o.status.success(), "cp into the pod: {o:?}");
    let o = shell(
        c,
        &format!("timeout 60 {k} -v=6 cp web:/tmp/blob {}", back.display()),
    );
    assert!(o.status.success(), "cp out of the pod: {o:?}");
    assert!(
        std::fs::read(&back).unwrap() == data,
        "kubectl cp round trip changed the file"
    );
    let _ = std::fs::remove_dir_all(&dir);

    // Every one of those went through the translator (cp is two execs per direction at most).
    let after = translated_sessions(c);
    assert!(
        after >= before + 5,
        "translated sessions {before} -> {after}"
    );

    // kubectl 1.27 speaks SPDY: proxied to the kubelet as before, exit code and stdin included.
    let old = kubectl_version("1.27");
    let k27 = format!("{old} --kubeconfig {} --request-timeout=30s", c.admin);
    let o = shell(
        c,
        &format!("echo old | timeout 30 {k27} exec -i web -- cat"),
    );
    assert!(o.status.success(), "1.27 exec -i: {o:?}");
    assert_eq!(stdout(&o), "old");
    let o = shell(c, &format!("timeout 30 {k27} exec web -- sh -c 'exit 4'"));
    assert_eq!(o.status.code(), Some(4), "1.27: {o:?}");
    assert_eq!(
        translated_sessions(c),
        after,
        "SPDY requests are not translated"
    );

    // kube-rs: v5 negotiated, so the output after its stdin close arrives, and the session was translated.
    let before_rs = translated_sessions(c);
    let seen = kube_rs_exec::exec_after_stdin_close(&c.lab.netns(), &c.admin, "web")
        .unwrap_or_else(|e| panic!("kube-rs exec: {e:#}"));
    assert_eq!(seen.stdout, "after-close\n", "{seen:?}");
    assert_eq!(seen.status.as_deref(), Some("Success"), "{seen:?}");
    assert!(
        translated_sessions(c) > before_rs,
        "kube-rs's exec did not go through the v5 translator"
    );
}

/// Both kubectl generations reach the pod's port; a port nothing listens on reports the
/// runtime's error.
fn port_forward(c: &Cluster) {
    for (kubectl, local) in [
        ("kubectl".to_string(), 18080),
        (kubectl_version("1.29"), 18081),
    ] {
        let fwd = Forward::start(c, &kubectl, "web", &format!("{local}:8080"));
        let url = format!("http://{LISTEN}:{local}/hostname");
        let start = Instant::now();
        let body = loop {
            if let Some(b) = get(c, &url) {
                break b;
            }
            if start.elapsed() > Duration::from_secs(60) {
                let (out, err) = fwd.finish();
                panic!("{kubectl}: no answer through the forward; stdout {out:?} stderr {err:?}");
            }
            std::thread::sleep(Duration::from_millis(500));
        };
        assert_eq!(body.trim(), "web", "{kubectl}: netexec's /hostname");
        // A second request on a new connection goes through too (a new stream per connection).
        let echo = get(c, &format!("http://{LISTEN}:{local}/echo?msg=kiln"));
        assert_eq!(echo.as_deref().map(str::trim), Some("kiln"), "{kubectl}");
        let (out, _) = fwd.finish();
        assert!(
            out.contains(&format!("Forwarding from {LISTEN}:{local} -> 8080")),
            "{kubectl}: {out}"
        );
    }

    // Nothing listens on 8081: the connection fails and kubectl shows containerd's error. The probes
    // start once kubectl listens (on a loaded machine it may take seconds), so that they reach the pod.
    let fwd = Forward::start(c, "kubectl", "web", "18082:8081");
    wait_listening(c, 18082);
    for _ in 0..3 {
        assert!(get(c, &format!("http://{LISTEN}:18082/")).is_none());
        std::thread::sleep(Duration::from_secs(1));
    }
    let (_, err) = fwd.finish();
    assert!(
        err.contains("error forwarding port 8081"),
        "kubectl's stderr: {err}"
    );

    // A pod that is not running: kubectl refuses before it dials.
    c.kubectl(&[
        "run",
        "never",
        "--image",
        "10.250.0.1:5000/kiln/no-such-image:1",
        "--restart=Never",
    ]);
    let o = run(&mut c.lab.in_lab(&[
        "kubectl",
        "--kubeconfig",
        &c.admin,
        "port-forward",
        "pod/never",
        "18083:80",
    ]));
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("unable to forward port because pod is not running"),
        "{err}"
    );
}

/// `kubectl debug --target` adds an ephemeral container in the target's PID namespace: its `ps`
/// lists netexec; it ran once, its status shows its exit, and it is not restarted.
fn debug(c: &Cluster) {
    c.kubectl(&[
        "debug",
        "web",
        "--image",
        BUSYBOX,
        "--target=web",
        "-c",
        "dbg",
        "--",
        "ps",
    ]);
    let state = c.wait("the ephemeral container to finish", 120, || {
        let s = jsonpath(
            c,
            "pod/web",
            "{.status.ephemeralContainerStatuses[?(@.name==\"dbg\")].state.terminated.reason}",
        );
        if s.is_empty() {
            Err(jsonpath(
                c,
                "pod/web",
                "{.status.ephemeralContainerStatuses}",
            ))
        } else {
            Ok(s)
        }
    });
    assert_eq!(state, "Completed");
    let log = c.kubectl(&["logs", "web", "-c", "dbg"]);
    assert!(
        log.contains("netexec"),
        "ps in the target's PID namespace: {log}"
    );
    // Never restarted, and the pod's own container is untouched.
    std::thread::sleep(Duration::from_secs(5));
    assert_eq!(
        jsonpath(
            c,
            "pod/web",
            "{.status.ephemeralContainerStatuses[?(@.name==\"dbg\")].restartCount}"
        ),
        "0"
    );
    assert_eq!(
        jsonpath(c, "pod/web", "{.status.containerStatuses[0].restartCount}"),
        "0"
    );
    assert_eq!(jsonpath(c, "pod/web", "{.status.phase}"), "Running");

    // Without a target it has a PID namespace of its own: its ps does not see netexec.
    c.kubectl(&[
        "debug", "web", "--image", BUSYBOX, "-c", "alone", "--", "ps",
    ]);
    c.wait("the untargeted ephemeral container to finish", 120, || {
        let s = jsonpath(
            c,
            "pod/web",
            "{.status.ephemeralContainerStatuses[?(@.name==\"alone\")].state.terminated.reason}",
        );
        if s.is_empty() {
            Err("not yet".to_string())
        } else {
            Ok(())
        }
    });
    let log = c.kubectl(&["logs", "web", "-c", "alone"]);
    assert!(!log.contains("netexec"), "{log}");

    // A name already taken is refused with upstream's field error.
    let o = run(&mut c.lab.in_lab(&[
        "kubectl",
        "--kubeconfig",
        &c.admin,
        "debug",
        "web",
        "--image",
        BUSYBOX,
        "-c",
        "web",
        "--",
        "true",
    ]));
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("spec.ephemeralContainers[2].name: Duplicate value: \"web\""),
        "{err}"
    );
}
