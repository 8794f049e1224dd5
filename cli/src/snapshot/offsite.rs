//! Bundles off the host: where a command's S3 destination comes from (an `s3://` URL or flag, completed by
//! cluster.yaml's `spec.store.backup.destination.s3`), the upload after a save (then the bucket's
//! retention), and fetching a bundle for `restore`/`drill`. The declared destination and the credentials
//! file on the controllers are `backup_store::destination`'s (init's backup-schedule phase needs them too).

use std::path::{Path, PathBuf};

use super::{BundleInfo, SnapshotError};
use crate::backup_store::destination::declared;
use crate::backup_store::s3::{bundle_key, parse_url, Bucket, Credentials, S3Error};
use crate::config::backup::S3Destination;
use crate::config::ClusterFile;

/// What a command line says about S3 (every field optional; cluster.yaml fills the gaps).
#[derive(Debug, Default, Clone)]
pub struct S3Flags {
    pub endpoint: Option<String>,
    pub region: Option<String>,
    pub credentials_file: Option<PathBuf>,
}

/// The destination of `url` (`s3://bucket/prefix`): bucket and prefix from it, the rest from the flags,
/// else from cluster.yaml's declared destination (when there is one), else S3's defaults.
pub fn destination(
    url: &str,
    flags: &S3Flags,
    cluster: Option<&ClusterFile>,
) -> Result<S3Destination, S3Error> {
    let (bucket, prefix) = parse_url(url)?;
    let declared = cluster.and_then(declared);
    let from = |f: fn(&S3Destination) -> String| declared.as_ref().map(f);
    Ok(S3Destination {
        endpoint: flags
            .endpoint
            .clone()
            .or_else(|| from(|d| d.endpoint.clone()))
            .unwrap_or_default(),
        bucket,
        prefix,
        region: flags
            .region
            .clone()
            .or_else(|| from(|d| d.region.clone()))
            .unwrap_or_else(|| "us-east-1".into()),
        credentials_file: flags
            .credentials_file
            .clone()
            .or_else(|| declared.as_ref().and_then(|d| d.credentials_file.clone())),
    })
}

/// A client for the destination, with its credentials (file, else environment).
pub fn open(dest: &S3Destination) -> Result<Bucket, S3Error> {
    let creds = Credentials::resolve(dest.credentials_file.as_deref())?;
    Bucket::open(dest, &creds)
}

/// Upload a saved bundle to `<prefix>/<source host>/<file>`, verify it, then keep the newest `keep` of
/// that host's bundles in the bucket. Returns the object's `s3://` URL.
pub async fn upload_bundle(
    dest: &S3Destination,
    info: &BundleInfo,
    keep: Option<usize>,
) -> Result<String, SnapshotError> {
    let path = info.path.as_ref().ok_or_else(|| SnapshotError::Bundle {
        path: PathBuf::from("-"),
        message: "the saved bundle has no file to upload".into(),
    })?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_else(|| info.file_name());
    let bucket = open(dest)?;
    let key = bundle_key(&dest.prefix, &info.source_host, &name);
    bucket.upload(path, &key).await?;
    if let Some(keep) = keep {
        bucket.apply_retention(keep).await?;
    }
    Ok(format!("s3://{}/{key}", dest.bucket))
}

/// Fetch `s3://bucket/key` into `dir`; the local path of the bundle.
pub async fn fetch(url: &str, dest: &S3Destination, dir: &Path) -> Result<PathBuf, SnapshotError> {
    let (_, key) = parse_url(url)?;
    if key.is_empty() {
        return Err(S3Error::Url(format!("{url} names no object")).into());
    }
    let bucket = open(dest)?;
    Ok(bucket.download(&key, dir).await?)
}
