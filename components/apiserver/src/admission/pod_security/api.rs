//! PodSecurity's vocabulary: levels, policy versions, the namespace labels that choose them, and
//! how a namespace's labels and the configured defaults resolve to the policy evaluated (upstream's
//! k8s.io/pod-security-admission/api).

use std::collections::BTreeMap;
use std::fmt;

use crate::status::Cause;

/// The prefix of every PodSecurity label and audit annotation.
pub const PREFIX: &str = "pod-security.kubernetes.io/";
pub const ENFORCE_LEVEL: &str = "pod-security.kubernetes.io/enforce";
pub const ENFORCE_VERSION: &str = "pod-security.kubernetes.io/enforce-version";
pub const AUDIT_LEVEL: &str = "pod-security.kubernetes.io/audit";
pub const AUDIT_VERSION: &str = "pod-security.kubernetes.io/audit-version";
pub const WARN_LEVEL: &str = "pod-security.kubernetes.io/warn";
pub const WARN_VERSION: &str = "pod-security.kubernetes.io/warn-version";

const LEVEL_ERROR: &str = "must be one of privileged, baseline, restricted";
const VERSION_ERROR: &str = "must be \"latest\" or \"v1.x\"";

/// A Pod Security Standards level, least strict first (so `Ord` compares strictness).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    Privileged,
    Baseline,
    Restricted,
}

impl Level {
    /// Upstream's ParseLevel: an unknown level is an error, and restricted is what is enforced.
    pub fn parse(s: &str) -> Result<Level, &'static str> {
        match s {
            "privileged" => Ok(Level::Privileged),
            "baseline" => Ok(Level::Baseline),
            "restricted" => Ok(Level::Restricted),
            _ => Err(LEVEL_ERROR),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Level::Privileged => "privileged",
            Level::Baseline => "baseline",
            Level::Restricted => "restricted",
        }
    }
}

/// A policy version: `v1.<minor>` or `latest` (newer than every numbered version).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Version {
    Minor(u32),
    Latest,
}

impl Version {
    /// Upstream's ParseVersion: `latest` or `v1.x`; anything else is an error, and latest is used.
    pub fn parse(s: &str) -> Result<Version, &'static str> {
        if s == "latest" {
            return Ok(Version::Latest);
        }
        let minor = s.strip_prefix("v1.").ok_or(VERSION_ERROR)?;
        // `0` or digits without a leading zero, as upstream's `^v1\.([0-9]|[1-9][0-9]*)$`.
        let canonical = minor == "0" || (!minor.starts_with('0') && !minor.is_empty());
        if !canonical || !minor.bytes().all(|b| b.is_ascii_digit()) {
            return Err(VERSION_ERROR);
        }
        minor.parse().map(Version::Minor).map_err(|_| VERSION_ERROR)
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Version::Latest => f.write_str("latest"),
            Version::Minor(m) => write!(f, "v1.{m}"),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LevelVersion {
    pub level: Level,
    pub version: Version,
}

impl LevelVersion {
    /// Both privileged, or the same level and version.
    pub fn equivalent(&self, other: &LevelVersion) -> bool {
        (self.level == Level::Privileged && other.level == Level::Privileged) || self == other
    }
}

impl fmt::Display for LevelVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.level.as_str(), self.version)
    }
}

/// The level and version of each mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    pub enforce: LevelVersion,
    pub audit: LevelVersion,
    pub warn: LevelVersion,
}

impl Policy {
    /// Upstream's default: privileged:latest for every mode.
    pub const PRIVILEGED: Policy = Policy {
        enforce: LevelVersion {
            level: Level::Privileged,
            version: Version::Latest,
        },
        audit: LevelVersion {
            level: Level::Privileged,
            version: Version::Latest,
        },
        warn: LevelVersion {
            level: Level::Privileged,
            version: Version::Latest,
        },
    };

    pub fn fully_privileged(&self) -> bool {
        [self.enforce, self.audit, self.warn]
            .iter()
            .all(|m| m.level == Level::Privileged)
    }

    pub fn equivalent(&self, other: &Policy) -> bool {
        self.enforce.equivalent(&other.enforce)
            && self.audit.equivalent(&other.audit)
            && self.warn.equivalent(&other.warn)
    }
}

fn label_error(label: &str, value: &str, detail: &str) -> Cause {
    Cause::invalid(
        &format!("metadata.labels[{label}]"),
        &serde_json::Value::String(value.to_string()),
        detail,
    )
}

/// Resolves a namespace's labels to its policy, starting from `defaults`. A policy is always
/// returned; a bad level enforces restricted (and is privileged for audit and warn, which fail
/// open), a bad version is latest; the errors name each bad label.
pub fn policy_to_evaluate(
    labels: &BTreeMap<String, String>,
    defaults: Policy,
) -> (Policy, Vec<Cause>) {
    let mut p = defaults;
    let mut errs = Vec::new();
    if labels.is_empty() {
        return (p, errs);
    }
    let mut has_enforce_level = false;
    if let Some(v) = labels.get(ENFORCE_LEVEL) {
        match Level::parse(v) {
            Ok(l) => {
                p.enforce.level = l;
                has_enforce_level = true;
            }
            Err(e) => {
                p.enforce.level = Level::Restricted;
                errs.push(label_error(ENFORCE_LEVEL, v, e));
            }
        }
    }
    if let Some(v) = labels.get(ENFORCE_VERSION) {
        p.enforce.version = version_or_latest(v, ENFORCE_VERSION, &mut errs);
    }
    if let Some(v) = labels.get(AUDIT_LEVEL) {
        p.audit.level = level_or_privileged(v, AUDIT_LEVEL, &mut errs);
    }
    if let Some(v) = labels.get(AUDIT_VERSION) {
        p.audit.version = version_or_latest(v, AUDIT_VERSION, &mut errs);
    }
    let has_warn_level = labels.contains_key(WARN_LEVEL);
    if let Some(v) = labels.get(WARN_LEVEL) {
        p.warn.level = level_or_privileged(v, WARN_LEVEL, &mut errs);
    }
    let has_warn_version = labels.contains_key(WARN_VERSION);
    if let Some(v) = labels.get(WARN_VERSION) {
        p.warn.version = version_or_latest(v, WARN_VERSION, &mut errs);
    }
    // An explicit enforce level stricter than warn also warns (so kubectl users see why a
    // workload's pods will be refused), unless warn was set explicitly.
    if !has_warn_level && has_enforce_level && p.enforce.level > p.warn.level {
        p.warn.level = p.enforce.level;
        if !has_warn_version {
            p.warn.version = p.enforce.version;
        }
    }
    (p, errs)
}

fn level_or_privileged(v: &str, label: &str, errs: &mut Vec<Cause>) -> Level {
    Level::parse(v).unwrap_or_else(|e| {
        errs.push(label_error(label, v, e));
        Level::Privileged
    })
}

fn version_or_latest(v: &str, label: &str, errs: &mut Vec<Cause>) -> Version {
    Version::parse(v).unwrap_or_else(|e| {
        errs.push(label_error(label, v, e));
        Version::Latest
    })
}

/// The namespace labels of an object (`metadata.labels`), strings only.
pub fn labels_of(obj: &serde_json::Value) -> BTreeMap<String, String> {
    obj["metadata"]["labels"]
        .as_object()
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn versions_parse_like_upstream() {
        for (s, want) in [
            ("latest", Ok(Version::Latest)),
            ("v1.0", Ok(Version::Minor(0))),
            ("v1.25", Ok(Version::Minor(25))),
            ("v1.025", Err(VERSION_ERROR)),
            ("v2.1", Err(VERSION_ERROR)),
            ("1.25", Err(VERSION_ERROR)),
            ("v1.", Err(VERSION_ERROR)),
            ("v1.x", Err(VERSION_ERROR)),
        ] {
            assert_eq!(Version::parse(s), want, "{s}");
        }
        assert!(Version::Minor(99) < Version::Latest);
        assert_eq!(Version::Minor(7).to_string(), "v1.7");
    }

    #[test]
    fn labels_resolve_with_defaults_and_fail_closed_for_enforce() {
        let (p, errs) = policy_to_evaluate(&labels(&[]), Policy::PRIVILEGED);
        assert_eq!(p, Policy::PRIVILEGED);
        assert!(errs.is_empty());

        // enforce alone also warns at that level and version.
        let (p, errs) = policy_to_evaluate(
            &labels(&[(ENFORCE_LEVEL, "baseline"), (ENFORCE_VERSION, "v1.24")]),
            Policy::PRIVILEGED,
        );
        assert!(errs.is_empty());
        assert_eq!(p.enforce.to_string(), "baseline:v1.24");
        assert_eq!(p.warn.to_string(), "baseline:v1.24");
        assert_eq!(p.audit.to_string(), "privileged:latest");

        // An explicit warn level stays.
        let (p, _) = policy_to_evaluate(
            &labels(&[(ENFORCE_LEVEL, "restricted"), (WARN_LEVEL, "baseline")]),
            Policy::PRIVILEGED,
        );
        assert_eq!(p.warn.level, Level::Baseline);

        let (p, errs) = policy_to_evaluate(
            &labels(&[
                (ENFORCE_LEVEL, "bogus"),
                (AUDIT_LEVEL, "bogus"),
                (WARN_VERSION, "v2"),
            ]),
            Policy::PRIVILEGED,
        );
        assert_eq!(p.enforce.level, Level::Restricted);
        assert_eq!(p.audit.level, Level::Privileged);
        assert_eq!(
            p.warn.level,
            Level::Privileged,
            "no warn default from a bad enforce"
        );
        let texts: Vec<String> = errs
            .iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect();
        assert_eq!(
            texts,
            [
                "metadata.labels[pod-security.kubernetes.io/enforce]: Invalid value: \"bogus\": must be one of privileged, baseline, restricted",
                "metadata.labels[pod-security.kubernetes.io/audit]: Invalid value: \"bogus\": must be one of privileged, baseline, restricted",
                "metadata.labels[pod-security.kubernetes.io/warn-version]: Invalid value: \"v2\": must be \"latest\" or \"v1.x\"",
            ]
        );
    }
}
