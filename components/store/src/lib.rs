//! kiln-store: an etcd-v3-compatible key-value store, replicated with Raft (openraft) and
//! persisted in rocksdb.
//!
//! Start a member in-process with [`start`] (tests bind 127.0.0.1:0 and read the bound address
//! from the returned [`StoreHandle`]), or run one until a signal with [`run`].

pub mod api;
pub mod auth;
pub mod authority;
pub mod command;
pub mod compactor;
pub mod config;
pub mod etcd_error;
pub mod etcd_snapshot;
pub mod identity;
pub mod join;
pub mod mapped;
pub mod member;
pub mod offline;
pub mod peer;
pub mod runtime;
pub mod server;
pub mod storage;
pub mod tls;

pub use config::Config;
pub use server::{run, start, ServerError, StoreHandle};
