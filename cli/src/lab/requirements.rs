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

/// A VM lab needs qemu and the tools that build its image, not the machine's containerd or sshd.
const VM: &[(&str, &str)] = &[
    ("ip", "iproute2"),
    ("ssh-keygen", "openssh-client"),
    ("ssh", "openssh-client"),
    ("qemu-system-x86_64", "qemu-system-x86"),
    ("qemu-img", "qemu-utils"),
    ("debootstrap", "debootstrap"),
    ("mkfs.ext4", "e2fsprogs"),
    ("mkswap", "util-linux"),
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
    let path = std::env::var("PATH").unwrap_or_default();
    match missing_error(&wanted, &path) {
        None => Ok(()),
        Some(e) => Err(e),
    }
}

pub fn check_vm(registry: bool) -> Result<(), LabError> {
    check_root()?;
    let mut wanted: Vec<(&str, &str)> = VM.to_vec();
    if registry {
        wanted.extend_from_slice(REGISTRY);
    }
    match missing_error(&wanted, &std::env::var("PATH").unwrap_or_default()) {
        None => Ok(()),
        Some(e) => Err(e),
    }
}

/// The error naming every missing program and the packages to install, or None when all are there.
fn missing_error(wanted: &[(&str, &str)], path: &str) -> Option<LabError> {
    let missing: Vec<(&str, &str)> = wanted
        .iter()
        .copied()
        .filter(|(p, _)| !found(p, path))
        .collect();
    if missing.is_empty() {
        return None;
    }
    let programs: Vec<&str> = missing.iter().map(|(p, _)| *p).collect();
    let mut packages: Vec<&str> = missing.iter().map(|(_, k)| *k).collect();
    packages.dedup();
    Some(LabError::MissingPrograms {
        programs: programs.join(", "),
        packages: packages.join(" "),
    })
}

fn found(program: &str, path: &str) -> bool {
    if program.starts_with('/') {
        return std::path::Path::new(program).exists();
    }
    // sbin is where root's tools live even when the caller's PATH lacks it.
    path.split(':')
        .chain(["/usr/sbin", "/sbin"])
        .any(|d| std::path::Path::new(d).join(program).is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_programs_name_their_packages_once() {
        let wanted = [
            ("no-such-prog-a", "pkg-x"),
            ("no-such-prog-b", "pkg-x"),
            ("sh", "dash"),
        ];
        let e = missing_error(&wanted, "/bin:/usr/bin").unwrap().to_string();
        assert!(e.contains("no-such-prog-a, no-such-prog-b"), "{e}");
        assert!(e.ends_with("apt-get install -y pkg-x"), "{e}");
        assert!(missing_error(&[("sh", "dash")], "/bin:/usr/bin").is_none());
    }

    #[test]
    fn a_vm_lab_without_qemu_names_the_debian_package() {
        let e = missing_error(VM, "/nonexistent").unwrap().to_string();
        assert!(e.contains("qemu-system-x86_64"), "{e}");
        assert!(
            e.contains("apt-get install -y") && e.contains("qemu-system-x86"),
            "{e}"
        );
    }
}
