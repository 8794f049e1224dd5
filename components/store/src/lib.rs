//! kiln-store: an etcd-v3-compatible key-value store, replicated with Raft (openraft) and
//! persisted in rocksdb.
//!
//! Start a member in-process with [`start`] (tests bind 127.0.0.1:0 and read the bound address
//! from the returned [`StoreHandle`]), or run one until a signal with [`run`].

pub mod auth;
pub mod authority;
pub mod compactor;
pub mod config;
pub mod db;
pub mod etcd_error;
pub mod etcd_snapshot;
pub mod grpc;
pub mod http;
pub mod identity;
pub mod join;
pub mod keep_awake;
pub mod leader;
pub mod lease;
pub mod mapped;
pub mod mvcc;
pub mod offline;
pub mod peer;
pub mod proposer;
pub mod raft;
pub mod runtime;
pub mod server;
pub mod sole_voter;
pub mod tls;
pub mod transfer;
pub mod waiters;

pub use config::Config;
pub use server::{run, start, ServerError, StoreHandle};
