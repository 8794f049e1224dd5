//! The VM lab's Debian 12 image, built by kiln from Debian's archive with debootstrap and cached: a
//! prepared host before kiln (systemd, sshd, containerd, runc, the CNI plugins, nftables) and nothing of
//! kiln. Every lab VM boots a copy-on-write overlay of it.
//!
//! Reproducible: the recipe below is all there is (suite, package list, files, cleanup), the same recipe
//! gives the same cache directory, and generated state that would differ between builds (machine-id, SSH
//! host keys, logs, apt lists, file system UUID and hash seed, timestamps) is removed or fixed. Packages come
//! from the suite as it is on the day of the build (pin `KILN_LAB_DEBIAN_MIRROR` to a snapshot.debian.org
//! URL for bit-for-bit rebuilds); `manifest.txt` beside the image lists every package version.

use std::path::{Path, PathBuf};
use std::time::Instant;

use sha2::{Digest, Sha256};

use super::VmError;
use crate::lab::exec::{cmd, run};
use crate::lab::layout::write_file;
use crate::lab::LabError;

/// Shared by every VM lab (next to the namespace lab's images).
pub const CACHE: &str = "/var/cache/kiln-lab/vm";
pub const SUITE: &str = "bookworm";
pub const DEFAULT_MIRROR: &str = "http://deb.debian.org/debian";
/// What a host has before kiln, as kiln's docs list the host prerequisites (kubeadm's list, with
/// containerd as the runtime), plus what a VM needs to boot and be reached.
pub const PACKAGES: &[&str] = &[
    "linux-image-amd64",
    "initramfs-tools",
    "systemd",
    "systemd-sysv",
    "udev",
    "dbus",
    "openssh-server",
    "containerd",
    "runc",
    "containernetworking-plugins",
    "nftables",
    "iproute2",
    "kmod",
    "procps",
    "util-linux",
    "mount",
    "e2fsprogs",
    "iputils-ping",
    "less",
];
/// The root file system's size (sparse: the qcow2 holds only what is written).
const ROOT_SIZE: &str = "8G";
/// Every timestamp in the image, and mke2fs's clock: 2026-01-01T00:00:00Z.
const EPOCH: u64 = 1_767_225_600;
/// Fixed so two builds give the same file system header.
const FS_UUID: &str = "6b696c6e-6c61-4276-9d00-000000000001";

/// Unpacks the VM's seed disk (see `seed.rs`) over / before the network, sshd and anything that reads the
/// hostname or host key starts. A plain tar on a block device, read by tar, which every Debian has.
const SEED_UNIT: &str = "[Unit]
Description=Apply this VM's lab seed (hostname, machine-id, SSH host key, address) from /dev/vdb
DefaultDependencies=no
ConditionPathExists=/dev/vdb
After=systemd-remount-fs.service
Before=sysinit.target systemd-networkd.service ssh.service systemd-hostnamed.service
Conflicts=shutdown.target

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/bin/tar -x -C / -f /dev/vdb

[Install]
WantedBy=sysinit.target
";

const SSHD_CONFIG: &str = "# Lab VMs: root logs in with the lab's key only.
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UseDNS no
HostKey /etc/ssh/ssh_host_ed25519_key
";

/// vdc is the VM's swap disk: a fresh host has swap on, as many cloud and Vagrant images do, so preflight
/// has something real to find and `--fix` something real to turn off.
const FSTAB: &str = "/dev/vda / ext4 rw,discard,errors=remount-ro 0 1\n/dev/vdc none swap sw 0 0\n";

/// Where a built image lives.
#[derive(Debug, Clone)]
pub struct Image {
    pub dir: PathBuf,
}

impl Image {
    pub fn base(&self) -> PathBuf {
        self.dir.join("base.qcow2")
    }
    pub fn kernel(&self) -> PathBuf {
        self.dir.join("vmlinuz")
    }
    pub fn initrd(&self) -> PathBuf {
        self.dir.join("initrd.img")
    }
    pub fn manifest(&self) -> PathBuf {
        self.dir.join("manifest.txt")
    }
    fn complete(&self) -> bool {
        [self.base(), self.kernel(), self.initrd(), self.manifest()]
            .iter()
            .all(|p| p.exists())
    }
}

pub fn mirror() -> String {
    std::env::var("KILN_LAB_DEBIAN_MIRROR").unwrap_or_else(|_| DEFAULT_MIRROR.to_string())
}

/// A digest of the whole recipe: change any part and the image is rebuilt into a new directory.
pub fn recipe_id(mirror: &str) -> String {
    let mut h = Sha256::new();
    for part in [
        SUITE,
        mirror,
        SEED_UNIT,
        SSHD_CONFIG,
        FSTAB,
        ROOT_SIZE,
        FS_UUID,
    ] {
        h.update(part.as_bytes());
        h.update([0]);
    }
    for p in PACKAGES {
        h.update(p.as_bytes());
        h.update([0]);
    }
    h.update(EPOCH.to_le_bytes());
    hex::encode(&h.finalize()[..6])
}

pub fn image_for(mirror: &str) -> Image {
    Image {
        dir: Path::new(CACHE).join(format!("debian12-{}", recipe_id(mirror))),
    }
}

/// The cached image, built first if missing (minutes: debootstrap downloads ~150 MB).
pub fn ensure() -> Result<Image, LabError> {
    let mirror = mirror();
    let img = image_for(&mirror);
    if img.complete() {
        return Ok(img);
    }
    let started = Instant::now();
    tracing::info!(image = %img.dir.display(), %mirror, "building the VM lab's Debian 12 image (debootstrap)");
    let work = img.dir.with_extension("building");
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).map_err(LabError::io("creating", &work))?;
    let rootfs = work.join("rootfs");
    let built = build(&work, &rootfs, &mirror);
    // The unpacked tree is only a step: the qcow2 holds it.
    let _ = std::fs::remove_dir_all(&rootfs);
    built?;
    let _ = std::fs::remove_dir_all(&img.dir);
    std::fs::rename(&work, &img.dir).map_err(LabError::io("renaming into place", &img.dir))?;
    tracing::info!(image = %img.dir.display(), seconds = started.elapsed().as_secs(), "VM image built");
    Ok(img)
}

fn step(
    what: &'static str,
    r: Result<std::process::Output, LabError>,
) -> Result<std::process::Output, LabError> {
    r.map_err(|e| {
        VmError::ImageBuild {
            step: what,
            reason: e.to_string(),
        }
        .into()
    })
}

fn build(work: &Path, rootfs: &Path, mirror: &str) -> Result<(), LabError> {
    let root = rootfs.display().to_string();
    let include = format!("--include={}", PACKAGES.join(","));
    let mut c = cmd(
        "debootstrap",
        &["--variant=minbase", &include, SUITE, &root, mirror],
    );
    c.env("SOURCE_DATE_EPOCH", EPOCH.to_string());
    step("debootstrap", run(&mut c))?;
    customize(rootfs)?;
    let manifest = step(
        "listing packages",
        run(&mut cmd(
            "chroot",
            &[&root, "dpkg-query", "-W", "-f", "${Package} ${Version}\\n"],
        )),
    )?;
    write_file(&work.join("manifest.txt"), &manifest.stdout, 0o644)?;
    copy_boot_files(rootfs, work)?;
    clean(rootfs)?;
    step(
        "fixing timestamps",
        run(&mut cmd(
            "find",
            &[
                &root,
                "-newermt",
                &format!("@{EPOCH}"),
                "-exec",
                "touch",
                "-h",
                "-d",
                &format!("@{EPOCH}"),
                "{}",
                "+",
            ],
        )),
    )?;
    let raw = work.join("root.raw");
    let raw_s = raw.display().to_string();
    let mut mkfs = cmd(
        "mkfs.ext4",
        &[
            "-q",
            "-F",
            "-L",
            "root",
            "-U",
            FS_UUID,
            "-E",
            &format!("hash_seed={FS_UUID}"),
            "-d",
            &root,
            &raw_s,
            ROOT_SIZE,
        ],
    );
    mkfs.env("E2FSPROGS_FAKE_TIME", EPOCH.to_string());
    step("making the root file system", run(&mut mkfs))?;
    let base = work.join("base.qcow2");
    step(
        "converting to qcow2",
        run(&mut cmd(
            "qemu-img",
            &[
                "convert",
                "-f",
                "raw",
                "-O",
                "qcow2",
                &raw_s,
                &base.display().to_string(),
            ],
        )),
    )?;
    let _ = std::fs::remove_file(&raw);
    Ok(())
}

/// The files that make the debootstrapped tree a bootable, reachable server.
fn customize(rootfs: &Path) -> Result<(), LabError> {
    let w = |rel: &str, data: &str, mode| write_file(&rootfs.join(rel), data.as_bytes(), mode);
    w("etc/fstab", FSTAB, 0o644)?;
    w("etc/systemd/system/lab-seed.service", SEED_UNIT, 0o644)?;
    w("etc/ssh/sshd_config.d/lab.conf", SSHD_CONFIG, 0o644)?;
    w("etc/hostname", "localhost\n", 0o644)?;
    let root = rootfs.display().to_string();
    step(
        "enabling units",
        run(&mut cmd(
            "systemctl",
            &[
                "--root",
                &root,
                "enable",
                "lab-seed.service",
                "systemd-networkd.service",
                "ssh.service",
                "containerd.service",
            ],
        )),
    )?;
    // A server: no graphical.target (debootstrap leaves it as the default).
    step(
        "setting the default target",
        run(&mut cmd(
            "systemctl",
            &["--root", &root, "set-default", "multi-user.target"],
        )),
    )?;
    Ok(())
}

/// The Debian kernel and its initramfs, which qemu boots directly (no boot loader to emulate).
fn copy_boot_files(rootfs: &Path, work: &Path) -> Result<(), LabError> {
    let boot = rootfs.join("boot");
    let pick = |prefix: &str| -> Result<PathBuf, LabError> {
        let mut found: Vec<PathBuf> = std::fs::read_dir(&boot)
            .map_err(LabError::io("reading", &boot))?
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with(prefix))
            })
            .collect();
        found.sort();
        found.pop().ok_or_else(|| {
            VmError::ImageBuild {
                step: "finding the kernel",
                reason: format!("no {prefix}* in {}", boot.display()),
            }
            .into()
        })
    };
    for (prefix, name) in [("vmlinuz-", "vmlinuz"), ("initrd.img-", "initrd.img")] {
        let src = pick(prefix)?;
        let dst = work.join(name);
        std::fs::copy(&src, &dst).map_err(LabError::io("copying", &src))?;
    }
    Ok(())
}

/// Remove what differs from build to build, or must be unique per VM (the seed provides those).
fn clean(rootfs: &Path) -> Result<(), LabError> {
    for f in ["etc/machine-id", "var/lib/dbus/machine-id"] {
        let p = rootfs.join(f);
        if p.exists() || f == "etc/machine-id" {
            // Empty, not absent: systemd then treats the first boot as a first boot and takes the id
            // from the kernel command line.
            write_file(&p, b"", 0o444)?;
        }
    }
    let _ = std::fs::remove_file(rootfs.join("var/lib/dbus/machine-id"));
    let ssh = rootfs.join("etc/ssh");
    for e in std::fs::read_dir(&ssh)
        .map_err(LabError::io("reading", &ssh))?
        .flatten()
    {
        if e.file_name().to_string_lossy().starts_with("ssh_host_") {
            let _ = std::fs::remove_file(e.path());
        }
    }
    for d in [
        "var/lib/apt/lists",
        "var/cache/apt",
        "var/log",
        "var/cache/debconf",
        "tmp",
    ] {
        empty_dir(&rootfs.join(d))?;
    }
    for f in [
        "etc/resolv.conf",
        "var/cache/ldconfig/aux-cache",
        "etc/ssh/ssh_host_ecdsa_key",
    ] {
        let _ = std::fs::remove_file(rootfs.join(f));
    }
    Ok(())
}

fn empty_dir(dir: &Path) -> Result<(), LabError> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Ok(());
    };
    for e in rd.flatten() {
        let p = e.path();
        let r = if p.is_dir() && !p.is_symlink() {
            std::fs::remove_dir_all(&p)
        } else {
            std::fs::remove_file(&p)
        };
        r.map_err(LabError::io("removing", &p))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recipe_id_follows_the_mirror_and_is_stable() {
        assert_eq!(recipe_id(DEFAULT_MIRROR), recipe_id(DEFAULT_MIRROR));
        assert_ne!(
            recipe_id(DEFAULT_MIRROR),
            recipe_id("http://snapshot.debian.org/archive/debian/20261201T000000Z")
        );
        assert!(image_for(DEFAULT_MIRROR).dir.starts_with(CACHE));
    }

    #[test]
    fn image_holds_a_prepared_host_and_nothing_of_kiln() {
        for p in [
            "openssh-server",
            "containerd",
            "runc",
            "containernetworking-plugins",
            "nftables",
            "systemd-sysv",
        ] {
            assert!(PACKAGES.contains(&p), "{p}");
        }
        assert!(!PACKAGES.iter().any(|p| p.contains("kiln")));
        assert!(FSTAB.contains("swap"));
    }
}
