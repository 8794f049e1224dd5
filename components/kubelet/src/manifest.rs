//! Static pod manifests: a file in --pod-manifest-path becomes a Pod the way the kubelet's file source does
//! it: name `<name>-<nodeName>`, namespace `kube-system` when empty, uid = config hash, `kubernetes.io/config.*`
//! annotations, bound to this node.

use std::collections::BTreeMap;
use std::path::Path;

use k8s_openapi::api::core::v1::Pod;
use sha2::{Digest, Sha256};

pub const CONFIG_SOURCE: &str = "kubernetes.io/config.source";
pub const CONFIG_HASH: &str = "kubernetes.io/config.hash";
pub const CONFIG_MIRROR: &str = "kubernetes.io/config.mirror";
pub const CONFIG_SEEN: &str = "kubernetes.io/config.seen";

#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error("reading {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: not a Pod manifest: {message}")]
    Parse { path: String, message: String },
    #[error("{path}: {message}")]
    Invalid { path: String, message: String },
}

/// The config hash of a manifest on a node (also the static pod's uid): a change to either is a new pod.
pub fn config_hash(bytes: &[u8], node_name: &str) -> String {
    let mut h = Sha256::new();
    h.update(node_name.as_bytes());
    h.update([0]);
    h.update(bytes);
    hex::encode(&h.finalize()[..16])
}

/// Parses a manifest's bytes into the static pod this node runs.
pub fn static_pod_from_bytes(
    bytes: &[u8],
    path: &Path,
    node_name: &str,
) -> Result<Pod, ManifestError> {
    let shown = path.display().to_string();
    let value: serde_json::Value =
        serde_norway::from_slice(bytes).map_err(|e| ManifestError::Parse {
            path: shown.clone(),
            message: e.to_string(),
        })?;
    let kind = value.get("kind").and_then(|k| k.as_str()).unwrap_or("");
    let api_version = value
        .get("apiVersion")
        .and_then(|k| k.as_str())
        .unwrap_or("");
    if kind != "Pod" || api_version != "v1" {
        return Err(ManifestError::Invalid {
            path: shown,
            message: format!("expected apiVersion v1, kind Pod; found {api_version:?} {kind:?}"),
        });
    }
    let mut pod: Pod = serde_json::from_value(value).map_err(|e| ManifestError::Parse {
        path: shown.clone(),
        message: e.to_string(),
    })?;
    let name = pod
        .metadata
        .name
        .clone()
        .filter(|n| !n.is_empty())
        .ok_or_else(|| ManifestError::Invalid {
            path: shown.clone(),
            message: "metadata.name is required".into(),
        })?;
    if pod.spec.as_ref().is_none_or(|s| s.containers.is_empty()) {
        return Err(ManifestError::Invalid {
            path: shown,
            message: "spec.containers is empty".into(),
        });
    }
    let hash = config_hash(bytes, node_name);
    let meta = &mut pod.metadata;
    meta.name = Some(format!("{name}-{node_name}"));
    if meta.namespace.as_deref().unwrap_or("").is_empty() {
        meta.namespace = Some("kube-system".into());
    }
    meta.uid = Some(hash.clone());
    let ann = meta.annotations.get_or_insert_with(BTreeMap::new);
    ann.insert(CONFIG_SOURCE.into(), "file".into());
    ann.insert(CONFIG_HASH.into(), hash);
    if let Some(spec) = pod.spec.as_mut() {
        spec.node_name = Some(node_name.to_string());
    }
    Ok(pod)
}

/// Reads and parses one manifest file, returning the pod and its hash.
pub fn read_static_pod(path: &Path, node_name: &str) -> Result<Pod, ManifestError> {
    let bytes = std::fs::read(path).map_err(|source| ManifestError::Read {
        path: path.display().to_string(),
        source,
    })?;
    static_pod_from_bytes(&bytes, path, node_name)
}

/// Files the kubelet reads from the manifest directory: not hidden, YAML or JSON.
pub fn is_manifest_file(path: &Path) -> bool {
    let hidden = path
        .file_name()
        .and_then(|n| n.to_str())
        .is_none_or(|n| n.starts_with('.'));
    let ext_ok = matches!(
        path.extension().and_then(|e| e.to_str()),
        Some("yaml") | Some("yml") | Some("json")
    );
    !hidden && ext_ok && path.is_file()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MANIFEST: &str = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: store\nspec:\n  hostNetwork: true\n  containers:\n  - name: store\n    image: kiln/store\n    command: [/usr/local/bin/kiln-store]\n";

    #[test]
    fn static_pod_is_named_annotated_and_bound() {
        let pod =
            static_pod_from_bytes(MANIFEST.as_bytes(), Path::new("store.yaml"), "cp1").unwrap();
        assert_eq!(pod.metadata.name.as_deref(), Some("store-cp1"));
        assert_eq!(pod.metadata.namespace.as_deref(), Some("kube-system"));
        let hash = config_hash(MANIFEST.as_bytes(), "cp1");
        assert_eq!(pod.metadata.uid.as_deref(), Some(hash.as_str()));
        let ann = pod.metadata.annotations.unwrap();
        assert_eq!(ann[CONFIG_SOURCE], "file");
        assert_eq!(ann[CONFIG_HASH], hash);
        assert_eq!(pod.spec.unwrap().node_name.as_deref(), Some("cp1"));
    }

    #[test]
    fn hash_changes_with_content_and_node() {
        let a = config_hash(b"x", "n1");
        assert_ne!(a, config_hash(b"y", "n1"));
        assert_ne!(a, config_hash(b"x", "n2"));
        assert_eq!(a, config_hash(b"x", "n1"));
    }

    #[test]
    fn rejects_non_pods() {
        let err =
            static_pod_from_bytes(b"apiVersion: v1\nkind: Service\n", Path::new("s.yaml"), "n")
                .unwrap_err();
        assert!(err.to_string().contains("kind Pod"), "{err}");
        assert!(static_pod_from_bytes(b": :", Path::new("b.yaml"), "n").is_err());
    }
}
