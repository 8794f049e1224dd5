//! The Pod Security Standards as data: every upstream check (k8s.io/pod-security-admission/policy)
//! with its id, level and the versions it changed at, and the evaluator that walks the table for a
//! level and version. The check functions live in `baseline.rs` and `restricted.rs`.

use std::collections::BTreeSet;
use std::sync::OnceLock;

use serde_json::Value;

use super::api::{Level, LevelVersion, Version};
use super::{baseline as b, restricted as r};

/// Why a check refused a pod: a short reason, always shown, and an optional detail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub reason: String,
    pub detail: String,
}

impl Violation {
    pub fn new(reason: &str, detail: String) -> Option<Violation> {
        Some(Violation {
            reason: reason.to_string(),
            detail,
        })
    }
}

/// A check of a pod's metadata and spec: None when allowed.
pub type CheckFn = fn(&Value, &Value) -> Option<Violation>;

/// One revision of a check, in force from policy version v1.`minimum` on.
pub struct VersionedCheck {
    pub minimum: u32,
    pub check: CheckFn,
    /// Baseline checks this (restricted) revision replaces with a stricter one of its own.
    pub overrides: &'static [&'static str],
}

pub struct Check {
    pub id: &'static str,
    pub level: Level,
    /// Strictly increasing minimum versions.
    pub versions: &'static [VersionedCheck],
}

const fn v(minimum: u32, check: CheckFn) -> VersionedCheck {
    VersionedCheck {
        minimum,
        check,
        overrides: &[],
    }
}

const fn over(minimum: u32, check: CheckFn, overrides: &'static [&'static str]) -> VersionedCheck {
    VersionedCheck {
        minimum,
        check,
        overrides,
    }
}

use Level::{Baseline, Restricted};

/// Every check of the current upstream policy.
pub static CHECKS: &[Check] = &[
    Check {
        id: "appArmorProfile",
        level: Baseline,
        versions: &[v(0, b::app_armor_profile)],
    },
    Check {
        id: "capabilities_baseline",
        level: Baseline,
        versions: &[v(0, b::capabilities)],
    },
    Check {
        id: "hostNamespaces",
        level: Baseline,
        versions: &[v(0, b::host_namespaces)],
    },
    Check {
        id: "hostPathVolumes",
        level: Baseline,
        versions: &[v(0, b::host_path_volumes)],
    },
    Check {
        id: "hostPorts",
        level: Baseline,
        versions: &[v(0, b::host_ports)],
    },
    Check {
        id: "hostProbesAndHostLifecycle",
        level: Baseline,
        versions: &[v(34, b::host_probes_and_lifecycle)],
    },
    Check {
        id: "privileged",
        level: Baseline,
        versions: &[v(0, b::privileged)],
    },
    Check {
        id: "procMount",
        level: Baseline,
        versions: &[
            v(0, b::proc_mount),
            v(35, b::proc_mount_unless_user_namespace),
        ],
    },
    Check {
        id: "seLinuxOptions",
        level: Baseline,
        versions: &[v(0, b::selinux_options_1_0), v(31, b::selinux_options_1_31)],
    },
    Check {
        id: "seccompProfile_baseline",
        level: Baseline,
        versions: &[v(0, b::seccomp_annotations), v(19, b::seccomp_profile)],
    },
    Check {
        id: "sysctls",
        level: Baseline,
        versions: &[
            v(0, b::sysctls_1_0),
            v(27, b::sysctls_1_27),
            v(29, b::sysctls_1_29),
            v(32, b::sysctls_1_32),
            v(37, b::sysctls_1_37),
        ],
    },
    Check {
        id: "windowsHostProcess",
        level: Baseline,
        versions: &[v(0, b::windows_host_process)],
    },
    Check {
        id: "allowPrivilegeEscalation",
        level: Restricted,
        versions: &[
            v(8, r::allow_privilege_escalation),
            v(25, r::allow_privilege_escalation_unless_windows),
        ],
    },
    Check {
        id: "capabilities_restricted",
        level: Restricted,
        versions: &[
            over(22, r::capabilities, &["capabilities_baseline"]),
            over(
                25,
                r::capabilities_unless_windows,
                &["capabilities_baseline"],
            ),
        ],
    },
    Check {
        id: "procMount_restricted",
        level: Restricted,
        versions: &[over(35, b::proc_mount, &["procMount"])],
    },
    Check {
        id: "restrictedVolumes",
        level: Restricted,
        versions: &[over(0, r::volumes, &["hostPathVolumes"])],
    },
    Check {
        id: "runAsNonRoot",
        level: Restricted,
        versions: &[
            v(0, r::run_as_non_root),
            v(35, r::run_as_non_root_unless_user_namespace),
        ],
    },
    Check {
        id: "runAsUser",
        level: Restricted,
        versions: &[
            v(23, r::run_as_user),
            v(35, r::run_as_user_unless_user_namespace),
        ],
    },
    Check {
        id: "seccompProfile_restricted",
        level: Restricted,
        versions: &[
            over(19, r::seccomp_profile, &["seccompProfile_baseline"]),
            over(
                25,
                r::seccomp_profile_unless_windows,
                &["seccompProfile_baseline"],
            ),
        ],
    },
];

/// The policy version this server evaluates `latest` (and any newer version) as: its own Kubernetes
/// minor, as a kube-apiserver of that minor knows no later revision of a check.
pub fn server_minor() -> u32 {
    kiln_common::version::KUBE_MINOR.parse().unwrap_or(u32::MAX)
}

/// The checks in upstream's evaluation (and message) order: baseline ids sorted, then
/// restricted ids sorted (byte order, as Go's sort).
fn ordered() -> &'static [&'static Check] {
    static ORDER: OnceLock<Vec<&'static Check>> = OnceLock::new();
    ORDER.get_or_init(|| {
        let mut all: Vec<&Check> = CHECKS.iter().collect();
        all.sort_by(|a, b| (a.level, a.id).cmp(&(b.level, b.id)));
        all
    })
}

/// The revision of `check` in force at `minor`, if it exists yet.
fn revision(check: &Check, minor: u32) -> Option<&VersionedCheck> {
    check.versions.iter().rev().find(|v| v.minimum <= minor)
}

/// The checks `lv` runs, given the newest policy version this server knows.
pub fn checks_for(lv: LevelVersion, newest: u32) -> Vec<&'static VersionedCheck> {
    if lv.level == Level::Privileged {
        return Vec::new();
    }
    let newest_defined = CHECKS
        .iter()
        .filter_map(|c| c.versions.last().map(|v| v.minimum))
        .max()
        .unwrap_or(0);
    let max = newest_defined.min(newest);
    let minor = match lv.version {
        Version::Minor(m) => m.min(max),
        Version::Latest => max,
    };
    let applicable: Vec<(&Check, &VersionedCheck)> = ordered()
        .iter()
        .filter(|c| c.level <= lv.level)
        .filter_map(|c| revision(c, minor).map(|v| (*c, v)))
        .collect();
    let overridden: BTreeSet<&str> = applicable
        .iter()
        .flat_map(|(_, v)| v.overrides.iter().copied())
        .collect();
    applicable
        .into_iter()
        .filter(|(c, _)| !overridden.contains(c.id))
        .map(|(_, v)| v)
        .collect()
}

/// Evaluates a pod (or pod template) against `lv`: the violations, in upstream's order.
pub fn evaluate(lv: LevelVersion, meta: &Value, spec: &Value) -> Vec<Violation> {
    checks_for(lv, server_minor())
        .into_iter()
        .filter_map(|c| (c.check)(meta, spec))
        .collect()
}

/// `reason, reason` (what namespace checks report per pod).
pub fn reasons(violations: &[Violation]) -> String {
    let r: Vec<&str> = violations.iter().map(|v| v.reason.as_str()).collect();
    r.join(", ")
}

/// `reason (detail), reason` (what refusals and warnings report).
pub fn details(violations: &[Violation]) -> String {
    let d: Vec<String> = violations
        .iter()
        .map(|v| {
            if v.detail.is_empty() {
                v.reason.clone()
            } else {
                format!("{} ({})", v.reason, v.detail)
            }
        })
        .collect();
    d.join(", ")
}

// Helpers the check functions share.

/// Init, regular and ephemeral containers, in that order (upstream's visitContainers).
pub fn containers(spec: &Value) -> impl Iterator<Item = &Value> {
    ["initContainers", "containers", "ephemeralContainers"]
        .into_iter()
        .flat_map(move |k| spec[k].as_array().into_iter().flatten())
}

pub fn name(c: &Value) -> String {
    c["name"].as_str().unwrap_or("").to_string()
}

pub fn plural<'a>(singular: &'a str, plural: &'a str, n: usize) -> &'a str {
    if n == 1 {
        singular
    } else {
        plural
    }
}

/// `"a", "b"` (upstream's joinQuote).
pub fn join_quote<S: AsRef<str>>(items: impl IntoIterator<Item = S>) -> String {
    let q: Vec<String> = items
        .into_iter()
        .map(|s| format!("\"{}\"", s.as_ref()))
        .collect();
    q.join(", ")
}

/// `container "a"` / `containers "a", "b"`.
pub fn containers_named(names: &[String]) -> String {
    format!(
        "{} {}",
        plural("container", "containers", names.len()),
        join_quote(names)
    )
}

/// Go's `%q` of a string.
pub fn go_quote(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

pub fn is_true(v: &Value) -> bool {
    v.as_bool() == Some(true)
}

/// `spec.os.name: windows`: the Linux-only restricted checks do not apply (1.25+).
pub fn is_windows(spec: &Value) -> bool {
    spec["os"]["name"].as_str() == Some("windows")
}

/// `hostUsers: false`: the pod runs in a user namespace (1.35+ relaxes some checks).
pub fn in_user_namespace(spec: &Value) -> bool {
    spec["hostUsers"].as_bool() == Some(false)
}

/// Which parts set a bad value: `pod and containers "a", "b"`.
pub fn setters(pod: bool, bad_containers: &[String]) -> Vec<String> {
    let mut s = Vec::new();
    if pod {
        s.push("pod".to_string());
    }
    if !bad_containers.is_empty() {
        s.push(containers_named(bad_containers));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn lv(level: Level, version: Version) -> LevelVersion {
        LevelVersion { level, version }
    }

    #[test]
    fn table_is_well_formed() {
        let mut ids = BTreeSet::new();
        for c in CHECKS {
            assert!(ids.insert(c.id), "duplicate id {}", c.id);
            assert_ne!(c.level, Level::Privileged, "{}", c.id);
            assert!(!c.versions.is_empty(), "{}", c.id);
            assert!(
                c.versions.windows(2).all(|w| w[0].minimum < w[1].minimum),
                "{}: versions must increase",
                c.id
            );
        }
        // Only restricted checks override, and only baseline ones.
        for c in CHECKS {
            for v in c.versions {
                for o in v.overrides {
                    assert_eq!(c.level, Level::Restricted, "{}", c.id);
                    let target = CHECKS.iter().find(|x| x.id == *o).expect(o);
                    assert_eq!(target.level, Level::Baseline, "{} overrides {o}", c.id);
                }
            }
        }
    }

    #[test]
    fn order_is_baseline_then_restricted_by_id() {
        let ids: Vec<&str> = ordered().iter().map(|c| c.id).collect();
        assert_eq!(
            ids,
            [
                "appArmorProfile",
                "capabilities_baseline",
                "hostNamespaces",
                "hostPathVolumes",
                "hostPorts",
                "hostProbesAndHostLifecycle",
                "privileged",
                "procMount",
                "seLinuxOptions",
                "seccompProfile_baseline",
                "sysctls",
                "windowsHostProcess",
                "allowPrivilegeEscalation",
                "capabilities_restricted",
                "procMount_restricted",
                "restrictedVolumes",
                "runAsNonRoot",
                "runAsUser",
                "seccompProfile_restricted",
            ]
        );
    }

    #[test]
    fn versions_gate_checks() {
        let n = |l, v, newest| checks_for(lv(l, v), newest).len();
        assert_eq!(n(Level::Privileged, Version::Latest, 33), 0);
        // Baseline at 1.33: all but the 1.34 host probes check.
        assert_eq!(n(Level::Baseline, Version::Latest, 33), 11);
        assert_eq!(n(Level::Baseline, Version::Minor(34), 40), 12);
        // Restricted at 1.33: 11 baseline - capabilities, hostPath, seccomp (overridden) + 6.
        assert_eq!(n(Level::Restricted, Version::Latest, 33), 8 + 6);
        // Before 1.8 no allowPrivilegeEscalation, before 1.22 no capabilities_restricted (and the
        // baseline capabilities check runs), before 1.19 no seccomp_restricted, 1.23 runAsUser.
        assert_eq!(n(Level::Restricted, Version::Minor(0), 33), 10 + 2);
        // A version newer than the server is the server's.
        assert_eq!(
            n(Level::Restricted, Version::Minor(99), 33),
            n(Level::Restricted, Version::Latest, 33)
        );
        // 1.35+: procMount_restricted replaces the baseline procMount.
        assert_eq!(n(Level::Restricted, Version::Latest, 40), 8 + 7);
    }

    #[test]
    fn versions_change_results() {
        let pod = json!({"containers": [{"name": "c", "securityContext": {
            "seLinuxOptions": {"type": "container_engine_t"}}}]});
        let meta = json!({});
        let base = |m| evaluate(lv(Level::Baseline, Version::Minor(m)), &meta, &pod);
        assert_eq!(
            base(30).len(),
            1,
            "container_engine_t is allowed from 1.31 on"
        );
        assert!(base(31).is_empty());
        // Windows pods skip the Linux-only restricted checks from 1.25 on.
        let win = json!({"os": {"name": "windows"}, "containers": [{"name": "c",
            "securityContext": {"runAsNonRoot": true}}]});
        let restricted = |m| evaluate(lv(Level::Restricted, Version::Minor(m)), &meta, &win);
        assert_eq!(
            restricted(24)
                .iter()
                .map(|v| v.reason.as_str())
                .collect::<Vec<_>>(),
            [
                "allowPrivilegeEscalation != false",
                "unrestricted capabilities",
                "seccompProfile"
            ]
        );
        assert!(restricted(25).is_empty());
    }

    #[test]
    fn aggregate_texts() {
        let v = vec![
            Violation {
                reason: "a".into(),
                detail: "x".into(),
            },
            Violation {
                reason: "b".into(),
                detail: "".into(),
            },
        ];
        assert_eq!(reasons(&v), "a, b");
        assert_eq!(details(&v), "a (x), b");
        assert_eq!(go_quote("a\"b\n"), "\"a\\\"b\\n\"");
    }
}
