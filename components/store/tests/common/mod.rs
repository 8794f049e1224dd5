//! Shared helpers: in-process members in temp dirs, clients, child processes killed on drop.

#![allow(dead_code)]

pub mod cluster;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use etcd_client::{Client, ConnectOptions};
use kiln_store::{Config, StoreHandle};

/// Bound on every wait in these tests.
pub const WAIT: Duration = Duration::from_secs(20);

pub fn config(dir: &Path) -> Config {
    Config::for_test(dir)
}

pub async fn start(dir: &Path) -> StoreHandle {
    start_with(config(dir)).await
}

pub async fn start_with(config: Config) -> StoreHandle {
    tokio::time::timeout(WAIT, kiln_store::start(config))
        .await
        .expect("store starts in time")
        .expect("store starts")
}

pub fn endpoint(addr: SocketAddr) -> String {
    format!("http://{addr}")
}

pub async fn client(addr: SocketAddr) -> Client {
    let opts = ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(5))
        .with_timeout(Duration::from_secs(10));
    tokio::time::timeout(WAIT, Client::connect([endpoint(addr)], Some(opts)))
        .await
        .expect("connect in time")
        .expect("connect")
}

/// A free loopback port (bound then released; good enough for a child process to take).
pub fn free_port() -> u16 {
    // Below the kernel's ephemeral range (32768-60999), so no outgoing connection of a parallel test can
    // take the port between this check and the server binding it; never the same port twice per process.
    use std::sync::{Mutex, OnceLock};
    static GIVEN: OnceLock<Mutex<std::collections::HashSet<u16>>> = OnceLock::new();
    let given = GIVEN.get_or_init(Default::default);
    let seed = std::process::id() as u64
        ^ std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
    let mut x = seed | 1;
    for _ in 0..10_000 {
        // xorshift: cheap, and different per process and per call
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let port = 20_000 + (x % 12_000) as u16;
        let mut set = given.lock().unwrap();
        if set.contains(&port) {
            continue;
        }
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            set.insert(port);
            return port;
        }
    }
    panic!("no free port in 20000-32000")
}

pub const ETCDCTL: &str = "/usr/bin/etcdctl";
pub const ETCD: &str = "/usr/bin/etcd";

/// Runs etcdctl (API v3) with a timeout; returns its output.
pub fn etcdctl(endpoint: &str, extra: &[&str], args: &[&str], stdin: Option<&str>) -> Output {
    let mut cmd = Command::new(ETCDCTL);
    cmd.env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={endpoint}"))
        .arg("--command-timeout=10s")
        .arg("--dial-timeout=5s")
        .args(extra)
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = KillOnDrop(cmd.spawn().expect("etcdctl runs"));
    if let Some(input) = stdin {
        use std::io::Write;
        let mut pipe = child.0.stdin.take().unwrap();
        pipe.write_all(input.as_bytes()).unwrap();
    }
    wait_output(child, Duration::from_secs(30))
}

/// Waits (bounded) for a child and collects its output; kills it on timeout. Output is read
/// on threads so a chatty child never blocks on a full pipe.
pub fn wait_output(mut child: KillOnDrop, limit: Duration) -> Output {
    use std::io::Read;
    let mut out_pipe = child.0.stdout.take();
    let mut err_pipe = child.0.stderr.take();
    let out_reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        if let Some(p) = out_pipe.as_mut() {
            let _ = p.read_to_end(&mut buf);
        }
        buf
    });
    let err_reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        if let Some(p) = err_pipe.as_mut() {
            let _ = p.read_to_end(&mut buf);
        }
        buf
    });
    let deadline = std::time::Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.0.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.0.kill();
            break child.0.wait().unwrap();
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Output {
        status,
        stdout: out_reader.join().unwrap(),
        stderr: err_reader.join().unwrap(),
    }
}

pub async fn etcdctl_async(endpoint: String, extra: Vec<String>, args: Vec<String>) -> Output {
    tokio::task::spawn_blocking(move || {
        let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        etcdctl(&endpoint, &extra, &args, None)
    })
    .await
    .unwrap()
}

pub fn stdout(out: &Output) -> String {
    assert!(
        out.status.success(),
        "command failed: {}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A child process that is killed when the test ends, however it ends.
pub struct KillOnDrop(pub Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits until `addr` accepts TCP connections.
pub async fn wait_port(addr: SocketAddr) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while tokio::net::TcpStream::connect(addr).await.is_err() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{addr} never opened"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub fn temp_path(dir: &tempfile::TempDir, name: &str) -> PathBuf {
    dir.path().join(name)
}
