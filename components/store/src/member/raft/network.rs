//! Raft transport between members: openraft's RPCs over the peer gRPC service
//! (`crate::peer`), on the connections the forwarding code shares.

use std::sync::Arc;

use openraft::error::{InstallSnapshotError, RPCError, RaftError, RemoteError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use serde::de::DeserializeOwned;

use crate::command::{MemberNode, TypeConfig};
use crate::peer::client::PeerClients;
use crate::peer::PeerRequest;

/// Creates connections to peers.
#[derive(Clone)]
pub struct PeerNetworkFactory {
    clients: Arc<PeerClients>,
}

impl PeerNetworkFactory {
    pub fn new(clients: Arc<PeerClients>) -> Self {
        Self { clients }
    }
}

/// The link to one peer.
pub struct PeerNetwork {
    target: u64,
    node: MemberNode,
    clients: Arc<PeerClients>,
}

impl RaftNetworkFactory<TypeConfig> for PeerNetworkFactory {
    type Network = PeerNetwork;

    async fn new_client(&mut self, target: u64, node: &MemberNode) -> Self::Network {
        PeerNetwork {
            target,
            node: node.clone(),
            clients: self.clients.clone(),
        }
    }
}

impl PeerNetwork {
    /// One RPC; a transport failure is "unreachable" (openraft backs off before retrying), an
    /// error raised by the remote Raft is handed back as the remote's.
    async fn rpc<T, E>(
        &self,
        req: PeerRequest,
        option: &RPCOption,
    ) -> Result<T, RPCError<u64, MemberNode, RaftError<u64, E>>>
    where
        T: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
    {
        let answer: Result<T, RaftError<u64, E>> = self
            .clients
            .call(&self.node.peer_urls, req, option.hard_ttl())
            .await
            .map_err(|e| RPCError::Unreachable(Unreachable::new(&e)))?;
        answer.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }
}

impl RaftNetwork<TypeConfig> for PeerNetwork {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<u64>, RPCError<u64, MemberNode, RaftError<u64>>> {
        self.rpc(PeerRequest::AppendEntries(rpc), &option).await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<u64>,
        RPCError<u64, MemberNode, RaftError<u64, InstallSnapshotError>>,
    > {
        self.rpc(PeerRequest::InstallSnapshot(rpc), &option).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<u64>,
        option: RPCOption,
    ) -> Result<VoteResponse<u64>, RPCError<u64, MemberNode, RaftError<u64>>> {
        self.rpc(PeerRequest::Vote(rpc), &option).await
    }
}
