//! apps/v1 StatefulSets and ControllerRevisions: upstream's apps/v1 defaulters, the StatefulSet and
//! ControllerRevision validators (including the update rule that freezes most of the spec), and
//! kubectl's columns. The controller (`kiln-controller-manager`'s `statefulset`) does the rest.

use k8s_openapi::api::apps::v1::{ControllerRevision, StatefulSet};
use serde_json::{json, Value};

use super::apps::{go_map, selector_matches, set_default, CONTAINERS_COL, IMAGES_COL};
use super::columns::{self as c, col};
use super::defaults::{pod_spec_defaults, pod_spec_validation};
use super::policy::validation::{go_int_or_string, int_or_percent, percent};
use super::strategy::{typed, ResourceSpec, ScaleSpec};
use crate::status::Cause;

/// Upstream's message when an update changes a frozen part of the spec (1.32 wording).
pub const FROZEN_SPEC: &str = "updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden";

/// The spec fields an update may change; everything else must stay as stored.
const MUTABLE: &[&str] = &[
    "replicas",
    "ordinals",
    "template",
    "updateStrategy",
    "persistentVolumeClaimRetentionPolicy",
    "minReadySeconds",
];

const NONNEGATIVE: &str = "must be greater than or equal to 0";

/// SetDefaults_StatefulSet of apps/v1 as with the MaxUnavailableStatefulSet gate on (kiln's
/// controller honours rollingUpdate.maxUnavailable, so its default of 1 is filled in too).
pub fn statefulset_defaults(obj: &mut Value) {
    let spec = &mut obj["spec"];
    set_default(spec, "podManagementPolicy", json!("OrderedReady"));
    set_default(spec, "updateStrategy", json!({"type": "RollingUpdate"}));
    if spec["updateStrategy"]["type"].is_null() {
        spec["updateStrategy"]["type"] = json!("RollingUpdate");
    }
    if spec["updateStrategy"]["type"] == "RollingUpdate" {
        set_default(&mut spec["updateStrategy"], "rollingUpdate", json!({}));
        set_default(
            &mut spec["updateStrategy"]["rollingUpdate"],
            "partition",
            json!(0),
        );
        set_default(
            &mut spec["updateStrategy"]["rollingUpdate"],
            "maxUnavailable",
            json!(1),
        );
    }
    set_default(spec, "persistentVolumeClaimRetentionPolicy", json!({}));
    let policy = &mut spec["persistentVolumeClaimRetentionPolicy"];
    set_default(policy, "whenDeleted", json!("Retain"));
    set_default(policy, "whenScaled", json!("Retain"));
    set_default(spec, "replicas", json!(1));
    set_default(spec, "revisionHistoryLimit", json!(10));
    pod_spec_defaults(&mut spec["template"]["spec"]);
}

fn nonnegative(causes: &mut Vec<Cause>, value: &Value, field: &str) {
    if value.as_i64().is_some_and(|v| v < 0) {
        causes.push(Cause::invalid(field, value, NONNEGATIVE));
    }
}

fn policy_type(causes: &mut Vec<Cause>, value: &Value, field: &str) {
    let v = value.as_str().unwrap_or("");
    if !matches!(v, "Retain" | "Delete") {
        causes.push(Cause::not_supported(field, v, &["Retain", "Delete"]));
    }
}

/// validateRollingUpdateStatefulSet's maxUnavailable rules: a non-negative int or a percent of at
/// most 100%, and not 0 (as an int, a percent, or a string Go's IntValue reads as 0).
fn max_unavailable(causes: &mut Vec<Cause>, value: &Value) {
    const FIELD: &str = "spec.updateStrategy.rollingUpdate.maxUnavailable";
    if value.is_null() {
        return;
    }
    causes.extend(int_or_percent(value, FIELD));
    let zero = match value {
        Value::String(s) => percent(s).unwrap_or_else(|| s.parse().unwrap_or(0)) == 0,
        other => other.as_i64() == Some(0),
    };
    if zero {
        causes.push(Cause::invalid_raw(
            FIELD,
            &go_int_or_string(value),
            "cannot be 0",
        ));
    }
}

/// ValidateStatefulSetSpec plus the status rules of ValidateStatefulSetStatus (a status write is
/// validated by the same hook here).
pub fn statefulset_validation(obj: &Value) -> Vec<Cause> {
    let spec = &obj["spec"];
    let mut causes = Vec::new();
    match spec["podManagementPolicy"].as_str().unwrap_or("") {
        "" => causes.push(Cause::required("spec.podManagementPolicy", "")),
        "OrderedReady" | "Parallel" => {}
        _ => causes.push(Cause::invalid(
            "spec.podManagementPolicy",
            &spec["podManagementPolicy"],
            "must be 'OrderedReady' or 'Parallel'",
        )),
    }
    let strategy = &spec["updateStrategy"];
    match strategy["type"].as_str().unwrap_or("") {
        "" => causes.push(Cause::required("spec.updateStrategy", "")),
        "OnDelete" => {
            if !strategy["rollingUpdate"].is_null() {
                causes.push(Cause::invalid_raw(
                    "spec.updateStrategy.rollingUpdate",
                    &strategy["rollingUpdate"].to_string(),
                    "only allowed for updateStrategy 'RollingUpdate'",
                ));
            }
        }
        "RollingUpdate" => {
            nonnegative(
                &mut causes,
                &strategy["rollingUpdate"]["partition"],
                "spec.updateStrategy.rollingUpdate.partition",
            );
            max_unavailable(&mut causes, &strategy["rollingUpdate"]["maxUnavailable"]);
        }
        _ => causes.push(Cause::invalid_raw(
            "spec.updateStrategy",
            &strategy.to_string(),
            "must be 'RollingUpdate' or 'OnDelete'",
        )),
    }
    let policy = &spec["persistentVolumeClaimRetentionPolicy"];
    if policy.is_object() {
        policy_type(
            &mut causes,
            &policy["whenDeleted"],
            "spec.persistentVolumeClaimRetentionPolicy.whenDeleted",
        );
        policy_type(
            &mut causes,
            &policy["whenScaled"],
            "spec.persistentVolumeClaimRetentionPolicy.whenScaled",
        );
    }
    nonnegative(&mut causes, &spec["replicas"], "spec.replicas");
    nonnegative(
        &mut causes,
        &spec["minReadySeconds"],
        "spec.minReadySeconds",
    );
    if spec["ordinals"].is_object() {
        nonnegative(
            &mut causes,
            &spec["ordinals"]["start"],
            "spec.ordinals.start",
        );
    }
    let selector = &spec["selector"];
    let labels = &spec["template"]["metadata"]["labels"];
    let empty = selector["matchLabels"]
        .as_object()
        .is_none_or(|m| m.is_empty())
        && selector["matchExpressions"]
            .as_array()
            .is_none_or(|l| l.is_empty());
    if selector.is_null() {
        causes.push(Cause::required("spec.selector", ""));
    } else if empty {
        causes.push(Cause::invalid_raw(
            "spec.selector",
            &selector.to_string(),
            "empty selector is invalid for statefulset",
        ));
    } else if !selector_matches(selector, labels) {
        causes.push(Cause::invalid_raw(
            "spec.template.metadata.labels",
            &go_map(labels),
            "`selector` does not match template `labels`",
        ));
    }
    let template = &spec["template"]["spec"];
    let restart = template["restartPolicy"].as_str().unwrap_or("");
    if restart != "Always" {
        causes.push(Cause::not_supported(
            "spec.template.spec.restartPolicy",
            restart,
            &["Always"],
        ));
    }
    if !template["activeDeadlineSeconds"].is_null() {
        causes.push(Cause::forbidden(
            "spec.template.spec.activeDeadlineSeconds",
            "activeDeadlineSeconds in StatefulSet is not Supported",
        ));
    }
    causes.extend(pod_spec_validation(template, "spec.template.spec"));
    causes.extend(super::apparmor_annotations::template(
        &obj["spec"]["template"],
        "spec.template",
    ));
    causes.extend(status_validation(&obj["status"]));
    causes
}

/// ValidateStatefulSetStatus: counts are non-negative and bounded by status.replicas.
fn status_validation(status: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    if !status.is_object() {
        return causes;
    }
    for f in [
        "replicas",
        "readyReplicas",
        "currentReplicas",
        "updatedReplicas",
        "availableReplicas",
        "observedGeneration",
        "collisionCount",
    ] {
        nonnegative(&mut causes, &status[f], &format!("status.{f}"));
    }
    let count = |f: &str| status[f].as_i64().unwrap_or(0);
    for f in [
        "readyReplicas",
        "currentReplicas",
        "updatedReplicas",
        "availableReplicas",
    ] {
        if count(f) > count("replicas") {
            causes.push(Cause::invalid(
                &format!("status.{f}"),
                &json!(count(f)),
                "cannot be greater than status.replicas",
            ));
        }
    }
    if count("availableReplicas") > count("readyReplicas") {
        causes.push(Cause::invalid(
            "status.availableReplicas",
            &json!(count("availableReplicas")),
            "cannot be greater than status.readyReplicas",
        ));
    }
    causes
}

/// ValidateStatefulSetUpdate: only the MUTABLE fields may change; collisionCount never decreases.
pub fn statefulset_update_validation(old: &Value, new: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let frozen = |spec: &Value| {
        let mut s = spec.clone();
        if let Some(m) = s.as_object_mut() {
            for f in MUTABLE {
                m.remove(*f);
            }
        }
        s
    };
    if frozen(&old["spec"]) != frozen(&new["spec"]) {
        causes.push(Cause::forbidden("spec", FROZEN_SPEC));
    }
    let old_cc = old["status"]["collisionCount"].as_i64();
    let new_cc = new["status"]["collisionCount"].as_i64();
    if let Some(o) = old_cc {
        if new_cc.unwrap_or(0) < o {
            causes.push(Cause::invalid(
                "status.collisionCount",
                &json!(new_cc.unwrap_or(0)),
                "cannot be decremented",
            ));
        }
    }
    causes
}

pub fn controllerrevision_validation(obj: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    if obj["data"].is_null() {
        causes.push(Cause::required("data", "data is mandatory"));
    }
    nonnegative(&mut causes, &obj["revision"], "revision");
    causes
}

/// ValidateControllerRevisionUpdate: the data is immutable (the revision number is not: a
/// controller renumbers an old revision when it rolls back to it).
pub fn controllerrevision_update_validation(old: &Value, new: &Value) -> Vec<Cause> {
    if old["data"] != new["data"] {
        return vec![Cause::invalid_raw(
            "data",
            &new["data"].to_string(),
            "field is immutable",
        )];
    }
    Vec::new()
}

fn statefulset_ready(obj: &Value, _: i64) -> Value {
    let n = |p: &str| obj.pointer(p).and_then(Value::as_i64).unwrap_or(0);
    json!(format!(
        "{}/{}",
        n("/status/readyReplicas"),
        n("/spec/replicas")
    ))
}

/// `<kind>.<group>/<name>` of the controller, as kubectl's printer formats it.
fn revision_controller(obj: &Value, _: i64) -> Value {
    let owner = obj["metadata"]["ownerReferences"]
        .as_array()
        .and_then(|refs| refs.iter().find(|r| r["controller"] == true));
    let Some(owner) = owner else {
        return json!("<none>");
    };
    let kind = owner["kind"].as_str().unwrap_or("").to_lowercase();
    let api_version = owner["apiVersion"].as_str().unwrap_or("");
    let group = api_version
        .rsplit_once('/')
        .map(|(g, _)| g)
        .unwrap_or_default();
    let name = owner["name"].as_str().unwrap_or("");
    if kind.is_empty() {
        return json!(name);
    }
    json!(if group.is_empty() {
        format!("{kind}/{name}")
    } else {
        format!("{kind}.{group}/{name}")
    })
}

fn revision_number(obj: &Value, _: i64) -> Value {
    json!(obj["revision"].as_i64().unwrap_or(0))
}

pub static STATEFULSETS: ResourceSpec = ResourceSpec {
    group: "apps",
    plural: "statefulsets",
    singular: "statefulset",
    kind: "StatefulSet",
    list_kind: "StatefulSetList",
    short_names: &["sts"],
    categories: &["all"],
    status_subresource: true,
    generation: true,
    // Pods are named `<set>-<ordinal>` and use that as their hostname, so the set's name must
    // be a DNS label (upstream's ValidateStatefulSetName).
    name_is_label: true,
    table: &[
        c::NAME_COL,
        col(
            "Ready",
            "string",
            "",
            "Number of the pod with ready state",
            0,
            statefulset_ready,
        ),
        c::AGE_COL,
        CONTAINERS_COL,
        IMAGES_COL,
    ],
    decode: typed::<StatefulSet>,
    defaults: statefulset_defaults,
    validate: statefulset_validation,
    validate_update: statefulset_update_validation,
    scale: Some(ScaleSpec {
        selector: "/spec/selector",
        ..ScaleSpec::REPLICAS
    }),
    ..ResourceSpec::BASE
};

pub static CONTROLLERREVISIONS: ResourceSpec = ResourceSpec {
    group: "apps",
    plural: "controllerrevisions",
    singular: "controllerrevision",
    kind: "ControllerRevision",
    list_kind: "ControllerRevisionList",
    table: &[
        c::NAME_COL,
        col(
            "Controller",
            "string",
            "",
            "Controller of the object",
            0,
            revision_controller,
        ),
        col(
            "Revision",
            "string",
            "",
            "Revision indicates the revision of the state represented by Data.",
            0,
            revision_number,
        ),
        c::AGE_COL,
    ],
    decode: typed::<ControllerRevision>,
    validate: controllerrevision_validation,
    validate_update: controllerrevision_update_validation,
    ..ResourceSpec::BASE
};

#[cfg(test)]
#[path = "statefulsets_tests.rs"]
mod tests;
