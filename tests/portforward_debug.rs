//! Issue #25 on one 2-host lab with real kubectl: `kubectl port-forward` to an agnhost netexec pod
//! (kubectl 1.32's SPDY-over-WebSocket tunnel and kubectl 1.29's plain SPDY), the runtime's error for
//! a port nothing listens on, and `kubectl debug` adding an ephemeral container that targets the
//! pod's container: it runs once, sees the target's processes (`ps`), reports its status and is
//! never restarted.

use std::io::Read;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kiln_tests::{run, stdout, Cluster, TestLab};

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
    debug(&c);
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
            if start.elapsed() > Duration::from_secs(30) {
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

    // Nothing listens on 8081: the connection fails and kubectl shows containerd's error.
    let fwd = Forward::start(c, "kubectl", "web", "18082:8081");
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(5) {
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
