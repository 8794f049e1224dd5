//! Stamps kiln's build into `version.rs`: `KILN_BUILD_VERSION` when set (release and upgrade-test
//! builds name their build this way), else `git describe --always --dirty` of the checkout, else
//! `unknown` (a source tarball). Also the commit, its tree state and its date (the build date upstream
//! reports; a commit's date keeps builds reproducible).
//!
//! Re-run when `KILN_BUILD_VERSION` changes or HEAD moves to another branch — not on every commit, so
//! a developer's incremental builds do not rebuild every crate after each commit (their stamp may lag;
//! so may CI's, which builds in one fixed tree for the same reason, see `.ci/run`; releases build from
//! clean, and the upgrade test names its builds with `KILN_BUILD_VERSION`).

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
        .filter(|s| !s.is_empty())
}

/// Semver build metadata allows only `[0-9A-Za-z-.]`.
fn metadata(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '-'
            }
        })
        .collect()
}

fn main() {
    println!("cargo:rerun-if-env-changed=KILN_BUILD_VERSION");
    if let Some(dir) = git(&["rev-parse", "--absolute-git-dir"]) {
        println!("cargo:rerun-if-changed={dir}/HEAD");
    }
    let build = std::env::var("KILN_BUILD_VERSION")
        .ok()
        .filter(|v| !v.is_empty())
        .or_else(|| git(&["describe", "--tags", "--always", "--dirty"]))
        .unwrap_or_else(|| "unknown".into());
    let commit = git(&["rev-parse", "HEAD"]).unwrap_or_default();
    let state = match git(&["status", "--porcelain", "--untracked-files=no"]) {
        Some(_) => "dirty",
        None if commit.is_empty() => "",
        None => "clean",
    };
    let date = git(&[
        "log",
        "-1",
        "--format=%cd",
        "--date=format-local:%Y-%m-%dT%H:%M:%SZ",
    ])
    .unwrap_or_default();
    println!("cargo:rustc-env=KILN_BUILD={}", metadata(&build));
    println!("cargo:rustc-env=KILN_GIT_COMMIT={commit}");
    println!("cargo:rustc-env=KILN_GIT_TREE_STATE={state}");
    println!("cargo:rustc-env=KILN_BUILD_DATE={date}");
}
