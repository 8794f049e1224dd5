//! Test harness: a real etcd 3.4 in a temp dir, a PKI made with rcgen, kubeconfigs, and a
//! kiln-apiserver started in-process on 127.0.0.1:0. Everything is torn down on drop.
#![allow(dead_code)]

use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use base64::Engine;
use clap::Parser;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};

/// Bounded wait for anything the tests poll.
pub const WAIT: Duration = Duration::from_secs(30);

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// The store binary the suite runs on: a real etcd 3.4 by default; set `KILN_TEST_STORE_BIN` to a
/// kiln-store binary (it takes etcd's flags) to run the same suite on kiln-store.
pub fn store_binary() -> String {
    std::env::var("KILN_TEST_STORE_BIN").unwrap_or_else(|_| "/usr/bin/etcd".to_string())
}

/// A store process (etcd or kiln-store) on loopback; killed on drop, and by the kernel if the test
/// process dies first.
pub struct Etcd {
    child: Child,
    pub endpoint: String,
    options: Option<etcd_client::ConnectOptions>,
    _dir: tempfile::TempDir,
}

/// Files for a store that serves TLS and requires client certificates.
pub struct StoreTls {
    pub ca: String,
    pub server_cert: String,
    pub server_key: String,
    pub client_cert: String,
    pub client_key: String,
}

impl Etcd {
    pub async fn start() -> Etcd {
        Self::start_with(None).await
    }

    pub async fn start_with(tls: Option<&StoreTls>) -> Etcd {
        let dir = tempfile::tempdir().expect("tempdir");
        let scheme = if tls.is_some() { "https" } else { "http" };
        let client = format!("{scheme}://127.0.0.1:{}", free_port());
        let peer = format!("http://127.0.0.1:{}", free_port());
        let log = std::fs::File::create(dir.path().join("etcd.log")).expect("log file");
        let mut cmd = Command::new(store_binary());
        // SAFETY: prctl in the forked child before exec only sets its parent-death signal.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        if let Some(tls) = tls {
            cmd.args(["--cert-file", &tls.server_cert])
                .args(["--key-file", &tls.server_key])
                .args(["--trusted-ca-file", &tls.ca])
                .arg("--client-cert-auth");
        }
        let child = cmd
            .args(["--name", "default"])
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .args(["--listen-client-urls", &client])
            .args(["--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer])
            .args(["--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &format!("default={peer}")])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", store_binary()));
        let etcd = Etcd {
            child,
            endpoint: client,
            options: tls.map(|t| {
                etcd_client::ConnectOptions::new().with_tls(
                    etcd_client::TlsOptions::new()
                        .ca_certificate(etcd_client::Certificate::from_pem(
                            std::fs::read(&t.ca).unwrap(),
                        ))
                        .identity(etcd_client::Identity::from_pem(
                            std::fs::read(&t.client_cert).unwrap(),
                            std::fs::read(&t.client_key).unwrap(),
                        )),
                )
            }),
            _dir: dir,
        };
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            if let Ok(mut c) =
                etcd_client::Client::connect([&etcd.endpoint], etcd.options.clone()).await
            {
                if c.get("health", None).await.is_ok() {
                    break;
                }
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{} did not come up",
                store_binary()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        etcd
    }

    pub async fn client(&self) -> etcd_client::Client {
        etcd_client::Client::connect([&self.endpoint], self.options.clone())
            .await
            .expect("etcd client")
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// PEM cert + key.
pub struct Pair {
    pub cert: String,
    pub key: String,
}

pub struct Pki {
    pub ca: Pair,
    issuer: Issuer<'static, KeyPair>,
}

impl Pki {
    pub fn new() -> Pki {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, "kiln-test-ca");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let cert = params.self_signed(&key).unwrap();
        let ca = Pair {
            cert: cert.pem(),
            key: key.serialize_pem(),
        };
        Pki {
            ca,
            issuer: Issuer::new(params, key),
        }
    }

    pub fn serving(&self) -> Pair {
        self.serving_as("kube-apiserver")
    }

    /// A serving certificate for 127.0.0.1 / localhost.
    pub fn serving_as(&self, cn: &str) -> Pair {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(vec!["localhost".to_string()]).unwrap();
        params
            .subject_alt_names
            .push(SanType::IpAddress("127.0.0.1".parse().unwrap()));
        params.distinguished_name.push(DnType::CommonName, cn);
        // etcd also dials itself (its gRPC gateway) with its serving certificate.
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        Pair {
            cert: cert.pem(),
            key: key.serialize_pem(),
        }
    }

    /// A client certificate: CN = user, O = groups.
    pub fn client(&self, user: &str, groups: &[&str]) -> Pair {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, user);
        for g in groups {
            params.distinguished_name.push(DnType::OrganizationName, *g);
        }
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        Pair {
            cert: cert.pem(),
            key: key.serialize_pem(),
        }
    }
}

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
        let kc = kube::config::Kubeconfig::read_from(kubeconfig).unwrap();
        let config =
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .unwrap();
        kube::Client::try_from(config).unwrap()
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
        let cache = self.dir.path().join("kubectl-cache");
        let mut cmd = tokio::process::Command::new("kubectl");
        cmd.arg("--kubeconfig")
            .arg(kubeconfig)
            .arg("--cache-dir")
            .arg(&cache)
            .arg("--request-timeout=20s")
            .args(args)
            .kill_on_drop(true);
        let out = tokio::time::timeout(Duration::from_secs(60), cmd.output())
            .await
            .unwrap_or_else(|_| panic!("kubectl {args:?} timed out"))
            .expect("run kubectl");
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
