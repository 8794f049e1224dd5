//! kiln-store: an etcd-v3-compatible key-value store, replicated with Raft (openraft) and
//! persisted in rocksdb.
//!
//! Start a member in-process with [`start`] (tests bind 127.0.0.1:0 and read the bound address
//! from the returned [`StoreHandle`]), or run one until a signal with [`run`].

// The crate's surface is what its binary (`main.rs`) and its integration tests (`tests/`) use, re-exported
// below; every module stays private, so what one layer offers another is the crate's business alone and
// an item nothing uses is reported as dead. Layers, bottom up (`.ci/check-module-cycles` keeps them
// acyclic, `.ci/check-architecture` keeps tonic above `member`): `command` < `storage` < `auth` <
// `peer` < `member` < `api` < `server`.
mod api;
mod auth;
mod authority;
mod command;
mod compactor;
mod config;
mod etcd_error;
mod etcd_snapshot;
mod identity;
mod join;
mod mapped;
mod member;
mod offline;
mod peer;
mod runtime;
mod server;
mod storage;
mod tls;

pub use config::{ClusterState, CompactionMode, Config};
/// The offline snapshot tool (`kiln-store snapshot restore|status`), which runs without a member.
pub use offline::{run as run_offline, OfflineCli, OfflineError};
/// The async runtime a member runs on (half the CPUs as workers; see `runtime.rs`).
pub use runtime::build as build_runtime;
pub use server::{run, start, ServerError, StoreHandle};

/// The peer protocol's client side: a test asks a member what another member would (and is refused
/// without the cluster's peer certificate).
pub mod peer_client {
    pub use crate::peer::{client::PeerClients, ClusterInfo, PeerError, PeerRequest};
}
