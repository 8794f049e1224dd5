//! Garbage collection of leaked host-local IP reservations. host-local keeps one file per reserved IP in
//! `/var/lib/cni/networks/<network>/`; CNI DEL (StopPodSandbox) removes it. When a sandbox goes without a
//! DEL (containerd's state lost, a host crash, a kill in the middle of RunPodSandbox) its file stays, the IP is
//! never handed out again and the node's /24 eventually runs out. Every `interval` (and once after the
//! runtime has reconciled at start) this lists every sandbox CRI knows, in any state, and removes the
//! reservations whose owner is none of them and whose file is older than `grace`: RunPodSandbox reserves the
//! IP (CNI ADD) before containerd lists the sandbox, and the grace covers that window.

use std::collections::HashSet;
use std::fs::File;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::watch;

use crate::cni;
use crate::runtime::cri::CriApi;

#[derive(Debug, thiserror::Error)]
pub enum GcError {
    #[error("listing pod sandboxes (nothing released): {0}")]
    Sandboxes(String),
    #[error("reading {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("locking {path}: {source}")]
    Lock {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("removing {path}: {source}")]
    Remove {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("collection task: {0}")]
    Task(String),
}

/// How often and how carefully reservations are collected, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GcSettings {
    pub interval: Duration,
    /// A reservation younger than this is kept even when no sandbox owns it (yet).
    pub grace: Duration,
    /// host-local's directory of the kiln network.
    pub dir: PathBuf,
}

impl Default for GcSettings {
    fn default() -> Self {
        GcSettings {
            interval: Duration::from_secs(60),
            grace: Duration::from_secs(120),
            dir: Path::new(cni::IPAM_DATA_DIR).join(cni::NETWORK_NAME),
        }
    }
}

/// One reservation file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reservation {
    pub ip: IpAddr,
    /// The sandbox (container) ID the file names; empty if the plugin died before writing it.
    pub owner: String,
    pub modified: SystemTime,
}

/// The owner ID of a reservation file's content: its first line (older plugins write only the ID, newer
/// ones `ID\r\nIFNAME`).
pub fn owner_of(content: &str) -> &str {
    content.lines().next().unwrap_or("").trim()
}

/// The reservations in `dir`: files named by an IP address (`lock` and `last_reserved_ip.*` are not). A
/// missing directory (no pod got an IP yet) has none.
pub fn read_reservations(dir: &Path) -> Result<Vec<Reservation>, GcError> {
    let rerr = |p: &Path| {
        let path = p.display().to_string();
        move |source| GcError::Read { path, source }
    };
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(rerr(dir)(e)),
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(rerr(dir))?;
        let Some(ip) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
            continue;
        };
        let path = entry.path();
        // Released by the plugin since the directory was read.
        let gone = |e: &std::io::Error| e.kind() == std::io::ErrorKind::NotFound;
        let meta = match std::fs::metadata(&path) {
            Ok(m) if m.is_file() => m,
            Ok(_) => continue,
            Err(e) if gone(&e) => continue,
            Err(e) => return Err(rerr(&path)(e)),
        };
        let content = match std::fs::read(&path) {
            Ok(c) => c,
            Err(e) if gone(&e) => continue,
            Err(e) => return Err(rerr(&path)(e)),
        };
        out.push(Reservation {
            ip,
            owner: owner_of(&String::from_utf8_lossy(&content)).to_string(),
            modified: meta.modified().map_err(rerr(&path))?,
        });
    }
    out.sort_by_key(|r| r.ip);
    Ok(out)
}

/// True when `r` leaked: no sandbox in `known` owns it and it was made more than `grace` before the
/// sandboxes were listed (`listed_at`). A file dated after the listing (or a clock set back) is kept.
pub fn is_leaked(
    r: &Reservation,
    known: &HashSet<String>,
    listed_at: SystemTime,
    grace: Duration,
) -> bool {
    if known.contains(&r.owner) {
        return false;
    }
    listed_at
        .duration_since(r.modified)
        .is_ok_and(|age| age > grace)
}

/// Under host-local's lock (so no ADD or DEL runs meanwhile): reads `dir` and removes the leaked
/// reservations, given the sandbox IDs CRI listed at `listed_at`. Returns what was released.
pub fn collect(
    dir: &Path,
    known: &HashSet<String>,
    listed_at: SystemTime,
    grace: Duration,
) -> Result<Vec<Reservation>, GcError> {
    if !dir.is_dir() {
        return Ok(Vec::new());
    }
    let _lock = lock(dir)?;
    let mut released = Vec::new();
    for r in read_reservations(dir)? {
        if !is_leaked(&r, known, listed_at, grace) {
            continue;
        }
        let path = dir.join(r.ip.to_string());
        match std::fs::remove_file(&path) {
            Ok(()) => released.push(r),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => {
                return Err(GcError::Remove {
                    path: path.display().to_string(),
                    source,
                })
            }
        }
    }
    Ok(released)
}

/// host-local's exclusive flock on `<dir>/lock` (created as the plugin does if missing); released on drop.
fn lock(dir: &Path) -> Result<nix::fcntl::Flock<File>, GcError> {
    let path = dir.join(cni::IPAM_LOCK_FILE);
    let lerr = |source| GcError::Lock {
        path: path.display().to_string(),
        source,
    };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(lerr)?;
    nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, errno)| lerr(errno.into()))
}

/// One pass: lists every sandbox (any state, no label filter), then collects. A failed listing releases
/// nothing: an empty or partial view of the sandboxes would make every reservation look leaked.
pub async fn pass(cri: &dyn CriApi, settings: &GcSettings) -> Result<Vec<Reservation>, GcError> {
    // Taken before the call: a sandbox whose IP was reserved after it cannot be in the answer.
    let listed_at = SystemTime::now();
    let known: HashSet<String> = cri
        .list_pod_sandboxes(Default::default())
        .await
        .map_err(|e| GcError::Sandboxes(e.to_string()))?
        .into_iter()
        .map(|s| s.id)
        .collect();
    let dir = settings.dir.clone();
    let grace = settings.grace;
    tokio::task::spawn_blocking(move || collect(&dir, &known, listed_at, grace))
        .await
        .map_err(|e| GcError::Task(e.to_string()))?
}

/// Collects once `reconciled` turns true (the runtime has adopted or removed what an earlier run left,
/// [`crate::runtime::cri::CriRuntime::adopted`]), then every `settings.interval`, until `shutdown`.
pub async fn run(
    cri: Arc<dyn CriApi>,
    settings: GcSettings,
    mut reconciled: watch::Receiver<bool>,
    mut shutdown: watch::Receiver<bool>,
) {
    tokio::select! {
        r = reconciled.wait_for(|d| *d) => if r.is_err() { return },
        _ = shutdown.wait_for(|s| *s) => return,
    }
    tracing::info!(dir = %settings.dir.display(), interval = ?settings.interval, grace = ?settings.grace, "CNI IP reservation GC started");
    loop {
        match pass(cri.as_ref(), &settings).await {
            Ok(released) => {
                for r in released {
                    tracing::info!(ip = %r.ip, owner = %r.owner, dir = %settings.dir.display(), "released a leaked CNI IP reservation (its sandbox is gone)");
                }
            }
            Err(e) => tracing::warn!(error = %e, "CNI IP reservation GC"),
        }
        tokio::select! {
            _ = tokio::time::sleep(settings.interval) => {}
            _ = shutdown.wait_for(|s| *s) => return,
        }
    }
}

#[cfg(test)]
#[path = "cni_gc_tests.rs"]
mod tests;
