//! The russh client handler that decides whether to trust a server's host key, by known_hosts.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use russh::client;
use russh::keys::{PublicKey, PublicKeyOrCertificate};

use super::known_hosts::{self, host_pattern, KnownHosts, Verdict};
use super::{HostKey, Target, TransportError};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HostKeyPolicy {
    /// Unknown or changed host keys are refused (OpenSSH's StrictHostKeyChecking=yes).
    #[default]
    Strict,
    /// Unknown keys are appended to known_hosts; changed keys are refused (StrictHostKeyChecking=accept-new).
    AcceptNew,
    /// No checking at all; only when explicitly asked for.
    Insecure,
}

/// Why a host key was not trusted.
pub(super) enum KeyFailure {
    Unknown { other_types: bool },
    Changed { line: usize },
    Revoked { line: usize },
    Certificate,
    Io(&'static str, std::io::Error),
}

/// The refused key (absent for a certificate) and why.
pub(super) type Refusal = (Option<PublicKey>, KeyFailure);

/// accept-new appends from several connections at once; one writer at a time keeps lines whole and
/// lets the second writer see the first one's entry.
static KNOWN_HOSTS_WRITE: Mutex<()> = Mutex::new(());

/// russh only learns yes/no from the handler; the reason for a "no" is left in `failure` so the
/// caller can explain it (see [`host_key_error`]).
pub struct HostKeyCheck {
    address: String,
    port: u16,
    known_hosts: PathBuf,
    policy: HostKeyPolicy,
    failure: Arc<Mutex<Option<Refusal>>>,
}

impl HostKeyCheck {
    pub(super) fn new(address: &str, port: u16, known_hosts: &Path, policy: HostKeyPolicy) -> Self {
        HostKeyCheck {
            address: address.to_string(),
            port,
            known_hosts: known_hosts.to_path_buf(),
            policy,
            failure: Default::default(),
        }
    }

    pub(super) fn failure(&self) -> Arc<Mutex<Option<Refusal>>> {
        self.failure.clone()
    }

    fn decide(&self, key: &PublicKey) -> Result<(), KeyFailure> {
        if self.policy == HostKeyPolicy::Insecure {
            tracing::warn!(host = %self.address, "host key NOT checked (insecure mode)");
            return Ok(());
        }
        let _guard = KNOWN_HOSTS_WRITE.lock().unwrap_or_else(|e| e.into_inner());
        let kh = KnownHosts::load(&self.known_hosts).map_err(|e| KeyFailure::Io("read", e))?;
        for (line, why) in &kh.skipped {
            tracing::debug!(file = %self.known_hosts.display(), line, why, "known_hosts line ignored");
        }
        match kh.check(&self.address, self.port, key) {
            Verdict::Known => Ok(()),
            Verdict::Changed { line } => Err(KeyFailure::Changed { line }),
            Verdict::Revoked { line } => Err(KeyFailure::Revoked { line }),
            Verdict::Unknown { other_types } if self.policy == HostKeyPolicy::Strict => {
                Err(KeyFailure::Unknown { other_types })
            }
            Verdict::Unknown { .. } => {
                known_hosts::append(&self.known_hosts, &self.address, self.port, key)
                    .map_err(|e| KeyFailure::Io("add host key", e))?;
                tracing::info!(
                    host = %host_pattern(&self.address, self.port),
                    fingerprint = %known_hosts::fingerprint(key),
                    file = %self.known_hosts.display(),
                    "added new host key"
                );
                Ok(())
            }
        }
    }
}

impl client::Handler for HostKeyCheck {
    type Error = russh::Error;

    async fn check_server_key(
        &mut self,
        server_key: &PublicKeyOrCertificate,
    ) -> Result<bool, Self::Error> {
        let refusal = match server_key {
            PublicKeyOrCertificate::PublicKey { key, .. } => {
                self.decide(key).err().map(|f| (Some(key.clone()), f))
            }
            PublicKeyOrCertificate::Certificate(_) => Some((None, KeyFailure::Certificate)),
        };
        let trusted = refusal.is_none();
        *self.failure.lock().expect("lock") = refusal;
        Ok(trusted)
    }
}

/// The error for a refused host key; None when the key was not the problem.
pub(super) fn host_key_error(
    refusal: Option<Refusal>,
    target: &Target,
    known_hosts: &Path,
    address: &str,
    port: u16,
) -> Option<TransportError> {
    let (key, failure) = refusal?;
    let target = Box::new(target.clone());
    let key = Box::new(HostKey {
        pattern: host_pattern(address, port),
        key_type: key
            .as_ref()
            .map(|k| k.algorithm().to_string())
            .unwrap_or_default(),
        fingerprint: key
            .as_ref()
            .map(known_hosts::fingerprint)
            .unwrap_or_default(),
        known_hosts: known_hosts.to_path_buf(),
    });
    Some(match failure {
        KeyFailure::Unknown { other_types } => TransportError::UnknownHostKey {
            target,
            key,
            other_types,
        },
        KeyFailure::Changed { line } => TransportError::HostKeyChanged { target, key, line },
        KeyFailure::Revoked { line } => TransportError::HostKeyRevoked { target, key, line },
        KeyFailure::Certificate => TransportError::Refused {
            target,
            step: "host key",
            message: "the server offered a host certificate; kiln checks plain host keys only"
                .into(),
        },
        KeyFailure::Io(step, source) => TransportError::KnownHosts {
            known_hosts: key.known_hosts,
            step,
            source,
        },
    })
}
