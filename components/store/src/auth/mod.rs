//! etcd's auth: users, roles and key-range permissions, enforced on the etcd API once enabled
//! (etcd 3.4's auth/store.go semantics and error texts).
//!
//! Changes are Raft commands ([`crate::command::auth`]) applied by every member to one JSON
//! record in the state machine's metadata ([`state`]); passwords are bcrypt-hashed by the member
//! that takes the request, before proposing. Callers are named by a token (`token` metadata, from
//! Authenticate: simple or JWT, [`provider`]) or, without one, by the CN of their verified client
//! certificate.

pub mod error;
pub mod guard;
pub mod jwt;
pub mod jwt_es512;
pub mod perm;
pub mod provider;
pub mod recheck;
pub mod state;
pub mod token;

use std::sync::{Arc, RwLock};
#[cfg(test)]
use std::time::Duration;

use rocksdb::{WriteBatch, DB};
use tonic::Request;

use crate::command::auth::{auth_command::Cmd, AuthApplied, AuthCommand, RequestAuth};
use crate::command::{store_request::Op, store_response, StoreRequest, StoreResponse};
use crate::storage::db::{self, CF_SM_META};
use error::AuthError;
use perm::Access;
use provider::TokenProvider;
use state::{AuthState, META_AUTH};

/// etcd's bcrypt cost default (--bcrypt-cost).
pub const DEFAULT_BCRYPT_COST: u32 = 10;
/// gRPC metadata that carries a token (clientv3 sends `token`; the gateway `authorization`).
const TOKEN_METADATA: [&str; 2] = ["token", "authorization"];

#[derive(Debug, thiserror::Error)]
pub enum AuthStoreError {
    #[error("reading the auth store: {0}")]
    Db(#[from] rocksdb::Error),
    #[error("auth store record is corrupt: {0}")]
    Json(#[from] serde_json::Error),
}

/// Reads the auth record as of `db` (the default state when auth was never touched).
pub fn load(db: &DB) -> Result<AuthState, AuthStoreError> {
    match db.get_cf(db::cf(db, CF_SM_META), META_AUTH)? {
        Some(v) => Ok(serde_json::from_slice(&v)?),
        None => Ok(AuthState::default()),
    }
}

/// Applies an auth command on top of what `db` holds, adding the new record to `batch`.
/// Client-visible refusals are the inner error; storage failures the outer one.
pub fn apply(
    db: &DB,
    batch: &mut WriteBatch,
    cmd: &AuthCommand,
) -> Result<Result<AuthApplied, AuthError>, AuthStoreError> {
    let Some(cmd) = &cmd.cmd else {
        return Ok(Err(AuthError::InvalidAuthMgmt));
    };
    let mut state = load(db)?;
    let before = state.clone();
    let applied = state.apply(cmd);
    if applied.is_ok() && state != before {
        batch.put_cf(
            db::cf(db, CF_SM_META),
            META_AUTH,
            serde_json::to_vec(&state)?,
        );
    }
    Ok(applied)
}

/// A member's view of the auth store: the applied state, its tokens and how it hashes.
pub struct AuthStore {
    state: RwLock<Arc<AuthState>>,
    tokens: TokenProvider,
    bcrypt_cost: u32,
}

impl AuthStore {
    /// With simple tokens that live `token_ttl` past their last use.
    #[cfg(test)]
    pub fn open(db: &DB, token_ttl: Duration, bcrypt_cost: u32) -> Result<Self, AuthStoreError> {
        let tokens = TokenProvider::Simple(token::SimpleTokens::new(token_ttl));
        Self::open_with(db, tokens, bcrypt_cost)
    }

    /// With the tokens `--auth-token` names.
    pub fn open_with(
        db: &DB,
        tokens: TokenProvider,
        bcrypt_cost: u32,
    ) -> Result<Self, AuthStoreError> {
        Ok(Self {
            state: RwLock::new(Arc::new(load(db)?)),
            tokens,
            bcrypt_cost,
        })
    }

    pub fn state(&self) -> Arc<AuthState> {
        self.state.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub fn bcrypt_cost(&self) -> u32 {
        self.bcrypt_cost
    }

    pub fn tokens(&self) -> &TokenProvider {
        &self.tokens
    }

    /// Re-reads the applied state (after an auth command, or a snapshot installed).
    pub fn reload(&self, db: &DB) -> Result<(), AuthStoreError> {
        let fresh = load(db)?;
        if !fresh.enabled {
            self.tokens.clear();
        }
        *self.state.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(fresh);
        Ok(())
    }

    /// What the state machine calls after applying `req`: picks up auth changes, hands out
    /// the tokens of authenticate commands and drops those of changed users.
    pub fn applied(
        &self,
        db: &DB,
        req: &StoreRequest,
        resp: &StoreResponse,
    ) -> Result<(), AuthStoreError> {
        let mut pairs = Vec::new();
        match (&req.op, &resp.result) {
            (Some(Op::Auth(c)), _) => pairs.push((c, resp)),
            (Some(Op::Batch(b)), Some(store_response::Result::Batch(r))) => {
                for (q, a) in b.requests.iter().zip(&r.responses) {
                    if let Some(Op::Auth(c)) = &q.op {
                        pairs.push((c, a));
                    }
                }
            }
            _ => {}
        }
        if pairs.is_empty() {
            return Ok(());
        }
        self.reload(db)?;
        for (cmd, answer) in pairs {
            if answer.error_code != 0 {
                continue;
            }
            match &cmd.cmd {
                Some(Cmd::Authenticate(a)) => self.tokens.assign(&a.token, &a.name),
                Some(Cmd::UserDelete(r)) => self.tokens.invalidate_user(&r.name),
                Some(Cmd::UserChangePassword(r)) => self.tokens.invalidate_user(&r.name),
                _ => {}
            }
        }
        Ok(())
    }

    /// Who makes `request`: the user of its token, else the CN of its verified client
    /// certificate, else nobody (""). Always "" while auth is disabled (nothing is checked).
    pub fn caller<T>(&self, request: &Request<T>) -> Result<String, AuthError> {
        Ok(self.caller_at(&self.state(), request)?.0)
    }

    /// The caller of a request on keys (KV, lease keys, watch): as [`Self::caller`], but a
    /// token issued before the auth store last changed is refused (etcd's isOpPermitted; only
    /// JWT tokens can be old: simple ones are dropped when their user changes). Management
    /// calls take [`Self::caller`]: etcd's IsAdminPermitted does not look at the revision.
    pub fn key_caller<T>(&self, request: &Request<T>) -> Result<String, AuthError> {
        // One snapshot for both: a simple token's revision is the snapshot's own.
        let state = self.state();
        let (user, revision) = self.caller_at(&state, request)?;
        if revision < state.revision {
            return Err(AuthError::AuthOldRevision);
        }
        Ok(user)
    }

    /// [`Self::key_caller`] for a write: the caller and the auth revision the write's
    /// permission is checked at, for applying to check again (0 while auth is off, as etcd's
    /// empty AuthInfo).
    pub fn key_writer<T>(&self, request: &Request<T>) -> Result<RequestAuth, AuthError> {
        let state = self.state();
        let (username, revision) = self.caller_at(&state, request)?;
        if revision < state.revision {
            return Err(AuthError::AuthOldRevision);
        }
        let revision = if state.enabled { revision } else { 0 };
        Ok(RequestAuth { username, revision })
    }

    /// The caller and the auth revision its credentials stand for (`state`'s own for a
    /// simple token or a certificate).
    fn caller_at<T>(
        &self,
        state: &AuthState,
        request: &Request<T>,
    ) -> Result<(String, u64), AuthError> {
        if !state.enabled {
            return Ok((String::new(), state.revision));
        }
        for name in TOKEN_METADATA {
            if let Some(value) = request.metadata().get(name) {
                let token = value.to_str().map_err(|_| AuthError::InvalidAuthToken)?;
                return self
                    .tokens
                    .info(token, state.revision)
                    .ok_or(AuthError::InvalidAuthToken);
            }
        }
        let cn = request
            .peer_certs()
            .and_then(|certs| certs.first().and_then(|c| common_name(c.as_ref())))
            .unwrap_or_default();
        Ok((cn, state.revision))
    }

    /// etcd's isOpPermitted for the caller of a request.
    pub fn check(
        &self,
        user: &str,
        access: Access,
        key: &[u8],
        range_end: &[u8],
    ) -> Result<(), AuthError> {
        self.state().check(user, access, key, range_end)
    }

    pub fn check_admin(&self, user: &str) -> Result<(), AuthError> {
        self.state().check_admin(user)
    }

    /// For calls only root may make once auth is enabled (maintenance, membership changes).
    pub fn require_root<T>(&self, request: &Request<T>) -> Result<(), AuthError> {
        let user = self.caller(request)?;
        self.check_admin(&user)
    }
}

/// The subject CN of a DER certificate.
fn common_name(der: &[u8]) -> Option<String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let cn = cert.subject().iter_common_name().next()?;
    cn.as_str().ok().map(str::to_string)
}

#[cfg(test)]
mod replicated_tests;
