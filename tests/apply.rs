//! Issue #26: `kiln apply -f cluster.yaml` on one 3-host lab. The file first names host1 (controller)
//! and host2 (worker): apply brings the cluster up (no cluster yet: init). Then, one apply each, the
//! cluster converges to the file: host3 added (joins, Ready), controllerManager.nodeMonitorGracePeriod
//! changed (the controller-manager runs again with the new flag), host3 removed (drained, its Node
//! deleted, the host reset); a further apply has nothing to do. Last, the known bug: `kiln init` run
//! again with one rebuilt component binary restarts exactly that component on it (its manifest carries
//! the binary's sha256), not the others.

use std::path::Path;
use std::process::Command;

use kiln_tests::{bin, ok, run, stdout, Cluster, TestLab};

/// The lab's cluster.yaml with only `hosts` in `spec.hosts` and the controller-manager's grace period.
fn file_with(original: &str, hosts: &[&str], grace: &str) -> String {
    let (head, rest) = original.split_once("  hosts:\n").expect("a hosts list");
    let (list, tail) = rest.split_at(rest.find("\n  kubelet:").expect("kubelet after hosts") + 1);
    let mut out = format!("{head}  hosts:\n");
    for block in list.split("    - name: ").skip(1) {
        let name = block.lines().next().unwrap_or_default();
        if hosts.contains(&name) {
            out.push_str("    - name: ");
            out.push_str(block);
        }
    }
    out.push_str(tail);
    out.push_str(&format!(
        "  controllerManager:\n    nodeMonitorGracePeriod: {grace}\n"
    ));
    out
}

/// `kiln apply` (extra args first), its output; panics with the output when it fails.
fn apply(c: &Cluster, extra: &[&str]) -> String {
    let mut v = vec![c.kiln.as_str(), "apply"];
    v.extend_from_slice(extra);
    v.extend_from_slice(&["-f", &c.file, "--wait-timeout", "150"]);
    let o = run(&mut c.lab.in_lab(&v));
    let out = stdout(&o);
    eprintln!("{out}");
    assert!(
        o.status.success(),
        "kiln apply {extra:?} failed:\n{out}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

/// `<pid> <exe>` of the process running `binary` on `host` (None while there is none).
fn process(c: &Cluster, host: &str, binary: &str) -> Option<(String, String)> {
    let o = run(&mut c.lab.ssh(
        host,
        // By path: the kernel's process name stops at 15 characters (kiln-controller).
        &format!(
            "p=$(pgrep -f '^/usr/local/bin/{binary} ' | head -1) && echo \"$p $(readlink /proc/$p/exe)\""
        ),
    ));
    let line = stdout(&o);
    let (pid, exe) = line.trim().split_once(' ')?;
    Some((pid.to_string(), exe.to_string()))
}

fn sha256(c: &Cluster, host: &str, path: &str) -> String {
    c.lab
        .ssh_ok(host, &format!("sha256sum {path}"))
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string()
}

/// A copy of the component binaries in `dir`, kiln-scheduler's build stamp rewritten in place (same
/// length, so it still runs and reports the other build): a different file, as a rebuild makes.
fn rebuilt_scheduler(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    let from_dir = bin("kiln-kubelet").parent().unwrap().to_path_buf();
    for b in [
        "kiln-store",
        "kiln-apiserver",
        "kiln-controller-manager",
        "kiln-kubelet",
        "kiln-proxy",
        "kiln-dns",
    ] {
        let to = dir.join(b);
        let _ = std::fs::remove_file(&to);
        std::fs::copy(from_dir.join(b), &to).unwrap();
    }
    let v = ok(Command::new(bin("kiln-scheduler")).arg("--version"));
    let build = v
        .split("(build ")
        .nth(1)
        .and_then(|r| r.split(',').next())
        .expect("a stamped --version")
        .to_string();
    assert!(build.len() >= 4, "{build}");
    let new = format!("apl{}", &build[3..]);
    let mut data = std::fs::read(bin("kiln-scheduler")).unwrap();
    let mut i = 0;
    while let Some(at) = data[i..]
        .windows(build.len())
        .position(|w| w == build.as_bytes())
    {
        data[i + at..i + at + build.len()].copy_from_slice(new.as_bytes());
        i += at + build.len();
    }
    let out = dir.join("kiln-scheduler");
    std::fs::write(&out, &data).unwrap();
    ok(Command::new("chmod").args(["755", out.to_str().unwrap()]));
}

#[test]
#[ignore = "needs root: a lab host (CI runs it with --include-ignored)"]
fn apply_adds_changes_and_removes_then_has_nothing_to_do() {
    let name = std::env::var("KILN_TEST_LAB").unwrap_or_else(|_| "t-apply".into());
    let lab = TestLab::up(&name, 3, true);
    let c = Cluster::on(lab, "");
    let original = std::fs::read_to_string(&c.file).unwrap();
    let write = |hosts: &[&str], grace: &str| {
        std::fs::write(&c.file, file_with(&original, hosts, grace)).unwrap()
    };

    // No cluster yet: apply is init.
    write(&["host1", "host2"], "40s");
    apply(&c, &[]);
    let nodes = c.kubectl(&["get", "nodes", "-o", "name"]);
    assert_eq!(nodes.lines().count(), 2, "{nodes}");

    // host3 added to the file: it joins.
    write(&["host1", "host2", "host3"], "40s");
    let out = apply(&c, &[]);
    assert!(out.contains("join worker(s) host3"), "{out}");
    c.wait("host3 Ready", 120, || {
        let s = c
            .try_kubectl(&[
                "get",
                "node",
                "host3",
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
            ])
            .unwrap_or_default();
        (s == "True").then_some(()).ok_or(s)
    });

    // A controller-manager timing: the dry run shows the manifest's diff and changes nothing; the
    // apply restarts the controller-manager with the new flag.
    write(&["host1", "host2", "host3"], "20s");
    let (before, _) =
        process(&c, "host1", "kiln-controller-manager").expect("a controller-manager");
    let dry = apply(&c, &["--dry-run"]);
    assert!(dry.contains("1. roll out to host1 (controller)"), "{dry}");
    assert!(
        dry.contains("+        - --node-monitor-grace-period=20s"),
        "{dry}"
    );
    assert!(
        !dry.contains("host2 (worker)"),
        "only the controller's files differ: {dry}"
    );
    let args = c.lab.ssh_ok(
        "host1",
        "tr '\\0' ' ' < /proc/$(pgrep -f '^/usr/local/bin/kiln-controller-manager ' | head -1)/cmdline",
    );
    assert!(
        args.contains("--node-monitor-grace-period=40s"),
        "dry run changed it: {args}"
    );
    let out = apply(&c, &[]);
    assert!(out.contains("gate leaders"), "{out}");
    let args = c.lab.ssh_ok(
        "host1",
        "tr '\\0' ' ' < /proc/$(pgrep -f '^/usr/local/bin/kiln-controller-manager ' | head -1)/cmdline",
    );
    assert!(args.contains("--node-monitor-grace-period=20s"), "{args}");
    let (after, _) = process(&c, "host1", "kiln-controller-manager").unwrap();
    assert_ne!(before, after, "the controller-manager must have restarted");

    // host3 removed from the file: drained, its Node deleted, the host reset.
    write(&["host1", "host2"], "20s");
    let out = apply(&c, &[]);
    assert!(out.contains("remove host3 (worker)"), "{out}");
    assert!(
        c.try_kubectl(&["get", "node", "host3"]).is_none(),
        "the Node host3 is still there"
    );
    let left = c.lab.ssh_ok(
        "host3",
        "ls /etc/kiln/manifests /usr/local/bin/kiln-kubelet 2>/dev/null; pgrep -l kiln- || true",
    );
    assert!(left.trim().is_empty(), "host3 not reset: {left}");

    // Converged: nothing to do.
    let out = apply(&c, &[]);
    assert!(
        out.contains("nothing to do: the cluster matches the file"),
        "{out}"
    );

    // A re-run of init with a rebuilt kiln-scheduler restarts the scheduler on it, and only it.
    let dir_b = c.lab.dir.join("build-apply");
    rebuilt_scheduler(&dir_b);
    let (sched_before, _) = process(&c, "host1", "kiln-scheduler").expect("a scheduler");
    let (api_before, _) = process(&c, "host1", "kiln-apiserver").expect("an API server");
    c.kiln(&[
        "init",
        "--wait-timeout",
        "150",
        "--bin-dir",
        dir_b.to_str().unwrap(),
    ]);
    let want = sha256(&c, "host1", "/usr/local/bin/kiln-scheduler");
    c.wait("the scheduler on the new binary", 60, || {
        match process(&c, "host1", "kiln-scheduler") {
            Some((pid, exe)) if pid != sched_before && !exe.ends_with("(deleted)") => {
                let running = sha256(&c, "host1", &format!("/proc/{pid}/exe"));
                (running == want)
                    .then_some(())
                    .ok_or(format!("pid {pid} runs {running}, not {want}"))
            }
            other => Err(format!("{other:?}")),
        }
    });
    let (api_after, _) = process(&c, "host1", "kiln-apiserver").unwrap();
    assert_eq!(api_before, api_after, "the API server must not restart");
    c.lab.down();
}
