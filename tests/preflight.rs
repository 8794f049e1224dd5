//! `kiln preflight` on real lab hosts: bad kernel settings and a taken port are reported by check name,
//! `--fix` says what it changed and changes nothing the second time, and then preflight passes.
//! Only per-network-namespace sysctls of a lab host are changed (never the machine's).

use kiln_tests::{bin, run, stdout, TestLab};

const BRIDGE: &str = "FileContent--proc-sys-net-bridge-bridge-nf-call-iptables";

#[test]
#[ignore = "needs root: builds lab hosts (CI runs it with --include-ignored)"]
fn preflight_names_problems_and_fix_remedies_them_once() {
    let lab = TestLab::up("t-pre", 2, false);
    let cluster = lab.dir.join("cluster.yaml");
    let cluster = cluster.to_string_lossy();
    let kiln = bin("kiln");
    let kiln = kiln.to_string_lossy();
    let preflight = |extra: &[&str]| {
        let mut argv = vec![&*kiln, "preflight", "-f", &cluster];
        argv.extend_from_slice(extra);
        let o = run(&mut lab.in_lab(&argv));
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        (o.status.success(), stdout(&o), err)
    };

    // Both settings live in host1's own network namespace.
    lab.ssh_ok(
        "host1",
        "sysctl -qw net.ipv4.ip_forward=0 net.bridge.bridge-nf-call-iptables=0",
    );
    lab.ssh_ok("host1", "busybox httpd -p 6443 -h /tmp");
    // Swap that would come back at boot: a line in host2's own /etc/fstab (an overlay of the lab host).
    // /proc/swaps is the machine's, so --fix would run `swapoff -a` on the machine if it had swap on:
    // never let it.
    let swaps = std::fs::read_to_string("/proc/swaps").unwrap();
    assert_eq!(
        swaps.lines().count(),
        1,
        "this machine has swap on; --fix must not turn it off:\n{swaps}"
    );
    lab.ssh_ok(
        "host2",
        "echo '/kiln-test.swap none swap sw 0 0' >> /etc/fstab",
    );

    let (ok, out, err) = preflight(&[]);
    assert!(!ok, "{out}");
    assert!(
        err.contains("preflight on host1") && err.contains("[ERROR Port-6443]"),
        "{err}"
    );
    let line = |text: &str, check: &str| {
        text.lines()
            .find(|l| l.split_whitespace().next() == Some(check))
            .map(str::to_string)
    };
    assert!(
        line(&out, "Port-6443").is_some_and(|l| l.contains("ERROR")),
        "{out}"
    );
    assert!(
        line(&out, BRIDGE).is_some_and(|l| l.contains("WARNING") && l.contains("is 0")),
        "{out}"
    );
    assert!(
        line(&out, "Swap").is_some_and(|l| l.contains("WARNING") && l.contains("/etc/fstab")),
        "{out}"
    );
    // The cross-host checks ran once, after the hosts.
    assert_eq!(out.matches("preflight-cluster").count(), 1, "{out}");

    // --fix: the sysctls are set and persisted; the taken port is not kiln's to fix.
    let (ok, out, err) = preflight(&["--fix", "--ignore-preflight-errors=Port-6443"]);
    assert!(ok, "{out}\n{err}");
    assert!(
        out.contains(&format!(
            "[   host1] fix {BRIDGE}: set net.bridge.bridge-nf-call-iptables=1"
        )),
        "{out}"
    );
    assert!(out.contains("wrote /etc/sysctl.d/99-kiln.conf"), "{out}");
    assert_eq!(
        lab.ssh_ok(
            "host1",
            "sysctl -n net.ipv4.ip_forward net.bridge.bridge-nf-call-iptables; grep -c '= 1' /etc/sysctl.d/99-kiln.conf"
        ),
        "1\n1\n2"
    );
    assert!(line(&out, BRIDGE).is_none(), "{out}");
    assert!(
        out.contains("[   host2] fix Swap: commented out 1 swap line(s) in /etc/fstab"),
        "{out}"
    );
    assert_eq!(
        lab.ssh_ok(
            "host2",
            "grep -c '^# kiln preflight --fix: /kiln-test.swap' /etc/fstab; grep -c '^/kiln-test.swap' /etc/fstab.kiln-bak"
        ),
        "1\n1"
    );

    // A second --fix changes nothing and says so.
    let (ok, out, _) = preflight(&["--fix", "--ignore-preflight-errors=Port-6443"]);
    assert!(ok, "{out}");
    assert_eq!(out.matches("fix: nothing to change").count(), 2, "{out}");

    // A cloned VM: host2 with host1's machine-id fails the cross-host checks, once, naming both.
    let id1 = lab.ssh_ok("host1", "cat /etc/machine-id");
    lab.ssh_ok(
        "host2",
        &format!("cp /etc/machine-id /etc/machine-id.kiln-test; echo {id1} > /etc/machine-id"),
    );
    let (ok, out, err) = preflight(&["--ignore-preflight-errors=Port-6443"]);
    assert!(!ok, "{out}");
    assert!(
        line(&out, "UniqueMachineID")
            .is_some_and(|l| l.contains("ERROR") && l.contains("host1, host2")),
        "{out}"
    );
    assert!(err.contains("[ERROR UniqueMachineID]"), "{err}");
    lab.ssh_ok("host2", "mv /etc/machine-id.kiln-test /etc/machine-id");

    // The port freed, preflight passes with no error.
    lab.ssh_ok("host1", "pkill -f 'httpd -p 6443'");
    let (ok, out, err) = preflight(&[]);
    assert!(ok, "{out}\n{err}");
    assert_eq!(out.matches("preflight            done").count(), 2, "{out}");
    assert!(!out.contains("ERROR"), "{out}");
    lab.down();
}
