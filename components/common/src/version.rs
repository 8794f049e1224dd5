//! What every kiln binary says it is: kiln's version and build (see `build.rs`), and the Kubernetes
//! version its API speaks. One place, so `--version`, the API server's `/version`, the Node's
//! `nodeInfo` and `kiln status` agree, and an upgrade can tell two builds apart.

/// The Kubernetes release whose API kiln serves (k8s-openapi's `v1_33` types).
pub const KUBE_MAJOR: &str = "1";
pub const KUBE_MINOR: &str = "33";

/// kiln's own version (the workspace's).
pub const KILN: &str = env!("CARGO_PKG_VERSION");
/// The build: `KILN_BUILD_VERSION` at build time, else `git describe --always --dirty`.
pub const BUILD: &str = env!("KILN_BUILD");
pub const GIT_COMMIT: &str = env!("KILN_GIT_COMMIT");
/// `clean` or `dirty` (empty outside a git checkout).
pub const GIT_TREE_STATE: &str = env!("KILN_GIT_TREE_STATE");
/// The commit's date, RFC 3339 UTC (empty outside a git checkout).
pub const BUILD_DATE: &str = env!("KILN_BUILD_DATE");

/// The Kubernetes-style version (`/version` gitVersion, a Node's kubeletVersion): semver, the
/// Kubernetes release first so clients' skew checks read it, kiln's version as pre-release and the
/// build as metadata — `v1.33.0-kiln.0.1.0+ba49d39-dirty`.
pub const GIT_VERSION: &str = concat!(
    "v1.33.0-kiln.",
    env!("CARGO_PKG_VERSION"),
    "+",
    env!("KILN_BUILD")
);

/// `--version` of every kiln binary: `0.1.0 (build ba49d39, Kubernetes v1.33.0)`.
pub const LONG: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (build ",
    env!("KILN_BUILD"),
    ", Kubernetes v1.33.0)"
);

/// The build part of a [`GIT_VERSION`]-style string (after `+`), if any.
pub fn build_of(git_version: &str) -> Option<&str> {
    git_version.split_once('+').map(|(_, b)| b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kubernetes_version_leads_and_the_build_follows() {
        assert!(GIT_VERSION.starts_with(&format!("v{KUBE_MAJOR}.{KUBE_MINOR}.0-kiln.{KILN}+")));
        assert_eq!(build_of(GIT_VERSION), Some(BUILD));
        assert!(!BUILD.is_empty());
        assert!(BUILD
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.'));
        assert!(LONG.contains(BUILD));
    }
}
