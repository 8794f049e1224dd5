//! The store process (etcd or kiln-store) the apiserver runs on.

use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::{free_port, WAIT};

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
