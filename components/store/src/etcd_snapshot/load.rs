//! An etcd snapshot (a bbolt file, from `etcdctl snapshot save` of a real etcd 3.4/3.5 or of kiln-store)
//! as kiln-store's state-machine column families, for `kiln-store snapshot restore`: every version of the
//! `key` bucket into `kv`, an event per version from the compaction on (so watches can start there, as
//! in etcd), leases with the keys attached to them at the snapshot's revision, the revisions, and the
//! auth buckets as kiln-store's auth record.

use sha2::{Digest, Sha256};

use kiln_common::bbolt::read::Db;
use kiln_common::bbolt::SHA256_LEN;
use kiln_common::etcd_db as layout;

use super::{Borrowed, Entries, EtcdSnapshotError};
use crate::storage::db::{CF_EVENTS, CF_KV, CF_LEASES, CF_LEASE_KEYS, CF_SM_META};
use crate::storage::mvcc::keys::{self, EVENT_DELETE, EVENT_PUT};
use crate::storage::mvcc::{LeaseRecord, META_COMPACT_REVISION, META_REVISION};
use crate::storage::snapshot::Record;

/// Where one key or value lies in [`Loaded`]'s arena.
type Span = std::ops::Range<usize>;

/// The restored families, each sorted by key. Every key and value is in one arena rather than a
/// `Vec` of its own: a snapshot of 100 000 keys would otherwise cost some 400 000 allocations and
/// frees, more time than the parsing itself.
pub struct Loaded {
    arena: Vec<u8>,
    families: Vec<(&'static str, Vec<(Span, Span)>)>,
}

impl Loaded {
    /// The records, family by family, as a kiln snapshot lists them.
    pub fn records(&self) -> Vec<Record<'_>> {
        self.families
            .iter()
            .flat_map(|(family, kvs)| {
                kvs.iter().map(|(key, value)| Record {
                    family,
                    key: &self.arena[key.clone()],
                    value: &self.arena[value.clone()],
                })
            })
            .collect()
    }
}

/// Appends `bytes` to the arena; returns where they are.
fn put(arena: &mut Vec<u8>, bytes: &[u8]) -> Span {
    let start = arena.len();
    arena.extend_from_slice(bytes);
    start..arena.len()
}

/// Appends what `write` writes to the arena; returns where it is.
fn put_with(arena: &mut Vec<u8>, write: impl FnOnce(&mut Vec<u8>)) -> Span {
    let start = arena.len();
    write(arena);
    start..arena.len()
}

/// Owned entries into the arena, in their order.
fn put_all(arena: &mut Vec<u8>, entries: &Entries) -> Vec<(Span, Span)> {
    entries
        .iter()
        .map(|(k, v)| (put(arena, k), put(arena, v)))
        .collect()
}

/// Checks etcd's sha256 trailer, as `etcdctl snapshot restore` does: present when the size is 32 bytes
/// past a 512-byte boundary, and then it must match the database before it.
pub fn verify(data: &[u8]) -> Result<(), EtcdSnapshotError> {
    if data.len() % 512 != SHA256_LEN {
        return Err(EtcdSnapshotError::NoChecksum);
    }
    let (db, digest) = data.split_at(data.len() - SHA256_LEN);
    if Sha256::digest(db).as_slice() != digest {
        return Err(EtcdSnapshotError::Checksum);
    }
    Ok(())
}

/// Reads an etcd database (its trailer already checked) into kiln-store's families.
pub fn load(data: &[u8]) -> Result<Loaded, EtcdSnapshotError> {
    let db = Db::open(data)?;
    let compacted = layout::compacted(&db)?;
    let mut leases = Vec::new();
    if let Some(b) = db.bucket(layout::BUCKET_LEASE)? {
        db.for_each::<EtcdSnapshotError>(b, |e| {
            let (id, ttl) = layout::decode_lease(e.value)
                .ok_or_else(|| EtcdSnapshotError::Corrupt("a lease is no leasepb.Lease".into()))?;
            let record = serde_json::to_vec(&LeaseRecord { id, ttl })
                .map_err(|e| EtcdSnapshotError::Corrupt(e.to_string()))?;
            leases.push(((id as u64).to_be_bytes().to_vec(), record));
            Ok(())
        })?;
    }
    leases.sort();

    // Keys and values take about the file's size again (the values once in `kv`; keys twice, small).
    let mut arena: Vec<u8> = Vec::with_capacity(data.len());
    // kv entries, with what the lease pass needs: the version's lease and whether it is a deletion.
    let mut kv: Vec<(Span, Span, i64, bool)> = Vec::new();
    let mut events: Vec<(Span, Span)> = Vec::new();
    let mut revision = 1;
    if let Some(b) = db.bucket(layout::BUCKET_KEY)? {
        db.for_each::<EtcdSnapshotError>(b, |e| {
            let corrupt = |what: &str| EtcdSnapshotError::Corrupt(what.into());
            let (main, sub, tombstone) = layout::parse_rev_key(e.key)
                .ok_or_else(|| corrupt("a key bucket key is no revision"))?;
            let value = layout::decode_key_value(e.value)
                .ok_or_else(|| corrupt("a key bucket value is no mvccpb.KeyValue"))?;
            let sub = u32::try_from(sub).map_err(|_| corrupt("sub revision out of range"))?;
            revision = revision.max(main);
            let key = put_with(&mut arena, |a| keys::put_kv_key(a, value.key, main));
            let stored = if tombstone {
                put(&mut arena, &keys::Version::Tombstone.encode())
            } else {
                put_with(&mut arena, |a| {
                    a.push(0); // keys::Version::Put's tag, then the KeyValue as etcd encoded it
                    a.extend_from_slice(e.value);
                })
            };
            kv.push((key, stored, value.lease, tombstone));
            if main >= compacted {
                let ty = if tombstone { EVENT_DELETE } else { EVENT_PUT };
                events.push((
                    put(&mut arena, &keys::event_key(main, sub)),
                    put_with(&mut arena, |a| keys::put_event_ref(a, ty, value.key)),
                ));
            }
            Ok(())
        })?;
    }
    let by_key = |arena: &[u8], a: &Span, b: &Span| arena[a.clone()].cmp(&arena[b.clone()]);
    kv.sort_unstable_by(|a, b| by_key(&arena, &a.0, &b.0));
    // The key bucket is in revision order, as events are keyed: already sorted unless the file is odd.
    events.sort_by(|a, b| by_key(&arena, &a.0, &b.0));
    // Each key's newest version comes first among its versions in `kv` (revisions inverted): the
    // keys attached to a live lease are those whose newest version is a put with that lease.
    let mut lease_keys: Entries = Vec::new();
    let mut previous: Option<&[u8]> = None;
    for (key, _, lease, tombstone) in &kv {
        // The user key's part of a kv key: all but the 8 revision bytes.
        let user = &arena[key.start..key.end - 8];
        if previous == Some(user) {
            continue;
        }
        previous = Some(user);
        let live = *lease != 0
            && !tombstone
            && leases
                .binary_search_by(|(k, _)| k.as_slice().cmp(&(*lease as u64).to_be_bytes()[..]))
                .is_ok();
        if live {
            let (user_key, _) = keys::decode_kv_key(&arena[key.clone()])
                .ok_or_else(|| EtcdSnapshotError::Corrupt("malformed kv key".into()))?;
            lease_keys.push((keys::lease_key(*lease, &user_key), Vec::new()));
        }
    }
    lease_keys.sort_unstable();
    let kv: Vec<(Span, Span)> = kv.into_iter().map(|(k, v, _, _)| (k, v)).collect();

    let bucket = |name: &[u8]| -> Result<Borrowed<'_>, EtcdSnapshotError> {
        let mut out = Vec::new();
        if let Some(b) = db.bucket(name)? {
            db.for_each::<EtcdSnapshotError>(b, |e| {
                out.push((e.key, e.value));
                Ok(())
            })?;
        }
        Ok(out)
    };
    let auth = super::auth::from_buckets(
        &bucket(layout::BUCKET_AUTH)?,
        &bucket(layout::BUCKET_AUTH_USERS)?,
        &bucket(layout::BUCKET_AUTH_ROLES)?,
    )?;

    let mut meta = vec![(
        META_REVISION.to_vec(),
        revision.max(compacted).to_be_bytes().to_vec(),
    )];
    if compacted > 0 {
        meta.push((
            META_COMPACT_REVISION.to_vec(),
            compacted.to_be_bytes().to_vec(),
        ));
    }
    if let Some(state) = auth {
        let record =
            serde_json::to_vec(&state).map_err(|e| EtcdSnapshotError::Corrupt(e.to_string()))?;
        meta.push((crate::auth::state::META_AUTH.to_vec(), record));
    }
    meta.sort();
    let leases = put_all(&mut arena, &leases);
    let lease_keys = put_all(&mut arena, &lease_keys);
    let meta = put_all(&mut arena, &meta);
    Ok(Loaded {
        arena,
        families: vec![
            (CF_KV, kv),
            (CF_EVENTS, events),
            (CF_LEASES, leases),
            (CF_LEASE_KEYS, lease_keys),
            (CF_SM_META, meta),
        ],
    })
}
