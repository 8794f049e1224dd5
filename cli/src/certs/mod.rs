//! Certificates on day 2: `kiln certs renew` (re-sign leaves with the same CA, push them, restart the
//! static pods that read them), and the certificate rows and 30-day warnings of
//! `kiln certs check-expiration` and `kiln status`.

pub mod catalog;
pub mod expiry;
mod renew;

use std::path::{Path, PathBuf};

use crate::bootstrap::BootstrapError;

pub use catalog::{resolve, Kind, Renewable};
pub use renew::renew;

#[derive(Debug, thiserror::Error)]
pub enum CertsError {
    #[error("name the certificates to renew, or `all` (valid: {valid})")]
    NoName { valid: String },
    #[error("unknown certificate {name:?}{hint}; valid names: {valid}")]
    UnknownName {
        name: String,
        hint: &'static str,
        valid: String,
    },
    #[error("{path} does not exist: run `kiln init` first")]
    Missing { path: PathBuf },
    #[error("reading {path}: {message}")]
    Read { path: PathBuf, message: String },
    #[error("renewing {what}: {source}")]
    Renew {
        what: String,
        #[source]
        source: kiln_pki::RenewError,
    },
    #[error("loading the CA {path}: {message}")]
    Ca { path: PathBuf, message: String },
    #[error(transparent)]
    Bootstrap(#[from] BootstrapError),
    #[error(transparent)]
    Transport(#[from] crate::transport::TransportError),
    #[error("timed out after {seconds}s waiting for {what}")]
    Timeout { what: String, seconds: u64 },
}

impl CertsError {
    pub(crate) fn read(path: &Path, e: impl std::fmt::Display) -> Self {
        CertsError::Read {
            path: path.to_path_buf(),
            message: e.to_string(),
        }
    }
}
