//! Offline tools, like etcdutl's: `kiln-store snapshot restore FILE ...` turns a snapshot saved
//! with `etcdctl snapshot save` (against kiln-store) into the data dir of a member of a new
//! cluster; `kiln-store snapshot status FILE` describes a snapshot. A restore verifies the trailing
//! sha256 while it parses and writes (the hash takes as long as the rest; one core each), and decides
//! on it before the restored data dir is complete (its identity, written last, makes it one): a corrupt
//! or truncated file is refused, and whatever the restore wrote meanwhile is removed again.
//!
//! A snapshot is either etcd's own format (a bbolt file with etcd's sha256 trailer: what kiln-store's
//! Maintenance.Snapshot streams now, and what a real etcd streams) or kiln's older framing (bundles saved
//! before); the content tells which (bbolt's magic in its first meta page).

use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::{Args, Parser, Subcommand};
use rocksdb::{
    DBCompressionType, IngestExternalFileOptions, Options, SstFileWriter, WriteBatch, DB,
};

use crate::config::Config;
use crate::etcd_snapshot::{self, EtcdSnapshotError};
use crate::identity::{self, Identity};
use crate::mapped::Mapped;
use crate::storage::db::{self, CF_KV, CF_SM_META, STATE_MACHINE_CFS};
use crate::storage::db::{META_BATCH_PROGRESS, META_LAST_APPLIED, META_MEMBERSHIP};
use crate::storage::mvcc::{META_ALARMS, META_REVISION};
use crate::storage::snapshot::{self, SnapshotError};

/// kiln-store offline commands.
#[derive(Debug, Parser)]
#[command(name = "kiln-store", version = kiln_common::version::LONG)]
pub struct OfflineCli {
    #[command(subcommand)]
    pub command: Offline,
}

#[derive(Debug, Subcommand)]
pub enum Offline {
    /// Snapshot files saved with `etcdctl snapshot save`.
    #[command(subcommand)]
    Snapshot(SnapshotCommand),
}

#[derive(Debug, Subcommand)]
pub enum SnapshotCommand {
    /// Restores a snapshot into a new data dir for a member of a new cluster.
    Restore(RestoreArgs),
    /// Prints hash, revision, total keys and size of a snapshot.
    Status(StatusArgs),
}

#[derive(Debug, Clone, Args)]
pub struct RestoreArgs {
    /// The snapshot file.
    pub file: PathBuf,
    /// Data dir to create (must not exist or be empty); defaults to `<name>.etcd` as etcd.
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Name of the member this data dir is for.
    #[arg(long, default_value = "default")]
    pub name: String,
    /// The new cluster, `name=peerURL,...`; defaults to this member alone.
    #[arg(long)]
    pub initial_cluster: Option<String>,
    #[arg(long, default_value = "etcd-cluster")]
    pub initial_cluster_token: String,
    #[arg(long, value_delimiter = ',', default_value = "http://localhost:2380")]
    pub initial_advertise_peer_urls: Vec<String>,
}

#[derive(Debug, Clone, Args)]
pub struct StatusArgs {
    pub file: PathBuf,
    /// Output format: simple or json.
    #[arg(long, short = 'w', default_value = "simple")]
    pub write_out: String,
}

#[derive(Debug, thiserror::Error)]
pub enum OfflineError {
    #[error("reading snapshot {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("snapshot {path} is unusable: {source}")]
    Snapshot { path: String, source: SnapshotError },
    #[error("snapshot {path} is unusable: {source}")]
    EtcdSnapshot {
        path: String,
        source: EtcdSnapshotError,
    },
    #[error("data dir {0} already exists and is not empty; restore into a new directory")]
    DataDirExists(String),
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error(transparent)]
    Identity(#[from] identity::IdentityError),
    #[error(transparent)]
    Db(#[from] db::DbError),
    #[error("writing restored data: {0}")]
    Write(#[from] rocksdb::Error),
    #[error("--write-out {0:?} is not simple or json")]
    Format(String),
}

/// What a snapshot holds, for `snapshot status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotStatus {
    pub hash: u32,
    pub revision: i64,
    pub total_keys: usize,
    pub total_size: usize,
}

/// The snapshot file's bytes, mapped (not copied: the copy costs more than the hashing).
fn read(path: &Path) -> Result<Mapped, OfflineError> {
    Mapped::open(path).map_err(|source| OfflineError::Read {
        path: path.display().to_string(),
        source,
    })
}

/// A verified snapshot: kiln's framing (records into the file's bytes) or etcd's bbolt (loaded).
enum Parsed<'a> {
    Kiln(Vec<snapshot::Record<'a>>),
    Etcd(etcd_snapshot::load::Loaded),
}

/// Checks etcd's sha256 trailer of an etcd-format snapshot (kiln's framing is checked by [`parse`]).
fn verify(path: &Path, data: &[u8]) -> Result<(), OfflineError> {
    if !kiln_common::bbolt::is_bbolt(data) {
        return Ok(());
    }
    etcd_snapshot::load::verify(data).map_err(|source| OfflineError::EtcdSnapshot {
        path: path.display().to_string(),
        source,
    })
}

/// Parses the snapshot: etcd's bbolt file (its trailer is [`verify`]'s, run beside this: the bbolt
/// reader takes any bytes) or kiln's framing (its checksum first, then its layout).
fn parse<'a>(path: &Path, data: &'a [u8]) -> Result<Parsed<'a>, OfflineError> {
    if kiln_common::bbolt::is_bbolt(data) {
        return etcd_snapshot::load::load(data)
            .map(Parsed::Etcd)
            .map_err(|source| OfflineError::EtcdSnapshot {
                path: path.display().to_string(),
                source,
            });
    }
    snapshot::parse(data)
        .map(Parsed::Kiln)
        .map_err(|source| OfflineError::Snapshot {
            path: path.display().to_string(),
            source,
        })
}

pub fn status(path: &Path) -> Result<SnapshotStatus, OfflineError> {
    let data = read(path)?;
    if kiln_common::bbolt::is_bbolt(&data) {
        // What etcdctl's snapshot status computes (it reads the file as it is, trailer or not).
        let etcd_err = |source: EtcdSnapshotError| OfflineError::EtcdSnapshot {
            path: path.display().to_string(),
            source,
        };
        let db = kiln_common::bbolt::read::Db::open(&data).map_err(|e| etcd_err(e.into()))?;
        let s = kiln_common::etcd_db::status(&db).map_err(|e| etcd_err(e.into()))?;
        return Ok(SnapshotStatus {
            hash: s.hash,
            revision: s.revision,
            total_keys: s.total_key,
            total_size: s.total_size as usize,
        });
    }
    let records = snapshot::parse(&data).map_err(|source| OfflineError::Snapshot {
        path: path.display().to_string(),
        source,
    })?;
    let revision = records
        .iter()
        .find(|r| r.family == CF_SM_META && r.key == META_REVISION && r.value.len() == 8)
        .map_or(1, |r| {
            let mut b = [0u8; 8];
            b.copy_from_slice(r.value);
            i64::from_be_bytes(b)
        });
    let digest = &data[data.len() - 32..];
    Ok(SnapshotStatus {
        hash: u32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]]),
        revision,
        total_keys: records.iter().filter(|r| r.family == CF_KV).count(),
        total_size: data.len(),
    })
}

/// Restores `args.file` into a fresh data dir; returns the new member's identity.
pub fn restore(args: &RestoreArgs) -> Result<Identity, OfflineError> {
    // Stage timings at debug level (RUST_LOG=kiln_store=debug): what a slow restore spends its time on.
    let data_dir = args
        .data_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("{}.etcd", args.name)));
    let existed = data_dir.exists();
    let non_empty = std::fs::read_dir(&data_dir).is_ok_and(|mut d| d.next().is_some());
    if non_empty {
        return Err(OfflineError::DataDirExists(data_dir.display().to_string()));
    }
    // The flags first: nothing is made for a restore they would refuse.
    let mut config = Config::for_test(&data_dir);
    config.name = args.name.clone();
    config.initial_cluster = args.initial_cluster.clone();
    config.initial_cluster_token = args.initial_cluster_token.clone();
    config.initial_advertise_peer_urls = args.initial_advertise_peer_urls.clone();
    config.initial_members()?;
    let mut ident = identity::for_new_cluster(&config)?;

    let t = Instant::now();
    let data = read(&args.file)?;
    // The new, empty database is created while the snapshot is parsed, and the snapshot's sha256 is
    // checked while it is parsed and written; whatever a refused snapshot or a failed write made is
    // removed again, leaving the data dir as it was.
    let member = data_dir.join("member");
    let restored = std::thread::scope(|s| {
        let checked = s.spawn(|| verify(&args.file, &data));
        let opened = s.spawn(|| db::open(&member));
        let parsed = parse(&args.file, &data);
        let opened = opened.join().expect("opening does not panic");
        let written = opened
            .map_err(OfflineError::from)
            .and_then(|database| write_parsed(&database, &data_dir, parsed?).map(|()| database));
        // The checksum's answer first: a mismatch explains any layout or write error too.
        checked.join().expect("hashing does not panic")?;
        let database = written?;
        tracing::debug!(
            seconds = t.elapsed().as_secs_f64(),
            bytes = data.len(),
            "snapshot verified, parsed and written"
        );
        // A new cluster ID, also distinct from a cluster formed with the same flags from scratch: salted
        // with the snapshot's own sha256 (its last 32 bytes, verified above), the same on every member.
        let digest = &data[data.len() - 32..];
        let mut salt = [0u8; 8];
        salt.copy_from_slice(&digest[..8]);
        ident.cluster_id = identity::cluster_id(
            &[ident.cluster_id, u64::from_be_bytes(salt)],
            &args.initial_cluster_token,
        );
        // The identity last, synced (and with it what write_records left in the WAL): a data dir with
        // an identity holds the whole snapshot, verified.
        identity::save(&database, &ident)?;
        Ok(())
    });
    if let Err(e) = restored {
        discard(&data_dir, existed);
        return Err(e);
    }
    tracing::info!(
        data_dir = %data_dir.display(),
        member = %format!("{:x}", ident.member_id),
        cluster = %format!("{:x}", ident.cluster_id),
        "restored snapshot"
    );
    Ok(ident)
}

/// Writes a parsed snapshot's records into the new database.
fn write_parsed(database: &DB, data_dir: &Path, parsed: Parsed<'_>) -> Result<(), OfflineError> {
    let t = Instant::now();
    match parsed {
        Parsed::Kiln(records) => write_records(database, data_dir, records)?,
        Parsed::Etcd(loaded) => write_records(database, data_dir, loaded.records())?,
    }
    tracing::debug!(seconds = t.elapsed().as_secs_f64(), "restored data written");
    Ok(())
}

/// Removes what a refused or failed restore made in `dir`: the whole directory when it did not exist
/// before, its contents when it was given empty.
fn discard(dir: &Path, existed: bool) {
    if !existed {
        let _ = std::fs::remove_dir_all(dir);
        return;
    }
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = entry.path();
        let _ = if p.is_dir() {
            std::fs::remove_dir_all(&p)
        } else {
            std::fs::remove_file(&p)
        };
    }
}

/// A family with at least this many bytes of records goes into its own table file (below it, a table
/// file's fsyncs cost more than the bytes through the WAL).
const TABLE_MIN_BYTES: usize = 64 << 10;

/// Writes the snapshot's records into the new, empty database the fastest durable way. Each big family's
/// records, already in key order as the snapshot lists them, go into one table file (LZ4-compressed:
/// fewer bytes to fsync) that rocksdb's SstFileWriter writes and fsyncs and ingestion moves into the
/// database, syncing the manifest: no memtable, no WAL; one thread per family. The small families (and
/// any family not in strict key order, which no snapshot of kiln-store's has) go into one WAL write left
/// unsynced: the caller's synced identity write right after makes it durable. The old cluster's Raft
/// position (last applied, progress into a batch entry), membership and alarms do not carry over.
fn write_records(
    database: &DB,
    scratch: &Path,
    records: Vec<snapshot::Record<'_>>,
) -> Result<(), OfflineError> {
    let mut families: Vec<Vec<(&[u8], &[u8])>> = vec![Vec::new(); STATE_MACHINE_CFS.len()];
    for r in records {
        let dropped = r.family == CF_SM_META
            && [
                META_LAST_APPLIED,
                META_BATCH_PROGRESS,
                META_MEMBERSHIP,
                META_ALARMS,
            ]
            .contains(&r.key);
        if dropped {
            continue;
        }
        let i = STATE_MACHINE_CFS
            .iter()
            .position(|name| *name == r.family)
            .expect("parse names state-machine families only");
        families[i].push((r.key, r.value));
    }
    let (tables, logged): (Vec<_>, Vec<_>) = STATE_MACHINE_CFS
        .iter()
        .zip(families)
        .filter(|(_, kvs)| !kvs.is_empty())
        .partition(|(_, kvs)| {
            kvs.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>() >= TABLE_MIN_BYTES
                && kvs.windows(2).all(|w| w[0].0 < w[1].0)
        });
    std::thread::scope(|s| {
        let threads: Vec<_> = tables
            .iter()
            .map(|(name, kvs)| s.spawn(move || ingest_table(database, scratch, name, kvs)))
            .collect();
        threads
            .into_iter()
            .try_for_each(|t| t.join().expect("a table thread does not panic"))
    })?;
    let mut batch = WriteBatch::default();
    for (name, kvs) in logged {
        let cf = db::cf(database, name);
        for (k, v) in kvs {
            batch.put_cf(cf, k, v);
        }
    }
    if !batch.is_empty() {
        database.write_opt(batch, &db::buffered_write())?;
    }
    Ok(())
}

/// One family's records (in strict key order) as a table file ingested into the empty database.
fn ingest_table(
    database: &DB,
    scratch: &Path,
    name: &str,
    kvs: &[(&[u8], &[u8])],
) -> Result<(), OfflineError> {
    let t = Instant::now();
    let mut opts = Options::default();
    opts.set_compression_type(DBCompressionType::Lz4);
    let file = scratch.join(format!("restore-{name}.sst"));
    let mut writer = SstFileWriter::create(&opts);
    writer.open(&file)?;
    for (k, v) in kvs {
        writer.put(k, v)?;
    }
    writer.finish()?;
    let mut ingest = IngestExternalFileOptions::default();
    ingest.set_move_files(true);
    let ingested =
        database.ingest_external_file_cf_opts(db::cf(database, name), &ingest, vec![&file]);
    // Moved on success; on failure the file must not stay behind in the data dir.
    let _ = std::fs::remove_file(&file);
    ingested?;
    tracing::debug!(
        family = name,
        records = kvs.len(),
        seconds = t.elapsed().as_secs_f64(),
        "table file written and ingested"
    );
    Ok(())
}

/// Runs an offline command; returns what to print.
pub fn run(cli: OfflineCli) -> Result<String, OfflineError> {
    match cli.command {
        Offline::Snapshot(SnapshotCommand::Restore(args)) => {
            let ident = restore(&args)?;
            Ok(format!(
                "restored snapshot {} as member {:x} ({}) of new cluster {:x}\n",
                args.file.display(),
                ident.member_id,
                ident.name,
                ident.cluster_id
            ))
        }
        Offline::Snapshot(SnapshotCommand::Status(args)) => {
            let s = status(&args.file)?;
            match args.write_out.as_str() {
                "simple" => Ok(format!(
                    "{:x}, {}, {}, {} B\n",
                    s.hash, s.revision, s.total_keys, s.total_size
                )),
                "json" => Ok(format!(
                    "{}\n",
                    serde_json::json!({
                        "hash": s.hash,
                        "revision": s.revision,
                        "totalKey": s.total_keys,
                        "totalSize": s.total_size,
                    })
                )),
                other => Err(OfflineError::Format(other.to_string())),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::db::{CF_EVENTS, CF_LEASES};

    #[test]
    fn records_land_in_their_families_sorted_or_not_without_the_old_raft_position() {
        let dir = tempfile::tempdir().unwrap();
        let database = db::open(&dir.path().join("member")).unwrap();
        fn rec(
            family: &'static str,
            key: &'static [u8],
            value: &'static [u8],
        ) -> snapshot::Record<'static> {
            snapshot::Record { family, key, value }
        }
        let records = vec![
            // kv out of order (no kiln-store snapshot is): the batch path.
            rec(CF_KV, b"b", b"2"),
            rec(CF_KV, b"a", b"1"),
            // leases in order but small: the WAL.
            rec(CF_LEASES, b"x", b"9"),
            rec(CF_LEASES, b"y", b"8"),
            rec(CF_SM_META, META_LAST_APPLIED, b"old"),
            rec(CF_SM_META, META_REVISION, &[0, 0, 0, 0, 0, 0, 0, 7]),
        ];
        // events in order and big: a table file.
        let keys: Vec<Vec<u8>> = (0..2000u32).map(|i| i.to_be_bytes().to_vec()).collect();
        let value: &'static [u8] = &[7u8; 100];
        let mut records: Vec<snapshot::Record<'_>> = records;
        records.extend(keys.iter().map(|k| snapshot::Record {
            family: CF_EVENTS,
            key: k,
            value,
        }));
        write_records(&database, dir.path(), records).unwrap();
        let get = |family, key: &[u8]| database.get_cf(db::cf(&database, family), key).unwrap();
        assert_eq!(get(CF_KV, b"a").as_deref(), Some(&b"1"[..]));
        assert_eq!(get(CF_KV, b"b").as_deref(), Some(&b"2"[..]));
        assert_eq!(get(CF_LEASES, b"y").as_deref(), Some(&b"8"[..]));
        assert_eq!(
            get(CF_EVENTS, &1999u32.to_be_bytes()).as_deref(),
            Some(&[7u8; 100][..])
        );
        let tables = database
            .live_files()
            .unwrap()
            .into_iter()
            .filter(|f| f.column_family_name == CF_EVENTS)
            .count();
        assert_eq!(tables, 1, "events came as one ingested table file");
        assert_eq!(get(CF_SM_META, META_LAST_APPLIED), None);
        assert_eq!(
            get(CF_SM_META, META_REVISION).as_deref(),
            Some(&[0, 0, 0, 0, 0, 0, 0, 7][..])
        );
        // No table file left outside the database.
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, vec![std::ffi::OsString::from("member")]);
    }

    #[test]
    fn a_snapshot_in_kilns_older_framing_still_restores() {
        // Bundles saved before kiln-store streamed etcd's format hold kiln's own framing.
        use kiln_common::store_snapshot::{encode_kv, kv_record};
        let dir = tempfile::tempdir().unwrap();
        let kv = [
            kv_record(b"/registry/a", 3, Some(b"v2")),
            kv_record(b"/registry/a", 2, Some(b"v1")),
        ];
        let file = dir.path().join("old.db");
        std::fs::write(&file, encode_kv(&kv, 3)).unwrap();
        let data_dir = dir.path().join("restored");
        let args = RestoreArgs {
            file,
            data_dir: Some(data_dir.clone()),
            name: "m".into(),
            initial_cluster: None,
            initial_cluster_token: "t".into(),
            initial_advertise_peer_urls: vec!["http://localhost:2380".into()],
        };
        restore(&args).unwrap();
        let database = db::open(&data_dir.join("member")).unwrap();
        let get = |family, key: &[u8]| database.get_cf(db::cf(&database, family), key).unwrap();
        assert_eq!(get(CF_KV, &kv[0].0).as_deref(), Some(&kv[0].1[..]));
        assert_eq!(get(CF_KV, &kv[1].0).as_deref(), Some(&kv[1].1[..]));
        assert_eq!(
            get(CF_SM_META, META_REVISION).as_deref(),
            Some(&3i64.to_be_bytes()[..])
        );
    }
}
