//! `kiln lab` end to end, as root, with real namespaces, sshd, containerd and the lab registry.
//! Each test uses its own lab name, so they run side by side.

use std::path::Path;

use kiln_tests::{ok, run, stdout, TestLab};

fn root_links() -> Vec<String> {
    let out = ok(std::process::Command::new("ip").args(["-o", "link", "show"]));
    let mut v: Vec<String> = out
        .lines()
        .filter_map(|l| l.split(':').nth(1).map(|s| s.trim().to_string()))
        .collect();
    v.sort();
    v
}

fn lab_mounts(dir: &Path) -> Vec<String> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter(|l| l.contains(&*dir.to_string_lossy()))
        .map(str::to_string)
        .collect()
}

fn lab_processes(dir: &Path) -> Vec<String> {
    let mut v = vec![];
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(c) = std::fs::read(e.path().join("cmdline")) {
            let c = String::from_utf8_lossy(&c).replace('\0', " ");
            if c.contains(&*dir.to_string_lossy()) {
                v.push(c);
            }
        }
    }
    v
}

fn lab_cgroups(name: &str) -> Vec<String> {
    let out = ok(std::process::Command::new("find").args([
        "/sys/fs/cgroup",
        "-maxdepth",
        "6",
        "-type",
        "d",
        "-path",
        &format!("*kiln-lab/{name}*"),
    ]));
    out.lines().map(str::to_string).collect()
}

#[test]
#[ignore = "needs root: builds lab hosts (CI runs it with --include-ignored)"]
fn lab_hosts_are_separate_machines_reachable_only_inside_the_lab() {
    let links_before = root_links();
    let lab = TestLab::up("t-hosts", 3, true);

    // Each host answers SSH (strict host-key checking against the keys the lab generated) with its own name.
    for n in 1..=3 {
        assert_eq!(
            lab.ssh_ok(&format!("host{n}"), "hostname"),
            format!("host{n}")
        );
        assert_eq!(
            lab.ssh_ok(&format!("10.250.0.1{n}"), "cat /etc/hostname"),
            format!("host{n}")
        );
    }
    // Every host has its own machine-id.
    let ids: std::collections::BTreeSet<String> = (1..=3)
        .map(|n| lab.ssh_ok(&format!("host{n}"), "cat /etc/machine-id"))
        .collect();
    assert_eq!(ids.len(), 3);

    // A file written on host1 exists only there: not on host2, not on the machine.
    for path in [
        "/etc/kiln-lab-test",
        "/var/lib/kiln/lab-test",
        "/usr/local/bin/lab-test",
    ] {
        lab.ssh_ok(
            "host1",
            &format!("echo written-on-host1 > {path} && cat {path}"),
        );
        let other = run(&mut lab.ssh("host2", &format!("test -e {path}")));
        assert!(!other.status.success(), "{path} leaked to host2");
        assert!(!Path::new(path).exists(), "{path} leaked to the machine");
    }

    // ps shows only the host's own processes: PID 1 is the lab init, and no process of the machine.
    let ps = lab.ssh_ok("host2", "ps -eo pid,comm");
    assert!(ps.lines().any(|l| l.trim().starts_with("1 ")), "{ps}");
    assert!(
        !ps.contains("cargo") && !ps.contains("docker-registry"),
        "{ps}"
    );
    assert!(
        ps.lines().count() < 12,
        "host sees too many processes:\n{ps}"
    );
    // Only lo and eth0 are visible on a host.
    let links = lab.ssh_ok("host3", "ls /sys/class/net | sort | tr '\\n' ' '");
    assert_eq!(links, "eth0 lo");

    // Hosts start like fresh VMs: containerd installed but not running. Start it and run a container
    // from the lab registry.
    let containerd = lab.ssh(
        "host2",
        "pgrep -x containerd && echo running || echo stopped",
    );
    assert_eq!(stdout(&run(&mut { containerd })), "stopped");
    lab.ssh_ok(
        "host2",
        "mkdir -p /etc/containerd && printf 'version = 2\\n[plugins.\"io.containerd.grpc.v1.cri\"]\\n  restrict_oom_score_adj = true\\n' > /etc/containerd/config.toml && \
         (setsid containerd --config /etc/containerd/config.toml >/var/log/containerd.log 2>&1 </dev/null &) && \
         for i in $(seq 100); do ctr version >/dev/null 2>&1 && break; sleep 0.1; done; ctr version >/dev/null",
    );
    lab.ssh_ok(
        "host2",
        "ctr -n kiln images pull --plain-http 10.250.0.1:5000/kiln/busybox:1 >/dev/null",
    );
    let hello = lab.ssh_ok(
        "host2",
        "ctr -n kiln run --rm 10.250.0.1:5000/kiln/busybox:1 t1 /bin/echo hello-from-a-container",
    );
    assert_eq!(hello, "hello-from-a-container");

    // Safety: nothing outside the lab is routable from the lab namespace or from a host.
    for dst in ["8.8.8.8", "192.0.2.2", "10.0.0.1", "172.17.0.1"] {
        let r = run(&mut lab.in_lab(&["ip", "route", "get", dst]));
        assert!(!r.status.success(), "lab namespace has a route to {dst}");
    }
    let routes = ok(&mut lab.in_lab(&["ip", "route", "show"]));
    assert_eq!(routes.lines().count(), 1, "{routes}");
    assert!(routes.starts_with("10.250.0.0/24 dev br0"), "{routes}");
    let fwd = ok(&mut lab.in_lab(&["sysctl", "-n", "net.ipv4.ip_forward"]));
    assert_eq!(fwd, "0");
    // ... and nothing of the lab exists in the machine's own network namespace.
    assert_eq!(root_links(), links_before);

    lab.down();
    assert!(
        !Path::new("/run/netns").join(lab.netns()).exists(),
        "netns left behind"
    );
    assert!(!lab.dir.exists(), "lab files left behind");
    assert_eq!(lab_mounts(&lab.dir), Vec::<String>::new());
    assert_eq!(lab_processes(&lab.dir), Vec::<String>::new());
    assert_eq!(lab_cgroups(&lab.name), Vec::<String>::new());
    assert_eq!(root_links(), links_before);
}

#[test]
#[ignore = "needs root: builds lab hosts (CI runs it with --include-ignored)"]
fn stop_keeps_the_disk_and_partition_cuts_both_ways() {
    let lab = TestLab::up("t-faults", 2, false);
    lab.ssh_ok(
        "host2",
        "echo kept > /var/lib/kiln/disk-marker && echo gone > /run/run-marker",
    );
    let key_before = std::fs::read_to_string(lab.dir.join("ssh/known_hosts")).unwrap();

    // Power loss: the host stops answering and every process on it is gone.
    ok(&mut lab.kiln(&["lab", "stop", "host2"]));
    let status = ok(&mut lab.kiln(&["lab", "status", "--name", &lab.name, "--output", "json"]));
    let v: serde_json::Value = serde_json::from_str(&status).unwrap();
    assert!(v[0]["hosts"][1]["pid"].is_null(), "{status}");
    assert!(!run(&mut lab.ssh("host2", "true")).status.success());
    assert_eq!(lab.ssh_ok("host1", "hostname"), "host1");

    // Boot again: same disk, fresh /run, same host key (strict checking still passes).
    ok(&mut lab.kiln(&["lab", "start", "host2"]));
    assert_eq!(lab.ssh_ok("host2", "cat /var/lib/kiln/disk-marker"), "kept");
    assert_eq!(
        lab.ssh_ok("host2", "test -e /run/run-marker && echo yes || echo no"),
        "no"
    );
    assert_eq!(
        std::fs::read_to_string(lab.dir.join("ssh/known_hosts")).unwrap(),
        key_before
    );

    // Partition: the host keeps running but no traffic passes, in either direction.
    ok(&mut lab.kiln(&["lab", "partition", "host2"]));
    assert!(!run(&mut lab.ssh("host2", "true")).status.success());
    let from_host2 = run(&mut lab.kiln(&[
        "lab",
        "exec",
        "host2",
        "--",
        "busybox",
        "ping",
        "-c1",
        "-W1",
        "10.250.0.11",
    ]));
    // busybox ping exits 1 on no reply (127 would mean it never ran, which must not count as blocked).
    assert_eq!(
        from_host2.status.code(),
        Some(1),
        "host2 reached host1 while partitioned: {from_host2:?}"
    );
    let to_host2 = run(&mut lab.kiln(&[
        "lab",
        "exec",
        "host1",
        "--",
        "busybox",
        "ping",
        "-c1",
        "-W1",
        "10.250.0.12",
    ]));
    assert_eq!(
        to_host2.status.code(),
        Some(1),
        "host1 reached host2 while partitioned: {to_host2:?}"
    );
    assert_eq!(
        ok(&mut lab.kiln(&[
            "lab",
            "exec",
            "host2",
            "--",
            "cat",
            "/var/lib/kiln/disk-marker"
        ])),
        "kept",
        "a partitioned host keeps running"
    );

    ok(&mut lab.kiln(&["lab", "heal", "host2"]));
    assert_eq!(lab.ssh_ok("host2", "hostname"), "host2");
    ok(&mut lab.kiln(&[
        "lab",
        "exec",
        "host2",
        "--",
        "busybox",
        "ping",
        "-c3",
        "-W2",
        "10.250.0.11",
    ]));
}

#[test]
#[ignore = "needs root: builds lab hosts (CI runs it with --include-ignored)"]
fn up_refuses_a_running_name_and_repairs_a_half_made_lab() {
    let lab = TestLab::up("t-repair", 2, false);
    let again = run(&mut lab.kiln(&["lab", "up", "--hosts", "2", "--no-registry"]));
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("already exists"));

    // Half-made: a host died and the lab was never marked complete. `up` brings back what is missing.
    ok(&mut lab.kiln(&["lab", "stop", "host1"]));
    let state = lab.dir.join("lab.json");
    let s = std::fs::read_to_string(&state)
        .unwrap()
        .replace("\"complete\": true", "\"complete\": false");
    std::fs::write(&state, s).unwrap();
    ok(&mut lab.kiln(&["lab", "up", "--hosts", "2", "--no-registry"]));
    assert_eq!(lab.ssh_ok("host1", "hostname"), "host1");
    assert_eq!(lab.ssh_ok("host2", "hostname"), "host2");

    // Bad input names the problem.
    let bad = run(&mut lab.kiln(&["lab", "exec", "host9", "--", "true"]));
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("no host \"host9\""),
        "{bad:?}"
    );
    // Not root: refused before anything is touched, saying why.
    let mut as_nobody = std::process::Command::new("setpriv");
    as_nobody
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(kiln_tests::bin("kiln"))
        .args(["lab", "up", "--name", "t-nobody"]);
    let nobody = run(&mut as_nobody);
    assert!(!nobody.status.success());
    assert!(
        String::from_utf8_lossy(&nobody.stderr).contains("needs root"),
        "{nobody:?}"
    );
    assert!(!std::path::Path::new("/tmp/kiln-lab/t-nobody").exists());

    let bad = run(&mut lab.kiln(&["lab", "up", "--name", "Bad_Name"]));
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("invalid"),
        "{bad:?}"
    );
}
