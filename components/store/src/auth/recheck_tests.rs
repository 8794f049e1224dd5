//! The apply-time check over a hand-made auth state: a permission revoked after the request
//! was checked refuses it as etcd does, and nothing is refused that etcd lets through.

use std::collections::BTreeMap;

use etcd_client::proto::{
    PbAuthRoleRevokePermissionRequest, PbDeleteRequest, PbLeaseRevokeRequest, PbPutRequest,
    PbTxnRequest,
};

use super::*;
use crate::auth::perm::{Perm, READWRITE};
use crate::auth::state::{Role, User};
use crate::command::auth::{auth_command::Cmd, RequestAuth};

/// Auth on at revision 5: alice may read and write [/a, /b).
fn state() -> AuthState {
    let user = |roles: &[&str]| User {
        password: "h".into(),
        roles: roles.iter().map(|r| r.to_string()).collect(),
        no_password: false,
    };
    let perm = Perm {
        perm_type: READWRITE,
        key: b"/a".to_vec(),
        range_end: b"/b".to_vec(),
    };
    AuthState {
        enabled: true,
        revision: 5,
        users: BTreeMap::from([
            ("root".into(), user(&["root"])),
            ("alice".into(), user(&["rw"])),
        ]),
        roles: BTreeMap::from([("rw".into(), Role { perms: vec![perm] })]),
    }
}

fn put(key: &str, lease: i64, who: &str, revision: u64) -> StoreRequest {
    let op = Op::Put(PbPutRequest {
        key: key.into(),
        value: b"v".to_vec(),
        lease,
        ..Default::default()
    });
    StoreRequest::on_behalf(op, caller(who, revision))
}

fn caller(who: &str, revision: u64) -> RequestAuth {
    RequestAuth {
        username: who.into(),
        revision,
    }
}

/// Lease 7 holds /a/1, lease 8 /z; any other has no keys.
fn leases(id: i64) -> Result<Vec<Vec<u8>>, std::convert::Infallible> {
    Ok(match id {
        7 => vec![b"/a/1".to_vec()],
        8 => vec![b"/z".to_vec()],
        _ => Vec::new(),
    })
}

fn check(state: &AuthState, req: &StoreRequest) -> Result<(), AuthError> {
    recheck(state, req, leases).unwrap_or_else(|never| match never {})
}

#[test]
fn a_permission_revoked_between_check_and_apply_refuses_the_write() {
    let mut s = state();
    let checked = put("/a/x", 0, "alice", s.revision);
    assert_eq!(check(&s, &checked), Ok(()));
    // The revoke commits before the write reaches its turn in the log.
    let revoke = Cmd::RoleRevokePermission(PbAuthRoleRevokePermissionRequest {
        role: "rw".into(),
        key: b"/a".to_vec(),
        range_end: b"/b".to_vec(),
    });
    s.apply(&revoke).unwrap();
    assert_eq!(s.revision, 6);
    assert_eq!(check(&s, &checked), Err(AuthError::AuthOldRevision));
    assert_eq!(
        AuthError::AuthOldRevision.to_string(),
        "etcdserver: revision of auth store is old"
    );
    // Signed in again (the new revision), the write is judged on the permissions now.
    assert_eq!(
        check(&s, &put("/a/x", 0, "alice", 6)),
        Err(AuthError::PermissionDenied)
    );
    assert_eq!(check(&s, &put("/a/x", 0, "root", 6)), Ok(()));
}

#[test]
fn every_write_kind_is_checked_again() {
    let s = state();
    let on = |op: Op, rev: u64| StoreRequest::on_behalf(op, caller("alice", rev));
    let del = |key: &str| {
        Op::DeleteRange(PbDeleteRequest {
            key: key.into(),
            ..Default::default()
        })
    };
    assert_eq!(check(&s, &on(del("/a/1"), 5)), Ok(()));
    assert_eq!(
        check(&s, &on(del("/z"), 5)),
        Err(AuthError::PermissionDenied)
    );
    assert_eq!(
        check(&s, &on(del("/a/1"), 4)),
        Err(AuthError::AuthOldRevision)
    );
    let txn = |key: &str| {
        Op::Txn(PbTxnRequest {
            success: vec![etcd_client::proto::PbTxnRequestOp {
                request: Some(PbTxnOpRequest::RequestPut(PbPutRequest {
                    key: key.into(),
                    ..Default::default()
                })),
            }],
            ..Default::default()
        })
    };
    assert_eq!(check(&s, &on(txn("/a/1"), 5)), Ok(()));
    assert_eq!(
        check(&s, &on(txn("/z"), 5)),
        Err(AuthError::PermissionDenied)
    );
    assert_eq!(
        check(&s, &on(txn("/a/1"), 4)),
        Err(AuthError::AuthOldRevision)
    );
    // A put onto a lease holding a key alice may not write (etcd's checkLeasePuts).
    assert_eq!(check(&s, &put("/a/2", 7, "alice", 5)), Ok(()));
    assert_eq!(
        check(&s, &put("/a/2", 8, "alice", 5)),
        Err(AuthError::PermissionDenied)
    );
    let revoke = |id| Op::LeaseRevoke(PbLeaseRevokeRequest { id });
    assert_eq!(check(&s, &on(revoke(7), 5)), Ok(()));
    assert_eq!(
        check(&s, &on(revoke(8), 5)),
        Err(AuthError::PermissionDenied)
    );
    assert_eq!(
        check(&s, &on(revoke(7), 4)),
        Err(AuthError::AuthOldRevision)
    );
}

#[test]
fn only_what_etcd_checks_is_refused() {
    let s = state();
    // Auth was off when the request came (no caller, revision 0) and is on now.
    assert_eq!(check(&s, &put("/a/x", 0, "", 0)), Err(AuthError::UserEmpty));
    // etcd checks the revision inside each permission check: a command needing none passes.
    let empty_txn = StoreRequest::on_behalf(Op::Txn(PbTxnRequest::default()), caller("alice", 1));
    assert_eq!(check(&s, &empty_txn), Ok(()));
    let keyless = Op::LeaseRevoke(PbLeaseRevokeRequest { id: 9 });
    assert_eq!(
        check(&s, &StoreRequest::on_behalf(keyless, caller("alice", 1))),
        Ok(())
    );
    // Internal commands and entries from older logs carry no caller.
    assert_eq!(
        check(&s, &StoreRequest::new(put("/z", 0, "", 0).op.unwrap())),
        Ok(())
    );
    // Auth off now: nothing to check.
    let off = AuthState {
        enabled: false,
        ..state()
    };
    assert_eq!(check(&off, &put("/z", 0, "nobody", 1)), Ok(()));
}
