//! Where and how snapshot bundles are kept beyond the save that made them: bundle encryption
//! (`encrypt`), S3-compatible object storage (`s3`), the S3 destination cluster.yaml declares and the
//! credentials file on the controllers (`destination`), and the scheduled job on every controller
//! (`schedule`).
//!
//! A layer of its own (issue #21): init's backup-schedule phase (`bootstrap::phases::backup`) installs the
//! schedule exactly as `kiln snapshot schedule` does, while `snapshot`'s restore and drill run the
//! bootstrap phases, so what both need sits here, below both. It never imports `snapshot`.

pub mod destination;
pub mod encrypt;
pub mod s3;
pub mod schedule;

use std::path::{Path, PathBuf};

/// How a bundle's file name ends: `snapshot` names bundles so; S3 retention and the schedule's status count
/// only such files.
pub const BUNDLE_SUFFIX: &str = ".kiln-bundle.tar";

/// The texts are those these operations gave as `SnapshotError`s before they moved here, so users and
/// tests see the same errors (`SnapshotError` wraps this one transparently).
#[derive(Debug, thiserror::Error)]
pub enum BackupStoreError {
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A schedule that cannot be installed (cadence, `--keep`, its rendered config). The prefix is the
    /// one `SnapshotError::Verify` gave these errors, kept as it was.
    #[error("restore verification failed: {0}")]
    Invalid(String),
    #[error(transparent)]
    Bootstrap(#[from] crate::bootstrap::BootstrapError),
    #[error(transparent)]
    Transport(#[from] crate::transport::TransportError),
    #[error(transparent)]
    Crypto(#[from] encrypt::CryptoError),
}

pub(crate) fn io(
    what: &'static str,
    path: &Path,
) -> impl FnOnce(std::io::Error) -> BackupStoreError {
    let path = path.to_path_buf();
    move |source| BackupStoreError::Io { what, path, source }
}
