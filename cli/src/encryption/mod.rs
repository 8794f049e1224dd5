//! Encryption at rest on day 2: `kiln encryption rotate` (upstream's key rotation with a re-encrypt of
//! every Secret, [`steps`]) and `kiln encryption status` (which key writes, how many Secrets each key
//! sealed, whether a rotation is under way, whether every controller has the state directory's
//! configuration, [`status`]). The configuration itself is made by init's certs phase
//! (`bootstrap::phases::apiserver_config`); [`keys`] reads and writes it.

pub mod bundle_keys;
pub mod effects;
pub mod keys;
pub mod run;
pub mod status;
pub mod steps;

use std::path::PathBuf;

pub use keys::{Key, KeySet, Sealed};

#[derive(Debug, thiserror::Error)]
pub enum EncryptionError {
    #[error("not an encryption configuration kiln manages: {0}")]
    Config(String),
    #[error("{path}: {source}")]
    At {
        path: PathBuf,
        #[source]
        source: Box<EncryptionError>,
    },
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("writing the state directory: {0}")]
    Write(String),
    #[error("{0}")]
    Inconsistent(String),
    #[error("{0}")]
    Cluster(String),
    #[error("the rotation stopped, the old keys stay: {0}; re-run to resume")]
    NotAllSealed(String),
    #[error("encryption at rest is not enabled in {0} (spec.apiServer.encryption.enabled)")]
    NotEnabled(PathBuf),
    #[error("{0} does not exist: run `kiln init` first")]
    Missing(PathBuf),
    #[error(transparent)]
    Bootstrap(#[from] crate::bootstrap::BootstrapError),
}
