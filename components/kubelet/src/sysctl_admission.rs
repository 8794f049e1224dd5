//! The kubelet's sysctl admission (upstream's pkg/kubelet/sysctl): a pod may set only the sysctls of
//! the safe set (namespaced and isolated: they cannot touch other pods) and those the admin allows with
//! `--allowed-unsafe-sysctls` (names, or prefixes ending in `*`). Every allowed name must be known to be
//! namespaced (ipc or net); a pod sharing the host's network or IPC namespace may not set that
//! namespace's sysctls. A refused pod fails with reason `SysctlForbidden`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;

/// Upstream's reason for a refused pod.
pub const REASON: &str = "SysctlForbidden";

/// Upstream's safe sysctls (Kubernetes 1.33), each with the kernel that namespaced it (None: always).
/// A safe sysctl the running kernel does not namespace yet is dropped, as upstream does.
pub const SAFE_SYSCTLS: &[(&str, Option<(u32, u32)>)] = &[
    ("kernel.shm_rmid_forced", None),
    ("net.ipv4.ip_local_port_range", None),
    ("net.ipv4.tcp_syncookies", None),
    ("net.ipv4.ping_group_range", None),
    ("net.ipv4.ip_unprivileged_port_start", None),
    ("net.ipv4.ip_local_reserved_ports", Some((3, 16))),
    ("net.ipv4.tcp_keepalive_time", Some((4, 5))),
    ("net.ipv4.tcp_fin_timeout", Some((4, 6))),
    ("net.ipv4.tcp_keepalive_intvl", Some((4, 5))),
    ("net.ipv4.tcp_keepalive_probes", Some((4, 5))),
    ("net.ipv4.tcp_rmem", None),
    ("net.ipv4.tcp_wmem", None),
];

/// The kernel namespace a sysctl belongs to, as upstream's component-helpers know them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Namespace {
    Ipc,
    Net,
}

impl Namespace {
    fn as_str(self) -> &'static str {
        match self {
            Namespace::Ipc => "ipc",
            Namespace::Net => "net",
        }
    }
}

/// Whole names, then prefixes, that a namespace owns (upstream's NamespacedBy tables).
const NAMESPACED: &[(&str, Namespace)] = &[("kernel.sem", Namespace::Ipc)];
const NAMESPACED_PREFIXES: &[(&str, Namespace)] = &[
    ("kernel.shm", Namespace::Ipc),
    ("kernel.msg", Namespace::Ipc),
    ("fs.mqueue.", Namespace::Ipc),
    ("net.", Namespace::Net),
];

/// The namespace of `name` (dotted), None when it is not known to be namespaced.
pub fn namespaced_by(name: &str) -> Option<Namespace> {
    if let Some((_, ns)) = NAMESPACED.iter().find(|(n, _)| *n == name) {
        return Some(*ns);
    }
    NAMESPACED_PREFIXES
        .iter()
        .find(|(p, _)| name.starts_with(p))
        .map(|(_, ns)| *ns)
}

/// Upstream's ConvertSysctlVariableToDotsSeparator: a name written with slashes
/// (`net/ipv4/conf/eth0.100/forwarding`) becomes dotted, its dots turned to slashes.
pub fn to_dots(name: &str) -> String {
    match name.find(['.', '/']) {
        Some(i) if name.as_bytes()[i] == b'/' => name
            .chars()
            .map(|c| match c {
                '.' => '/',
                '/' => '.',
                c => c,
            })
            .collect(),
        _ => name.to_string(),
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SysctlError {
    /// Upstream's texts (NewAllowlist); the kubelet does not start with such a pattern.
    #[error("sysctl {0:?} must have at most 253 characters and match regex {PATTERN_FMT}")]
    BadPattern(String),
    #[error("the sysctls {0:?} are not known to be namespaced")]
    PrefixNotNamespaced(String),
    #[error("the sysctl {0:?} are not known to be namespaced")]
    NotNamespaced(String),
}

/// Upstream's SysctlContainSlashPatternFmt (policy validation), as its error names it.
const PATTERN_FMT: &str = "([a-z0-9]([-_a-z0-9]*[a-z0-9])?[\\./])*([a-z0-9][-_a-z0-9]*)?[a-z0-9*]";

/// Upstream's IsValidSysctlPattern: segments `[a-z0-9]([-_a-z0-9]*[a-z0-9])?` split by `.` or `/`,
/// the last `([a-z0-9][-_a-z0-9]*)?[a-z0-9*]` (so `net.*` and `net.ipv4.tcp_*`), at most 253 bytes.
fn valid_pattern(p: &str) -> bool {
    let inner = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-' || *c == b'_';
    let alnum = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    let segment =
        |s: &[u8]| !s.is_empty() && alnum(s[0]) && alnum(s[s.len() - 1]) && s.iter().all(inner);
    let last = |s: &[u8]| match s.split_last() {
        None => false,
        Some((end, [])) => alnum(*end) || *end == b'*',
        Some((end, head)) => {
            (alnum(*end) || *end == b'*') && alnum(head[0]) && head.iter().all(inner)
        }
    };
    let parts: Vec<&[u8]> = p.as_bytes().split(|c| *c == b'.' || *c == b'/').collect();
    let Some((tail, head)) = parts.split_last() else {
        return false;
    };
    p.len() <= 253 && head.iter().all(|s| segment(s)) && last(tail)
}

/// The sysctls a pod may set here, with their namespaces: the safe set plus the allowed unsafe ones.
#[derive(Debug, Clone, Default)]
pub struct Allowlist {
    names: BTreeMap<String, Namespace>,
    prefixes: BTreeMap<String, Namespace>,
}

impl Allowlist {
    /// The safe set for `kernel` (major, minor; None: unknown, only the always-safe ones) and the
    /// patterns of `--allowed-unsafe-sysctls`.
    pub fn new(
        kernel: Option<(u32, u32)>,
        unsafe_patterns: &[String],
    ) -> Result<Self, SysctlError> {
        let safe = SAFE_SYSCTLS
            .iter()
            .filter(|(_, min)| min.is_none_or(|m| kernel.is_some_and(|k| k >= m)))
            .map(|(n, _)| n.to_string());
        let mut w = Allowlist::default();
        for p in safe.chain(unsafe_patterns.iter().cloned()) {
            if !valid_pattern(&p) {
                return Err(SysctlError::BadPattern(p));
            }
            let p = to_dots(&p);
            match p.strip_suffix('*') {
                Some(prefix) => {
                    let ns = namespaced_by(prefix)
                        .ok_or_else(|| SysctlError::PrefixNotNamespaced(p.clone()))?;
                    w.prefixes.insert(prefix.to_string(), ns);
                }
                None => {
                    let ns =
                        namespaced_by(&p).ok_or_else(|| SysctlError::NotNamespaced(p.clone()))?;
                    w.names.insert(p, ns);
                }
            }
        }
        Ok(w)
    }

    /// The running kernel's allowlist (`/proc/sys/kernel/osrelease`).
    pub fn for_host(unsafe_patterns: &[String]) -> Result<Self, SysctlError> {
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        Allowlist::new(kernel_version(&release), unsafe_patterns)
    }

    /// Upstream's validateSysctl: Err carries the reason after "forbidden sysctl: ".
    fn check(&self, name: &str, host_net: bool, host_ipc: bool) -> Result<(), String> {
        let name = to_dots(name);
        let ns = self.names.get(&name).copied().or_else(|| {
            self.prefixes
                .iter()
                .find(|(p, _)| name.starts_with(p.as_str()))
                .map(|(_, ns)| *ns)
        });
        match ns {
            None => Err(format!("{name:?} not allowlisted")),
            Some(ns @ Namespace::Ipc) if host_ipc => Err(format!(
                "{name:?} not allowed with host {} enabled",
                ns.as_str()
            )),
            Some(ns @ Namespace::Net) if host_net => Err(format!(
                "{name:?} not allowed with host {} enabled",
                ns.as_str()
            )),
            Some(_) => Ok(()),
        }
    }

    /// Upstream's Admit: None admits the pod, Some is the refusal message (`forbidden sysctl: ...`)
    /// for its first sysctl that is not allowed.
    pub fn admit(&self, pod: &Pod) -> Option<String> {
        let spec = pod.spec.as_ref()?;
        let sysctls = spec.security_context.as_ref()?.sysctls.as_ref()?;
        let host_net = spec.host_network.unwrap_or(false);
        let host_ipc = spec.host_ipc.unwrap_or(false);
        sysctls.iter().find_map(|s| {
            self.check(&s.name, host_net, host_ipc)
                .err()
                .map(|e| format!("forbidden sysctl: {e}"))
        })
    }
}

/// `6.1.0-18-amd64` → (6, 1).
pub fn kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.trim().split(|c: char| !c.is_ascii_digit());
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

#[cfg(test)]
#[path = "sysctl_admission_tests.rs"]
mod tests;
