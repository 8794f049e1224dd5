//! cluster.yaml (kiln.dev/v1alpha1 Cluster): parsing, defaults and validation.
//!
//! Every error names the file, the line and the field, e.g.
//! `cluster.yaml:12: hosts[2].role: unknown role 'master', expected one of controller, worker, controller+worker`.
//! Field paths are shown relative to `spec` (everything of interest lives there); `apiVersion`, `kind`
//! and `metadata.*` are shown as they are.

mod apiserver;
pub mod backup;
pub mod external_etcd;
mod location;
mod types;
mod validate;

use std::fmt;
use std::path::{Path, PathBuf};

pub use apiserver::{ApiServer, Audit, AuditPolicy, Encryption, EncryptionProvider};
pub use location::LineIndex;
pub use types::*;
pub use validate::{check_address, split_host_port, validate, Problem};

/// Default apiserver port when `controlPlaneEndpoint` is not set.
pub const APISERVER_PORT: u16 = 6443;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{}: cannot read: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}", render_problems(file, problems))]
    Invalid {
        file: String,
        problems: Vec<LocatedProblem>,
    },
}

/// A problem with the file, the line (when it could be found) and the field path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocatedProblem {
    pub line: Option<usize>,
    /// Full path from the document root, e.g. `spec.hosts[2].role`; empty when unknown.
    pub path: String,
    pub message: String,
}

impl LocatedProblem {
    /// The path as shown to users: without the `spec.` prefix.
    pub fn display_path(&self) -> &str {
        self.path.strip_prefix("spec.").unwrap_or(&self.path)
    }
}

fn render_problems(file: &str, problems: &[LocatedProblem]) -> String {
    let lines: Vec<String> = problems
        .iter()
        .map(|p| format_problem(file, p).to_string())
        .collect();
    lines.join("\n")
}

fn format_problem<'a>(file: &'a str, p: &'a LocatedProblem) -> impl fmt::Display + 'a {
    struct F<'a>(&'a str, &'a LocatedProblem);
    impl fmt::Display for F<'_> {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "{}", self.0)?;
            if let Some(l) = self.1.line {
                write!(f, ":{l}")?;
            }
            write!(f, ": ")?;
            if !self.1.path.is_empty() {
                write!(f, "{}: ", self.1.display_path())?;
            }
            f.write_str(&self.1.message)
        }
    }
    F(file, p)
}

/// A parsed and validated cluster.yaml plus where it came from (relative paths resolve against its folder).
#[derive(Debug, Clone)]
pub struct ClusterFile {
    pub path: PathBuf,
    pub config: ClusterConfig,
}

/// Reads, parses and validates a cluster.yaml.
pub fn load(path: &Path) -> Result<ClusterFile, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let config = parse(&text, &path.display().to_string())?;
    Ok(ClusterFile {
        path: path.to_path_buf(),
        config,
    })
}

/// Parses and validates cluster.yaml text; `file` is only used in error messages.
pub fn parse(text: &str, file: &str) -> Result<ClusterConfig, ConfigError> {
    let config: ClusterConfig =
        match serde_path_to_error::deserialize(serde_norway::Deserializer::from_str(text)) {
            Ok(c) => c,
            Err(e) => {
                let problem = from_serde(&e.path().to_string(), e.inner(), &LineIndex::new(text));
                return Err(ConfigError::Invalid {
                    file: file.to_string(),
                    problems: vec![problem],
                });
            }
        };
    let problems = validate(&config);
    if problems.is_empty() {
        return Ok(config);
    }
    let index = LineIndex::new(text);
    let problems = problems
        .into_iter()
        .map(|p| LocatedProblem {
            line: index.line_of(&p.path),
            path: p.path,
            message: p.message,
        })
        .collect();
    Err(ConfigError::Invalid {
        file: file.to_string(),
        problems,
    })
}

/// serde_norway reports the enclosing mapping's path and position (`spec.hosts[2]`, line of its first
/// key) for a rejected value; serde_path_to_error knows the exact field (`spec.hosts[2].role`), whose
/// line the index finds. serde_norway's message is `<path>: <message> at line L column C`: keep only
/// the message. Syntax errors have no path and keep serde's line.
fn from_serde(path: &str, e: &serde_norway::Error, index: &LineIndex) -> LocatedProblem {
    let mut text = e.to_string();
    if let Some(l) = e.location() {
        let suffix = format!(" at line {} column {}", l.line(), l.column());
        if let Some(pos) = text.find(&suffix) {
            text.replace_range(pos..pos + suffix.len(), "");
        }
    }
    if let Some((p, m)) = text.split_once(": ") {
        if !p.is_empty()
            && p.chars()
                .all(|c| c.is_ascii_alphanumeric() || "._[]".contains(c))
        {
            text = m.to_string();
        }
    }
    let path = if path == "." {
        String::new()
    } else {
        path.to_string()
    };
    // A missing field is best shown on its mapping's line, which serde reports.
    let line = if path.is_empty() || text.starts_with("missing field") {
        e.location().map(|l| l.line())
    } else {
        index
            .line_of(&path)
            .or_else(|| e.location().map(|l| l.line()))
    };
    LocatedProblem {
        line,
        path,
        message: text,
    }
}

impl ClusterConfig {
    pub fn controllers(&self) -> impl Iterator<Item = &Host> {
        self.spec.hosts.iter().filter(|h| h.is_controller())
    }

    pub fn workers(&self) -> impl Iterator<Item = &Host> {
        self.spec.hosts.iter().filter(|h| h.is_worker())
    }

    pub fn host(&self, name: &str) -> Option<&Host> {
        self.spec.hosts.iter().find(|h| h.name == name)
    }

    /// `spec.store.backup`: the declared snapshot schedule, if any.
    pub fn backup(&self) -> Option<&Backup> {
        self.spec.store.backup.as_ref()
    }

    /// `controlPlaneEndpoint`, or the first controller's node address on 6443.
    pub fn control_plane_endpoint(&self) -> String {
        if let Some(ep) = &self.spec.control_plane_endpoint {
            return ep.clone();
        }
        let first = self
            .controllers()
            .next()
            .expect("validated config has a controller");
        let addr = first.node_address();
        if addr.contains(':') {
            format!("[{addr}]:{APISERVER_PORT}")
        } else {
            format!("{addr}:{APISERVER_PORT}")
        }
    }
}

impl Host {
    /// The address the node announces: `nodeIP`, else `address`.
    pub fn node_address(&self) -> String {
        self.node_ip
            .map(|ip| ip.to_string())
            .unwrap_or_else(|| self.address.clone())
    }
}

impl ClusterFile {
    /// Folder holding cluster.yaml; relative paths in it resolve against this.
    pub fn dir(&self) -> PathBuf {
        match self.path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        }
    }

    /// `~/x` → `$HOME/x`; relative → beside cluster.yaml; absolute unchanged.
    pub fn resolve(&self, p: &Path) -> PathBuf {
        if let Ok(rest) = p.strip_prefix("~") {
            return home_dir().join(rest);
        }
        if p.is_absolute() {
            p.to_path_buf()
        } else {
            self.dir().join(p)
        }
    }

    /// Cluster state (CA, keys, tokens): `spec.stateDir` or `<dir of cluster.yaml>/<name>.kiln`.
    pub fn state_dir(&self) -> PathBuf {
        match &self.config.spec.state_dir {
            Some(p) => self.resolve(p),
            None => self
                .dir()
                .join(format!("{}.kiln", self.config.metadata.name)),
        }
    }

    /// `spec.knownHostsFile` or `~/.ssh/known_hosts`.
    pub fn known_hosts_file(&self) -> PathBuf {
        match &self.config.spec.known_hosts_file {
            Some(p) => self.resolve(p),
            None => home_dir().join(".ssh/known_hosts"),
        }
    }

    /// The host's key file, resolved; None means "use the ssh-agent".
    pub fn key_file(&self, host: &Host) -> Option<PathBuf> {
        host.ssh.key_file.as_deref().map(|p| self.resolve(p))
    }
}

pub fn home_dir() -> PathBuf {
    std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/root"))
}

#[cfg(test)]
mod tests;
