//! cluster.yaml's `spec.apiServer` on a real lab host: `kiln init` with encryption enabled makes the
//! key (0600 with the PKI, 0600 on the controller) and the store holds Secrets as upstream's
//! `k8s:enc:aesgcm:v1:key1:` values, which kubectl reads back; the audit policy from cluster.yaml
//! writes the API server's audit log; a second init keeps the key.

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

    let state_key = c.lab.dir.join("t-enc.kiln/pki/encryption-config.yaml");
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

    c.kiln(&["reset"]);
    c.lab.down();
}
