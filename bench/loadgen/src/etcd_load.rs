//! etcd v3 workloads (the shape of etcd's own `benchmark put` / `benchmark range`): N clients over up to
//! `conns` gRPC connections, each issuing requests back to back until the total is reached.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_client::{Client, ConnectOptions, GetOptions};

use crate::stats::{summarize, Summary};

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("connecting to {endpoint}: {source}")]
    Connect {
        endpoint: String,
        #[source]
        source: etcd_client::Error,
    },
    #[error("every request failed; first error: {0}")]
    AllFailed(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Put `value_size` bytes to a random key of `key_space` (sequential keys when key_space is 0).
    Put,
    /// Linearizable range of one key.
    Range,
}

#[derive(Debug, Clone)]
pub struct Workload {
    pub endpoint: String,
    pub op: Op,
    pub clients: usize,
    pub conns: usize,
    pub total: usize,
    pub value_size: usize,
    pub key_space: usize,
    pub key_prefix: String,
    /// (name, password): every connection authenticates once and sends its token with each
    /// request, so the server checks the user's permissions on every op (etcd's `benchmark --user`).
    pub user: Option<(String, String)>,
}

async fn connect(endpoint: &str, user: Option<&(String, String)>) -> Result<Client, LoadError> {
    let options = user.map(|(name, password)| ConnectOptions::new().with_user(name, password));
    Client::connect([endpoint], options)
        .await
        .map_err(|source| LoadError::Connect {
            endpoint: endpoint.to_string(),
            source,
        })
}

/// A cheap deterministic per-client key sequence (no RNG crate needed for spreading keys).
fn key_index(client: usize, n: usize, key_space: usize) -> usize {
    let x = (client as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ (n as u64).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    if key_space == 0 {
        n
    } else {
        (x % key_space as u64) as usize
    }
}

pub async fn run(w: &Workload) -> Result<Summary, LoadError> {
    let conns = w.conns.clamp(1, w.clients.max(1));
    let mut pool = Vec::with_capacity(conns);
    for _ in 0..conns {
        pool.push(connect(&w.endpoint, w.user.as_ref()).await?);
    }
    let issued = Arc::new(AtomicUsize::new(0));
    let value = vec![b'x'; w.value_size];
    let start = Instant::now();
    let mut tasks = Vec::with_capacity(w.clients);
    for c in 0..w.clients {
        let mut kv = pool[c % conns].kv_client();
        let issued = issued.clone();
        let value = value.clone();
        let w = w.clone();
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            let mut errors = 0usize;
            let mut first_error = None;
            loop {
                let n = issued.fetch_add(1, Ordering::Relaxed);
                if n >= w.total {
                    break;
                }
                let key = format!("{}{:012}", w.key_prefix, key_index(c, n, w.key_space));
                let t = Instant::now();
                let r = match w.op {
                    Op::Put => kv.put(key, value.clone(), None).await.map(|_| ()),
                    Op::Range => kv.get(key, None::<GetOptions>).await.map(|_| ()),
                };
                match r {
                    Ok(()) => lat.push(t.elapsed()),
                    Err(e) => {
                        errors += 1;
                        first_error.get_or_insert(e.to_string());
                    }
                }
            }
            (lat, errors, first_error)
        }));
    }
    let mut all: Vec<Duration> = Vec::with_capacity(w.total);
    let mut errors = 0;
    let mut first_error = None;
    for t in futures::future::join_all(tasks).await {
        let (lat, e, fe) = t.expect("load task panicked");
        all.extend(lat);
        errors += e;
        if first_error.is_none() {
            first_error = fe;
        }
    }
    let wall = start.elapsed();
    if all.is_empty() && errors > 0 {
        return Err(LoadError::AllFailed(first_error.unwrap_or_default()));
    }
    Ok(summarize(all, errors, wall))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_stay_in_the_key_space_and_sequential_without_one() {
        for n in 0..1000 {
            assert!(key_index(3, n, 100) < 100);
            assert_eq!(key_index(3, n, 0), n);
        }
    }
}
