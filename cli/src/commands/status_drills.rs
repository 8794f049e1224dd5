//! `kiln status`'s drill lines: the last verified-restorable bundle with its RPO and RTO, from the drill
//! record in the state dir, and a warning when the drill schedule is overdue or the last drill failed.

use std::time::Duration;

use crate::backup_store::schedule::{cadence, next_run, Cadence};
use crate::snapshot::drill_record;

/// Seconds between two runs of a backup schedule (an interval, or two consecutive cron times).
pub(super) fn interval(schedule: &str, now: i64) -> Option<u64> {
    match cadence(schedule).ok()? {
        Cadence::Every(s) => Some(s),
        Cadence::Cron(spec) => {
            let a = next_run(&spec, now).ok()?;
            let b = next_run(&spec, a).ok()?;
            u64::try_from(b - a).ok()
        }
    }
}

/// How old the newest verified bundle may be: twice the time the schedule takes to make `every` bundles,
/// so one late or failed drill is tolerated and two in a row are not.
pub(super) fn allowed(schedule: &str, every: u32, now: i64) -> Option<Duration> {
    interval(schedule, now).map(|i| Duration::from_secs(2 * i * u64::from(every)))
}

pub(super) fn print(ctx: &crate::bootstrap::Context, now: time::OffsetDateTime) {
    let file = drill_record::path(&ctx.state_dir);
    let log = match drill_record::load(&file) {
        Ok(l) => l,
        Err(e) => {
            println!("drills: cannot read the record: {e}");
            return;
        }
    };
    let allowed = ctx
        .cluster
        .config
        .backup()
        .and_then(|b| Some((b, b.drill.as_ref()?)))
        .and_then(|(b, d)| allowed(&b.schedule, d.every, now.unix_timestamp()));
    for l in drill_record::status_lines(&log, now, allowed) {
        println!("{l}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_allowance_follows_the_schedule() {
        // 2026-12-06T11:21:43Z
        let now = 1_796_556_103;
        assert_eq!(interval("@every 30m", now), Some(1800));
        assert_eq!(interval("0 */6 * * *", now), Some(6 * 3600));
        assert_eq!(interval("@daily", now), Some(86_400));
        assert_eq!(interval("* * *", now), None);
        assert_eq!(
            allowed("0 */6 * * *", 4, now),
            Some(Duration::from_secs(2 * 4 * 6 * 3600))
        );
    }
}
