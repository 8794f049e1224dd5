//! The peer transport: one gRPC method on --listen-peer-urls, `/kiln.store.Peer/Call`, that
//! carries Raft's RPCs (AppendEntries, Vote, InstallSnapshot) and the requests a follower
//! forwards to the leader (writes, read index, membership changes), as openraft's serde types.
//!
//! A call's body is a small protobuf frame: the request as JSON, plus raw bytes for snapshot
//! chunks (so they do not grow fourfold as JSON arrays). Peers authenticate each other with
//! mutual TLS when the peer URLs are https.
//!
//! Here: the protocol (`Frame`, [`PeerRequest`], `forward`'s leader requests and answers) and the
//! client (`client`, `codec`); the server that dispatches calls to a member is
//! `api::grpc::peer`, above the member layer that uses this client.

pub mod client;
pub mod codec;
pub mod forward;

use openraft::raft::{AppendEntriesRequest, InstallSnapshotRequest, VoteRequest};
use serde::{Deserialize, Serialize};

use crate::command::{MemberNode, TypeConfig};
use crate::peer::forward::LeaderOp;

/// gRPC path of the only peer method.
pub const CALL_PATH: &str = "/kiln.store.Peer/Call";
pub const SERVICE_NAME: &str = "kiln.store.Peer";
/// Largest frame either side accepts (Raft batches and 3 MiB snapshot chunks fit easily).
pub const MAX_FRAME_BYTES: usize = 64 * 1024 * 1024;

/// The wire frame of a call and of its answer.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Frame {
    #[prost(bytes = "vec", tag = "1")]
    pub json: Vec<u8>,
    #[prost(bytes = "vec", tag = "2")]
    pub data: Vec<u8>,
}

/// What one member asks another.
#[derive(Debug, Serialize, Deserialize)]
pub enum PeerRequest {
    AppendEntries(AppendEntriesRequest<TypeConfig>),
    Vote(VoteRequest<u64>),
    /// The chunk's bytes travel in [`Frame::data`]; `data` here is empty on the wire.
    InstallSnapshot(InstallSnapshotRequest<TypeConfig>),
    /// A request only the leader can serve, forwarded by a follower.
    Leader(LeaderOp),
    /// Cluster ID and members, asked by a member joining with --initial-cluster-state existing.
    ClusterInfo,
    /// The leader asks its chosen successor to campaign (MoveLeader).
    Campaign,
}

/// Answer to [`PeerRequest::ClusterInfo`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ClusterInfo {
    pub cluster_id: u64,
    pub members: Vec<(u64, MemberNode)>,
}

#[derive(Debug, thiserror::Error)]
pub enum PeerError {
    /// The call failed after the request may have left: it may or may not have been served.
    #[error("peer {url}: {message}")]
    Transport { url: String, message: String },
    /// No connection could be made: the request never left.
    #[error("peer {url}: cannot connect: {message}")]
    Connect { url: String, message: String },
    #[error("peer has no URL")]
    NoUrl,
    #[error("peer {url}: bad endpoint: {message}")]
    Endpoint { url: String, message: String },
    #[error("peer message: {0}")]
    Codec(String),
    #[error("reading peer TLS file {path}: {source}")]
    TlsFile {
        path: String,
        source: std::io::Error,
    },
    #[error("https peer URLs need --peer-cert-file, --peer-key-file and --peer-trusted-ca-file")]
    TlsMissing,
}

impl PeerError {
    /// True when the request surely never reached the peer (so a retry cannot apply it twice).
    /// Only a failed connect or a request that could not be built qualifies: a reset or timed
    /// out call may have been served, and its answer decoded badly still means it was served.
    pub fn not_sent(&self) -> bool {
        matches!(
            self,
            PeerError::Connect { .. }
                | PeerError::NoUrl
                | PeerError::Endpoint { .. }
                | PeerError::TlsFile { .. }
                | PeerError::TlsMissing
        )
    }
}

/// Splits a request into a frame (snapshot bytes moved out of the JSON).
pub fn encode_request(mut req: PeerRequest) -> Result<Frame, PeerError> {
    let data = match &mut req {
        PeerRequest::InstallSnapshot(r) => std::mem::take(&mut r.data),
        _ => Vec::new(),
    };
    let json = serde_json::to_vec(&req).map_err(|e| PeerError::Codec(e.to_string()))?;
    Ok(Frame { json, data })
}

pub fn decode_request(frame: Frame) -> Result<PeerRequest, PeerError> {
    let mut req: PeerRequest =
        serde_json::from_slice(&frame.json).map_err(|e| PeerError::Codec(e.to_string()))?;
    if let PeerRequest::InstallSnapshot(r) = &mut req {
        r.data = frame.data;
    }
    Ok(req)
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::{LogId, SnapshotMeta, Vote};

    #[test]
    fn snapshot_chunks_travel_outside_the_json() {
        let req = PeerRequest::InstallSnapshot(InstallSnapshotRequest {
            vote: Vote::new(3, 1),
            meta: SnapshotMeta {
                last_log_id: Some(LogId::new(openraft::CommittedLeaderId::new(3, 1), 9)),
                last_membership: Default::default(),
                snapshot_id: "s".into(),
            },
            offset: 0,
            data: vec![7; 1000],
            done: true,
        });
        let frame = encode_request(req).unwrap();
        assert_eq!(frame.data.len(), 1000);
        assert!(frame.json.len() < 1000);
        let PeerRequest::InstallSnapshot(back) = decode_request(frame).unwrap() else {
            panic!("kind changed");
        };
        assert_eq!(back.data, vec![7; 1000]);
    }
}
