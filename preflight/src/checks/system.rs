//! Checks of the kernel and the machine: user, swap, sysctls, modules, cgroups, kernel version, size.

use super::{Outcome, Severity};
use crate::facts::{Facts, Role};

/// kubeadm's floor for a supported kernel (older ones lack cgroup and nftables features containerd and
/// kiln-proxy use); below it kiln warns, as kubeadm does.
const MIN_KERNEL: (u32, u32) = (4, 19);

/// v1 or v2 controllers the kubelet places pods under: CPU shares/quota, memory limits, pid limits.
const CGROUP_CONTROLLERS: &[&str] = &["cpu", "memory", "pids"];

pub(super) fn privileged(f: &Facts, _: Role) -> Outcome {
    (!f.is_root).then(|| (Severity::Error, "user is not running as root".into()))
}

/// Active swap devices in /proc/swaps.
pub(crate) fn active_swaps(f: &Facts) -> usize {
    f.swaps
        .lines()
        .skip(1)
        .filter(|l| !l.trim().is_empty())
        .count()
}

/// fstab lines that turn swap on at boot (not commented, type `swap`).
pub(crate) fn fstab_swaps(f: &Facts) -> Vec<&str> {
    f.fstab
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .filter(|l| l.split_whitespace().nth(2) == Some("swap"))
        .collect()
}

pub(super) fn swap(f: &Facts, _: Role) -> Outcome {
    let active = active_swaps(f);
    if active > 0 {
        return Some((
            Severity::Error,
            format!("swap is on ({active} device(s) in /proc/swaps); turn it off with `swapoff -a` (or `kiln preflight --fix`)"),
        ));
    }
    // Off now, on again after a reboot: the kubelet would then refuse to run pods reliably.
    let boot = fstab_swaps(f);
    (!boot.is_empty()).then(|| {
        (
            Severity::Warning,
            format!(
                "swap is off, but /etc/fstab turns it on at boot ({}); `kiln preflight --fix` comments it out",
                boot.join("; ")
            ),
        )
    })
}

pub(super) fn ip_forward(f: &Facts, _: Role) -> Outcome {
    match f.ip_forward.as_deref() {
        Some("1") => None,
        // kiln sets it when the kubelet starts, so a 0 here is fixed for the operator, not fatal.
        Some(v) => Some((
            Severity::Warning,
            format!("/proc/sys/net/ipv4/ip_forward is {v}; kiln will set it to 1"),
        )),
        None => Some((
            Severity::Error,
            "/proc/sys/net/ipv4/ip_forward does not exist".into(),
        )),
    }
}

/// kubeadm makes both cases errors. kiln's container-runtime phase loads br_netfilter and sets the value
/// itself, so what it can fix is a warning; a kernel that cannot load br_netfilter at all is an error:
/// without it, pod → ClusterIP → pod on the same bridge skips the nat hooks (kiln-proxy's Services break).
pub(super) fn bridge_nf_call_iptables(f: &Facts, _: Role) -> Outcome {
    const PATH: &str = "/proc/sys/net/bridge/bridge-nf-call-iptables";
    match f.bridge_nf_call_iptables.as_deref() {
        Some("1") => None,
        Some(v) => Some((
            Severity::Warning,
            format!("{PATH} is {v}; kiln will set it to 1"),
        )),
        None if f.loadable_modules.contains("br_netfilter") => Some((
            Severity::Warning,
            format!("{PATH} does not exist (br_netfilter is not loaded); kiln will load it"),
        )),
        None => Some((
            Severity::Error,
            format!("{PATH} does not exist and the kernel module br_netfilter cannot be loaded"),
        )),
    }
}

/// containerd's snapshotter stacks image layers with overlayfs; the kernel loads the module on first mount.
pub(super) fn overlay(f: &Facts, _: Role) -> Outcome {
    let listed = f
        .proc_filesystems
        .lines()
        .any(|l| l.split_whitespace().last() == Some("overlay"));
    if listed || f.loadable_modules.contains("overlay") {
        return None;
    }
    Some((
        Severity::Error,
        "the overlay filesystem is not in /proc/filesystems and the module cannot be loaded (containerd needs it)".into(),
    ))
}

pub(super) fn cgroups(f: &Facts, _: Role) -> Outcome {
    let (version, missing): (&str, Vec<&str>) = match &f.cgroup2_controllers {
        Some(list) => {
            let have: Vec<&str> = list.split_whitespace().collect();
            (
                "v2 (/sys/fs/cgroup/cgroup.controllers)",
                CGROUP_CONTROLLERS
                    .iter()
                    .copied()
                    .filter(|c| !have.contains(c))
                    .collect(),
            )
        }
        None => {
            // #subsys_name hierarchy num_cgroups enabled
            let enabled: Vec<&str> = f
                .proc_cgroups
                .lines()
                .filter(|l| !l.starts_with('#'))
                .filter_map(|l| {
                    let c: Vec<&str> = l.split_whitespace().collect();
                    (c.get(3) == Some(&"1")).then(|| c[0])
                })
                .collect();
            (
                "v1 (/proc/cgroups)",
                CGROUP_CONTROLLERS
                    .iter()
                    .copied()
                    .filter(|c| !enabled.contains(c))
                    .collect(),
            )
        }
    };
    (!missing.is_empty()).then(|| {
        (
            Severity::Error,
            format!(
                "cgroup controller(s) {} missing from cgroup {version}",
                missing.join(", ")
            ),
        )
    })
}

/// (major, minor) of a release string like `6.1.0-18-amd64` or `4.19.0`.
pub(crate) fn kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut it = release.split(|c: char| !c.is_ascii_digit());
    Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
}

pub(super) fn kernel_version_check(f: &Facts, _: Role) -> Outcome {
    match kernel_version(&f.kernel_release) {
        Some(v) if v >= MIN_KERNEL => None,
        Some((a, b)) => Some((
            Severity::Warning,
            format!(
                "kernel {} ({a}.{b}) is older than {}.{}, the oldest kiln is tested against",
                f.kernel_release, MIN_KERNEL.0, MIN_KERNEL.1
            ),
        )),
        None => Some((
            Severity::Warning,
            format!(
                "cannot read a kernel version from /proc/sys/kernel/osrelease ({:?})",
                f.kernel_release
            ),
        )),
    }
}

pub(super) fn num_cpu(f: &Facts, _: Role) -> Outcome {
    (f.num_cpu < 2).then(|| {
        (
            Severity::Error,
            format!(
                "the number of available CPUs {} is less than the required 2",
                f.num_cpu
            ),
        )
    })
}

pub(super) fn mem(f: &Facts, _: Role) -> Outcome {
    let mib = f.mem_total_kib / 1024;
    (mib < 1700).then(|| {
        (
            Severity::Error,
            format!("the system RAM ({mib} MB) is less than the minimum 1700 MB"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::super::good_facts;
    use super::*;

    const R: Role = Role::Worker;

    fn sev(o: Outcome) -> Option<Severity> {
        o.map(|(s, _)| s)
    }

    #[test]
    fn privileged_user() {
        let mut f = good_facts();
        assert_eq!(privileged(&f, R), None);
        f.is_root = false;
        assert_eq!(sev(privileged(&f, R)), Some(Severity::Error));
    }

    #[test]
    fn swap_on_is_an_error_and_swap_in_fstab_a_warning() {
        let mut f = good_facts();
        assert_eq!(swap(&f, R), None);
        f.fstab.push_str("# /swapfile none swap sw 0 0\n");
        assert_eq!(swap(&f, R), None, "a commented swap line is off");
        f.fstab.push_str("/swapfile none swap sw 0 0\n");
        assert_eq!(sev(swap(&f, R)), Some(Severity::Warning));
        f.swaps.push_str("/swapfile file 1024 0 -2\n");
        assert_eq!(sev(swap(&f, R)), Some(Severity::Error));
    }

    #[test]
    fn ip_forward_zero_is_a_warning_missing_an_error() {
        let mut f = good_facts();
        assert_eq!(ip_forward(&f, R), None);
        f.ip_forward = Some("0".into());
        assert_eq!(sev(ip_forward(&f, R)), Some(Severity::Warning));
        f.ip_forward = None;
        assert_eq!(sev(ip_forward(&f, R)), Some(Severity::Error));
    }

    #[test]
    fn bridge_nf_call_iptables_zero_or_unloaded_is_a_warning_unloadable_an_error() {
        let mut f = good_facts();
        assert_eq!(bridge_nf_call_iptables(&f, R), None);
        f.bridge_nf_call_iptables = Some("0".into());
        assert_eq!(sev(bridge_nf_call_iptables(&f, R)), Some(Severity::Warning));
        f.bridge_nf_call_iptables = None;
        let (s, m) = bridge_nf_call_iptables(&f, R).unwrap();
        assert_eq!(s, Severity::Warning);
        assert!(m.contains("br_netfilter is not loaded"), "{m}");
        f.loadable_modules.remove("br_netfilter");
        assert_eq!(sev(bridge_nf_call_iptables(&f, R)), Some(Severity::Error));
    }

    #[test]
    fn overlay_listed_or_loadable() {
        let mut f = good_facts();
        assert_eq!(overlay(&f, R), None);
        f.proc_filesystems = "nodev\tsysfs\n\text4\n".into();
        assert_eq!(overlay(&f, R), None, "loadable on first mount");
        f.loadable_modules.clear();
        assert_eq!(sev(overlay(&f, R)), Some(Severity::Error));
    }

    #[test]
    fn cgroups_v2_and_v1() {
        let mut f = good_facts();
        assert_eq!(cgroups(&f, R), None);
        f.cgroup2_controllers = Some("cpuset cpu io memory".into());
        let (s, m) = cgroups(&f, R).unwrap();
        assert_eq!(s, Severity::Error);
        assert!(m.contains("pids") && m.contains("v2"), "{m}");
        f.cgroup2_controllers = None;
        f.proc_cgroups = "#subsys_name\thierarchy\tnum_cgroups\tenabled\ncpu\t1\t1\t1\nmemory\t4\t9\t1\npids\t8\t1\t1\n".into();
        assert_eq!(cgroups(&f, R), None);
        f.proc_cgroups = f.proc_cgroups.replace("memory\t4\t9\t1", "memory\t0\t1\t0");
        let (_, m) = cgroups(&f, R).unwrap();
        assert!(m.contains("memory") && m.contains("v1"), "{m}");
    }

    #[test]
    fn old_kernels_warn() {
        assert_eq!(kernel_version("4.19.0-26-amd64"), Some((4, 19)));
        let mut f = good_facts();
        assert_eq!(kernel_version_check(&f, R), None);
        f.kernel_release = "4.19.0".into();
        assert_eq!(kernel_version_check(&f, R), None);
        f.kernel_release = "4.18.0-553.el8".into();
        assert_eq!(sev(kernel_version_check(&f, R)), Some(Severity::Warning));
        f.kernel_release = "".into();
        assert_eq!(sev(kernel_version_check(&f, R)), Some(Severity::Warning));
    }

    #[test]
    fn cpu_and_memory_floors() {
        let mut f = good_facts();
        assert_eq!((num_cpu(&f, R), mem(&f, R)), (None, None));
        f.num_cpu = 1;
        f.mem_total_kib = 1024 * 1024;
        assert_eq!(sev(num_cpu(&f, R)), Some(Severity::Error));
        assert_eq!(sev(mem(&f, R)), Some(Severity::Error));
    }
}
