//! Which kind of token a member hands out and accepts, from `--auth-token` as etcd spells it:
//! `simple` (random tokens every member learns through the Raft log) or `jwt,key=value,…`
//! (signed tokens, [`super::jwt`]). The flag is split like etcd's decomposeOpts.

use std::collections::HashMap;
use std::time::Duration;

use super::error::AuthError;
use super::jwt::{JwtError, JwtOptions, JwtTokens};
use super::token::SimpleTokens;

#[derive(Debug, thiserror::Error)]
pub enum TokenOptsError {
    /// etcd's ErrInvalidAuthOpts; the reason is what etcd logs beside it.
    #[error("auth: invalid auth options: {0}")]
    Invalid(String),
    #[error(transparent)]
    Jwt(#[from] JwtError),
}

/// `--auth-token` split: the token type and its `key=value` options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenOpts {
    Simple,
    Jwt(JwtOptions),
}

impl TokenOpts {
    /// Parses the flag (reading JWT key files, as etcd does at start).
    pub fn parse(flag: &str) -> Result<Self, TokenOptsError> {
        let mut parts = flag.split(',');
        let kind = parts.next().unwrap_or("");
        let mut opts = HashMap::new();
        for part in parts {
            let pair: Vec<&str> = part.split('=').collect();
            let [key, value] = pair[..] else {
                return Err(TokenOptsError::Invalid(format!(
                    "option {part:?} is not key=value"
                )));
            };
            if opts.insert(key.to_string(), value.to_string()).is_some() {
                return Err(TokenOptsError::Invalid(format!("duplicate option {key:?}")));
            }
        }
        match kind {
            // etcd's simple provider ignores options.
            "simple" => Ok(Self::Simple),
            "jwt" => Ok(Self::Jwt(JwtOptions::parse(&opts)?)),
            other => Err(TokenOptsError::Invalid(format!(
                "unknown token type {other:?} (simple or jwt)"
            ))),
        }
    }
}

/// A member's tokens.
pub enum TokenProvider {
    Simple(SimpleTokens),
    /// Boxed: keys and validation rules are far larger than a simple-token table.
    Jwt(Box<JwtTokens>),
}

impl TokenProvider {
    /// `simple_ttl` is --auth-token-ttl; JWT tokens carry their own (`ttl=`).
    pub fn new(opts: &TokenOpts, simple_ttl: Duration) -> Result<Self, TokenOptsError> {
        Ok(match opts {
            TokenOpts::Simple => Self::Simple(SimpleTokens::new(simple_ttl)),
            TokenOpts::Jwt(o) => Self::Jwt(Box::new(JwtTokens::new(o)?)),
        })
    }

    /// The token an authenticate command carries through the log: a fresh simple token for
    /// every member to learn, nothing for JWT (signed once applied; etcd's GenTokenPrefix).
    pub fn command_token(&self) -> String {
        match self {
            Self::Simple(_) => SimpleTokens::generate(),
            Self::Jwt(_) => String::new(),
        }
    }

    /// What the client gets once the authenticate command applied at auth `revision`.
    pub fn issue(
        &self,
        applied_token: String,
        user: &str,
        revision: u64,
    ) -> Result<String, AuthError> {
        match self {
            Self::Simple(_) => Ok(applied_token),
            Self::Jwt(j) if j.verify_only() => Err(AuthError::VerifyOnly),
            Self::Jwt(j) => j.assign(user, revision).ok_or(AuthError::InvalidAuthToken),
        }
    }

    /// The user a token names and the auth revision it stands for (a simple token is always
    /// current: it is dropped when its user changes).
    pub fn info(&self, token: &str, current: u64) -> Option<(String, u64)> {
        match self {
            Self::Simple(t) => t.user(token).map(|u| (u, current)),
            Self::Jwt(j) => j.verify(token),
        }
    }

    /// The user a token names, if valid.
    #[cfg(test)]
    pub fn user(&self, token: &str) -> Option<String> {
        self.info(token, 0).map(|(u, _)| u)
    }

    /// A member applied an authenticate command (simple tokens become valid everywhere).
    pub fn assign(&self, token: &str, user: &str) {
        if let Self::Simple(t) = self {
            t.assign(token, user);
        }
    }

    /// A user changed: its simple tokens go (JWT ones go stale through the auth revision).
    pub fn invalidate_user(&self, user: &str) {
        if let Self::Simple(t) = self {
            t.invalidate_user(user);
        }
    }

    pub fn clear(&self) {
        if let Self::Simple(t) = self {
            t.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(flag: &str) -> String {
        TokenOpts::parse(flag).unwrap_err().to_string()
    }

    #[test]
    fn flags_split_like_etcds_decompose_opts() {
        assert_eq!(TokenOpts::parse("simple").unwrap(), TokenOpts::Simple);
        // Options after simple are ignored, as etcd does.
        assert_eq!(
            TokenOpts::parse("simple,ttl=1s").unwrap(),
            TokenOpts::Simple
        );
        assert_eq!(
            err("jwt,sign-method"),
            "auth: invalid auth options: option \"sign-method\" is not key=value"
        );
        assert_eq!(
            err("jwt,ttl=1s,ttl=2s"),
            "auth: invalid auth options: duplicate option \"ttl\""
        );
        assert_eq!(
            err("magic"),
            "auth: invalid auth options: unknown token type \"magic\" (simple or jwt)"
        );
        assert!(err("jwt,a=b=c").contains("is not key=value"));
    }
}
