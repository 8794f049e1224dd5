//! One etcd write transaction: Put, DeleteRange, Range and Txn against a snapshot plus the
//! transaction's own pending writes, collected into one rocksdb WriteBatch.
//!
//! Mirrors etcd 3.4's storeTxnWrite: reads inside the transaction see its earlier writes, all
//! writes share revision begin+1, and the revision only moves when something changed.

use std::cell::OnceCell;
use std::collections::BTreeMap;

use etcd_client::proto::{
    PbCompare, PbDeleteRequest, PbDeleteResponse, PbEvent, PbKeyValue, PbPutRequest, PbPutResponse,
    PbRangeRequest, PbRangeResponse, PbResponseHeader, PbResponseOp, PbTargetUnion, PbTxnOpRequest,
    PbTxnOpResponse, PbTxnRequest, PbTxnResponse,
};
use rocksdb::{WriteBatch, DB};

use crate::etcd_error::EtcdError;
use crate::storage::db::{self, CF_EVENTS, CF_KV, CF_LEASE_KEYS};
use crate::storage::mvcc::index::KeyIndex;
use crate::storage::mvcc::keys::{self, Version, EVENT_DELETE, EVENT_PUT};
use crate::storage::mvcc::read::{RangeEnd, ReadView, Scan};
use crate::storage::mvcc::{get_lease, range, MvccError};

// etcd's Compare enum values.
const CMP_EQUAL: i32 = 0;
const CMP_GREATER: i32 = 1;
const CMP_LESS: i32 = 2;
const CMP_NOT_EQUAL: i32 = 3;
const TARGET_VERSION: i32 = 0;
const TARGET_CREATE: i32 = 1;
const TARGET_MOD: i32 = 2;
const TARGET_VALUE: i32 = 3;
const TARGET_LEASE: i32 = 4;

pub struct TxnWriter<'a> {
    db: &'a DB,
    /// On the apply path taken on first use (a put of a key the index knows needs no snapshot
    /// at all); for other readers taken at once.
    view: OnceCell<ReadView<'a>>,
    /// The apply path's key index (index.rs): where each live key's latest version is.
    index: Option<&'a KeyIndex>,
    begin_rev: i64,
    compact_rev: i64,
    batch: WriteBatch,
    /// Events of this transaction in order, prev_kv filled where a previous version existed.
    changes: Vec<PbEvent>,
    /// Keys written by this transaction: Some = put, None = deleted.
    overlay: BTreeMap<Vec<u8>, Option<PbKeyValue>>,
}

/// What a finished transaction leaves for the state machine to commit.
pub struct Finished {
    pub batch: WriteBatch,
    pub events: Vec<PbEvent>,
    /// The store revision after this transaction.
    pub revision: i64,
}

fn header(revision: i64) -> Option<PbResponseHeader> {
    Some(PbResponseHeader {
        revision,
        ..Default::default()
    })
}

impl<'a> TxnWriter<'a> {
    /// A transaction that reads the store through a rocksdb snapshot only.
    pub fn new(db: &'a DB, begin_rev: i64, compact_rev: i64) -> Self {
        Self::with_index(db, None, begin_rev, compact_rev)
    }

    /// The state machine's transaction at the current revision: `index` must show the store
    /// as of `begin_rev`, which holds on the apply path (it follows every write).
    pub fn applying(db: &'a DB, index: &'a KeyIndex, begin_rev: i64, compact_rev: i64) -> Self {
        Self::with_index(db, Some(index), begin_rev, compact_rev)
    }

    fn with_index(
        db: &'a DB,
        index: Option<&'a KeyIndex>,
        begin_rev: i64,
        compact_rev: i64,
    ) -> Self {
        let view = OnceCell::new();
        if index.is_none() {
            // A reader beside the apply path takes its snapshot now, with the revisions it
            // read: one taken later could already miss versions a compaction removed since.
            let _ = view.set(ReadView::new(db));
        }
        Self {
            db,
            view,
            index,
            begin_rev,
            compact_rev,
            batch: WriteBatch::default(),
            changes: Vec::new(),
            overlay: BTreeMap::new(),
        }
    }

    /// The revision reads in this transaction observe.
    pub fn rev(&self) -> i64 {
        if self.changes.is_empty() {
            self.begin_rev
        } else {
            self.begin_rev + 1
        }
    }

    pub fn finish(self) -> Finished {
        let revision = self.rev();
        Finished {
            batch: self.batch,
            events: self.changes,
            revision,
        }
    }

    /// Adds a raw write to this transaction's batch (lease records, metadata).
    pub fn batch_mut(&mut self) -> &mut WriteBatch {
        &mut self.batch
    }

    fn view(&self) -> &ReadView<'a> {
        self.view.get_or_init(|| ReadView::new(self.db))
    }

    fn latest(&self, key: &[u8]) -> Result<Option<PbKeyValue>, MvccError> {
        if let Some(v) = self.overlay.get(key) {
            return Ok(v.clone());
        }
        let Some(index) = self.index else {
            return self.view().get(key, self.begin_rev);
        };
        let Some(revision) = index.latest(key) else {
            return Ok(None);
        };
        // Versions never change once written, so the exact one is read without a snapshot.
        let stored = self
            .db
            .get_pinned_cf(db::cf(self.db, CF_KV), keys::kv_key(key, revision))?;
        match stored.as_deref().map(Version::decode).transpose()? {
            Some(Version::Put(kv)) => Ok(Some(kv)),
            _ => Err(MvccError::Corrupt(format!(
                "the key index has {} at revision {revision}, where kv holds no put of it",
                String::from_utf8_lossy(key)
            ))),
        }
    }

    /// Live keys in the range at the transaction's own revision (snapshot + pending writes).
    fn live_keys(&self, key: &[u8], end: &RangeEnd) -> Result<Vec<PbKeyValue>, MvccError> {
        let scan = self.view().scan(key, end, self.begin_rev, None)?;
        if self.overlay.is_empty() {
            return Ok(scan.kvs);
        }
        let mut merged: BTreeMap<Vec<u8>, PbKeyValue> = scan
            .kvs
            .into_iter()
            .map(|kv| (kv.key.clone(), kv))
            .collect();
        for (k, v) in &self.overlay {
            if end.contains(key, k) {
                match v {
                    Some(kv) => {
                        merged.insert(k.clone(), kv.clone());
                    }
                    None => {
                        merged.remove(k);
                    }
                }
            }
        }
        Ok(merged.into_values().collect())
    }

    pub fn range(&self, req: &PbRangeRequest) -> Result<PbRangeResponse, MvccError> {
        let cur = self.rev();
        if req.revision > cur {
            return Err(EtcdError::FutureRev.into());
        }
        let at = if req.revision <= 0 { cur } else { req.revision };
        if at < self.compact_rev {
            return Err(EtcdError::Compacted.into());
        }
        let end = RangeEnd::from_request(&req.range_end);
        let scan = if at > self.begin_rev {
            let kvs = self.live_keys(&req.key, &end)?;
            Scan {
                count: kvs.len() as i64,
                kvs,
            }
        } else {
            self.view()
                .scan(&req.key, &end, at, range::scan_limit(req))?
        };
        Ok(range::build_response(req, scan, cur))
    }

    pub fn put(&mut self, req: &PbPutRequest) -> Result<PbPutResponse, MvccError> {
        let prev = self.latest(&req.key)?;
        let value = if req.ignore_value {
            match &prev {
                Some(p) => p.value.clone(),
                None => return Err(EtcdError::KeyNotFound.into()),
            }
        } else {
            req.value.clone()
        };
        let lease = if req.ignore_lease {
            match &prev {
                Some(p) => p.lease,
                None => return Err(EtcdError::KeyNotFound.into()),
            }
        } else {
            req.lease
        };
        if lease != 0 && get_lease(self.db, lease)?.is_none() {
            return Err(EtcdError::LeaseNotFound.into());
        }
        let rev = self.begin_rev + 1;
        let kv = PbKeyValue {
            key: req.key.clone(),
            create_revision: prev.as_ref().map_or(rev, |p| p.create_revision),
            mod_revision: rev,
            version: prev.as_ref().map_or(1, |p| p.version + 1),
            value,
            lease,
        };
        let lease_cf = db::cf(self.db, CF_LEASE_KEYS);
        if let Some(p) = &prev {
            if p.lease != 0 && p.lease != lease {
                self.batch
                    .delete_cf(lease_cf, keys::lease_key(p.lease, &req.key));
            }
        }
        if lease != 0 {
            self.batch
                .put_cf(lease_cf, keys::lease_key(lease, &req.key), []);
        }
        self.record(
            kv.clone(),
            Version::Put(kv.clone()),
            prev.clone(),
            EVENT_PUT,
        );
        self.overlay.insert(req.key.clone(), Some(kv));
        Ok(PbPutResponse {
            header: header(rev),
            prev_kv: if req.prev_kv { prev } else { None },
        })
    }

    pub fn delete_range(&mut self, req: &PbDeleteRequest) -> Result<PbDeleteResponse, MvccError> {
        let end = RangeEnd::from_request(&req.range_end);
        let victims = self.live_keys(&req.key, &end)?;
        let rev = self.begin_rev + 1;
        let lease_cf = db::cf(self.db, CF_LEASE_KEYS);
        for prev in &victims {
            if prev.lease != 0 {
                self.batch
                    .delete_cf(lease_cf, keys::lease_key(prev.lease, &prev.key));
            }
            let tomb = PbKeyValue {
                key: prev.key.clone(),
                mod_revision: rev,
                ..Default::default()
            };
            self.record(tomb, Version::Tombstone, Some(prev.clone()), EVENT_DELETE);
            self.overlay.insert(prev.key.clone(), None);
        }
        Ok(PbDeleteResponse {
            header: header(self.rev()),
            deleted: victims.len() as i64,
            prev_kvs: if req.prev_kv { victims } else { Vec::new() },
        })
    }

    fn record(&mut self, kv: PbKeyValue, version: Version, prev: Option<PbKeyValue>, ty: i32) {
        let rev = self.begin_rev + 1;
        let sub = self.changes.len() as u32;
        self.batch.put_cf(
            db::cf(self.db, CF_KV),
            keys::kv_key(&kv.key, rev),
            version.encode(),
        );
        self.batch.put_cf(
            db::cf(self.db, CF_EVENTS),
            keys::event_key(rev, sub),
            keys::encode_event_ref(ty, &kv.key),
        );
        self.changes.push(PbEvent {
            r#type: ty,
            kv: Some(kv),
            prev_kv: prev,
        });
    }

    /// Evaluates one compare against the state before the transaction, like etcd.
    fn compare(&self, c: &PbCompare) -> Result<bool, MvccError> {
        let end = RangeEnd::from_request(&c.range_end);
        let kvs = self.view().scan(&c.key, &end, self.begin_rev, None)?.kvs;
        if kvs.is_empty() {
            // A missing key has no value to compare; every other target compares as zero.
            if c.target == TARGET_VALUE {
                return Ok(false);
            }
            return Ok(compare_kv(c, &PbKeyValue::default()));
        }
        Ok(kvs.iter().all(|kv| compare_kv(c, kv)))
    }

    pub fn txn(&mut self, req: &PbTxnRequest) -> Result<PbTxnResponse, MvccError> {
        let mut succeeded = true;
        for c in &req.compare {
            if !self.compare(c)? {
                succeeded = false;
                break;
            }
        }
        let ops = if succeeded {
            &req.success
        } else {
            &req.failure
        };
        let mut responses = Vec::with_capacity(ops.len());
        for op in ops {
            let response = match &op.request {
                Some(PbTxnOpRequest::RequestRange(r)) => {
                    PbTxnOpResponse::ResponseRange(self.range(r)?)
                }
                Some(PbTxnOpRequest::RequestPut(r)) => PbTxnOpResponse::ResponsePut(self.put(r)?),
                Some(PbTxnOpRequest::RequestDeleteRange(r)) => {
                    PbTxnOpResponse::ResponseDeleteRange(self.delete_range(r)?)
                }
                Some(PbTxnOpRequest::RequestTxn(r)) => {
                    let mut nested = self.txn(r)?;
                    // etcd leaves nested transaction headers empty.
                    nested.header = Some(PbResponseHeader::default());
                    PbTxnOpResponse::ResponseTxn(nested)
                }
                None => continue,
            };
            responses.push(PbResponseOp {
                response: Some(response),
            });
        }
        Ok(PbTxnResponse {
            header: header(self.rev()),
            succeeded,
            responses,
        })
    }
}

fn compare_kv(c: &PbCompare, kv: &PbKeyValue) -> bool {
    use std::cmp::Ordering;
    let ord = match c.target {
        TARGET_VALUE => {
            let want: &[u8] = match &c.target_union {
                Some(PbTargetUnion::Value(v)) => v,
                _ => &[],
            };
            kv.value.as_slice().cmp(want)
        }
        target => {
            let want = match (&c.target_union, target) {
                (Some(PbTargetUnion::Version(v)), TARGET_VERSION) => *v,
                (Some(PbTargetUnion::CreateRevision(v)), TARGET_CREATE) => *v,
                (Some(PbTargetUnion::ModRevision(v)), TARGET_MOD) => *v,
                (Some(PbTargetUnion::Lease(v)), TARGET_LEASE) => *v,
                _ => 0,
            };
            let have = match target {
                TARGET_VERSION => kv.version,
                TARGET_CREATE => kv.create_revision,
                TARGET_MOD => kv.mod_revision,
                TARGET_LEASE => kv.lease,
                _ => return false,
            };
            have.cmp(&want)
        }
    };
    match c.result {
        CMP_EQUAL => ord == Ordering::Equal,
        CMP_NOT_EQUAL => ord != Ordering::Equal,
        CMP_GREATER => ord == Ordering::Greater,
        CMP_LESS => ord == Ordering::Less,
        _ => false,
    }
}
