//! kiln-apiserver's audit policy and encryption configuration on the controllers (cluster.yaml's
//! `spec.apiServer`).
//!
//! Encryption at rest: the certs phase makes the cluster's EncryptionConfiguration once — a random
//! 32-byte key named `key1` for the chosen provider, then `identity` so Secrets written before
//! encryption was turned on still read — and keeps it with the PKI in the state directory
//! (`pki/encryption-config.yaml`, 0600). It is never made again (the key decrypts what is stored;
//! `kiln encryption rotate` replaces the key step by step), travels in snapshot bundles with the
//! rest of the state, and push installs it on every controller as
//! `/etc/kiln/pki/encryption-config.yaml` (0600), where a controller's scheduled snapshot bundles
//! pick it up too. Audit: the policy (a file next to cluster.yaml or inline) is
//! installed as `/etc/kiln/audit-policy.yaml` (0600). Both reach the manifest as flags, and a
//! hash of both as an annotation, so a changed file restarts the API server.

use std::path::PathBuf;

use base64::Engine;
use rand::RngCore;

use super::pki::pki_err;
use super::KILN_ETC;
use crate::bootstrap::host_files::Install;
use crate::bootstrap::{BootstrapError, Context};
use crate::config::{AuditPolicy, EncryptionProvider};

/// The file's name, in the state directory's `pki/` and in a controller's `/etc/kiln/pki/`.
pub const ENCRYPTION_CONFIG: &str = "encryption-config.yaml";
pub const REMOTE_AUDIT_POLICY: &str = "/etc/kiln/audit-policy.yaml";

pub fn remote_encryption_config() -> String {
    format!("{KILN_ETC}/pki/{ENCRYPTION_CONFIG}")
}

/// `<stateDir>/pki/encryption-config.yaml`.
pub fn encryption_config_path(ctx: &Context) -> PathBuf {
    ctx.state_dir.join("pki").join(ENCRYPTION_CONFIG)
}

/// An EncryptionConfiguration for Secrets: `keys` (name, base64 secret) of `provider`, newest
/// first (it writes), then identity.
pub fn encryption_config_text(provider: EncryptionProvider, keys: &[(String, String)]) -> String {
    let keys: String = keys
        .iter()
        .map(|(name, secret)| {
            format!("            - name: {name}\n              secret: {secret}\n")
        })
        .collect();
    format!(
        "# managed by kiln: the key that encrypts this cluster's Secrets in the store. Keep it\n\
         # with the cluster's PKI; without it the Secrets of a restored snapshot cannot be read.\n\
         apiVersion: apiserver.config.k8s.io/v1\n\
         kind: EncryptionConfiguration\n\
         resources:\n  - resources:\n      - secrets\n    providers:\n      - {}:\n          keys:\n{keys}      - identity: {{}}\n",
        provider.name()
    )
}

/// A new random 32-byte key, base64 (every provider takes 32 bytes).
pub fn new_key() -> String {
    let mut key = [0u8; 32];
    rand::rng().fill_bytes(&mut key);
    base64::engine::general_purpose::STANDARD.encode(key)
}

/// Makes the encryption configuration when encryption is on and the state has none. A copy that a
/// restore from a controller's own bundle left under `pki/<host>/` is adopted rather than replaced.
pub fn ensure_encryption(ctx: &Context) -> Result<Option<String>, BootstrapError> {
    let spec = &ctx.cluster.config.spec.api_server;
    let Some(enc) = spec.encryption.as_ref().filter(|e| e.enabled) else {
        return Ok(None);
    };
    let path = encryption_config_path(ctx);
    if path.exists() {
        return Ok(None);
    }
    let adopted = ctx
        .cluster
        .config
        .controllers()
        .map(|h| ctx.pki_dir(&h.name).join(ENCRYPTION_CONFIG))
        .find(|p| p.exists());
    let (text, what) = match adopted {
        Some(from) => (
            std::fs::read(&from).map_err(|source| BootstrapError::Io {
                what: "reading",
                path: from.clone(),
                source,
            })?,
            format!("adopted {}", from.display()),
        ),
        None => (
            encryption_config_text(enc.provider, &[("key1".into(), new_key())]).into_bytes(),
            format!("created {} ({} key1)", path.display(), enc.provider.name()),
        ),
    };
    kiln_pki::files::write_atomic(&path, &text, 0o600).map_err(pki_err)?;
    Ok(Some(what))
}

/// Stages the audit policy for `host` (`<stateDir>/rendered/<host>/audit-policy.yaml`).
fn stage_audit_policy(ctx: &Context, host: &str) -> Result<Option<PathBuf>, BootstrapError> {
    let Some(audit) = &ctx.cluster.config.spec.api_server.audit else {
        return Ok(None);
    };
    let text = match &audit.policy {
        AuditPolicy::File(file) => {
            let base = ctx
                .cluster
                .path
                .parent()
                .map(PathBuf::from)
                .unwrap_or_default();
            let path = base.join(file);
            std::fs::read(&path).map_err(|source| BootstrapError::Io {
                what: "reading the audit policy (spec.apiServer.audit.policy)",
                path,
                source,
            })?
        }
        AuditPolicy::Inline(policy) => serde_norway::to_string(policy)
            .map_err(|e| BootstrapError::Pki(format!("spec.apiServer.audit.policy: {e}")))?
            .into_bytes(),
    };
    let dir = ctx.staging_dir(host);
    std::fs::create_dir_all(&dir).map_err(|source| BootstrapError::Io {
        what: "creating",
        path: dir.clone(),
        source,
    })?;
    let local = dir.join("audit-policy.yaml");
    kiln_pki::files::write_atomic(&local, &text, 0o600).map_err(pki_err)?;
    Ok(Some(local))
}

/// The files a controller's API server reads besides its PKI.
pub fn installs(ctx: &Context, host: &str) -> Result<Vec<Install>, BootstrapError> {
    let mut out = Vec::new();
    if ctx.cluster.config.spec.api_server.encryption_enabled() {
        out.push(Install {
            local: encryption_config_path(ctx),
            remote: remote_encryption_config(),
            mode: 0o600,
        });
    }
    if let Some(local) = stage_audit_policy(ctx, host)? {
        out.push(Install {
            local,
            remote: REMOTE_AUDIT_POLICY.into(),
            mode: 0o600,
        });
    }
    Ok(out)
}

/// The manifest's flags and the hash of the files they name.
pub fn insert_context(ctx: &Context, host: &str, c: &mut tera::Context) {
    let spec = &ctx.cluster.config.spec.api_server;
    let mut hashed = String::new();
    if spec.encryption_enabled() {
        c.insert("encryption_provider_config", &remote_encryption_config());
        hashed.push_str(
            &ctx.sha256_file(&encryption_config_path(ctx))
                .unwrap_or_default(),
        );
    }
    if let Some(audit) = &spec.audit {
        c.insert("audit_policy_file", REMOTE_AUDIT_POLICY);
        c.insert("audit_log_path", &audit.log_path);
        c.insert("audit_log_maxage", &audit.max_age);
        c.insert("audit_log_maxbackup", &audit.max_backup);
        c.insert("audit_log_maxsize", &audit.max_size);
        let staged = ctx.staging_dir(host).join("audit-policy.yaml");
        hashed.push_str(&ctx.sha256_file(&staged).unwrap_or_default());
    }
    if !hashed.is_empty() {
        use sha2::{Digest, Sha256};
        let sum = hex::encode(Sha256::digest(hashed.as_bytes()));
        c.insert("apiserver_config_hash", &sum[..16]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_generated_configuration_is_upstreams_shape() {
        let key = new_key();
        assert_eq!(
            base64::engine::general_purpose::STANDARD
                .decode(&key)
                .unwrap()
                .len(),
            32
        );
        let text = encryption_config_text(
            EncryptionProvider::Secretbox,
            &[("key1".into(), key.clone())],
        );
        let v: serde_json::Value = serde_norway::from_str(&text).unwrap();
        assert_eq!(v["kind"], "EncryptionConfiguration");
        assert_eq!(v["apiVersion"], "apiserver.config.k8s.io/v1");
        assert_eq!(v["resources"][0]["resources"][0], "secrets");
        assert_eq!(
            v["resources"][0]["providers"][0]["secretbox"]["keys"][0]["name"],
            "key1"
        );
        assert_eq!(
            v["resources"][0]["providers"][0]["secretbox"]["keys"][0]["secret"],
            key.as_str()
        );
        assert!(v["resources"][0]["providers"][1]["identity"].is_object());
    }

    #[test]
    fn the_manifest_carries_the_flags_only_when_configured() {
        let mut c = tera::Context::new();
        for k in [
            "version",
            "node_ip",
            "service_cidr",
            "etcd_servers",
            "etcd_cafile",
            "etcd_certfile",
            "etcd_keyfile",
        ] {
            c.insert(k, "x");
        }
        let command = |c: &tera::Context| -> (Vec<String>, serde_json::Value) {
            let y = crate::bootstrap::render::render("kiln-apiserver.yaml", c).unwrap();
            let v: serde_json::Value = serde_norway::from_str(&y).unwrap();
            let cmd =
                serde_json::from_value(v["spec"]["containers"][0]["command"].clone()).unwrap();
            (cmd, v["metadata"]["annotations"].clone())
        };
        let (cmd, annotations) = command(&c);
        assert!(!cmd
            .iter()
            .any(|a| a.starts_with("--audit") || a.starts_with("--encryption")));
        assert!(annotations.is_null());
        c.insert("encryption_provider_config", &remote_encryption_config());
        c.insert("audit_policy_file", REMOTE_AUDIT_POLICY);
        c.insert("audit_log_path", "/var/log/kiln/audit.log");
        c.insert("audit_log_maxage", &30);
        c.insert("audit_log_maxbackup", &10);
        c.insert("audit_log_maxsize", &100);
        c.insert("apiserver_config_hash", "abc");
        let (cmd, annotations) = command(&c);
        for want in [
            "--encryption-provider-config=/etc/kiln/pki/encryption-config.yaml",
            "--audit-policy-file=/etc/kiln/audit-policy.yaml",
            "--audit-log-path=/var/log/kiln/audit.log",
            "--audit-log-maxage=30",
            "--audit-log-maxbackup=10",
            "--audit-log-maxsize=100",
        ] {
            assert!(
                cmd.contains(&want.to_string()),
                "{want} missing from {cmd:?}"
            );
        }
        assert_eq!(annotations["kiln.dev/config-hash"], "abc");
        c.insert("pki_hash_apiserver", "p");
        let (_, annotations) = command(&c);
        assert_eq!(annotations["kiln.dev/pki-hash"], "p");
        assert_eq!(annotations["kiln.dev/config-hash"], "abc");
    }
}
