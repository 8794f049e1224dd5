//! The storage layer: rocksdb and its column families (`db`), etcd's MVCC key-value store on
//! it (`mvcc`: revisions, ranges, txns, watches' events, compaction, hashes), the Raft log's
//! own segment files (`raftlog`) and the state machine's families as one snapshot stream
//! (`snapshot`, what Raft snapshots carry). It knows nothing of Raft's running, of members or
//! of any API, and uses no gRPC type (`.ci/check-architecture` rule (c)).

pub mod close;
pub mod db;
pub mod mvcc;
pub mod raftlog;
pub mod snapshot;
