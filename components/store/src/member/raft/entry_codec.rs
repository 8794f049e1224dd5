//! How a Raft log entry is stored in rocksdb: a compact binary record.
//!
//! Every entry is encoded once on the write path (the leader's append, before the fsync the
//! client waits for) and a client command is etcd's own protobuf, so the record is a small
//! header and the command's protobuf as it is: no JSON, no base64. Logs written before this
//! format hold JSON entries; those start with `{` and are still read.
//!
//! Record: version byte, term, leader node id and index (big-endian u64 each), payload kind,
//! then the payload: nothing (blank), the command's protobuf (normal) or the membership as
//! JSON (membership; rare, and JSON keeps it readable across openraft's type changes).

use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId, Membership};
use prost::Message as _;

use crate::command::{MemberNode, StoreRequest, TypeConfig};

const FORMAT_V1: u8 = 1;
const KIND_BLANK: u8 = 0;
const KIND_NORMAL: u8 = 1;
const KIND_MEMBERSHIP: u8 = 2;
const HEADER_LEN: usize = 1 + 8 * 3 + 1;

#[derive(Debug, thiserror::Error)]
pub enum EntryCodecError {
    #[error("raft log record shorter than its header ({0} bytes)")]
    Short(usize),
    #[error("raft log record has unknown format {0}")]
    Format(u8),
    #[error("raft log record has unknown payload kind {0}")]
    Kind(u8),
    #[error("raft log command: {0}")]
    Command(#[from] prost::DecodeError),
    #[error("raft log entry (json): {0}")]
    Json(#[from] serde_json::Error),
}

/// Encodes `entry` as a log record.
pub fn encode(entry: &Entry<TypeConfig>) -> Result<Vec<u8>, EntryCodecError> {
    let (kind, len) = match &entry.payload {
        EntryPayload::Blank => (KIND_BLANK, 0),
        EntryPayload::Normal(req) => (KIND_NORMAL, req.encoded_len()),
        EntryPayload::Membership(_) => (KIND_MEMBERSHIP, 256),
    };
    let mut out = Vec::with_capacity(HEADER_LEN + len);
    out.push(FORMAT_V1);
    out.extend_from_slice(&entry.log_id.leader_id.term.to_be_bytes());
    out.extend_from_slice(&entry.log_id.leader_id.node_id.to_be_bytes());
    out.extend_from_slice(&entry.log_id.index.to_be_bytes());
    out.push(kind);
    match &entry.payload {
        EntryPayload::Blank => {}
        // Writing into a Vec cannot fail for lack of room.
        EntryPayload::Normal(req) => req.encode_raw(&mut out),
        EntryPayload::Membership(m) => serde_json::to_writer(&mut out, m)?,
    }
    Ok(out)
}

fn be_u64(bytes: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&bytes[..8]);
    u64::from_be_bytes(b)
}

/// Decodes a log record, binary or (from older logs) JSON.
pub fn decode(bytes: &[u8]) -> Result<Entry<TypeConfig>, EntryCodecError> {
    match bytes.first() {
        Some(b'{') => return Ok(serde_json::from_slice(bytes)?),
        Some(&FORMAT_V1) => {}
        Some(other) => return Err(EntryCodecError::Format(*other)),
        None => return Err(EntryCodecError::Short(0)),
    }
    if bytes.len() < HEADER_LEN {
        return Err(EntryCodecError::Short(bytes.len()));
    }
    let log_id = LogId::new(
        CommittedLeaderId::new(be_u64(&bytes[1..]), be_u64(&bytes[9..])),
        be_u64(&bytes[17..]),
    );
    let body = &bytes[HEADER_LEN..];
    let payload = match bytes[HEADER_LEN - 1] {
        KIND_BLANK => EntryPayload::Blank,
        KIND_NORMAL => EntryPayload::Normal(StoreRequest::decode(body)?),
        KIND_MEMBERSHIP => {
            EntryPayload::Membership(serde_json::from_slice::<Membership<u64, MemberNode>>(body)?)
        }
        other => return Err(EntryCodecError::Kind(other)),
    };
    Ok(Entry { log_id, payload })
}

/// The log id of a record without decoding its payload.
pub fn log_id(bytes: &[u8]) -> Result<LogId<u64>, EntryCodecError> {
    if bytes.first() == Some(&FORMAT_V1) && bytes.len() >= HEADER_LEN {
        return Ok(LogId::new(
            CommittedLeaderId::new(be_u64(&bytes[1..]), be_u64(&bytes[9..])),
            be_u64(&bytes[17..]),
        ));
    }
    decode(bytes).map(|e| e.log_id)
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use etcd_client::proto::PbPutRequest;

    use super::*;
    use crate::command::store_request::Op;

    fn id(index: u64) -> LogId<u64> {
        LogId::new(CommittedLeaderId::new(3, 7), index)
    }

    #[test]
    fn every_payload_kind_round_trips() {
        let put = StoreRequest::new(Op::Put(PbPutRequest {
            key: b"/registry/a".to_vec(),
            value: vec![0, 1, 2, 255],
            lease: 5,
            ..Default::default()
        }));
        let node = MemberNode {
            name: "a".into(),
            peer_urls: vec!["https://10.0.0.1:2380".into()],
            client_urls: vec![],
        };
        let membership = Membership::new(vec![BTreeSet::from([7])], BTreeMap::from([(7, node)]));
        let entries = [
            Entry::<TypeConfig> {
                log_id: id(1),
                payload: EntryPayload::Blank,
            },
            Entry {
                log_id: id(2),
                payload: EntryPayload::Normal(put),
            },
            Entry {
                log_id: id(3),
                payload: EntryPayload::Membership(membership),
            },
        ];
        for entry in entries {
            let bytes = encode(&entry).unwrap();
            assert_eq!(log_id(&bytes).unwrap(), entry.log_id);
            let back = decode(&bytes).unwrap();
            assert_eq!(back.log_id, entry.log_id);
            assert_eq!(
                format!("{:?}", back.payload),
                format!("{:?}", entry.payload)
            );
        }
    }

    #[test]
    fn json_entries_of_older_logs_are_still_read() {
        let entry = Entry::<TypeConfig> {
            log_id: id(9),
            payload: EntryPayload::Normal(StoreRequest::new(Op::Put(PbPutRequest {
                key: b"k".to_vec(),
                ..Default::default()
            }))),
        };
        let json = serde_json::to_vec(&entry).unwrap();
        assert_eq!(log_id(&json).unwrap(), id(9));
        let back = decode(&json).unwrap();
        assert_eq!(
            format!("{:?}", back.payload),
            format!("{:?}", entry.payload)
        );
    }
}
