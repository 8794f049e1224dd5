//! The member layer (etcd's etcdserver): one store member's running parts and how requests
//! reach the leader. [`context::StoreContext`] ties them together; `raft/` runs openraft with
//! kiln-store's log store, state machine and peer network; `proposer` (group commit) and
//! `waiters` (answering each proposing caller) carry writes; `leader` serves and forwards what
//! only the leader can (writes, read index, leases, membership), `sole_voter` lets a lone voter
//! read locally, `transfer` moves leadership, `lease` keeps lease deadlines, `keep_awake` keeps
//! the write path's threads from parking. The API adapters (`grpc`, `http`) sit above it; no
//! gRPC type is used here (`.ci/check-architecture` rule (c)).

pub mod context;
pub mod keep_awake;
pub mod leader;
pub mod lease;
pub mod proposer;
pub mod raft;
pub mod sole_voter;
pub mod transfer;
pub mod waiters;
