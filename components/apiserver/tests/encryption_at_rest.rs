//! Encryption at rest end to end: kubectl writes Secrets through kiln-apiserver with
//! `--encryption-provider-config`; etcdctl reads the raw store, which holds upstream's
//! `k8s:enc:aesgcm:v1:<key>:` values and no plaintext, while kubectl (get, list, watch) reads the
//! Secrets back. A second server with a new key first reads the old values and re-writes a stale
//! one on a no-op update (upstream's rotation procedure).

use std::path::{Path, PathBuf};

use clap::Parser;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Secret;
use kiln_testkit::Cluster;
use kube::api::{Api, PostParams, WatchEvent, WatchParams};

const KEY1: &str = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";
const KEY2: &str = "ZmVkY2JhOTg3NjU0MzIxMGZlZGNiYTk4NzY1NDMyMTA=";
const PLAIN: &str = "hunter2-plaintext";
const PLAIN_B64: &str = "aHVudGVyMi1wbGFpbnRleHQ=";

fn config(keys: &[(&str, &str)]) -> String {
    let keys: Vec<String> = keys
        .iter()
        .map(|(n, s)| format!("            - name: {n}\n              secret: {s}\n"))
        .collect();
    format!(
        "apiVersion: apiserver.config.k8s.io/v1
kind: EncryptionConfiguration
resources:
  - resources: [secrets]
    providers:
      - aesgcm:
          keys:
{}      - identity: {{}}
",
        keys.concat()
    )
}

/// `etcdctl get <key> --print-value-only`.
fn etcdctl_get(endpoint: &str, key: &str) -> Vec<u8> {
    let out = std::process::Command::new("etcdctl")
        .args(["--endpoints", endpoint, "get", key, "--print-value-only"])
        .env("ETCDCTL_API", "3")
        .output()
        .expect("run etcdctl");
    assert!(
        out.status.success(),
        "etcdctl: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

fn contains(hay: &[u8], needle: &str) -> bool {
    hay.windows(needle.len()).any(|w| w == needle.as_bytes())
}

fn server_args(c: &Cluster, config_path: &Path) -> Vec<String> {
    let dir = c.dir.path();
    vec![
        "kiln-apiserver".to_string(),
        format!("--etcd-servers={}", c.etcd.endpoint),
        "--bind-address=127.0.0.1".into(),
        "--secure-port=0".into(),
        format!("--tls-cert-file={}", dir.join("apiserver.crt").display()),
        format!(
            "--tls-private-key-file={}",
            dir.join("apiserver.key").display()
        ),
        format!("--client-ca-file={}", dir.join("ca.crt").display()),
        format!("--encryption-provider-config={}", config_path.display()),
    ]
}

async fn start_second_server(
    c: &Cluster,
    config_path: &Path,
) -> (kiln_apiserver::RunningServer, PathBuf) {
    let dir = c.dir.path();
    let options = kiln_apiserver::Options::parse_from(server_args(c, config_path));
    let server = kiln_apiserver::start(options)
        .await
        .expect("second apiserver starts");
    let url = format!("https://{}", server.local_addr());
    let admin = c.pki.client("kubernetes-admin", &["system:masters"]);
    let kubeconfig = dir.join("admin-2.conf");
    std::fs::write(
        &kubeconfig,
        kiln_testkit::kubeconfig(&url, &c.pki.ca.cert, &admin, "kubernetes-admin"),
    )
    .unwrap();
    (server, kubeconfig)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_are_sealed_in_the_store_and_read_back_through_kubectl() {
    let c = Cluster::start_with_pki_flags(|_, dir| {
        let path = dir.join("encryption.yaml");
        std::fs::write(&path, config(&[("key1", KEY1)])).unwrap();
        vec![format!("--encryption-provider-config={}", path.display())]
    })
    .await;
    let endpoint = c.etcd.endpoint.clone();

    // A watch opened first sees the new Secret decrypted.
    let client = c.admin().await;
    let secrets: Api<Secret> = Api::namespaced(client, "default");
    let mut watch = secrets
        .watch(&WatchParams::default(), "0")
        .await
        .unwrap()
        .boxed();

    c.kubectl_ok(&[
        "create",
        "secret",
        "generic",
        "s1",
        &format!("--from-literal=password={PLAIN}"),
    ])
    .await;

    let raw = etcdctl_get(&endpoint, "/registry/secrets/default/s1");
    assert!(
        raw.starts_with(b"k8s:enc:aesgcm:v1:key1:"),
        "{}",
        String::from_utf8_lossy(&raw)
    );
    assert!(!contains(&raw, PLAIN) && !contains(&raw, PLAIN_B64) && !contains(&raw, "password"));

    let got = c
        .kubectl_ok(&["get", "secret", "s1", "-o", "jsonpath={.data.password}"])
        .await;
    assert_eq!(got, PLAIN_B64);
    let listed = c.kubectl_ok(&["get", "secrets", "-o", "name"]).await;
    assert!(listed.contains("secret/s1"), "{listed}");
    let added = tokio::time::timeout(std::time::Duration::from_secs(20), async {
        while let Some(ev) = watch.try_next().await.unwrap() {
            if let WatchEvent::Added(s) = ev {
                if s.metadata.name.as_deref() == Some("s1") {
                    return s;
                }
            }
        }
        panic!("watch ended")
    })
    .await
    .expect("the watch reports s1");
    assert_eq!(added.data.unwrap()["password"].0, PLAIN.as_bytes());

    // Resources not in the configuration stay plaintext.
    c.kubectl_ok(&["create", "configmap", "cm1", "--from-literal=k=visible"])
        .await;
    let raw = etcdctl_get(&endpoint, "/registry/configmaps/default/cm1");
    assert!(raw.starts_with(b"{") && contains(&raw, "visible"));

    // Rotation, step 1: a second server with key2 first (key1 still listed) reads key1's values…
    let rotated = c.dir.path().join("encryption-rotated.yaml");
    std::fs::write(&rotated, config(&[("key2", KEY2), ("key1", KEY1)])).unwrap();
    let (server2, kc2) = start_second_server(&c, &rotated).await;
    let (ok, out, err) = c
        .kubectl(
            &kc2,
            &["get", "secret", "s1", "-o", "jsonpath={.data.password}"],
        )
        .await;
    assert!(ok, "{err}");
    assert_eq!(out, PLAIN_B64);
    // …writes new ones with key2…
    let client2 = kiln_testkit::client_from_kubeconfig(&kc2).await;
    let api2: Api<Secret> = Api::namespaced(client2, "default");
    let mut s2 = Secret::default();
    s2.metadata.name = Some("s2".into());
    s2.string_data = Some([("password".to_string(), PLAIN.to_string())].into());
    api2.create(&PostParams::default(), &s2).await.unwrap();
    let raw = etcdctl_get(&endpoint, "/registry/secrets/default/s2");
    assert!(raw.starts_with(b"k8s:enc:aesgcm:v1:key2:"));
    // …which the first server (key1 only) cannot read: upstream's internal error.
    let (ok, _, err) = c
        .kubectl(&c.admin_kubeconfig, &["get", "secret", "s2"])
        .await;
    assert!(!ok && err.contains("unable to transform key"), "{err}");
    // …and an unchanged replace (upstream's `kubectl get secrets -o json | kubectl replace -f -`)
    // re-writes the stale key1 value with key2.
    let json = c
        .kubectl(&kc2, &["get", "secret", "s1", "-o", "json"])
        .await
        .1;
    let file = c.dir.path().join("s1.json");
    std::fs::write(&file, json).unwrap();
    let (ok, _, err) = c
        .kubectl(&kc2, &["replace", "-f", file.to_str().unwrap()])
        .await;
    assert!(ok, "{err}");
    let raw = etcdctl_get(&endpoint, "/registry/secrets/default/s1");
    assert!(
        raw.starts_with(b"k8s:enc:aesgcm:v1:key2:"),
        "{}",
        String::from_utf8_lossy(&raw[..30.min(raw.len())])
    );
    let got = api2.get("s1").await.unwrap();
    assert_eq!(got.data.unwrap()["password"].0, PLAIN.as_bytes());
    server2.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kms_provider_is_refused_at_start() {
    let c = Cluster::start().await;
    let path = c.dir.path().join("kms.yaml");
    std::fs::write(
        &path,
        "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: [secrets]\n  providers:\n  - kms: {name: vault, endpoint: unix:///kms.sock}\n",
    )
    .unwrap();
    let err =
        match kiln_apiserver::start(kiln_apiserver::Options::parse_from(server_args(&c, &path)))
            .await
        {
            Ok(_) => panic!("a kms provider must stop the server"),
            Err(e) => e.to_string(),
        };
    assert!(err.contains("kms.yaml"), "{err}");
    assert!(
        err.contains(
            "resources[0].providers[0].kms: Unsupported value: kms providers are not supported"
        ),
        "{err}"
    );
}
