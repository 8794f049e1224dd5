//! batch/v1 CronJob: upstream's defaults (SetDefaults_CronJob plus the job template's pod spec),
//! ValidateCronJobCreate with its field paths and messages — the schedule and time zone read by
//! the same code the cronjob controller schedules with (`kiln_common::cron`) — and kubectl's
//! columns.

use k8s_openapi::api::batch::v1::CronJob;
use kiln_common::cron::{self, go};
use serde_json::{json, Value};

use super::apps::{go_map, set_default};
use super::columns::{self as c, col, human_duration};
use super::defaults::{pod_spec_defaults, pod_spec_validation};
use super::strategy::{typed, ResourceSpec};
use crate::selectors::label_selector_string;
use crate::status::Cause;

const CONCURRENCY_POLICIES: &[&str] = &["Allow", "Forbid", "Replace"];
/// The controller names each Job `<cronjob>-<minutes since the epoch>`, 11 more characters, and a
/// Job's name must stay a 63-character label.
const MAX_NAME: usize = 63 - 11;

pub fn cronjob_defaults(obj: &mut Value) {
    let spec = &mut obj["spec"];
    if !spec.is_object() {
        return;
    }
    if spec["concurrencyPolicy"].as_str().unwrap_or("").is_empty() {
        spec["concurrencyPolicy"] = json!("Allow");
    }
    set_default(spec, "suspend", json!(false));
    set_default(spec, "successfulJobsHistoryLimit", json!(3));
    set_default(spec, "failedJobsHistoryLimit", json!(1));
    // Upstream defaults the template's pod spec and pod failure policy here, but not the Job's own
    // fields (completions, parallelism, backoffLimit): those are defaulted when a Job is created.
    // Looked up with get_mut: indexing a missing key mutably would insert it.
    let Some(job) = spec.get_mut("jobTemplate").and_then(|t| t.get_mut("spec")) else {
        return;
    };
    let rules = job
        .get_mut("podFailurePolicy")
        .and_then(|p| p.get_mut("rules"))
        .and_then(Value::as_array_mut);
    for rule in rules.into_iter().flatten() {
        let patterns = rule
            .get_mut("onPodConditions")
            .and_then(Value::as_array_mut);
        for p in patterns.into_iter().flatten() {
            set_default(p, "status", json!("True"));
        }
    }
    if let Some(pod) = job.get_mut("template").and_then(|t| t.get_mut("spec")) {
        pod_spec_defaults(pod);
    }
}

/// ValidateCronJobCreate (the API server also runs it on updates: every stored CronJob passed it).
pub fn cronjob_validation(obj: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let name = obj["metadata"]["name"].as_str().unwrap_or("");
    if name.len() > MAX_NAME {
        causes.push(Cause::invalid(
            "metadata.name",
            &json!(name),
            "must be no more than 52 characters",
        ));
    }
    let spec = &obj["spec"];
    causes.extend(schedule_validation(spec));
    non_negative(&mut causes, spec, "spec", "startingDeadlineSeconds");
    causes.extend(time_zone_validation(&spec["timeZone"]));
    match spec["concurrencyPolicy"].as_str().unwrap_or("") {
        "" => causes.push(Cause::required("spec.concurrencyPolicy", "")),
        p if CONCURRENCY_POLICIES.contains(&p) => {}
        other => causes.push(Cause::not_supported(
            "spec.concurrencyPolicy",
            other,
            CONCURRENCY_POLICIES,
        )),
    }
    causes.extend(job_template_validation(&spec["jobTemplate"]["spec"]));
    non_negative(&mut causes, spec, "spec", "successfulJobsHistoryLimit");
    non_negative(&mut causes, spec, "spec", "failedJobsHistoryLimit");
    causes
}

fn schedule_validation(spec: &Value) -> Vec<Cause> {
    let schedule = spec["schedule"].as_str().unwrap_or("");
    if schedule.is_empty() {
        return vec![Cause::required("spec.schedule", "")];
    }
    let mut causes = Vec::new();
    if let Err(e) = cron::parse_standard(schedule) {
        causes.push(Cause::invalid(
            "spec.schedule",
            &json!(schedule),
            &e.to_string(),
        ));
    }
    // Upstream keeps the zone out of the schedule: it belongs in spec.timeZone.
    if schedule.contains("TZ") {
        causes.push(Cause::invalid(
            "spec.schedule",
            &json!(schedule),
            "cannot use TZ or CRON_TZ in schedule, use timeZone field instead",
        ));
    }
    causes
}

/// validateTimeZone: the IANA naming rules for each part, then the zone database.
fn time_zone_validation(zone: &Value) -> Vec<Cause> {
    let Some(name) = zone.as_str() else {
        return Vec::new();
    };
    let invalid = |detail: &str| vec![Cause::invalid("spec.timeZone", zone, detail)];
    if name.is_empty() {
        return invalid("timeZone must be nil or non-empty string");
    }
    let valid_part = |part: &str| {
        (1..=14).contains(&part.len())
            && part != "."
            && part != ".."
            && !part.starts_with('-')
            && part
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '+'))
    };
    if !name.split('/').all(valid_part) {
        return invalid(&format!("unknown time zone {name}"));
    }
    let mut causes = Vec::new();
    if name.eq_ignore_ascii_case("Local") {
        causes.extend(invalid(
            "timeZone must be an explicit time zone as defined in https://www.iana.org/time-zones",
        ));
    }
    if let Err(e) = go::load_location(name) {
        causes.extend(invalid(&e));
    }
    causes
}

fn non_negative(causes: &mut Vec<Cause>, spec: &Value, path: &str, field: &str) {
    if spec[field].as_i64().is_some_and(|v| v < 0) {
        causes.push(Cause::invalid(
            &format!("{path}.{field}"),
            &spec[field],
            "must be greater than or equal to 0",
        ));
    }
}

/// ValidateJobTemplateSpec: validateJobSpec at `spec.jobTemplate.spec`, and a selector left to the
/// Job's own defaulting.
fn job_template_validation(job: &Value) -> Vec<Cause> {
    const PATH: &str = "spec.jobTemplate.spec";
    let mut causes = Vec::new();
    for field in [
        "parallelism",
        "completions",
        "activeDeadlineSeconds",
        "backoffLimit",
        "ttlSecondsAfterFinished",
        "backoffLimitPerIndex",
        "maxFailedIndexes",
    ] {
        non_negative(&mut causes, job, PATH, field);
    }
    if !job["maxFailedIndexes"].is_null() && job["backoffLimitPerIndex"].is_null() {
        causes.push(Cause::required(
            &format!("{PATH}.backoffLimitPerIndex"),
            "when maxFailedIndexes is specified",
        ));
    }
    let indexed = match job["completionMode"].as_str() {
        None | Some("NonIndexed") => false,
        Some("Indexed") => {
            if job["completions"].is_null() {
                causes.push(Cause::required(
                    &format!("{PATH}.completions"),
                    "when completion mode is Indexed",
                ));
            }
            true
        }
        Some(other) => {
            causes.push(Cause::not_supported(
                &format!("{PATH}.completionMode"),
                other,
                &["NonIndexed", "Indexed"],
            ));
            false
        }
    };
    if !indexed {
        for field in ["backoffLimitPerIndex", "maxFailedIndexes", "successPolicy"] {
            if !job[field].is_null() {
                causes.push(Cause::invalid(
                    &format!("{PATH}.{field}"),
                    &job[field],
                    "requires indexed completion mode",
                ));
            }
        }
    }
    causes.extend(pod_spec_validation(
        &job["template"]["spec"],
        &format!("{PATH}.template.spec"),
    ));
    causes.extend(super::apparmor_annotations::template(
        &job["template"],
        &format!("{PATH}.template"),
    ));
    let restart_path = format!("{PATH}.template.spec.restartPolicy");
    match job["template"]["spec"]["restartPolicy"]
        .as_str()
        .unwrap_or("")
    {
        // Pod defaulting turns an unset policy into Always, so both read as "not chosen".
        "" | "Always" => causes.push(Cause::required(
            &restart_path,
            r#"valid values: "OnFailure", "Never""#,
        )),
        "OnFailure" if !job["podFailurePolicy"].is_null() => causes.push(Cause::invalid(
            &restart_path,
            &json!("OnFailure"),
            r#"only "Never" is supported when podFailurePolicy is specified"#,
        )),
        "OnFailure" | "Never" => {}
        other => causes.push(Cause::not_supported(
            &restart_path,
            other,
            &["OnFailure", "Never"],
        )),
    }
    if !job["selector"].is_null() {
        causes.push(Cause::invalid_raw(
            &format!("{PATH}.selector"),
            &go_selector(&job["selector"]),
            "`selector` will be auto-generated",
        ));
    }
    if job["manualSelector"] == json!(true) {
        causes.push(Cause {
            reason: "FieldValueNotSupported",
            message: r#"Unsupported value: true: supported values: "nil", "false""#.to_string(),
            field: format!("{PATH}.manualSelector"),
        });
    }
    causes
}

/// A LabelSelector as Go's `%#v` prints it in the field error; clients match on the path and
/// detail, not on this.
fn go_selector(selector: &Value) -> String {
    format!(
        "v1.LabelSelector{{MatchLabels:{}, MatchExpressions:[]v1.LabelSelectorRequirement(nil)}}",
        go_map(&selector["matchLabels"])
    )
}

fn schedule(obj: &Value, _: i64) -> Value {
    json!(obj["spec"]["schedule"].as_str().unwrap_or(""))
}

fn time_zone(obj: &Value, _: i64) -> Value {
    json!(obj["spec"]["timeZone"].as_str().unwrap_or("<none>"))
}

/// printBoolPtr.
fn suspend(obj: &Value, _: i64) -> Value {
    json!(match obj["spec"]["suspend"].as_bool() {
        Some(true) => "True",
        Some(false) => "False",
        None => "<unset>",
    })
}

fn active(obj: &Value, _: i64) -> Value {
    json!(obj["status"]["active"].as_array().map_or(0, Vec::len))
}

fn last_schedule(obj: &Value, now: i64) -> Value {
    let Some(at) = obj["status"]["lastScheduleTime"].as_str() else {
        return json!("<none>");
    };
    match time::OffsetDateTime::parse(at, &time::format_description::well_known::Rfc3339) {
        Ok(t) => json!(human_duration(now - t.unix_timestamp())),
        Err(_) => json!("<unknown>"),
    }
}

fn template_containers(obj: &Value, field: &str) -> Value {
    let names: Vec<&str> = obj["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
        .as_array()
        .map(|l| l.iter().filter_map(|c| c[field].as_str()).collect())
        .unwrap_or_default();
    json!(names.join(","))
}

fn containers(obj: &Value, _: i64) -> Value {
    template_containers(obj, "name")
}

fn images(obj: &Value, _: i64) -> Value {
    template_containers(obj, "image")
}

fn selector(obj: &Value, _: i64) -> Value {
    let s = label_selector_string(&obj["spec"]["jobTemplate"]["spec"]["selector"]);
    json!(if s.is_empty() {
        "<none>".to_string()
    } else {
        s
    })
}

pub static CRONJOBS: ResourceSpec = ResourceSpec {
    group: "batch",
    plural: "cronjobs",
    singular: "cronjob",
    kind: "CronJob",
    list_kind: "CronJobList",
    short_names: &["cj"],
    categories: &["all"],
    status_subresource: true,
    // cronJobStatusStrategy resets only the spec: `/status` may change labels and annotations.
    status_takes_metadata: true,
    generation: true,
    table: &[
        c::NAME_COL,
        col("Schedule", "string", "", "The schedule in Cron format, see https://en.wikipedia.org/wiki/Cron.", 0, schedule),
        col("Timezone", "string", "", "The time zone name for the given schedule, see https://en.wikipedia.org/wiki/List_of_tz_database_time_zones. If not specified, this will default to the time zone of the kube-controller-manager process. The set of valid time zone names and the time zone offset is loaded from the system-wide time zone database by the API server during CronJob validation and the controller manager during execution. If no system-wide time zone database can be found a bundled version of the database is used instead. If the time zone name becomes invalid during the lifetime of a CronJob or due to a change in host configuration, the controller will stop creating new new Jobs and will create a system event with the reason UnknownTimeZone. More information can be found in https://kubernetes.io/docs/concepts/workloads/controllers/cron-jobs/#time-zones", 0, time_zone),
        col("Suspend", "boolean", "", "This flag tells the controller to suspend subsequent executions, it does not apply to already started executions.  Defaults to false.", 0, suspend),
        col("Active", "integer", "", "A list of pointers to currently running jobs.", 0, active),
        col("Last Schedule", "string", "", "Information when was the last time the job was successfully scheduled.", 0, last_schedule),
        c::AGE_COL,
        col("Containers", "string", "", "Names of each container in the template.", 1, containers),
        col("Images", "string", "", "Images referenced by each container in the template.", 1, images),
        col("Selector", "string", "", "A label query over pods that should match the pod count. Normally, the system sets this field for you. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#label-selectors", 1, selector),
    ],
    decode: typed::<CronJob>,
    defaults: cronjob_defaults,
    validate: cronjob_validation,
    ..ResourceSpec::BASE
};

#[cfg(test)]
mod tests {
    use super::*;

    /// The CronJob upstream's e2e tests create (newTestCronJob), as JSON.
    fn e2e_cronjob() -> Value {
        json!({
            "metadata": {"name": "concurrent", "creationTimestamp": "2024-01-15T09:00:00Z"},
            "spec": {
                "schedule": "*/1 * * * ?",
                "concurrencyPolicy": "Allow",
                "jobTemplate": {"spec": {
                    "parallelism": 1, "completions": 1, "backoffLimit": 1,
                    "template": {"spec": {
                        "restartPolicy": "OnFailure",
                        "volumes": [{"name": "data", "emptyDir": {}}],
                        "containers": [{"name": "c", "image": "busybox:1", "command": ["sleep", "300"],
                                        "volumeMounts": [{"mountPath": "/data", "name": "data"}]}]
                    }}
                }}
            }
        })
    }

    fn defaulted(mut cj: Value) -> Value {
        cronjob_defaults(&mut cj);
        cj
    }

    fn causes(cj: Value) -> Vec<(String, String)> {
        cronjob_validation(&defaulted(cj))
            .into_iter()
            .map(|c| (c.field, c.message))
            .collect()
    }

    fn one(field: &str, message: &str) -> Vec<(String, String)> {
        vec![(field.to_string(), message.to_string())]
    }

    #[test]
    fn defaults_match_upstream() {
        let cj = defaulted(
            json!({"spec": {"schedule": "@daily", "concurrencyPolicy": "",
            "jobTemplate": {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}}}}),
        );
        let s = &cj["spec"];
        assert_eq!(s["concurrencyPolicy"], "Allow");
        assert_eq!(s["suspend"], false);
        assert_eq!(s["successfulJobsHistoryLimit"], 3);
        assert_eq!(s["failedJobsHistoryLimit"], 1);
        let job = &s["jobTemplate"]["spec"];
        // The Job's own defaults wait for the Job.
        assert!(job["completions"].is_null() && job["backoffLimit"].is_null());
        assert_eq!(job["template"]["spec"]["dnsPolicy"], "ClusterFirst");
        assert_eq!(job["template"]["spec"]["restartPolicy"], "Always");
    }

    #[test]
    fn explicit_values_are_kept() {
        let mut cj = e2e_cronjob();
        cj["spec"]["suspend"] = json!(true);
        cj["spec"]["concurrencyPolicy"] = json!("Forbid");
        cj["spec"]["successfulJobsHistoryLimit"] = json!(0);
        let s = &defaulted(cj)["spec"];
        assert_eq!(
            (
                s["suspend"].clone(),
                s["concurrencyPolicy"].clone(),
                s["successfulJobsHistoryLimit"].clone()
            ),
            (json!(true), json!("Forbid"), json!(0))
        );
    }

    #[test]
    fn upstreams_test_cronjob_is_valid() {
        assert!(causes(e2e_cronjob()).is_empty());
        let mut api_ops = e2e_cronjob();
        api_ops["spec"]["schedule"] = json!("* */1 * * ?");
        assert!(causes(api_ops).is_empty());
        let mut zoned = e2e_cronjob();
        zoned["spec"]["timeZone"] = json!("Europe/Berlin");
        assert!(causes(zoned).is_empty());
    }

    #[test]
    fn schedule_errors() {
        let with = |schedule: Value| {
            let mut cj = e2e_cronjob();
            cj["spec"]["schedule"] = schedule;
            causes(cj)
        };
        assert_eq!(with(json!("")), one("spec.schedule", "Required value"));
        assert_eq!(
            with(json!("bad")),
            one(
                "spec.schedule",
                r#"Invalid value: "bad": expected exactly 5 fields, found 1: [bad]"#
            )
        );
        assert_eq!(
            with(json!("@every 5x")),
            one(
                "spec.schedule",
                r#"Invalid value: "@every 5x": failed to parse duration @every 5x: time: unknown unit "x" in duration "5x""#
            )
        );
        assert_eq!(
            with(json!("TZ=UTC 0 * * * *")),
            one(
                "spec.schedule",
                r#"Invalid value: "TZ=UTC 0 * * * *": cannot use TZ or CRON_TZ in schedule, use timeZone field instead"#
            )
        );
        assert_eq!(
            with(json!("CRON_TZ=Nowhere 0 * * * *")),
            vec![
                ("spec.schedule".to_string(), r#"Invalid value: "CRON_TZ=Nowhere 0 * * * *": provided bad location Nowhere: unknown time zone Nowhere"#.to_string()),
                ("spec.schedule".to_string(), r#"Invalid value: "CRON_TZ=Nowhere 0 * * * *": cannot use TZ or CRON_TZ in schedule, use timeZone field instead"#.to_string()),
            ]
        );
        for ok in ["@hourly", "@every 90s", "0 9 * * MON-FRI", "@annually"] {
            assert!(with(json!(ok)).is_empty(), "{ok}");
        }
    }

    #[test]
    fn time_zone_errors() {
        let with = |zone: &str| {
            let mut cj = e2e_cronjob();
            cj["spec"]["timeZone"] = json!(zone);
            causes(cj)
        };
        // Upstream's e2e "should support timezone" case.
        assert_eq!(
            with("bad-time-zone"),
            one(
                "spec.timeZone",
                r#"Invalid value: "bad-time-zone": unknown time zone bad-time-zone"#
            )
        );
        assert_eq!(
            with(""),
            one(
                "spec.timeZone",
                r#"Invalid value: "": timeZone must be nil or non-empty string"#
            )
        );
        assert_eq!(
            with("America/../etc"),
            one(
                "spec.timeZone",
                r#"Invalid value: "America/../etc": unknown time zone America/../etc"#
            )
        );
        assert_eq!(
            with("Local"),
            one(
                "spec.timeZone",
                r#"Invalid value: "Local": timeZone must be an explicit time zone as defined in https://www.iana.org/time-zones"#
            )
        );
        assert_eq!(with("local").len(), 2);
        assert!(with("Etc/GMT+5").is_empty());
        assert!(with("UTC").is_empty());
    }

    #[test]
    fn spec_field_errors() {
        let mut cj = e2e_cronjob();
        cj["spec"]["startingDeadlineSeconds"] = json!(-1);
        cj["spec"]["successfulJobsHistoryLimit"] = json!(-2);
        cj["spec"]["failedJobsHistoryLimit"] = json!(-3);
        cj["spec"]["concurrencyPolicy"] = json!("Sometimes");
        assert_eq!(
            causes(cj),
            vec![
                ("spec.startingDeadlineSeconds".to_string(), "Invalid value: -1: must be greater than or equal to 0".to_string()),
                ("spec.concurrencyPolicy".to_string(), r#"Unsupported value: "Sometimes": supported values: "Allow", "Forbid", "Replace""#.to_string()),
                ("spec.successfulJobsHistoryLimit".to_string(), "Invalid value: -2: must be greater than or equal to 0".to_string()),
                ("spec.failedJobsHistoryLimit".to_string(), "Invalid value: -3: must be greater than or equal to 0".to_string()),
            ]
        );
        let mut long = e2e_cronjob();
        long["metadata"]["name"] = json!("a".repeat(53));
        assert_eq!(
            causes(long)[0].1,
            format!(
                "Invalid value: \"{}\": must be no more than 52 characters",
                "a".repeat(53)
            )
        );
    }

    #[test]
    fn job_template_errors() {
        let path = "spec.jobTemplate.spec.template.spec.restartPolicy";
        let restart = |policy: Option<&str>| {
            let mut cj = e2e_cronjob();
            let spec = &mut cj["spec"]["jobTemplate"]["spec"]["template"]["spec"];
            match policy {
                Some(p) => spec["restartPolicy"] = json!(p),
                None => {
                    spec.as_object_mut().unwrap().remove("restartPolicy");
                }
            }
            causes(cj)
        };
        let required = one(
            path,
            r#"Required value: valid values: "OnFailure", "Never""#,
        );
        assert_eq!(restart(None), required);
        assert_eq!(restart(Some("Always")), required);
        assert_eq!(
            restart(Some("Sometimes")),
            one(
                path,
                r#"Unsupported value: "Sometimes": supported values: "OnFailure", "Never""#
            )
        );
        assert!(restart(Some("Never")).is_empty());

        let mut cj = e2e_cronjob();
        let job = &mut cj["spec"]["jobTemplate"]["spec"];
        job["backoffLimit"] = json!(-1);
        job["manualSelector"] = json!(true);
        job["selector"] = json!({"matchLabels": {"a": "b"}});
        job["template"]["spec"]["containers"][0]["image"] = json!("");
        let got = causes(cj);
        let fields: Vec<&str> = got.iter().map(|(f, _)| f.as_str()).collect();
        assert_eq!(
            fields,
            [
                "spec.jobTemplate.spec.backoffLimit",
                "spec.jobTemplate.spec.template.spec.containers[0].image",
                "spec.jobTemplate.spec.selector",
                "spec.jobTemplate.spec.manualSelector",
            ]
        );
        assert!(got[2].1.ends_with(": `selector` will be auto-generated"));
        assert_eq!(
            got[3].1,
            r#"Unsupported value: true: supported values: "nil", "false""#
        );
    }

    #[test]
    fn status_writes_keep_the_spec_and_take_metadata() {
        use super::super::lifecycle::{
            prepare_create, prepare_update, FieldValidation, UpdateScope,
        };
        let old = prepare_create(
            &CRONJOBS,
            Some("ns"),
            e2e_cronjob(),
            FieldValidation::Strict,
        )
        .unwrap();
        assert_eq!(old["status"], json!({}));
        assert_eq!(old["metadata"]["generation"], 1);
        let mut new = old.clone();
        new["metadata"]["annotations"] = json!({"patchedstatus": "true"});
        new["spec"]["schedule"] = json!("@daily");
        new["status"] = json!({"lastScheduleTime": "2024-01-15T10:00:00Z"});
        let out = prepare_update(
            &CRONJOBS,
            UpdateScope::Status,
            Some("ns"),
            &old,
            new,
            FieldValidation::Strict,
        )
        .unwrap();
        assert_eq!(out["status"]["lastScheduleTime"], "2024-01-15T10:00:00Z");
        assert_eq!(out["metadata"]["annotations"]["patchedstatus"], "true");
        assert_eq!(out["spec"]["schedule"], "*/1 * * * ?");
        assert_eq!(out["metadata"]["generation"], 1);
    }

    #[test]
    fn columns_match_kubectls() {
        let now = 1_705_312_800; // 2024-01-15T10:00:00Z
        let mut cj = defaulted(e2e_cronjob());
        cj["status"] = json!({"active": [{"name": "concurrent-28420980"}], "lastScheduleTime": "2024-01-15T09:59:00Z"});
        let names: Vec<&str> = CRONJOBS.table.iter().map(|c| c.name).collect();
        assert_eq!(
            names,
            [
                "Name",
                "Schedule",
                "Timezone",
                "Suspend",
                "Active",
                "Last Schedule",
                "Age",
                "Containers",
                "Images",
                "Selector"
            ]
        );
        let wide: Vec<&str> = CRONJOBS
            .table
            .iter()
            .filter(|c| c.priority == 1)
            .map(|c| c.name)
            .collect();
        assert_eq!(wide, ["Containers", "Images", "Selector"]);
        let cells: Vec<Value> = CRONJOBS.table.iter().map(|c| (c.cell)(&cj, now)).collect();
        assert_eq!(
            cells,
            vec![
                json!("concurrent"),
                json!("*/1 * * * ?"),
                json!("<none>"),
                json!("False"),
                json!(1),
                json!("60s"),
                json!("60m"),
                json!("c"),
                json!("busybox:1"),
                json!("<none>"),
            ]
        );
        let mut fresh = e2e_cronjob();
        fresh["spec"]["timeZone"] = json!("Europe/Berlin");
        assert_eq!(time_zone(&fresh, now), json!("Europe/Berlin"));
        assert_eq!(last_schedule(&fresh, now), json!("<none>"));
        assert_eq!(suspend(&fresh, now), json!("<unset>"));
        assert_eq!(active(&fresh, now), json!(0));
    }
}
