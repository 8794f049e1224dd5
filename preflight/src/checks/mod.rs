//! The preflight checks, as a list the code walks. Each has kubeadm's name (where kubeadm has the check),
//! the roles it applies to, and a pure function over [`Facts`]. Severity follows kubeadm: an error is
//! what makes kiln init fail or leaves a broken node; a warning is what kiln fixes itself or what only
//! may matter.

mod files;
mod network;
pub(crate) mod system;

use crate::facts::{Facts, Role};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    Warning,
    Error,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub check: &'static str,
    pub severity: Severity,
    pub message: String,
}

pub type Outcome = Option<(Severity, String)>;

pub struct Check {
    pub name: &'static str,
    pub roles: &'static [Role],
    pub run: fn(&Facts, Role) -> Outcome,
}

const BOTH: &[Role] = &[Role::Controller, Role::Worker];
const CONTROLLER: &[Role] = &[Role::Controller];

const fn check(
    name: &'static str,
    roles: &'static [Role],
    run: fn(&Facts, Role) -> Outcome,
) -> Check {
    Check { name, roles, run }
}

pub const CHECKS: &[Check] = &[
    check("IsPrivilegedUser", BOTH, system::privileged),
    check("Swap", BOTH, system::swap),
    check(
        "FileContent--proc-sys-net-ipv4-ip_forward",
        BOTH,
        system::ip_forward,
    ),
    check(
        "FileContent--proc-sys-net-bridge-bridge-nf-call-iptables",
        BOTH,
        system::bridge_nf_call_iptables,
    ),
    check("Filesystem-overlay", BOTH, system::overlay),
    check("Cgroups", BOTH, system::cgroups),
    check("KernelVersion", BOTH, system::kernel_version_check),
    check("NumCPU", CONTROLLER, system::num_cpu),
    check("Mem", CONTROLLER, system::mem),
    check("Hostname", BOTH, network::hostname),
    check("NodeIP", BOTH, network::node_ip),
    check("Port-10250", BOTH, |f, _| {
        network::port_check(f, 10250, "kiln-kubelet")
    }),
    check("Port-6443", CONTROLLER, |f, _| {
        network::port_check(f, 6443, "kiln-apiserver")
    }),
    check("Port-2379", CONTROLLER, |f, _| {
        network::port_check(f, 2379, "kiln-store")
    }),
    check("Port-2380", CONTROLLER, |f, _| {
        network::port_check(f, 2380, "kiln-store")
    }),
    // kiln-dns: DNS on the node address (UDP and TCP) and its health/metrics port.
    check("Port-53", BOTH, |f, _| {
        network::address_port_check(f, 53, true, "kiln-dns")
    }),
    check("Port-9153", BOTH, |f, _| {
        network::address_port_check(f, 9153, false, "kiln-dns")
    }),
    check("Port-10259", CONTROLLER, |f, _| {
        network::port_check(f, 10259, "kiln-scheduler")
    }),
    check("Port-10257", CONTROLLER, |f, _| {
        network::port_check(f, 10257, "kiln-controller-manager")
    }),
    check("Firewalld", BOTH, network::firewalld),
    check("Ufw", BOTH, network::ufw),
    check("FirewallRules", BOTH, network::firewall_rules),
    check("FileExisting-ip", BOTH, |f, _| files::executable(f, "ip")),
    check("FileExisting-nft", BOTH, |f, _| files::executable(f, "nft")),
    check("FileExisting-mount", BOTH, |f, _| {
        files::executable(f, "mount")
    }),
    check("FileExisting-nsenter", BOTH, |f, _| {
        files::executable(f, "nsenter")
    }),
    check("CRI", BOTH, files::cri),
    check("ContainerdVersion", BOTH, files::containerd_version),
    check("FileExisting-runc", BOTH, |f, _| {
        files::executable(f, "runc")
    }),
    check(
        "DirAvailable--var-lib-kiln-store",
        CONTROLLER,
        files::store_dir,
    ),
    check(
        "FileAvailable--etc-kiln-manifests-kiln-store.yaml",
        CONTROLLER,
        |f, _| files::manifest(f, "kiln-store.yaml"),
    ),
    check(
        "FileAvailable--etc-kiln-manifests-kiln-apiserver.yaml",
        CONTROLLER,
        |f, _| files::manifest(f, "kiln-apiserver.yaml"),
    ),
    check(
        "FileAvailable--etc-kiln-manifests-kiln-scheduler.yaml",
        CONTROLLER,
        |f, _| files::manifest(f, "kiln-scheduler.yaml"),
    ),
    check(
        "FileAvailable--etc-kiln-manifests-kiln-controller-manager.yaml",
        CONTROLLER,
        |f, _| files::manifest(f, "kiln-controller-manager.yaml"),
    ),
    check(
        "FileAvailable--etc-kiln-manifests-kiln-proxy.yaml",
        BOTH,
        |f, _| files::manifest(f, "kiln-proxy.yaml"),
    ),
];

/// Whether `--ignore-preflight-errors` (names, any case, or `all`) covers the check `name`.
pub fn is_ignored(ignore: &[String], name: &str) -> bool {
    ignore
        .iter()
        .any(|i| i == "all" || i.eq_ignore_ascii_case(name))
}

/// Turns raw outcomes into findings: ignored errors become warnings; errors first.
pub(crate) fn findings(
    raw: impl IntoIterator<Item = (&'static str, Severity, String)>,
    ignore: &[String],
) -> Vec<Finding> {
    let mut out: Vec<Finding> = raw
        .into_iter()
        .map(|(check, severity, message)| Finding {
            check,
            severity: if is_ignored(ignore, check) {
                Severity::Warning
            } else {
                severity
            },
            message,
        })
        .collect();
    out.sort_by_key(|f| std::cmp::Reverse(f.severity));
    out
}

/// Every check for `role`, minus the ignored ones (names, or "all"); findings sorted errors first.
pub fn run_checks(facts: &Facts, role: Role, ignore: &[String]) -> Vec<Finding> {
    findings(
        CHECKS
            .iter()
            .filter(|c| c.roles.iter().any(|r| role.covers(*r)))
            .filter_map(|c| (c.run)(facts, role).map(|(s, m)| (c.name, s, m))),
        ignore,
    )
}

/// Facts of a healthy host, shared by the checks' tests.
#[cfg(test)]
pub(crate) fn good_facts() -> Facts {
    Facts {
        hostname: "host1".into(),
        hostname_resolves: true,
        is_root: true,
        swaps: "Filename Type Size Used Priority\n".into(),
        fstab: "UUID=1 / ext4 defaults 0 1\n".into(),
        ip_forward: Some("1".into()),
        bridge_nf_call_iptables: Some("1".into()),
        loadable_modules: ["br_netfilter".to_string(), "overlay".to_string()].into(),
        num_cpu: 2,
        mem_total_kib: 4 * 1024 * 1024,
        kernel_release: "6.1.0-18-amd64".into(),
        proc_filesystems: "nodev\tsysfs\nnodev\toverlay\n\text4\n".into(),
        cgroup2_controllers: Some("cpuset cpu io memory hugetlb pids rdma".into()),
        machine_id: "0123456789abcdef0123456789abcdef".into(),
        addresses: ["127.0.0.1".to_string(), "10.250.0.11".to_string()].into(),
        node_address: "10.250.0.11".into(),
        executables: crate::gather::EXECUTABLES
            .iter()
            .map(|s| s.to_string())
            .collect(),
        cri_socket: true,
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(f: &Facts, role: Role) -> Vec<(&'static str, Severity)> {
        run_checks(f, role, &[])
            .into_iter()
            .map(|x| (x.check, x.severity))
            .collect()
    }

    #[test]
    fn a_good_host_passes_in_every_role() {
        for role in [Role::Controller, Role::Worker, Role::ControllerWorker] {
            assert_eq!(run_checks(&good_facts(), role, &[]), vec![], "{role:?}");
        }
    }

    #[test]
    fn check_names_are_unique() {
        let mut n: Vec<_> = CHECKS.iter().map(|c| c.name).collect();
        n.sort();
        n.dedup();
        assert_eq!(n.len(), CHECKS.len());
    }

    #[test]
    fn swap_and_busy_ports_are_errors_named_like_kubeadm() {
        let mut f = good_facts();
        f.swaps.push_str("/swapfile file 1024 0 -2\n");
        f.listening.insert(6443);
        let n = names(&f, Role::Controller);
        assert!(n.contains(&("Swap", Severity::Error)));
        assert!(n.contains(&("Port-6443", Severity::Error)));
        // Workers do not need 6443; a controller+worker does.
        assert!(!names(&f, Role::Worker).iter().any(|x| x.0 == "Port-6443"));
        assert!(names(&f, Role::ControllerWorker)
            .iter()
            .any(|x| x.0 == "Port-6443"));
    }

    #[test]
    fn kilns_own_components_may_hold_their_ports_and_ignored_errors_become_warnings() {
        let mut f = good_facts();
        f.listening.extend([6443, 2379, 2380]);
        f.kiln_components
            .extend(["kiln-apiserver".to_string(), "kiln-store".to_string()]);
        assert_eq!(run_checks(&f, Role::Controller, &[]), vec![]);
        f.is_root = false;
        let r = run_checks(&f, Role::Controller, &["isprivilegeduser".into()]);
        assert_eq!(r[0].severity, Severity::Warning);
        let r = run_checks(&f, Role::Controller, &["all".into()]);
        assert!(r.iter().all(|x| x.severity == Severity::Warning));
    }
}
