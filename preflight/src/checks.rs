//! The preflight checks, as a list the code walks. Each has kubeadm's name, the roles it applies to, and a
//! pure function over [`Facts`].

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

pub struct Check {
    pub name: &'static str,
    pub roles: &'static [Role],
    pub run: fn(&Facts, Role) -> Option<(Severity, String)>,
}

const BOTH: &[Role] = &[Role::Controller, Role::Worker];
const CONTROLLER: &[Role] = &[Role::Controller];

/// Ports a control plane needs, with the component that owns each.
const CONTROLLER_PORTS: &[(u16, &str)] = &[
    (6443, "kiln-apiserver"),
    (2379, "kiln-store"),
    (2380, "kiln-store"),
    (10259, "kiln-scheduler"),
    (10257, "kiln-controller-manager"),
];

pub const CHECKS: &[Check] = &[
    Check {
        name: "IsPrivilegedUser",
        roles: BOTH,
        run: |f, _| (!f.is_root).then(|| (Severity::Error, "user is not running as root".into())),
    },
    Check {
        name: "Swap",
        roles: BOTH,
        run: |f, _| {
            let active = f
                .swaps
                .lines()
                .skip(1)
                .filter(|l| !l.trim().is_empty())
                .count();
            (active > 0).then(|| {
                (
                    Severity::Error,
                    format!("swap is on ({active} device(s) in /proc/swaps); turn it off with `swapoff -a`"),
                )
            })
        },
    },
    Check {
        name: "FileContent--proc-sys-net-ipv4-ip_forward",
        roles: BOTH,
        run: |f, _| match f.ip_forward.as_deref() {
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
        },
    },
    Check {
        name: "NumCPU",
        roles: CONTROLLER,
        run: |f, _| {
            (f.num_cpu < 2).then(|| {
                (
                    Severity::Error,
                    format!(
                        "the number of available CPUs {} is less than the required 2",
                        f.num_cpu
                    ),
                )
            })
        },
    },
    Check {
        name: "Mem",
        roles: CONTROLLER,
        run: |f, _| {
            let mib = f.mem_total_kib / 1024;
            (mib < 1700).then(|| {
                (
                    Severity::Error,
                    format!("the system RAM ({mib} MB) is less than the minimum 1700 MB"),
                )
            })
        },
    },
    Check {
        name: "Port-10250",
        roles: BOTH,
        run: |f, _| port_check(f, 10250, "kiln-kubelet"),
    },
    Check {
        name: "Port-6443",
        roles: CONTROLLER,
        run: |f, _| controller_port(f, 6443),
    },
    Check {
        name: "Port-2379",
        roles: CONTROLLER,
        run: |f, _| controller_port(f, 2379),
    },
    Check {
        name: "Port-2380",
        roles: CONTROLLER,
        run: |f, _| controller_port(f, 2380),
    },
    Check {
        name: "Port-10259",
        roles: CONTROLLER,
        run: |f, _| controller_port(f, 10259),
    },
    Check {
        name: "Port-10257",
        roles: CONTROLLER,
        run: |f, _| controller_port(f, 10257),
    },
    Check {
        name: "DirAvailable--var-lib-kiln-store",
        roles: CONTROLLER,
        run: |f, _| {
            (f.non_empty_dirs.contains("/var/lib/kiln/store") && !f.kiln_components.contains("kiln-store")).then(|| {
                (Severity::Error, "/var/lib/kiln/store is not empty and no kiln-store is configured here (run `kiln reset` first)".into())
            })
        },
    },
];

fn controller_port(f: &Facts, port: u16) -> Option<(Severity, String)> {
    let owner = CONTROLLER_PORTS
        .iter()
        .find(|(p, _)| *p == port)
        .map(|(_, o)| *o)
        .unwrap_or("");
    port_check(f, port, owner)
}

/// A port in use is an error unless kiln's own component holds it (a re-run of init converges).
fn port_check(f: &Facts, port: u16, owner: &str) -> Option<(Severity, String)> {
    if !f.listening.contains(&port) || f.kiln_components.contains(owner) {
        return None;
    }
    Some((Severity::Error, format!("port {port} is in use")))
}

/// Every check for `role`, minus the ignored ones (names, or "all"); findings sorted errors first.
pub fn run_checks(facts: &Facts, role: Role, ignore: &[String]) -> Vec<Finding> {
    let ignored = |name: &str| {
        ignore
            .iter()
            .any(|i| i == "all" || i.eq_ignore_ascii_case(name))
    };
    let mut out: Vec<Finding> = CHECKS
        .iter()
        .filter(|c| c.roles.contains(&role))
        .filter_map(|c| {
            let (severity, message) = (c.run)(facts, role)?;
            let severity = if ignored(c.name) {
                Severity::Warning
            } else {
                severity
            };
            Some(Finding {
                check: c.name,
                severity,
                message,
            })
        })
        .collect();
    out.sort_by_key(|f| std::cmp::Reverse(f.severity));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn good() -> Facts {
        Facts {
            hostname: "host1".into(),
            is_root: true,
            swaps: "Filename Type Size Used Priority\n".into(),
            ip_forward: Some("1".into()),
            bridge_nf_call_iptables: Some("1".into()),
            num_cpu: 2,
            mem_total_kib: 4 * 1024 * 1024,
            ..Default::default()
        }
    }

    #[test]
    fn a_good_host_passes() {
        assert_eq!(run_checks(&good(), Role::Controller, &[]), vec![]);
    }

    #[test]
    fn swap_and_busy_ports_are_errors_named_like_kubeadm() {
        let mut f = good();
        f.swaps.push_str("/swapfile file 1024 0 -2\n");
        f.listening.insert(6443);
        let names: Vec<_> = run_checks(&f, Role::Controller, &[])
            .into_iter()
            .map(|x| (x.check, x.severity))
            .collect();
        assert!(names.contains(&("Swap", Severity::Error)));
        assert!(names.contains(&("Port-6443", Severity::Error)));
        // Workers do not need 6443.
        assert!(!run_checks(&f, Role::Worker, &[])
            .iter()
            .any(|x| x.check == "Port-6443"));
    }

    #[test]
    fn kilns_own_components_may_hold_their_ports_and_ignored_errors_become_warnings() {
        let mut f = good();
        f.listening.extend([6443, 2379, 2380]);
        f.kiln_components
            .extend(["kiln-apiserver".to_string(), "kiln-store".to_string()]);
        assert_eq!(run_checks(&f, Role::Controller, &[]), vec![]);
        f.is_root = false;
        let r = run_checks(&f, Role::Controller, &["IsPrivilegedUser".into()]);
        assert_eq!(r[0].severity, Severity::Warning);
    }
}
