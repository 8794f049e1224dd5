//! The commands that travel through the Raft log, their answers, and the Raft type
//! configuration built on them: the lowest layer, which the storage, auth and member layers share.
//!
//! Commands reuse etcd's own protobuf messages, wrapped in a small protobuf envelope, so the
//! log stores exactly what a client asked for and later versions can add commands without
//! breaking old logs (new oneof tags).

pub mod auth;

use std::io::Cursor;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use etcd_client::proto::{
    PbAlarmRequest, PbAlarmResponse, PbCompactionRequest, PbCompactionResponse, PbDeleteRequest,
    PbDeleteResponse, PbLeaseGrantRequest, PbLeaseGrantResponse, PbLeaseRevokeRequest,
    PbLeaseRevokeResponse, PbPutRequest, PbPutResponse, PbTxnRequest, PbTxnResponse,
};
use prost::Message as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::etcd_error::ErrorCode;

/// A member as Raft sees it: what `MemberList` reports and what a peer needs to connect.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberNode {
    pub name: String,
    pub peer_urls: Vec<String>,
    pub client_urls: Vec<String>,
}

openraft::declare_raft_types!(
    /// Type configuration of kiln-store's Raft group.
    pub TypeConfig:
        D = StoreRequest,
        R = StoreResponse,
        NodeId = u64,
        Node = MemberNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = Cursor<Vec<u8>>,
        AsyncRuntime = openraft::TokioRuntime,
);

/// Raft handle with kiln-store's types.
pub type KilnRaft = openraft::Raft<TypeConfig>;

/// One state-machine command (a write, as etcd would apply it).
#[derive(Clone, PartialEq, prost::Message)]
pub struct StoreRequest {
    #[prost(oneof = "store_request::Op", tags = "1, 2, 3, 4, 5, 6, 7, 8, 10")]
    pub op: Option<store_request::Op>,
    /// Set by the member that proposed the command (0: nobody waits): its state machine hands
    /// the response straight to the waiting caller (see `member::waiters`). Applying ignores it.
    #[prost(uint64, tag = "9")]
    pub proposal: u64,
    /// The caller of a client's key-value or lease command, re-checked when it is applied
    /// (`auth::recheck`). None: nothing to re-check (internal commands, logs from before).
    #[prost(message, optional, tag = "11")]
    pub auth: Option<crate::command::auth::RequestAuth>,
}

/// Several client commands proposed as one Raft entry (group commit: one log append and one
/// fsync for all of them). Applied in order, each in its own revision exactly as if each had
/// been an entry of its own.
#[derive(Clone, PartialEq, prost::Message)]
pub struct StoreBatch {
    #[prost(message, repeated, tag = "1")]
    pub requests: Vec<StoreRequest>,
}

/// The responses to a [`StoreBatch`], one per command, in order.
#[derive(Clone, PartialEq, prost::Message)]
pub struct StoreBatchResponse {
    #[prost(message, repeated, tag = "1")]
    pub responses: Vec<StoreResponse>,
}

pub mod store_request {
    use super::*;

    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum Op {
        #[prost(message, tag = "1")]
        Put(PbPutRequest),
        #[prost(message, tag = "2")]
        DeleteRange(PbDeleteRequest),
        #[prost(message, tag = "3")]
        Txn(PbTxnRequest),
        #[prost(message, tag = "4")]
        Compact(PbCompactionRequest),
        #[prost(message, tag = "5")]
        LeaseGrant(PbLeaseGrantRequest),
        #[prost(message, tag = "6")]
        LeaseRevoke(PbLeaseRevokeRequest),
        #[prost(message, tag = "7")]
        Alarm(PbAlarmRequest),
        /// Never nested: the proposer only batches plain commands.
        #[prost(message, tag = "8")]
        Batch(StoreBatch),
        /// A change to users, roles or the auth switch, or a token handed out (`auth`).
        #[prost(message, tag = "10")]
        Auth(crate::command::auth::AuthCommand),
    }
}

/// The result of applying one [`StoreRequest`]: an etcd response or an etcd error.
#[derive(Clone, PartialEq, prost::Message)]
pub struct StoreResponse {
    #[prost(oneof = "store_response::Result", tags = "1, 2, 3, 4, 5, 6, 7, 8, 12")]
    pub result: Option<store_response::Result>,
    /// gRPC status code of a failed command (0 = success; [`ErrorCode`]'s numbers).
    #[prost(int32, tag = "10")]
    pub error_code: i32,
    /// etcd's error text for a failed command, e.g. "etcdserver: requested lease not found".
    #[prost(string, tag = "11")]
    pub error_message: String,
}

pub mod store_response {
    use super::*;

    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum Result {
        #[prost(message, tag = "1")]
        Put(PbPutResponse),
        #[prost(message, tag = "2")]
        DeleteRange(PbDeleteResponse),
        #[prost(message, tag = "3")]
        Txn(PbTxnResponse),
        #[prost(message, tag = "4")]
        Compact(PbCompactionResponse),
        #[prost(message, tag = "5")]
        LeaseGrant(PbLeaseGrantResponse),
        #[prost(message, tag = "6")]
        LeaseRevoke(PbLeaseRevokeResponse),
        #[prost(message, tag = "7")]
        Alarm(PbAlarmResponse),
        #[prost(message, tag = "8")]
        Batch(StoreBatchResponse),
        #[prost(message, tag = "12")]
        Auth(crate::command::auth::AuthApplied),
    }
}

impl StoreRequest {
    pub fn new(op: store_request::Op) -> Self {
        Self {
            op: Some(op),
            proposal: 0,
            auth: None,
        }
    }

    /// A client's command, with who asked and at which auth revision (see [`Self::auth`]).
    pub fn on_behalf(op: store_request::Op, auth: crate::command::auth::RequestAuth) -> Self {
        Self {
            auth: Some(auth),
            ..Self::new(op)
        }
    }
}

impl StoreResponse {
    pub fn ok(result: store_response::Result) -> Self {
        Self {
            result: Some(result),
            ..Default::default()
        }
    }

    /// A failure of kiln-store itself (gRPC code Internal).
    pub fn internal(message: impl Into<String>) -> Self {
        Self::error(ErrorCode::Internal, message)
    }

    pub fn error(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            result: None,
            error_code: code.number(),
            error_message: message.into(),
        }
    }
}

/// openraft's `serde` feature needs serde for commands; we encode them as base64 protobuf so
/// the JSON log entries stay compact and the wire format is etcd's own.
macro_rules! serde_as_base64_protobuf {
    ($t:ty) => {
        impl Serialize for $t {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(&BASE64.encode(self.encode_to_vec()))
            }
        }

        impl<'de> Deserialize<'de> for $t {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                use serde::de::Error as _;
                let text = String::deserialize(d)?;
                let bytes = BASE64.decode(text).map_err(D::Error::custom)?;
                <$t>::decode(bytes.as_slice()).map_err(D::Error::custom)
            }
        }
    };
}

serde_as_base64_protobuf!(StoreRequest);
serde_as_base64_protobuf!(StoreResponse);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_round_trips_through_json() {
        let req = StoreRequest::new(store_request::Op::Put(PbPutRequest {
            key: b"/registry/a".to_vec(),
            value: vec![0, 1, 2, 255],
            ..Default::default()
        }));
        let json = serde_json::to_string(&req).unwrap();
        let back: StoreRequest = serde_json::from_str(&json).unwrap();
        assert_eq!(req, back);
    }

    #[test]
    fn batch_round_trips_through_json() {
        let put = |k: &str| {
            StoreRequest::new(store_request::Op::Put(PbPutRequest {
                key: k.as_bytes().to_vec(),
                value: b"v".to_vec(),
                ..Default::default()
            }))
        };
        let req = StoreRequest::new(store_request::Op::Batch(StoreBatch {
            requests: vec![put("a"), put("b")],
        }));
        let json = serde_json::to_string(&req).unwrap();
        let back: StoreRequest = serde_json::from_str(&json).unwrap();
        assert_eq!(req, back);
    }
}
