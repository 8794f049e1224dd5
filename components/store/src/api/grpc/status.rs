//! The one place the store's errors become tonic statuses (etcd's v3rpc `togRPCError`): etcd's and its
//! auth's errors, and the member layer's `ForwardError` (whose code may come from another member).
//! The layers below carry a status class as [`ErrorCode`] and never name tonic.

use tonic::{Code, Status};

use crate::auth::error::AuthError;
use crate::etcd_error::{ErrorCode, EtcdError};
use crate::peer::forward::ForwardError;

/// tonic's name for a class the store answers with.
pub fn code(c: ErrorCode) -> Code {
    match c {
        ErrorCode::Unknown => Code::Unknown,
        ErrorCode::InvalidArgument => Code::InvalidArgument,
        ErrorCode::NotFound => Code::NotFound,
        ErrorCode::PermissionDenied => Code::PermissionDenied,
        ErrorCode::ResourceExhausted => Code::ResourceExhausted,
        ErrorCode::FailedPrecondition => Code::FailedPrecondition,
        ErrorCode::OutOfRange => Code::OutOfRange,
        ErrorCode::Internal => Code::Internal,
        ErrorCode::Unavailable => Code::Unavailable,
        ErrorCode::Unauthenticated => Code::Unauthenticated,
    }
}

impl From<EtcdError> for Status {
    fn from(e: EtcdError) -> Self {
        Status::new(code(e.code()), e.to_string())
    }
}

impl From<AuthError> for Status {
    fn from(e: AuthError) -> Self {
        Status::new(code(e.code()), e.to_string())
    }
}

impl From<ForwardError> for Status {
    fn from(e: ForwardError) -> Self {
        // A number, not an ErrorCode: a member of another build may send one this build does not name.
        Status::new(Code::from_i32(e.code), e.message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_keeps_grpcs_number() {
        // The number travels between members (ForwardError, StoreResponse): it must be gRPC's own.
        for c in ErrorCode::ALL {
            assert_eq!(code(c) as i32, c.number(), "{c:?}");
        }
    }

    #[test]
    fn errors_keep_etcds_code_and_text() {
        let s = Status::from(EtcdError::Compacted);
        assert_eq!(s.code(), Code::OutOfRange);
        assert_eq!(
            s.message(),
            "etcdserver: mvcc: required revision has been compacted"
        );
        let s = Status::from(AuthError::InvalidAuthToken);
        assert_eq!(s.code(), Code::Unauthenticated);
        assert_eq!(s.message(), "etcdserver: invalid auth token");
        let s = Status::from(ForwardError::etcd(EtcdError::NoLeader));
        assert_eq!(s.code(), Code::Unavailable);
        assert_eq!(s.message(), "etcdserver: no leader");
    }
}
