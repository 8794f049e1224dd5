//! etcd's auth errors, with etcd's exact texts (etcdctl and clientv3 match on them) and status classes;
//! the API layer makes them tonic statuses (`api::grpc::status`).

use crate::etcd_error::ErrorCode;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    #[error("etcdserver: root user does not exist")]
    RootUserNotExist,
    #[error("etcdserver: root user does not have root role")]
    RootRoleNotExist,
    #[error("etcdserver: user name already exists")]
    UserAlreadyExist,
    #[error("etcdserver: user name is empty")]
    UserEmpty,
    #[error("etcdserver: user name not found")]
    UserNotFound,
    #[error("etcdserver: role name already exists")]
    RoleAlreadyExist,
    #[error("etcdserver: role name not found")]
    RoleNotFound,
    #[error("etcdserver: role name is empty")]
    RoleEmpty,
    #[error("etcdserver: authentication failed, invalid user ID or password")]
    AuthFailed,
    #[error("etcdserver: permission not given")]
    PermissionNotGiven,
    #[error("etcdserver: permission denied")]
    PermissionDenied,
    #[error("etcdserver: role is not granted to the user")]
    RoleNotGranted,
    #[error("etcdserver: permission is not granted to the role")]
    PermissionNotGranted,
    #[error("etcdserver: authentication is not enabled")]
    AuthNotEnabled,
    #[error("etcdserver: invalid auth token")]
    InvalidAuthToken,
    #[error("etcdserver: invalid auth management")]
    InvalidAuthMgmt,
    #[error("etcdserver: revision of auth store is old")]
    AuthOldRevision,
    /// etcd 3.4 has no gRPC mapping for this one: clients get the bare text with code Unknown.
    #[error("auth: authentication failed, password was given for no password user")]
    NoPasswordUser,
    /// A member started with a JWT public key only (etcd's ErrVerifyOnly, also unmapped).
    #[error("auth: token signing attempted with verify-only key")]
    VerifyOnly,
}

impl AuthError {
    pub fn code(&self) -> ErrorCode {
        use AuthError::*;
        match self {
            UserEmpty | RoleEmpty | AuthFailed | PermissionNotGiven | InvalidAuthMgmt
            | AuthOldRevision => ErrorCode::InvalidArgument,
            PermissionDenied => ErrorCode::PermissionDenied,
            InvalidAuthToken => ErrorCode::Unauthenticated,
            RootUserNotExist | RootRoleNotExist | UserAlreadyExist | UserNotFound
            | RoleAlreadyExist | RoleNotFound | RoleNotGranted | PermissionNotGranted
            | AuthNotEnabled => ErrorCode::FailedPrecondition,
            NoPasswordUser | VerifyOnly => ErrorCode::Unknown,
        }
    }
}
