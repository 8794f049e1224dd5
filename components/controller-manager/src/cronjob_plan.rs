//! The cronjob controller's decisions, as pure functions over a CronJob, the Jobs it controls and
//! the time (upstream's cronjob_controllerv2 `syncCronJob` and `utils.go`): which schedule time is
//! due (the most recent one missed since lastScheduleTime, or since creation), whether it is too
//! late, already done, forbidden or replacing, the Job it becomes, what happened to the Jobs in
//! `status.active`, which finished Jobs the history limits prune, and when to look again.
//!
//! Times are unix seconds, as the schedule knows them; `now` is in milliseconds, since the
//! starting deadline and the requeue delay compare against the precise time.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::batch::v1::{CronJob, CronJobStatus, Job};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use k8s_openapi::jiff::Timestamp;
use kiln_common::cron::{self, go, Schedule};

/// The annotation carrying the time a Job was scheduled for, in the CronJob's zone.
pub const SCHEDULED_TIMESTAMP: &str = "batch.kubernetes.io/cronjob-scheduled-timestamp";
/// Requeue this long after a schedule time, so a clock a little behind still sees it due.
const NEXT_SCHEDULE_DELTA_MS: i64 = 100;
/// More missed times than this since the last run is worth a warning (upstream's choice).
const MANY_MISSED: i64 = 100;

/// An event for the CronJob.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub warning: bool,
    pub reason: &'static str,
    pub message: String,
}

fn normal(reason: &'static str, message: String) -> Event {
    Event {
        warning: false,
        reason,
        message,
    }
}

fn warning(reason: &'static str, message: String) -> Event {
    Event {
        warning: true,
        reason,
        message,
    }
}

fn seconds(t: &Time) -> i64 {
    t.0.as_second()
}

pub fn time_at(secs: i64) -> Time {
    Time(Timestamp::from_second(secs).unwrap_or(Timestamp::UNIX_EPOCH))
}

fn spec(cj: &CronJob) -> k8s_openapi::api::batch::v1::CronJobSpec {
    cj.spec.clone().unwrap_or_default()
}

/// The type of the Job's first true Complete or Failed condition: it is finished.
pub fn finished_condition(job: &Job) -> Option<&str> {
    job.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True")
        .map(|c| c.type_.as_str())
}

fn succeeded(job: &Job) -> bool {
    job.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c.type_ == "Complete" && c.status == "True")
        })
}

/// Jobs whose controller reference names this CronJob (upstream matches on the name alone, so
/// Jobs survive a template label change).
pub fn controlled_by<'a>(cj: &CronJob, jobs: &'a [Job]) -> Vec<&'a Job> {
    let name = cj.metadata.name.as_deref();
    jobs.iter()
        .filter(|j| {
            j.metadata.owner_references.iter().flatten().any(|r| {
                r.controller == Some(true) && r.kind == "CronJob" && Some(r.name.as_str()) == name
            })
        })
        .collect()
}

/// Active references without a Job in the list: the loop asks the API server for each before
/// calling it missing, since a list can lag behind a create.
pub fn unlisted_active(cj: &CronJob, jobs: &[&Job]) -> Vec<ObjectReference> {
    let uids: BTreeSet<&str> = jobs
        .iter()
        .filter_map(|j| j.metadata.uid.as_deref())
        .collect();
    active(cj)
        .into_iter()
        .filter(|r| !uids.contains(r.uid.as_deref().unwrap_or("")))
        .collect()
}

fn active(cj: &CronJob) -> Vec<ObjectReference> {
    cj.status
        .as_ref()
        .and_then(|s| s.active.clone())
        .unwrap_or_default()
}

fn set_active(status: &mut CronJobStatus, refs: Vec<ObjectReference>) {
    status.active = (!refs.is_empty()).then_some(refs);
}

/// What the Jobs say about the CronJob's status: finished ones leave `active` (SawCompletedJob),
/// the newest completion is the lastSuccessfulTime, active ones confirmed gone (`missing`, by
/// name) leave it too (MissingJob); running Jobs the CronJob does not list are reported.
pub fn reconcile_children(
    cj: &CronJob,
    jobs: &[&Job],
    missing: &BTreeSet<String>,
) -> (CronJobStatus, Vec<Event>) {
    let mut status = cj.status.clone().unwrap_or_default();
    let mut refs = active(cj);
    let mut events = Vec::new();
    for job in jobs {
        let uid = job.metadata.uid.as_deref().unwrap_or("");
        let name = job.metadata.name.clone().unwrap_or_default();
        let listed = refs.iter().any(|r| r.uid.as_deref() == Some(uid));
        match finished_condition(job) {
            None if !listed => events.push(warning(
                "UnexpectedJob",
                format!("Saw a job that the controller did not create or forgot: {name}"),
            )),
            None => {}
            Some(condition) => {
                if listed {
                    refs.retain(|r| r.uid.as_deref() != Some(uid));
                    events.push(normal(
                        "SawCompletedJob",
                        format!("Saw completed job: {name}, condition: {condition}"),
                    ));
                }
                if succeeded(job) {
                    let done = job.status.as_ref().and_then(|s| s.completion_time.clone());
                    let newer = match (&status.last_successful_time, &done) {
                        (None, _) => true,
                        (Some(last), Some(d)) => d.0 > last.0,
                        (Some(_), None) => false,
                    };
                    if newer {
                        status.last_successful_time = done;
                    }
                }
            }
        }
    }
    for name in missing {
        if refs.iter().any(|r| r.name.as_deref() == Some(name)) {
            refs.retain(|r| r.name.as_deref() != Some(name));
            events.push(normal(
                "MissingJob",
                format!("Active job went missing: {name}"),
            ));
        }
    }
    set_active(&mut status, refs);
    (status, events)
}

/// Finished Jobs beyond the history limits, oldest first (by start time, unstarted last, then
/// by name), to delete.
pub fn history_victims<'a>(cj: &CronJob, jobs: &[&'a Job]) -> Vec<&'a Job> {
    let spec = spec(cj);
    let mut out = Vec::new();
    for (kind, limit) in [
        ("Complete", spec.successful_jobs_history_limit),
        ("Failed", spec.failed_jobs_history_limit),
    ] {
        let Some(limit) = limit else { continue };
        let mut finished: Vec<&Job> = jobs
            .iter()
            .copied()
            .filter(|j| finished_condition(j) == Some(kind))
            .collect();
        let excess = finished
            .len()
            .saturating_sub(usize::try_from(limit).unwrap_or(0));
        finished.sort_by_key(|j| {
            let start = j
                .status
                .as_ref()
                .and_then(|s| s.start_time.as_ref())
                .map(|t| t.0);
            (start.is_none(), start, j.metadata.name.clone())
        });
        out.extend(finished.into_iter().take(excess));
    }
    out
}

/// upstream's formatSchedule + ParseStandard: the schedule in the CronJob's zone, with a warning
/// when the schedule names a zone itself; an unparseable one is an event and no schedule.
pub fn schedule_of(cj: &CronJob) -> (Result<Schedule, Event>, Option<Event>) {
    let spec = spec(cj);
    let text = spec.schedule.as_str();
    let mut advisory = None;
    let zone = if text.contains("TZ") {
        advisory = Some(warning(
            "UnsupportedSchedule",
            format!(
                "CRON_TZ or TZ used in schedule {text:?} is not officially supported, see https://kubernetes.io/docs/concepts/workloads/controllers/cron-jobs/ for more details"
            ),
        ));
        None
    } else {
        spec.time_zone
            .as_deref()
            .and_then(|z| go::load_location(z).ok())
    };
    let parsed = cron::parse_standard(text)
        .map(|s| match zone {
            Some(z) => s.in_zone(z),
            None => s,
        })
        .map_err(|e| {
            warning(
                "UnparseableSchedule",
                format!("unparseable schedule: {text:?} : {e}"),
            )
        });
    (parsed, advisory)
}

/// How many schedule times went by unstarted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Missed {
    None,
    Few,
    Many,
}

/// upstream's mostRecentScheduleTime: the time counted from (lastScheduleTime, else creation,
/// moved up to the starting deadline when asked), the most recent schedule time at or before
/// `now` after it, and how many were missed. Counting uses the gap between the next two times,
/// so a schedule with uneven gaps is only approximated, as upstream's is.
pub fn most_recent_schedule_time(
    cj: &CronJob,
    now: i64,
    schedule: &Schedule,
    with_deadline: bool,
) -> Result<(i64, Option<i64>, Missed), String> {
    let created = cj.metadata.creation_timestamp.as_ref().map_or(0, seconds);
    let last = cj
        .status
        .as_ref()
        .and_then(|s| s.last_schedule_time.as_ref())
        .map(seconds);
    let mut earliest = last.unwrap_or(created);
    if let Some(deadline) = spec(cj).starting_deadline_seconds.filter(|_| with_deadline) {
        earliest = earliest.max(now - deadline);
    }
    let too_close = || "time difference between two schedules is less than 1 second".to_string();
    let t1 = schedule.next(earliest).ok_or_else(too_close)?;
    if now < t1 {
        return Ok((earliest, None, Missed::None));
    }
    let t2 = schedule.next(t1).ok_or_else(too_close)?;
    if now < t2 {
        return Ok((earliest, Some(t1), Missed::None));
    }
    let interval = t2 - t1;
    if interval < 1 {
        return Err(too_close());
    }
    let count = (now - t1) / interval + 1;
    // Step back one interval more than the count says, and let the schedule find the real times.
    let mut t = schedule.next(t1 + (count - 2) * interval);
    let mut most_recent = None;
    while let Some(at) = t.filter(|at| *at <= now) {
        most_recent = Some(at);
        t = schedule.next(at);
    }
    let missed = if count > MANY_MISSED {
        Missed::Many
    } else {
        Missed::Few
    };
    Ok((earliest, most_recent, missed))
}

/// upstream's nextScheduleTimeDuration: from `now` to just past the next schedule time after the
/// most recent one; None when the schedule never fires again.
pub fn requeue_after(cj: &CronJob, now_ms: i64, schedule: &Schedule) -> Option<Duration> {
    let now = now_ms.div_euclid(1000);
    let from = match most_recent_schedule_time(cj, now, schedule, false) {
        Err(_) => now,
        Ok((_, Some(t), _)) => t,
        Ok((earliest, None, Missed::None)) => earliest,
        Ok((_, None, _)) => now,
    };
    let next = schedule.next(from)?;
    let ms = (next * 1000 + NEXT_SCHEDULE_DELTA_MS - now_ms).max(0);
    Some(Duration::from_millis(ms as u64))
}

/// `<cronjob>-<scheduled time in minutes since the epoch>`: one name per schedule time, so a
/// controller that restarts between creating a Job and recording it cannot run that time twice.
pub fn job_name(cronjob: &str, scheduled: i64) -> String {
    format!("{cronjob}-{}", scheduled.div_euclid(60))
}

/// getJobFromTemplate2: the template's labels and annotations, the scheduled-time annotation, the
/// CronJob as controller (blocking its deletion until the Job is gone), the template's spec.
pub fn job_from_template(cj: &CronJob, scheduled: i64) -> Job {
    let spec = spec(cj);
    let template = spec.job_template;
    let meta = template.metadata.unwrap_or_default();
    let zone =
        go::load_location(spec.time_zone.as_deref().unwrap_or("")).unwrap_or(cron::Zone::UTC);
    let mut annotations: BTreeMap<String, String> = meta.annotations.unwrap_or_default();
    annotations.insert(
        SCHEDULED_TIMESTAMP.to_string(),
        go::rfc3339_in(scheduled, zone),
    );
    let labels = meta.labels.filter(|l| !l.is_empty());
    Job {
        metadata: ObjectMeta {
            name: Some(job_name(
                cj.metadata.name.as_deref().unwrap_or(""),
                scheduled,
            )),
            namespace: cj.metadata.namespace.clone(),
            labels,
            annotations: Some(annotations),
            owner_references: Some(vec![OwnerReference {
                api_version: "batch/v1".to_string(),
                kind: "CronJob".to_string(),
                name: cj.metadata.name.clone().unwrap_or_default(),
                uid: cj.metadata.uid.clone().unwrap_or_default(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]),
            ..Default::default()
        },
        spec: template.spec,
        status: None,
    }
}

/// The reference `status.active` keeps for a Job.
pub fn job_ref(job: &Job) -> ObjectReference {
    ObjectReference {
        api_version: Some("batch/v1".to_string()),
        kind: Some("Job".to_string()),
        name: job.metadata.name.clone(),
        namespace: job.metadata.namespace.clone(),
        uid: job.metadata.uid.clone(),
        resource_version: job.metadata.resource_version.clone(),
        field_path: None,
    }
}

/// Whether the Job is controlled by this very CronJob (name and UID).
pub fn is_ours(cj: &CronJob, job: &Job) -> bool {
    job.metadata.owner_references.iter().flatten().any(|r| {
        r.controller == Some(true)
            && r.kind == "CronJob"
            && Some(&r.uid) == cj.metadata.uid.as_ref()
    })
}

/// What syncCronJob does once the children are accounted for.
#[derive(Debug)]
pub enum Decision {
    /// Nothing to start now: these events, then look again after `requeue` (None: only when the
    /// CronJob changes — suspended, being deleted, or a schedule or zone that cannot run).
    Wait {
        events: Vec<Event>,
        requeue: Option<Duration>,
    },
    /// Start the Job for `scheduled`, after deleting the active Jobs in `replace`.
    Run {
        events: Vec<Event>,
        scheduled: i64,
        replace: Vec<ObjectReference>,
        job: Box<Job>,
        schedule: Box<Schedule>,
    },
}

/// The decision for a CronJob whose status already reflects its children.
pub fn decide(cj: &CronJob, now_ms: i64) -> Decision {
    let wait = |events: Vec<Event>, requeue| Decision::Wait { events, requeue };
    let spec = spec(cj);
    if cj.metadata.deletion_timestamp.is_some() {
        return wait(vec![], None);
    }
    if let Some(zone) = spec.time_zone.as_deref() {
        if let Err(e) = go::load_location(zone) {
            return wait(
                vec![warning(
                    "UnknownTimeZone",
                    format!("invalid timeZone: {zone:?}: {e}"),
                )],
                None,
            );
        }
    }
    if spec.suspend == Some(true) {
        return wait(vec![], None);
    }
    let (parsed, advisory) = schedule_of(cj);
    let mut events: Vec<Event> = advisory.into_iter().collect();
    let schedule = match parsed {
        Ok(s) => s,
        Err(e) => {
            events.push(e);
            return wait(events, None);
        }
    };
    let now = now_ms.div_euclid(1000);
    let scheduled = match most_recent_schedule_time(cj, now, &schedule, true) {
        Err(e) => {
            events.push(warning(
                "InvalidSchedule",
                format!("invalid schedule: {} : {e}", spec.schedule),
            ));
            return wait(events, None);
        }
        Ok((_, None, _)) => return wait(events, requeue_after(cj, now_ms, &schedule)),
        Ok((_, Some(t), missed)) => {
            if missed == Missed::Many {
                events.push(warning(
                    "TooManyMissedTimes",
                    "too many missed start times. Set or decrease .spec.startingDeadlineSeconds or check clock skew".to_string(),
                ));
            }
            t
        }
    };
    let requeue = requeue_after(cj, now_ms, &schedule);
    if let Some(deadline) = spec.starting_deadline_seconds {
        if (scheduled + deadline) * 1000 < now_ms {
            events.push(warning(
                "MissSchedule",
                format!(
                    "Missed scheduled time to start a job: {}",
                    go::rfc1123z_utc(scheduled)
                ),
            ));
            return wait(events, requeue);
        }
    }
    let refs = active(cj);
    let name = job_name(cj.metadata.name.as_deref().unwrap_or(""), scheduled);
    let last = cj
        .status
        .as_ref()
        .and_then(|s| s.last_schedule_time.as_ref())
        .map(seconds);
    if refs.iter().any(|r| r.name.as_deref() == Some(&name)) || last == Some(scheduled) {
        return wait(events, requeue);
    }
    let policy = spec.concurrency_policy.as_deref().unwrap_or("Allow");
    if policy == "Forbid" && !refs.is_empty() {
        events.push(normal(
            "JobAlreadyActive",
            "Not starting job because prior execution is running and concurrency policy is Forbid"
                .to_string(),
        ));
        return wait(events, requeue);
    }
    let replace = if policy == "Replace" { refs } else { vec![] };
    Decision::Run {
        events,
        scheduled,
        replace,
        job: Box::new(job_from_template(cj, scheduled)),
        schedule: Box::new(schedule),
    }
}

/// The status after the Job for `scheduled` started: listed as active, the time recorded.
pub fn started(status: &CronJobStatus, job: &Job, scheduled: i64) -> CronJobStatus {
    let mut out = status.clone();
    let mut refs = out.active.take().unwrap_or_default();
    refs.push(job_ref(job));
    set_active(&mut out, refs);
    out.last_schedule_time = Some(time_at(scheduled));
    out
}

#[cfg(test)]
#[path = "cronjob_plan_tests.rs"]
mod tests;
