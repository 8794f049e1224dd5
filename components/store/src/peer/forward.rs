//! What a follower forwards to the leader over the peer transport, and the answers: the
//! requests only the leader can serve ([`LeaderOp`]), its replies, and the error that carries
//! etcd's gRPC code and text back to the member the client asked (its API layer makes it a tonic
//! status: `api::grpc::status`).

use serde::{Deserialize, Serialize};

use crate::command::{MemberNode, StoreRequest, StoreResponse};
use crate::etcd_error::{ErrorCode, EtcdError};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum LeaderOp {
    Write(StoreRequest),
    ReadIndex,
    LeaseKeepAlive(i64),
    LeaseTimeToLive(i64),
    Member(MemberChange),
    /// Hand leadership to this member (Maintenance MoveLeader).
    MoveLeader(u64),
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum MemberChange {
    Add {
        id: u64,
        node: MemberNode,
        learner: bool,
    },
    Remove {
        id: u64,
    },
    Update {
        id: u64,
        peer_urls: Vec<String>,
    },
    Promote {
        id: u64,
    },
    /// A started member announces its name and client URLs (etcd's "publish").
    Publish {
        id: u64,
        name: String,
        client_urls: Vec<String>,
    },
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum LeaderReply {
    /// Applied at Raft log `index` on the leader.
    Write { index: u64, response: StoreResponse },
    /// Reads are linearizable once the reader applied up to `index`.
    ReadIndex { index: u64 },
    /// (remaining seconds, granted TTL) of a lease the leader knows, or None.
    Lease { ttl: Option<(i64, i64)> },
    /// The membership change is committed at `index`.
    Member { index: u64 },
    /// Leadership moved to the requested member.
    Moved,
}

/// A failure on the leader side, with etcd's gRPC code and text.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ForwardError {
    /// The member asked is not (or no longer) the leader; `leader` is its best guess.
    pub not_leader: bool,
    pub leader: Option<(u64, MemberNode)>,
    /// [`ErrorCode`]'s number; a number on the wire, since a member of another build may have sent
    /// a code this one does not name.
    pub code: i32,
    pub message: String,
}

impl ForwardError {
    pub fn etcd(e: EtcdError) -> Self {
        Self::status(e.code(), e.to_string())
    }

    pub fn status(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            not_leader: false,
            leader: None,
            code: code.number(),
            message: message.into(),
        }
    }

    pub fn failed_precondition(message: impl Into<String>) -> Self {
        Self::status(ErrorCode::FailedPrecondition, message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::status(ErrorCode::NotFound, message)
    }

    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::status(ErrorCode::Unavailable, message)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::status(ErrorCode::Internal, message)
    }
}

impl std::fmt::Display for ForwardError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}
