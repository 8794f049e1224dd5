use std::path::PathBuf;

/// What can stop a playbook, naming the phase, host, file or object involved.
#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error(transparent)]
    Transport(#[from] crate::transport::TransportError),
    #[error("playbook {path}: {message}")]
    Playbook { path: String, message: String },
    #[error("phase {phase}: unknown phase name (known: {known})")]
    UnknownPhase { phase: String, known: String },
    #[error("phase {phase} on {host}: {message}")]
    Phase {
        phase: String,
        host: String,
        message: String,
    },
    #[error("preflight on {host} found errors:\n{findings}\n(skip a check with --ignore-preflight-errors=NAME)")]
    Preflight { host: String, findings: String },
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("pki: {0}")]
    Pki(String),
    #[error("rendering template {template}: {message}")]
    Template { template: String, message: String },
    #[error("timed out after {seconds}s waiting for {what}")]
    Timeout { what: String, seconds: u64 },
    #[error("{host} is not clean after reset:\n{residue}")]
    Residue { host: String, residue: String },
}

impl BootstrapError {
    pub(crate) fn phase(phase: &str, host: &str, message: impl Into<String>) -> Self {
        BootstrapError::Phase {
            phase: phase.to_string(),
            host: host.to_string(),
            message: message.into(),
        }
    }
}
