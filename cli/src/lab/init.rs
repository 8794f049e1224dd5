//! PID 1 of a lab host (`kiln lab init-host`), run by `unshare` inside the host's fresh namespaces.
//!
//! It builds the host's private filesystem view, then holds the namespaces and reaps orphans until it is
//! killed (power loss) or asked to stop. Like a real init it never exits on its own.

use std::path::{Path, PathBuf};

use nix::mount::{mount, MsFlags};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};

use super::systemd::InitMode;
use super::LabError;

/// Copy-on-write over the machine's own dirs: reads see the machine, writes stay with the host.
const OVERLAYS: &[&str] = &["etc", "var", "usr", "home", "srv"];
/// Plain private dirs (bind mounts of ext4, not overlay: containerd's overlayfs snapshotter cannot sit on
/// an overlayfs upper — NOTES pitfall 4). They start empty, like a fresh VM's.
const PRIVATE: &[&str] = &[
    "var/lib/containerd",
    "var/lib/kubelet",
    "var/lib/kiln",
    "var/lib/cni",
    "var/log",
    "root",
    "opt",
    "usr/local",
];

fn mnt(
    src: &str,
    target: &str,
    fstype: &str,
    flags: MsFlags,
    data: Option<&str>,
) -> Result<(), LabError> {
    mount(Some(src), target, Some(fstype), flags, data).map_err(|e| LabError::Io {
        what: "mounting",
        path: PathBuf::from(format!("{target} ({fstype})")),
        source: e.into(),
    })
}

fn mkdir(p: impl AsRef<Path>) -> Result<(), LabError> {
    std::fs::create_dir_all(p.as_ref()).map_err(LabError::io("creating", p.as_ref()))
}

fn write(p: &str, data: &[u8]) -> Result<(), LabError> {
    std::fs::write(p, data).map_err(LabError::io("writing", p))
}

/// Set up the host and never return (unless setup fails). Both init modes build the same filesystem; a
/// systemd host then becomes systemd ([`super::systemd::boot`]) instead of reaping orphans itself.
pub fn run(dir: &Path, hostname: &str, init: InitMode) -> Result<(), LabError> {
    let mut machine_enabled = Vec::new();
    if init == InitMode::Systemd {
        super::systemd::bind_console(dir)?;
        machine_enabled = super::systemd::enabled_units(Path::new(super::systemd::ETC_SYSTEM));
    }
    prepare(dir, hostname)?;
    match init {
        InitMode::Plain => {
            write("/run/lab-ready", b"ready\n")?;
            reap_forever()
        }
        InitMode::Systemd => super::systemd::boot(dir, &machine_enabled),
    }
}

/// The host's own filesystem view: sysfs, cgroups, overlays, private dirs, fresh /run and /tmp, identity.
fn prepare(dir: &Path, hostname: &str) -> Result<(), LabError> {
    nix::unistd::sethostname(hostname).map_err(|e| LabError::Io {
        what: "setting hostname",
        path: hostname.into(),
        source: e.into(),
    })?;
    // A sysfs of this netns, so /sys/class/net shows only the host's own links.
    // Read what we need from the lab directory first: the fresh /tmp mounted below hides it.
    let hosts =
        std::fs::read(dir.join("hosts")).map_err(LabError::io("reading", dir.join("hosts")))?;
    let have_machine_id = dir.join("upper/etc/machine-id").exists();
    mnt(
        "sysfs",
        "/sys",
        "sysfs",
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        None,
    )?;
    mount_cgroups()?;
    for d in OVERLAYS {
        let upper = dir.join("upper").join(d);
        let work = dir.join("work").join(d);
        mkdir(&upper)?;
        mkdir(&work)?;
        let opts = format!(
            "lowerdir=/{d},upperdir={},workdir={}",
            upper.display(),
            work.display()
        );
        mnt(
            "overlay",
            &format!("/{d}"),
            "overlay",
            MsFlags::empty(),
            Some(&opts),
        )?;
    }
    for d in PRIVATE {
        let src = dir.join("fs").join(d);
        mkdir(&src)?;
        mkdir(format!("/{d}"))?;
        mount(
            Some(&src),
            format!("/{d}").as_str(),
            None::<&str>,
            MsFlags::MS_BIND,
            None::<&str>,
        )
        .map_err(|e| LabError::Io {
            what: "bind mounting",
            path: src.clone(),
            source: e.into(),
        })?;
    }
    for d in ["/usr/local/bin", "/usr/local/sbin", "/opt/cni/bin"] {
        mkdir(d)?;
    }
    // Fresh at every boot, like a real machine's.
    mnt(
        "tmpfs",
        "/run",
        "tmpfs",
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some("mode=755,size=256m"),
    )?;
    mnt(
        "tmpfs",
        "/tmp",
        "tmpfs",
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some("mode=1777,size=512m"),
    )?;
    for d in ["/run/sshd", "/run/netns", "/run/containerd", "/run/lock"] {
        mkdir(d)?;
    }
    let _ = mnt("mqueue", "/dev/mqueue", "mqueue", MsFlags::empty(), None);
    write("/etc/hostname", format!("{hostname}\n").as_bytes())?;
    // The machine-id survives reboots (it lives in the /etc overlay) but differs from the machine's own.
    if !have_machine_id {
        let id: String = (0..32)
            .map(|_| format!("{:x}", rand::random::<u8>() & 0xf))
            .collect();
        write("/etc/machine-id", format!("{id}\n").as_bytes())?;
    }
    write("/etc/hosts", &hosts)?;
    Ok(())
}

/// A cgroup view rooted at the host's own cgroup (we are inside a cgroup namespace): the same hierarchies
/// as the machine, so containerd and runc find what they expect.
fn mount_cgroups() -> Result<(), LabError> {
    let text = std::fs::read_to_string("/proc/self/cgroup")
        .map_err(LabError::io("reading", "/proc/self/cgroup"))?;
    mnt(
        "cgroup",
        "/sys/fs/cgroup",
        "tmpfs",
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some("mode=755"),
    )?;
    let mut v1 = false;
    for line in text.lines() {
        let mut it = line.splitn(3, ':');
        let (Some(_), Some(ctrls)) = (it.next(), it.next()) else {
            continue;
        };
        if ctrls.is_empty() {
            continue;
        }
        v1 = true;
        let name = ctrls.trim_start_matches("name=");
        let target = format!("/sys/fs/cgroup/{name}");
        mkdir(&target)?;
        let opts = if ctrls.starts_with("name=") {
            format!("none,{ctrls}")
        } else {
            ctrls.to_string()
        };
        mnt(
            "cgroup",
            &target,
            "cgroup",
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
            Some(&opts),
        )?;
    }
    if text.lines().any(|l| l.starts_with("0::")) {
        // Hybrid (v1 + unified) keeps v2 at /sys/fs/cgroup/unified; a pure v2 machine has it at the root.
        let target = if v1 {
            "/sys/fs/cgroup/unified"
        } else {
            "/sys/fs/cgroup"
        };
        mkdir(target)?;
        mnt(
            "cgroup2",
            target,
            "cgroup2",
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
            None,
        )?;
    }
    Ok(())
}

fn reap_forever() -> Result<(), LabError> {
    let mut set = SigSet::empty();
    for s in [Signal::SIGCHLD, Signal::SIGTERM, Signal::SIGINT] {
        set.add(s);
    }
    set.thread_block().map_err(|e| LabError::Io {
        what: "blocking signals",
        path: "init".into(),
        source: e.into(),
    })?;
    loop {
        // Reap whatever is pending (orphans re-parented to us, e.g. every sshd session's children).
        loop {
            match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::StillAlive) | Err(_) => break,
                Ok(_) => continue,
            }
        }
        match set.wait() {
            Ok(Signal::SIGTERM) | Ok(Signal::SIGINT) => std::process::exit(0),
            _ => continue,
        }
    }
}
