//! Raft transport between members.
//!
//! The walking skeleton runs a single member, so there is no peer to talk to yet: this network
//! reports every peer as unreachable. The peer gRPC transport on --listen-peer-urls replaces
//! [`PeerNetwork`] when multi-member clusters land (issue 3); nothing else changes, because
//! openraft only sees the `RaftNetworkFactory` trait.

use openraft::error::{InstallSnapshotError, RPCError, RaftError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};

use crate::raft::types::{MemberNode, TypeConfig};

#[derive(Debug, thiserror::Error)]
#[error("no Raft peer transport yet: member {target} ({peer_urls}) is unreachable")]
pub struct NoPeerTransport {
    target: u64,
    peer_urls: String,
}

/// Creates connections to peers.
#[derive(Debug, Clone, Default)]
pub struct PeerNetworkFactory;

/// A connection to one peer; every RPC fails as unreachable (see module docs).
pub struct PeerNetwork {
    target: u64,
    node: MemberNode,
}

impl PeerNetwork {
    fn unreachable<E: std::error::Error>(&self) -> RPCError<u64, MemberNode, E> {
        RPCError::Unreachable(Unreachable::new(&NoPeerTransport {
            target: self.target,
            peer_urls: self.node.peer_urls.join(","),
        }))
    }
}

impl RaftNetworkFactory<TypeConfig> for PeerNetworkFactory {
    type Network = PeerNetwork;

    async fn new_client(&mut self, target: u64, node: &MemberNode) -> Self::Network {
        PeerNetwork {
            target,
            node: node.clone(),
        }
    }
}

impl RaftNetwork<TypeConfig> for PeerNetwork {
    async fn append_entries(
        &mut self,
        _rpc: AppendEntriesRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<u64>, RPCError<u64, MemberNode, RaftError<u64>>> {
        Err(self.unreachable())
    }

    async fn install_snapshot(
        &mut self,
        _rpc: InstallSnapshotRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<u64>,
        RPCError<u64, MemberNode, RaftError<u64, InstallSnapshotError>>,
    > {
        Err(self.unreachable())
    }

    async fn vote(
        &mut self,
        _rpc: VoteRequest<u64>,
        _option: RPCOption,
    ) -> Result<VoteResponse<u64>, RPCError<u64, MemberNode, RaftError<u64>>> {
        Err(self.unreachable())
    }
}
