//! The one error type of the transport module. Every variant names the host and the step; SSH variants
//! also name the user and the credential (key file or ssh-agent), because "permission denied" without
//! them is the error users of other tools complain about most.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

/// Who we are talking to, as shown in errors: `root@node1 (10.0.0.11:22, key /root/.ssh/id_ed25519)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// Host name from cluster.yaml (or the address when there is none).
    pub host: String,
    pub address: String,
    pub port: u16,
    pub user: String,
    /// Key file, or None for the ssh-agent.
    pub key_file: Option<PathBuf>,
    /// `via user@bastion:port` when connecting through a jump host.
    pub via: Option<String>,
}

impl Target {
    pub fn credential(&self) -> String {
        match &self.key_file {
            Some(k) => format!("key {}", k.display()),
            None => "ssh-agent".to_string(),
        }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}@{} ({}:{}, {}",
            self.user,
            self.host,
            self.address,
            self.port,
            self.credential()
        )?;
        if let Some(v) = &self.via {
            write!(f, ", via {v}")?;
        }
        write!(f, ")")
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    #[error("{target}: {step}: {source}")]
    Ssh {
        target: Box<Target>,
        step: &'static str,
        source: russh::Error,
    },

    #[error("{target}: {step}: {source}")]
    Io {
        target: Box<Target>,
        step: &'static str,
        source: std::io::Error,
    },

    #[error("{target}: {step}: timed out after {}s", after.as_secs())]
    Timeout {
        target: Box<Target>,
        step: &'static str,
        after: Duration,
    },

    #[error("{target}: cannot load private key {}: {message}", path.display())]
    KeyFile {
        target: Box<Target>,
        path: PathBuf,
        message: String,
    },

    #[error("{target}: authentication failed: the server refused {}", target.credential())]
    AuthRejected { target: Box<Target> },

    #[error("{target}: ssh-agent: {message}")]
    Agent {
        target: Box<Target>,
        message: String,
    },

    #[error(
        "{target}: host key verification failed: {} key {} of {} is not in {}{others}; \
         check it and add it with `ssh-keyscan -p {port} {address} >> {}`, or pass --accept-new-host-keys",
        key.key_type, key.fingerprint, key.pattern, key.known_hosts.display(), key.known_hosts.display(),
        port = target.port, address = target.address,
        others = if *other_types { " (only keys of other types are known for this host)" } else { "" }
    )]
    UnknownHostKey {
        target: Box<Target>,
        key: Box<HostKey>,
        other_types: bool,
    },

    #[error(
        "{target}: REMOTE HOST KEY HAS CHANGED! {} now offers {} key {}, but {}:{line} records a \
         different one. Someone could be intercepting the connection, or the host was reinstalled; \
         refusing to connect. If the change is expected, remove line {line} of {}",
        key.pattern, key.key_type, key.fingerprint, key.known_hosts.display(), key.known_hosts.display()
    )]
    HostKeyChanged {
        target: Box<Target>,
        key: Box<HostKey>,
        line: usize,
    },

    #[error("{target}: host key {} is marked @revoked at {}:{line}", key.fingerprint, key.known_hosts.display())]
    HostKeyRevoked {
        target: Box<Target>,
        key: Box<HostKey>,
        line: usize,
    },

    #[error("{}: {step}: {source}", known_hosts.display())]
    KnownHosts {
        known_hosts: PathBuf,
        step: &'static str,
        source: std::io::Error,
    },

    #[error("{target}: {step}: the server refused: {message}")]
    Refused {
        target: Box<Target>,
        step: &'static str,
        message: String,
    },

    #[error(
        "{host}: sudo -n refused for user {user}: it needs a password now although it did not when kiln \
         connected. Allow passwordless sudo for {user} (NOPASSWD in /etc/sudoers.d), or let kiln ask for \
         the password (it does when the first `sudo -n true` needs one)"
    )]
    SudoPassword { host: String, user: String },

    #[error("{host}: {step}: exit status {status}: {}", stderr.trim())]
    Remote {
        host: String,
        step: String,
        status: i32,
        stderr: String,
    },

    #[error("{host}: {step}: {message}")]
    Other {
        host: String,
        step: &'static str,
        message: String,
    },
}

/// The host key a server offered, for host-key errors (boxed: keeps `TransportError` small).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostKey {
    /// How known_hosts names the host: `host` or `[host]:port`.
    pub pattern: String,
    pub key_type: String,
    /// `SHA256:…`
    pub fingerprint: String,
    pub known_hosts: PathBuf,
}

pub type Result<T, E = TransportError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    fn target() -> Box<Target> {
        Box::new(Target {
            host: "node1".into(),
            address: "10.0.0.11".into(),
            port: 2222,
            user: "kiln".into(),
            key_file: Some("/k/id".into()),
            via: Some("jump@bastion:22".into()),
        })
    }

    #[test]
    fn messages_name_host_user_key_and_step() {
        let e = TransportError::AuthRejected { target: target() };
        assert_eq!(
            e.to_string(),
            "kiln@node1 (10.0.0.11:2222, key /k/id, via jump@bastion:22): authentication failed: the server refused key /k/id"
        );
        let e = TransportError::UnknownHostKey {
            target: target(),
            key: Box::new(HostKey {
                pattern: "[10.0.0.11]:2222".into(),
                key_type: "ssh-ed25519".into(),
                fingerprint: "SHA256:abc".into(),
                known_hosts: "/root/.ssh/known_hosts".into(),
            }),
            other_types: false,
        };
        let s = e.to_string();
        assert!(s.contains("kiln@node1"), "{s}");
        assert!(
            s.contains("ssh-keyscan -p 2222 10.0.0.11 >> /root/.ssh/known_hosts"),
            "{s}"
        );
    }
}
