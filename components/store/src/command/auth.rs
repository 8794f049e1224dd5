//! The auth changes that travel through the Raft log: etcd's own request messages (passwords
//! already hashed by the member that proposed them, so every member stores the same hash) and
//! an authenticate command that hands the token it names to every member.

use etcd_client::proto::{
    PbAuthDisableRequest, PbAuthEnableRequest, PbAuthRoleAddRequest, PbAuthRoleDeleteRequest,
    PbAuthRoleGrantPermissionRequest, PbAuthRoleRevokePermissionRequest, PbAuthUserAddRequest,
    PbAuthUserChangePasswordRequest, PbAuthUserDeleteRequest, PbAuthUserGrantRoleRequest,
    PbAuthUserRevokeRoleRequest,
};

#[derive(Clone, PartialEq, prost::Message)]
pub struct AuthCommand {
    #[prost(
        oneof = "auth_command::Cmd",
        tags = "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12"
    )]
    pub cmd: Option<auth_command::Cmd>,
}

/// A password check done before proposing: the token becomes valid on every member, unless
/// the auth store changed since the check (`checked_revision`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Authenticate {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub token: String,
    #[prost(uint64, tag = "3")]
    pub checked_revision: u64,
}

/// Who proposed a client's key-value or lease command and the auth revision their
/// permission was checked at (etcd's RequestHeader `username` / `auth_revision`). Applying
/// checks it again against the auth store as it is then (etcd's authApplierV3): an auth
/// change committed between the check and the apply refuses the command. Revision 0: auth was
/// off when the request came (etcd's empty AuthInfo).
#[derive(Clone, PartialEq, prost::Message)]
pub struct RequestAuth {
    #[prost(string, tag = "1")]
    pub username: String,
    #[prost(uint64, tag = "2")]
    pub revision: u64,
}

pub mod auth_command {
    use super::*;

    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum Cmd {
        #[prost(message, tag = "1")]
        Enable(PbAuthEnableRequest),
        #[prost(message, tag = "2")]
        Disable(PbAuthDisableRequest),
        /// `hashed_password` set, `password` empty.
        #[prost(message, tag = "3")]
        UserAdd(PbAuthUserAddRequest),
        #[prost(message, tag = "4")]
        UserDelete(PbAuthUserDeleteRequest),
        /// `hashed_password` set, `password` empty.
        #[prost(message, tag = "5")]
        UserChangePassword(PbAuthUserChangePasswordRequest),
        #[prost(message, tag = "6")]
        UserGrantRole(PbAuthUserGrantRoleRequest),
        #[prost(message, tag = "7")]
        UserRevokeRole(PbAuthUserRevokeRoleRequest),
        #[prost(message, tag = "8")]
        RoleAdd(PbAuthRoleAddRequest),
        #[prost(message, tag = "9")]
        RoleDelete(PbAuthRoleDeleteRequest),
        #[prost(message, tag = "10")]
        RoleGrantPermission(PbAuthRoleGrantPermissionRequest),
        #[prost(message, tag = "11")]
        RoleRevokePermission(PbAuthRoleRevokePermissionRequest),
        #[prost(message, tag = "12")]
        Authenticate(Authenticate),
    }
}

/// What applying an auth command answers: the auth revision after it, and the token of an
/// authenticate command.
#[derive(Clone, PartialEq, prost::Message)]
pub struct AuthApplied {
    #[prost(uint64, tag = "1")]
    pub auth_revision: u64,
    #[prost(string, tag = "2")]
    pub token: String,
}
