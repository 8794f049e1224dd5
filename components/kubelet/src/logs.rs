//! Where container logs go: `<root>/<namespace>_<name>_<uid>/<container>/<restart>.log`, the kubelet's layout,
//! so the log server (and `kubectl logs --previous`) finds every run.

use std::path::{Path, PathBuf};

pub fn pod_log_dir(root: &Path, namespace: &str, name: &str, uid: &str) -> PathBuf {
    root.join(format!("{namespace}_{name}_{uid}"))
}

/// The pod directories of `uid` under `root`, found by the `_<uid>` their names end with: a pod
/// deleted at once (a terminal one, grace 0) is gone from the API, name and all, before the kubelet
/// hears of it, so its directory cannot be named from the pod.
pub fn pod_log_dirs_of(root: &Path, uid: &str) -> Vec<PathBuf> {
    let suffix = format!("_{uid}");
    let Ok(entries) = std::fs::read_dir(root) else {
        return Vec::new();
    };
    entries
        .flatten()
        .map(|e| e.path())
        .filter(|dir| {
            dir.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.ends_with(&suffix))
        })
        .collect()
}

pub fn container_log_path(
    root: &Path,
    namespace: &str,
    name: &str,
    uid: &str,
    container: &str,
    restart: i32,
) -> PathBuf {
    pod_log_dir(root, namespace, name, uid)
        .join(container)
        .join(format!("{restart}.log"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_matches_the_kubelet() {
        assert_eq!(
            container_log_path(
                Path::new("/var/log/pods"),
                "kube-system",
                "store-cp1",
                "abc",
                "store",
                2
            ),
            PathBuf::from("/var/log/pods/kube-system_store-cp1_abc/store/2.log")
        );
    }
}
