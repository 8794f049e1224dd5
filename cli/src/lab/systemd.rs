//! Lab hosts whose PID 1 is systemd (`kiln lab up --init systemd`), booted the way a container manager
//! (systemd-nspawn, podman --systemd) boots one; systemd.io/CONTAINER_INTERFACE lists what PID 1 needs.
//!
//! The host's filesystem is the same as a plain host's ([`super::init`] builds it); what differs is what
//! runs on it: `kiln lab init-host` prepares the filesystem, masks the units that make no sense in a
//! namespace host, waits until `kiln lab up` has attached the network and made the host key (so sshd and the
//! kubelet find both at boot, like on a VM), then execs systemd, which starts sshd and containerd as units.

use std::ffi::CString;
use std::path::Path;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::LabError;

/// What runs as a lab host's PID 1.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum InitMode {
    /// `kiln lab init-host` itself: no service manager; sshd is started by `kiln lab up`.
    #[default]
    Plain,
    /// systemd 252 (/lib/systemd/systemd): sshd, containerd and kiln's units run as systemd units.
    Systemd,
}

impl InitMode {
    pub fn as_str(self) -> &'static str {
        match self {
            InitMode::Plain => "plain",
            InitMode::Systemd => "systemd",
        }
    }
}

pub const SYSTEMD: &str = "/lib/systemd/systemd";
/// Not graphical.target (the machine's default.target): a host is a server.
pub const TARGET: &str = "multi-user.target";
/// systemd decides it runs in a container from this variable (CONTAINER_INTERFACE: `container=`).
pub const CONTAINER: &str = "kiln-lab";
/// Tags the host's PID 1 (its environ outlives the exec into systemd, and systemd never passes it on to
/// services), so `kiln lab` recognises the host's systemd as it recognised `init-host`.
pub const HOST_DIR_ENV: &str = "KILN_LAB_HOST_DIR";
/// Written from outside once the network and host key are in place: the host may boot.
pub const GO_MARKER: &str = "run/lab-go";
/// How long `kiln lab up` waits for sshd after releasing the boot (a cold boot of 3 hosts on 2 busy cores).
pub const BOOT_TIMEOUT: Duration = Duration::from_secs(90);
/// How long a clean shutdown (`kiln lab stop`) may take before the host is killed.
pub const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(30);

/// Units a namespace host must not run, each with why. They are masked (linked to /dev/null) in the host's
/// own /etc, so the machine's units never change.
pub const MASK: &[(&str, &str)] = &[
    ("getty.target", "no console to log in on"),
    ("console-getty.service", "no console to log in on"),
    ("container-getty@.service", "no console to log in on"),
    ("getty@.service", "no console to log in on"),
    ("serial-getty@.service", "no console to log in on"),
    ("systemd-udevd.service", "devices belong to the machine"),
    (
        "systemd-udevd-control.socket",
        "devices belong to the machine",
    ),
    (
        "systemd-udevd-kernel.socket",
        "devices belong to the machine",
    ),
    (
        "systemd-udev-trigger.service",
        "devices belong to the machine",
    ),
    (
        "systemd-udev-settle.service",
        "devices belong to the machine",
    ),
    (
        "systemd-tmpfiles-setup-dev.service",
        "/dev is the machine's",
    ),
    ("kmod-static-nodes.service", "/dev is the machine's"),
    ("modprobe@.service", "kernel modules are the machine's"),
    (
        "systemd-modules-load.service",
        "kernel modules are the machine's",
    ),
    ("systemd-timesyncd.service", "the clock is the machine's"),
    ("systemd-pstore.service", "the kernel is the machine's"),
    ("systemd-binfmt.service", "binfmt_misc is the machine's"),
    (
        "proc-sys-fs-binfmt_misc.automount",
        "binfmt_misc is the machine's",
    ),
    (
        "proc-sys-fs-binfmt_misc.mount",
        "binfmt_misc is the machine's",
    ),
    ("sys-kernel-debug.mount", "the kernel is the machine's"),
    ("sys-kernel-tracing.mount", "the kernel is the machine's"),
    ("sys-kernel-config.mount", "the kernel is the machine's"),
    (
        "sys-fs-fuse-connections.mount",
        "the kernel is the machine's",
    ),
    ("dev-hugepages.mount", "/dev is the machine's"),
    (
        "systemd-remount-fs.service",
        "the root filesystem is the machine's",
    ),
    (
        "systemd-fsck-root.service",
        "the root filesystem is the machine's",
    ),
    ("networking.service", "the lab configures eth0 before boot"),
    (
        "systemd-networkd.service",
        "the lab configures eth0 before boot",
    ),
    (
        "systemd-networkd-wait-online.service",
        "the lab configures eth0 before boot",
    ),
    // Nothing on a lab host talks D-Bus; without them a boot is a second shorter and pam_systemd's
    // session registration simply fails (it is optional in Debian's PAM stack).
    ("dbus.service", "boot time: nothing on a host needs D-Bus"),
    ("dbus.socket", "boot time: nothing on a host needs D-Bus"),
    ("systemd-logind.service", "boot time: needs D-Bus"),
    // On sshd's path to basic.target (systemd-analyze critical-chain) and of no use on a lab host: the
    // journal is volatile (/var/log starts empty), the users come with the machine's /etc, nobody reads utmp.
    (
        "systemd-journal-flush.service",
        "boot time: the journal is volatile",
    ),
    (
        "systemd-sysusers.service",
        "boot time: users come with the machine's /etc",
    ),
    (
        "systemd-update-utmp.service",
        "boot time: nobody reads utmp",
    ),
    (
        "systemd-update-utmp-runlevel.service",
        "boot time: nobody reads utmp",
    ),
];

/// Units the machine has enabled that a host keeps; every other unit the machine enabled (its registry,
/// databases, apt timers, ...) is masked: a fresh VM does not run the build machine's services.
pub const KEEP: &[&str] = &["ssh.service", "sshd.service", "containerd.service"];

/// The full mask set for a host, given the units the *machine's* /etc enables (read before the host's /etc
/// overlay is mounted: what the host itself enabled, e.g. kiln-kubelet, must never be masked at its next
/// boot): [`MASK`] plus whatever is enabled and not in [`KEEP`]. Targets are left alone (they start
/// nothing by themselves), and so is anything of kiln's. Sorted, unique.
pub fn units_to_mask(machine_enabled: &[String]) -> Vec<String> {
    let mut out: Vec<String> = MASK.iter().map(|(u, _)| u.to_string()).collect();
    out.extend(
        machine_enabled
            .iter()
            .filter(|u| {
                !KEEP.contains(&u.as_str()) && !u.ends_with(".target") && !u.starts_with("kiln-")
            })
            .cloned(),
    );
    out.sort();
    out.dedup();
    out
}

/// Unit names linked from `<etc_system>/*.wants/` and `*.requires/` (what `systemctl enable` made).
pub fn enabled_units(etc_system: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(etc_system) else {
        return out;
    };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !(name.ends_with(".wants") || name.ends_with(".requires")) {
            continue;
        }
        if let Ok(units) = std::fs::read_dir(e.path()) {
            out.extend(
                units
                    .flatten()
                    .map(|u| u.file_name().to_string_lossy().into_owned()),
            );
        }
    }
    out
}

/// Mask `units` in `etc_system` (the host's /etc/systemd/system): replace whatever is there by a link to
/// /dev/null. Idempotent, so every boot re-applies it.
pub fn write_masks(etc_system: &Path, units: &[String]) -> Result<(), LabError> {
    std::fs::create_dir_all(etc_system).map_err(LabError::io("creating", etc_system))?;
    for u in units {
        let p = etc_system.join(u);
        if std::fs::read_link(&p).is_ok_and(|t| t == Path::new("/dev/null")) {
            continue;
        }
        let _ = std::fs::remove_file(&p);
        std::os::unix::fs::symlink("/dev/null", &p).map_err(LabError::io("masking", &p))?;
    }
    Ok(())
}

/// The host's sshd settings, as a drop-in the machine's sshd_config includes first (first value wins):
/// the same options a plain host's sshd gets on its command line.
pub fn sshd_dropin(ip: &str) -> String {
    format!(
        "# Written by `kiln lab up`: this lab host's sshd.\n\
         ListenAddress {ip}\n\
         PermitRootLogin prohibit-password\n\
         PasswordAuthentication no\n\
         KbdInteractiveAuthentication no\n\
         UseDNS no\n\
         HostKey /etc/ssh/ssh_host_ed25519_key\n\
         PidFile /run/sshd.pid\n"
    )
}

/// Where the drop-in goes, relative to the host's root.
pub const SSHD_DROPIN: &str = "etc/ssh/sshd_config.d/00-kiln-lab.conf";

/// systemd's command line and environment: a container boot into [`TARGET`].
pub fn exec_plan(dir: &Path) -> (Vec<String>, Vec<String>) {
    (
        vec![
            SYSTEMD.to_string(),
            format!("--unit={TARGET}"),
            "--log-target=console".to_string(),
        ],
        vec![
            format!("container={CONTAINER}"),
            format!("{HOST_DIR_ENV}={}", dir.display()),
            "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".to_string(),
        ],
    )
}

/// systemd logs to /dev/console: make the host's the init.log, never the machine's console. Runs before the
/// fresh /tmp hides the lab directory, and by path: our stdout's mount belongs to the machine's mount
/// namespace, which bind mounts refuse (EINVAL).
pub fn bind_console(dir: &Path) -> Result<(), LabError> {
    let log = dir.join("init.log");
    nix::mount::mount(
        Some(&log),
        "/dev/console",
        None::<&str>,
        nix::mount::MsFlags::MS_BIND,
        None::<&str>,
    )
    .map_err(|e| LabError::Io {
        what: "bind mounting as /dev/console",
        path: log.clone(),
        source: e.into(),
    })
}

/// Where units are enabled, on the machine (before the overlay) and on the host (after).
pub const ETC_SYSTEM: &str = "/etc/systemd/system";

/// Runs as the host's PID 1 once its filesystem is ready: mask, wait for the go marker, become systemd.
/// `machine_enabled` is [`enabled_units`] of the machine's /etc, read before the overlay hid it.
pub fn boot(dir: &Path, machine_enabled: &[String]) -> Result<(), LabError> {
    write_masks(Path::new(ETC_SYSTEM), &units_to_mask(machine_enabled))?;
    std::fs::write("/run/lab-ready", b"ready\n")
        .map_err(LabError::io("writing", "/run/lab-ready"))?;
    let go = Path::new("/").join(GO_MARKER);
    let start = Instant::now();
    while !go.exists() {
        if start.elapsed() > BOOT_TIMEOUT {
            return Err(LabError::Timeout {
                what: format!("{} (kiln lab up never released the boot)", go.display()),
                seconds: BOOT_TIMEOUT.as_secs(),
            });
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let (argv, env) = exec_plan(dir);
    let cs = |v: Vec<String>| -> Result<Vec<CString>, LabError> {
        v.into_iter()
            .map(|s| {
                CString::new(s).map_err(|e| LabError::BadState {
                    path: dir.to_path_buf(),
                    reason: e.to_string(),
                })
            })
            .collect()
    };
    let (argv, env) = (cs(argv)?, cs(env)?);
    let err = nix::unistd::execve(&argv[0], &argv, &env).unwrap_err();
    Err(LabError::Io {
        what: "starting",
        path: SYSTEMD.into(),
        source: err.into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_what_the_machine_enabled_except_what_a_host_needs() {
        let enabled: Vec<String> = [
            "ssh.service",
            "containerd.service",
            "docker-registry.service",
            "apt-daily.timer",
            "remote-fs.target",
            "getty@tty1.service",
        ]
        .map(String::from)
        .to_vec();
        let m = units_to_mask(&enabled);
        for u in [
            "docker-registry.service",
            "apt-daily.timer",
            "getty@tty1.service",
        ] {
            assert!(m.contains(&u.to_string()), "{u} should be masked");
        }
        for u in ["ssh.service", "containerd.service", "remote-fs.target"] {
            assert!(!m.contains(&u.to_string()), "{u} must not be masked");
        }
        // A machine that runs kiln itself does not take kiln's units away from its lab hosts.
        let m = units_to_mask(&["kiln-kubelet.service".to_string()]);
        assert!(!m.contains(&"kiln-kubelet.service".to_string()), "{m:?}");
        for u in [
            "systemd-udevd.service",
            "modprobe@.service",
            "systemd-modules-load.service",
        ] {
            assert!(
                m.contains(&u.to_string()),
                "{u} touches the machine's kernel or /dev"
            );
        }
        let mut sorted = m.clone();
        sorted.dedup();
        assert_eq!(sorted, m, "no duplicates");
    }

    #[test]
    fn never_masks_what_kiln_installs_or_the_journal() {
        let m = units_to_mask(&[]);
        for u in [
            "kiln-kubelet.service",
            "kiln-snapshot.timer",
            "ssh.service",
            "containerd.service",
            "systemd-journald.service",
            "multi-user.target",
        ] {
            assert!(!m.contains(&u.to_string()), "{u} must run on a host");
        }
    }

    #[test]
    fn masks_are_links_to_dev_null_and_idempotent() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("etcd.service"), "[Service]\n").unwrap();
        let units = vec!["etcd.service".to_string(), "getty.target".to_string()];
        write_masks(d.path(), &units).unwrap();
        write_masks(d.path(), &units).unwrap();
        for u in &units {
            assert_eq!(
                std::fs::read_link(d.path().join(u)).unwrap(),
                Path::new("/dev/null")
            );
        }
    }

    #[test]
    fn enabled_units_come_from_wants_and_requires_dirs() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("multi-user.target.wants")).unwrap();
        std::fs::create_dir(d.path().join("sysinit.target.requires")).unwrap();
        std::fs::write(d.path().join("multi-user.target.wants/a.service"), "").unwrap();
        std::fs::write(d.path().join("sysinit.target.requires/b.service"), "").unwrap();
        std::fs::write(d.path().join("c.service"), "").unwrap();
        let mut e = enabled_units(d.path());
        e.sort();
        assert_eq!(e, vec!["a.service", "b.service"]);
    }

    #[test]
    fn systemd_boots_as_a_container_into_multi_user() {
        let (argv, env) = exec_plan(Path::new("/tmp/kiln-lab/x/host1"));
        assert_eq!(argv[0], SYSTEMD);
        assert!(argv.contains(&"--unit=multi-user.target".to_string()));
        assert!(env.contains(&"container=kiln-lab".to_string()));
        assert!(env.contains(&"KILN_LAB_HOST_DIR=/tmp/kiln-lab/x/host1".to_string()));
    }

    #[test]
    fn sshd_dropin_listens_on_the_host_address_only() {
        let s = sshd_dropin("10.250.0.12");
        assert!(s.contains("ListenAddress 10.250.0.12\n"));
        assert!(s.contains("PasswordAuthentication no\n"));
    }
}
