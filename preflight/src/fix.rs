//! `kiln preflight --fix` as data: for each check that has a safe remedy, the shell steps that make it
//! pass now and after a reboot, planned from the facts alone. A step is planned only while its check
//! reports something, so running the plan twice changes nothing the second time (the re-gathered facts
//! pass). Rules the operator wrote in nftables/iptables are never touched: only firewalld and ufw, whose
//! purpose is to be told which ports to open, are changed.

use crate::checks::{run_checks, system as system_helpers};
use crate::facts::{Facts, Role};
use crate::firewall;

pub const SYSCTL_FILE: &str = "/etc/sysctl.d/99-kiln.conf";
pub const MODULES_FILE: &str = "/etc/modules-load.d/kiln.conf";
pub const FSTAB_BACKUP: &str = "/etc/fstab.kiln-bak";

/// Both keys in one file, whichever check asked for it, so the file is the same after any fix.
const SYSCTL_CONF: &str =
    "# managed by kiln (kiln preflight --fix): pods need forwarding, and bridged pod\n\
# traffic must pass the nat hooks for Services.\n\
net.ipv4.ip_forward = 1\n\
net.bridge.bridge-nf-call-iptables = 1\n";
const MODULES_CONF: &str =
    "# managed by kiln (kiln preflight --fix): bridged pod traffic through netfilter; image layers.\n\
br_netfilter\n\
overlay\n";

/// One change on a host: what it does, in words, and the shell command that does it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// The check this step makes pass.
    pub check: &'static str,
    pub change: String,
    pub command: String,
}

pub struct Remediation {
    pub check: &'static str,
    pub plan: fn(&Facts, Role) -> Vec<(String, String)>,
}

pub const REMEDIATIONS: &[Remediation] = &[
    Remediation {
        check: "Swap",
        plan: swap,
    },
    // Before the sysctls: bridge-nf-call-iptables exists only once br_netfilter is loaded.
    Remediation {
        check: "FileContent--proc-sys-net-bridge-bridge-nf-call-iptables",
        plan: bridge_nf_call_iptables,
    },
    Remediation {
        check: "FileContent--proc-sys-net-ipv4-ip_forward",
        plan: ip_forward,
    },
    Remediation {
        check: "Firewalld",
        plan: firewalld,
    },
    Remediation {
        check: "Ufw",
        plan: ufw,
    },
];

/// The steps that fix what the checks report on this host, in order; the same command is planned once.
pub fn fix_plan(facts: &Facts, role: Role) -> Vec<Step> {
    let reported = run_checks(facts, role, &[]);
    let mut steps: Vec<Step> = vec![];
    for r in REMEDIATIONS {
        if !reported.iter().any(|f| f.check == r.check) {
            continue;
        }
        for (change, command) in (r.plan)(facts, role) {
            if !steps.iter().any(|s| s.command == command) {
                steps.push(Step {
                    check: r.check,
                    change,
                    command,
                });
            }
        }
    }
    steps
}

/// Checks that have a remedy in `--fix`.
pub fn fixable(check: &str) -> bool {
    REMEDIATIONS.iter().any(|r| r.check == check)
}

fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// A step writing `content` to `path`, or none when the host's copy (`current`) already holds it.
fn write_file(path: &str, content: &str, current: &str) -> Option<(String, String)> {
    if current == content {
        return None;
    }
    let dir = path.rsplit_once('/').map(|(d, _)| d).unwrap_or("/");
    Some((
        format!("wrote {path}"),
        format!("mkdir -p {dir} && printf '%s' {} > {path}", quote(content)),
    ))
}

fn swap(f: &Facts, _: Role) -> Vec<(String, String)> {
    let mut steps = vec![];
    let active = system_helpers::active_swaps(f);
    if active > 0 {
        steps.push((
            format!("turned off swap ({active} device(s)): swapoff -a"),
            "swapoff -a".to_string(),
        ));
    }
    let boot = system_helpers::fstab_swaps(f);
    if !boot.is_empty() {
        steps.push((
            format!(
                "commented out {} swap line(s) in /etc/fstab (original kept as {FSTAB_BACKUP})",
                boot.len()
            ),
            // The first backup is the operator's original; a later run must not overwrite it. `cat >`
            // keeps the file's owner and mode.
            format!(
                "[ -e {FSTAB_BACKUP} ] || cp -p /etc/fstab {FSTAB_BACKUP}; \
                 awk '{{ if ($0 !~ /^[[:space:]]*#/ && $3 == \"swap\") print \"# kiln preflight --fix: \" $0; else print }}' \
                 /etc/fstab > /etc/fstab.kiln-new && cat /etc/fstab.kiln-new > /etc/fstab && rm -f /etc/fstab.kiln-new"
            ),
        ));
    }
    steps
}

fn bridge_nf_call_iptables(f: &Facts, _: Role) -> Vec<(String, String)> {
    let mut steps = vec![];
    if f.bridge_nf_call_iptables.is_none() {
        if !f.loadable_modules.contains("br_netfilter") {
            return steps; // nothing safe to do: the kernel has no such module
        }
        steps.push((
            "loaded br_netfilter and overlay: modprobe br_netfilter overlay".to_string(),
            "modprobe br_netfilter && modprobe overlay".to_string(),
        ));
    }
    steps.extend(write_file(MODULES_FILE, MODULES_CONF, &f.modules_conf));
    steps.extend(write_file(SYSCTL_FILE, SYSCTL_CONF, &f.sysctl_conf));
    steps.push((
        "set net.bridge.bridge-nf-call-iptables=1".to_string(),
        "sysctl -qw net.bridge.bridge-nf-call-iptables=1".to_string(),
    ));
    steps
}

fn ip_forward(f: &Facts, _: Role) -> Vec<(String, String)> {
    if f.ip_forward.is_none() {
        return vec![]; // no IPv4 forwarding in this kernel: nothing to set
    }
    // Only the keys kiln owns are applied (`sysctl --system` would re-apply every file, including ones
    // that set machine-wide values the operator may have changed since boot).
    let mut steps: Vec<_> = write_file(SYSCTL_FILE, SYSCTL_CONF, &f.sysctl_conf)
        .into_iter()
        .collect();
    steps.push((
        "set net.ipv4.ip_forward=1".to_string(),
        "sysctl -qw net.ipv4.ip_forward=1".to_string(),
    ));
    steps
}

fn firewalld(f: &Facts, role: Role) -> Vec<(String, String)> {
    firewall::firewalld_missing(&f.firewalld_ports, &firewall::needed_ports(role))
        .iter()
        .map(|n| {
            let p = n.spec();
            (
                format!("opened {p} in firewalld ({}; runtime and permanent)", n.why),
                format!(
                    "firewall-cmd -q --permanent --add-port={p} && firewall-cmd -q --add-port={p}"
                ),
            )
        })
        .collect()
}

fn ufw(f: &Facts, role: Role) -> Vec<(String, String)> {
    let Some(status) = &f.ufw_status else {
        return vec![];
    };
    firewall::ufw_missing(status, &firewall::needed_ports(role))
        .iter()
        .map(|n| {
            let p = n.ufw_spec();
            (
                format!("allowed {p} in ufw ({})", n.why),
                format!("ufw allow {p} >/dev/null"),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checks::good_facts;

    fn checks(steps: &[Step]) -> Vec<&str> {
        let mut v: Vec<&str> = steps.iter().map(|s| s.check).collect();
        v.dedup();
        v
    }

    #[test]
    fn a_good_host_needs_nothing() {
        assert_eq!(fix_plan(&good_facts(), Role::ControllerWorker), vec![]);
    }

    #[test]
    fn swap_is_turned_off_and_fstab_commented_with_a_backup() {
        let mut f = good_facts();
        f.swaps.push_str("/swap.img file 1024 0 -2\n");
        f.fstab.push_str("/swap.img none swap sw 0 0\n");
        let p = fix_plan(&f, Role::Worker);
        assert_eq!(p.len(), 2);
        assert_eq!(p[0].command, "swapoff -a");
        assert!(p[1].command.contains(FSTAB_BACKUP) && p[1].change.contains("1 swap line"));
        // Fixed: swap off, the line commented out → nothing more to do.
        f.swaps = good_facts().swaps;
        f.fstab =
            "UUID=1 / ext4 defaults 0 1\n# kiln preflight --fix: /swap.img none swap sw 0 0\n"
                .into();
        assert_eq!(fix_plan(&f, Role::Worker), vec![]);
    }

    #[test]
    fn sysctls_are_set_now_and_persisted_once() {
        let mut f = good_facts();
        f.ip_forward = Some("0".into());
        f.bridge_nf_call_iptables = Some("0".into());
        let p = fix_plan(&f, Role::Worker);
        let writes = p.iter().filter(|s| s.command.contains(SYSCTL_FILE)).count();
        assert_eq!(writes, 1, "{p:#?}");
        let cmds: Vec<&str> = p.iter().map(|s| s.command.as_str()).collect();
        assert!(cmds.contains(&"sysctl -qw net.ipv4.ip_forward=1"));
        assert!(cmds.contains(&"sysctl -qw net.bridge.bridge-nf-call-iptables=1"));
        assert!(!cmds.iter().any(|c| c.contains("--system")));
        assert_eq!(
            checks(&p),
            vec![
                "FileContent--proc-sys-net-bridge-bridge-nf-call-iptables",
                "FileContent--proc-sys-net-ipv4-ip_forward"
            ]
        );
    }

    #[test]
    fn br_netfilter_is_loaded_before_its_sysctl_and_not_when_the_kernel_lacks_it() {
        let mut f = good_facts();
        f.bridge_nf_call_iptables = None;
        let p = fix_plan(&f, Role::Worker);
        assert!(p[0].command.starts_with("modprobe br_netfilter"), "{p:#?}");
        assert!(p.iter().any(|s| s.command.contains(MODULES_FILE)));
        assert!(p
            .last()
            .unwrap()
            .command
            .contains("bridge-nf-call-iptables=1"));
        f.loadable_modules.clear();
        assert_eq!(fix_plan(&f, Role::Worker), vec![]);
    }

    #[test]
    fn firewalld_and_ufw_get_the_missing_ports_opened() {
        let mut f = good_facts();
        f.firewalld_running = true;
        f.firewalld_ports = "10250/tcp".into();
        let p = fix_plan(&f, Role::Worker);
        assert_eq!(p.len(), 1);
        assert!(p[0].command.contains("--add-port=30000-32767/tcp"));
        f.firewalld_ports = "10250/tcp 30000-32767/tcp".into();
        assert_eq!(fix_plan(&f, Role::Worker), vec![]);
        f.firewalld_running = false;
        f.ufw_status = Some("Status: active\nDefault: deny (incoming)\n".into());
        let p = fix_plan(&f, Role::Controller);
        let cmds: Vec<&str> = p.iter().map(|s| s.command.as_str()).collect();
        assert!(
            cmds.contains(&"ufw allow 2379:2380/tcp >/dev/null"),
            "{cmds:?}"
        );
        assert_eq!(p.len(), 4);
    }

    #[test]
    fn operator_rules_and_unfixable_checks_get_no_steps() {
        let mut f = good_facts();
        f.iptables_input = "-A INPUT -p tcp -m tcp --dport 10250 -j DROP\n".into();
        f.is_root = false;
        f.num_cpu = 1;
        assert_eq!(fix_plan(&f, Role::Controller), vec![]);
        assert!(!fixable("FirewallRules") && fixable("Swap"));
    }

    #[test]
    fn files_are_written_quoted_and_only_when_they_differ() {
        let (_, cmd) = write_file("/etc/x.conf", "it's\n", "").unwrap();
        assert_eq!(
            cmd,
            r"mkdir -p /etc && printf '%s' 'it'\''s
' > /etc/x.conf"
        );
        assert_eq!(write_file("/etc/x.conf", "it's\n", "it's\n"), None);
        // The sysctl file already in place (an earlier --fix): only the live value is set.
        let mut f = good_facts();
        f.ip_forward = Some("0".into());
        f.sysctl_conf = SYSCTL_CONF.into();
        let p = fix_plan(&f, Role::Worker);
        assert_eq!(p.len(), 1, "{p:#?}");
        assert_eq!(p[0].command, "sysctl -qw net.ipv4.ip_forward=1");
    }
}
