//! Where container logs go: `<root>/<namespace>_<name>_<uid>/<container>/<restart>.log`, the kubelet's layout,
//! so the log server (and `kubectl logs --previous`) finds every run.

use std::path::{Path, PathBuf};

pub fn pod_log_dir(root: &Path, namespace: &str, name: &str, uid: &str) -> PathBuf {
    root.join(format!("{namespace}_{name}_{uid}"))
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
