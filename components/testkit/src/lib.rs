//! The one integration-test harness for kiln's components: a real store (etcd 3.4 at `/usr/bin/etcd`,
//! or kiln-store with `KILN_TEST_STORE_BIN`) in a temp dir, a PKI made with rcgen, kubeconfigs, a
//! kiln-apiserver started in-process on 127.0.0.1:0, kube-rs clients and the real kubectl.
//! Everything binds only 127.0.0.1 on ephemeral ports and is torn down on drop.
//!
//! Used as a dev-dependency by the component crates' tests, so they all exercise the same setup.

mod cluster;
mod https;
mod nodes;
mod pki;
mod store;

use std::path::Path;
use std::time::Duration;

pub use cluster::{kubeconfig, rows, Cluster};
pub use https::serve_https;
pub use nodes::create_node;
pub use pki::{Pair, Pki};
pub use store::{store_binary, Etcd, StoreTls};

/// Bounded wait for anything the tests poll.
pub const WAIT: Duration = Duration::from_secs(30);

/// A port that was free on 127.0.0.1 a moment ago (for servers that cannot bind port 0 themselves).
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

/// Polls `check` until it returns Some, for at most [`WAIT`]; panics with `what` otherwise.
pub async fn eventually<T, F, Fut>(what: &str, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    eventually_within(WAIT, what, check).await
}

/// Polls `check` until it returns Some, for at most `limit` (a bounded wait, not a timing
/// assertion); panics with `what` otherwise.
pub async fn eventually_within<T, F, Fut>(limit: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {limit:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A kube-rs client from a kubeconfig file (its current context).
pub async fn client_from_kubeconfig(path: &Path) -> kube::Client {
    let kc = kube::config::Kubeconfig::read_from(path).expect("read kubeconfig");
    let config =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .expect("kubeconfig");
    kube::Client::try_from(config).expect("kube client")
}
