//! Bundles off the host: where a command's S3 destination comes from (an `s3://` URL or flag, completed by
//! cluster.yaml's `spec.store.backup.destination.s3`), the upload after a save (then the bucket's
//! retention), the credentials file on the controllers, and fetching a bundle for `restore`/`drill`.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::s3::{bundle_key, parse_url, Bucket, Credentials, S3Error, HOST_CREDENTIALS};
use super::{BundleInfo, SnapshotError};
use crate::config::backup::S3Destination;
use crate::config::ClusterFile;
use crate::transport::Transport;

/// What a command line says about S3 (every field optional; cluster.yaml fills the gaps).
#[derive(Debug, Default, Clone)]
pub struct S3Flags {
    pub endpoint: Option<String>,
    pub region: Option<String>,
    pub credentials_file: Option<PathBuf>,
}

/// The destination cluster.yaml declares, with its credentials file resolved against cluster.yaml's
/// directory.
pub fn declared(cluster: &ClusterFile) -> Option<S3Destination> {
    let mut d = cluster
        .config
        .spec
        .store
        .backup
        .as_ref()?
        .destination
        .as_ref()?
        .s3
        .clone()?;
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

/// Write the credentials file on a controller (0600) when its content differs; true when written. The
/// secret travels on the SSH session's stdin-fed upload, never on a command line.
pub async fn install_credentials(
    t: &dyn Transport,
    creds: &Credentials,
) -> Result<bool, SnapshotError> {
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
