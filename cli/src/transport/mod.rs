//! The Transport trait: how the CLI runs commands and moves files on a host — over SSH (russh) or
//! locally (`--local` runs and tests).
//!
//! File operations are shell scripts run through `exec`, so both implementations share one behaviour:
//! uploads go to a temp file beside the target, are checked with `sha256sum` on the host, get their
//! mode, and are renamed into place (readers never see half a file; a failed upload leaves nothing).

mod error;
mod host_key_check;
pub mod known_hosts;
mod local;
mod ssh;
pub mod sudo;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use sha2::{Digest, Sha256};
use tokio::io::AsyncReadExt;
use tokio::sync::OnceCell;

use crate::config::{ClusterFile, Host};
pub use error::{HostKey, Result, Target, TransportError};
pub use host_key_check::HostKeyPolicy;
pub use local::LocalTransport;
pub use ssh::{BastionOptions, SshOptions, SshTransport, MAX_CHANNELS};

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExecOutput {
    /// Exit status; 128+N when killed by signal N (as shells report it).
    pub status: i32,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

impl ExecOutput {
    pub fn success(&self) -> bool {
        self.status == 0
    }
    pub fn stdout_str(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }
    pub fn stderr_str(&self) -> String {
        String::from_utf8_lossy(&self.stderr).into_owned()
    }
}

/// What to upload: bytes in memory, or a local file streamed from disk (binaries are large).
#[derive(Debug, Clone, Copy)]
pub enum Payload<'a> {
    Bytes(&'a [u8]),
    File(&'a Path),
}

impl<'a> From<&'a [u8]> for Payload<'a> {
    fn from(b: &'a [u8]) -> Self {
        Payload::Bytes(b)
    }
}
impl<'a> From<&'a Vec<u8>> for Payload<'a> {
    fn from(b: &'a Vec<u8>) -> Self {
        Payload::Bytes(b)
    }
}
impl<'a> From<&'a str> for Payload<'a> {
    fn from(s: &'a str) -> Self {
        Payload::Bytes(s.as_bytes())
    }
}
impl<'a> From<&'a Path> for Payload<'a> {
    fn from(p: &'a Path) -> Self {
        Payload::File(p)
    }
}
impl<'a> From<&'a PathBuf> for Payload<'a> {
    fn from(p: &'a PathBuf) -> Self {
        Payload::File(p)
    }
}

#[async_trait]
pub trait Transport: Send + Sync {
    /// The host's name (from cluster.yaml), for messages.
    fn host(&self) -> &str;

    /// Runs `cmd` with `sh -c` semantics (as root: through sudo where configured). A non-zero exit is
    /// not an error here; see [`Transport::run`].
    async fn exec(&self, cmd: &str, stdin: Option<&[u8]>) -> Result<ExecOutput>;

    /// Runs `cmd`, which only looks (hashes, tests, diffs, reads), as `exec` does. The caller says it is
    /// read-only, so a dry run forwards it to the host instead of guessing that from the command's text
    /// (`dry_run::is_probe`, still the rule for plain `exec`).
    async fn probe(&self, cmd: &str, stdin: Option<&[u8]>) -> Result<ExecOutput> {
        self.exec(cmd, stdin).await
    }

    /// Installs `src` at the absolute path `remote` with `mode` (e.g. 0o644), creating parent folders,
    /// verified by sha256 on the host and renamed into place atomically.
    async fn upload(&self, src: Payload<'_>, remote: &str, mode: u32) -> Result<()>;

    /// The contents of `remote`; an error if it cannot be read.
    async fn download(&self, remote: &str) -> Result<Vec<u8>> {
        let out = self
            .probe(&format!("cat -- {}", shell_quote(remote)), None)
            .await?;
        check(self.host(), &format!("download {remote}"), out).map(|o| o.stdout)
    }

    /// The contents of `remote`, or None when it does not exist.
    async fn read_file(&self, remote: &str) -> Result<Option<Vec<u8>>> {
        let q = shell_quote(remote);
        let cmd = format!("if [ -e {q} ]; then exec cat -- {q}; else exit {MISSING_STATUS}; fi");
        let out = self.probe(&cmd, None).await?;
        if out.status == MISSING_STATUS {
            return Ok(None);
        }
        check(self.host(), &format!("read {remote}"), out).map(|o| Some(o.stdout))
    }

    /// Runs `cmd` and returns its stdout; a non-zero exit is an error carrying stderr.
    async fn run(&self, cmd: &str) -> Result<String> {
        let out = self.exec(cmd, None).await?;
        check(self.host(), &short(cmd), out).map(|o| o.stdout_str())
    }
}

/// Exit status `read_file` uses for "no such file" (cat itself exits 1).
const MISSING_STATUS: i32 = 44;
/// Exit status of the upload script when the checksum on the host differs.
const CHECKSUM_STATUS: i32 = 97;

fn check(host: &str, step: &str, out: ExecOutput) -> Result<ExecOutput> {
    if out.success() {
        Ok(out)
    } else {
        Err(TransportError::Remote {
            host: host.to_string(),
            step: step.to_string(),
            status: out.status,
            stderr: out.stderr_str(),
        })
    }
}

fn short(cmd: &str) -> String {
    let line = cmd.lines().next().unwrap_or("");
    if line.len() > 80 || cmd.contains('\n') {
        let cut = line
            .char_indices()
            .nth(77)
            .map(|(i, _)| i)
            .unwrap_or(line.len());
        format!("`{}...`", &line[..cut])
    } else {
        format!("`{line}`")
    }
}

/// Quotes `s` as one word for POSIX sh.
pub fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+:=@,%".contains(c))
    {
        return s.to_string();
    }
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// sha256 (hex) and length of a payload, streaming files.
pub async fn payload_digest(src: Payload<'_>) -> std::io::Result<(String, u64)> {
    match src {
        Payload::Bytes(b) => Ok((hex::encode(Sha256::digest(b)), b.len() as u64)),
        Payload::File(p) => {
            let mut f = tokio::fs::File::open(p).await?;
            let mut hasher = Sha256::new();
            let mut buf = vec![0u8; 256 * 1024];
            let mut len = 0u64;
            loop {
                let n = f.read(&mut buf).await?;
                if n == 0 {
                    break;
                }
                hasher.update(&buf[..n]);
                len += n as u64;
            }
            Ok((hex::encode(hasher.finalize()), len))
        }
    }
}

/// The script behind `upload`: it reads the content from stdin.
fn upload_script(remote: &str, sha256: &str, mode: u32) -> std::result::Result<String, String> {
    if !remote.starts_with('/') || remote.ends_with('/') {
        return Err(format!(
            "remote path '{remote}' must be an absolute file path"
        ));
    }
    let (dir, name) = remote.rsplit_once('/').expect("absolute path has a slash");
    let dir = if dir.is_empty() { "/" } else { dir };
    let tmp = format!("{dir}/.{name}.kiln-XXXXXX");
    Ok(format!(
        "set -e\n\
         mkdir -p -- {qdir}\n\
         tmp=$(mktemp -- {qtmp})\n\
         trap 'rm -f -- \"$tmp\"' EXIT\n\
         trap 'exit 129' HUP\n\
         trap 'exit 130' INT\n\
         trap 'exit 143' TERM\n\
         trap 'exit 141' PIPE\n\
         cat > \"$tmp\"\n\
         sum=$(sha256sum -- \"$tmp\")\n\
         sum=${{sum%% *}}\n\
         if [ \"$sum\" != {sha256} ]; then echo \"sha256 mismatch: sent {sha256}, wrote $sum\" >&2; exit {CHECKSUM_STATUS}; fi\n\
         chmod {mode:o} -- \"$tmp\"\n\
         mv -f -- \"$tmp\" {qremote}\n\
         trap - EXIT\n",
        qdir = shell_quote(dir),
        qtmp = shell_quote(&tmp),
        qremote = shell_quote(remote),
    ))
}

fn upload_result(host: &str, remote: &str, out: ExecOutput) -> Result<()> {
    let step = if out.status == CHECKSUM_STATUS {
        format!("upload {remote}: sha256 verification")
    } else {
        format!("upload {remote}")
    };
    check(host, &step, out).map(|_| ())
}

/// How `connect` reaches hosts.
#[derive(Debug, Clone)]
pub struct ConnectOptions {
    /// Run everything on this machine instead of over SSH (`--local`).
    pub local: bool,
    pub host_key_policy: HostKeyPolicy,
    /// Overrides the cluster's known_hosts file.
    pub known_hosts: Option<PathBuf>,
    pub connect_timeout: Duration,
    pub exec_timeout: Duration,
    pub sudo_passwords: sudo::SudoPasswords,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        ConnectOptions {
            local: false,
            host_key_policy: HostKeyPolicy::Strict,
            known_hosts: None,
            connect_timeout: Duration::from_secs(15),
            exec_timeout: Duration::from_secs(600),
            sudo_passwords: Default::default(),
        }
    }
}

/// SSH settings for `host` from cluster.yaml (paths resolved beside the file).
pub fn ssh_options(cluster: &ClusterFile, host: &Host, opts: &ConnectOptions) -> SshOptions {
    let key_file = cluster.key_file(host);
    SshOptions {
        name: host.name.clone(),
        address: host.address.clone(),
        port: host.ssh.port,
        user: host.ssh.user.clone(),
        key_file: key_file.clone(),
        bastion: host.ssh.bastion.as_ref().map(|b| BastionOptions {
            address: b.address.clone(),
            port: b.port,
            user: b.user.clone().unwrap_or_else(|| host.ssh.user.clone()),
            key_file: b
                .key_file
                .as_deref()
                .map(|p| cluster.resolve(p))
                .or(key_file),
        }),
        sudo: host.ssh.uses_sudo(),
        sudo_passwords: opts.sudo_passwords.clone(),
        known_hosts: opts
            .known_hosts
            .clone()
            .unwrap_or_else(|| cluster.known_hosts_file()),
        host_key_policy: opts.host_key_policy,
        connect_timeout: opts.connect_timeout,
        exec_timeout: opts.exec_timeout,
        agent_socket: std::env::var_os("SSH_AUTH_SOCK").map(PathBuf::from),
    }
}

/// Opens a transport to `host`: local when asked for, SSH otherwise.
pub async fn connect(
    cluster: &ClusterFile,
    host: &Host,
    opts: &ConnectOptions,
) -> Result<Arc<dyn Transport>> {
    if opts.local {
        return Ok(Arc::new(
            LocalTransport::new(&host.name).with_timeout(opts.exec_timeout),
        ));
    }
    Ok(Arc::new(
        SshTransport::connect(ssh_options(cluster, host, opts)).await?,
    ))
}

/// Per host name: its transport once connected (the cell makes concurrent first uses share one attempt).
type OpenTransports = HashMap<String, Arc<OnceCell<Arc<dyn Transport>>>>;

/// One transport per host, opened on first use and shared by every phase: a single multiplexed SSH
/// connection per host (its channels bounded by [`MAX_CHANNELS`]).
pub struct Connections {
    cluster: ClusterFile,
    opts: ConnectOptions,
    open: std::sync::Mutex<OpenTransports>,
}

impl Connections {
    pub fn new(cluster: ClusterFile, opts: ConnectOptions) -> Self {
        Connections {
            cluster,
            opts,
            open: Default::default(),
        }
    }

    /// The transport for the host named `name`, connecting on first use. Concurrent callers for one host
    /// share one connection attempt; different hosts connect in parallel. A failed attempt is not cached.
    pub async fn get(&self, name: &str) -> Result<Arc<dyn Transport>> {
        let host = self
            .cluster
            .config
            .host(name)
            .ok_or_else(|| TransportError::Other {
                host: name.to_string(),
                step: "connect",
                message: "no such host in cluster.yaml".into(),
            })?;
        let cell = self
            .open
            .lock()
            .expect("lock")
            .entry(name.to_string())
            .or_default()
            .clone();
        cell.get_or_try_init(|| connect(&self.cluster, host, &self.opts))
            .await
            .cloned()
    }

    /// Connects to every named host in parallel; every host is tried, the first error is returned.
    pub async fn connect_all(&self, names: &[String]) -> Result<Vec<Arc<dyn Transport>>> {
        futures::future::join_all(names.iter().map(|n| self.get(n)))
            .await
            .into_iter()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting() {
        assert_eq!(shell_quote("/etc/kiln/pki/ca.crt"), "/etc/kiln/pki/ca.crt");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote(""), "''");
        assert_eq!(shell_quote("$(rm -rf /)"), "'$(rm -rf /)'");
    }

    #[test]
    fn upload_script_rejects_relative_paths() {
        assert!(upload_script("etc/x", "00", 0o644).is_err());
        assert!(upload_script("/etc/", "00", 0o644).is_err());
        let s = upload_script("/etc/kiln/my file", "ab", 0o600).unwrap();
        assert!(s.contains("mkdir -p -- /etc/kiln\n"), "{s}");
        assert!(
            s.contains("mktemp -- '/etc/kiln/.my file.kiln-XXXXXX'"),
            "{s}"
        );
        assert!(s.contains("chmod 600 --"), "{s}");
        assert!(s.contains("mv -f -- \"$tmp\" '/etc/kiln/my file'"), "{s}");
    }

    #[test]
    fn short_commands() {
        assert_eq!(short("uname -a"), "`uname -a`");
        assert!(short(&"x".repeat(200)).ends_with("...`"));
        assert_eq!(short("set -e\nfoo"), "`set -e...`");
    }
}
