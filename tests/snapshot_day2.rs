//! Day-2 snapshots on a real 1-host lab cluster: encrypted bundles through a real save and restore, the
//! scheduled job on the controller (rotation, log, status, removal), and DR drills on a scratch lab.

use std::time::{Duration, Instant};

use kiln_tests::{bin, ok, run, stdout, TestLab};

/// Offset of the first data byte of the tar's second member (snapshot.db) in a plain bundle:
/// bundle.json's header and data (padded to 512), then snapshot.db's header.
fn snapshot_offset(tar: &[u8]) -> usize {
    let size = std::str::from_utf8(&tar[124..136])
        .unwrap()
        .trim_matches(|c: char| c == '\0' || c == ' ');
    let size = usize::from_str_radix(size, 8).unwrap();
    assert_eq!(&tar[512 + size.div_ceil(512) * 512..][..11], b"snapshot.db");
    512 + size.div_ceil(512) * 512 + 512
}

#[test]
#[ignore = "needs root: builds lab hosts (CI runs it with --include-ignored)"]
fn encrypted_bundles_schedules_and_drills() {
    let lab = TestLab::up("t-day2", 1, false);
    let cluster = lab.dir.join("cluster.yaml");
    let cluster = cluster.to_string_lossy().to_string();
    let kiln = bin("kiln");
    let kiln = kiln.to_string_lossy().to_string();
    let admin = lab.dir.join("t-day2.kiln/admin.conf");
    let admin = admin.to_string_lossy().to_string();
    let kubectl = |args: &[&str]| {
        let mut v = vec!["kubectl", "--kubeconfig", &admin, "--request-timeout=10s"];
        v.extend_from_slice(args);
        ok(&mut lab.in_lab(&v))
    };
    let k = |args: &[&str]| {
        let mut v = vec![kiln.as_str()];
        v.extend_from_slice(args);
        lab.in_lab(&v)
    };
    ok(&mut k(&["init", "-f", &cluster, "--wait-timeout", "120"]));
    kubectl(&["create", "namespace", "vault"]);
    kubectl(&[
        "-n",
        "vault",
        "create",
        "configmap",
        "cm",
        "--from-literal=a=1",
    ]);
    kubectl(&[
        "-n",
        "vault",
        "create",
        "secret",
        "generic",
        "s",
        "--from-literal=p=q",
    ]);
    let uid = kubectl(&[
        "-n",
        "vault",
        "get",
        "cm",
        "cm",
        "-o",
        "jsonpath={.metadata.uid}",
    ]);

    // 1. Encryption through a real save and restore.
    let backups = lab.dir.join("backups");
    std::fs::create_dir_all(&backups).unwrap();
    let backups = backups.to_string_lossy().to_string();
    let key = lab.dir.join("bundle.pass");
    std::fs::write(&key, "a long enough passphrase\n").unwrap();
    let key = key.to_string_lossy().to_string();
    let wrong = lab.dir.join("wrong.pass");
    std::fs::write(&wrong, "another long passphrase\n").unwrap();
    let wrong = wrong.to_string_lossy().to_string();
    let saved = ok(&mut k(&[
        "snapshot",
        "save",
        "-f",
        &cluster,
        "-o",
        &backups,
        "--encrypt-key-file",
        &key,
    ]));
    assert!(saved.contains("encrypted"), "{saved}");
    let sealed = saved
        .strip_prefix("saved ")
        .and_then(|s| s.split(' ').next())
        .unwrap()
        .to_string();
    assert_eq!(&std::fs::read(&sealed).unwrap()[..8], b"KILNENC1");
    let listed = ok(&mut k(&[
        "snapshot", "list", "-f", &cluster, "--dir", &backups,
    ]));
    assert!(listed.contains("yes (key?)"), "{listed}");
    kubectl(&["-n", "vault", "delete", "cm", "cm"]);
    let no_key = run(&mut k(&["snapshot", "restore", "-f", &cluster, &sealed]));
    assert!(!no_key.status.success());
    let err = String::from_utf8_lossy(&no_key.stderr);
    assert!(
        err.contains(&format!(
            "bundle {sealed}: the bundle is encrypted: pass --encrypt-key-file"
        )),
        "{err}"
    );
    let bad_key = run(&mut k(&[
        "snapshot",
        "restore",
        "-f",
        &cluster,
        &sealed,
        "--encrypt-key-file",
        &wrong,
    ]));
    assert!(!bad_key.status.success());
    let err = String::from_utf8_lossy(&bad_key.stderr);
    assert!(
        err.contains(&format!(
            "bundle {sealed}: wrong key or corrupted (authentication failed)"
        )),
        "{err}"
    );
    // Refused before anything was touched: the control plane still answers.
    kubectl(&["get", "ns", "vault"]);
    let restored = ok(&mut k(&[
        "snapshot",
        "restore",
        "-f",
        &cluster,
        &sealed,
        "--encrypt-key-file",
        &key,
    ]));
    assert!(restored.contains("verified"), "{restored}");
    assert_eq!(
        kubectl(&[
            "-n",
            "vault",
            "get",
            "cm",
            "cm",
            "-o",
            "jsonpath={.metadata.uid}:{.data.a}"
        ]),
        format!("{uid}:1")
    );

    // 2. The scheduled job on the controller: every 20s, keep 2.
    ok(&mut k(&[
        "snapshot", "schedule", "-f", &cluster, "--every", "20s", "--keep", "2",
    ]));
    let ok_runs = || {
        stdout(&run(&mut lab.ssh(
            "host1",
            "grep -c ' ok /var/backups/kiln/' /var/log/kiln/snapshots.log 2>/dev/null || true",
        )))
        .parse::<u32>()
        .unwrap_or(0)
    };
    let deadline = Instant::now() + Duration::from_secs(180);
    while ok_runs() < 3 {
        assert!(
            Instant::now() < deadline,
            "fewer than 3 scheduled runs; log:\n{}\nerrors:\n{}",
            stdout(&run(
                &mut lab.ssh("host1", "cat /var/log/kiln/snapshots.log")
            )),
            stdout(&run(
                &mut lab.ssh("host1", "cat /var/log/kiln/snapshot-schedule.err")
            ))
        );
        std::thread::sleep(Duration::from_secs(3));
    }
    let status = ok(&mut k(&[
        "snapshot", "schedule", "-f", &cluster, "--status",
    ]));
    let row = status
        .lines()
        .find(|l| l.starts_with("host1"))
        .unwrap_or_default();
    assert!(
        row.contains(" yes ") && row.contains(" loop ") && row.contains("20s"),
        "{status}"
    );
    assert!(row.contains(" ok /var/backups/kiln/"), "{status}");
    let loop_cmd = lab.ssh_ok(
        "host1",
        "tr '\\0' ' ' < /proc/$(cat /run/kiln/snapshot-schedule.pid)/cmdline",
    );
    assert_eq!(loop_cmd, "/bin/sh /etc/kiln/snapshot-schedule.sh");
    ok(&mut k(&[
        "snapshot", "schedule", "-f", &cluster, "--remove",
    ]));
    // The loop finished its last run before stopping: exactly `keep` bundles remain.
    let bundles = lab.ssh_ok("host1", "ls /var/backups/kiln");
    assert_eq!(
        bundles
            .lines()
            .filter(|l| l.ends_with(".kiln-bundle.tar"))
            .count(),
        2,
        "{bundles}"
    );
    assert!(ok_runs() >= 3);
    let left = lab.ssh_ok(
        "host1",
        "ls /etc/kiln/snapshot-schedule.sh /etc/kiln/snapshot-schedule.conf /var/lib/kiln/bin/kiln \
         /run/kiln/snapshot-schedule.pid 2>/dev/null; \
         for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done \
         | grep -x '/bin/sh /etc/kiln/snapshot-schedule.sh '; true",
    );
    assert_eq!(left, "", "left behind by --remove");
    let status = ok(&mut k(&[
        "snapshot", "schedule", "-f", &cluster, "--status",
    ]));
    assert!(
        status
            .lines()
            .any(|l| l.starts_with("host1") && l.contains(" no ")),
        "{status}"
    );

    // 3. Drills on a scratch lab, from the machine's own network namespace (the bundle is all they need).
    let drilled = run(std::process::Command::new(&kiln).args([
        "drill",
        "-f",
        &cluster,
        "--bundle",
        &sealed,
        "--encrypt-key-file",
        &key,
    ]));
    let report = stdout(&drilled);
    assert!(
        drilled.status.success(),
        "{report}\n{}",
        String::from_utf8_lossy(&drilled.stderr)
    );
    assert!(
        report.contains("PASSED") && report.contains("RPO: ") && report.contains("RTO: "),
        "{report}"
    );
    // Restored onto a new address (the lab's first host stays idle), with the objects checked.
    assert!(
        report.contains("(host1 at 10.250.0.12), torn down"),
        "{report}"
    );
    // Every object the bundle's snapshot holds (namespaces, the configmaps made above, …) was found.
    let verified = report
        .lines()
        .find_map(|l| l.trim().strip_prefix("objects verified: "))
        .and_then(|v| v.split_once('/'))
        .map(|(a, b)| (a.parse::<usize>().unwrap(), b.parse::<usize>().unwrap()))
        .unwrap_or_else(|| panic!("{report}"));
    assert!(verified.0 == verified.1 && verified.1 > 3, "{report}");
    assert!(!std::path::Path::new("/run/netns/kiln-lab-drill-t-day2").exists());
    // The drill is recorded in the state dir, and `kiln status` shows the bundle it proved restorable
    // with the RPO (time since it was taken) and the RTO the drill measured (issue #26).
    let sealed_name = std::path::Path::new(&sealed)
        .file_name()
        .unwrap()
        .to_string_lossy()
        .to_string();
    let record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(lab.dir.join("t-day2.kiln/drills.json")).unwrap())
            .unwrap();
    assert_eq!(
        record["drills"][0]["bundle"],
        sealed_name.as_str(),
        "{record}"
    );
    assert_eq!(record["drills"][0]["passed"], true, "{record}");
    let status = ok(&mut k(&["status", "-f", &cluster]));
    let line = status
        .lines()
        .find(|l| l.starts_with("last verified-restorable bundle: "))
        .unwrap_or_else(|| panic!("{status}"));
    assert!(
        line.contains(&format!("bundle: {sealed_name} (taken "))
            && line.contains(&format!("{}/{} objects), RPO ", verified.0, verified.1))
            && line.contains(", RTO "),
        "{status}"
    );
    assert!(!status.contains("WARNING: the last drill"), "{status}");

    let plain = ok(&mut k(&[
        "snapshot", "save", "-f", &cluster, "-o", &backups,
    ]));
    let plain = plain
        .strip_prefix("saved ")
        .and_then(|s| s.split(' ').next())
        .unwrap()
        .to_string();
    let original = std::fs::read(&plain).unwrap();
    let drill_json = |bundle: &std::path::Path| {
        let o = run(std::process::Command::new(&kiln).args([
            "drill",
            "-f",
            &cluster,
            "--bundle",
            &bundle.to_string_lossy(),
            "--output",
            "json",
        ]));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stderr)));
        (o.status.success(), v)
    };

    // A recorded UID that the restored cluster does not have: found after the restore, and the scratch
    // lab is torn down all the same. The record is an objects.json as bundles of earlier kiln versions
    // carried (read instead of the snapshot's own objects), added to a copy of the bundle.
    let edited = lab.dir.join("edited.kiln-bundle.tar");
    std::fs::write(&edited, &original).unwrap();
    let extra = tempfile::tempdir().unwrap();
    std::fs::write(
        extra.path().join("objects.json"),
        r#"[{"kind":"Namespace","name":"default","uid":"00000000-not-the-uid","resourceVersion":"1","sha256":"-"}]"#,
    )
    .unwrap();
    ok(std::process::Command::new("tar").args([
        "--append",
        "-f",
        &edited.to_string_lossy(),
        "-C",
        &extra.path().to_string_lossy(),
        "objects.json",
    ]));
    let (passed, v) = drill_json(&edited);
    assert!(!passed, "{v}");
    assert_eq!(v["passed"], false);
    assert_eq!(v["tornDown"], true, "{v}");
    let problems = v["problems"].to_string();
    assert!(
        problems.contains("store: ") && problems.contains(" instead of "),
        "{problems}"
    );
    assert!(!std::path::Path::new("/run/netns/kiln-lab-drill-t-day2").exists());

    // A flipped byte in the snapshot: refused before any lab is made.
    let mut bytes = original.clone();
    let at = snapshot_offset(&bytes) + 100;
    bytes[at] ^= 0xff;
    let tampered = lab.dir.join("tampered.kiln-bundle.tar");
    std::fs::write(&tampered, bytes).unwrap();
    let (passed, v) = drill_json(&tampered);
    assert!(!passed, "{v}");
    assert_eq!(v["passed"], false);
    let problems = v["problems"].to_string();
    assert!(
        problems.contains("does not match bundle.json"),
        "{problems}"
    );
    assert!(!std::path::Path::new("/run/netns/kiln-lab-drill-t-day2").exists());
    // A failed drill is a warning in `kiln status`; the last verified bundle is still the sealed one.
    let status = ok(&mut k(&["status", "-f", &cluster]));
    assert!(
        status.contains(&format!(
            "last verified-restorable bundle: {sealed_name} (taken "
        )),
        "{status}"
    );
    assert!(
        status.lines().any(|l| l
            .starts_with("WARNING: the last drill (tampered.kiln-bundle.tar at ")
            && l.contains(") FAILED: ")
            && l.contains("does not match bundle.json")),
        "{status}"
    );

    // `kiln reset` with a schedule installed leaves nothing of it (the lab's /var/lib/kiln is an empty mount
    // point, as for reset's own check), and keeps the bundles (user data).
    let before = ok_runs();
    ok(&mut k(&[
        "snapshot", "schedule", "-f", &cluster, "--every", "1h", "--keep", "2",
    ]));
    let deadline = Instant::now() + Duration::from_secs(60);
    while ok_runs() <= before {
        assert!(
            Instant::now() < deadline,
            "the first run of the new schedule did not log"
        );
        std::thread::sleep(Duration::from_secs(1));
    }
    let out = ok(&mut k(&["reset", "-f", &cluster]));
    assert!(out.contains("verify-clean         done"), "{out}");
    std::thread::sleep(Duration::from_secs(3));
    let left = lab.ssh_ok(
        "host1",
        "for d in /etc/kiln /var/lib/kiln /var/log/kiln; do [ -n \"$(ls -A $d 2>/dev/null)\" ] && echo $d; done; \
         for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done \
         | grep -x '/bin/sh /etc/kiln/snapshot-schedule.sh '; true",
    );
    assert_eq!(left, "", "left behind by reset");
    let kept = lab.ssh_ok("host1", "ls /var/backups/kiln");
    assert!(kept.contains(".kiln-bundle.tar"), "{kept}");
    lab.down();
}
