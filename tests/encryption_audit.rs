//! cluster.yaml's `spec.apiServer` on a real lab host: `kiln init` with encryption enabled makes the
//! key (0600 with the PKI, 0600 on the controller) and the store holds Secrets as upstream's
//! `k8s:enc:aesgcm:v1:key1:` values, which kubectl reads back; the audit policy from cluster.yaml
//! writes the API server's audit log; a second init keeps the key; `kiln encryption rotate` re-seals
//! every Secret with a new key, and bundles from either side of it restore.

use kiln_tests::{Cluster, TestLab};

const SPEC: &str = r#"  apiServer:
    encryption:
      enabled: true
    audit:
      policy:
        apiVersion: audit.k8s.io/v1
        kind: Policy
        omitStages: [RequestReceived]
        rules:
          - level: Metadata
            resources: [{group: "", resources: ["secrets"]}]
"#;

const PLAIN: &str = "lab-plaintext-xyz";

fn etcdctl_get(c: &Cluster, key: &str) -> String {
    c.lab.ssh_ok(
        "host1",
        &format!(
            "ETCDCTL_API=3 etcdctl --endpoints https://127.0.0.1:2379 \
             --cacert /etc/kiln/pki/store/ca.crt --cert /etc/kiln/pki/apiserver-store-client.crt \
             --key /etc/kiln/pki/apiserver-store-client.key get {key} --print-value-only | od -An -c | tr -d ' \\n'"
        ),
    )
}

#[test]
#[ignore = "needs root: a lab host (CI runs it with --include-ignored)"]
fn init_with_encryption_stores_secrets_sealed_and_audits() {
    // The lab's name: this helper's own (`au`).
    let lab = TestLab::up("t-enc", 1, false);
    let c = Cluster::on(lab, SPEC);
    let out = c.kiln(&["init", "--wait-timeout", "150"]);
    assert!(
        out.contains("encryption-config.yaml (aesgcm key1)"),
        "{out}"
    );

    let state_key = c
        .lab
        .dir
        .join(format!("{}.kiln/pki/encryption-config.yaml", c.lab.name));
    let mode = |p: &std::path::Path| {
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(p).unwrap().permissions())
            & 0o777
    };
    assert_eq!(mode(&state_key), 0o600);
    let key_text = std::fs::read_to_string(&state_key).unwrap();
    assert!(key_text.contains("aesgcm") && key_text.contains("name: key1"));
    assert_eq!(
        c.lab
            .ssh_ok(
                "host1",
                "stat -c %a /etc/kiln/pki/encryption-config.yaml /etc/kiln/audit-policy.yaml"
            )
            .split_whitespace()
            .collect::<Vec<_>>(),
        ["600", "600"]
    );

    c.kubectl(&[
        "create",
        "secret",
        "generic",
        "labsecret",
        &format!("--from-literal=password={PLAIN}"),
    ]);
    // `od -c` of the raw value: the prefix in clear, then ciphertext without the plaintext.
    let raw = etcdctl_get(&c, "/registry/secrets/default/labsecret");
    assert!(raw.starts_with("k8s:enc:aesgcm:v1:key1:"), "{raw}");
    assert!(
        !raw.contains("lab-plaintext") && !raw.contains("password"),
        "{raw}"
    );
    let got = c.kubectl(&[
        "get",
        "secret",
        "labsecret",
        "-o",
        "jsonpath={.data.password}",
    ]);
    assert_eq!(got, "bGFiLXBsYWludGV4dC14eXo=");

    let log = c.lab.ssh_ok("host1", "cat /var/log/kiln/audit.log");
    let create = log
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|e| e["verb"] == "create" && e["objectRef"]["name"] == "labsecret")
        .unwrap_or_else(|| panic!("no create event in:\n{log}"));
    assert_eq!(create["user"]["username"], "kubernetes-admin");
    assert_eq!(create["level"], "Metadata");
    assert!(!log.contains(PLAIN));

    // A second init converges and keeps the key: the Secret still reads.
    c.kiln(&["init", "--wait-timeout", "150"]);
    assert_eq!(std::fs::read_to_string(&state_key).unwrap(), key_text);
    let got = c.kubectl(&[
        "get",
        "secret",
        "labsecret",
        "-o",
        "jsonpath={.data.password}",
    ]);
    assert_eq!(got, "bGFiLXBsYWludGV4dC14eXo=");

    rotation(&c, &state_key);

    c.kiln(&["reset"]);
    c.lab.down();
}

/// The raw value's prefix up to the key name (`od -c` prints `k8s:enc:aesgcm:v1:key2:` unchanged).
fn sealed_with(c: &Cluster, name: &str) -> String {
    let raw = etcdctl_get(c, &format!("/registry/secrets/default/{name}"));
    raw.splitn(6, ':').take(5).collect::<Vec<_>>().join(":")
}

fn secret_text(c: &Cluster, name: &str) -> String {
    c.kubectl(&["get", "secret", name, "-o", "jsonpath={.data.password}"])
}

fn bundle_config(bundle: &std::path::Path) -> String {
    kiln_tests::ok(std::process::Command::new("tar").args([
        "xOf",
        bundle.to_str().unwrap(),
        "state/pki/encryption-config.yaml",
    ]))
}

/// `kiln encryption rotate` (issue #25): upstream's steps, every Secret re-sealed with the new key and
/// the old key gone; bundles carry the configuration of their time, and a restore of one made before
/// the rotation brings its key back as a read key, which the next rotation drops again.
fn rotation(c: &Cluster, state_key: &std::path::Path) {
    let before = c.lab.dir.join("before-rotation.tar");
    c.kiln(&["snapshot", "save", "--out", before.to_str().unwrap()]);
    let out = c.kiln(&["encryption", "rotate", "--wait-timeout", "150"]);
    assert!(
        out.contains("promote: host1: configuration installed, kiln-apiserver restarted")
            && out.contains("rotated: every Secret is sealed with aesgcm key2, the only key left"),
        "{out}"
    );
    assert_eq!(sealed_with(c, "labsecret"), "k8s:enc:aesgcm:v1:key2");
    assert_eq!(secret_text(c, "labsecret"), "bGFiLXBsYWludGV4dC14eXo=");
    c.kubectl(&[
        "create",
        "secret",
        "generic",
        "after-rotation",
        "--from-literal=password=later",
    ]);
    assert_eq!(sealed_with(c, "after-rotation"), "k8s:enc:aesgcm:v1:key2");
    assert_eq!(secret_text(c, "after-rotation"), "bGF0ZXI=");
    let config = std::fs::read_to_string(state_key).unwrap();
    assert!(
        config.contains("name: key2") && !config.contains("name: key1"),
        "{config}"
    );
    assert_eq!(
        c.lab
            .ssh_ok("host1", "sha256sum < /etc/kiln/pki/encryption-config.yaml"),
        kiln_tests::ok(
            std::process::Command::new("sh")
                .args(["-c", &format!("sha256sum < {}", state_key.display())])
        )
    );
    let status = c.kiln(&["encryption", "status"]);
    assert!(
        status.contains("key2       aesgcm     writes  2")
            && status.contains("rotation: none under way"),
        "{status}"
    );
    let state_dir = state_key.parent().unwrap().parent().unwrap();
    assert!(!state_dir.join("encryption-rotation.json").exists());

    // Bundles carry the state directory's configuration of their time.
    assert!(bundle_config(&before).contains("name: key1"));
    let after = c.lab.dir.join("after-rotation.tar");
    c.kiln(&["snapshot", "save", "--out", after.to_str().unwrap()]);
    // (Compared without printing: the text holds the key.)
    assert!(
        bundle_config(&after) == config.trim(),
        "the bundle's configuration is not the state directory's"
    );

    // Back to the bundle from before: its Secrets are sealed with key1, which comes back as a read key.
    let out = c.kiln(&["snapshot", "restore", before.to_str().unwrap()]);
    assert!(
        out.contains("the bundle's keys aesgcm key1 added back"),
        "{out}"
    );
    assert_eq!(sealed_with(c, "labsecret"), "k8s:enc:aesgcm:v1:key1");
    assert_eq!(secret_text(c, "labsecret"), "bGFiLXBsYWludGV4dC14eXo=");
    assert!(c
        .try_kubectl(&["get", "secret", "after-rotation"])
        .is_none());
    // The next rotation re-seals it and drops both older keys.
    let out = c.kiln(&["encryption", "rotate", "--wait-timeout", "150"]);
    assert!(
        out.contains("sealed with aesgcm key3, the only key left"),
        "{out}"
    );
    assert_eq!(sealed_with(c, "labsecret"), "k8s:enc:aesgcm:v1:key3");
    assert_eq!(secret_text(c, "labsecret"), "bGFiLXBsYWludGV4dC14eXo=");
    let config = std::fs::read_to_string(state_key).unwrap();
    assert!(
        config.contains("name: key3")
            && !config.contains("name: key1")
            && !config.contains("name: key2"),
        "{config}"
    );
    for b in [before, after] {
        let _ = std::fs::remove_file(b);
    }
}
