//! `spec.store.backup`: scheduled snapshot bundles, installed by `kiln init` (phase backup-schedule) exactly
//! as `kiln snapshot schedule` installs them.
//!
//! ```yaml
//! store:
//!   backup:
//!     schedule: "0 */6 * * *"      # robfig cron as CronJobs read it: 5 fields, @daily…, @every 30m, TZ=…
//!     retention: 7                 # bundles kept on each controller, and per controller in the bucket
//!     destination:
//!       dir: /var/backups/kiln     # on each controller (default); always written first
//!       s3:                        # and uploaded here
//!         endpoint: https://s3.example.net:9000
//!         bucket: kiln-backups
//!         prefix: prod             # keys are <prefix>/<host>/<bundle>.kiln-bundle.tar
//!         region: us-east-1
//!         credentialsFile: ~/.kiln/s3.credentials   # 0600, on the operator's machine; else AWS_* env
//!     drill:                       # routine restore drills (default: none)
//!       every: 4                   # drill the newest bundle once 4 new ones exist since the last drill
//! ```
//!
//! Drills run where scratch hosts can be made: a `kiln lab` on the operator's machine, by
//! `kiln drill -f cluster.yaml --scheduled` from the operator's cron or timer (a controller cannot make
//! lab hosts); `every` may not exceed `retention`, since only kept bundles can be counted.
//!
//! The secret itself never appears here: `credentialsFile` names a file (AWS shared-credentials format,
//! mode 0600) that `init` copies to each controller as /etc/kiln/s3.credentials (0600); without it the
//! operator's `AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY` are written there instead.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::validate::Problem;
use super::ClusterConfig;

/// Where scheduled bundles go. The controller's own directory is always written (a restore after losing
/// the bucket still has them); `s3` adds an off-host copy.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BackupDestination {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dir: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub s3: Option<S3Destination>,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct S3Destination {
    /// `http(s)://host[:port]` of an S3-compatible service; empty = AWS for `region`.
    #[serde(default)]
    pub endpoint: String,
    pub bucket: String,
    #[serde(default)]
    pub prefix: String,
    #[serde(default = "default_region")]
    pub region: String,
    /// A file on the operator's machine (relative to cluster.yaml's directory), mode 0600.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials_file: Option<PathBuf>,
}

/// `spec.store.backup.drill`: how often the schedule's newest bundle is proved restorable.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DrillSchedule {
    /// Drill the newest bundle once this many bundles were taken since the last drill.
    pub every: u32,
}

fn default_region() -> String {
    "us-east-1".into()
}

/// S3's bucket naming rules (the ones a typo breaks): 3–63 of a-z 0-9 . -, starting and ending alphanumeric.
pub fn check_bucket(b: &str) -> Result<(), String> {
    let ok_char = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '.' || c == '-';
    let edge = |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    if !(3..=63).contains(&b.len()) || !b.chars().all(ok_char) {
        return Err("expected 3 to 63 characters of a-z, 0-9, '.' and '-'".into());
    }
    if !edge(b.chars().next()) || !edge(b.chars().last()) {
        return Err("must start and end with a letter or digit".into());
    }
    Ok(())
}

pub(super) fn validate(c: &ClusterConfig, out: &mut Vec<Problem>) {
    let Some(b) = &c.spec.store.backup else {
        return;
    };
    let at = "spec.store.backup";
    let mut push = |field: &str, message: String| {
        out.push(Problem {
            path: format!("{at}.{field}"),
            message,
        })
    };
    if let Err(e) = kiln_common::cron::parse_standard(&b.schedule) {
        push(
            "schedule",
            format!("invalid schedule '{}': {e}", b.schedule),
        );
    }
    if b.retention == 0 {
        push("retention", "must keep at least 1 snapshot".into());
    }
    if let Some(d) = &b.drill {
        if d.every == 0 {
            push("drill.every", "must be at least 1".into());
        } else if d.every > b.retention {
            push(
                "drill.every",
                format!(
                    "{} is more than retention ({}): only kept bundles can be counted",
                    d.every, b.retention
                ),
            );
        }
    }
    let Some(d) = &b.destination else {
        return;
    };
    if let Some(dir) = &d.dir {
        if !dir.starts_with('/') || dir.trim_end_matches('/').is_empty() {
            push(
                "destination.dir",
                format!("'{dir}': expected an absolute directory on the controllers, not /"),
            );
        }
    }
    let Some(s3) = &d.s3 else {
        return;
    };
    if let Err(why) = check_bucket(&s3.bucket) {
        push(
            "destination.s3.bucket",
            format!("invalid bucket '{}': {why}", s3.bucket),
        );
    }
    let scheme = s3.endpoint.starts_with("http://") || s3.endpoint.starts_with("https://");
    if !s3.endpoint.is_empty() && !scheme {
        push(
            "destination.s3.endpoint",
            format!(
                "'{}': expected http://host[:port] or https://host[:port]",
                s3.endpoint
            ),
        );
    }
    if s3.prefix.starts_with('/') || s3.prefix.split('/').any(|p| p == "..") {
        push(
            "destination.s3.prefix",
            format!(
                "'{}': expected a relative key prefix without '..'",
                s3.prefix
            ),
        );
    }
    if s3.region.trim().is_empty() {
        push("destination.s3.region", "must name a region".into());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problems(backup: &str) -> Vec<String> {
        let text = format!(
            "apiVersion: kiln.dev/v1alpha1\nkind: Cluster\nmetadata: {{name: t}}\nspec:\n  hosts:\n    - {{name: c1, address: 10.0.0.1, role: controller}}\n  store:\n    backup:\n{backup}"
        );
        let c: ClusterConfig = serde_norway::from_str(&text).expect(&text);
        let mut out = vec![];
        validate(&c, &mut out);
        out.into_iter()
            .map(|p| format!("{}: {}", p.path, p.message))
            .collect()
    }

    #[test]
    fn a_declared_backup_is_checked_field_by_field() {
        let ok = "      schedule: '@every 1m'\n      retention: 3\n      destination:\n        dir: /var/backups/kiln\n        s3: {endpoint: 'http://10.250.0.1:9000', bucket: kiln-backups, prefix: lab, credentialsFile: s3.creds}\n";
        assert_eq!(problems(ok), Vec::<String>::new());
        let drills = "      schedule: '@every 1m'\n      retention: 3\n      drill: {every: 4}\n";
        assert_eq!(
            problems(drills),
            ["spec.store.backup.drill.every: 4 is more than retention (3): only kept bundles can be counted"]
        );
        assert_eq!(
            problems("      schedule: '@daily'\n      drill: {every: 0}\n"),
            ["spec.store.backup.drill.every: must be at least 1"]
        );
        assert_eq!(
            problems("      schedule: '@daily'\n      retention: 7\n      drill: {every: 7}\n"),
            Vec::<String>::new()
        );
        let bad = "      schedule: '* * *'\n      retention: 0\n      destination:\n        dir: backups\n        s3: {endpoint: '10.250.0.1:9000', bucket: Kiln_Backups, prefix: /abs, region: ''}\n";
        assert_eq!(
            problems(bad),
            [
                "spec.store.backup.schedule: invalid schedule '* * *': expected exactly 5 fields, found 3: [* * *]",
                "spec.store.backup.retention: must keep at least 1 snapshot",
                "spec.store.backup.destination.dir: 'backups': expected an absolute directory on the controllers, not /",
                "spec.store.backup.destination.s3.bucket: invalid bucket 'Kiln_Backups': expected 3 to 63 characters of a-z, 0-9, '.' and '-'",
                "spec.store.backup.destination.s3.endpoint: '10.250.0.1:9000': expected http://host[:port] or https://host[:port]",
                "spec.store.backup.destination.s3.prefix: '/abs': expected a relative key prefix without '..'",
                "spec.store.backup.destination.s3.region: must name a region",
            ]
        );
        // Credentials themselves have no field: a key written into cluster.yaml is refused.
        let secret = "      schedule: '@daily'\n      destination:\n        s3: {bucket: kiln-backups, secretAccessKey: x}\n";
        let text = format!("apiVersion: kiln.dev/v1alpha1\nkind: Cluster\nmetadata: {{name: t}}\nspec:\n  hosts: []\n  store:\n    backup:\n{secret}");
        assert!(serde_norway::from_str::<ClusterConfig>(&text).is_err());
    }

    #[test]
    fn bucket_names() {
        for ok in ["kiln-backups", "a.b.c", "b12"] {
            assert!(check_bucket(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "ab",
            "Kiln",
            "-kiln",
            "kiln-",
            "kiln_backups",
            &"x".repeat(64),
        ] {
            assert!(check_bucket(bad).is_err(), "{bad}");
        }
    }
}
