//! Backups as declared, off-host: `spec.store.backup` with an S3 destination takes effect at `kiln init`
//! (and a re-run changes nothing), the controller uploads its scheduled bundles to a real S3 server (moto,
//! in the lab's network namespace on the lab gateway's address), the bucket keeps the newest N, a restore
//! from the bucket brings every object back, and the credentials are in no log, no argv and no file but
//! the 0600 credentials file.
//!
//! moto runs without signature checks here (its own check refuses any query holding a '/', such as a
//! listing under a prefix); wrong secrets against a checking server are tested in `kiln`'s unit tests
//! (`backup_store::s3`). The lab name may be overridden with KILN_TEST_LAB (a developer's own lab).

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kiln_tests::{bin, ok, run, stdout, TestLab};

/// moto_server inside the lab network, killed on drop.
struct Moto(Child);

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

const ENDPOINT: &str = "http://10.250.0.1:9000";

#[test]
#[ignore = "needs root: builds lab hosts (CI runs it with --include-ignored)"]
fn declared_backups_go_to_s3_are_pruned_and_restore() {
    let name = std::env::var("KILN_TEST_LAB").unwrap_or_else(|_| "t-s3".into());
    let lab = TestLab::up(&name, 1, false);
    let moto = Moto(
        lab.in_lab(&["moto_server", "-H", "10.250.0.1", "-p", "9000"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("moto_server (.ci/install-packages installs it)"),
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    let probe = "import socket; socket.create_connection(('10.250.0.1', 9000), 1)";
    while !run(&mut lab.in_lab(&["python3", "-c", probe]))
        .status
        .success()
    {
        assert!(Instant::now() < deadline, "moto_server did not start");
        std::thread::sleep(Duration::from_millis(300));
    }
    // The bucket, and an access key in a 0600 shared-credentials file next to cluster.yaml.
    let mut setup = lab
        .in_lab(&["python3", "-", ENDPOINT])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    setup
        .stdin
        .take()
        .unwrap()
        .write_all(include_bytes!(
            "../cli/src/backup_store/testdata/moto_setup.py"
        ))
        .unwrap();
    let creds = setup.wait_with_output().unwrap();
    assert!(creds.status.success());
    let creds = String::from_utf8(creds.stdout).unwrap();
    let field = |k: &str| {
        creds
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{k} = ")))
            .unwrap()
            .to_string()
    };
    let (key_id, secret) = (field("aws_access_key_id"), field("aws_secret_access_key"));
    let creds_file = lab.dir.join("s3.credentials");
    std::fs::write(&creds_file, &creds).unwrap();
    std::fs::set_permissions(&creds_file, std::fs::Permissions::from_mode(0o600)).unwrap();

    let cluster = lab.dir.join("cluster.yaml");
    let mut yaml = std::fs::read_to_string(&cluster).unwrap();
    yaml.push_str(&format!(
        "  store:\n    backup:\n      schedule: '@every 20s'\n      retention: 2\n      destination:\n        s3:\n          endpoint: {ENDPOINT}\n          bucket: kiln-backups\n          prefix: lab\n          credentialsFile: s3.credentials\n"
    ));
    std::fs::write(&cluster, yaml).unwrap();
    let cluster = cluster.to_string_lossy().to_string();
    let kiln = bin("kiln").to_string_lossy().to_string();
    let admin = lab.dir.join(format!("{name}.kiln/admin.conf"));
    let admin = admin.to_string_lossy().to_string();
    let k = |args: &[&str]| {
        let mut v = vec![kiln.as_str()];
        v.extend_from_slice(args);
        lab.in_lab(&v)
    };
    let kubectl = |args: &[&str]| {
        let mut v = vec!["kubectl", "--kubeconfig", &admin, "--request-timeout=10s"];
        v.extend_from_slice(args);
        ok(&mut lab.in_lab(&v))
    };
    let mut said = String::new();
    let phase = |out: &str| {
        out.lines()
            .find(|l| l.contains("] backup-schedule "))
            .unwrap_or_else(|| panic!("no backup-schedule phase in:\n{out}"))
            .to_string()
    };

    // 1. init installs the declared schedule; a second init finds it installed.
    let out = ok(&mut k(&["init", "-f", &cluster, "--wait-timeout", "150"]));
    said.push_str(&out);
    assert!(phase(&out).contains("done"), "{out}");
    kubectl(&["create", "namespace", "vault"]);
    kubectl(&[
        "-n",
        "vault",
        "create",
        "configmap",
        "cm",
        "--from-literal=a=1",
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
    let out = ok(&mut k(&["init", "-f", &cluster, "--wait-timeout", "150"]));
    said.push_str(&out);
    assert!(phase(&out).contains("skipped"), "{out}");

    // 2. On schedule: uploaded runs in the controller's log, and at most `retention` bundles in the bucket.
    let uploaded_runs = || {
        stdout(&run(&mut lab.ssh(
            "host1",
            "grep -c ' uploaded=s3://kiln-backups/lab/host1/' /var/log/kiln/snapshots.log 2>/dev/null || true",
        )))
        .parse::<u32>()
        .unwrap_or(0)
    };
    let deadline = Instant::now() + Duration::from_secs(240);
    while uploaded_runs() < 4 {
        assert!(
            Instant::now() < deadline,
            "fewer than 4 uploaded runs; log:\n{}\nerrors:\n{}",
            stdout(&run(
                &mut lab.ssh("host1", "cat /var/log/kiln/snapshots.log")
            )),
            stdout(&run(
                &mut lab.ssh("host1", "cat /var/log/kiln/snapshot-schedule.err")
            ))
        );
        std::thread::sleep(Duration::from_secs(3));
    }
    // Credentials: only in the 0600 file on the controller — not in a log, a file, or any argv.
    // The patterns go to the host on stdin (a probe with them in its argv would find itself in /proc).
    let mut probe = lab.ssh(
        "host1",
        "cat > /tmp/.kiln-test-patterns; stat -c %a /etc/kiln/s3.credentials; \
         grep -rlFf /tmp/.kiln-test-patterns --exclude=.kiln-test-patterns /etc /var/log /var/lib/kiln /run /tmp /root 2>/dev/null; \
         for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done | grep -cFf /tmp/.kiln-test-patterns; \
         rm -f /tmp/.kiln-test-patterns; true",
    );
    let mut probe = probe
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    probe
        .stdin
        .take()
        .unwrap()
        .write_all(format!("{key_id}\n{secret}\n").as_bytes())
        .unwrap();
    let found = stdout(&probe.wait_with_output().unwrap());
    assert_eq!(
        found, "600\n/etc/kiln/s3.credentials\n0",
        "credentials found elsewhere"
    );
    let state = lab.dir.join(format!("{name}.kiln"));
    let leaked = run(Command::new("grep")
        .args(["-rlF", "-e", &key_id, "-e", &secret])
        .arg(&state));
    assert_eq!(stdout(&leaked), "", "credentials in the state directory");
    // Stopping the schedule lets a run in progress finish: then exactly `retention` bundles remain.
    ok(&mut k(&[
        "snapshot", "schedule", "-f", &cluster, "--remove",
    ]));
    let listed = ok(&mut k(&[
        "snapshot",
        "list",
        "-f",
        &cluster,
        "--dir",
        "s3://kiln-backups/lab",
        "--output",
        "json",
    ]));
    let listed: Vec<serde_json::Value> = serde_json::from_str(&listed).unwrap();
    let urls: Vec<&str> = listed.iter().map(|o| o["url"].as_str().unwrap()).collect();
    assert_eq!(urls.len(), 2, "{urls:?}");
    assert!(
        urls.iter()
            .all(|u| u.starts_with("s3://kiln-backups/lab/host1/")
                && u.ends_with(".kiln-bundle.tar")),
        "{urls:?}"
    );
    said.push_str(&format!("{urls:?}"));

    // 3. Restore from the bucket: the deleted configmap comes back with its UID, every object verified.
    kubectl(&["-n", "vault", "delete", "cm", "cm"]);
    let restore = run(&mut k(&["snapshot", "restore", "-f", &cluster, urls[0]]));
    let out = stdout(&restore);
    let err = String::from_utf8_lossy(&restore.stderr).to_string();
    assert!(restore.status.success(), "{out}\n{err}");
    assert!(
        out.contains("fetched ") && out.contains(" and verified"),
        "{out}"
    );
    said.push_str(&out);
    said.push_str(&err);
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

    // 4. A credentials file others may read is refused, naming it.
    let open = lab.dir.join("open.credentials");
    std::fs::write(&open, &creds).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o644)).unwrap();
    let refused = run(&mut k(&[
        "snapshot",
        "list",
        "-f",
        &cluster,
        "--dir",
        "s3://kiln-backups/lab",
        "--s3-credentials-file",
        &open.to_string_lossy(),
    ]));
    assert!(!refused.status.success());
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(
        err.contains(&format!("s3 credentials {}: mode 0644", open.display())),
        "{err}"
    );
    said.push_str(&err);
    assert!(
        !said.contains(&secret) && !said.contains(&key_id),
        "kiln printed the credentials"
    );
    drop(moto);
    lab.down();
}
