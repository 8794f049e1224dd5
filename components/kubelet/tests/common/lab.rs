//! A one-host `kiln lab` for tests that need a real host (root): up on creation, down on drop.
//!
//! The tests start the kubelet with `--eviction-hard 'nodefs.available<1Gi,imagefs.available<1Gi'`: a lab host
//! shares this machine's disk, whose fill level (a build cache) is not the host's, so upstream's percentage
//! defaults would reject every pod with DiskPressure on a machine more than 90% full.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

pub const HOST: &str = "host1";

pub fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// target/debug/<name>, next to the test's own deps directory (like tests/lib.rs `bin()`).
pub fn bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let p = exe.parent().and_then(|d| d.parent()).unwrap().join(name);
    assert!(
        p.exists(),
        "{} is missing: run `cargo build --workspace --all-targets` first",
        p.display()
    );
    p
}

pub struct Lab {
    kiln: PathBuf,
    name: String,
}

impl Lab {
    pub fn up(name: &str) -> Lab {
        let kiln = bin("kiln");
        // A lab left by an interrupted run goes first.
        let _ = Command::new(&kiln)
            .args(["lab", "down", "--name", name])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let out = Command::new(&kiln)
            .args(["lab", "up", "--name", name, "--hosts", "1"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "kiln lab up: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Lab {
            kiln,
            name: name.to_string(),
        }
    }

    pub fn exec(&self, argv: &[&str]) -> Command {
        let mut c = Command::new(&self.kiln);
        c.args(["lab", "exec", "--name", &self.name, HOST, "--"])
            .args(argv);
        c
    }

    /// Runs a shell script on the host with `stdin` as its input; returns stdout, panics on failure.
    pub fn sh(&self, script: &str, stdin: &[u8]) -> String {
        let mut child = self
            .exec(&["sh", "-c", script])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(stdin).unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "on {HOST}: {script}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    pub fn put(&self, local: &Path, remote: &str, mode: &str) {
        let bytes = std::fs::read(local).unwrap();
        self.sh(
            &format!("mkdir -p $(dirname {remote}) && cat > {remote} && chmod {mode} {remote}"),
            &bytes,
        );
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        let _ = Command::new(&self.kiln)
            .args(["lab", "down", "--name", &self.name])
            .status();
    }
}

/// The PKI files of an API server that serves only (no kubelet client, no service account tokens): for
/// [`up_with_control_plane`].
pub const APISERVER_ONLY: &[&str] = &["ca.crt", "apiserver.crt", "apiserver.key"];

/// The PKI files of an API server that also talks to the kubelet (logs, exec): for
/// [`up_with_control_plane`].
pub const APISERVER_WITH_KUBELET_CLIENT: &[&str] = &[
    "ca.crt",
    "apiserver.crt",
    "apiserver.key",
    "apiserver-kubelet-client.crt",
    "apiserver-kubelet-client.key",
];

/// A lab host with a control plane on its loopback, the kubelet not started yet: containerd up
/// (tests/cri/host-setup.sh), a PKI and admin/kubelet kubeconfigs for `https://127.0.0.1:6443`, the given
/// PKI files in /etc/kiln/pki, the kubeconfigs in /etc/kiln, kiln-apiserver and this build's kiln-kubelet
/// in /usr/local/bin, then etcd and kiln-apiserver started as host processes (they die with the lab).
/// The API server's flags follow `pki_files`: `apiserver-kubelet-client.*` adds its kubelet client
/// certificate (logs, exec), `sa.key` its service account signing key. The temp dir holds the PKI the
/// test may read (its `pki/` folder).
pub fn up_with_control_plane(name: &str, pki_files: &[&str]) -> (Lab, tempfile::TempDir) {
    let (lab, dir) = up_with_control_plane_files(name, pki_files);
    lab.sh(&control_plane_script(pki_files), b"");
    (lab, dir)
}

/// The shell lines that start etcd and kiln-apiserver in the background (see [`up_with_control_plane`]).
fn control_plane_script(pki_files: &[&str]) -> String {
    let mut apiserver_flags = String::new();
    if pki_files.contains(&"apiserver-kubelet-client.crt") {
        apiserver_flags.push_str(
            " --kubelet-client-certificate /etc/kiln/pki/apiserver-kubelet-client.crt \
              --kubelet-client-key /etc/kiln/pki/apiserver-kubelet-client.key",
        );
    }
    if pki_files.contains(&"sa.key") {
        apiserver_flags.push_str(" --service-account-signing-key-file /etc/kiln/pki/sa.key");
    }
    format!(
        "mkdir -p /var/lib/kiln/etcd /etc/kiln/manifests
         setsid etcd --data-dir /var/lib/kiln/etcd --listen-client-urls http://127.0.0.1:2379 \
           --advertise-client-urls http://127.0.0.1:2379 --listen-peer-urls http://127.0.0.1:2380 \
           >/var/log/etcd.log 2>&1 </dev/null &
         setsid /usr/local/bin/kiln-apiserver --etcd-servers http://127.0.0.1:2379 --bind-address 127.0.0.1 \
           --tls-cert-file /etc/kiln/pki/apiserver.crt --tls-private-key-file /etc/kiln/pki/apiserver.key \
           --client-ca-file /etc/kiln/pki/ca.crt{apiserver_flags} \
           >/var/log/kiln-apiserver.log 2>&1 </dev/null &"
    )
}

/// [`up_with_control_plane`] without starting etcd and the API server.
fn up_with_control_plane_files(name: &str, pki_files: &[&str]) -> (Lab, tempfile::TempDir) {
    use kiln_pki::{
        ensure_kubeconfig, ensure_tree, load_ca, spec, KubeconfigKind, TreeParams, Validity,
    };
    let here = std::path::PathBuf::from(manifest_dir()).join("tests/cri");
    let lab = Lab::up(name);
    assert!(lab
        .sh(
            &std::fs::read_to_string(here.join("host-setup.sh")).unwrap(),
            b""
        )
        .contains("containerd-up"));
    let dir = tempfile::tempdir().unwrap();
    let pki = dir.path().join("pki");
    let mut params = TreeParams::new(HOST);
    params.host_addresses = vec!["127.0.0.1".into()];
    ensure_tree(&pki, &params).unwrap();
    let ca = load_ca(&pki, spec("ca").unwrap()).unwrap();
    let etc = dir.path().join("etc");
    for kind in [
        KubeconfigKind::Admin,
        KubeconfigKind::Kubelet {
            node_name: HOST.into(),
        },
    ] {
        ensure_kubeconfig(
            &etc,
            &ca,
            &kind,
            "kiln",
            "https://127.0.0.1:6443",
            &Validity::default(),
        )
        .unwrap();
    }
    for f in pki_files {
        lab.put(&pki.join(f), &format!("/etc/kiln/pki/{f}"), "0600");
    }
    for f in ["admin.conf", "kubelet.conf"] {
        lab.put(&etc.join(f), &format!("/etc/kiln/{f}"), "0600");
    }
    lab.put(
        &bin("kiln-apiserver"),
        "/usr/local/bin/kiln-apiserver",
        "0755",
    );
    lab.put(
        Path::new(env!("CARGO_BIN_EXE_kiln-kubelet")),
        "/usr/local/bin/kiln-kubelet",
        "0755",
    );
    (lab, dir)
}

/// The crate's directory as cargo says when it runs the test, not as it was when the test was compiled: a
/// warm target directory shared by two checkouts can hold a binary built in the other one.
pub fn manifest_dir() -> String {
    std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").into())
}

/// Polls a shell command on the host until `done(stdout)`; bounded. On timeout it panics with the last
/// output and the tail of the kubelet's log.
pub fn wait_sh(
    lab: &Lab,
    script: &str,
    secs: u64,
    what: &str,
    done: impl Fn(&str) -> bool,
) -> String {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    loop {
        let out = lab
            .exec(&["sh", "-c", script])
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        if out.status.success() && done(&stdout) {
            return stdout;
        }
        if std::time::Instant::now() > deadline {
            let last = format!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
            let logs = lab.sh("tail -n 60 /var/log/kiln-kubelet.log", b"");
            panic!("timed out after {secs}s waiting for {what}; last output:\n{last}\nkubelet log:\n{logs}");
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
}
