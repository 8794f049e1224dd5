//! core/v1 ReplicationControllers and PodTemplates: upstream's v1 defaulters
//! (SetDefaults_ReplicationController), ValidateReplicationController / ValidatePodTemplate with
//! their field paths and texts, and kubectl's columns. The selector of a ReplicationController is a
//! plain label map, not a LabelSelector; the controller-manager's `replicationcontroller` keeps the
//! replicas.

use k8s_openapi::api::core::v1::{PodTemplate, ReplicationController};
use serde_json::{json, Value};

use super::apps::{go_map, set_default};
use super::columns::{self as c, col};
use super::defaults::{pod_spec_defaults, pod_spec_validation};
use super::strategy::{typed, Column, ResourceSpec, ScaleSpec};
use crate::status::Cause;

const NONNEGATIVE: &str = "must be greater than or equal to 0";

/// labels.FormatLabels: `k=v` pairs sorted by key, `<none>` when empty.
fn format_labels(labels: &Value) -> Value {
    let mut pairs: Vec<String> = labels
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                .collect()
        })
        .unwrap_or_default();
    pairs.sort();
    json!(if pairs.is_empty() {
        "<none>".to_string()
    } else {
        pairs.join(",")
    })
}

fn list_at(obj: &Value, containers: &str, field: &str) -> Value {
    let items: Vec<&str> = obj
        .pointer(containers)
        .and_then(Value::as_array)
        .map(|l| l.iter().filter_map(|c| c[field].as_str()).collect())
        .unwrap_or_default();
    json!(items.join(","))
}

fn int_at(obj: &Value, pointer: &str) -> Value {
    json!(obj.pointer(pointer).and_then(Value::as_i64).unwrap_or(0))
}

fn rc_desired(obj: &Value, _: i64) -> Value {
    int_at(obj, "/spec/replicas")
}
fn rc_current(obj: &Value, _: i64) -> Value {
    int_at(obj, "/status/replicas")
}
fn rc_ready(obj: &Value, _: i64) -> Value {
    int_at(obj, "/status/readyReplicas")
}
fn rc_containers(obj: &Value, _: i64) -> Value {
    list_at(obj, "/spec/template/spec/containers", "name")
}
fn rc_images(obj: &Value, _: i64) -> Value {
    list_at(obj, "/spec/template/spec/containers", "image")
}
fn rc_selector(obj: &Value, _: i64) -> Value {
    format_labels(&obj["spec"]["selector"])
}
fn pt_containers(obj: &Value, _: i64) -> Value {
    list_at(obj, "/template/spec/containers", "name")
}
fn pt_images(obj: &Value, _: i64) -> Value {
    list_at(obj, "/template/spec/containers", "image")
}
fn pt_labels(obj: &Value, _: i64) -> Value {
    format_labels(&obj["template"]["metadata"]["labels"])
}

const RC_COLUMNS: &[Column] = &[
    c::NAME_COL,
    col(
        "Desired",
        "integer",
        "",
        "Replicas is the number of desired replicas. This is a pointer to distinguish between explicit zero and unspecified. Defaults to 1. More info: https://kubernetes.io/docs/concepts/workloads/controllers/replicationcontroller#what-is-a-replicationcontroller",
        0,
        rc_desired,
    ),
    col(
        "Current",
        "integer",
        "",
        "Replicas is the most recently observed number of replicas. More info: https://kubernetes.io/docs/concepts/workloads/controllers/replicationcontroller#what-is-a-replicationcontroller",
        0,
        rc_current,
    ),
    col(
        "Ready",
        "integer",
        "",
        "The number of ready replicas for this replication controller.",
        0,
        rc_ready,
    ),
    c::AGE_COL,
    col(
        "Containers",
        "string",
        "",
        "Names of each container in the template.",
        1,
        rc_containers,
    ),
    col(
        "Images",
        "string",
        "",
        "Images referenced by each container in the template.",
        1,
        rc_images,
    ),
    col(
        "Selector",
        "string",
        "",
        "Selector is a label query over pods that should match the Replicas count. If Selector is empty, it is defaulted to the labels present on the Pod template. Label keys and values that must match in order to be controlled by this replication controller, if empty defaulted to labels on Pod template. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#label-selectors",
        1,
        rc_selector,
    ),
];

const PT_COLUMNS: &[Column] = &[
    c::NAME_COL,
    col(
        "Containers",
        "string",
        "",
        "Names of each container in the template.",
        0,
        pt_containers,
    ),
    col(
        "Images",
        "string",
        "",
        "Images referenced by each container in the template.",
        0,
        pt_images,
    ),
    col(
        "Pod Labels",
        "string",
        "",
        "The labels for the pod template.",
        0,
        pt_labels,
    ),
];

fn is_empty_map(v: &Value) -> bool {
    v.as_object().is_none_or(|m| m.is_empty())
}

/// SetDefaults_ReplicationController: selector and labels from the template's labels when unset,
/// one replica; then the template's pod defaults.
pub fn replicationcontroller_defaults(obj: &mut Value) {
    let template_labels = obj["spec"]["template"]["metadata"]["labels"].clone();
    if template_labels.is_object() {
        if is_empty_map(&obj["spec"]["selector"]) {
            obj["spec"]["selector"] = template_labels.clone();
        }
        if is_empty_map(&obj["metadata"]["labels"]) {
            obj["metadata"]["labels"] = template_labels;
        }
    }
    set_default(&mut obj["spec"], "replicas", json!(1));
    if obj["spec"]["template"].is_object() {
        pod_spec_defaults(&mut obj["spec"]["template"]["spec"]);
    }
}

fn nonnegative(causes: &mut Vec<Cause>, value: &Value, field: &str) {
    if value.as_i64().is_some_and(|v| v < 0) {
        causes.push(Cause::invalid(field, value, NONNEGATIVE));
    }
}

/// ValidateReplicationControllerSpec + ValidatePodTemplateSpecForRC.
pub fn replicationcontroller_validation(obj: &Value) -> Vec<Cause> {
    let spec = &obj["spec"];
    let mut causes = Vec::new();
    nonnegative(
        &mut causes,
        &spec["minReadySeconds"],
        "spec.minReadySeconds",
    );
    let selector = &spec["selector"];
    if is_empty_map(selector) {
        causes.push(Cause::required("spec.selector", ""));
    }
    nonnegative(&mut causes, &spec["replicas"], "spec.replicas");
    let template = &spec["template"];
    if !template.is_object() {
        causes.push(Cause::required("spec.template", ""));
        return causes;
    }
    let labels = &template["metadata"]["labels"];
    let matches = selector.as_object().is_none_or(|sel| {
        sel.iter()
            .all(|(k, v)| labels.get(k).and_then(Value::as_str) == v.as_str())
    });
    if !is_empty_map(selector) && !matches {
        causes.push(Cause::invalid_raw(
            "spec.template.metadata.labels",
            &go_map(labels),
            "`selector` does not match template `labels`",
        ));
    }
    causes.extend(pod_spec_validation(&template["spec"], "spec.template.spec"));
    causes.extend(super::apparmor_annotations::template(
        template,
        "spec.template",
    ));
    let restart = template["spec"]["restartPolicy"].as_str().unwrap_or("");
    if restart != "Always" {
        causes.push(Cause::not_supported(
            "spec.template.spec.restartPolicy",
            restart,
            &["Always"],
        ));
    }
    let deadline = &template["spec"]["activeDeadlineSeconds"];
    if !deadline.is_null() {
        causes.push(Cause::invalid(
            "spec.template.spec.activeDeadlineSeconds",
            deadline,
            "activeDeadlineSeconds in ReplicationController is not Supported",
        ));
    }
    causes
}

/// PodTemplates get the pod spec defaults of their template.
pub fn podtemplate_defaults(obj: &mut Value) {
    if obj["template"].is_object() {
        pod_spec_defaults(&mut obj["template"]["spec"]);
    }
}

/// ValidatePodTemplate: the template's pod spec at `template.spec`.
pub fn podtemplate_validation(obj: &Value) -> Vec<Cause> {
    let mut causes = pod_spec_validation(&obj["template"]["spec"], "template.spec");
    causes.extend(super::apparmor_annotations::template(
        &obj["template"],
        "template",
    ));
    causes
}

pub static REPLICATIONCONTROLLERS: ResourceSpec = ResourceSpec {
    plural: "replicationcontrollers",
    singular: "replicationcontroller",
    kind: "ReplicationController",
    list_kind: "ReplicationControllerList",
    short_names: &["rc"],
    categories: &["all"],
    status_subresource: true,
    generation: true,
    table: RC_COLUMNS,
    decode: typed::<ReplicationController>,
    defaults: replicationcontroller_defaults,
    validate: replicationcontroller_validation,
    // The selector is a plain map; the Scale handler renders either form.
    scale: Some(ScaleSpec {
        selector: "/spec/selector",
        ..ScaleSpec::REPLICAS
    }),
    ..ResourceSpec::BASE
};

pub static PODTEMPLATES: ResourceSpec = ResourceSpec {
    plural: "podtemplates",
    singular: "podtemplate",
    kind: "PodTemplate",
    list_kind: "PodTemplateList",
    table: PT_COLUMNS,
    decode: typed::<PodTemplate>,
    defaults: podtemplate_defaults,
    validate: podtemplate_validation,
    ..ResourceSpec::BASE
};

#[cfg(test)]
mod tests {
    use super::*;

    fn rc(selector: Value, labels: Value) -> Value {
        json!({"metadata": {"name": "r"}, "spec": {"selector": selector,
            "template": {"metadata": {"labels": labels},
                "spec": {"containers": [{"name": "c", "image": "i"}]}}}})
    }

    #[test]
    fn selector_labels_and_replicas_default_from_the_template() {
        let mut o = rc(Value::Null, json!({"name": "web"}));
        replicationcontroller_defaults(&mut o);
        assert_eq!(o["spec"]["selector"], json!({"name": "web"}));
        assert_eq!(o["metadata"]["labels"], json!({"name": "web"}));
        assert_eq!(o["spec"]["replicas"], 1);
        assert_eq!(o["spec"]["template"]["spec"]["restartPolicy"], "Always");
        assert!(replicationcontroller_validation(&o).is_empty());

        // Set values stay as given.
        let mut o = rc(json!({"a": "1"}), json!({"a": "1", "b": "2"}));
        o["metadata"]["labels"] = json!({"own": "x"});
        o["spec"]["replicas"] = json!(0);
        replicationcontroller_defaults(&mut o);
        assert_eq!(o["spec"]["selector"], json!({"a": "1"}));
        assert_eq!(o["metadata"]["labels"], json!({"own": "x"}));
        assert_eq!(o["spec"]["replicas"], 0);
    }

    #[test]
    fn validation_paths_and_texts_are_upstreams() {
        let mut o = rc(json!({"name": "a"}), json!({"name": "b"}));
        replicationcontroller_defaults(&mut o);
        let c = replicationcontroller_validation(&o);
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].field, "spec.template.metadata.labels");
        assert_eq!(
            c[0].message,
            "Invalid value: map[string]string{\"name\":\"b\"}: `selector` does not match template `labels`"
        );

        let mut o = rc(json!({}), json!({}));
        o["spec"]["replicas"] = json!(-1);
        o["spec"]["template"]["spec"]["restartPolicy"] = json!("Never");
        let fields: Vec<String> = replicationcontroller_validation(&o)
            .into_iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect();
        assert_eq!(
            fields,
            [
                "spec.selector: Required value",
                "spec.replicas: Invalid value: -1: must be greater than or equal to 0",
                "spec.template.spec.restartPolicy: Unsupported value: \"Never\": supported values: \"Always\"",
            ]
        );
        let no_template = json!({"spec": {"selector": {"a": "b"}}});
        assert_eq!(
            replicationcontroller_validation(&no_template)[0].field,
            "spec.template"
        );
    }

    #[test]
    fn columns_render_like_kubectl() {
        let mut o = rc(json!({"b": "2", "a": "1"}), json!({"a": "1", "b": "2"}));
        o["spec"]["replicas"] = json!(3);
        o["status"] = json!({"replicas": 2, "readyReplicas": 1});
        let cells: Vec<Value> = RC_COLUMNS.iter().map(|c| (c.cell)(&o, 0)).collect();
        let names: Vec<&str> = RC_COLUMNS.iter().map(|c| c.name).collect();
        assert_eq!(
            names,
            [
                "Name",
                "Desired",
                "Current",
                "Ready",
                "Age",
                "Containers",
                "Images",
                "Selector"
            ]
        );
        assert_eq!(cells[1..4], [json!(3), json!(2), json!(1)]);
        assert_eq!(cells[5..], [json!("c"), json!("i"), json!("a=1,b=2")]);

        let pt = json!({"metadata": {"name": "t"}, "template": {"metadata": {"labels": {"x": "y"}},
            "spec": {"containers": [{"name": "a", "image": "i1"}, {"name": "b", "image": "i2"}]}}});
        let cells: Vec<Value> = PT_COLUMNS.iter().map(|c| (c.cell)(&pt, 0)).collect();
        assert_eq!(
            cells,
            [json!("t"), json!("a,b"), json!("i1,i2"), json!("x=y")]
        );
        assert_eq!(pt_labels(&json!({}), 0), json!("<none>"));
        assert!(podtemplate_validation(&pt).is_empty());
        assert_eq!(
            podtemplate_validation(&json!({"template": {}}))[0].field,
            "template.spec.containers"
        );
    }
}
