//! The state machine, at one rocksdb snapshot, as etcd's bbolt backend: two passes over the same
//! rocksdb snapshot, the first fixing the layout (and so the length a stream announces first), the second
//! writing the pages in order.
//!
//! etcd's `key` bucket is in revision order, kiln's `kv` family in key order: the first pass lists every
//! version (its `kv` key, revision and value size, not the value) and sorts them by revision; the second
//! reads each value by seeking to it. Sub revisions come from the `events` family (the position of a
//! change in its transaction); versions whose events were compacted away (one live version per key at or
//! below the compaction) are numbered in key order within their revision, which is all etcd asks of them.

use openraft::{LogId, StoredMembership};
use rocksdb::{ReadOptions, DB};

use kiln_common::bbolt::write::{Planner, Writer};
use kiln_common::bbolt::PAGE_SIZE;
use kiln_common::etcd_db::{self as layout, BUCKETS};

use super::{Entries, EtcdSnapshotError};
use crate::command::MemberNode;
use crate::storage::db::{self, CF_EVENTS, CF_KV, CF_LEASES, CF_SM_META};
use crate::storage::db::{META_LAST_APPLIED, META_MEMBERSHIP};
use crate::storage::mvcc::keys::{self, StoredEvent, Version};
use crate::storage::mvcc::{LeaseRecord, META_ALARMS, META_COMPACT_REVISION};

type Snapshot<'a> = rocksdb::SnapshotWithThreadMode<'a, DB>;

/// etcd's cluster version a kiln-store snapshot states (the API version it speaks, major.minor.0).
const CLUSTER_VERSION: &[u8] = b"3.5.0";

/// One version of one key, in `key` bucket order.
struct Version1 {
    main: i64,
    sub: i64,
    tombstone: bool,
    value_len: usize,
    kv_key: Box<[u8]>,
}

/// The layout of one snapshot and what the second pass needs to fill it.
pub struct Prepared {
    plan: kiln_common::bbolt::write::Plan,
    versions: Vec<Version1>,
    /// Every bucket but `key`, small enough to hold: (bucket, entries).
    small: Vec<(&'static [u8], Entries)>,
}

impl Prepared {
    /// Bytes the stream will carry (the database and its sha256).
    pub fn stream_len(&self) -> u64 {
        self.plan.stream_len()
    }
}

fn read_opts() -> ReadOptions {
    // One pass over everything: leave the block cache to the hot keys.
    let mut opts = ReadOptions::default();
    opts.fill_cache(false);
    opts.set_readahead_size(2 << 20);
    opts
}

/// First pass: every version sorted by revision, the small buckets, the layout.
pub fn prepare(db: &DB, snap: &Snapshot<'_>) -> Result<Prepared, EtcdSnapshotError> {
    let corrupt = |what: &str| EtcdSnapshotError::Corrupt(what.to_string());
    let mut versions = Vec::new();
    for item in snap.iterator_cf_opt(db::cf(db, CF_KV), read_opts(), rocksdb::IteratorMode::Start) {
        let (k, v) = item?;
        let (key, main) = keys::decode_kv_key(&k).ok_or_else(|| corrupt("malformed kv key"))?;
        let tombstone = Version::is_tombstone_raw(&v);
        let value_len = if tombstone {
            layout::tombstone_value_len(key.len())
        } else {
            v.len().saturating_sub(1)
        };
        versions.push(Version1 {
            main,
            sub: 0,
            tombstone,
            value_len,
            kv_key: k,
        });
    }
    versions.sort_unstable_by(|a, b| (a.main, &a.kv_key).cmp(&(b.main, &b.kv_key)));
    number_subs(db, snap, &mut versions)?;

    let small = small_buckets(db, snap)?;
    let mut planner = Planner::new(PAGE_SIZE);
    for name in BUCKETS {
        planner.bucket(name)?;
        if name == layout::BUCKET_KEY {
            for v in &versions {
                planner.entry(&layout::rev_key(v.main, v.sub, v.tombstone), v.value_len)?;
            }
        } else if let Some((_, entries)) = small.iter().find(|(n, _)| *n == name) {
            for (k, v) in entries {
                planner.entry(k, v.len())?;
            }
        }
    }
    Ok(Prepared {
        plan: planner.finish()?,
        versions,
        small,
    })
}

/// Gives the versions of each revision that changed several keys their transaction's order, from the
/// `events` family, and sorts them by it.
fn number_subs(
    db: &DB,
    snap: &Snapshot<'_>,
    versions: &mut [Version1],
) -> Result<(), EtcdSnapshotError> {
    let events = db::cf(db, CF_EVENTS);
    let mut start = 0;
    while start < versions.len() {
        let main = versions[start].main;
        let end = start + versions[start..].partition_point(|v| v.main == main);
        if end - start > 1 {
            let mut subs: Vec<(Vec<u8>, i64)> = Vec::new();
            let from = keys::event_key(main, 0);
            for item in snap.iterator_cf(
                events,
                rocksdb::IteratorMode::From(&from, rocksdb::Direction::Forward),
            ) {
                let (k, v) = item?;
                if k.len() != 12 || keys::event_revision(&k) != main {
                    break;
                }
                let sub = i64::from(u32::from_be_bytes([k[8], k[9], k[10], k[11]]));
                let key = match keys::decode_event(&v) {
                    Ok(StoredEvent::Ref { key, .. }) => key.to_vec(),
                    Ok(StoredEvent::Whole(e)) => e.kv.map(|kv| kv.key).unwrap_or_default(),
                    Err(e) => return Err(EtcdSnapshotError::Corrupt(e.to_string())),
                };
                subs.push((key, sub));
            }
            let after = subs.iter().map(|(_, s)| s + 1).max().unwrap_or(0);
            for (i, v) in versions[start..end].iter_mut().enumerate() {
                let key = keys::decode_kv_key(&v.kv_key)
                    .map(|(k, _)| k)
                    .unwrap_or_default();
                v.sub = subs
                    .iter()
                    .find(|(k, _)| *k == key)
                    .map_or(after + i as i64, |(_, s)| *s);
            }
            versions[start..end].sort_unstable_by_key(|v| v.sub);
        }
        start = end;
    }
    Ok(())
}

/// Every bucket but `key`, from `sm_meta` and `leases`.
fn small_buckets(
    db: &DB,
    snap: &Snapshot<'_>,
) -> Result<Vec<(&'static [u8], Entries)>, EtcdSnapshotError> {
    let corrupt = |e: serde_json::Error| EtcdSnapshotError::Corrupt(e.to_string());
    let meta_cf = db::cf(db, CF_SM_META);
    let get = |key: &[u8]| snap.get_cf(meta_cf, key);

    let mut alarms: Entries = match get(META_ALARMS)? {
        Some(v) => serde_json::from_slice::<Vec<(u64, i32)>>(&v)
            .map_err(corrupt)?
            .into_iter()
            .map(|(member, alarm)| (layout::encode_alarm(member, alarm), Vec::new()))
            .collect(),
        None => Vec::new(),
    };
    alarms.sort();
    alarms.dedup();

    let mut leases = Vec::new();
    for item in snap.iterator_cf(db::cf(db, CF_LEASES), rocksdb::IteratorMode::Start) {
        let (k, v) = item?;
        let r: LeaseRecord = serde_json::from_slice(&v).map_err(corrupt)?;
        leases.push((k.to_vec(), layout::encode_lease(r.id, r.ttl)));
    }

    let mut members = Vec::new();
    if let Some(v) = get(META_MEMBERSHIP)? {
        let m: StoredMembership<u64, MemberNode> = serde_json::from_slice(&v).map_err(corrupt)?;
        let learners: Vec<u64> = m.membership().learner_ids().collect();
        for (id, node) in m.membership().nodes() {
            // etcd's membership.Member as JSON: id, RaftAttributes, Attributes.
            let mut member = serde_json::json!({ "id": id, "peerURLs": node.peer_urls });
            if learners.contains(id) {
                member["isLearner"] = true.into();
            }
            if !node.name.is_empty() {
                member["name"] = node.name.clone().into();
            }
            if !node.client_urls.is_empty() {
                member["clientURLs"] = node.client_urls.clone().into();
            }
            members.push((
                format!("{id:x}").into_bytes(),
                member.to_string().into_bytes(),
            ));
        }
    }
    members.sort();

    let mut meta = Vec::new();
    let applied: Option<LogId<u64>> = match get(META_LAST_APPLIED)? {
        Some(v) => serde_json::from_slice(&v).map_err(corrupt)?,
        None => None,
    };
    let (index, term) = applied.map_or((0, 0), |l| (l.index, l.leader_id.term));
    meta.push((
        layout::META_CONSISTENT_INDEX.to_vec(),
        index.to_be_bytes().to_vec(),
    ));
    let compacted = match get(META_COMPACT_REVISION)? {
        Some(v) if v.len() == 8 => i64::from_be_bytes(v[..8].try_into().unwrap_or_default()),
        _ => 0,
    };
    if compacted > 0 {
        let rev = layout::rev_key(compacted, 0, false);
        meta.push((layout::META_FINISHED_COMPACT.to_vec(), rev.clone()));
        meta.push((layout::META_SCHEDULED_COMPACT.to_vec(), rev));
    }
    meta.push((layout::META_TERM.to_vec(), term.to_be_bytes().to_vec()));

    // Auth, as etcd's auth buckets (left empty, as etcd's own before auth is used, when never touched).
    let (auth, users, roles) = match get(crate::auth::state::META_AUTH)? {
        Some(v) => super::auth::to_buckets(&serde_json::from_slice(&v).map_err(corrupt)?),
        None => Default::default(),
    };

    Ok(vec![
        (layout::BUCKET_ALARM, alarms),
        (layout::BUCKET_AUTH, auth),
        (layout::BUCKET_AUTH_ROLES, roles),
        (layout::BUCKET_AUTH_USERS, users),
        (
            layout::BUCKET_CLUSTER,
            vec![(layout::CLUSTER_VERSION.to_vec(), CLUSTER_VERSION.to_vec())],
        ),
        (layout::BUCKET_LEASE, leases),
        (layout::BUCKET_MEMBERS, members),
        (layout::BUCKET_META, meta),
    ])
}

/// Values read ahead of the writer, at most (about) this many bytes at a time.
const WINDOW_BYTES: usize = 32 << 20;
/// A wanted key this close ahead of the iterator is reached by stepping rather than seeking.
const MAX_STEPS: usize = 8;

/// Reads the `kv` values of versions, in key order, into one buffer reused window after window (a
/// `Vec` per value costs an allocation and a free per key).
struct ValueReader<'a> {
    it: rocksdb::DBRawIteratorWithThreadMode<'a, DB>,
    buf: Vec<u8>,
    spans: Vec<std::ops::Range<usize>>,
}

impl ValueReader<'_> {
    /// Reads the value (without kiln's tag byte) of each version in `window`; [`Self::value`] then
    /// gives them by their place in the window (empty for deletions).
    fn read(&mut self, window: &[Version1]) -> Result<(), EtcdSnapshotError> {
        let mut order: Vec<usize> = (0..window.len())
            .filter(|&i| !window[i].tombstone)
            .collect();
        order.sort_unstable_by(|&a, &b| window[a].kv_key.cmp(&window[b].kv_key));
        self.buf.clear();
        self.spans.clear();
        self.spans.resize(window.len(), 0..0);
        for i in order {
            let want = &window[i].kv_key[..];
            let mut steps = 0;
            while self.it.valid() && self.it.key().is_some_and(|k| k < want) && steps < MAX_STEPS {
                self.it.next();
                steps += 1;
            }
            if self.it.key() != Some(want) {
                self.it.seek(want);
            }
            if self.it.key() != Some(want) {
                self.it.status()?;
                return Err(EtcdSnapshotError::Corrupt(
                    "a version vanished from the snapshot".into(),
                ));
            }
            let value = self.it.value().and_then(|v| v.get(1..)).unwrap_or_default();
            let start = self.buf.len();
            self.buf.extend_from_slice(value);
            self.spans[i] = start..self.buf.len();
        }
        Ok(())
    }

    /// The value of the version at `i` in the window last read.
    fn value(&self, i: usize) -> &[u8] {
        &self.buf[self.spans[i].clone()]
    }
}

/// Second pass: the file, in pieces of at least `piece` bytes handed to `sink` (false: stop), ending
/// in the sha256 of everything before it.
pub fn write_to(
    db: &DB,
    snap: &Snapshot<'_>,
    prepared: Prepared,
    piece: usize,
    sink: impl FnMut(Vec<u8>) -> bool,
) -> Result<(), EtcdSnapshotError> {
    let Prepared {
        plan,
        versions,
        small,
    } = prepared;
    let mut w = Writer::new(plan, piece, sink);
    let mut reader = ValueReader {
        it: snap.raw_iterator_cf_opt(db::cf(db, CF_KV), read_opts()),
        buf: Vec::with_capacity(WINDOW_BYTES.min(versions.iter().map(|v| v.value_len).sum())),
        spans: Vec::new(),
    };
    for name in BUCKETS {
        w.bucket(name)?;
        if name == layout::BUCKET_KEY {
            // Values are read a window at a time in key order (neighbouring versions share rocksdb
            // blocks; revision order would hop across the whole family) and written in revision order.
            let mut start = 0;
            while start < versions.len() && w.is_open() {
                let mut end = start;
                let mut bytes = 0;
                while end < versions.len() && (end == start || bytes < WINDOW_BYTES) {
                    bytes += versions[end].value_len;
                    end += 1;
                }
                let window = &versions[start..end];
                reader.read(window)?;
                for (i, v) in window.iter().enumerate() {
                    let rev = layout::rev_key(v.main, v.sub, v.tombstone);
                    if v.tombstone {
                        let (key, _) = keys::decode_kv_key(&v.kv_key).unwrap_or_default();
                        w.put(&rev, &layout::tombstone_value(&key))?;
                    } else {
                        w.put(&rev, reader.value(i))?;
                    }
                }
                start = end;
            }
        } else if let Some((_, entries)) = small.iter().find(|(n, _)| *n == name) {
            for (k, v) in entries {
                w.put(k, v)?;
            }
        }
    }
    w.finish()?;
    Ok(())
}
