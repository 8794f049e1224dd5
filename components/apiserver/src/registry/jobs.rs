//! batch/v1 Job: upstream's defaults (SetDefaults_Job), the generated selector and pod labels of
//! its strategy, the validation clients trip over (restart policy, counts, indexed mode, pod failure
//! policy), the fields an update may not change, and kubectl's columns.

use k8s_openapi::api::batch::v1::Job;
use serde_json::{json, Value};

use super::apps::{
    go_map, selector_matches, set_default, CONTAINERS_COL, IMAGES_COL, SELECTOR_COL,
};
use super::columns::{self as c, col, human_duration};
use super::defaults::{pod_spec_defaults, pod_spec_validation};
use super::strategy::{typed, ResourceSpec};
use crate::status::Cause;

/// The label (and selector key) tying a Job's pods to it by uid, and its pre-1.27 spelling.
pub const CONTROLLER_UID: &str = "batch.kubernetes.io/controller-uid";
pub const JOB_NAME: &str = "batch.kubernetes.io/job-name";
const LEGACY_CONTROLLER_UID: &str = "controller-uid";
const LEGACY_JOB_NAME: &str = "job-name";

pub fn job_defaults(obj: &mut Value) {
    let uid = obj["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let name = obj["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let spec = &mut obj["spec"];
    if !spec.is_object() {
        return;
    }
    if spec["completions"].is_null() && spec["parallelism"].is_null() {
        spec["completions"] = json!(1);
        spec["parallelism"] = json!(1);
    }
    set_default(spec, "parallelism", json!(1));
    if spec["backoffLimit"].is_null() {
        // With a per-index limit the global one is effectively off.
        spec["backoffLimit"] = json!(if spec["backoffLimitPerIndex"].is_null() {
            6
        } else {
            i32::MAX
        });
    }
    set_default(spec, "completionMode", json!("NonIndexed"));
    set_default(spec, "suspend", json!(false));
    // pointer_mut, not indexing: indexing a missing key would create it (an empty policy).
    if let Some(rules) = spec
        .pointer_mut("/podFailurePolicy/rules")
        .and_then(Value::as_array_mut)
    {
        for rule in rules {
            if let Some(conds) = rule
                .get_mut("onPodConditions")
                .and_then(Value::as_array_mut)
            {
                for c in conds {
                    set_default(c, "status", json!("True"));
                }
            }
        }
    }
    if spec["podReplacementPolicy"].is_null() {
        spec["podReplacementPolicy"] = json!(if spec["podFailurePolicy"].is_null() {
            "TerminatingOrFailed"
        } else {
            "Failed"
        });
    }
    // The strategy's generateSelector: unless the user chose their own selector, the Job selects
    // its pods by its uid, and its template labels them so.
    if spec["manualSelector"] != json!(true) && !uid.is_empty() {
        let labels = &mut spec["template"]["metadata"]["labels"];
        if !labels.is_object() {
            *labels = json!({});
        }
        for (k, v) in [
            (CONTROLLER_UID, &uid),
            (JOB_NAME, &name),
            (LEGACY_CONTROLLER_UID, &uid),
            (LEGACY_JOB_NAME, &name),
        ] {
            labels[k] = json!(v);
        }
        spec["selector"] = json!({"matchLabels": {CONTROLLER_UID: uid}});
    }
    pod_spec_defaults(&mut spec["template"]["spec"]);
    // A Job without labels takes its template's (SetDefaults_Job).
    let template_labels = obj["spec"]["template"]["metadata"]["labels"].clone();
    let labels = &mut obj["metadata"]["labels"];
    if template_labels.as_object().is_some_and(|m| !m.is_empty())
        && labels.as_object().is_none_or(|m| m.is_empty())
    {
        *labels = template_labels;
    }
}

fn non_negative(causes: &mut Vec<Cause>, spec: &Value, field: &str) {
    if spec[field].as_i64().is_some_and(|v| v < 0) {
        causes.push(Cause::invalid(
            &format!("spec.{field}"),
            &spec[field],
            "must be greater than or equal to 0",
        ));
    }
}

fn is_indexed(spec: &Value) -> bool {
    spec["completionMode"] == "Indexed"
}

pub fn job_validation(obj: &Value) -> Vec<Cause> {
    let spec = &obj["spec"];
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
        non_negative(&mut causes, spec, field);
    }
    let selector = &spec["selector"];
    if selector.is_null() {
        causes.push(Cause::required("spec.selector", ""));
    } else if !selector_matches(selector, &spec["template"]["metadata"]["labels"]) {
        causes.push(Cause::invalid_raw(
            "spec.template.metadata.labels",
            &go_map(&spec["template"]["metadata"]["labels"]),
            "`selector` does not match template `labels`",
        ));
    }
    match spec["completionMode"].as_str() {
        Some("NonIndexed") | None => {}
        Some("Indexed") => {
            if spec["completions"].is_null() {
                causes.push(Cause::required(
                    "spec.completions",
                    "when completion mode is Indexed",
                ));
            }
        }
        Some(other) => causes.push(Cause::not_supported(
            "spec.completionMode",
            other,
            &["NonIndexed", "Indexed"],
        )),
    }
    if !is_indexed(spec) {
        for field in ["backoffLimitPerIndex", "maxFailedIndexes", "successPolicy"] {
            if !spec[field].is_null() {
                causes.push(Cause::forbidden(
                    &format!("spec.{field}"),
                    "requires indexed completion mode",
                ));
            }
        }
    }
    if !spec["maxFailedIndexes"].is_null() && spec["backoffLimitPerIndex"].is_null() {
        causes.push(Cause::required(
            "spec.backoffLimitPerIndex",
            "when maxFailedIndexes is specified",
        ));
    }
    let restart = spec["template"]["spec"]["restartPolicy"]
        .as_str()
        .unwrap_or("");
    // An unset policy was defaulted to Always by the pod spec defaults; upstream answers both
    // with "Required", anything else outside the two with "Unsupported".
    if restart == "Always" || restart.is_empty() {
        causes.push(Cause::required(
            "spec.template.spec.restartPolicy",
            "valid values: \"OnFailure\", \"Never\"",
        ));
    } else if restart != "OnFailure" && restart != "Never" {
        causes.push(Cause::not_supported(
            "spec.template.spec.restartPolicy",
            restart,
            &["OnFailure", "Never"],
        ));
    } else if !spec["podFailurePolicy"].is_null() && restart != "Never" {
        causes.push(Cause::invalid(
            "spec.template.spec.restartPolicy",
            &json!(restart),
            "only \"Never\" is supported when podFailurePolicy is specified",
        ));
    }
    causes.extend(pod_failure_policy_validation(&spec["podFailurePolicy"]));
    causes.extend(pod_spec_validation(
        &spec["template"]["spec"],
        "spec.template.spec",
    ));
    causes.extend(super::apparmor_annotations::template(
        &spec["template"],
        "spec.template",
    ));
    causes
}

fn pod_failure_policy_validation(policy: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let Some(rules) = policy["rules"].as_array() else {
        return causes;
    };
    for (i, rule) in rules.iter().enumerate() {
        let path = format!("spec.podFailurePolicy.rules[{i}]");
        let action = rule["action"].as_str().unwrap_or("");
        if !["FailJob", "FailIndex", "Ignore", "Count"].contains(&action) {
            causes.push(Cause::not_supported(
                &format!("{path}.action"),
                action,
                &["Count", "FailIndex", "FailJob", "Ignore"],
            ));
        }
        let (codes, conds) = (&rule["onExitCodes"], &rule["onPodConditions"]);
        match (
            codes.is_null(),
            conds.as_array().is_none_or(|c| c.is_empty()),
        ) {
            (false, false) => causes.push(Cause::invalid_raw(
                &path,
                "specifying both OnExitCodes and OnPodConditions is not supported",
                "specifying both OnExitCodes and OnPodConditions is not supported",
            )),
            (true, true) => causes.push(Cause::invalid_raw(
                &path,
                "specifying one of OnExitCodes and OnPodConditions is required",
                "specifying one of OnExitCodes and OnPodConditions is required",
            )),
            _ => {}
        }
        if !codes.is_null() {
            let op = codes["operator"].as_str().unwrap_or("");
            if op != "In" && op != "NotIn" {
                causes.push(Cause::not_supported(
                    &format!("{path}.onExitCodes.operator"),
                    op,
                    &["In", "NotIn"],
                ));
            }
            let values = codes["values"].as_array().map(Vec::as_slice).unwrap_or(&[]);
            if values.is_empty() {
                causes.push(Cause::invalid(
                    &format!("{path}.onExitCodes.values"),
                    &json!([]),
                    "at least one value is required",
                ));
            }
            if op == "In" && values.iter().any(|v| v == 0) {
                causes.push(Cause::invalid(
                    &format!("{path}.onExitCodes.values"),
                    &json!(0),
                    "must not be 0 for the In operator",
                ));
            }
        }
    }
    causes
}

/// Fields fixed once the Job exists (ValidateJobSpecUpdate): its selector, its mode, its template
/// (the running pods were made from it), and its completions outside of elastic Indexed Jobs.
pub fn job_update_validation(old: &Value, new: &Value) -> Vec<Cause> {
    let (o, n) = (&old["spec"], &new["spec"]);
    let mut causes = Vec::new();
    for field in [
        "selector",
        "completionMode",
        "podFailurePolicy",
        "backoffLimitPerIndex",
        "manualSelector",
        "managedBy",
    ] {
        if o[field] != n[field] {
            causes.push(Cause::invalid(
                &format!("spec.{field}"),
                &n[field],
                "field is immutable",
            ));
        }
    }
    // Elastic Indexed Jobs may scale completions together with parallelism.
    let elastic = is_indexed(n) && n["completions"] == n["parallelism"];
    if o["completions"] != n["completions"] && !elastic {
        causes.push(Cause::invalid(
            "spec.completions",
            &n["completions"],
            "field is immutable",
        ));
    }
    // A suspended Job that never started may have its scheduling directives changed; anything
    // else in the template is fixed.
    let never_started = n["suspend"] == json!(true) && old["status"]["startTime"].is_null();
    let strip = |t: &Value| {
        let mut t = t.clone();
        if never_started {
            if let Some(spec) = t["spec"].as_object_mut() {
                for f in ["nodeSelector", "tolerations", "affinity", "schedulingGates"] {
                    spec.remove(f);
                }
            }
            if let Some(meta) = t["metadata"].as_object_mut() {
                meta.remove("labels");
                meta.remove("annotations");
            }
        }
        t
    };
    if strip(&o["template"]) != strip(&n["template"]) {
        causes.push(Cause::invalid_raw(
            "spec.template",
            &template_go(&n["template"]),
            "field is immutable",
        ));
    }
    causes
}

/// The template as upstream's error prints it: a Go struct dump clients only skim; the field path
/// and "field is immutable" are what they match on.
fn template_go(template: &Value) -> String {
    format!("core.PodTemplateSpec{}", template)
}

fn condition_true(obj: &Value, kind: &str) -> bool {
    obj["status"]["conditions"]
        .as_array()
        .is_some_and(|l| l.iter().any(|c| c["type"] == kind && c["status"] == "True"))
}

/// printJob's STATUS: the terminal condition first, then deletion, suspension, interim conditions.
fn status(obj: &Value, _: i64) -> Value {
    let s = if condition_true(obj, "Complete") {
        "Complete"
    } else if condition_true(obj, "Failed") {
        "Failed"
    } else if !obj["metadata"]["deletionTimestamp"].is_null() {
        "Terminating"
    } else if condition_true(obj, "Suspended") {
        "Suspended"
    } else if condition_true(obj, "FailureTarget") {
        "FailureTarget"
    } else if condition_true(obj, "SuccessCriteriaMet") {
        "SuccessCriteriaMet"
    } else {
        "Running"
    };
    json!(s)
}

fn completions(obj: &Value, _: i64) -> Value {
    let succeeded = obj["status"]["succeeded"].as_i64().unwrap_or(0);
    let spec = &obj["spec"];
    json!(match spec["completions"].as_i64() {
        Some(c) => format!("{succeeded}/{c}"),
        None => match spec["parallelism"].as_i64().unwrap_or(1) {
            p if p > 1 => format!("{succeeded}/1 of {p}"),
            _ => format!("{succeeded}/1"),
        },
    })
}

fn unix(obj: &Value, pointer: &str) -> Option<i64> {
    let s = obj.pointer(pointer)?.as_str()?;
    time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339)
        .ok()
        .map(|t| t.unix_timestamp())
}

fn duration(obj: &Value, now: i64) -> Value {
    let Some(start) = unix(obj, "/status/startTime") else {
        return json!("");
    };
    let end = unix(obj, "/status/completionTime").unwrap_or(now);
    json!(human_duration(end - start))
}

pub static JOBS: ResourceSpec = ResourceSpec {
    group: "batch",
    plural: "jobs",
    singular: "job",
    kind: "Job",
    list_kind: "JobList",
    categories: &["all"],
    status_subresource: true,
    generation: true,
    table: &[
        c::NAME_COL,
        col("Status", "string", "", "Status of the job.", 0, status),
        col(
            "Completions",
            "string",
            "",
            "The desired number of successfully finished pods the job should be run with.",
            0,
            completions,
        ),
        col(
            "Duration",
            "string",
            "",
            "Time required to complete the job.",
            0,
            duration,
        ),
        c::AGE_COL,
        CONTAINERS_COL,
        IMAGES_COL,
        SELECTOR_COL,
    ],
    decode: typed::<Job>,
    defaults: job_defaults,
    validate: job_validation,
    validate_update: job_update_validation,
    // Upstream's job status strategy resets only the spec: labels and annotations sent to
    // /status are kept (the conformance status test patches both at once).
    status_takes_metadata: true,
    ..ResourceSpec::BASE
};

#[cfg(test)]
mod tests {
    use super::*;

    fn job(spec: Value) -> Value {
        let mut j = json!({
            "metadata": {"name": "pi", "namespace": "default", "uid": "u-1"},
            "spec": spec,
        });
        job_defaults(&mut j);
        j
    }

    fn template(restart: &str) -> Value {
        json!({"spec": {"restartPolicy": restart, "containers": [{"name": "c", "image": "busybox:1"}]}})
    }

    fn fields(causes: &[Cause]) -> Vec<String> {
        causes.iter().map(|c| c.field.clone()).collect()
    }

    #[test]
    fn defaults_follow_set_defaults_job_and_generate_the_selector() {
        let j = job(json!({"template": template("Never")}));
        let spec = &j["spec"];
        assert_eq!(spec["completions"], 1);
        assert_eq!(spec["parallelism"], 1);
        assert_eq!(spec["backoffLimit"], 6);
        assert_eq!(spec["completionMode"], "NonIndexed");
        assert_eq!(spec["suspend"], false);
        assert_eq!(spec["podReplacementPolicy"], "TerminatingOrFailed");
        assert_eq!(spec["selector"]["matchLabels"][CONTROLLER_UID], "u-1");
        let labels = &spec["template"]["metadata"]["labels"];
        assert_eq!(labels[JOB_NAME], "pi");
        assert_eq!(labels["controller-uid"], "u-1");
        assert_eq!(j["metadata"]["labels"]["job-name"], "pi");
        assert!(job_validation(&j).is_empty(), "{:?}", job_validation(&j));

        let only_parallelism = job(json!({"parallelism": 3, "template": template("Never")}));
        assert!(only_parallelism["spec"]["completions"].is_null());
        let per_index = job(json!({"completionMode": "Indexed", "completions": 2,
            "backoffLimitPerIndex": 1, "template": template("Never")}));
        assert_eq!(per_index["spec"]["backoffLimit"], i32::MAX);
        let pfp = job(json!({"podFailurePolicy": {"rules": [{"action": "Ignore",
            "onPodConditions": [{"type": "DisruptionTarget"}]}]}, "template": template("Never")}));
        assert_eq!(pfp["spec"]["podReplacementPolicy"], "Failed");
        assert_eq!(
            pfp["spec"]["podFailurePolicy"]["rules"][0]["onPodConditions"][0]["status"],
            "True"
        );
    }

    #[test]
    fn a_manual_selector_is_kept() {
        let j = job(
            json!({"manualSelector": true, "selector": {"matchLabels": {"a": "b"}},
            "template": {"metadata": {"labels": {"a": "b"}}, "spec": template("Never")["spec"]}}),
        );
        assert_eq!(j["spec"]["selector"], json!({"matchLabels": {"a": "b"}}));
        assert!(j["spec"]["template"]["metadata"]["labels"][CONTROLLER_UID].is_null());
    }

    #[test]
    fn validation_names_the_field() {
        let always =
            job(json!({"template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}}));
        let c = job_validation(&always);
        assert_eq!(fields(&c), ["spec.template.spec.restartPolicy"]);
        assert_eq!(
            c[0].message,
            "Required value: valid values: \"OnFailure\", \"Never\""
        );
        let mut odd = job(json!({"template": template("Never")}));
        odd["spec"]["template"]["spec"]["restartPolicy"] = json!("Sometimes");
        assert!(job_validation(&odd)[0].message.starts_with(
            "Unsupported value: \"Sometimes\": supported values: \"OnFailure\", \"Never\""
        ));

        let negative = job(
            json!({"completions": -1, "parallelism": -2, "backoffLimit": -1,
            "template": template("Never")}),
        );
        assert_eq!(
            fields(&job_validation(&negative)),
            ["spec.parallelism", "spec.completions", "spec.backoffLimit"]
        );
        let indexed = job(json!({"completionMode": "Indexed", "parallelism": 2,
            "template": template("Never")}));
        assert_eq!(fields(&job_validation(&indexed)), ["spec.completions"]);
        let per_index = job(json!({"backoffLimitPerIndex": 1, "template": template("Never")}));
        assert_eq!(
            fields(&job_validation(&per_index)),
            ["spec.backoffLimitPerIndex"]
        );
        let pfp = job(json!({"podFailurePolicy": {"rules": [{"action": "FailJob",
            "onExitCodes": {"operator": "In", "values": [0]}}]}, "template": template("OnFailure")}));
        assert_eq!(
            fields(&job_validation(&pfp)),
            [
                "spec.template.spec.restartPolicy",
                "spec.podFailurePolicy.rules[0].onExitCodes.values"
            ]
        );
    }

    #[test]
    fn updates_keep_the_selector_template_and_completions() {
        let old = job(json!({"completions": 3, "template": template("Never")}));
        let mut new = old.clone();
        new["spec"]["completions"] = json!(4);
        new["spec"]["template"]["spec"]["containers"][0]["image"] = json!("busybox:2");
        new["spec"]["parallelism"] = json!(5);
        assert_eq!(
            fields(&job_update_validation(&old, &new)),
            ["spec.completions", "spec.template"]
        );
        let mut suspended = old.clone();
        suspended["spec"]["suspend"] = json!(true);
        let mut moved = suspended.clone();
        moved["spec"]["template"]["spec"]["nodeSelector"] = json!({"zone": "a"});
        assert!(job_update_validation(&suspended, &moved).is_empty());

        let elastic_old = job(json!({"completionMode": "Indexed", "completions": 2,
            "parallelism": 2, "template": template("Never")}));
        let mut elastic_new = elastic_old.clone();
        elastic_new["spec"]["completions"] = json!(4);
        elastic_new["spec"]["parallelism"] = json!(4);
        assert!(job_update_validation(&elastic_old, &elastic_new).is_empty());
    }

    #[test]
    fn columns_follow_print_job() {
        let mut j = job(json!({"completions": 5, "parallelism": 2, "template": template("Never")}));
        assert_eq!(status(&j, 0), "Running");
        assert_eq!(completions(&j, 0), "0/5");
        assert_eq!(duration(&j, 0), "");
        j["status"] = json!({"succeeded": 5, "startTime": "2026-01-01T00:00:00Z",
            "completionTime": "2026-01-01T00:00:42Z",
            "conditions": [{"type": "SuccessCriteriaMet", "status": "True"},
                           {"type": "Complete", "status": "True"}]});
        assert_eq!(status(&j, 0), "Complete");
        assert_eq!(completions(&j, 0), "5/5");
        assert_eq!(duration(&j, 0), "42s");
        let mut p = job(json!({"parallelism": 3, "template": template("Never")}));
        assert_eq!(completions(&p, 0), "0/1 of 3");
        p["status"] = json!({"conditions": [{"type": "Suspended", "status": "True"}]});
        assert_eq!(status(&p, 0), "Suspended");
    }
}
