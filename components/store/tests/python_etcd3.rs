//! python-etcd3's own pytest suite (the etcd3 0.12.0 sdist from PyPI, unmodified, installed by
//! .ci/install-packages) against a 3-member etcd 3.4 and then a 3-member kiln-store: every test
//! that passes on etcd must pass on kiln-store.
//!
//! Both clusters run as processes named `pifpaf`, `pifpaf1` and `pifpaf2`, the names the suite's
//! upstream runner (pifpaf) gives them: its serializable-read tests SIGSTOP the processes whose
//! command line has `--name pifpaf[12]` to take the quorum away. The client and etcdctl find the
//! first member through `kiln_endpoint.py` (tests/clients/python-etcd3) and ETCDCTL_ENDPOINTS;
//! the plugin also cuts hypothesis' inputs per property test to 20 (each runs etcdctl).

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::KillOnDrop;

const VENV: &str = "/var/cache/kiln-python-etcd3";
const SUITE: &str = "/var/cache/kiln-python-etcd3/src/etcd3-0.12.0";
/// pifpaf's member names, first the one clients talk to.
const NAMES: [&str; 3] = ["pifpaf", "pifpaf1", "pifpaf2"];

/// One suite run: which tests passed, and how many ran.
struct Score {
    passed: BTreeSet<String>,
    ran: usize,
}

/// A 3-member cluster of `bin` (etcd or kiln-store: they take the same flags) and the first
/// member's client port.
async fn start_cluster(bin: &str, dir: &Path, extra: &[&str]) -> (u16, Vec<KillOnDrop>) {
    let clients: Vec<u16> = NAMES.iter().map(|_| common::free_port()).collect();
    let peers: Vec<String> = NAMES
        .iter()
        .map(|_| format!("http://127.0.0.1:{}", common::free_port()))
        .collect();
    let initial = NAMES
        .iter()
        .zip(&peers)
        .map(|(n, p)| format!("{n}={p}"))
        .collect::<Vec<_>>()
        .join(",");
    let mut members = Vec::new();
    for (i, name) in NAMES.iter().enumerate() {
        let client = format!("http://127.0.0.1:{}", clients[i]);
        let log = std::fs::File::create(dir.join(format!("{name}.log"))).unwrap();
        let child = Command::new(bin)
            // Two arguments, as pifpaf passes them: the suite's pgrep looks for "--name pifpaf1".
            .args(["--name", name])
            .arg(format!("--data-dir={}", dir.join(name).display()))
            .arg(format!("--listen-client-urls={client}"))
            .arg(format!("--advertise-client-urls={client}"))
            .arg(format!("--listen-peer-urls={}", peers[i]))
            .arg(format!("--initial-advertise-peer-urls={}", peers[i]))
            .arg(format!("--initial-cluster={initial}"))
            .arg("--initial-cluster-state=new")
            .args(extra)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("{bin} runs: {e}"));
        members.push(KillOnDrop(child));
    }
    let addr = format!("127.0.0.1:{}", clients[0]).parse().unwrap();
    common::wait_port(addr).await;
    let c = common::client(addr).await;
    // A linearizable read (it needs a leader), writing nothing: the suite counts every key.
    common::cluster::retry("cluster ready", || {
        let mut c = c.clone();
        async move { c.get("ready", None).await }
    })
    .await;
    (clients[0], members)
}

/// Runs the suite against 127.0.0.1:`port`, parsing pytest's `-rA` summary: a test passed when
/// it has a PASSED line and no ERROR line (a teardown error follows a pass).
async fn run_suite(port: u16, out: PathBuf) -> Score {
    let plugin = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients/python-etcd3");
    tokio::task::spawn_blocking(move || {
        let child = Command::new(format!("{VENV}/bin/python"))
            .args([
                "-m",
                "pytest",
                "-p",
                "no:cacheprovider",
                "-p",
                "kiln_endpoint",
                "-W",
                "ignore::DeprecationWarning",
                "-rA",
                "-q",
                "tests/test_etcd3.py",
            ])
            .current_dir(SUITE)
            .env("PYTHONPATH", &plugin)
            .env("KILN_ETCD_HOST", "127.0.0.1")
            .env("KILN_ETCD_PORT", port.to_string())
            .env("ETCDCTL_ENDPOINTS", format!("http://127.0.0.1:{port}"))
            .env("TEST_ETCD_VERSION", "v3.4.23")
            // 20 inputs per property test instead of 100, on both servers: CI time.
            .env("KILN_HYPOTHESIS_EXAMPLES", "20")
            .env_remove("PYTHON_ETCD_HTTP_URL")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("pytest runs");
        let output = common::wait_output(KillOnDrop(child), Duration::from_secs(600));
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        std::fs::write(&out, &text).unwrap();
        let mut passed = BTreeSet::new();
        let mut failed = BTreeSet::new();
        for line in text.lines() {
            let mut words = line.split_whitespace();
            let (Some(status), Some(mut id)) = (words.next(), words.next()) else {
                continue;
            };
            if id == "at" {
                // "ERROR at setup of tests/...::name"
                id = words.nth(2).unwrap_or("");
            }
            if !id.starts_with("tests/") {
                continue;
            }
            match status {
                "PASSED" => passed.insert(id.to_string()),
                "FAILED" | "ERROR" => failed.insert(id.to_string()),
                _ => false,
            };
        }
        let ran = passed.union(&failed).count();
        passed.retain(|t| !failed.contains(t));
        Score { passed, ran }
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_etcd3_suite_passes_on_kiln_store_where_it_passes_on_etcd() {
    let have = [common::ETCD, common::ETCDCTL, SUITE]
        .iter()
        .all(|p| Path::new(p).exists());
    if !have {
        eprintln!(
            "skipping: etcd, etcdctl or {SUITE} missing (.ci/install-packages installs them)"
        );
        return;
    }
    // Six members' data (etcd preallocates 64 MB WAL segments) need not touch the disk.
    let dir = match Path::new("/dev/shm").is_dir() {
        true => tempfile::tempdir_in("/dev/shm").unwrap(),
        false => tempfile::tempdir().unwrap(),
    };
    let etcd_dir = dir.path().join("etcd");
    let kiln_dir = dir.path().join("kiln");
    std::fs::create_dir_all(&etcd_dir).unwrap();
    std::fs::create_dir_all(&kiln_dir).unwrap();

    let (port, etcd) = start_cluster(common::ETCD, &etcd_dir, &[]).await;
    let on_etcd = run_suite(port, etcd_dir.join("pytest.out")).await;
    // Stopped before kiln-store's members start: the suite signals processes by name.
    drop(etcd);

    let (port, kiln) = start_cluster(env!("CARGO_BIN_EXE_kiln-store"), &kiln_dir, &[]).await;
    let on_kiln = run_suite(port, kiln_dir.join("pytest.out")).await;
    drop(kiln);

    eprintln!(
        "python-etcd3 suite: etcd 3.4 passes {} of {}, kiln-store {} of {}",
        on_etcd.passed.len(),
        on_etcd.ran,
        on_kiln.passed.len(),
        on_kiln.ran
    );
    // The comparison is only worth something if the suite really ran against etcd.
    assert!(
        on_etcd.ran >= 80 && on_etcd.passed.len() >= 75,
        "the suite hardly ran against etcd: {}",
        std::fs::read_to_string(etcd_dir.join("pytest.out")).unwrap_or_default()
    );
    let missing: Vec<&String> = on_etcd.passed.difference(&on_kiln.passed).collect();
    assert!(
        missing.is_empty(),
        "pass on etcd 3.4, not on kiln-store: {missing:#?}\n{}",
        std::fs::read_to_string(kiln_dir.join("pytest.out")).unwrap_or_default()
    );
}
