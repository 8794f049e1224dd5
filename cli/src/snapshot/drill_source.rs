//! Where `kiln drill --latest`/`--scheduled` find the schedule's bundles: the bucket of
//! `spec.store.backup.destination.s3` when declared (the off-host copy, the one a real disaster leaves),
//! else the backup directory of the first controller that answers. Only one uploader's bundles are
//! counted (each controller saves every run), so "every N backups" means N schedule runs.

use std::path::{Path, PathBuf};

use super::offsite;
use crate::backup_store::schedule::DEFAULT_DIR;
use crate::backup_store::BUNDLE_SUFFIX;
use crate::bootstrap::Context;
use crate::config::backup::S3Destination;
use crate::transport::shell_quote;

#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("no spec.store.backup in cluster.yaml: --latest and --scheduled drill the schedule's bundles")]
    NoSchedule,
    #[error("no controller answered with its backup directory: {0}")]
    NoController(String),
    #[error(transparent)]
    S3(#[from] crate::backup_store::s3::S3Error),
    #[error(transparent)]
    Snapshot(#[from] super::SnapshotError),
    #[error("writing {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// The bundles one uploader made, newest first, and where they are.
#[derive(Debug)]
pub struct Listed {
    /// File names, newest first.
    pub names: Vec<String>,
    /// Where `names[0]` can be fetched from.
    from: Origin,
}

#[derive(Debug)]
enum Origin {
    Controller { host: String, dir: String },
    S3 { dest: S3Destination, key: String },
}

impl Listed {
    pub fn origin(&self) -> String {
        match &self.from {
            Origin::Controller { host, dir } => format!("{host}:{dir}"),
            Origin::S3 { dest, key } => format!(
                "s3://{}/{}",
                dest.bucket,
                key.rsplit_once('/').map(|(d, _)| d).unwrap_or("")
            ),
        }
    }
}

/// The S3 objects of the uploader of the newest bundle, as (key, modified) newest first.
pub fn newest_uploader(objects: &[(String, i64)]) -> Vec<(String, i64)> {
    let dir = |k: &str| {
        k.rsplit_once('/')
            .map(|(d, _)| d.to_string())
            .unwrap_or_default()
    };
    let mut bundles: Vec<(String, i64)> = objects
        .iter()
        .filter(|(k, _)| k.ends_with(BUNDLE_SUFFIX))
        .cloned()
        .collect();
    // Newest by upload time, then by name (which carries the bundle's creation time).
    bundles.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| b.0.cmp(&a.0)));
    let Some(first) = bundles.first().map(|(k, _)| dir(k)) else {
        return vec![];
    };
    bundles.retain(|(k, _)| dir(k) == first);
    bundles
}

/// The schedule's bundles as the configured destination holds them.
pub async fn list(ctx: &Context) -> Result<Listed, SourceError> {
    let backup = ctx.cluster.config.backup().ok_or(SourceError::NoSchedule)?;
    if let Some(dest) = crate::backup_store::destination::declared(&ctx.cluster) {
        let bucket = offsite::open(&dest)?;
        let objects: Vec<(String, i64)> = bucket
            .objects()
            .await?
            .into_iter()
            .map(|o| (o.key, o.modified))
            .collect();
        let bundles = newest_uploader(&objects);
        let names = bundles
            .iter()
            .map(|(k, _)| k.rsplit('/').next().unwrap_or(k).to_string())
            .collect();
        let key = bundles.first().map(|(k, _)| k.clone()).unwrap_or_default();
        return Ok(Listed {
            names,
            from: Origin::S3 { dest, key },
        });
    }
    let dir = backup
        .destination
        .as_ref()
        .and_then(|d| d.dir.clone())
        .unwrap_or_else(|| DEFAULT_DIR.to_string());
    let mut errors = vec![];
    for h in ctx.cluster.config.controllers() {
        let listed = async {
            let t = ctx.transport(&h.name).await?;
            t.run(&format!(
                "ls -1t {} 2>/dev/null | grep '\\.kiln-bundle\\.tar$'; true",
                shell_quote(&dir)
            ))
            .await
            .map_err(crate::bootstrap::BootstrapError::from)
        }
        .await;
        match listed {
            Ok(out) => {
                return Ok(Listed {
                    names: out.lines().map(str::to_string).collect(),
                    from: Origin::Controller {
                        host: h.name.clone(),
                        dir,
                    },
                })
            }
            Err(e) => errors.push(format!("{}: {e}", h.name)),
        }
    }
    Err(SourceError::NoController(errors.join("; ")))
}

/// Fetch the newest listed bundle into `dir` (0600, through a temporary name); its local path.
pub async fn fetch_newest(
    ctx: &Context,
    listed: &Listed,
    dir: &Path,
) -> Result<Option<PathBuf>, SourceError> {
    let Some(name) = listed.names.first() else {
        return Ok(None);
    };
    match &listed.from {
        Origin::S3 { dest, key } => {
            let bucket = offsite::open(dest)?;
            Ok(Some(bucket.download(key, dir).await?))
        }
        Origin::Controller { host, dir: remote } => {
            use std::io::Write;
            use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
            let t = ctx
                .transport(host)
                .await
                .map_err(super::SnapshotError::from)?;
            let bytes = t
                .download(&format!("{}/{name}", remote.trim_end_matches('/')))
                .await
                .map_err(super::SnapshotError::from)?;
            let io = |path: &Path| {
                let path = path.to_path_buf();
                move |source| SourceError::Io { path, source }
            };
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(io(dir))?;
            let path = dir.join(name);
            let tmp = dir.join(format!(".{name}.partial"));
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&tmp)
                .map_err(io(&tmp))?;
            f.write_all(&bytes).map_err(io(&tmp))?;
            f.sync_all().map_err(io(&tmp))?;
            std::fs::rename(&tmp, &path).map_err(io(&path))?;
            Ok(Some(path))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_newest_uploaders_bundles_count() {
        let objects = vec![
            ("prod/c1/t-1.kiln-bundle.tar".to_string(), 100),
            ("prod/c2/t-1.kiln-bundle.tar".to_string(), 101),
            ("prod/c1/t-2.kiln-bundle.tar".to_string(), 200),
            ("prod/c2/t-2.kiln-bundle.tar".to_string(), 199),
            ("prod/c1/notes.txt".to_string(), 300),
        ];
        let got = newest_uploader(&objects);
        assert_eq!(
            got.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(),
            ["prod/c1/t-2.kiln-bundle.tar", "prod/c1/t-1.kiln-bundle.tar"]
        );
        assert!(newest_uploader(&[]).is_empty());
    }
}
