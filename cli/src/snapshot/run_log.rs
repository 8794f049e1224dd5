//! The log of scheduled runs (`snapshot save --log-file`, on a controller `/var/log/kiln/snapshots.log`
//! as `backup_store::schedule` installs it): one line per save, its bundle or its error.

use std::path::Path;

use super::{BundleInfo, SnapshotError};

/// One line for the log of scheduled runs.
pub fn log_line(result: &Result<BundleInfo, SnapshotError>) -> String {
    let now = time::OffsetDateTime::now_utc()
        .format(time::macros::format_description!(
            "[year]-[month]-[day]T[hour]:[minute]:[second]Z"
        ))
        .unwrap_or_default();
    match result {
        Ok(i) => format!(
            "{now} ok {} revision={} objects={} sha256={}{}\n",
            i.path
                .as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
            i.revision,
            i.registry_objects,
            i.snapshot_sha256,
            if i.encrypted { " encrypted" } else { "" }
        ),
        Err(e) => format!("{now} error {}\n", e.to_string().replace('\n', " ")),
    }
}

/// Append a line to the log (0600: it names the bundles).
pub fn append_log(path: &Path, line: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    // The directory is not created: on a controller it is /var/log/kiln, and a run that ends after
    // `kiln reset` removed it must not bring it back.
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(line.as_bytes())
}
