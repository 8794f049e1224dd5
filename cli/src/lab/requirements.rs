//! What the machine needs before a lab can be made, with the Debian packages that provide it.

use super::LabError;

/// (program, Debian package) pairs, in the order an operator would install them.
const BASE: &[(&str, &str)] = &[
    ("ip", "iproute2"),
    ("unshare", "util-linux"),
    ("nsenter", "util-linux"),
    ("ssh-keygen", "openssh-client"),
    ("ssh", "openssh-client"),
    ("/usr/sbin/sshd", "openssh-server"),
    ("containerd", "containerd"),
    ("runc", "runc"),
    ("nft", "nftables"),
    ("busybox", "busybox-static"),
    ("/usr/lib/cni/bridge", "containernetworking-plugins"),
];
const REGISTRY: &[(&str, &str)] = &[
    ("docker-registry", "docker-registry"),
    ("skopeo", "skopeo"),
    ("gcc", "gcc"),
];

pub fn check_root() -> Result<(), LabError> {
    if nix::unistd::geteuid().is_root() {
        Ok(())
    } else {
        Err(LabError::NotRoot)
    }
}

pub fn check(registry: bool) -> Result<(), LabError> {
    check_root()?;
    let mut wanted: Vec<(&str, &str)> = BASE.to_vec();
    if registry {
        wanted.extend_from_slice(REGISTRY);
    }
    let missing: Vec<(&str, &str)> = wanted.into_iter().filter(|(p, _)| !found(p)).collect();
    if missing.is_empty() {
        return Ok(());
    }
    let programs: Vec<&str> = missing.iter().map(|(p, _)| *p).collect();
    let mut packages: Vec<&str> = missing.iter().map(|(_, k)| *k).collect();
    packages.dedup();
    Err(LabError::MissingPrograms {
        programs: programs.join(", "),
        packages: packages.join(" "),
    })
}

fn found(program: &str) -> bool {
    if program.starts_with('/') {
        return std::path::Path::new(program).exists();
    }
    let path = std::env::var("PATH").unwrap_or_default();
    let found = path
        .split(':')
        .chain(["/usr/sbin", "/sbin"])
        .any(|d| std::path::Path::new(d).join(program).is_file());
    found
}
