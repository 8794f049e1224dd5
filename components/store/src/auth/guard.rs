//! The permission each etcd request needs (etcd's authApplierV3 / checkTxnAuth): reads need
//! READ on their range, writes WRITE on theirs (and READ when they ask for the previous
//! value), a txn everything its compares and both branches touch. Checked against one snapshot of
//! the auth state (`AuthStore::state`), so a txn's ops are judged by the same rules and the lock
//! is taken once per request, not once per op.

use etcd_client::proto::{
    PbDeleteRequest, PbPutRequest, PbRangeRequest, PbTxnOpRequest, PbTxnRequest,
};

use crate::auth::error::AuthError;
use crate::auth::perm::Access;
use crate::auth::state::AuthState;

impl AuthState {
    pub fn check_range(&self, user: &str, r: &PbRangeRequest) -> Result<(), AuthError> {
        self.check(user, Access::Read, &r.key, &r.range_end)
    }

    pub fn check_put(&self, user: &str, r: &PbPutRequest) -> Result<(), AuthError> {
        if r.prev_kv {
            self.check(user, Access::Read, &r.key, &[])?;
        }
        self.check(user, Access::Write, &r.key, &[])
    }

    pub fn check_delete(&self, user: &str, r: &PbDeleteRequest) -> Result<(), AuthError> {
        if r.prev_kv {
            self.check(user, Access::Read, &r.key, &r.range_end)?;
        }
        self.check(user, Access::Write, &r.key, &r.range_end)
    }

    pub fn check_txn(&self, user: &str, r: &PbTxnRequest) -> Result<(), AuthError> {
        for c in &r.compare {
            self.check(user, Access::Read, &c.key, &c.range_end)?;
        }
        for op in r.success.iter().chain(&r.failure) {
            match &op.request {
                Some(PbTxnOpRequest::RequestRange(q)) => self.check_range(user, q)?,
                Some(PbTxnOpRequest::RequestPut(q)) => self.check_put(user, q)?,
                Some(PbTxnOpRequest::RequestDeleteRange(q)) => self.check_delete(user, q)?,
                Some(PbTxnOpRequest::RequestTxn(q)) => self.check_txn(user, q)?,
                None => {}
            }
        }
        Ok(())
    }

    /// etcd's checkLeasePuts: revoking a lease deletes its keys, so the caller must be
    /// allowed to write each of them.
    pub fn check_lease_keys(
        &self,
        user: &str,
        access: Access,
        keys: &[Vec<u8>],
    ) -> Result<(), AuthError> {
        for key in keys {
            self.check(user, access, key, &[])?;
        }
        Ok(())
    }
}
