//! A store, a PKI and an in-process kiln-apiserver, with kubeconfigs, clients and kubectl.

use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine;
use clap::Parser;

use crate::{client_from_kubeconfig, Etcd, Pair, Pki, StoreTls};

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

/// etcd + PKI + an in-process apiserver, with kubeconfigs for an admin and a node.
pub struct Cluster {
    pub server: kiln_apiserver::RunningServer,
    pub etcd: Etcd,
    pub pki: Pki,
    pub dir: tempfile::TempDir,
    pub url: String,
    pub admin_kubeconfig: PathBuf,
    pub node_kubeconfig: PathBuf,
}

impl Cluster {
    pub async fn start() -> Cluster {
        Self::start_with(&[]).await
    }

    pub async fn start_with(extra_flags: &[&str]) -> Cluster {
        Self::start_opts(extra_flags, false).await
    }

    /// Extra flags computed from the cluster's PKI (e.g. certificate files it must issue first),
    /// written into the given directory.
    pub async fn start_with_pki_flags(flags: impl FnOnce(&Pki, &Path) -> Vec<String>) -> Cluster {
        Self::start_full(&[], false, flags).await
    }

    /// `store_tls`: the store serves TLS and requires the apiserver's client certificate.
    pub async fn start_opts(extra_flags: &[&str], store_tls: bool) -> Cluster {
        Self::start_full(extra_flags, store_tls, |_, _| Vec::new()).await
    }

    async fn start_full(
        extra_flags: &[&str],
        store_tls: bool,
        pki_flags: impl FnOnce(&Pki, &Path) -> Vec<String>,
    ) -> Cluster {
        let pki = Pki::new();
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, content: &str| {
            let p = dir.path().join(name);
            std::fs::write(&p, content).unwrap();
            p.to_string_lossy().into_owned()
        };
        let ca = write("ca.crt", &pki.ca.cert);
        let serving = pki.serving();
        let cert = write("apiserver.crt", &serving.cert);
        let key = write("apiserver.key", &serving.key);
        let mut store_flags = Vec::new();
        let etcd = if store_tls {
            let server = pki.serving_as("kiln-store");
            let client = pki.client("kube-apiserver-etcd-client", &[]);
            let tls = StoreTls {
                ca: ca.clone(),
                server_cert: write("store-server.crt", &server.cert),
                server_key: write("store-server.key", &server.key),
                client_cert: write("apiserver-store-client.crt", &client.cert),
                client_key: write("apiserver-store-client.key", &client.key),
            };
            store_flags = vec![
                format!("--etcd-cafile={}", tls.ca),
                format!("--etcd-certfile={}", tls.client_cert),
                format!("--etcd-keyfile={}", tls.client_key),
            ];
            Etcd::start_with(Some(&tls)).await
        } else {
            Etcd::start().await
        };
        let mut args = vec![
            "kiln-apiserver".to_string(),
            format!("--etcd-servers={}", etcd.endpoint),
            "--bind-address=127.0.0.1".into(),
            "--secure-port=0".into(),
            format!("--tls-cert-file={cert}"),
            format!("--tls-private-key-file={key}"),
            format!("--client-ca-file={ca}"),
        ];
        args.extend(store_flags);
        args.extend(extra_flags.iter().map(|s| s.to_string()));
        args.extend(pki_flags(&pki, dir.path()));
        let server = kiln_apiserver::start(kiln_apiserver::Options::parse_from(args))
            .await
            .expect("apiserver starts");
        let url = format!("https://{}", server.local_addr());
        let admin = pki.client("kubernetes-admin", &["system:masters"]);
        let node = pki.client("system:node:n1", &["system:nodes"]);
        let admin_kubeconfig = dir.path().join("admin.conf");
        std::fs::write(
            &admin_kubeconfig,
            kubeconfig(&url, &pki.ca.cert, &admin, "kubernetes-admin"),
        )
        .unwrap();
        let node_kubeconfig = dir.path().join("kubelet.conf");
        std::fs::write(
            &node_kubeconfig,
            kubeconfig(&url, &pki.ca.cert, &node, "system:node:n1"),
        )
        .unwrap();
        Cluster {
            server,
            etcd,
            pki,
            dir,
            url,
            admin_kubeconfig,
            node_kubeconfig,
        }
    }

    /// A kubeconfig for any user, written into the cluster's temp dir.
    pub fn kubeconfig_for(&self, user: &str, groups: &[&str]) -> PathBuf {
        let pair = self.pki.client(user, groups);
        let path = self
            .dir
            .path()
            .join(format!("{}.conf", user.replace(':', "_")));
        std::fs::write(&path, kubeconfig(&self.url, &self.pki.ca.cert, &pair, user)).unwrap();
        path
    }

    pub async fn client(&self, kubeconfig: &Path) -> kube::Client {
        client_from_kubeconfig(kubeconfig).await
    }

    pub async fn admin(&self) -> kube::Client {
        self.client(&self.admin_kubeconfig).await
    }

    /// A client that trusts the CA but presents no certificate.
    pub fn anonymous(&self) -> kube::Client {
        let mut config = kube::Config::new(self.url.parse().unwrap());
        let der = rustls_pemfile::certs(&mut self.pki.ca.cert.as_bytes())
            .next()
            .unwrap()
            .unwrap();
        config.root_cert = Some(vec![der.to_vec()]);
        kube::Client::try_from(config).unwrap()
    }

    /// Runs the real kubectl with a bounded wait; returns (success, stdout, stderr).
    pub async fn kubectl(&self, kubeconfig: &Path, args: &[&str]) -> (bool, String, String) {
        self.kubectl_bin("kubectl", kubeconfig, args).await
    }

    /// Another kubectl release, e.g. `kubectl.1.27`: the releases kiln's tests use live beside
    /// `kubectl` (the folder `readlink -f $(which kubectl)` points into).
    pub async fn kubectl_bin(
        &self,
        binary: &str,
        kubeconfig: &Path,
        args: &[&str],
    ) -> (bool, String, String) {
        let cache = self.dir.path().join(format!("{binary}-cache"));
        let mut cmd = tokio::process::Command::new(kubectl_release(binary));
        cmd.arg("--kubeconfig")
            .arg(kubeconfig)
            .arg("--cache-dir")
            .arg(&cache)
            .arg("--request-timeout=20s")
            .args(args)
            .kill_on_drop(true);
        let out = tokio::time::timeout(Duration::from_secs(60), cmd.output())
            .await
            .unwrap_or_else(|_| panic!("{binary} {args:?} timed out"))
            .unwrap_or_else(|e| panic!("run {binary}: {e}"));
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// kubectl as admin; panics with its output when it fails.
    pub async fn kubectl_ok(&self, args: &[&str]) -> String {
        let (ok, out, err) = self.kubectl(&self.admin_kubeconfig, args).await;
        assert!(ok, "kubectl {args:?} failed:\nstdout: {out}\nstderr: {err}");
        out
    }
}

/// `kubectl` itself, or another release's binary from the folder the installed kubectl resolves into
/// (where `kubectl.1.27` … live; they are not on PATH).
fn kubectl_release(binary: &str) -> std::path::PathBuf {
    if binary == "kubectl" || binary.contains('/') {
        return binary.into();
    }
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join("kubectl"))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("no kubectl on PATH to find {binary} beside"));
    let real = std::fs::canonicalize(&on_path).unwrap_or(on_path);
    real.with_file_name(binary)
}

pub fn kubeconfig(url: &str, ca_pem: &str, client: &Pair, user: &str) -> String {
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: kiln
  cluster:
    server: {url}
    certificate-authority-data: {ca}
users:
- name: {user}
  user:
    client-certificate-data: {cert}
    client-key-data: {key}
contexts:
- name: {user}@kiln
  context:
    cluster: kiln
    user: {user}
current-context: {user}@kiln
",
        ca = b64(ca_pem),
        cert = b64(&client.cert),
        key = b64(&client.key),
    )
}

/// Splits kubectl's table output into rows of whitespace-separated cells (header first).
pub fn rows(output: &str) -> Vec<Vec<String>> {
    output
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.split_whitespace().map(str::to_string).collect())
        .collect()
}
