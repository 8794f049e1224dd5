//! Which state-directory files each kiln static pod reads, so its manifest carries a hash of them
//! (`kiln.dev/pki-hash`) and changes when they do — the kubelet restarts a static pod when its manifest
//! changes, which is how renewed certificates get loaded. Bootstrap renders the hashes into the
//! manifests; `kiln certs renew` compares them after a renewal.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// The annotation a static pod's manifest carries: a hash of the certificates and kubeconfigs it reads.
pub const PKI_HASH_ANNOTATION: &str = "kiln.dev/pki-hash";

/// The state-directory files (relative to it; `{host}` is the node) each kiln static pod reads.
/// Certificates and kubeconfigs only: a renewal always changes the certificate along with its key.
pub const POD_INPUTS: &[(&str, &[&str])] = &[
    (
        "kiln-store.yaml",
        &[
            "pki/{host}/store/ca.crt",
            "pki/{host}/store/server.crt",
            "pki/{host}/store/peer.crt",
        ],
    ),
    (
        "kiln-apiserver.yaml",
        &[
            "pki/{host}/ca.crt",
            "pki/{host}/apiserver.crt",
            "pki/{host}/apiserver-kubelet-client.crt",
            "pki/{host}/apiserver-store-client.crt",
            "pki/{host}/store/ca.crt",
            "pki/{host}/front-proxy-ca.crt",
            "pki/{host}/front-proxy-client.crt",
            "pki/{host}/sa.pub",
        ],
    ),
    (
        "kiln-scheduler.yaml",
        &["kubeconfigs/{host}/scheduler.conf"],
    ),
    (
        "kiln-controller-manager.yaml",
        &[
            "kubeconfigs/{host}/controller-manager.conf",
            "pki/{host}/ca.crt",
        ],
    ),
    ("kiln-proxy.yaml", &["proxy.conf"]),
    ("kiln-dns.yaml", &["dns.conf"]),
];

/// The template variable holding a manifest's hash: `pki_hash_store` for kiln-store.yaml, ….
pub fn hash_variable(manifest: &str) -> String {
    let stem = manifest
        .trim_end_matches(".yaml")
        .trim_start_matches("kiln-")
        .replace('-', "_");
    format!("pki_hash_{stem}")
}

/// sha256 (first 16 hex digits) over the names and contents of `files` under `state_dir`; "" when none
/// exists yet (then the manifest carries no annotation at all).
pub fn files_hash(state_dir: &Path, files: &[PathBuf]) -> String {
    let mut h = Sha256::new();
    let mut any = false;
    for f in files {
        if let Ok(bytes) = std::fs::read(state_dir.join(f)) {
            any = true;
            h.update(f.to_string_lossy().as_bytes());
            h.update([0]);
            h.update((bytes.len() as u64).to_be_bytes());
            h.update(&bytes);
        }
    }
    if !any {
        return String::new();
    }
    hex::encode(h.finalize())[..16].to_string()
}

/// The hash of one manifest's inputs on `host`.
pub fn pod_hash(state_dir: &Path, host: &str, manifest: &str) -> String {
    let files: Vec<PathBuf> = POD_INPUTS
        .iter()
        .find(|(m, _)| *m == manifest)
        .map(|(_, fs)| {
            fs.iter()
                .map(|f| PathBuf::from(f.replace("{host}", host)))
                .collect()
        })
        .unwrap_or_default();
    files_hash(state_dir, &files)
}

/// Put every manifest's hash into a template context (`pki_hash_store`, `pki_hash_apiserver`, …).
pub fn insert_pod_hashes(c: &mut tera::Context, state_dir: &Path, host: &str) {
    for (manifest, _) in POD_INPUTS {
        c.insert(
            hash_variable(manifest),
            &pod_hash(state_dir, host, manifest),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_hash_follows_its_inputs_only() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        assert_eq!(pod_hash(d, "h1", "kiln-apiserver.yaml"), "");
        std::fs::create_dir_all(d.join("pki/h1")).unwrap();
        std::fs::write(d.join("pki/h1/apiserver.crt"), "one").unwrap();
        std::fs::create_dir_all(d.join("kubeconfigs/h1")).unwrap();
        std::fs::write(d.join("kubeconfigs/h1/scheduler.conf"), "s").unwrap();
        let api = pod_hash(d, "h1", "kiln-apiserver.yaml");
        let sched = pod_hash(d, "h1", "kiln-scheduler.yaml");
        assert_eq!(api.len(), 16);
        std::fs::write(d.join("pki/h1/apiserver.crt"), "two").unwrap();
        assert_ne!(pod_hash(d, "h1", "kiln-apiserver.yaml"), api);
        assert_eq!(pod_hash(d, "h1", "kiln-scheduler.yaml"), sched);
        // Another host's files are not this host's inputs.
        assert_eq!(pod_hash(d, "h2", "kiln-apiserver.yaml"), "");
        assert_eq!(
            hash_variable("kiln-controller-manager.yaml"),
            "pki_hash_controller_manager"
        );
    }
}
