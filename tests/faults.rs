//! Faults during a bootstrap, on a real lab host: sshd killed in the middle of pushing binaries makes
//! `kiln init` fail naming the host, leaves no half-written file behind, and a re-run once sshd is back
//! converges to a Ready node; a full disk stops the push with the host and the cause and leaves no
//! partial file. And `--dry-run` on a fresh host shows the plan and changes nothing.

use std::process::Stdio;
use std::time::{Duration, Instant};

use kiln_tests::{bin, ok, run, TestLab};

#[test]
#[ignore = "needs root: builds lab hosts (CI runs it with --include-ignored)"]
fn dry_run_changes_nothing_and_init_survives_sshd_killed_mid_push() {
    let lab = TestLab::up("t-fault", 1, false);
    let cluster = lab.dir.join("cluster.yaml");
    let cluster = cluster.to_string_lossy();
    let kiln = bin("kiln");
    let kiln = kiln.to_string_lossy();
    let untouched = || {
        lab.ssh_ok(
            "host1",
            "find /etc/kiln /var/lib/kiln /usr/local/bin -mindepth 1 2>/dev/null; true",
        )
    };

    let plan = ok(&mut lab.in_lab(&[&kiln, "init", "-f", &cluster, "--dry-run"]));
    assert!(plan.contains("push") && plan.contains("host1"), "{plan}");
    // What would change, per host: new files with their modes, commands that would run.
    assert!(plan.contains("changes (nothing was changed):"), "{plan}");
    assert!(
        plan.contains("install /etc/kiln/manifests/kiln-apiserver.yaml (new, mode 600)"),
        "{plan}"
    );
    assert!(
        plan.contains("install /usr/local/bin/kiln-kubelet"),
        "{plan}"
    );
    assert!(plan.contains("run: "), "{plan}");
    assert_eq!(untouched(), "", "--dry-run changed the host");
    assert!(
        !lab.dir.join("t-fault.kiln").exists(),
        "--dry-run made a state directory"
    );

    // A full disk: /usr/local/bin on a 1 MiB tmpfs. init stops at push naming the host and the cause,
    // and leaves no partial binary behind.
    ok(&mut lab.kiln(&[
        "lab",
        "exec",
        "host1",
        "--",
        "mount",
        "-t",
        "tmpfs",
        "-o",
        "size=1m",
        "tmpfs",
        "/usr/local/bin",
    ]));
    let full = run(&mut lab.in_lab(&[&kiln, "init", "-f", &cluster, "--wait-timeout", "60"]));
    let err = String::from_utf8_lossy(&full.stderr);
    assert!(!full.status.success(), "init succeeded on a full disk");
    assert!(
        err.contains("host1") && err.contains("No space left on device"),
        "{err}"
    );
    assert_eq!(
        lab.ssh_ok("host1", "ls -A /usr/local/bin"),
        "",
        "a partial upload was left on the full disk"
    );
    ok(&mut lab.kiln(&["lab", "exec", "host1", "--", "umount", "/usr/local/bin"]));

    // Kill every sshd of the host as soon as the first upload lands in /usr/local/bin.
    let mut init = lab.in_lab(&[&kiln, "init", "-f", &cluster, "--wait-timeout", "120"]);
    let child = init
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let listing =
            run(&mut lab.kiln(&["lab", "exec", "host1", "--", "ls", "-A", "/usr/local/bin"]));
        if !String::from_utf8_lossy(&listing.stdout).trim().is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "init never started pushing");
        std::thread::sleep(Duration::from_millis(20));
    }
    ok(&mut lab.kiln(&["lab", "exec", "host1", "--", "pkill", "-x", "sshd"]));
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "init went on without sshd");
    assert!(err.contains("host1"), "the error names the host: {err}");

    // sshd back (the lab's host boot converges a running host); no upload temp file is left over.
    ok(&mut lab.kiln(&["lab", "start", "host1"]));
    let temps = lab.ssh_ok(
        "host1",
        "find /usr/local/bin /etc -maxdepth 2 -name '.*.kiln-??????'; true",
    );
    assert_eq!(temps, "", "half-written uploads left behind");

    let out = ok(&mut lab.in_lab(&[&kiln, "init", "-f", &cluster, "--wait-timeout", "120"]));
    assert!(out.contains("wait-node-ready"), "{out}");
    let admin = lab.dir.join("t-fault.kiln/admin.conf");
    let ready = ok(&mut lab.in_lab(&[
        "kubectl",
        "--kubeconfig",
        &admin.to_string_lossy(),
        "get",
        "node",
        "host1",
        "-o",
        "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
    ]));
    assert_eq!(ready, "True");
    // Every pushed binary is whole: the host's copy hashes like the local one.
    for b in ["kiln-kubelet", "kiln-store", "kiln-apiserver"] {
        let local = ok(std::process::Command::new("sha256sum").arg(bin(b)));
        let remote = lab.ssh_ok("host1", &format!("sha256sum /usr/local/bin/{b}"));
        assert_eq!(
            local.split_whitespace().next(),
            remote.split_whitespace().next(),
            "{b}"
        );
    }
}
