//! Byte layouts of the MVCC column families.
//!
//! `kv` keys are `escape(key) 00 00 ‖ !revision (8 bytes BE)`: the escaping (00 → 00 FF) keeps
//! lexicographic key order and makes the terminator unambiguous, and the inverted revision puts
//! the newest version of a key first, so "latest version at or below revision R" is one seek.

use etcd_client::proto::{PbEvent, PbKeyValue};
use prost::Message as _;

use crate::storage::mvcc::MvccError;

/// Encodes the part of a `kv` key that identifies the user key.
pub fn key_prefix(key: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(key.len() + 10);
    for &b in key {
        out.push(b);
        if b == 0 {
            out.push(0xFF);
        }
    }
    out.extend_from_slice(&[0, 0]);
    out
}

/// `kv` key of `key` at `revision`.
pub fn kv_key(key: &[u8], revision: i64) -> Vec<u8> {
    let mut out = key_prefix(key);
    out.extend_from_slice(&inverted(revision));
    out
}

/// Seek target for the newest version of `key` at or below `revision`.
pub fn kv_seek(key: &[u8], revision: i64) -> Vec<u8> {
    kv_key(key, revision)
}

/// The first `kv` key after every version of `key`.
pub fn kv_after(key: &[u8]) -> Vec<u8> {
    let mut out = key_prefix(key);
    out.extend_from_slice(&[0xFF; 8]);
    out
}

/// Appends the `kv` key of `key` at `revision` to `out` (bulk writers that keep keys in one buffer).
pub fn put_kv_key(out: &mut Vec<u8>, key: &[u8], revision: i64) {
    for &b in key {
        out.push(b);
        if b == 0 {
            out.push(0xFF);
        }
    }
    out.extend_from_slice(&[0, 0]);
    out.extend_from_slice(&inverted(revision));
}

fn inverted(revision: i64) -> [u8; 8] {
    (!(revision as u64)).to_be_bytes()
}

/// Splits a `kv` key into the user key and revision; `None` for a malformed key.
pub fn decode_kv_key(raw: &[u8]) -> Option<(Vec<u8>, i64)> {
    if raw.len() < 10 {
        return None;
    }
    let (body, rev) = raw.split_at(raw.len() - 8);
    let mut key = Vec::with_capacity(body.len());
    let mut i = 0;
    while i < body.len() {
        let b = body[i];
        if b == 0 {
            match body.get(i + 1) {
                Some(0xFF) => {
                    key.push(0);
                    i += 2;
                }
                Some(0) if i + 2 == body.len() => {
                    let mut r = [0u8; 8];
                    r.copy_from_slice(rev);
                    return Some((key, !u64::from_be_bytes(r) as i64));
                }
                _ => return None,
            }
        } else {
            key.push(b);
            i += 1;
        }
    }
    None
}

/// A `kv` value: a live key-value or a tombstone.
#[derive(Debug, Clone, PartialEq)]
pub enum Version {
    Put(PbKeyValue),
    Tombstone,
}

const TAG_PUT: u8 = 0;
const TAG_TOMBSTONE: u8 = 1;

impl Version {
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Version::Put(kv) => {
                let mut out = Vec::with_capacity(kv.encoded_len() + 1);
                out.push(TAG_PUT);
                kv.encode(&mut out).expect("Vec grows as needed");
                out
            }
            Version::Tombstone => vec![TAG_TOMBSTONE],
        }
    }

    pub fn decode(raw: &[u8]) -> Result<Self, MvccError> {
        match raw.first() {
            Some(&TAG_PUT) => Ok(Version::Put(PbKeyValue::decode(&raw[1..])?)),
            Some(&TAG_TOMBSTONE) => Ok(Version::Tombstone),
            _ => Err(MvccError::Corrupt("unknown kv version tag".into())),
        }
    }

    pub fn is_tombstone_raw(raw: &[u8]) -> bool {
        raw.first() == Some(&TAG_TOMBSTONE)
    }
}

/// etcd's event types (mvccpb.Event.EventType).
pub const EVENT_PUT: i32 = 0;
pub const EVENT_DELETE: i32 = 1;

/// `events` key: revision and position inside the revision's transaction.
pub fn event_key(revision: i64, sub: u32) -> [u8; 12] {
    let mut out = [0u8; 12];
    out[..8].copy_from_slice(&(revision as u64).to_be_bytes());
    out[8..].copy_from_slice(&sub.to_be_bytes());
    out
}

pub fn event_revision(raw_key: &[u8]) -> i64 {
    let mut r = [0u8; 8];
    r.copy_from_slice(&raw_key[..8]);
    u64::from_be_bytes(r) as i64
}

/// Marks an `events` value that names the changed key instead of holding the whole event. No
/// protobuf encoding of an event starts with a 0 byte (field number 0 is invalid), so values written
/// by older data dirs (a whole `PbEvent`) still read as they are.
const EVENT_REF: u8 = 0;

/// `events` value of a change of `key` (`ty`: etcd's event type). The key's version at the event's
/// revision is in `kv`, stored once: a put writes its value once, and a snapshot carries it once.
pub fn encode_event_ref(ty: i32, key: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(key.len() + 2);
    put_event_ref(&mut out, ty, key);
    out
}

/// Appends [`encode_event_ref`]'s encoding to `out`.
pub fn put_event_ref(out: &mut Vec<u8>, ty: i32, key: &[u8]) {
    out.push(EVENT_REF);
    out.push(ty as u8);
    out.extend_from_slice(key);
}

/// An `events` value: what it says of the change.
pub enum StoredEvent<'a> {
    /// Of type `ty`, to `key`; the key-value is read from `kv` at the event's revision.
    Ref { ty: i32, key: &'a [u8] },
    /// A whole event, as older data dirs stored it.
    Whole(PbEvent),
}

pub fn decode_event(raw: &[u8]) -> Result<StoredEvent<'_>, MvccError> {
    match raw {
        [EVENT_REF, ty, key @ ..] => Ok(StoredEvent::Ref {
            ty: i32::from(*ty),
            key,
        }),
        [EVENT_REF, ..] => Err(MvccError::Corrupt("truncated event".into())),
        _ => Ok(StoredEvent::Whole(PbEvent::decode(raw)?)),
    }
}

/// `lease_keys` key of `key` attached to lease `id`.
pub fn lease_key(id: i64, key: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + key.len());
    out.extend_from_slice(&(id as u64).to_be_bytes());
    out.extend_from_slice(key);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kv_keys_sort_by_key_then_newest_first() {
        let mut keys = [
            kv_key(b"a", 1),
            kv_key(b"a", 5),
            kv_key(b"a\0", 2),
            kv_key(b"ab", 3),
            kv_key(b"", 9),
            kv_key(b"a\0\0", 1),
        ];
        keys.sort();
        let decoded: Vec<_> = keys.iter().map(|k| decode_kv_key(k).unwrap()).collect();
        assert_eq!(
            decoded,
            vec![
                (b"".to_vec(), 9),
                (b"a".to_vec(), 5),
                (b"a".to_vec(), 1),
                (b"a\0".to_vec(), 2),
                (b"a\0\0".to_vec(), 1),
                (b"ab".to_vec(), 3),
            ]
        );
    }

    #[test]
    fn seek_targets_bracket_versions() {
        assert!(kv_after(b"a") > kv_key(b"a", 1));
        assert!(kv_after(b"a") < kv_key(b"a\0", 1000));
        assert!(kv_seek(b"a", 4) > kv_key(b"a", 5));
        assert!(kv_seek(b"a", 4) <= kv_key(b"a", 4));
    }
}
