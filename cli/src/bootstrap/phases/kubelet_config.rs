//! kiln-kubelet's KubeletConfiguration, `/etc/kiln/kubelet-config.yaml` (read with `--config`), as
//! kubeadm writes `/var/lib/kubelet/config.yaml`: what every node shares — the static pod directory,
//! cluster DNS, and cluster.yaml's `spec.kubelet` (reservations, the pod PID limit, hard eviction
//! thresholds, allowed unsafe sysctls) — lives in the file; what differs per node (name, address,
//! pod CIDR, credentials, the API load balancer, systemd-resolved's resolv.conf) stays on the command
//! line, as kubeadm's kubeadm-flags.env. The file's sha256 is a comment in the kubelet's unit or
//! supervisor script, so a changed file restarts the kubelet like a changed command does.

use sha2::{Digest, Sha256};

use super::pki::pki_err;
use super::MANIFESTS;
use crate::bootstrap::host_files::Install;
use crate::bootstrap::{BootstrapError, Context};

pub const KUBELET_CONFIG: &str = "/etc/kiln/kubelet-config.yaml";
const STAGED_NAME: &str = "kubelet-config.yaml";

/// A scalar as YAML: JSON's quoting is YAML's, so `*`, `%` or `:` in a value stay text.
fn quoted(s: &str) -> String {
    serde_json::Value::from(s).to_string()
}

/// The file's text for the cluster (the same on every node).
pub fn config_text(ctx: &Context) -> String {
    let spec = &ctx.cluster.config.spec;
    let net = &spec.networking;
    let k = &spec.kubelet;
    let mut out = format!(
        "# managed by kiln: kiln-kubelet's KubeletConfiguration (--config); `kiln init` and `kiln join`\n\
         # write it from cluster.yaml, flags on the kubelet's command line win over it.\n\
         apiVersion: kubelet.config.k8s.io/v1beta1\n\
         kind: KubeletConfiguration\n\
         staticPodPath: {MANIFESTS}\n\
         clusterDNS:\n- {}\n\
         clusterDomain: {}\n",
        quoted(&net.cluster_dns_ip().to_string()),
        quoted(&net.cluster_domain),
    );
    for (field, map) in [
        ("evictionHard", &k.eviction_hard),
        ("systemReserved", &k.system_reserved),
        ("kubeReserved", &k.kube_reserved),
    ] {
        if map.is_empty() {
            continue;
        }
        out.push_str(&format!("{field}:\n"));
        for (key, value) in map {
            out.push_str(&format!("  {}: {}\n", quoted(key), quoted(value)));
        }
    }
    if let Some(n) = k.pod_pids_limit {
        out.push_str(&format!("podPidsLimit: {n}\n"));
    }
    if !k.allowed_unsafe_sysctls.is_empty() {
        out.push_str("allowedUnsafeSysctls:\n");
        for s in &k.allowed_unsafe_sysctls {
            out.push_str(&format!("- {}\n", quoted(s)));
        }
    }
    out
}

/// sha256 of the file, for the comment that restarts the kubelet when it changes.
pub fn config_sha256(ctx: &Context) -> String {
    hex::encode(Sha256::digest(config_text(ctx).as_bytes()))
}

/// The file staged for `host`, to install at [`KUBELET_CONFIG`].
pub fn stage(ctx: &Context, host: &str) -> Result<Install, BootstrapError> {
    let dir = ctx.staging_dir(host);
    std::fs::create_dir_all(&dir).map_err(|source| BootstrapError::Io {
        what: "creating",
        path: dir.clone(),
        source,
    })?;
    let local = dir.join(STAGED_NAME);
    kiln_pki::files::write_atomic(&local, config_text(ctx).as_bytes(), 0o644).map_err(pki_err)?;
    Ok(Install {
        local,
        remote: KUBELET_CONFIG.into(),
        mode: 0o644,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_holds_the_shared_settings_and_reads_as_a_kubelet_configuration() {
        let (_dir, mut ctx) = crate::bootstrap::golden_tests::golden_context();
        let plain = config_text(&ctx);
        assert_eq!(
            plain,
            "# managed by kiln: kiln-kubelet's KubeletConfiguration (--config); `kiln init` and `kiln join`\n\
             # write it from cluster.yaml, flags on the kubelet's command line win over it.\n\
             apiVersion: kubelet.config.k8s.io/v1beta1\n\
             kind: KubeletConfiguration\n\
             staticPodPath: /etc/kiln/manifests\n\
             clusterDNS:\n- \"10.96.0.10\"\n\
             clusterDomain: \"cluster.local\"\n"
        );
        let k = &mut ctx.cluster.config.spec.kubelet;
        k.system_reserved = [("cpu", "100m"), ("memory", "256Mi")]
            .into_iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
        k.eviction_hard = [("nodefs.available".to_string(), "10%".to_string())].into();
        k.pod_pids_limit = Some(4096);
        k.allowed_unsafe_sysctls = vec!["kernel.msg*".into(), "net.core.somaxconn".into()];
        let text = config_text(&ctx);
        let doc: serde_json::Value = serde_norway::from_str(&text).unwrap();
        assert_eq!(
            doc,
            serde_json::json!({
                "apiVersion": "kubelet.config.k8s.io/v1beta1",
                "kind": "KubeletConfiguration",
                "staticPodPath": "/etc/kiln/manifests",
                "clusterDNS": ["10.96.0.10"],
                "clusterDomain": "cluster.local",
                "evictionHard": {"nodefs.available": "10%"},
                "systemReserved": {"cpu": "100m", "memory": "256Mi"},
                "podPidsLimit": 4096,
                "allowedUnsafeSysctls": ["kernel.msg*", "net.core.somaxconn"],
            })
        );
        assert_ne!(config_sha256(&ctx), hex::encode(Sha256::digest(plain)));
    }
}
