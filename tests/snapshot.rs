//! `kiln snapshot save` / `restore` on a real lab cluster: what was deleted after the snapshot comes back
//! with the same UIDs, the restore verifies itself against the bundle, and a later `init` converges.

use kiln_tests::{bin, ok, run, TestLab};

#[test]
#[ignore = "needs root: builds lab hosts (CI runs it with --include-ignored)"]
fn a_snapshot_restores_deleted_objects_with_their_uids() {
    let lab = TestLab::up("t-snap", 1, false);
    let cluster = lab.dir.join("cluster.yaml");
    let cluster = cluster.to_string_lossy();
    let kiln = bin("kiln");
    let kiln = kiln.to_string_lossy();
    let admin = lab.dir.join("t-snap.kiln/admin.conf");
    let admin = admin.to_string_lossy();
    let kubectl = |args: &[&str]| {
        let mut v = vec!["kubectl", "--kubeconfig", &admin, "--request-timeout=10s"];
        v.extend_from_slice(args);
        ok(&mut lab.in_lab(&v))
    };
    ok(&mut lab.in_lab(&[&kiln, "init", "-f", &cluster, "--wait-timeout", "120"]));
    kubectl(&["create", "namespace", "precious"]);
    kubectl(&[
        "-n",
        "precious",
        "create",
        "configmap",
        "keepme",
        "--from-literal=answer=42",
    ]);
    let uid = kubectl(&[
        "-n",
        "precious",
        "get",
        "configmap",
        "keepme",
        "-o",
        "jsonpath={.metadata.uid}",
    ]);

    let out_dir = lab.dir.join("backups");
    std::fs::create_dir_all(&out_dir).unwrap();
    let saved = ok(&mut lab.in_lab(&[
        &kiln,
        "snapshot",
        "save",
        "-f",
        &cluster,
        "-o",
        &out_dir.to_string_lossy(),
    ]));
    assert!(saved.starts_with("saved "), "{saved}");
    let bundles: Vec<_> = std::fs::read_dir(&out_dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert_eq!(bundles.len(), 1, "{bundles:?}");
    let bundle = bundles[0].to_string_lossy().to_string();
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&bundles[0]).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let listed = ok(&mut lab.in_lab(&[
        &kiln,
        "snapshot",
        "list",
        "-f",
        &cluster,
        "--dir",
        &out_dir.to_string_lossy(),
    ]));
    assert!(listed.contains(&bundle), "{listed}");

    // A corrupted copy is refused before anything on the hosts is touched.
    let bad = lab.dir.join("bad.kiln-bundle.tar");
    let mut bytes = std::fs::read(&bundles[0]).unwrap();
    let n = bytes.len();
    bytes[n / 2] ^= 0xff;
    std::fs::write(&bad, bytes).unwrap();
    let refused = run(&mut lab.in_lab(&[
        &kiln,
        "snapshot",
        "restore",
        "-f",
        &cluster,
        &bad.to_string_lossy(),
    ]));
    assert!(!refused.status.success());
    assert_eq!(
        kubectl(&["get", "ns", "precious", "-o", "jsonpath={.status.phase}"]),
        "Active"
    );

    kubectl(&[
        "delete",
        "namespace",
        "precious",
        "--wait=true",
        "--timeout=60s",
    ]);
    let gone = run(&mut lab.in_lab(&["kubectl", "--kubeconfig", &admin, "get", "ns", "precious"]));
    assert!(!gone.status.success());

    let restored = ok(&mut lab.in_lab(&[&kiln, "snapshot", "restore", "-f", &cluster, &bundle]));
    assert!(restored.contains("verified"), "{restored}");
    assert_eq!(
        kubectl(&[
            "-n",
            "precious",
            "get",
            "configmap",
            "keepme",
            "-o",
            "jsonpath={.metadata.uid}:{.data.answer}"
        ]),
        format!("{uid}:42")
    );
    let nodes = kubectl(&["get", "nodes", "--no-headers"]);
    assert!(nodes.contains(" Ready "), "{nodes}");

    // The cluster keeps working and a re-run of init changes nothing in the control plane.
    kubectl(&["create", "configmap", "after-restore", "--from-literal=x=y"]);
    let again = ok(&mut lab.in_lab(&[&kiln, "init", "-f", &cluster]));
    assert!(again.contains("control-plane        skipped"), "{again}");
    let out = ok(&mut lab.in_lab(&[&kiln, "reset", "-f", &cluster]));
    assert!(out.contains("verify-clean         done"), "{out}");
    lab.down();
}
