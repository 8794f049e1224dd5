//! etcd's client-visible errors, with etcd's exact texts (clients match on them), and the class of gRPC
//! status each reaches a client with ([`ErrorCode`]). No transport here: the API layer turns these into
//! tonic statuses, once (`api::grpc::status`), as etcd's v3rpc does with its server's errors.

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
    /// The status class etcd answers this error with (its rpctypes pair each text with one).
    pub fn code(&self) -> ErrorCode {
        match self {
            EtcdError::EmptyKey
            | EtcdError::KeyNotFound
            | EtcdError::ValueProvided
            | EtcdError::LeaseProvided
            | EtcdError::DuplicateKey
            | EtcdError::TooManyOps => ErrorCode::InvalidArgument,
            EtcdError::Compacted | EtcdError::FutureRev => ErrorCode::OutOfRange,
            EtcdError::LeaseNotFound => ErrorCode::NotFound,
            EtcdError::LeaseExists | EtcdError::WatchIdExists => ErrorCode::FailedPrecondition,
            EtcdError::NoLeader | EtcdError::NotLeader | EtcdError::Stopped => {
                ErrorCode::Unavailable
            }
            EtcdError::Timeout | EtcdError::LeaderTransferTimeout => ErrorCode::Unavailable,
            EtcdError::BadLeaderTransferee => ErrorCode::FailedPrecondition,
            EtcdError::NoSpace => ErrorCode::ResourceExhausted,
        }
    }
}

/// The gRPC status code a failure reaches clients with, by gRPC's numbers: kiln-store's own formats
/// carry the number between members (`StoreResponse::error_code` in the Raft apply's answers,
/// `ForwardError::code` over the peer transport), so it must mean the same to every member of a cluster
/// being upgraded one member at a time. Only the codes the store answers with; `api::grpc::status` maps
/// each to tonic's `Code` (and checks the numbers agree).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i32)]
pub enum ErrorCode {
    Unknown = 2,
    InvalidArgument = 3,
    NotFound = 5,
    PermissionDenied = 7,
    ResourceExhausted = 8,
    FailedPrecondition = 9,
    OutOfRange = 11,
    Internal = 13,
    Unavailable = 14,
    Unauthenticated = 16,
}

impl ErrorCode {
    /// Every code, for the API layer's check that its mapping keeps gRPC's numbers.
    #[cfg(test)]
    pub const ALL: [ErrorCode; 10] = [
        ErrorCode::Unknown,
        ErrorCode::InvalidArgument,
        ErrorCode::NotFound,
        ErrorCode::PermissionDenied,
        ErrorCode::ResourceExhausted,
        ErrorCode::FailedPrecondition,
        ErrorCode::OutOfRange,
        ErrorCode::Internal,
        ErrorCode::Unavailable,
        ErrorCode::Unauthenticated,
    ];

    /// The number the formats carry.
    pub fn number(self) -> i32 {
        self as i32
    }
}
