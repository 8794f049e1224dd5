//! An etcd snapshot (a bbolt file, from `etcdctl snapshot save` of a real etcd 3.4/3.5 or of kiln-store)
//! as kiln-store's state-machine column families, for `kiln-store snapshot restore`: every version of the
//! `key` bucket into `kv`, an event per version from the compaction on (so watches can start there, as
//! in etcd), leases with the keys attached to them at the snapshot's revision, the revisions, and the
//! auth buckets as kiln-store's auth record.

use std::collections::HashMap;

use sha2::{Digest, Sha256};

use kiln_common::bbolt::read::Db;
use kiln_common::bbolt::SHA256_LEN;
use kiln_common::etcd_db as layout;

use super::{Borrowed, Entries, EtcdSnapshotError};
use crate::storage::db::{CF_EVENTS, CF_KV, CF_LEASES, CF_LEASE_KEYS, CF_SM_META};
use crate::storage::mvcc::keys::{self, EVENT_DELETE, EVENT_PUT};
use crate::storage::mvcc::{LeaseRecord, META_COMPACT_REVISION, META_REVISION};
use crate::storage::snapshot::Record;

/// The restored families, each sorted by key.
pub struct Loaded {
    families: Vec<(&'static str, Entries)>,
}

impl Loaded {
    /// The records, family by family, as a kiln snapshot lists them.
    pub fn records(&self) -> Vec<Record<'_>> {
        self.families
            .iter()
            .flat_map(|(family, kvs)| kvs.iter().map(|(key, value)| Record { family, key, value }))
            .collect()
    }
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

    let (mut kv, mut events) = (Vec::new(), Vec::new());
    // Each key's newest version: (lease, deleted).
    let mut newest: HashMap<Vec<u8>, (i64, bool)> = HashMap::new();
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
            let stored = if tombstone {
                keys::Version::Tombstone.encode()
            } else {
                let mut v = Vec::with_capacity(e.value.len() + 1);
                v.push(0); // keys::Version::Put's tag, then the KeyValue as etcd encoded it
                v.extend_from_slice(e.value);
                v
            };
            kv.push((keys::kv_key(value.key, main), stored));
            if main >= compacted {
                let ty = if tombstone { EVENT_DELETE } else { EVENT_PUT };
                events.push((
                    keys::event_key(main, sub).to_vec(),
                    keys::encode_event_ref(ty, value.key),
                ));
            }
            newest.insert(value.key.to_vec(), (value.lease, tombstone));
            Ok(())
        })?;
    }
    kv.sort_unstable();
    events.sort_unstable();
    let mut lease_keys: Entries = newest
        .into_iter()
        .filter(|(_, (lease, deleted))| {
            *lease != 0
                && !deleted
                && leases
                    .binary_search_by(|(k, _)| k.as_slice().cmp(&(*lease as u64).to_be_bytes()[..]))
                    .is_ok()
        })
        .map(|(key, (lease, _))| (keys::lease_key(lease, &key), Vec::new()))
        .collect();
    lease_keys.sort_unstable();

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
    Ok(Loaded {
        families: vec![
            (CF_KV, kv),
            (CF_EVENTS, events),
            (CF_LEASES, leases),
            (CF_LEASE_KEYS, lease_keys),
            (CF_SM_META, meta),
        ],
    })
}
