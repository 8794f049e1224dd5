//! apps/v1 workload kinds (deployments, replicasets, daemonsets): defaults and validation as
//! upstream's apps/v1 defaulters and validators, kubectl's columns, status and scale subresources.

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet};
use serde_json::{json, Value};

use super::columns::{self as c, col};
use super::defaults::{pod_spec_defaults, pod_spec_validation};
use super::strategy::{typed, Column, ResourceSpec, ScaleSpec};
use crate::selectors::label_selector_string;
use crate::status::Cause;

pub(super) const CONTAINERS_COL: Column = col(
    "Containers",
    "string",
    "",
    "Names of each container in the template.",
    1,
    containers,
);
pub(super) const IMAGES_COL: Column = col(
    "Images",
    "string",
    "",
    "Images referenced by each container in the template.",
    1,
    images,
);
pub(super) const SELECTOR_COL: Column = col(
    "Selector",
    "string",
    "",
    "Label selector for pods. Existing ReplicaSets whose pods are selected by this will be the ones affected by this deployment.",
    1,
    selector,
);

fn int_at(obj: &Value, pointer: &str) -> i64 {
    obj.pointer(pointer).and_then(Value::as_i64).unwrap_or(0)
}

fn containers(obj: &Value, _: i64) -> Value {
    template_list(obj, "name")
}

fn images(obj: &Value, _: i64) -> Value {
    template_list(obj, "image")
}

fn template_list(obj: &Value, field: &str) -> Value {
    let names: Vec<&str> = obj["spec"]["template"]["spec"]["containers"]
        .as_array()
        .map(|l| l.iter().filter_map(|c| c[field].as_str()).collect())
        .unwrap_or_default();
    json!(names.join(","))
}

fn selector(obj: &Value, _: i64) -> Value {
    let s = label_selector_string(&obj["spec"]["selector"]);
    json!(if s.is_empty() {
        "<none>".to_string()
    } else {
        s
    })
}

fn deployment_ready(obj: &Value, _: i64) -> Value {
    json!(format!(
        "{}/{}",
        int_at(obj, "/status/readyReplicas"),
        int_at(obj, "/spec/replicas")
    ))
}

fn cell(pointer: &'static str) -> impl Fn(&Value) -> Value {
    move |obj| json!(int_at(obj, pointer))
}

fn updated_replicas(obj: &Value, _: i64) -> Value {
    cell("/status/updatedReplicas")(obj)
}
fn available_replicas(obj: &Value, _: i64) -> Value {
    cell("/status/availableReplicas")(obj)
}
fn desired_replicas(obj: &Value, _: i64) -> Value {
    cell("/spec/replicas")(obj)
}
fn current_replicas(obj: &Value, _: i64) -> Value {
    cell("/status/replicas")(obj)
}
fn ready_replicas(obj: &Value, _: i64) -> Value {
    cell("/status/readyReplicas")(obj)
}
fn ds_desired(obj: &Value, _: i64) -> Value {
    cell("/status/desiredNumberScheduled")(obj)
}
fn ds_current(obj: &Value, _: i64) -> Value {
    cell("/status/currentNumberScheduled")(obj)
}
fn ds_ready(obj: &Value, _: i64) -> Value {
    cell("/status/numberReady")(obj)
}
fn ds_updated(obj: &Value, _: i64) -> Value {
    cell("/status/updatedNumberScheduled")(obj)
}
fn ds_available(obj: &Value, _: i64) -> Value {
    cell("/status/numberAvailable")(obj)
}
fn ds_node_selector(obj: &Value, _: i64) -> Value {
    let pairs: Vec<String> = obj["spec"]["template"]["spec"]["nodeSelector"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                .collect()
        })
        .unwrap_or_default();
    json!(if pairs.is_empty() {
        "<none>".to_string()
    } else {
        pairs.join(",")
    })
}

pub(super) fn set_default(obj: &mut Value, field: &str, value: Value) {
    if obj[field].is_null() {
        obj[field] = value;
    }
}

fn template_defaults(spec: &mut Value) {
    pod_spec_defaults(&mut spec["template"]["spec"]);
}

pub fn deployment_defaults(obj: &mut Value) {
    let spec = &mut obj["spec"];
    set_default(spec, "replicas", json!(1));
    set_default(spec, "revisionHistoryLimit", json!(10));
    set_default(spec, "progressDeadlineSeconds", json!(600));
    set_default(spec, "strategy", json!({"type": "RollingUpdate"}));
    if spec["strategy"]["type"].is_null() {
        spec["strategy"]["type"] = json!("RollingUpdate");
    }
    if spec["strategy"]["type"] == "RollingUpdate" {
        let ru = &mut spec["strategy"]["rollingUpdate"];
        set_default(ru, "maxUnavailable", json!("25%"));
        set_default(ru, "maxSurge", json!("25%"));
    }
    template_defaults(spec);
}

pub fn replicaset_defaults(obj: &mut Value) {
    let spec = &mut obj["spec"];
    set_default(spec, "replicas", json!(1));
    template_defaults(spec);
}

pub fn daemonset_defaults(obj: &mut Value) {
    let spec = &mut obj["spec"];
    set_default(spec, "revisionHistoryLimit", json!(10));
    set_default(spec, "updateStrategy", json!({"type": "RollingUpdate"}));
    if spec["updateStrategy"]["type"] == "RollingUpdate" {
        let ru = &mut spec["updateStrategy"]["rollingUpdate"];
        set_default(ru, "maxUnavailable", json!(1));
        set_default(ru, "maxSurge", json!(0));
    }
    template_defaults(spec);
}

/// Go's `%#v` of a map[string]string, as upstream's selector mismatch message prints it.
pub(super) fn go_map(labels: &Value) -> String {
    let pairs: Vec<String> = labels
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k:?}:{:?}", v.as_str().unwrap_or("")))
                .collect()
        })
        .unwrap_or_default();
    format!("map[string]string{{{}}}", pairs.join(", "))
}

/// Does a LabelSelector (matchLabels + matchExpressions) select these labels?
pub fn selector_matches(selector: &Value, labels: &Value) -> bool {
    let get = |k: &str| labels.get(k).and_then(Value::as_str);
    let labels_ok = selector["matchLabels"]
        .as_object()
        .is_none_or(|m| m.iter().all(|(k, v)| get(k) == v.as_str()));
    let exprs_ok = selector["matchExpressions"].as_array().is_none_or(|list| {
        list.iter().all(|e| {
            let key = e["key"].as_str().unwrap_or("");
            let values: Vec<&str> = e["values"]
                .as_array()
                .map(|v| v.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            match e["operator"].as_str().unwrap_or("") {
                "In" => get(key).is_some_and(|v| values.contains(&v)),
                "NotIn" => get(key).is_none_or(|v| !values.contains(&v)),
                "Exists" => get(key).is_some(),
                "DoesNotExist" => get(key).is_none(),
                _ => false,
            }
        })
    });
    labels_ok && exprs_ok
}

/// Upstream's ValidatePodTemplateSpecForReplicaSet / Deployment rules that matter to clients.
fn workload_validation(obj: &Value) -> Vec<Cause> {
    let spec = &obj["spec"];
    let mut causes = Vec::new();
    let selector = &spec["selector"];
    let empty_selector = selector["matchLabels"]
        .as_object()
        .is_none_or(|m| m.is_empty())
        && selector["matchExpressions"]
            .as_array()
            .is_none_or(|l| l.is_empty());
    if selector.is_null() {
        causes.push(Cause::required("spec.selector", ""));
    } else if empty_selector {
        causes.push(Cause::invalid(
            "spec.selector",
            &json!("null"),
            "empty selector is invalid for deployment",
        ));
    } else if !selector_matches(selector, &spec["template"]["metadata"]["labels"]) {
        causes.push(Cause::invalid_raw(
            "spec.template.metadata.labels",
            &go_map(&spec["template"]["metadata"]["labels"]),
            "`selector` does not match template `labels`",
        ));
    }
    if spec["replicas"].as_i64().is_some_and(|r| r < 0) {
        causes.push(Cause::invalid(
            "spec.replicas",
            &spec["replicas"],
            "must be greater than or equal to 0",
        ));
    }
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

pub fn deployment_validation(obj: &Value) -> Vec<Cause> {
    workload_validation(obj)
}

pub fn daemonset_validation(obj: &Value) -> Vec<Cause> {
    workload_validation(obj)
}

const SCALE: Option<ScaleSpec> = Some(ScaleSpec {
    selector: "/spec/selector",
    ..ScaleSpec::REPLICAS
});

pub static DEPLOYMENTS: ResourceSpec = ResourceSpec {
    group: "apps",
    plural: "deployments",
    singular: "deployment",
    kind: "Deployment",
    list_kind: "DeploymentList",
    short_names: &["deploy"],
    categories: &["all"],
    status_subresource: true,
    generation: true,
    table: &[
        c::NAME_COL,
        col(
            "Ready",
            "string",
            "",
            "Number of the pod with ready state",
            0,
            deployment_ready,
        ),
        col(
            "Up-to-date",
            "string",
            "",
            "Total number of non-terminated pods targeted by this deployment that have the desired template spec.",
            0,
            updated_replicas,
        ),
        col(
            "Available",
            "string",
            "",
            "Total number of available pods (ready for at least minReadySeconds) targeted by this deployment.",
            0,
            available_replicas,
        ),
        c::AGE_COL,
        CONTAINERS_COL,
        IMAGES_COL,
        SELECTOR_COL,
    ],
    decode: typed::<Deployment>,
    defaults: deployment_defaults,
    validate: deployment_validation,
    scale: SCALE,
    ..ResourceSpec::BASE
};

pub static REPLICASETS: ResourceSpec = ResourceSpec {
    group: "apps",
    plural: "replicasets",
    singular: "replicaset",
    kind: "ReplicaSet",
    list_kind: "ReplicaSetList",
    short_names: &["rs"],
    categories: &["all"],
    status_subresource: true,
    generation: true,
    table: &[
        c::NAME_COL,
        col(
            "Desired",
            "integer",
            "",
            "Replicas is the number of desired replicas.",
            0,
            desired_replicas,
        ),
        col(
            "Current",
            "integer",
            "",
            "Replicas is the most recently observed number of replicas.",
            0,
            current_replicas,
        ),
        col(
            "Ready",
            "integer",
            "",
            "The number of ready replicas for this replica set.",
            0,
            ready_replicas,
        ),
        c::AGE_COL,
        CONTAINERS_COL,
        IMAGES_COL,
        SELECTOR_COL,
    ],
    decode: typed::<ReplicaSet>,
    defaults: replicaset_defaults,
    validate: deployment_validation,
    scale: SCALE,
    ..ResourceSpec::BASE
};

pub static DAEMONSETS: ResourceSpec = ResourceSpec {
    group: "apps",
    plural: "daemonsets",
    singular: "daemonset",
    kind: "DaemonSet",
    list_kind: "DaemonSetList",
    short_names: &["ds"],
    categories: &["all"],
    status_subresource: true,
    generation: true,
    table: &[
        c::NAME_COL,
        col(
            "Desired",
            "integer",
            "",
            "The total number of nodes that should be running the daemon pod.",
            0,
            ds_desired,
        ),
        col(
            "Current",
            "integer",
            "",
            "The number of nodes that are running at least 1 daemon pod.",
            0,
            ds_current,
        ),
        col(
            "Ready",
            "integer",
            "",
            "The number of nodes that should be running the daemon pod and have one or more of the daemon pod running and ready.",
            0,
            ds_ready,
        ),
        col(
            "Up-to-date",
            "integer",
            "",
            "The total number of nodes that are running updated daemon pod",
            0,
            ds_updated,
        ),
        col(
            "Available",
            "integer",
            "",
            "The number of nodes that should be running the daemon pod and have one or more of the daemon pod running and available.",
            0,
            ds_available,
        ),
        col(
            "Node Selector",
            "string",
            "",
            "NodeSelector is a selector which must be true for the pod to fit on a node.",
            0,
            ds_node_selector,
        ),
        c::AGE_COL,
        CONTAINERS_COL,
        IMAGES_COL,
        SELECTOR_COL,
    ],
    decode: typed::<DaemonSet>,
    defaults: daemonset_defaults,
    validate: daemonset_validation,
    ..ResourceSpec::BASE
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deployment_defaults_match_upstream() {
        let mut d = json!({"spec": {"selector": {"matchLabels": {"app": "w"}},
            "template": {"metadata": {"labels": {"app": "w"}},
                         "spec": {"containers": [{"name": "w", "image": "nginx:latest"}]}}}});
        deployment_defaults(&mut d);
        let s = &d["spec"];
        assert_eq!(s["replicas"], 1);
        assert_eq!(s["revisionHistoryLimit"], 10);
        assert_eq!(s["progressDeadlineSeconds"], 600);
        assert_eq!(
            s["strategy"],
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}})
        );
        let t = &s["template"]["spec"];
        assert_eq!(t["restartPolicy"], "Always");
        assert_eq!(t["terminationGracePeriodSeconds"], 30);
        assert_eq!(t["dnsPolicy"], "ClusterFirst");
        assert_eq!(t["containers"][0]["imagePullPolicy"], "Always");
        assert!(deployment_validation(&d).is_empty());
    }

    #[test]
    fn selector_must_match_template() {
        let d = json!({"spec": {"selector": {"matchLabels": {"app": "a"}},
            "template": {"metadata": {"labels": {"app": "b"}},
                         "spec": {"containers": [{"name": "w", "image": "i"}]}}}});
        let causes = deployment_validation(&d);
        assert_eq!(causes[0].field, "spec.template.metadata.labels");
    }
}
