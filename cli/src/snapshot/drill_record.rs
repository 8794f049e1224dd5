//! The durable record of restore drills (issue #26): `<stateDir>/drills.json` on the operator's machine,
//! where `kiln drill` runs (a drill makes scratch lab hosts, which a controller cannot). Each drill appends
//! one entry; `kiln status` reads it for the last verified-restorable bundle, and `kiln drill --scheduled`
//! for the every-N decision.
//!
//! RPO and RTO as DR practice defines them: RPO is the data-loss window, the time since the newest bundle
//! known to restore (so it grows until the next drill passes, and `kiln status` computes it at read time);
//! RTO is the restore time a drill measured (drill start → restored API answering with the data verified).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::drill::DrillReport;

/// Entries kept in the file: enough history to see a trend, never an ever-growing file.
const KEEP: usize = 50;

#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Parse { path: PathBuf, message: String },
}

/// One drill, pass or fail.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DrillRecord {
    /// The bundle's file name (its identity across the controller's directory, the bucket and fetches).
    pub bundle: String,
    /// When the bundle's snapshot was taken (RFC 3339, from bundle.json).
    pub taken_at: String,
    /// When the drill finished (RFC 3339).
    pub verified_at: String,
    pub objects_compared: usize,
    pub objects_verified: usize,
    /// The bundle's age when the drill finished: the RPO this bundle offered at that moment.
    pub rpo_seconds: i64,
    /// Measured restore time; absent when the drill never reached verified data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rto_seconds: Option<f64>,
    pub passed: bool,
    /// Why it failed (the report's first problems); empty when it passed.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DrillLog {
    /// Oldest first.
    pub drills: Vec<DrillRecord>,
}

impl DrillLog {
    pub fn last(&self) -> Option<&DrillRecord> {
        self.drills.last()
    }

    /// The newest bundle a drill proved restorable (by when it was taken, not when it was drilled).
    pub fn last_verified(&self) -> Option<&DrillRecord> {
        self.drills
            .iter()
            .filter(|d| d.passed)
            .max_by_key(|d| parse_time(&d.taken_at).map(|t| t.unix_timestamp()))
    }

    fn push(&mut self, r: DrillRecord) {
        self.drills.push(r);
        let extra = self.drills.len().saturating_sub(KEEP);
        self.drills.drain(..extra);
    }
}

pub fn path(state_dir: &Path) -> PathBuf {
    state_dir.join("drills.json")
}

/// The log, empty when no drill ever ran.
pub fn load(file: &Path) -> Result<DrillLog, RecordError> {
    let text = match std::fs::read_to_string(file) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(DrillLog::default()),
        Err(source) => {
            return Err(RecordError::Io {
                what: "reading",
                path: file.into(),
                source,
            })
        }
    };
    serde_json::from_str(&text).map_err(|e| RecordError::Parse {
        path: file.into(),
        message: e.to_string(),
    })
}

/// Append `r` and write the log through a temporary file renamed over it, so a crash mid-write leaves
/// the previous log, never half of one.
pub fn append(file: &Path, r: DrillRecord) -> Result<(), RecordError> {
    let mut log = load(file)?;
    log.push(r);
    let io = |what: &'static str| {
        let path = file.to_path_buf();
        move |source| RecordError::Io { what, path, source }
    };
    if let Some(dir) = file.parent() {
        std::fs::create_dir_all(dir).map_err(io("creating the directory of"))?;
    }
    let tmp = file.with_extension("json.tmp");
    let text = serde_json::to_string_pretty(&log).map_err(|e| RecordError::Parse {
        path: file.into(),
        message: e.to_string(),
    })?;
    {
        use std::io::Write;
        let mut f = std::fs::File::create(&tmp).map_err(io("writing"))?;
        f.write_all(text.as_bytes()).map_err(io("writing"))?;
        f.sync_all().map_err(io("syncing"))?;
    }
    std::fs::rename(&tmp, file).map_err(io("renaming onto"))
}

fn rfc3339(t: time::OffsetDateTime) -> String {
    t.format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

/// An RFC 3339 time to the second (bundle.json's carry nanoseconds), for reading.
fn to_second(s: &str) -> String {
    parse_time(s)
        .and_then(|t| {
            t.to_offset(time::UtcOffset::UTC)
                .format(time::macros::format_description!(
                    "[year]-[month]-[day]T[hour]:[minute]:[second]Z"
                ))
                .ok()
        })
        .unwrap_or_else(|| s.to_string())
}

fn parse_time(s: &str) -> Option<time::OffsetDateTime> {
    time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339).ok()
}

/// The record of a finished drill.
pub fn from_report(r: &DrillReport, finished: time::OffsetDateTime) -> DrillRecord {
    let bundle = Path::new(&r.bundle)
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_else(|| r.bundle.clone());
    let rpo = parse_time(&r.snapshot_created)
        .map(|c| (finished - c).whole_seconds())
        .unwrap_or(-1);
    let mut reason: Vec<&str> = r.problems.iter().take(3).map(String::as_str).collect();
    if !r.passed && reason.is_empty() {
        reason.push("the scratch lab was not torn down");
    }
    DrillRecord {
        bundle,
        taken_at: r.snapshot_created.clone(),
        verified_at: rfc3339(finished),
        objects_compared: r.objects_recorded,
        objects_verified: r.objects_verified,
        rpo_seconds: rpo,
        rto_seconds: r.rto_seconds,
        passed: r.passed,
        reason: if r.passed {
            String::new()
        } else {
            reason.join("; ")
        },
    }
}

/// How many bundles were taken after the last drilled one. `newest_first` are the source's bundle file
/// names, newest first; a drilled bundle no longer among them (rotated away) counts them all.
pub fn bundles_since(newest_first: &[String], last_drilled: Option<&str>) -> usize {
    match last_drilled.and_then(|d| newest_first.iter().position(|n| n == d)) {
        Some(i) => i,
        None => newest_first.len(),
    }
}

/// Whether a scheduled drill is due: `every` bundles since the last drill (passed or not: a failure is
/// retried with the next N, not on every run), or no drill yet and a bundle to drill.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Due {
    Yes,
    No { since: usize, every: u32 },
}

pub fn due(newest_first: &[String], log: &DrillLog, every: u32) -> Due {
    if newest_first.is_empty() {
        return Due::No { since: 0, every };
    }
    let since = bundles_since(newest_first, log.last().map(|d| d.bundle.as_str()));
    if log.last().is_none() || since >= every.max(1) as usize {
        Due::Yes
    } else {
        Due::No { since, every }
    }
}

fn human(secs: i64) -> String {
    match secs.max(0) {
        s if s < 120 => format!("{s}s"),
        s if s < 7200 => format!("{}m", s / 60),
        s if s < 172_800 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}

/// `kiln status`'s lines about drills. `allowed`: how old the newest verified bundle may get before the
/// schedule is overdue (2 × backup interval × drill.every), when drills are scheduled.
pub fn status_lines(
    log: &DrillLog,
    now: time::OffsetDateTime,
    allowed: Option<std::time::Duration>,
) -> Vec<String> {
    let mut out = vec![];
    match log.last_verified() {
        Some(v) => {
            let rpo = parse_time(&v.taken_at).map(|t| (now - t).whole_seconds());
            out.push(format!(
                "last verified-restorable bundle: {} (taken {}, verified {}, {}/{} objects), RPO {}, RTO {}",
                v.bundle,
                to_second(&v.taken_at),
                to_second(&v.verified_at),
                v.objects_verified,
                v.objects_compared,
                rpo.map(human).unwrap_or_else(|| "?".into()),
                v.rto_seconds
                    .map(|r| format!("{r:.1}s"))
                    .unwrap_or_else(|| "-".into())
            ));
            if let (Some(rpo), Some(allowed)) = (rpo, allowed) {
                if rpo > allowed.as_secs() as i64 {
                    out.push(format!(
                        "WARNING: the newest verified-restorable bundle is {} old, more than the {} the drill schedule allows",
                        human(rpo),
                        human(allowed.as_secs() as i64)
                    ));
                }
            }
        }
        None if log.drills.is_empty() && allowed.is_none() => {}
        None => out.push(
            "last verified-restorable bundle: none (no drill has passed: `kiln drill`)".into(),
        ),
    }
    if let Some(l) = log.last().filter(|l| !l.passed) {
        out.push(format!(
            "WARNING: the last drill ({} at {}) FAILED: {}",
            l.bundle,
            to_second(&l.verified_at),
            l.reason
        ));
    } else if allowed.is_some() && log.drills.is_empty() {
        out.push(
            "WARNING: drills are scheduled but none has run yet (`kiln drill --scheduled`)".into(),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(bundle: &str, taken: &str, passed: bool) -> DrillRecord {
        DrillRecord {
            bundle: bundle.into(),
            taken_at: taken.into(),
            verified_at: "2026-12-07T03:00:00Z".into(),
            objects_compared: 12,
            objects_verified: if passed { 12 } else { 0 },
            rpo_seconds: 60,
            rto_seconds: passed.then_some(84.25),
            passed,
            reason: if passed {
                String::new()
            } else {
                "verify: 1 mismatch(es)".into()
            },
        }
    }

    fn names(n: &[&str]) -> Vec<String> {
        n.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn every_n_counts_bundles_after_the_last_drilled_one() {
        let listed = names(&["e", "d", "c", "b", "a"]);
        let mut log = DrillLog::default();
        // Never drilled: the newest is due at once.
        assert_eq!(due(&listed, &log, 3), Due::Yes);
        assert_eq!(due(&[], &log, 3), Due::No { since: 0, every: 3 });
        log.push(rec("c", "2026-12-07T01:00:00Z", true));
        assert_eq!(due(&listed, &log, 3), Due::No { since: 2, every: 3 });
        assert_eq!(due(&listed, &log, 2), Due::Yes);
        // A failed drill also restarts the count: it is retried N bundles later, not on every run.
        log.push(rec("e", "2026-12-07T02:00:00Z", false));
        assert_eq!(due(&listed, &log, 1), Due::No { since: 0, every: 1 });
        // The drilled bundle was rotated away: every listed bundle is newer.
        assert_eq!(bundles_since(&names(&["g", "f"]), Some("a")), 2);
        assert_eq!(due(&names(&["g", "f"]), &log, 2), Due::Yes);
    }

    #[test]
    fn the_record_survives_a_round_trip_and_keeps_its_bound() {
        let dir = tempfile::tempdir().unwrap();
        let f = path(dir.path());
        assert_eq!(load(&f).unwrap(), DrillLog::default());
        append(&f, rec("a", "2026-12-07T01:00:00Z", true)).unwrap();
        append(&f, rec("b", "2026-12-07T02:00:00Z", false)).unwrap();
        let log = load(&f).unwrap();
        assert_eq!(log.drills.len(), 2);
        assert_eq!(log.last().unwrap().bundle, "b");
        assert_eq!(log.last_verified().unwrap().bundle, "a");
        assert!(!f.with_extension("json.tmp").exists());
        let text = std::fs::read_to_string(&f).unwrap();
        assert!(
            text.contains("\"takenAt\": \"2026-12-07T01:00:00Z\""),
            "{text}"
        );
        assert!(text.contains("\"rtoSeconds\": 84.25"), "{text}");
        let mut big = DrillLog::default();
        for i in 0..KEEP + 5 {
            big.push(rec(&format!("b{i}"), "2026-12-07T01:00:00Z", true));
        }
        assert_eq!(big.drills.len(), KEEP);
        assert_eq!(big.drills[0].bundle, "b5");
        std::fs::write(&f, "{not json").unwrap();
        assert!(matches!(load(&f), Err(RecordError::Parse { .. })));
    }

    #[test]
    fn a_report_becomes_a_record() {
        let r = DrillReport {
            bundle: "/x/snapshots/t-20261207-010000.kiln-bundle.tar".into(),
            snapshot_created: "2026-12-07T01:00:00Z".into(),
            objects_recorded: 9,
            objects_verified: 9,
            rto_seconds: Some(70.5),
            torn_down: true,
            passed: true,
            ..Default::default()
        };
        let done = parse_time("2026-12-07T01:30:00Z").unwrap();
        let rec = from_report(&r, done);
        assert_eq!(rec.bundle, "t-20261207-010000.kiln-bundle.tar");
        assert_eq!(rec.rpo_seconds, 1800);
        assert_eq!(rec.verified_at, "2026-12-07T01:30:00Z");
        assert!(rec.passed && rec.reason.is_empty());
        let failed = DrillReport {
            problems: vec!["verify: x".into(), "store: y".into()],
            ..r
        };
        let f = from_report(
            &DrillReport {
                passed: false,
                ..failed
            },
            done,
        );
        assert_eq!(f.reason, "verify: x; store: y");
    }

    #[test]
    fn status_shows_rpo_rto_and_warns() {
        let now = parse_time("2026-12-07T03:00:00Z").unwrap();
        let mut log = DrillLog::default();
        assert!(status_lines(&log, now, None).is_empty());
        assert_eq!(
            status_lines(&log, now, Some(std::time::Duration::from_secs(3600))),
            [
                "last verified-restorable bundle: none (no drill has passed: `kiln drill`)",
                "WARNING: drills are scheduled but none has run yet (`kiln drill --scheduled`)"
            ]
        );
        log.push(rec(
            "a.kiln-bundle.tar",
            "2026-12-07T02:00:00.123456Z",
            true,
        ));
        assert_eq!(
            status_lines(&log, now, Some(std::time::Duration::from_secs(7200))),
            ["last verified-restorable bundle: a.kiln-bundle.tar (taken 2026-12-07T02:00:00Z, verified 2026-12-07T03:00:00Z, 12/12 objects), RPO 59m, RTO 84.2s"]
        );
        // Older than the schedule allows, then a failed drill on top.
        let lines = status_lines(&log, now, Some(std::time::Duration::from_secs(1800)));
        assert_eq!(
            lines[1],
            "WARNING: the newest verified-restorable bundle is 59m old, more than the 30m the drill schedule allows"
        );
        log.push(rec("b.kiln-bundle.tar", "2026-12-07T02:30:00Z", false));
        let lines = status_lines(&log, now, None);
        assert!(lines[0].starts_with("last verified-restorable bundle: a.kiln-bundle.tar"));
        assert_eq!(
            lines[1],
            "WARNING: the last drill (b.kiln-bundle.tar at 2026-12-07T03:00:00Z) FAILED: verify: 1 mismatch(es)"
        );
    }
}
