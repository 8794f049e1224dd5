//! Everything a phase needs: the cluster, one connection per host, the local state directory and where the
//! component binaries to push are.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use crate::config::ClusterFile;
use crate::transport::{ConnectOptions, Connections, Transport};

use super::phases::Outcome;
use super::{BootstrapError, Selector};

#[derive(Debug, Clone)]
pub struct Options {
    pub connect: ConnectOptions,
    /// Folder holding kiln-store, kiln-apiserver, kiln-kubelet to push (default: beside the kiln binary).
    pub bin_dir: Option<PathBuf>,
    pub ignore_preflight_errors: Vec<String>,
    /// How long to wait for the control plane and nodes.
    pub wait_timeout: Duration,
    pub json: bool,
    /// `--host`: host phases run only on these hosts (join and reset); empty means every host.
    pub only_hosts: Vec<String>,
    /// `kiln preflight --fix`: run the safe remedies before checking.
    pub preflight_fix: bool,
    /// `--dry-run`: look at every host, change nothing, collect a plan (see `bootstrap::dry_run`).
    pub dry_run: bool,
    /// `join --control-plane`: the controllers this run joins; nodes' balancers count them in already.
    pub joining_controllers: Vec<String>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            connect: ConnectOptions::default(),
            bin_dir: None,
            ignore_preflight_errors: vec![],
            wait_timeout: Duration::from_secs(180),
            json: false,
            only_hosts: vec![],
            preflight_fix: false,
            dry_run: false,
            joining_controllers: vec![],
        }
    }
}

/// Lifetime of the token minted for a join: long enough for slow hosts, short enough to be useless later.
pub const JOIN_TOKEN_TTL: time::Duration = time::Duration::hours(1);

pub struct Context {
    pub cluster: ClusterFile,
    pub conns: Connections,
    pub state_dir: PathBuf,
    pub bin_dir: PathBuf,
    pub opts: Options,
    /// sha256 of local files by (path, size, mtime): every host's push compares against the same
    /// ~250 MB of binaries, which are hashed once per run, not once per host.
    hashes: std::sync::Mutex<HashMap<(PathBuf, u64, std::time::SystemTime), String>>,
    /// The bootstrap token of this run, minted the first time a joining kubelet needs one.
    bootstrap_token: tokio::sync::OnceCell<String>,
    pub progress: super::progress::Progress,
    /// Some in a dry run: what would be done, per host.
    pub plan: Option<super::dry_run::Plan>,
    /// Where a dry run renders files (never the state directory, which it must not create).
    dry_staging: Option<tempfile::TempDir>,
}

impl Context {
    /// The sha256 of a local file, hashed once per content version in this run.
    pub fn sha256_file(&self, path: &std::path::Path) -> Result<String, BootstrapError> {
        use sha2::{Digest, Sha256};
        let io = |source| BootstrapError::Io {
            what: "reading",
            path: path.to_path_buf(),
            source,
        };
        let meta = std::fs::metadata(path).map_err(io)?;
        let key = (path.to_path_buf(), meta.len(), meta.modified().map_err(io)?);
        if let Some(h) = self.hashes.lock().expect("hash cache").get(&key) {
            return Ok(h.clone());
        }
        let mut f = std::fs::File::open(path).map_err(io)?;
        let mut h = Sha256::new();
        std::io::copy(&mut f, &mut h).map_err(io)?;
        let hex = hex::encode(h.finalize());
        self.hashes
            .lock()
            .expect("hash cache")
            .insert(key, hex.clone());
        Ok(hex)
    }

    pub fn new(cluster: ClusterFile, opts: Options) -> Result<Context, BootstrapError> {
        let state_dir = cluster.state_dir();
        let bin_dir = match &opts.bin_dir {
            Some(d) => d.clone(),
            None => std::env::current_exe()
                .ok()
                .and_then(|p| p.parent().map(|d| d.to_path_buf()))
                .unwrap_or_else(|| PathBuf::from("/usr/local/bin")),
        };
        let progress = super::progress::Progress::new(opts.json);
        let (plan, dry_staging) = if opts.dry_run {
            let dir = tempfile::tempdir().map_err(|source| BootstrapError::Io {
                what: "creating a temporary directory for",
                path: std::env::temp_dir(),
                source,
            })?;
            (Some(super::dry_run::Plan::default()), Some(dir))
        } else {
            (None, None)
        };
        Ok(Context {
            conns: Connections::new(cluster.clone(), opts.connect.clone()),
            cluster,
            state_dir,
            bin_dir,
            opts,
            hashes: Default::default(),
            bootstrap_token: Default::default(),
            progress,
            plan,
            dry_staging,
        })
    }

    /// A bootstrap token for the kubelets joining in this run: minted just in time (one per run, short
    /// TTL), never stored on the operator's disk; the controller-manager's tokencleaner removes it when it
    /// expires.
    pub async fn bootstrap_token(&self) -> Result<&str, BootstrapError> {
        self.bootstrap_token
            .get_or_try_init(|| async {
                let client = crate::bootstrap::phases::wait::admin_client(self).await?;
                let token = crate::tokens::generate();
                crate::tokens::create(
                    client,
                    &token,
                    Some(JOIN_TOKEN_TTL),
                    Some("kiln init/join: TLS bootstrap of joining kubelets"),
                )
                .await
                .map_err(|e| BootstrapError::phase("bootstrap-token", "local", e.to_string()))?;
                Ok(token)
            })
            .await
            .map(String::as_str)
    }

    /// Host names for a selector; `None` stands for the operator's machine.
    pub fn select(&self, s: &Selector) -> Result<Vec<Option<String>>, BootstrapError> {
        let cfg = &self.cluster.config;
        let names: Vec<Option<String>> = match s {
            Selector::Local => vec![None],
            Selector::FirstController => cfg
                .controllers()
                .take(1)
                .map(|h| Some(h.name.clone()))
                .collect(),
            Selector::Controllers => cfg.controllers().map(|h| Some(h.name.clone())).collect(),
            Selector::Workers => cfg
                .workers()
                .filter(|h| !h.is_controller())
                .map(|h| Some(h.name.clone()))
                .collect(),
            Selector::All => cfg
                .spec
                .hosts
                .iter()
                .map(|h| Some(h.name.clone()))
                .collect(),
        };
        let only = &self.opts.only_hosts;
        Ok(names
            .into_iter()
            .filter(|n| match n {
                Some(h) => only.is_empty() || only.contains(h),
                None => true,
            })
            .collect())
    }

    pub async fn transport(
        &self,
        host: &str,
    ) -> Result<std::sync::Arc<dyn Transport>, BootstrapError> {
        let t = self.conns.get(host).await?;
        Ok(match &self.plan {
            Some(plan) => std::sync::Arc::new(super::dry_run::PlanTransport {
                inner: t,
                plan: plan.clone(),
            }),
            None => t,
        })
    }

    /// Where rendered files for `host` are staged: the state directory, or a temp dir in a dry run.
    pub fn staging_dir(&self, host: &str) -> PathBuf {
        match &self.dry_staging {
            Some(d) => d.path().join(host),
            None => self.state_dir.join("rendered").join(host),
        }
    }

    pub fn host(&self, name: &str) -> &crate::config::Host {
        self.cluster
            .config
            .host(name)
            .expect("selected hosts come from the config")
    }

    pub fn first_controller(&self) -> &crate::config::Host {
        self.cluster
            .config
            .controllers()
            .next()
            .expect("validated config has a controller")
    }

    pub fn pki_dir(&self, node: &str) -> PathBuf {
        self.state_dir.join("pki").join(node)
    }

    pub fn admin_conf(&self) -> PathBuf {
        self.state_dir.join("admin.conf")
    }

    pub fn say(&self, line: &str) {
        if !self.opts.json {
            self.progress.line(line);
        }
    }

    pub fn report(&self, phase: &str, host: &str, outcome: &Outcome, took: Duration) {
        if self.opts.json {
            println!(
                "{}",
                serde_json::json!({"phase": phase, "host": host, "result": outcome.kind(), "detail": outcome.detail(), "seconds": took.as_secs_f64()})
            );
        } else {
            self.progress.line(&format!(
                "[{host:>8}] {phase:<20} {:<7} {:>6.2}s  {}",
                outcome.kind(),
                took.as_secs_f64(),
                outcome.detail()
            ));
        }
    }

    pub fn report_failure(&self, phase: &str, host: &str, e: &BootstrapError) {
        if self.opts.json {
            println!(
                "{}",
                serde_json::json!({"phase": phase, "host": host, "result": "failed", "error": e.to_string()})
            );
        } else {
            self.progress
                .line(&format!("[{host:>8}] {phase:<20} FAILED"));
        }
    }
}
