//! The permission check a client's write gets again when it is applied (etcd 3.4's
//! authApplierV3): the member that took the request checked it against the auth store as it
//! was then, but an auth change (a revoked permission, a deleted user) may commit between that
//! check and the write's own turn in the log. Each of etcd's isOpPermitted calls at apply time
//! first compares the request's auth revision with the store's: older is
//! "etcdserver: revision of auth store is old" (clients sign in again and retry), 0 (auth was
//! off when the request came) "etcdserver: user name is empty"; only then the user's roles.
//!
//! Pure over the auth state the state machine holds at that log position, so every member
//! decides the same.

use etcd_client::proto::{PbTxnOpRequest, PbTxnRequest};

use super::error::AuthError;
use super::perm::Access;
use super::state::AuthState;
use crate::command::{store_request::Op, StoreRequest};

/// Whether `req` may still be applied: `Ok(Ok(()))` yes, `Ok(Err(_))` the refusal etcd
/// answers, `Err(_)` reading the lease keys failed. `lease_keys` names the keys attached to
/// a lease (a revoke deletes them; a put onto a lease must not hide a key from its revoker).
pub fn recheck<E>(
    state: &AuthState,
    req: &StoreRequest,
    lease_keys: impl Fn(i64) -> Result<Vec<Vec<u8>>, E>,
) -> Result<Result<(), AuthError>, E> {
    let (Some(caller), true) = (&req.auth, state.enabled) else {
        return Ok(Ok(()));
    };
    let user = caller.username.as_str();
    // The keys whose WRITE a lease needs (etcd's checkLeasePuts), looked up once.
    let leased = match &req.op {
        Some(Op::Put(p)) if p.lease != 0 => lease_keys(p.lease)?,
        Some(Op::LeaseRevoke(r)) => lease_keys(r.id)?,
        _ => Vec::new(),
    };
    // etcd checks the revision inside each permission check: a command that needs none (an
    // empty txn, revoking a lease without keys) passes whatever the revision.
    let needs_check = match &req.op {
        Some(Op::Put(_)) | Some(Op::DeleteRange(_)) => true,
        Some(Op::Txn(t)) => txn_checks_something(t),
        Some(Op::LeaseRevoke(_)) => !leased.is_empty(),
        _ => false,
    };
    if !needs_check {
        return Ok(Ok(()));
    }
    if caller.revision == 0 {
        return Ok(Err(AuthError::UserEmpty));
    }
    if caller.revision < state.revision {
        return Ok(Err(AuthError::AuthOldRevision));
    }
    Ok(match &req.op {
        Some(Op::Put(p)) => state
            .check_put(user, p)
            .and_then(|()| state.check_lease_keys(user, Access::Write, &leased)),
        Some(Op::DeleteRange(d)) => state.check_delete(user, d),
        Some(Op::Txn(t)) => state.check_txn(user, t),
        Some(Op::LeaseRevoke(_)) => state.check_lease_keys(user, Access::Write, &leased),
        _ => Ok(()),
    })
}

fn txn_checks_something(t: &PbTxnRequest) -> bool {
    !t.compare.is_empty()
        || t.success
            .iter()
            .chain(&t.failure)
            .any(|op| match &op.request {
                Some(PbTxnOpRequest::RequestTxn(inner)) => txn_checks_something(inner),
                Some(_) => true,
                None => false,
            })
}

#[cfg(test)]
#[path = "recheck_tests.rs"]
mod tests;
