//! `kiln snapshot status BUNDLE`: what `etcdctl snapshot status` says of the bundle's snapshot (hash,
//! revision, total keys, total size), read by kiln-common's bbolt reader — the same answers for a
//! snapshot of kiln-store and of an external etcd, both in etcd's format.

use super::bundle::Bundle;
use super::SnapshotError;

/// etcdctl's `snapshot status -w json` fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotStatus {
    pub hash: u32,
    pub revision: i64,
    pub total_key: usize,
    pub total_size: u64,
}

/// The status of an opened (sha256-checked) bundle's snapshot.
pub fn of_bundle(bundle: &Bundle) -> Result<SnapshotStatus, SnapshotError> {
    let path = bundle.snapshot();
    let data = std::fs::read(&path).map_err(super::io("reading", &path))?;
    of_bytes(&data).map_err(|message| SnapshotError::Bundle {
        path: bundle.info.path.clone().unwrap_or(path),
        message,
    })
}

/// The status of a snapshot in etcd's format (bbolt, with or without its trailing sha256).
pub fn of_bytes(data: &[u8]) -> Result<SnapshotStatus, String> {
    if !kiln_common::bbolt::is_bbolt(data) {
        return Err("the snapshot is not in etcd's format (bbolt): saved by an older kiln?".into());
    }
    let db = kiln_common::bbolt::read::Db::open(data).map_err(|e| e.to_string())?;
    let s = kiln_common::etcd_db::status(&db).map_err(|e| e.to_string())?;
    Ok(SnapshotStatus {
        hash: s.hash,
        revision: s.revision,
        total_key: s.total_key,
        total_size: s.total_size,
    })
}

/// etcdctl's table (its sizes in SI units, as go-humanize's Bytes prints them).
pub fn table(s: &SnapshotStatus) -> String {
    format!(
        "{:<10} {:>10} {:>12} {:>12}\n{:<10x} {:>10} {:>12} {:>12}\n",
        "HASH",
        "REVISION",
        "TOTAL KEYS",
        "TOTAL SIZE",
        s.hash,
        s.revision,
        s.total_key,
        si_bytes(s.total_size)
    )
}

fn si_bytes(n: u64) -> String {
    const UNITS: &[&str] = &["B", "kB", "MB", "GB", "TB", "PB"];
    if n < 10 {
        return format!("{n} B");
    }
    let exp = ((n as f64).ln() / 1000f64.ln()).floor() as usize;
    let exp = exp.min(UNITS.len() - 1);
    let v = n as f64 / 1000f64.powi(exp as i32);
    // go-humanize: one decimal below 10, none above.
    if v < 10.0 {
        format!("{v:.1} {}", UNITS[exp])
    } else {
        format!("{v:.0} {}", UNITS[exp])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_like_etcdctl() {
        assert_eq!(si_bytes(5), "5 B");
        assert_eq!(si_bytes(20480), "20 kB");
        assert_eq!(si_bytes(2_101_248), "2.1 MB");
    }

    #[test]
    fn a_non_etcd_snapshot_is_refused() {
        assert!(of_bytes(b"not a snapshot at all")
            .unwrap_err()
            .contains("not in etcd's format"));
    }
}
