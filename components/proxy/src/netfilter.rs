//! The kernel side of the rules: a [`Netfilter`] trait with the real `nft` implementation and a recording
//! test double, so the sync loop is tested without root.

use std::sync::Mutex;

use crate::host::{HostCommand, HostError};
use crate::render::{cleanup_script, TABLE};

#[derive(Debug, thiserror::Error)]
pub enum NetfilterError {
    #[error("nft: {0}")]
    Nft(#[from] HostError),
}

pub trait Netfilter: Send + Sync {
    /// Applies an `nft -f` script as one transaction.
    fn apply(&self, script: &str) -> Result<(), NetfilterError>;
    /// The `kiln` table as `nft list table` prints it, or `None` when it does not exist.
    fn list_table(&self) -> Result<Option<String>, NetfilterError>;
    /// Whether the `kiln` table exists (cheaper than listing it: a big table takes the kernel ~1 s to dump).
    fn table_exists(&self) -> Result<bool, NetfilterError> {
        Ok(self.list_table()?.is_some())
    }
    /// Deletes the `kiln` table; succeeds when it is already gone.
    fn delete_table(&self) -> Result<(), NetfilterError> {
        self.apply(&cleanup_script())
    }
}

/// The `nft` command line tool.
#[derive(Debug, Clone, Default)]
pub struct NftCli {
    pub host: HostCommand,
}

impl Netfilter for NftCli {
    fn apply(&self, script: &str) -> Result<(), NetfilterError> {
        self.host.run("nft", &["-f", "-"], Some(script))?;
        Ok(())
    }

    fn table_exists(&self) -> Result<bool, NetfilterError> {
        // `list tables` never fails for a missing table, unlike `list table`, so "absent" is not an error
        let tables = self.host.run("nft", &["list", "tables", "ip"], None)?;
        Ok(tables
            .lines()
            .any(|l| l.trim() == format!("table ip {TABLE}")))
    }

    fn list_table(&self) -> Result<Option<String>, NetfilterError> {
        if !self.table_exists()? {
            return Ok(None);
        }
        Ok(Some(self.host.run(
            "nft",
            &["list", "table", "ip", TABLE],
            None,
        )?))
    }
}

/// Test double: records every applied script and reports the last one as the table.
#[derive(Debug, Default)]
pub struct RecordingNetfilter {
    pub applied: Mutex<Vec<String>>,
    /// When set, `apply` fails with this message (to test error paths).
    pub fail_with: Mutex<Option<String>>,
}

impl RecordingNetfilter {
    pub fn applied(&self) -> Vec<String> {
        self.applied
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl Netfilter for RecordingNetfilter {
    fn apply(&self, script: &str) -> Result<(), NetfilterError> {
        if let Some(msg) = self
            .fail_with
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
        {
            return Err(NetfilterError::Nft(HostError::Failed {
                command: "nft -f -".into(),
                status: "exit status: 1".into(),
                stderr: msg,
            }));
        }
        self.applied
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(script.to_string());
        Ok(())
    }

    fn list_table(&self) -> Result<Option<String>, NetfilterError> {
        let applied = self.applied();
        Ok(applied.last().filter(|s| **s != cleanup_script()).cloned())
    }
}
