//! A one-host `kiln lab` for tests that need a real host (root): up on creation, down on drop.

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
