//! etcd's client-visible errors, with etcd's exact texts and gRPC codes (clients match on them).

use tonic::{Code, Status};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EtcdError {
    #[error("etcdserver: key is not provided")]
    EmptyKey,
    #[error("etcdserver: mvcc: required revision has been compacted")]
    Compacted,
    #[error("etcdserver: mvcc: required revision is a future revision")]
    FutureRev,
    #[error("etcdserver: requested lease not found")]
    LeaseNotFound,
    #[error("etcdserver: lease already exists")]
    LeaseExists,
    #[error("etcdserver: key not found")]
    KeyNotFound,
    #[error("etcdserver: value is provided")]
    ValueProvided,
    #[error("etcdserver: lease is provided")]
    LeaseProvided,
    #[error("etcdserver: duplicate key given in txn request")]
    DuplicateKey,
    #[error("etcdserver: too many operations in txn request")]
    TooManyOps,
    #[error("etcdserver: no leader")]
    NoLeader,
    #[error("etcdserver: not leader")]
    NotLeader,
    #[error("etcdserver: request timed out")]
    Timeout,
    #[error("etcdserver: server stopped")]
    Stopped,
    #[error("etcdserver: mvcc: watch id already exists")]
    WatchIdExists,
    #[error("etcdserver: mvcc: database space exceeded")]
    NoSpace,
    #[error("etcdserver: bad leader transferee")]
    BadLeaderTransferee,
    #[error("etcdserver: request timed out, leader transfer took too long")]
    LeaderTransferTimeout,
}

impl EtcdError {
    pub fn code(&self) -> Code {
        match self {
            EtcdError::EmptyKey
            | EtcdError::KeyNotFound
            | EtcdError::ValueProvided
            | EtcdError::LeaseProvided
            | EtcdError::DuplicateKey
            | EtcdError::TooManyOps => Code::InvalidArgument,
            EtcdError::Compacted | EtcdError::FutureRev => Code::OutOfRange,
            EtcdError::LeaseNotFound => Code::NotFound,
            EtcdError::LeaseExists | EtcdError::WatchIdExists => Code::FailedPrecondition,
            EtcdError::NoLeader | EtcdError::NotLeader | EtcdError::Stopped => Code::Unavailable,
            EtcdError::Timeout | EtcdError::LeaderTransferTimeout => Code::Unavailable,
            EtcdError::BadLeaderTransferee => Code::FailedPrecondition,
            EtcdError::NoSpace => Code::ResourceExhausted,
        }
    }

    pub fn to_status(&self) -> Status {
        Status::new(self.code(), self.to_string())
    }
}

impl From<EtcdError> for Status {
    fn from(e: EtcdError) -> Self {
        e.to_status()
    }
}
