//! Where a volumeMount's `subPath` or `subPathExpr` points on the node, as upstream's kubelet decides it
//! in `makeMounts`: a `subPathExpr` is expanded with the container's env (`$(VAR)`, `$$`, the same rules
//! as command and args, except that a variable without a value is an error), the result must be a
//! relative path without `..`, and a missing directory is created inside the volume without ever following
//! a symlink out of it. The API server only checks the expression as written, so `$(VAR)` holding `..`
//! or `/tmp` is caught here, when the container is created: its waiting reason is then
//! CreateContainerConfigError with the messages below, and the kubelet retries every sync (a fieldRef to
//! an annotation added later lets the container start).

use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

/// Why a subPath cannot be used. The first three are the texts upstream's kubelet shows in the
/// container's waiting message; the others are logged, and shown as [`SubPathError::user_facing`].
#[derive(Debug, thiserror::Error)]
pub enum SubPathError {
    #[error("missing value for {}", .0.join(", "))]
    MissingValue(Vec<String>),
    #[error("error SubPath `{0}` must not be an absolute path")]
    Absolute(String),
    #[error("unable to provision SubPath `{0}`: must not contain '..'")]
    Backsteps(String),
    #[error("subPath {sub_path:?} resolves outside the volume")]
    Outside { sub_path: String },
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "failed to create subPath directory for volumeMount {mount:?} of container {container:?}"
    )]
    CreateFailed { mount: String, container: String },
    #[error("failed to prepare subPath for volumeMount {mount:?} of container {container:?}")]
    PrepareFailed { mount: String, container: String },
}

impl SubPathError {
    fn io(what: &'static str, path: &Path, source: std::io::Error) -> Self {
        SubPathError::Io {
            what,
            path: path.to_path_buf(),
            source,
        }
    }

    /// What the pod is shown of a failure to create or resolve the directory: upstream does not pass
    /// the details back, since they tell about the node's filesystem (they are logged instead).
    pub fn user_facing(self, mount: &str, container: &str) -> Self {
        let (mount, container) = (mount.to_string(), container.to_string());
        match self {
            SubPathError::Io {
                what: "creating", ..
            } => SubPathError::CreateFailed { mount, container },
            SubPathError::Io { .. } | SubPathError::Outside { .. } => {
                SubPathError::PrepareFailed { mount, container }
            }
            e => e,
        }
    }
}

/// `subPathExpr` with the container's variables substituted (`env` in CRI order: a later name wins).
/// A reference to a variable that is not defined, or defined empty, fails with every such name
/// (sorted), as upstream's `ExpandContainerVolumeMounts`.
pub fn expand(expr: &str, env: &[(String, String)]) -> Result<String, SubPathError> {
    let missing = std::cell::RefCell::new(BTreeSet::new());
    let lookup = |name: &str| -> Option<&str> {
        let value = env
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
            .filter(|v| !v.is_empty());
        if value.is_none() {
            missing.borrow_mut().insert(name.to_string());
        }
        Some(value.unwrap_or_default())
    };
    let out = crate::env::expand_with(expr, &lookup);
    let missing = missing.into_inner();
    if missing.is_empty() {
        Ok(out)
    } else {
        Err(SubPathError::MissingValue(missing.into_iter().collect()))
    }
}

/// Upstream's checks of a subPath (given or expanded): not absolute, no `..` element.
pub fn check(sub: &str) -> Result<(), SubPathError> {
    if sub.starts_with('/') {
        return Err(SubPathError::Absolute(sub.into()));
    }
    if sub.split('/').any(|part| part == "..") {
        return Err(SubPathError::Backsteps(sub.into()));
    }
    Ok(())
}

/// The real path of `base/sub`, which must stay inside `base` (a symlink may point elsewhere in the
/// volume, not out of it). `create`: make the missing directories first (emptyDir, hostPath, claims),
/// one element at a time, each with the volume's permission bits — never through a symlink that
/// leaves the volume.
pub fn resolve(base: &Path, sub: &str, create: bool) -> Result<PathBuf, SubPathError> {
    check(sub)?;
    let real_base = base
        .canonicalize()
        .map_err(|e| SubPathError::io("resolving", base, e))?;
    if create {
        make_dirs(&real_base, sub)?;
    }
    let path = real_base.join(sub);
    let real = path
        .canonicalize()
        .map_err(|e| SubPathError::io("resolving", &path, e))?;
    if !real.starts_with(&real_base) {
        return Err(SubPathError::Outside {
            sub_path: sub.into(),
        });
    }
    Ok(real)
}

/// Walks `sub` under `real_base` (already canonical) with lstat: an existing symlink is followed only
/// if it resolves inside the volume, a missing element is made with mkdir (which never follows a
/// symlink made meanwhile: it fails on any existing name) and chmod to the volume's mode, as upstream's
/// SafeMakeDir does (mkdir alone would be narrowed by the umask).
fn make_dirs(real_base: &Path, sub: &str) -> Result<(), SubPathError> {
    let outside = || SubPathError::Outside {
        sub_path: sub.into(),
    };
    let mode = std::fs::metadata(real_base)
        .map_err(|e| SubPathError::io("reading", real_base, e))?
        .permissions()
        .mode()
        & 0o777;
    let mut current = real_base.to_path_buf();
    for c in Path::new(sub).components() {
        let Component::Normal(name) = c else {
            continue;
        };
        let next = current.join(name);
        match std::fs::symlink_metadata(&next) {
            Ok(m) if m.file_type().is_symlink() => {
                let real = next
                    .canonicalize()
                    .map_err(|e| SubPathError::io("resolving", &next, e))?;
                if !real.starts_with(real_base) {
                    return Err(outside());
                }
                current = real;
            }
            Ok(_) => current = next,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                std::fs::create_dir(&next).map_err(|e| SubPathError::io("creating", &next, e))?;
                std::fs::set_permissions(&next, std::fs::Permissions::from_mode(mode))
                    .map_err(|e| SubPathError::io("creating", &next, e))?;
                current = next;
            }
            Err(e) => return Err(SubPathError::io("reading", &next, e)),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn expands_variables_as_command_and_args_do() {
        let e = env(&[("POD_NAME", "web-0"), ("NS", "apps"), ("POD_NAME", "web-1")]);
        assert_eq!(
            expand("$(POD_NAME)", &e).unwrap(),
            "web-1",
            "a later name wins"
        );
        assert_eq!(
            expand("logs/$(NS)/$(POD_NAME)", &e).unwrap(),
            "logs/apps/web-1"
        );
        assert_eq!(expand("$$(NS)", &e).unwrap(), "$(NS)", "$$ escapes");
        assert_eq!(expand("a$b$(", &e).unwrap(), "a$b$(", "not references");
        assert_eq!(expand("plain", &[]).unwrap(), "plain");
    }

    #[test]
    fn a_variable_without_a_value_is_an_error_naming_every_one() {
        let e = env(&[("EMPTY", ""), ("SET", "x")]);
        let err = expand("$(ZED)/$(SET)/$(EMPTY)/$(ZED)", &e).unwrap_err();
        assert_eq!(err.to_string(), "missing value for EMPTY, ZED");
    }

    #[test]
    fn absolute_and_backstepping_results_fail_with_upstreams_messages() {
        let e = env(&[("P", "/tmp"), ("Q", ".."), ("R", "a/../b")]);
        let err = check(&expand("$(P)", &e).unwrap()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "error SubPath `/tmp` must not be an absolute path"
        );
        let err = check(&expand("$(Q)", &e).unwrap()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "unable to provision SubPath `..`: must not contain '..'"
        );
        assert!(matches!(
            check(&expand("$(R)", &e).unwrap()),
            Err(SubPathError::Backsteps(_))
        ));
        assert!(
            check("a..b/c.").is_ok(),
            "only a whole `..` element steps back"
        );
    }

    #[test]
    fn sub_paths_cannot_leave_the_volume() {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().join("vol");
        std::fs::create_dir_all(&base).unwrap();
        std::os::unix::fs::symlink("/etc", base.join("out")).unwrap();
        assert!(resolve(&base, "../x", true).is_err());
        assert!(resolve(&base, "/etc", true).is_err());
        let err = resolve(&base, "out", false).unwrap_err();
        assert!(err.to_string().contains("outside the volume"), "{err}");
        assert_eq!(
            resolve(&base, "a/b", true).unwrap(),
            base.canonicalize().unwrap().join("a/b")
        );
    }

    #[test]
    fn nothing_is_created_through_a_symlink_that_leaves_the_volume() {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().join("vol");
        let elsewhere = tmp.path().join("elsewhere");
        std::fs::create_dir_all(&base).unwrap();
        std::fs::create_dir_all(&elsewhere).unwrap();
        std::os::unix::fs::symlink(&elsewhere, base.join("out")).unwrap();
        let err = resolve(&base, "out/new", true).unwrap_err();
        assert!(matches!(err, SubPathError::Outside { .. }), "{err}");
        assert!(!elsewhere.join("new").exists(), "made a directory outside");
    }

    #[test]
    fn symlinks_inside_the_volume_are_followed_and_new_dirs_get_the_volumes_mode() {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().join("vol");
        std::fs::create_dir_all(base.join("real")).unwrap();
        std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o777)).unwrap();
        std::os::unix::fs::symlink("real", base.join("link")).unwrap();
        let got = resolve(&base, "link/x/y", true).unwrap();
        assert_eq!(got, base.canonicalize().unwrap().join("real/x/y"));
        let mode = std::fs::metadata(&got).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o777, "umask must not narrow it");
    }

    #[test]
    fn resolution_failures_reach_the_pod_without_node_details() {
        let io = SubPathError::io(
            "creating",
            Path::new("/x"),
            std::io::ErrorKind::Other.into(),
        );
        assert_eq!(
            io.user_facing("workdir1", "dapi-container").to_string(),
            "failed to create subPath directory for volumeMount \"workdir1\" of container \"dapi-container\""
        );
        let out = SubPathError::Outside {
            sub_path: "out".into(),
        };
        assert_eq!(
            out.user_facing("workdir1", "c").to_string(),
            "failed to prepare subPath for volumeMount \"workdir1\" of container \"c\""
        );
        let abs = SubPathError::Absolute("/tmp".into());
        assert!(abs.user_facing("m", "c").to_string().contains("absolute"));
    }
}
