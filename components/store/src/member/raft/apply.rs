//! Applying one committed command (deterministic: every member computes the same batch from the
//! same command): auth commands go to the auth store, everything else to the MVCC store
//! (`storage::mvcc::apply`), which stays below auth and knows nothing of it. A client's write
//! has its caller's permission checked again first, against the auth state at this point of
//! the log (`auth::recheck`).

use rocksdb::{WriteBatch, DB};

use crate::auth::state::AuthState;
use crate::auth::{self, AuthStoreError};
use crate::command::{
    store_request::Op, store_response::Result as Res, StoreRequest, StoreResponse,
};
use crate::storage::mvcc::apply::{self as mvcc_apply, Applied};
use crate::storage::mvcc::index::KeyIndex;
use crate::storage::mvcc::MvccError;

/// Applies `req` on top of `revision` / `compact_revision`, which `index` shows, with `auth`
/// the auth state as of the entries before it.
/// Client-visible failures (a missing lease, a compacted revision, a refused auth change or
/// write) become error responses with an empty batch; only storage failures are errors.
pub fn apply(
    db: &DB,
    index: &KeyIndex,
    revision: i64,
    compact_revision: i64,
    auth: &AuthState,
    req: &StoreRequest,
) -> Result<Applied, MvccError> {
    let unchanged = |response| Applied::unchanged(response, revision, compact_revision);
    match &req.op {
        // The state machine unpacks batches; one inside another is never proposed.
        Some(Op::Batch(_)) => Ok(unchanged(StoreResponse::internal(
            "kiln-store: nested command batch",
        ))),
        Some(Op::Auth(cmd)) => {
            let mut batch = WriteBatch::default();
            // Storage failures keep the MVCC store's error type, as the state machine reports it.
            let applied = auth::apply(db, &mut batch, cmd).map_err(|e| match e {
                AuthStoreError::Db(e) => MvccError::Db(e),
                AuthStoreError::Json(e) => MvccError::Json(e),
            })?;
            let response = match applied {
                Ok(applied) => StoreResponse::ok(Res::Auth(applied)),
                Err(e) => StoreResponse::error(e.code(), e.to_string()),
            };
            Ok(Applied {
                batch,
                ..unchanged(response)
            })
        }
        _ => {
            let lease_keys = |id| crate::storage::mvcc::lease_keys(db, id);
            match auth::recheck::recheck(auth, req, lease_keys)? {
                Ok(()) => mvcc_apply::apply(db, index, revision, compact_revision, req),
                Err(e) => Ok(unchanged(StoreResponse::error(e.code(), e.to_string()))),
            }
        }
    }
}
