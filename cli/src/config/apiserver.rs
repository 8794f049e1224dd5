//! `spec.apiServer`: kiln-apiserver's audit logging and encryption at rest.
//!
//! ```yaml
//! apiServer:
//!   audit:
//!     policy: audit-policy.yaml     # a file next to cluster.yaml, or the Policy itself (a mapping)
//!     logPath: /var/log/kiln/audit.log
//!     maxAge: 30                    # days (--audit-log-maxage)
//!     maxBackup: 10                 # files (--audit-log-maxbackup)
//!     maxSize: 100                  # MB (--audit-log-maxsize)
//!   encryption:
//!     enabled: true
//!     provider: aesgcm              # aesgcm | aescbc | secretbox; kiln makes and keeps the key
//! ```

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::validate::Problem;
use super::ClusterConfig;

#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ApiServer {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audit: Option<Audit>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encryption: Option<Encryption>,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Audit {
    pub policy: AuditPolicy,
    #[serde(default = "default_log_path")]
    pub log_path: String,
    #[serde(default = "default_max_age")]
    pub max_age: u32,
    #[serde(default = "default_max_backup")]
    pub max_backup: u32,
    #[serde(default = "default_max_size")]
    pub max_size: u32,
}

/// An `audit.k8s.io/v1` Policy: a file (relative to cluster.yaml's folder) or written inline.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(untagged)]
pub enum AuditPolicy {
    File(PathBuf),
    Inline(serde_json::Map<String, serde_json::Value>),
}

fn default_log_path() -> String {
    "/var/log/kiln/audit.log".into()
}
fn default_max_age() -> u32 {
    30
}
fn default_max_backup() -> u32 {
    10
}
fn default_max_size() -> u32 {
    100
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Encryption {
    #[serde(default)]
    pub enabled: bool,
    #[serde(default)]
    pub provider: EncryptionProvider,
}

/// The providers kiln-apiserver has (upstream's local ones; KMS is not offered).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EncryptionProvider {
    #[default]
    Aesgcm,
    Aescbc,
    Secretbox,
}

impl EncryptionProvider {
    pub fn name(self) -> &'static str {
        match self {
            EncryptionProvider::Aesgcm => "aesgcm",
            EncryptionProvider::Aescbc => "aescbc",
            EncryptionProvider::Secretbox => "secretbox",
        }
    }
}

impl ApiServer {
    pub fn is_unset(&self) -> bool {
        *self == ApiServer::default()
    }

    /// Whether Secrets are to be encrypted.
    pub fn encryption_enabled(&self) -> bool {
        self.encryption.as_ref().is_some_and(|e| e.enabled)
    }
}

/// What can be checked without the hosts: an inline policy's kind, the log path.
pub(super) fn validate(c: &ClusterConfig, out: &mut Vec<Problem>) {
    let Some(audit) = &c.spec.api_server.audit else {
        return;
    };
    let at = "spec.apiServer.audit";
    if let AuditPolicy::Inline(p) = &audit.policy {
        let text = |k: &str| p.get(k).and_then(|v| v.as_str()).unwrap_or("");
        if text("apiVersion") != "audit.k8s.io/v1" || text("kind") != "Policy" {
            out.push(Problem {
                path: format!("{at}.policy"),
                message: "an inline policy needs apiVersion: audit.k8s.io/v1 and kind: Policy"
                    .into(),
            });
        }
        if p.get("rules")
            .and_then(|r| r.as_array())
            .is_none_or(|r| r.is_empty())
        {
            out.push(Problem {
                path: format!("{at}.policy.rules"),
                message: "a policy needs at least one rule".into(),
            });
        }
    }
    if audit.log_path != "-" && !audit.log_path.starts_with('/') {
        out.push(Problem {
            path: format!("{at}.logPath"),
            message: format!(
                "'{}': expected an absolute path on the controllers, or - for standard output",
                audit.log_path
            ),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::super::parse;
    use super::*;

    fn cluster(api_server: &str) -> String {
        format!(
            "apiVersion: kiln.dev/v1alpha1
kind: Cluster
metadata: {{name: demo}}
spec:
  hosts:
    - {{name: host1, address: 10.0.0.11, role: controller+worker}}
  apiServer:
{api_server}"
        )
    }

    #[test]
    fn policy_file_or_inline_with_defaults() {
        let c = parse(
            &cluster("    audit: {policy: audit.yaml}\n    encryption: {enabled: true}\n"),
            "c.yaml",
        )
        .unwrap();
        let a = c.spec.api_server.audit.as_ref().unwrap();
        assert_eq!(a.policy, AuditPolicy::File("audit.yaml".into()));
        assert_eq!(a.log_path, "/var/log/kiln/audit.log");
        assert_eq!((a.max_age, a.max_backup, a.max_size), (30, 10, 100));
        assert!(c.spec.api_server.encryption_enabled());
        assert_eq!(
            c.spec.api_server.encryption.as_ref().unwrap().provider,
            EncryptionProvider::Aesgcm
        );
        let c = parse(
            &cluster("    audit:\n      policy:\n        apiVersion: audit.k8s.io/v1\n        kind: Policy\n        rules: [{level: Metadata}]\n"),
            "c.yaml",
        )
        .unwrap();
        assert!(matches!(
            c.spec.api_server.audit.unwrap().policy,
            AuditPolicy::Inline(_)
        ));
        // Unset: nothing changes (no section written back either).
        let plain = parse(&cluster("    {}\n"), "c.yaml").unwrap();
        assert!(plain.spec.api_server.is_unset() && !plain.spec.api_server.encryption_enabled());
    }

    #[test]
    fn mistakes_name_the_line_and_field() {
        let err = parse(
            &cluster("    encryption: {enabled: true, provider: kms}\n"),
            "c.yaml",
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("c.yaml:8: apiServer.encryption.provider: unknown variant `kms`"),
            "{err}"
        );
        let err = parse(
            &cluster(
                "    audit:\n      policy: {kind: Policy, rules: []}\n      logPath: audit.log\n",
            ),
            "c.yaml",
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("apiServer.audit.policy: an inline policy needs"),
            "{err}"
        );
        assert!(
            err.contains("apiServer.audit.policy.rules: a policy needs at least one rule"),
            "{err}"
        );
        assert!(
            err.contains("apiServer.audit.logPath: 'audit.log': expected an absolute path"),
            "{err}"
        );
    }
}
