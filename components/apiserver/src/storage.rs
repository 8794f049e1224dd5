//! The object store: the etcd v3 API through `etcd-client`, so the same code runs on kiln-store and on a
//! real etcd. Values are opaque bytes here (JSON objects); `resourceVersion` is the key's mod revision.

use std::sync::Arc;
use std::time::Duration;

use etcd_client::{
    Certificate, Client, Compare, CompareOp, ConnectOptions, EventType, GetOptions, Identity,
    TlsOptions, Txn, TxnOp, TxnOpResponse, WatchOptions, WatchStream,
};

use crate::encryption::Transformers;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("etcd: {0}")]
    Etcd(#[from] etcd_client::Error),
    #[error("reading {path}: {source}")]
    ReadFile {
        path: String,
        source: std::io::Error,
    },
    #[error("key already exists")]
    AlreadyExists,
    #[error("key not found")]
    NotFound,
    /// The key's mod revision moved since it was read (compare-and-swap lost).
    #[error("key was modified concurrently")]
    Conflict,
    #[error("store response is missing its header")]
    NoHeader,
    /// A reserved key (e.g. a Service's ClusterIP) is held by another object.
    #[error("reserved key {0} is already taken")]
    Taken(String),
    /// A read at a revision older than the last compaction.
    #[error("required revision has been compacted")]
    Compacted,
    /// A stored value the encryption providers cannot read (`crate::encryption`).
    #[error("unable to transform key {key:?}: {source}")]
    Transform {
        key: String,
        source: crate::encryption::TransformError,
    },
}

/// etcd reports reads below the compaction point as an OutOfRange gRPC status.
fn classify(e: etcd_client::Error) -> StoreError {
    if e.to_string()
        .contains("required revision has been compacted")
    {
        StoreError::Compacted
    } else {
        StoreError::Etcd(e)
    }
}

/// A response over the gRPC client's message size limit.
fn too_large(e: &etcd_client::Error) -> bool {
    e.to_string().contains("message length too large")
}

/// The end of the key range `[prefix, end)` that holds every key starting with `prefix`.
pub fn prefix_end(prefix: &str) -> Vec<u8> {
    let mut end = prefix.as_bytes().to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// One page of a range read.
#[derive(Debug, Clone)]
pub struct Page {
    pub items: Vec<Versioned>,
    /// The revision the page was read at (the list's resourceVersion).
    pub revision: i64,
    /// More keys follow the last item.
    pub more: bool,
    /// Keys in the range read from `start` on, whatever the limit (etcd's Range count).
    pub count: i64,
}

pub type Result<T> = std::result::Result<T, StoreError>;

/// How to reach the store (`--etcd-*` flags).
#[derive(Debug, Clone, Default)]
pub struct StoreConfig {
    pub endpoints: Vec<String>,
    pub ca_file: Option<String>,
    pub cert_file: Option<String>,
    pub key_file: Option<String>,
}

/// One stored value with its revision.
#[derive(Debug, Clone)]
pub struct Versioned {
    pub key: String,
    pub value: Vec<u8>,
    pub mod_revision: i64,
}

/// What a watch reports, already flattened from etcd's responses.
#[derive(Debug, Clone)]
pub enum StoreEvent {
    Put {
        current: Versioned,
        prev: Option<Vec<u8>>,
    },
    Delete {
        key: String,
        revision: i64,
        prev: Option<Vec<u8>>,
    },
    /// The requested start revision was compacted away; the watch is over.
    Compacted { compact_revision: i64 },
}

#[derive(Clone)]
pub struct Store {
    client: Client,
    /// Encryption at rest: values are sealed on the way in and opened on every way out.
    encryption: Option<Arc<Transformers>>,
}

fn read(path: &str) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|source| StoreError::ReadFile {
        path: path.to_string(),
        source,
    })
}

/// Keys per Range when reading a whole prefix.
pub const LIST_CHUNK: i64 = 500;

impl Store {
    /// The store's client, for what speaks etcd itself (the history compactor).
    pub fn etcd_client(&self) -> Client {
        self.client.clone()
    }

    pub async fn connect(config: &StoreConfig) -> Result<Self> {
        let mut options = ConnectOptions::new()
            .with_connect_timeout(Duration::from_secs(5))
            .with_keep_alive(Duration::from_secs(30), Duration::from_secs(10));
        let wants_tls = config.ca_file.is_some() || config.cert_file.is_some();
        if wants_tls {
            let mut tls = TlsOptions::new();
            if let Some(ca) = &config.ca_file {
                tls = tls.ca_certificate(Certificate::from_pem(read(ca)?));
            }
            if let (Some(cert), Some(key)) = (&config.cert_file, &config.key_file) {
                tls = tls.identity(Identity::from_pem(read(cert)?, read(key)?));
            }
            options = options.with_tls(tls);
        }
        let client = Client::connect(&config.endpoints, Some(options)).await?;
        Ok(Store {
            client,
            encryption: None,
        })
    }

    /// The same store, sealing and opening values with `encryption` (None: stored as they are).
    pub fn with_encryption(mut self, encryption: Option<Arc<Transformers>>) -> Self {
        self.encryption = encryption;
        self
    }

    fn seal(&self, key: &str, value: Vec<u8>) -> Vec<u8> {
        match &self.encryption {
            Some(t) => t.write(key, value),
            None => value,
        }
    }

    fn open(&self, key: &str, value: Vec<u8>) -> Result<Vec<u8>> {
        open(self.encryption.as_deref(), key, value)
    }

    /// Whether `key` holds a value written by an encryption provider other than its resource's
    /// first (a rotated-out key): an update writes it again even when the object is unchanged.
    pub async fn is_stale(&self, key: &str) -> Result<bool> {
        let Some(t) = &self.encryption else {
            return Ok(false);
        };
        let resp = self.client.kv_client().get(key, None).await?;
        Ok(resp
            .kvs()
            .first()
            .is_some_and(|kv| t.is_stale(key, kv.value())))
    }

    pub async fn get(&self, key: &str) -> Result<Option<Versioned>> {
        let resp = self.client.kv_client().get(key, None).await?;
        resp.kvs()
            .first()
            .map(|kv| {
                Ok(Versioned {
                    key: key.to_string(),
                    value: self.open(key, kv.value().to_vec())?,
                    mod_revision: kv.mod_revision(),
                })
            })
            .transpose()
    }

    /// Every key under `prefix` at one revision, and that revision (the list's resourceVersion).
    /// Read in pages of [`LIST_CHUNK`] (halved while a page exceeds the gRPC client's 4 MiB message
    /// limit) at the first page's revision: one Range of everything would exceed that limit
    /// (10 000 pods ≈ 12 MiB) and fail the LIST.
    pub async fn list(&self, prefix: &str) -> Result<(Vec<Versioned>, i64)> {
        let mut items = Vec::new();
        let mut start = prefix.to_string();
        let mut revision = 0;
        let mut chunk = LIST_CHUNK;
        loop {
            let page = match self.list_page(prefix, &start, revision, chunk).await {
                // Large objects: fewer per page until a page fits in one message.
                Err(StoreError::Etcd(e)) if chunk > 1 && too_large(&e) => {
                    chunk /= 2;
                    continue;
                }
                other => other?,
            };
            if revision == 0 {
                // The header of a Range at an older revision names the current one; keep the first.
                revision = page.revision;
            }
            if let Some(last) = page.items.last() {
                start = format!("{}\0", last.key);
            }
            let more = page.more && !page.items.is_empty();
            items.extend(page.items);
            if !more {
                return Ok((items, revision));
            }
        }
    }

    /// Up to `limit` keys from `start` (inclusive) to the end of `prefix`, at `revision` (0 = now).
    pub async fn list_page(
        &self,
        prefix: &str,
        start: &str,
        revision: i64,
        limit: i64,
    ) -> Result<Page> {
        let mut options = GetOptions::new()
            .with_range(prefix_end(prefix))
            .with_limit(limit);
        if revision > 0 {
            options = options.with_revision(revision);
        }
        let mut resp = self
            .client
            .kv_client()
            .get(start, Some(options))
            .await
            .map_err(classify)?;
        // A read at a past revision answers with the store's current revision in its header (as
        // etcd does): the page was read at the one asked for, and a continued list keeps it.
        let current = resp.header().ok_or(StoreError::NoHeader)?.revision();
        let revision = if revision > 0 { revision } else { current };
        // The values move out of the response: a page of pods is megabytes not worth copying.
        let items = resp
            .take_kvs()
            .into_iter()
            .map(|kv| {
                let mod_revision = kv.mod_revision();
                let (key, value) = kv.into_key_value();
                let key = String::from_utf8(key)
                    .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned());
                Ok(Versioned {
                    value: self.open(&key, value)?,
                    key,
                    mod_revision,
                })
            })
            .collect::<Result<_>>()?;
        Ok(Page {
            items,
            revision,
            more: resp.more(),
            count: resp.count(),
        })
    }

    /// Creates `key` only if it does not exist; returns the new mod revision.
    pub async fn create(&self, key: &str, value: Vec<u8>) -> Result<i64> {
        self.create_claiming(key, value, &[]).await
    }

    /// Replaces `key` only if its mod revision is still `expected`; returns the new mod revision.
    pub async fn update(&self, key: &str, value: Vec<u8>, expected: i64) -> Result<i64> {
        self.update_claiming(key, value, expected, &[], &[]).await
    }

    /// Deletes `key` only if its mod revision is still `expected`; returns the deletion revision.
    pub async fn delete(&self, key: &str, expected: i64) -> Result<i64> {
        self.delete_releasing(key, expected, &[]).await
    }

    /// Creates `key` and every claimed key in one transaction; all must be absent.
    pub async fn create_claiming(
        &self,
        key: &str,
        value: Vec<u8>,
        claims: &[(String, Vec<u8>)],
    ) -> Result<i64> {
        let mut when = vec![Compare::create_revision(key, CompareOp::Equal, 0)];
        let mut then = vec![TxnOp::put(key, self.seal(key, value), None)];
        let mut otherwise = vec![TxnOp::get(key, None)];
        for (k, v) in claims {
            when.push(Compare::create_revision(k.as_str(), CompareOp::Equal, 0));
            then.push(TxnOp::put(k.as_str(), self.seal(k, v.clone()), None));
            otherwise.push(TxnOp::get(k.as_str(), None));
        }
        let txn = Txn::new().when(when).and_then(then).or_else(otherwise);
        let resp = self.client.kv_client().txn(txn).await?;
        if resp.succeeded() {
            return Ok(resp.header().ok_or(StoreError::NoHeader)?.revision());
        }
        let found = Self::found(&resp.op_responses());
        if found.first().copied().flatten().is_some() {
            return Err(StoreError::AlreadyExists);
        }
        Err(Self::taken(claims, &found[1..]))
    }

    /// Compare-and-swap of `key` at `expected`, claiming new keys and releasing old ones atomically.
    pub async fn update_claiming(
        &self,
        key: &str,
        value: Vec<u8>,
        expected: i64,
        claims: &[(String, Vec<u8>)],
        releases: &[String],
    ) -> Result<i64> {
        let mut when = vec![Compare::mod_revision(key, CompareOp::Equal, expected)];
        let mut then = vec![TxnOp::put(key, self.seal(key, value), None)];
        let mut otherwise = vec![TxnOp::get(key, None)];
        for (k, v) in claims {
            when.push(Compare::create_revision(k.as_str(), CompareOp::Equal, 0));
            then.push(TxnOp::put(k.as_str(), self.seal(k, v.clone()), None));
            otherwise.push(TxnOp::get(k.as_str(), None));
        }
        then.extend(releases.iter().map(|k| TxnOp::delete(k.as_str(), None)));
        let txn = Txn::new().when(when).and_then(then).or_else(otherwise);
        let resp = self.client.kv_client().txn(txn).await?;
        if resp.succeeded() {
            return Ok(resp.header().ok_or(StoreError::NoHeader)?.revision());
        }
        let found = Self::found(&resp.op_responses());
        match found.first().copied().flatten() {
            None => Err(StoreError::NotFound),
            Some(rev) if rev != expected => Err(StoreError::Conflict),
            Some(_) => Err(Self::taken(claims, &found[1..])),
        }
    }

    /// Compare-and-delete of `key` at `expected`, releasing the keys it held in the same transaction.
    pub async fn delete_releasing(
        &self,
        key: &str,
        expected: i64,
        releases: &[String],
    ) -> Result<i64> {
        let mut then = vec![TxnOp::delete(key, None)];
        then.extend(releases.iter().map(|k| TxnOp::delete(k.as_str(), None)));
        let txn = Txn::new()
            .when([Compare::mod_revision(key, CompareOp::Equal, expected)])
            .and_then(then)
            .or_else([TxnOp::get(key, None)]);
        let resp = self.client.kv_client().txn(txn).await?;
        if resp.succeeded() {
            return Ok(resp.header().ok_or(StoreError::NoHeader)?.revision());
        }
        Err(Self::failed_cas(&resp.op_responses()))
    }

    /// The mod revision of each key a failed transaction's `or_else` gets read (None = absent).
    fn found(ops: &[TxnOpResponse]) -> Vec<Option<i64>> {
        ops.iter()
            .map(|op| match op {
                TxnOpResponse::Get(g) => g.kvs().first().map(|kv| kv.mod_revision()),
                _ => None,
            })
            .collect()
    }

    fn taken(claims: &[(String, Vec<u8>)], found: &[Option<i64>]) -> StoreError {
        claims
            .iter()
            .zip(found)
            .find(|(_, f)| f.is_some())
            .map(|((k, _), _)| StoreError::Taken(k.clone()))
            .unwrap_or(StoreError::Conflict)
    }

    /// Puts `key` unconditionally (bootstrap objects the server owns).
    pub async fn put(&self, key: &str, value: Vec<u8>) -> Result<i64> {
        let value = self.seal(key, value);
        let resp = self.client.kv_client().put(key, value, None).await?;
        Ok(resp.header().ok_or(StoreError::NoHeader)?.revision())
    }

    /// A lost compare-and-swap is a conflict when the key is still there, NotFound when it is gone.
    fn failed_cas(ops: &[TxnOpResponse]) -> StoreError {
        let exists = ops.iter().any(|op| match op {
            TxnOpResponse::Get(g) => !g.kvs().is_empty(),
            _ => false,
        });
        if exists {
            StoreError::Conflict
        } else {
            StoreError::NotFound
        }
    }

    /// The store's current revision (cheap: a count-only range).
    pub async fn revision(&self) -> Result<i64> {
        let resp = self
            .client
            .kv_client()
            .get(
                "/registry/",
                Some(GetOptions::new().with_count_only().with_prefix()),
            )
            .await?;
        Ok(resp.header().ok_or(StoreError::NoHeader)?.revision())
    }

    /// Watches every key under `prefix` from `start_revision` (inclusive).
    pub async fn watch(&self, prefix: &str, start_revision: i64) -> Result<StoreWatch> {
        let options = WatchOptions::new()
            .with_prefix()
            .with_prev_key()
            .with_start_revision(start_revision);
        let stream = self
            .client
            .watch_client()
            .watch(prefix, Some(options))
            .await?;
        Ok(StoreWatch {
            stream,
            encryption: self.encryption.clone(),
        })
    }
}

/// A stored value as its plaintext (unchanged without encryption at rest).
fn open(encryption: Option<&Transformers>, key: &str, value: Vec<u8>) -> Result<Vec<u8>> {
    match encryption {
        Some(t) => t
            .read(key, value)
            .map(|(plain, _stale)| plain)
            .map_err(|source| StoreError::Transform {
                key: key.to_string(),
                source,
            }),
        None => Ok(value),
    }
}

/// A running etcd watch; dropping it cancels the stream.
pub struct StoreWatch {
    stream: WatchStream,
    encryption: Option<Arc<Transformers>>,
}

impl StoreWatch {
    /// The next batch of events; `None` when the store closed the stream.
    pub async fn next(&mut self) -> Result<Option<Vec<StoreEvent>>> {
        loop {
            let Some(resp) = self.stream.message().await? else {
                return Ok(None);
            };
            if resp.compact_revision() != 0 {
                return Ok(Some(vec![StoreEvent::Compacted {
                    compact_revision: resp.compact_revision(),
                }]));
            }
            if resp.canceled() {
                return Ok(None);
            }
            if resp.events().is_empty() {
                continue; // creation ack or progress notification
            }
            let encryption = self.encryption.as_deref();
            let mut events = Vec::with_capacity(resp.events().len());
            for ev in resp.events() {
                let Some(kv) = ev.kv() else { continue };
                let key = String::from_utf8_lossy(kv.key()).into_owned();
                let prev = ev
                    .prev_kv()
                    .map(|p| open(encryption, &key, p.value().to_vec()))
                    .transpose()?;
                events.push(match ev.event_type() {
                    EventType::Put => StoreEvent::Put {
                        current: Versioned {
                            value: open(encryption, &key, kv.value().to_vec())?,
                            key,
                            mod_revision: kv.mod_revision(),
                        },
                        prev,
                    },
                    EventType::Delete => StoreEvent::Delete {
                        key,
                        revision: kv.mod_revision(),
                        prev,
                    },
                });
            }
            return Ok(Some(events));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_end_increments_last_byte() {
        assert_eq!(prefix_end("/registry/pods/"), b"/registry/pods0".to_vec());
        assert_eq!(prefix_end(""), vec![0]);
    }
}
