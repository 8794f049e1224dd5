//! apiregistration.k8s.io/v1 APIService: which server answers a group/version. `Local` ones
//! (no `spec.service`) are served by kiln itself; the others are proxied by `crate::aggregator`.
//! Validation and the table follow kube-aggregator's strategy and printer.

use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
use serde_json::{json, Value};

use super::columns::{self as c, col};
use super::dns_names::{is_dns1035, is_subdomain, DNS1035_MSG, SUBDOMAIN_MSG};
use super::strategy::{typed, Column, ResourceSpec};
use crate::status::Cause;

/// Where APIServices live in the store (upstream's key root).
pub const KEY_ROOT: &str = "/registry/apiregistration.k8s.io/apiservices";

/// SERVICE: `<namespace>/<name>`, or `Local`.
fn service(obj: &Value, _: i64) -> Value {
    let svc = &obj["spec"]["service"];
    if svc.is_object() {
        json!(format!(
            "{}/{}",
            svc["namespace"].as_str().unwrap_or(""),
            svc["name"].as_str().unwrap_or("")
        ))
    } else {
        json!("Local")
    }
}

/// AVAILABLE: `True`, or `False (<reason>)`; `Unknown` before any check.
pub fn available(obj: &Value, _: i64) -> Value {
    let condition = obj["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Available");
    let Some(condition) = condition else {
        return json!("Unknown");
    };
    let status = condition["status"].as_str().unwrap_or("Unknown");
    let reason = condition["reason"].as_str().unwrap_or("");
    if status == "True" || reason.is_empty() {
        json!(status)
    } else {
        json!(format!("{status} ({reason})"))
    }
}

const TABLE: &[Column] = &[
    c::NAME_COL,
    col(
        "Service",
        "string",
        "",
        "The reference to the service that hosts this API endpoint.",
        0,
        service,
    ),
    col(
        "Available",
        "string",
        "",
        "Whether this service is available.",
        0,
        available,
    ),
    c::AGE_COL,
];

pub static APISERVICES: ResourceSpec = ResourceSpec {
    group: "apiregistration.k8s.io",
    version: "v1",
    plural: "apiservices",
    singular: "apiservice",
    kind: "APIService",
    list_kind: "APIServiceList",
    namespaced: false,
    categories: &["api-extensions"],
    status_subresource: true,
    // `v1.` (the core group's APIService) is no DNS subdomain; upstream checks path segments and
    // then the exact `<version>.<group>` form.
    name_is_path_segment: true,
    table: TABLE,
    decode: typed::<APIService>,
    defaults: apiservice_defaults,
    validate: apiservice_validation,
    key_root: Some(KEY_ROOT),
    ..ResourceSpec::BASE
};

/// Upstream's SetDefaults_ServiceReference: port 443.
fn apiservice_defaults(obj: &mut Value) {
    let svc = &mut obj["spec"]["service"];
    if svc.is_object() && svc["port"].is_null() {
        svc["port"] = json!(443);
    }
}

/// Upstream's ValidateAPIService (the path-segment part of the name is `validate_name`'s).
pub fn apiservice_validation(obj: &Value) -> Vec<Cause> {
    let mut out = Vec::new();
    let spec = &obj["spec"];
    let group = spec["group"].as_str().unwrap_or("");
    let version = spec["version"].as_str().unwrap_or("");
    let name = obj["metadata"]["name"].as_str().unwrap_or("");
    let required_name = format!("{version}.{group}");
    let path_segment_ok = !matches!(name, "." | "..") && !name.contains(['/', '%']);
    if path_segment_ok && !name.is_empty() && name != required_name {
        out.push(Cause::invalid(
            "metadata.name",
            &json!(name),
            &format!("must be `spec.version+\".\"+spec.group`: {required_name:?}"),
        ));
    }
    if group.is_empty() && version != "v1" {
        out.push(Cause::required(
            "spec.group",
            "only v1 may have an empty group and it better be legacy kube",
        ));
    }
    if !group.is_empty() && !is_subdomain(group) {
        out.push(Cause::invalid("spec.group", &json!(group), SUBDOMAIN_MSG));
    }
    if !is_dns1035(version) {
        out.push(Cause::invalid("spec.version", &json!(version), DNS1035_MSG));
    }
    let group_priority = spec["groupPriorityMinimum"].as_i64().unwrap_or(0);
    if group_priority <= 0 || group_priority > 20000 {
        out.push(Cause::invalid(
            "spec.groupPriorityMinimum",
            &json!(group_priority),
            "must be positive and less than 20000",
        ));
    }
    let version_priority = spec["versionPriority"].as_i64().unwrap_or(0);
    if version_priority <= 0 || version_priority > 1000 {
        out.push(Cause::invalid(
            "spec.versionPriority",
            &json!(version_priority),
            "must be positive and less than 1000",
        ));
    }
    let ca_len = spec["caBundle"].as_str().map(decoded_len).unwrap_or(0);
    let insecure = spec["insecureSkipTLSVerify"].as_bool().unwrap_or(false);
    let svc = &spec["service"];
    if !svc.is_object() {
        if ca_len != 0 {
            out.push(Cause::invalid_raw(
                "spec.caBundle",
                &format!("\"{ca_len} bytes\""),
                "local APIServices may not have a caBundle",
            ));
        }
        if insecure {
            out.push(Cause::invalid(
                "spec.insecureSkipTLSVerify",
                &json!(true),
                "local APIServices may not have insecureSkipTLSVerify",
            ));
        }
        return out;
    }
    if svc["namespace"].as_str().unwrap_or("").is_empty() {
        out.push(Cause::required("spec.service.namespace", ""));
    }
    if svc["name"].as_str().unwrap_or("").is_empty() {
        out.push(Cause::required("spec.service.name", ""));
    }
    let port = svc["port"].as_i64().unwrap_or(0);
    if !(1..=65535).contains(&port) {
        out.push(Cause::invalid(
            "spec.service.port",
            &json!(port),
            "port is not valid: must be between 1 and 65535, inclusive",
        ));
    }
    if insecure && ca_len > 0 {
        out.push(Cause::invalid(
            "spec.insecureSkipTLSVerify",
            &json!(true),
            "may not be true if caBundle is present",
        ));
    }
    out
}

/// Bytes of a base64 `caBundle` (its JSON form), as upstream counts them.
fn decoded_len(b64: &str) -> usize {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD
        .decode(b64)
        .map(|b| b.len())
        .unwrap_or(b64.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn remote(name: &str, spec: Value) -> Value {
        let mut base = json!({
            "metadata": {"name": name},
            "spec": {"group": "metrics.example.com", "version": "v1beta1",
                     "groupPriorityMinimum": 100, "versionPriority": 100,
                     "service": {"namespace": "kube-system", "name": "metrics", "port": 443},
                     "caBundle": "Y2E="},
        });
        for (k, v) in spec.as_object().unwrap() {
            base["spec"][k] = v.clone();
        }
        base
    }

    fn messages(obj: &Value) -> Vec<String> {
        apiservice_validation(obj)
            .into_iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect()
    }

    #[test]
    fn a_well_formed_remote_apiservice_is_valid() {
        assert!(messages(&remote("v1beta1.metrics.example.com", json!({}))).is_empty());
        let local = json!({"metadata": {"name": "v1."}, "spec": {"version": "v1",
            "groupPriorityMinimum": 18000, "versionPriority": 1}});
        assert!(messages(&local).is_empty());
    }

    #[test]
    fn the_name_must_be_version_dot_group() {
        assert_eq!(
            messages(&remote("metrics", json!({}))),
            ["metadata.name: Invalid value: \"metrics\": must be `spec.version+\".\"+spec.group`: \"v1beta1.metrics.example.com\""]
        );
    }

    #[test]
    fn priorities_are_bounded_like_upstream() {
        let m = messages(&remote(
            "v1beta1.metrics.example.com",
            json!({"groupPriorityMinimum": 20001, "versionPriority": 0}),
        ));
        assert_eq!(
            m,
            [
                "spec.groupPriorityMinimum: Invalid value: 20001: must be positive and less than 20000",
                "spec.versionPriority: Invalid value: 0: must be positive and less than 1000",
            ]
        );
    }

    #[test]
    fn ca_bundle_and_insecure_skip_exclude_each_other() {
        let m = messages(&remote(
            "v1beta1.metrics.example.com",
            json!({"insecureSkipTLSVerify": true}),
        ));
        assert_eq!(
            m,
            ["spec.insecureSkipTLSVerify: Invalid value: true: may not be true if caBundle is present"]
        );
    }

    #[test]
    fn local_apiservices_take_no_tls_settings() {
        let obj = json!({"metadata": {"name": "v1.apps"}, "spec": {"group": "apps", "version": "v1",
            "groupPriorityMinimum": 17800, "versionPriority": 15, "caBundle": "Y2E=",
            "insecureSkipTLSVerify": true}});
        assert_eq!(
            messages(&obj),
            [
                "spec.caBundle: Invalid value: \"2 bytes\": local APIServices may not have a caBundle",
                "spec.insecureSkipTLSVerify: Invalid value: true: local APIServices may not have insecureSkipTLSVerify",
            ]
        );
    }

    #[test]
    fn service_needs_namespace_name_and_port_and_groups_need_a_version() {
        let obj = json!({"metadata": {"name": "v2."}, "spec": {"version": "v2",
            "groupPriorityMinimum": 1, "versionPriority": 1, "service": {"port": 0}}});
        assert_eq!(
            messages(&obj),
            [
                "spec.group: Required value: only v1 may have an empty group and it better be legacy kube",
                "spec.service.namespace: Required value",
                "spec.service.name: Required value",
                "spec.service.port: Invalid value: 0: port is not valid: must be between 1 and 65535, inclusive",
            ]
        );
    }

    #[test]
    fn port_defaults_to_443() {
        let mut obj = json!({"spec": {"service": {"namespace": "a", "name": "b"}}});
        apiservice_defaults(&mut obj);
        assert_eq!(obj["spec"]["service"]["port"], 443);
    }

    #[test]
    fn table_cells_match_the_upstream_printer() {
        let mut obj = remote("v1beta1.metrics.example.com", json!({}));
        assert_eq!(service(&obj, 0), "kube-system/metrics");
        assert_eq!(available(&obj, 0), "Unknown");
        obj["status"] = json!({"conditions": [{"type": "Available", "status": "False", "reason": "MissingEndpoints"}]});
        assert_eq!(available(&obj, 0), "False (MissingEndpoints)");
        obj["status"]["conditions"][0]["status"] = json!("True");
        assert_eq!(available(&obj, 0), "True");
        assert_eq!(service(&json!({"spec": {}}), 0), "Local");
    }
}
