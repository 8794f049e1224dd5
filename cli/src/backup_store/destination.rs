//! The S3 destination as the controllers see it: the one cluster.yaml declares
//! (`spec.store.backup.destination.s3`, its credentials file resolved against cluster.yaml's directory) and
//! the credentials file the scheduled job uploads with, written on each controller.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::s3::{Credentials, HOST_CREDENTIALS};
use super::BackupStoreError;
use crate::config::backup::S3Destination;
use crate::config::ClusterFile;
use crate::transport::Transport;

/// The destination cluster.yaml declares, with its credentials file resolved against cluster.yaml's
/// directory.
pub fn declared(cluster: &ClusterFile) -> Option<S3Destination> {
    let mut d = cluster.config.backup()?.destination.as_ref()?.s3.clone()?;
    if let Some(f) = &d.credentials_file {
        let base = cluster.path.parent().unwrap_or(Path::new("."));
        d.credentials_file = Some(base.join(expand_home(f)));
    }
    Some(d)
}

fn expand_home(p: &Path) -> PathBuf {
    match (p.strip_prefix("~"), std::env::var_os("HOME")) {
        (Ok(rest), Some(home)) => PathBuf::from(home).join(rest),
        _ => p.to_path_buf(),
    }
}

/// Write the credentials file on a controller (0600) when its content differs; true when written. The
/// secret travels on the SSH session's stdin-fed upload, never on a command line.
pub async fn install_credentials(
    t: &dyn Transport,
    creds: &Credentials,
) -> Result<bool, BackupStoreError> {
    let text = creds.to_file_text();
    let want = hex::encode(Sha256::digest(text.as_bytes()));
    let have = t
        .probe(
            &format!("sha256sum {HOST_CREDENTIALS} 2>/dev/null; true"),
            None,
        )
        .await?
        .stdout_str();
    if have.split_whitespace().next() == Some(want.as_str()) {
        return Ok(false);
    }
    t.upload(text.as_bytes().into(), HOST_CREDENTIALS, 0o600)
        .await?;
    Ok(true)
}
