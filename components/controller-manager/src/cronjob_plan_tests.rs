use super::*;
use serde_json::{json, Value};

/// 2024-01-15T10:00:00Z, a Monday; a whole minute.
const T0: i64 = 1_705_312_800;
const MINUTE: i64 = 60;

fn ms(secs: i64) -> i64 {
    secs * 1000
}

fn rfc(secs: i64) -> String {
    Timestamp::from_second(secs).unwrap().to_string()
}

/// A CronJob shaped like upstream's e2e newTestCronJob, created at `created`.
fn cronjob(schedule: &str, policy: &str, created: i64) -> Value {
    json!({
        "metadata": {"name": "cj", "namespace": "ns", "uid": "cj-uid", "creationTimestamp": rfc(created)},
        "spec": {
            "schedule": schedule,
            "concurrencyPolicy": policy,
            "suspend": false,
            "successfulJobsHistoryLimit": 3,
            "failedJobsHistoryLimit": 1,
            "jobTemplate": {
                "metadata": {"labels": {"app": "tick"}, "annotations": {"note": "from-template"}},
                "spec": {"backoffLimit": 1, "template": {"spec": {"restartPolicy": "OnFailure",
                    "containers": [{"name": "c", "image": "busybox", "command": ["sleep", "300"]}]}}}
            }
        }
    })
}

fn typed(v: Value) -> CronJob {
    serde_json::from_value(v).unwrap()
}

fn with_status(mut v: Value, status: Value) -> CronJob {
    v["status"] = status;
    typed(v)
}

fn job(
    name: &str,
    uid: &str,
    condition: Option<&str>,
    start: Option<i64>,
    done: Option<i64>,
) -> Job {
    let conditions: Vec<Value> = condition
        .map(|c| json!({"type": c, "status": "True"}))
        .into_iter()
        .collect();
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ns", "uid": uid,
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "CronJob", "name": "cj",
                "uid": "cj-uid", "controller": true}]},
        "status": {"conditions": conditions, "startTime": start.map(rfc), "completionTime": done.map(rfc)}
    }))
    .unwrap()
}

fn active_ref(name: &str, uid: &str) -> Value {
    json!({"kind": "Job", "apiVersion": "batch/v1", "namespace": "ns", "name": name, "uid": uid})
}

fn reasons(events: &[Event]) -> Vec<&'static str> {
    events.iter().map(|e| e.reason).collect()
}

fn run_of(d: Decision) -> (i64, Vec<ObjectReference>, Job, Vec<Event>) {
    match d {
        Decision::Run {
            scheduled,
            replace,
            job,
            events,
            ..
        } => (scheduled, replace, *job, events),
        other => panic!("expected a run, got {other:?}"),
    }
}

fn wait_of(d: Decision) -> (Vec<Event>, Option<Duration>) {
    match d {
        Decision::Wait { events, requeue } => (events, requeue),
        other => panic!("expected a wait, got {other:?}"),
    }
}

#[test]
fn job_names_count_minutes_since_the_epoch() {
    assert_eq!(job_name("cj", T0), "cj-28421880");
    assert_eq!(job_name("cj", T0 + 59), "cj-28421880");
    assert_eq!(job_name("cj", T0 + 60), "cj-28421881");
}

#[test]
fn nothing_runs_before_the_first_schedule_time_and_the_requeue_lands_on_it() {
    // Created 10 s after a minute; the next minute is 50 s away.
    let cj = typed(cronjob("*/1 * * * ?", "Allow", T0 + 10));
    let (events, requeue) = wait_of(decide(&cj, ms(T0 + 20)));
    assert!(events.is_empty());
    assert_eq!(requeue, Some(Duration::from_millis(40_100)));
}

#[test]
fn a_due_time_runs_once() {
    let cj = typed(cronjob("*/1 * * * ?", "Allow", T0 + 10));
    let now = ms(T0 + MINUTE) + 300;
    let (scheduled, replace, job, events) = run_of(decide(&cj, now));
    assert_eq!(scheduled, T0 + MINUTE);
    assert!(replace.is_empty() && events.is_empty());
    assert_eq!(job.metadata.name.as_deref(), Some("cj-28421881"));

    // Recorded as started, the same time is done: wait for the next minute.
    let mut created = job.clone();
    created.metadata.uid = Some("job-uid".into());
    let status = started(&CronJobStatus::default(), &created, scheduled);
    assert_eq!(status.active.as_ref().map(Vec::len), Some(1));
    assert_eq!(status.last_schedule_time, Some(time_at(T0 + MINUTE)));
    let after = CronJob {
        status: Some(status),
        ..cj
    };
    let (events, requeue) = wait_of(decide(&after, now));
    assert!(events.is_empty());
    assert_eq!(requeue, Some(Duration::from_millis(59_800)));
}

#[test]
fn the_job_carries_the_template_the_owner_and_the_scheduled_time() {
    let mut v = cronjob("0 9 * * *", "Allow", T0);
    v["spec"]["timeZone"] = json!("Europe/Berlin");
    let cj = typed(v);
    let nine_berlin = T0 - 2 * 3600; // 08:00Z = 09:00 in Berlin (winter)
    let job = job_from_template(&cj, nine_berlin);
    let meta = &job.metadata;
    assert_eq!(meta.namespace.as_deref(), Some("ns"));
    assert_eq!(meta.labels.as_ref().unwrap()["app"], "tick");
    let annotations = meta.annotations.as_ref().unwrap();
    assert_eq!(annotations["note"], "from-template");
    assert_eq!(
        annotations[SCHEDULED_TIMESTAMP],
        "2024-01-15T09:00:00+01:00"
    );
    let owner = &meta.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (
            owner.kind.as_str(),
            owner.name.as_str(),
            owner.uid.as_str(),
            owner.api_version.as_str()
        ),
        ("CronJob", "cj", "cj-uid", "batch/v1")
    );
    assert_eq!(
        (owner.controller, owner.block_owner_deletion),
        (Some(true), Some(true))
    );
    assert_eq!(job.spec, cj.spec.unwrap().job_template.spec);

    let utc = job_from_template(&typed(cronjob("@hourly", "Allow", T0)), T0);
    assert_eq!(
        utc.metadata.annotations.unwrap()[SCHEDULED_TIMESTAMP],
        "2024-01-15T10:00:00Z"
    );
}

#[test]
fn a_restarted_controller_runs_only_the_most_recent_missed_time() {
    // Last ran 10 minutes ago; nine times were missed since.
    let cj = with_status(
        cronjob("*/1 * * * ?", "Allow", T0 - 3600),
        json!({"lastScheduleTime": rfc(T0 - 10 * MINUTE)}),
    );
    let (scheduled, _, _, events) = run_of(decide(&cj, ms(T0) + 500));
    assert_eq!(scheduled, T0);
    assert!(events.is_empty());
}

#[test]
fn more_than_a_hundred_missed_times_warn_and_still_run_once() {
    let cj = with_status(
        cronjob("*/1 * * * ?", "Forbid", T0 - 99 * 86_400),
        json!({"lastScheduleTime": rfc(T0 - 98 * 86_400)}),
    );
    let (scheduled, _, _, events) = run_of(decide(&cj, ms(T0 + 30)));
    assert_eq!(scheduled, T0);
    assert_eq!(reasons(&events), ["TooManyMissedTimes"]);
    assert_eq!(
        events[0].message,
        "too many missed start times. Set or decrease .spec.startingDeadlineSeconds or check clock skew"
    );
    assert!(events[0].warning);
}

#[test]
fn most_recent_schedule_time_counts_missed_times() {
    let cj = typed(cronjob("*/1 * * * ?", "Allow", T0));
    let s = cron::parse_standard("*/1 * * * ?").unwrap();
    assert_eq!(
        most_recent_schedule_time(&cj, T0 + 30, &s, false),
        Ok((T0, None, Missed::None))
    );
    assert_eq!(
        most_recent_schedule_time(&cj, T0 + 90, &s, false),
        Ok((T0, Some(T0 + 60), Missed::None))
    );
    assert_eq!(
        most_recent_schedule_time(&cj, T0 + 5 * 60 + 1, &s, false),
        Ok((T0, Some(T0 + 300), Missed::Few))
    );
    assert_eq!(
        most_recent_schedule_time(&cj, T0 + 101 * 60, &s, false),
        Ok((T0, Some(T0 + 101 * 60), Missed::Many))
    );
    // @every counts from the last time, not from the clock's minutes.
    let every = cron::parse_standard("@every 90s").unwrap();
    assert_eq!(
        most_recent_schedule_time(&cj, T0 + 1000, &every, false),
        Ok((T0, Some(T0 + 990), Missed::Few))
    );
}

#[test]
fn the_starting_deadline_skips_times_that_are_too_late() {
    let mut v = cronjob("0 * * * *", "Allow", T0 - 7200);
    v["spec"]["startingDeadlineSeconds"] = json!(10);
    v["status"] = json!({"lastScheduleTime": rfc(T0 - 3600)});
    let cj = typed(v);
    // 5 s after the hour: within the deadline.
    let (scheduled, _, _, _) = run_of(decide(&cj, ms(T0 + 5)));
    assert_eq!(scheduled, T0);
    // 30 s after: too late; nothing runs until the next hour.
    let (events, requeue) = wait_of(decide(&cj, ms(T0 + 30)));
    assert!(events.is_empty());
    assert_eq!(requeue, Some(Duration::from_millis(3_570_100)));
}

#[test]
fn forbid_waits_for_the_running_job() {
    let cj = with_status(
        cronjob("*/1 * * * ?", "Forbid", T0 - 600),
        json!({"active": [active_ref("cj-1", "u1")], "lastScheduleTime": rfc(T0 - 60)}),
    );
    let (events, requeue) = wait_of(decide(&cj, ms(T0 + 1)));
    assert_eq!(reasons(&events), ["JobAlreadyActive"]);
    assert_eq!(
        events[0].message,
        "Not starting job because prior execution is running and concurrency policy is Forbid"
    );
    assert_eq!(requeue, Some(Duration::from_millis(59_100)));
}

#[test]
fn replace_deletes_the_running_jobs_first_and_allow_keeps_them() {
    let status = json!({"active": [active_ref("cj-1", "u1")], "lastScheduleTime": rfc(T0 - 60)});
    let replace = with_status(cronjob("*/1 * * * ?", "Replace", T0 - 600), status.clone());
    let (_, victims, _, _) = run_of(decide(&replace, ms(T0 + 1)));
    assert_eq!(victims.len(), 1);
    assert_eq!(victims[0].name.as_deref(), Some("cj-1"));
    let allow = with_status(cronjob("*/1 * * * ?", "Allow", T0 - 600), status);
    let (_, victims, _, _) = run_of(decide(&allow, ms(T0 + 1)));
    assert!(victims.is_empty());
}

#[test]
fn suspended_deleted_or_unknown_zones_start_nothing_and_wait_for_a_change() {
    let mut suspended = cronjob("*/1 * * * ?", "Allow", T0 - 600);
    suspended["spec"]["suspend"] = json!(true);
    assert_eq!(
        wait_of(decide(&typed(suspended), ms(T0 + 1))),
        (vec![], None)
    );

    let mut deleting = cronjob("*/1 * * * ?", "Allow", T0 - 600);
    deleting["metadata"]["deletionTimestamp"] = json!(rfc(T0));
    assert_eq!(
        wait_of(decide(&typed(deleting), ms(T0 + 1))),
        (vec![], None)
    );

    let mut zone = cronjob("*/1 * * * ?", "Allow", T0 - 600);
    zone["spec"]["timeZone"] = json!("Mars/Olympus");
    let (events, requeue) = wait_of(decide(&typed(zone), ms(T0 + 1)));
    assert_eq!(requeue, None);
    assert_eq!(
        events,
        [Event {
            warning: true,
            reason: "UnknownTimeZone",
            message: r#"invalid timeZone: "Mars/Olympus": unknown time zone Mars/Olympus"#.into()
        }]
    );
}

#[test]
fn schedules_that_never_fire_are_invalid_and_never_requeued() {
    let cj = typed(cronjob("0 0 30 2 *", "Allow", T0));
    let (events, requeue) = wait_of(decide(&cj, ms(T0 + 1)));
    assert_eq!(requeue, None);
    assert_eq!(reasons(&events), ["InvalidSchedule"]);
    assert_eq!(
        events[0].message,
        "invalid schedule: 0 0 30 2 * : time difference between two schedules is less than 1 second"
    );
}

#[test]
fn a_zone_in_the_schedule_is_used_with_a_warning() {
    let cj = typed(cronjob("TZ=Europe/Berlin 0 11 * * *", "Allow", T0 - 60));
    // 11:00 in Berlin is 10:00Z: due at T0.
    let (scheduled, _, _, events) = run_of(decide(&cj, ms(T0 + 1)));
    assert_eq!(scheduled, T0);
    assert_eq!(reasons(&events), ["UnsupportedSchedule"]);
}

#[test]
fn the_time_zone_field_moves_the_schedule() {
    let mut v = cronjob("0 11 * * *", "Allow", T0 - 60);
    v["spec"]["timeZone"] = json!("Europe/Berlin");
    let (scheduled, _, _, _) = run_of(decide(&typed(v), ms(T0 + 1)));
    assert_eq!(scheduled, T0);
}

#[test]
fn children_update_active_and_last_successful_time() {
    let cj = with_status(
        cronjob("*/1 * * * ?", "Allow", T0 - 600),
        json!({"active": [active_ref("done", "u-done"), active_ref("running", "u-run"),
                          active_ref("gone", "u-gone")],
               "lastSuccessfulTime": rfc(T0 - 300)}),
    );
    let jobs = [
        job(
            "done",
            "u-done",
            Some("Complete"),
            Some(T0 - 60),
            Some(T0 - 30),
        ),
        job("running", "u-run", None, Some(T0 - 10), None),
        job("stray", "u-stray", None, Some(T0 - 5), None),
        job("old-fail", "u-fail", Some("Failed"), Some(T0 - 500), None),
    ];
    let refs: Vec<&Job> = jobs.iter().collect();
    let unlisted = unlisted_active(&cj, &refs);
    assert_eq!(unlisted.len(), 1);
    assert_eq!(unlisted[0].name.as_deref(), Some("gone"));
    let missing = BTreeSet::from(["gone".to_string()]);
    let (status, events) = reconcile_children(&cj, &refs, &missing);
    let names: Vec<&str> = status
        .active
        .iter()
        .flatten()
        .filter_map(|r| r.name.as_deref())
        .collect();
    assert_eq!(names, ["running"]);
    assert_eq!(status.last_successful_time, Some(time_at(T0 - 30)));
    let messages: Vec<(&str, &str)> = events
        .iter()
        .map(|e| (e.reason, e.message.as_str()))
        .collect();
    assert_eq!(
        messages,
        [
            (
                "SawCompletedJob",
                "Saw completed job: done, condition: Complete"
            ),
            (
                "UnexpectedJob",
                "Saw a job that the controller did not create or forgot: stray"
            ),
            ("MissingJob", "Active job went missing: gone"),
        ]
    );
    assert!(events[1].warning && !events[0].warning && !events[2].warning);
}

#[test]
fn an_older_completion_does_not_move_last_successful_time_back() {
    let cj = with_status(
        cronjob("*/1 * * * ?", "Allow", T0 - 600),
        json!({"lastSuccessfulTime": rfc(T0)}),
    );
    let jobs = [job(
        "a",
        "ua",
        Some("Complete"),
        Some(T0 - 90),
        Some(T0 - 60),
    )];
    let refs: Vec<&Job> = jobs.iter().collect();
    let (status, events) = reconcile_children(&cj, &refs, &BTreeSet::new());
    assert_eq!(status.last_successful_time, Some(time_at(T0)));
    assert!(events.is_empty());
}

#[test]
fn history_limits_prune_the_oldest_finished_jobs() {
    let mut v = cronjob("*/1 * * * ?", "Allow", T0 - 600);
    v["spec"]["successfulJobsHistoryLimit"] = json!(1);
    v["spec"]["failedJobsHistoryLimit"] = json!(0);
    let cj = typed(v);
    let jobs = [
        job(
            "ok-new",
            "1",
            Some("Complete"),
            Some(T0 - 60),
            Some(T0 - 50),
        ),
        job("ok-unstarted", "2", Some("Complete"), None, None),
        job(
            "ok-old",
            "3",
            Some("Complete"),
            Some(T0 - 180),
            Some(T0 - 170),
        ),
        job("failed", "4", Some("Failed"), Some(T0 - 120), None),
        job("running", "5", None, Some(T0 - 10), None),
    ];
    let refs: Vec<&Job> = jobs.iter().collect();
    let victims: Vec<&str> = history_victims(&cj, &refs)
        .iter()
        .filter_map(|j| j.metadata.name.as_deref())
        .collect();
    // Oldest first; a Job that never started sorts after every started one.
    assert_eq!(victims, ["ok-old", "ok-new", "failed"]);
}

#[test]
fn only_jobs_this_cronjob_controls_are_its_children() {
    let cj = typed(cronjob("*/1 * * * ?", "Allow", T0));
    let mine = job("mine", "1", None, None, None);
    let mut other = job("other", "2", None, None, None);
    other.metadata.owner_references.as_mut().unwrap()[0].name = "someone-else".into();
    let mut orphan = job("orphan", "3", None, None, None);
    orphan.metadata.owner_references = None;
    let all = [mine, other, orphan];
    let names: Vec<&str> = controlled_by(&cj, &all)
        .iter()
        .filter_map(|j| j.metadata.name.as_deref())
        .collect();
    assert_eq!(names, ["mine"]);
    assert!(is_ours(&cj, &all[0]));
    assert!(!is_ours(&cj, &all[2]));
}

#[test]
fn the_requeue_never_busy_polls() {
    let cj = typed(cronjob("*/5 * * * *", "Allow", T0));
    let s = cron::parse_standard("*/5 * * * *").unwrap();
    for offset_ms in [0, 1, 999, 60_000, 299_999] {
        let d = requeue_after(&cj, ms(T0) + offset_ms, &s).unwrap();
        assert!(d >= Duration::from_millis(100), "{offset_ms}: {d:?}");
        assert!(d <= Duration::from_millis(300_100), "{offset_ms}: {d:?}");
    }
}
