//! CronJob schedules, read exactly as upstream reads them: robfig/cron v3's `ParseStandard` (five
//! fields, the `@yearly` … `@hourly` and `@every <duration>` descriptors, a `TZ=`/`CRON_TZ=`
//! prefix), with its error texts (kube-apiserver returns them verbatim as `spec.schedule` field
//! errors) and its matching rules (day of month and day of week are OR-ed unless one of them is a
//! wildcard). kiln-apiserver validates with this module and the cronjob controller schedules with
//! it, so the two never disagree about a schedule.
//!
//! The grammar is ours (`fields`), because the accepted forms and the messages must be robfig's —
//! croner alone would accept `L`, `W`, `#` and weekday 7, which upstream rejects. Finding the next
//! matching time in a zone, across DST changes, is croner's: each field is handed to it as the
//! explicit list of values robfig resolved, or `*` exactly where robfig marks a wildcard, so both
//! read every field the same way.

mod fields;
pub mod go;

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Datelike, TimeZone};
use chrono_tz::Tz;

pub use chrono_tz::Tz as Zone;
use fields::{Bounds, Field, DAYS_OF_MONTH, DAYS_OF_WEEK, HOURS, MINUTES, MONTHS};

/// Why a schedule does not parse; each message is robfig's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    #[error("empty spec string")]
    Empty,
    #[error("provided bad location {name}: {reason}")]
    BadLocation { name: String, reason: String },
    #[error("unrecognized descriptor: {0}")]
    UnknownDescriptor(String),
    #[error("failed to parse duration {descriptor}: {reason}")]
    BadDuration { descriptor: String, reason: String },
    /// Go prints the fields as a slice: `[a b c]`.
    #[error("expected exactly 5 fields, found {}: [{}]", .0.len(), .0.join(" "))]
    FieldCount(Vec<String>),
    #[error("failed to parse int from {expr}: strconv.Atoi: parsing {quoted}: {reason}")]
    NotANumber {
        expr: String,
        quoted: String,
        reason: &'static str,
    },
    #[error("negative number ({num}) not allowed: {expr}")]
    Negative { num: i64, expr: String },
    #[error("too many hyphens: {0}")]
    TooManyHyphens(String),
    #[error("too many slashes: {0}")]
    TooManySlashes(String),
    #[error("beginning of range ({start}) below minimum ({min}): {expr}")]
    BelowMinimum { start: u64, min: u64, expr: String },
    #[error("end of range ({end}) above maximum ({max}): {expr}")]
    AboveMaximum { end: u64, max: u64, expr: String },
    #[error("beginning of range ({start}) beyond end of range ({end}): {expr}")]
    Reversed { start: u64, end: u64, expr: String },
    #[error("step of range should be a positive number: {0}")]
    ZeroStep(String),
    /// croner refused the pattern built from fields robfig accepted (a bug here, not the user's).
    #[error("cannot evaluate {pattern}: {reason}")]
    Evaluator { pattern: String, reason: String },
}

/// A parsed schedule in its zone.
#[derive(Clone)]
pub struct Schedule {
    timing: Timing,
    zone: Tz,
}

#[derive(Clone)]
enum Timing {
    /// Five fields (or a descriptor that stands for them); boxed, it is far the largest.
    Fields(Box<croner::Cron>),
    /// `@every`: a fixed delay in whole seconds (at least one).
    Every(i64),
    /// Fields that can never match (`,` alone, February 30th): robfig's `Next` returns the zero time.
    Never,
}

impl fmt::Debug for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let timing = match &self.timing {
            Timing::Fields(c) => c.pattern.to_string(),
            Timing::Every(s) => format!("@every {s}s"),
            Timing::Never => "never".to_string(),
        };
        write!(f, "Schedule({timing} in {})", self.zone)
    }
}

/// robfig looks this many years past the start for a match before giving up.
const YEAR_LIMIT: i32 = 5;

/// robfig's `ParseStandard`. Without a `TZ=` prefix the schedule runs in UTC, the zone of kiln's
/// controller-manager process (upstream uses the process's local zone).
pub fn parse_standard(spec: &str) -> Result<Schedule, ScheduleError> {
    if spec.is_empty() {
        return Err(ScheduleError::Empty);
    }
    let mut zone = Tz::UTC;
    let mut spec = spec;
    if spec.starts_with("TZ=") || spec.starts_with("CRON_TZ=") {
        let eq = spec.find('=').unwrap_or(0);
        // robfig slices up to the first space and panics when there is none; kiln refuses it.
        let end = spec.find(' ').unwrap_or(spec.len());
        let name = &spec[eq + 1..end.max(eq + 1)];
        zone = go::load_location(name).map_err(|reason| ScheduleError::BadLocation {
            name: name.to_string(),
            reason,
        })?;
        spec = spec[end..].trim();
    }
    let timing = if spec.starts_with('@') {
        descriptor(spec)?
    } else {
        let parts: Vec<&str> = spec.split_whitespace().collect();
        if parts.len() != 5 {
            return Err(ScheduleError::FieldCount(
                parts.iter().map(|p| p.to_string()).collect(),
            ));
        }
        fields_timing(
            fields::parse(parts[0], &MINUTES)?,
            fields::parse(parts[1], &HOURS)?,
            fields::parse(parts[2], &DAYS_OF_MONTH)?,
            fields::parse(parts[3], &MONTHS)?,
            fields::parse(parts[4], &DAYS_OF_WEEK)?,
        )?
    };
    Ok(Schedule { timing, zone })
}

fn descriptor(spec: &str) -> Result<Timing, ScheduleError> {
    let all = Field::all;
    let zero = Field::only(0);
    let first = Field::only(1);
    let (minute, hour, dom, month, dow) = match spec {
        "@yearly" | "@annually" => (zero, zero, first, first, all(&DAYS_OF_WEEK)),
        "@monthly" => (zero, zero, first, all(&MONTHS), all(&DAYS_OF_WEEK)),
        "@weekly" => (zero, zero, all(&DAYS_OF_MONTH), all(&MONTHS), zero),
        "@daily" | "@midnight" => (
            zero,
            zero,
            all(&DAYS_OF_MONTH),
            all(&MONTHS),
            all(&DAYS_OF_WEEK),
        ),
        "@hourly" => (
            zero,
            all(&HOURS),
            all(&DAYS_OF_MONTH),
            all(&MONTHS),
            all(&DAYS_OF_WEEK),
        ),
        _ => {
            let Some(text) = spec.strip_prefix("@every ") else {
                return Err(ScheduleError::UnknownDescriptor(spec.to_string()));
            };
            let nanos = go::parse_duration(text).map_err(|reason| ScheduleError::BadDuration {
                descriptor: spec.to_string(),
                reason,
            })?;
            // robfig: at least a second, and whole seconds only.
            return Ok(Timing::Every((nanos / 1_000_000_000).max(1)));
        }
    };
    fields_timing(minute, hour, dom, month, dow)
}

/// The croner pattern for robfig's fields, or `Never` when no time can match.
fn fields_timing(
    minute: Field,
    hour: Field,
    dom: Field,
    month: Field,
    dow: Field,
) -> Result<Timing, ScheduleError> {
    if [minute, hour, dom, month, dow].iter().any(|f| f.bits == 0) || !any_day(dom, month, dow) {
        return Ok(Timing::Never);
    }
    let list = |f: Field, b: &Bounds, star: bool| {
        if star {
            "*".to_string()
        } else {
            f.values()
                .filter(|v| (b.min..=b.max).contains(v))
                .map(|v| v.to_string())
                .collect::<Vec<_>>()
                .join(",")
        }
    };
    let complete = |f: Field, b: &Bounds| f.bits == Field::all(b).bits;
    // Minutes, hours and months have no combining rule: `*` is just shorter. Days of month and of
    // week carry robfig's wildcard mark, which croner reads from a literal `*`.
    let pattern = format!(
        "{} {} {} {} {}",
        list(minute, &MINUTES, complete(minute, &MINUTES)),
        list(hour, &HOURS, complete(hour, &HOURS)),
        list(dom, &DAYS_OF_MONTH, dom.star),
        list(month, &MONTHS, complete(month, &MONTHS)),
        list(dow, &DAYS_OF_WEEK, dow.star),
    );
    let cron = croner::parser::CronParser::builder()
        .seconds(croner::parser::Seconds::Disallowed)
        .build()
        .parse(&pattern)
        .map_err(|e| ScheduleError::Evaluator {
            pattern: pattern.clone(),
            reason: e.to_string(),
        })?;
    Ok(Timing::Fields(Box::new(cron)))
}

/// Whether some day can match. With both day fields restricted either may match, so a weekday
/// always can; otherwise the day of month decides (a wildcard weekday allows every day).
fn any_day(dom: Field, month: Field, dow: Field) -> bool {
    if dom.star || !dow.star {
        return true;
    }
    const LONGEST: [u64; 13] = [0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
    month
        .values()
        .filter(|m| (1..=12).contains(m))
        .any(|m| dom.values().any(|d| d <= LONGEST[m as usize]))
}

impl Schedule {
    /// The zone the schedule's fields are read in.
    pub fn zone(&self) -> Tz {
        self.zone
    }

    /// The same fields read in another zone (upstream prefixes the schedule with `TZ=<timeZone>`).
    pub fn in_zone(mut self, zone: Tz) -> Schedule {
        self.zone = zone;
        self
    }

    /// robfig's `Next`: the first activation strictly after `after` (unix seconds, i.e. a time
    /// already truncated to the second), or `None` where robfig returns its zero time — no match
    /// within five years.
    pub fn next(&self, after: i64) -> Option<i64> {
        match &self.timing {
            Timing::Every(delay) => after.checked_add(*delay),
            Timing::Never => None,
            Timing::Fields(cron) => {
                let start: DateTime<Tz> = self.zone.timestamp_opt(after, 0).single()?;
                let next = cron.find_next_occurrence(&start, false).ok()?;
                (next.year() <= start.year() + YEAR_LIMIT).then(|| next.timestamp())
            }
        }
    }
}

impl FromStr for Schedule {
    type Err = ScheduleError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_standard(s)
    }
}

#[cfg(test)]
mod tests;
