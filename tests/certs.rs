//! `kiln certs renew` on a real lab cluster: the API server serves a new certificate (new serial, same
//! CA), clients holding the old admin kubeconfig keep working, only the pods that read a renewed
//! certificate restart, and `kiln status` warns about certificates close to expiry and reports backups.

use std::time::{Duration, Instant};

use kiln_tests::{bin, ok, run, stdout, TestLab};

const LAB: &str = "t-certs";

#[test]
#[ignore = "needs root: builds lab hosts (CI runs it with --include-ignored)"]
fn renewed_certificates_are_served_with_the_same_ca() {
    let lab = TestLab::up(LAB, 1, false);
    let cluster_path = lab.dir.join("cluster.yaml");
    let cluster = cluster_path.to_string_lossy().to_string();
    let kiln = bin("kiln");
    let kiln = kiln.to_string_lossy();
    let state = lab.dir.join(format!("{LAB}.kiln"));
    let admin = state.join("admin.conf").to_string_lossy().to_string();
    let ca = state.join("pki/host1/ca.crt").to_string_lossy().to_string();
    let k = |args: &[&str]| {
        let mut v = vec![&*kiln];
        v.extend_from_slice(args);
        lab.in_lab(&v)
    };
    let kubectl = |conf: &str, args: &[&str]| {
        let mut v = vec!["kubectl", "--kubeconfig", conf, "--request-timeout=10s"];
        v.extend_from_slice(args);
        ok(&mut lab.in_lab(&v))
    };

    // Leaves valid for 20 days: `kiln status` must warn about them.
    let yaml = std::fs::read_to_string(&cluster_path).unwrap();
    std::fs::write(
        &cluster_path,
        format!("{yaml}  pki:\n    certValidityDays: 20\n"),
    )
    .unwrap();
    ok(&mut k(&["init", "-f", &cluster, "--wait-timeout", "120"]));

    // The serving certificate as a client sees it, verified against the cluster CA (-verify_return_error
    // fails the handshake otherwise, and then there is nothing to print).
    let served = || {
        let out = ok(&mut lab.in_lab(&[
            "sh",
            "-c",
            &format!(
                "openssl s_client -connect 10.250.0.11:6443 -servername host1 -CAfile {ca} \
                 -verify_return_error </dev/null 2>/dev/null | openssl x509 -noout -serial -issuer -startdate"
            ),
        ]));
        assert!(
            out.contains("serial="),
            "no verified certificate served: {out:?}"
        );
        out
    };
    let field = |text: &str, key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key))
            .unwrap_or_else(|| panic!("{key} missing in {text}"))
            .trim()
            .to_string()
    };
    let before = served();
    let table = |name: &str| -> i64 {
        let out = ok(&mut k(&[
            "certs",
            "check-expiration",
            "-f",
            &cluster,
            "--output",
            "json",
        ]));
        let rows: serde_json::Value = serde_json::from_str(&out).unwrap();
        rows.as_array()
            .unwrap()
            .iter()
            .find(|r| r["certificate"] == name)
            .unwrap_or_else(|| panic!("{name} not in {out}"))["residualDays"]
            .as_i64()
            .unwrap()
    };
    assert_eq!(table("apiserver"), 19);
    assert_eq!(table("admin.conf"), 19);
    assert_eq!(table("front-proxy-client"), 19);
    let status = ok(&mut k(&["status", "-f", &cluster]));
    assert!(
        status.contains("WARNING: certificate host1/apiserver expires in 19 days"),
        "{status}"
    );
    assert!(!status.contains("WARNING: CA"), "{status}");
    assert!(status.contains("backup host1: none"), "{status}");

    let sha = |p: &str| ok(&mut lab.in_lab(&["sha256sum", p]));
    let ca_key = state.join("pki/host1/ca.key").to_string_lossy().to_string();
    let (ca_sum, ca_key_sum) = (sha(&ca), sha(&ca_key));
    let host_ca = lab.ssh_ok("host1", "sha256sum < /etc/kiln/pki/ca.crt");
    let old_admin = lab.dir.join("old-admin.conf");
    std::fs::copy(&admin, &old_admin).unwrap();
    let old_admin = old_admin.to_string_lossy().to_string();

    // Renewals are issued for a year from now on.
    std::fs::write(
        &cluster_path,
        std::fs::read_to_string(&cluster_path)
            .unwrap()
            .replace("certValidityDays: 20", "certValidityDays: 365"),
    )
    .unwrap();

    let bad = run(&mut k(&["certs", "renew", "-f", &cluster, "apiservr"]));
    assert!(!bad.status.success());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(
        err.contains("unknown certificate \"apiservr\"")
            && err.contains("valid names: all, apiserver, apiserver-kubelet-client"),
        "{err}"
    );

    let out = ok(&mut k(&["certs", "renew", "-f", &cluster, "apiserver"]));
    assert!(out.contains("renewed host1/apiserver"), "{out}");
    assert!(out.contains("restarting kiln-apiserver.yaml"), "{out}");
    // Only the pod that reads the certificate restarts.
    assert!(!out.contains("kiln-store.yaml"), "{out}");
    assert!(
        out.contains("kiln-apiserver-host1 Ready with the renewed certificates"),
        "{out}"
    );
    let after = served();
    assert_ne!(field(&before, "serial="), field(&after, "serial="));
    assert_eq!(field(&before, "issuer="), field(&after, "issuer="));
    assert_ne!(field(&before, "notBefore="), field(&after, "notBefore="));
    assert_eq!(table("apiserver"), 364);
    assert_eq!(table("apiserver-kubelet-client"), 19);
    assert_eq!(
        (sha(&ca), sha(&ca_key)),
        (ca_sum.clone(), ca_key_sum.clone())
    );
    assert_eq!(
        lab.ssh_ok("host1", "sha256sum < /etc/kiln/pki/ca.crt"),
        host_ca
    );
    assert_eq!(
        lab.ssh_ok("host1", "stat -c %a /etc/kiln/pki/apiserver.key"),
        "600"
    );
    assert_eq!(
        lab.ssh_ok(
            "host1",
            "openssl x509 -noout -serial -in /etc/kiln/pki/apiserver.crt"
        ),
        format!("serial={}", field(&after, "serial="))
    );
    let nodes = kubectl(&old_admin, &["get", "nodes", "--no-headers"]);
    assert!(nodes.contains(" Ready "), "{nodes}");

    // Everything: every control-plane pod and kiln-proxy restart, one after another, and come back.
    let out = ok(&mut k(&["certs", "renew", "-f", &cluster, "all"]));
    for m in [
        "kiln-store.yaml",
        "kiln-apiserver.yaml",
        "kiln-scheduler.yaml",
        "kiln-controller-manager.yaml",
        "kiln-proxy.yaml",
    ] {
        assert!(out.contains(m), "{m} not restarted:\n{out}");
    }
    assert_ne!(field(&after, "serial="), field(&served(), "serial="));
    for name in [
        "store-peer",
        "store-server",
        "admin.conf",
        "scheduler.conf",
        "proxy.conf",
    ] {
        assert_eq!(table(name), 364, "{name}");
    }
    assert_eq!((sha(&ca), sha(&ca_key)), (ca_sum, ca_key_sum));
    for conf in [&old_admin, &admin] {
        let nodes = kubectl(conf, &["get", "nodes", "--no-headers"]);
        assert!(nodes.contains(" Ready "), "{nodes}");
    }
    let pods = kubectl(
        &admin,
        &["get", "pods", "-n", "kube-system", "--no-headers"],
    );
    for name in [
        "kiln-store-host1",
        "kiln-apiserver-host1",
        "kiln-scheduler-host1",
        "kiln-controller-manager-host1",
        "kiln-proxy-host1",
    ] {
        let line = pods
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("{name} missing:\n{pods}"));
        assert!(line.contains("1/1") && line.contains("Running"), "{pods}");
    }
    // The cluster still works end to end: the API server writes through the renewed store certificates.
    kubectl(
        &admin,
        &["create", "configmap", "after-renew", "--from-literal=a=b"],
    );

    // A re-run of init renders exactly what the renewal installed: nothing to change, nothing restarts.
    let again = ok(&mut k(&["init", "-f", &cluster]));
    // (push is not among them: binaries rebuilt meanwhile would be pushed. The renewed files themselves
    // must be on the host exactly as in the state directory.)
    for phase in ["certs", "kubeconfigs", "control-plane", "proxy"] {
        let line = again
            .lines()
            .find(|l| l.split_whitespace().nth(2) == Some(phase))
            .unwrap_or_else(|| panic!("no {phase} line:\n{again}"));
        assert_eq!(line.split_whitespace().nth(3), Some("skipped"), "{again}");
    }

    let sums = |dir: &str| format!("cd {dir} && find . -type f | sort | xargs sha256sum");
    let local_pki = state.join("pki/host1").to_string_lossy().to_string();
    assert_eq!(
        lab.ssh_ok("host1", &sums("/etc/kiln/pki")),
        ok(std::process::Command::new("sh").args(["-c", &sums(&local_pki)]))
    );
    for (remote, local) in [
        ("admin.conf", "admin.conf"),
        ("proxy.conf", "proxy.conf"),
        ("scheduler.conf", "kubeconfigs/host1/scheduler.conf"),
        (
            "controller-manager.conf",
            "kubeconfigs/host1/controller-manager.conf",
        ),
    ] {
        assert_eq!(
            lab.ssh_ok("host1", &format!("sha256sum < /etc/kiln/{remote}")),
            ok(std::process::Command::new("sh").args([
                "-c",
                &format!("sha256sum < {}", state.join(local).display())
            ])),
            "{remote}"
        );
    }

    let status = ok(&mut k(&["status", "-f", &cluster]));
    assert!(!status.contains("WARNING"), "{status}");
    assert!(
        status.contains("certificates: all valid for > 30 days (earliest: "),
        "{status}"
    );

    // Backups: one scheduled run (the loop runs at once), then `kiln status` names it and its bundle.
    ok(&mut k(&[
        "snapshot", "schedule", "-f", &cluster, "--every", "1h", "--keep", "2",
    ]));
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let log = stdout(&run(
            &mut lab.ssh("host1", "cat /var/log/kiln/snapshots.log 2>/dev/null; true")
        ));
        if log.contains(" ok /var/backups/kiln/") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no scheduled snapshot ran; log: {log}"
        );
        std::thread::sleep(Duration::from_secs(2));
    }
    let status = ok(&mut k(&["status", "-f", &cluster]));
    let line = status
        .lines()
        .find(|l| l.starts_with("backup host1: "))
        .unwrap_or_else(|| panic!("no backup line:\n{status}"));
    assert!(
        line.contains("last scheduled run ")
            && line.contains(" ok (revision ")
            && line.contains("newest bundle /var/backups/kiln/"),
        "{line}"
    );
    ok(&mut k(&[
        "snapshot", "schedule", "-f", &cluster, "--remove",
    ]));

    let out = ok(&mut k(&["reset", "-f", &cluster]));
    assert!(out.contains("verify-clean         done"), "{out}");
    lab.down();
}
