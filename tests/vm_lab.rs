//! The VM lab (`kiln lab up --vm`): hosts that are qemu VMs with their own Debian 12 kernel and systemd,
//! and the fresh-host realism only a VM can show. Booted once (one controller, one worker: software
//! emulation is slow) and shared by every check: preflight finds swap on and br_netfilter not loaded,
//! `--fix` fixes both for good, `kiln init` takes its systemd path to Ready nodes, and a rebooted worker
//! comes back Ready by itself through systemd.

use std::time::Instant;

use kiln_tests::{run, Cluster, TestLab};

#[test]
#[ignore = "needs root: boots qemu VMs in a lab network namespace"]
fn vm_hosts_are_fresh_debian_machines_that_kiln_makes_a_cluster_of() {
    // Not in CI yet: under software emulation the image build (~8 min, once) and two VMs' boot and
    // init (15-25 min) do not fit CI's budget beside the rest. Run it with KILN_VM_LAB=1.
    if std::env::var_os("KILN_VM_LAB").is_none() {
        eprintln!("vm lab test not run: set KILN_VM_LAB=1 (needs qemu-system-x86 and debootstrap)");
        return;
    }
    let started = Instant::now();
    let lab = TestLab::up_vm("t-vm", 2, false);
    eprintln!("lab up: {:.0}s", started.elapsed().as_secs_f64());
    let status = kiln_tests::ok(&mut lab.kiln(&["lab", "status"]));
    assert!(status.contains("qemu VMs"), "{status}");

    // Each host is its own machine: its own kernel (Debian's, not this machine's), systemd as PID 1, its
    // own machine-id and hostname from the seed, the lab's address.
    let facts = |h: &str| {
        lab.ssh_ok(
            h,
            "uname -r; cat /proc/1/comm; hostname; cat /etc/machine-id; ip -4 -o addr show eth0 | awk '{print $4}'",
        )
    };
    let (f1, f2) = (facts("host1"), facts("host2"));
    let machine_kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    for (f, host, ip) in [
        (&f1, "host1", "10.250.0.11/24"),
        (&f2, "host2", "10.250.0.12/24"),
    ] {
        let l: Vec<&str> = f.lines().collect();
        assert!(
            l[0].ends_with("-amd64") && l[0] != machine_kernel.trim(),
            "{f}"
        );
        assert_eq!(&l[1..3], ["systemd", host], "{f}");
        assert_eq!(l[4], ip, "{f}");
    }
    assert_ne!(
        f1.lines().nth(3),
        f2.lines().nth(3),
        "machine-ids must differ"
    );
    // The image holds a prepared host and nothing of kiln.
    lab.ssh_ok(
        "host2",
        "systemctl is-active ssh containerd && command -v runc nft && test -x /usr/lib/cni/bridge && \
         ! ls /usr/local/bin/kiln* /etc/kiln 2>/dev/null",
    );

    let c = Cluster::on(lab, "");
    let preflight = |extra: &[&str]| {
        let mut argv = vec![c.kiln.as_str(), "preflight", "-f", &c.file];
        argv.extend_from_slice(extra);
        let o = run(&mut c.lab.in_lab(&argv));
        (
            o.status.success(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    // A fresh Debian VM: swap on (its swap disk in /etc/fstab), br_netfilter not loaded. Preflight says so.
    assert!(!c
        .lab
        .ssh_ok("host2", "swapon --noheadings --show=NAME")
        .is_empty());
    let (ok, out, err) = preflight(&[]);
    assert!(!ok, "{out}");
    // One report per host, each naming both.
    let swap_on: Vec<&str> = out
        .lines()
        .filter(|l| l.split_whitespace().next() == Some("Swap"))
        .collect();
    assert_eq!(swap_on.len(), 2, "{out}");
    assert!(
        swap_on
            .iter()
            .all(|l| l.contains("ERROR") && l.contains("swap is on (1 device(s)")),
        "{out}"
    );
    assert_eq!(
        out.matches("br_netfilter is not loaded").count(),
        2,
        "{out}"
    );
    assert!(err.contains("[ERROR Swap]"), "{err}");

    // --fix turns swap off and loads br_netfilter, persisted for the next boot.
    let (ok, out, err) = preflight(&["--fix"]);
    assert!(ok, "{out}\n{err}");
    assert!(out.contains("fix Swap: turned off swap"), "{out}");
    assert!(
        out.contains("commented out 1 swap line(s) in /etc/fstab"),
        "{out}"
    );
    for h in ["host1", "host2"] {
        assert_eq!(
            c.lab.ssh_ok(
                h,
                "swapon --noheadings --show=NAME | wc -l; cat /proc/sys/net/bridge/bridge-nf-call-iptables; \
                 grep -c br_netfilter /etc/modules-load.d/kiln.conf"
            ),
            "0\n1\n1"
        );
    }

    // init takes the systemd path: the kubelet is a unit, and both nodes become Ready.
    let t = Instant::now();
    c.kiln(&["init", "--wait-timeout", "900"]);
    eprintln!("kiln init 1+1: {:.0}s", t.elapsed().as_secs_f64());
    let ready = |node: &str| {
        c.try_kubectl(&[
            "get",
            "node",
            node,
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
        ])
        .is_some_and(|s| s == "True")
    };
    c.wait("both nodes Ready", 600, || {
        (ready("host1") && ready("host2"))
            .then_some(())
            .ok_or("not yet".to_string())
    });
    assert_eq!(
        c.lab.ssh_ok("host2", "systemctl is-active kiln-kubelet"),
        "active"
    );
    assert_eq!(
        c.lab.ssh_ok("host2", "systemctl is-enabled kiln-kubelet"),
        "enabled"
    );

    // A reboot of the worker: the VM's kernel restarts, systemd brings sshd, containerd and the kubelet
    // back without kiln, swap stays off, br_netfilter is loaded again, and the node is Ready again.
    let boot_id = c.lab.ssh_ok("host2", "cat /proc/sys/kernel/random/boot_id");
    let _ = run(&mut c.lab.ssh("host2", "systemctl reboot"));
    let t = Instant::now();
    c.wait("host2 to boot again", 600, || {
        let o = run(&mut c.lab.ssh("host2", "cat /proc/sys/kernel/random/boot_id"));
        let id = String::from_utf8_lossy(&o.stdout).trim().to_string();
        (o.status.success() && !id.is_empty() && id != boot_id)
            .then_some(())
            .ok_or(format!("boot id {id:?}"))
    });
    eprintln!("worker reboot to SSH: {:.0}s", t.elapsed().as_secs_f64());
    assert_eq!(
        c.lab.ssh_ok(
            "host2",
            "swapon --noheadings --show=NAME | wc -l; cat /proc/sys/net/bridge/bridge-nf-call-iptables"
        ),
        "0\n1"
    );
    // Ready again: wait for the node's kubelet to post a fresh heartbeat after the boot.
    c.wait("host2 Ready after its reboot", 600, || {
        let active = run(&mut c.lab.ssh("host2", "systemctl is-active kiln-kubelet"));
        (stdout_is(&active, "active") && ready("host2"))
            .then_some(())
            .ok_or("not yet".to_string())
    });
    eprintln!("worker reboot to Ready: {:.0}s", t.elapsed().as_secs_f64());
    eprintln!("whole test: {:.0}s", started.elapsed().as_secs_f64());
    c.lab.down();
}

fn stdout_is(o: &std::process::Output, want: &str) -> bool {
    o.status.success() && String::from_utf8_lossy(&o.stdout).trim() == want
}

/// Without qemu the VM lab says which Debian package to install, before it makes anything.
#[test]
#[ignore = "needs root: `kiln lab` checks for root first (CI runs it with --include-ignored)"]
fn vm_lab_without_qemu_names_the_package() {
    kiln_tests::require_root();
    let o = run(std::process::Command::new(kiln_tests::bin("kiln"))
        .args(["lab", "up", "--vm", "--name", "t-vmnoq", "--hosts", "1"])
        .env("PATH", "/nonexistent"));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        err.contains("qemu-system-x86_64")
            && err.contains("apt-get install -y")
            && err.contains("qemu-system-x86"),
        "{err}"
    );
    assert!(!std::path::Path::new("/tmp/kiln-lab/t-vmnoq").exists());
}
