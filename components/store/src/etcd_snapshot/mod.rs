//! Snapshots in etcd's own format: Maintenance.Snapshot streams the state machine as the bbolt file an
//! etcd 3.4/3.5 member would stream for the same data ([`save`]), so `etcdctl snapshot status` reads it and
//! `etcdctl snapshot restore` + etcd start from it; `kiln-store snapshot restore` turns such a file, from
//! kiln-store or from a real etcd, back into kiln-store's column families ([`load`]). The bbolt reader and
//! writer and etcd's bucket layout are in `kiln_common::{bbolt, etcd_db}` (the CLI reads these files too).
//! Raft snapshots between members stay in kiln's own framing (`storage::snapshot`).

pub mod auth;
pub mod load;
pub mod save;

use kiln_common::bbolt::BboltError;
use kiln_common::etcd_db::EtcdDbError;

/// Entries of one bucket or column family, in key order.
pub type Entries = Vec<(Vec<u8>, Vec<u8>)>;
/// Entries borrowed from a bbolt file.
pub type Borrowed<'a> = Vec<(&'a [u8], &'a [u8])>;

#[derive(Debug, thiserror::Error)]
pub enum EtcdSnapshotError {
    #[error("rocksdb: {0}")]
    Db(#[from] rocksdb::Error),
    #[error(transparent)]
    Bbolt(#[from] BboltError),
    #[error(transparent)]
    Etcd(#[from] EtcdDbError),
    #[error("stored state machine: {0}")]
    Corrupt(String),
    #[error("snapshot has no sha256 checksum trailer (truncated?); its size is not 32 bytes past a 512-byte boundary")]
    NoChecksum,
    #[error("snapshot checksum mismatch")]
    Checksum,
}
