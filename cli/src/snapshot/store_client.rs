//! The operator's etcd-v3 client to a controller's store (mTLS with the apiserver's store client cert
//! from the local state directory): snapshots and exact counts at a revision.

use std::path::Path;

use etcd_client::{Client, GetOptions};
use sha2::{Digest, Sha256};

use super::SnapshotError;
use crate::bootstrap::phases::external_etcd::{StoreAccess, StoreAccessError};
use crate::bootstrap::Context;
use crate::config::Host;

pub struct StoreClient {
    endpoint: String,
    client: Client,
}

/// A snapshot received whole, its trailing sha256 checked: the bytes and the sha256 of all of them.
pub struct FetchedSnapshot {
    pub data: Vec<u8>,
    pub sha256: String,
}

/// The most a snapshot's announced size reserves up front (etcd's largest backend quota); a bigger
/// snapshot still arrives, growing as it does.
const MAX_RESERVE: u64 = 8 << 30;

/// The end of the key range holding every key that starts with `prefix` (etcd's `--prefix`).
fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// Keys of the Kubernetes API in the store (the apiserver's prefix).
pub const REGISTRY_PREFIX: &str = "/registry/";

impl StoreClient {
    pub async fn connect(ctx: &Context, host: &Host) -> Result<StoreClient, SnapshotError> {
        Self::connect_with(&host.node_address(), &ctx.pki_dir(&host.name)).await
    }

    /// Connect to the store at `addr` with the store CA and the apiserver's store client certificate
    /// from `pki` (the operator's per-host PKI directory, or /etc/kiln/pki on a controller itself).
    pub async fn connect_with(addr: &str, pki: &Path) -> Result<StoreClient, SnapshotError> {
        Self::connect_access(&StoreAccess::kiln_store(addr, addr, pki)).await
    }

    /// Connect through `access`: a kiln-store member or an external etcd endpoint.
    pub async fn connect_access(access: &StoreAccess) -> Result<StoreClient, SnapshotError> {
        let endpoint = access.endpoint.clone();
        let client = access
            .connect(std::time::Duration::from_secs(300))
            .await
            .map_err(|e| match e {
                StoreAccessError::Read { path, source, .. } => SnapshotError::Io {
                    what: "reading",
                    path,
                    source,
                },
                StoreAccessError::Endpoint { message, .. } => SnapshotError::Store {
                    endpoint: endpoint.clone(),
                    message,
                },
            })?;
        Ok(StoreClient { endpoint, client })
    }

    /// The store's address, as errors name it.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    fn err(&self, e: impl std::fmt::Display) -> SnapshotError {
        SnapshotError::Store {
            endpoint: self.endpoint.clone(),
            message: e.to_string(),
        }
    }

    /// Receive a snapshot into memory (the store builds the whole snapshot in memory before it sends it,
    /// so it is no bigger than what the store holds in memory), checking etcd's trailing sha256 (the last
    /// 32 bytes are the sha256 of everything before them) and hashing the whole as it arrives: nothing is
    /// read twice. After each piece, `on_data` gets every byte so far (for the bundle being written and
    /// the record being made while the snapshot arrives).
    pub async fn fetch_snapshot(
        &mut self,
        mut on_data: impl FnMut(&[u8]) -> Result<(), SnapshotError>,
    ) -> Result<FetchedSnapshot, SnapshotError> {
        let mut stream = self.client.snapshot().await.map_err(|e| self.err(e))?;
        let mut data: Vec<u8> = Vec::new();
        // Everything but the last 32 bytes seen so far goes into `body`; once its digest is checked
        // against those 32, they are added too for the sha256 of the whole.
        let mut body = Sha256::new();
        let mut hashed = 0usize;
        while let Some(msg) = stream.message().await.map_err(|e| self.err(e))? {
            if data.is_empty() {
                // The first message says how much follows: one allocation for the whole snapshot.
                let total = msg.blob().len() as u64 + msg.remaining_bytes();
                data.reserve_exact(usize::try_from(total.min(MAX_RESERVE)).unwrap_or(0));
            }
            data.extend_from_slice(msg.blob());
            on_data(&data)?;
            let upto = data.len().saturating_sub(32);
            if upto > hashed {
                body.update(&data[hashed..upto]);
                hashed = upto;
            }
        }
        let total = data.len();
        let tail = data.get(hashed..).unwrap_or_default();
        if total < 32 || body.clone().finalize().as_slice() != tail {
            return Err(SnapshotError::Corrupt {
                endpoint: self.endpoint.clone(),
                message: format!(
                    "{total} bytes whose trailing sha256 does not match (truncated stream?)"
                ),
            });
        }
        body.update(tail);
        let sha256 = hex::encode(body.finalize());
        Ok(FetchedSnapshot { data, sha256 })
    }

    /// (current revision, Kubernetes objects now).
    pub async fn current(&mut self) -> Result<(i64, i64), SnapshotError> {
        let r = self
            .client
            .get(
                REGISTRY_PREFIX,
                Some(GetOptions::new().with_prefix().with_count_only()),
            )
            .await
            .map_err(|e| self.err(e))?;
        Ok((r.header().map(|h| h.revision()).unwrap_or(0), r.count()))
    }

    /// Every (key, value, mod revision) under `prefix` at `revision`, read in pages: one response with
    /// every object of a kind would pass the client's 4 MiB message limit (10 000 ConfigMaps do).
    pub async fn list_prefix(
        &mut self,
        prefix: &str,
        revision: i64,
    ) -> Result<Vec<(String, Vec<u8>, i64)>, SnapshotError> {
        const PAGE: i64 = 500;
        let end = prefix_end(prefix.as_bytes());
        let mut from = prefix.as_bytes().to_vec();
        let mut out = vec![];
        loop {
            let r = self
                .client
                .get(
                    from.clone(),
                    Some(
                        GetOptions::new()
                            .with_range(end.clone())
                            .with_revision(revision)
                            .with_limit(PAGE),
                    ),
                )
                .await
                .map_err(|e| self.err(e))?;
            for kv in r.kvs() {
                out.push((
                    String::from_utf8_lossy(kv.key()).into_owned(),
                    kv.value().to_vec(),
                    kv.mod_revision(),
                ));
            }
            match r.kvs().last() {
                Some(last) if r.more() => {
                    from = last.key().to_vec();
                    from.push(0);
                }
                _ => return Ok(out),
            }
        }
    }

    /// How many Kubernetes objects the store held at `revision`.
    pub async fn count_registry(&mut self, revision: i64) -> Result<i64, SnapshotError> {
        let r = self
            .client
            .get(
                REGISTRY_PREFIX,
                Some(
                    GetOptions::new()
                        .with_prefix()
                        .with_count_only()
                        .with_revision(revision),
                ),
            )
            .await
            .map_err(|e| self.err(e))?;
        Ok(r.count())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn prefix_ends_like_etcdctl() {
        assert_eq!(super::prefix_end(b"/registry/"), b"/registry0".to_vec());
        assert_eq!(super::prefix_end(b"a\xff"), b"b".to_vec());
        assert_eq!(super::prefix_end(b"\xff"), vec![0]);
    }
}
