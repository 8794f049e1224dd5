//! What the process-level benchmarks share: a release kiln-apiserver started as its own process over
//! the harness's store (etcd 3.4, or kiln-store with `KILN_TEST_STORE_BIN`) with an admin kubeconfig,
//! `/proc` readings (RSS, CPU time), the run's directory, and a plain HTTP/1.0 GET for health and
//! metrics endpoints.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use kiln_testkit::{client_from_kubeconfig, free_port, kubeconfig, Etcd, Pki};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("starting {bin}: {source}")]
    Spawn { bin: String, source: std::io::Error },
    #[error("kiln-apiserver did not become ready: {0}")]
    NotReady(String),
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
}

/// A kiln-apiserver process and the store under it; both stop on drop.
pub struct ApiServer {
    pub child: std::process::Child,
    /// An admin (system:masters) kubeconfig for it.
    pub kubeconfig: PathBuf,
    _etcd: Etcd,
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Spawns `cmd` so that it is killed when this process dies, even by SIGKILL (no leftover servers on
/// the machine after an aborted run).
pub fn spawn_tied(cmd: &mut std::process::Command) -> std::io::Result<std::process::Child> {
    // SAFETY: prctl in the forked child before exec only sets its parent-death signal.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    cmd.spawn()
}

/// Starts the store and `bin` (kiln-apiserver) on 127.0.0.1 with a fresh PKI in `dir`, writes
/// `dir/admin.conf` and waits until the server answers.
pub async fn start_apiserver(bin: &str, dir: &Path) -> Result<ApiServer, StartError> {
    let etcd = Etcd::start().await;
    let pki = Pki::new();
    let write = |name: &str, content: &str| -> std::io::Result<String> {
        let p = dir.join(name);
        std::fs::write(&p, content)?;
        Ok(p.to_string_lossy().into_owned())
    };
    let serving = pki.serving();
    let port = free_port();
    let child = spawn_tied(
        std::process::Command::new(bin)
            .args([
                format!("--etcd-servers={}", etcd.endpoint),
                "--bind-address=127.0.0.1".into(),
                format!("--secure-port={port}"),
                format!("--tls-cert-file={}", write("apiserver.crt", &serving.cert)?),
                format!(
                    "--tls-private-key-file={}",
                    write("apiserver.key", &serving.key)?
                ),
                format!("--client-ca-file={}", write("ca.crt", &pki.ca.cert)?),
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null()),
    )
    .map_err(|source| StartError::Spawn {
        bin: bin.to_string(),
        source,
    })?;
    let path = dir.join("admin.conf");
    let server = ApiServer {
        child,
        kubeconfig: path.clone(),
        _etcd: etcd,
    };
    let admin = pki.client("kubernetes-admin", &["system:masters"]);
    std::fs::write(
        &path,
        kubeconfig(
            &format!("https://127.0.0.1:{port}"),
            &pki.ca.cert,
            &admin,
            "kubernetes-admin",
        ),
    )?;
    let client = client_from_kubeconfig(&path).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while let Err(e) = client.apiserver_version().await {
        if Instant::now() > deadline {
            return Err(StartError::NotReady(e.to_string()));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(server)
}

/// The run's directory, removed however the run ends: it holds a CA key, and a run piped into
/// `head` dies of a failed write to stderr (a panic) before it would reach a removal at its end.
pub struct RunDir(pub PathBuf);

impl RunDir {
    /// `$TMPDIR/kiln-bench-<what>-<pid>`, created.
    pub fn create(what: &str) -> std::io::Result<RunDir> {
        let dir =
            RunDir(std::env::temp_dir().join(format!("kiln-bench-{what}-{}", std::process::id())));
        std::fs::create_dir_all(&dir.0)?;
        Ok(dir)
    }
}

impl Drop for RunDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `VmRSS` / `VmHWM` of a process, MiB.
pub fn memory_mib(pid: u32, field: &str) -> f64 {
    status_field(pid, field)
        .map(|kib| kib / 1024.0)
        .unwrap_or(0.0)
}

/// A numeric field of `/proc/<pid>/status` (`VmRSS:`, `Threads:`, …), its first number.
pub fn status_field(pid: u32, field: &str) -> Option<f64> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find(|l| l.starts_with(field))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// User + system CPU time a process (all its threads) has used so far.
pub fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The command name (field 2) may hold spaces; the fields after it start past its ')'.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<u64> = rest
        .split_whitespace()
        .map(|v| v.parse().unwrap_or(0))
        .collect();
    // utime and stime are fields 14 and 15 of stat, 12 and 13 of what follows ')' (from 0).
    let ticks = f.get(11).copied().unwrap_or(0) + f.get(12).copied().unwrap_or(0);
    // SAFETY: sysconf only reads a constant of the system.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Duration::from_micros(ticks * 1_000_000 / hz)
}

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// One plain HTTP/1.0 GET: the status code and the body, or `None` when the server does not answer.
pub async fn http_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
    s.set_nodelay(true).ok()?;
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").as_bytes())
        .await
        .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).await.ok()?;
    let code = out.split_whitespace().nth(1)?.parse().ok()?;
    let body = out.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    Some((code, body.to_string()))
}

/// Samples of a Prometheus text exposition, keyed by name with labels (`name{label="v"}`).
pub fn parse_metrics(body: &str) -> BTreeMap<String, f64> {
    body.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (k, v) = l.rsplit_once(' ')?;
            Some((k.to_string(), v.parse().ok()?))
        })
        .collect()
}

/// What a Prometheus scrape of `addr/metrics` would read.
pub async fn metrics(addr: SocketAddr) -> Option<BTreeMap<String, f64>> {
    let (_, body) = http_get(addr, "/metrics").await?;
    Some(parse_metrics(&body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_text_to_samples() {
        let m = parse_metrics(
            "# HELP x y\n# TYPE a counter\na_total 3\nb{resource=\"s\"} 1.5\nbroken\n",
        );
        assert_eq!(m.get("a_total"), Some(&3.0));
        assert_eq!(m.get("b{resource=\"s\"}"), Some(&1.5));
        assert_eq!(m.len(), 2);
    }

    #[test]
    fn own_cpu_time_and_status() {
        let pid = std::process::id();
        let t = Instant::now();
        while t.elapsed() < Duration::from_millis(50) {
            std::hint::black_box(0u64);
        }
        assert!(cpu_time(pid) > Duration::ZERO);
        assert!(memory_mib(pid, "VmRSS:") > 0.0);
        assert!(status_field(pid, "Threads:").unwrap_or(0.0) >= 1.0);
    }
}
