//! apiextensions.k8s.io/v1 CustomResourceDefinition: defaults, validation (names, versions,
//! structural schemas) and immutable fields, with upstream's field errors. Serving the custom
//! resources a CRD defines is `crate::crd`'s job.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::{json, Value};

use super::columns as c;
use super::dns_names::{is_label, DNS1035_MSG, LABEL_MSG};
use super::strategy::{typed, Column, ResourceSpec};
use crate::custom_resource::{structural, CLEANUP_FINALIZER};
use crate::status::Cause;

const TABLE: &[Column] = &[c::NAME_COL, c::CREATED_AT_COL];

pub static CUSTOM_RESOURCE_DEFINITIONS: ResourceSpec = ResourceSpec {
    group: "apiextensions.k8s.io",
    version: "v1",
    plural: "customresourcedefinitions",
    singular: "customresourcedefinition",
    kind: "CustomResourceDefinition",
    list_kind: "CustomResourceDefinitionList",
    namespaced: false,
    short_names: &["crd", "crds"],
    categories: &["api-extensions"],
    status_subresource: true,
    generation: true,
    table: TABLE,
    decode: typed::<CustomResourceDefinition>,
    defaults: crd_defaults,
    validate: crd_validation,
    validate_update: crd_update_validation,
    delete_finalizer: Some(CLEANUP_FINALIZER),
    key_root: Some("/registry/apiextensions.k8s.io/customresourcedefinitions"),
    ..ResourceSpec::BASE
};

/// Upstream's SetDefaults_CustomResourceDefinition(Spec) and the strategy's storedVersions.
fn crd_defaults(obj: &mut Value) {
    let spec = &mut obj["spec"];
    if !spec.is_object() {
        return;
    }
    let kind = spec["names"]["kind"].as_str().unwrap_or("").to_string();
    let names = &mut spec["names"];
    if names.is_object() {
        if names["singular"].as_str().is_none_or(str::is_empty) {
            names["singular"] = json!(kind.to_lowercase());
        }
        if names["listKind"].as_str().is_none_or(str::is_empty) && !kind.is_empty() {
            names["listKind"] = json!(format!("{kind}List"));
        }
    }
    if spec["conversion"].is_null() {
        spec["conversion"] = json!({"strategy": "None"});
    }
    let storage = storage_version(obj);
    let status = &mut obj["status"];
    if !status.is_object() {
        *status = json!({});
    }
    if status["acceptedNames"].is_null() {
        status["acceptedNames"] = json!({"plural": "", "kind": ""});
    }
    if status["conditions"].is_null() {
        status["conditions"] = json!([]);
    }
    let stored = status["storedVersions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if let Some(storage) = storage {
        if !stored.iter().any(|v| v == storage.as_str()) {
            let mut stored = stored;
            stored.push(json!(storage));
            status["storedVersions"] = json!(stored);
        }
    }
}

fn storage_version(obj: &Value) -> Option<String> {
    obj["spec"]["versions"]
        .as_array()?
        .iter()
        .find(|v| v["storage"].as_bool() == Some(true))
        .and_then(|v| v["name"].as_str())
        .map(str::to_string)
}

/// A Kind-like name: letters and digits, starting with a letter (upstream checks it lowercased
/// as a DNS-1035 label).
fn check_kind_like(path: &str, value: &str, out: &mut Vec<Cause>) {
    let lower = value.to_lowercase();
    if !is_label(&lower) || !lower.starts_with(|c: char| c.is_ascii_lowercase()) {
        out.push(Cause::invalid(
            path,
            &json!(value),
            &format!("may have mixed case, but should otherwise match: {DNS1035_MSG}"),
        ));
    }
}

fn check_names(names: &Value, out: &mut Vec<Cause>) {
    let plural = names["plural"].as_str().unwrap_or("");
    if plural.is_empty() {
        out.push(Cause::required("spec.names.plural", ""));
    } else if !is_label(plural) {
        out.push(Cause::invalid(
            "spec.names.plural",
            &json!(plural),
            LABEL_MSG,
        ));
    }
    let singular = names["singular"].as_str().unwrap_or("");
    if !singular.is_empty() && !is_label(singular) {
        out.push(Cause::invalid(
            "spec.names.singular",
            &json!(singular),
            LABEL_MSG,
        ));
    }
    let kind = names["kind"].as_str().unwrap_or("");
    if kind.is_empty() {
        out.push(Cause::required("spec.names.kind", ""));
    } else {
        check_kind_like("spec.names.kind", kind, out);
    }
    let list_kind = names["listKind"].as_str().unwrap_or("");
    if list_kind.is_empty() {
        out.push(Cause::required("spec.names.listKind", ""));
    } else {
        check_kind_like("spec.names.listKind", list_kind, out);
        if list_kind == kind && !kind.is_empty() {
            out.push(Cause::invalid(
                "spec.names.listKind",
                &json!(list_kind),
                "kind and listKind may not be the same",
            ));
        }
    }
    for (i, short) in names["shortNames"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let s = short.as_str().unwrap_or("");
        if !is_label(s) {
            out.push(Cause::invalid(
                &format!("spec.names.shortNames[{i}]"),
                short,
                LABEL_MSG,
            ));
        }
    }
    for (i, cat) in names["categories"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        if !is_label(cat.as_str().unwrap_or("")) {
            out.push(Cause::invalid(
                &format!("spec.names.categories[{i}]"),
                cat,
                LABEL_MSG,
            ));
        }
    }
}

fn check_versions(spec: &Value, out: &mut Vec<Cause>) {
    let Some(versions) = spec["versions"].as_array().filter(|v| !v.is_empty()) else {
        out.push(Cause::required(
            "spec.versions",
            "must have exactly one version marked as storage version",
        ));
        return;
    };
    let storage = versions
        .iter()
        .filter(|v| v["storage"].as_bool() == Some(true))
        .count();
    if storage != 1 {
        out.push(Cause::invalid(
            "spec.versions",
            &json!(versions
                .iter()
                .map(|v| v["name"].clone())
                .collect::<Vec<_>>()),
            "must have exactly one version marked as storage version",
        ));
    }
    if !versions.iter().any(|v| v["served"].as_bool() == Some(true)) {
        out.push(Cause::invalid(
            "spec.versions",
            &json!(""),
            "must have at least one version marked as served",
        ));
    }
    let mut seen = Vec::new();
    for (i, v) in versions.iter().enumerate() {
        let path = format!("spec.versions[{i}]");
        let name = v["name"].as_str().unwrap_or("");
        let dns1035 = is_label(name) && name.starts_with(|c: char| c.is_ascii_lowercase());
        if name.is_empty() {
            out.push(Cause::required(&format!("{path}.name"), ""));
        } else if !dns1035 {
            out.push(Cause::invalid(
                &format!("{path}.name"),
                &json!(name),
                DNS1035_MSG,
            ));
        } else if seen.contains(&name) {
            out.push(Cause::invalid(
                "spec.versions",
                &json!(name),
                "must appear only once",
            ));
        }
        seen.push(name);
        match v["schema"].get("openAPIV3Schema") {
            None | Some(Value::Null) => out.push(Cause::required(
                &format!("{path}.schema.openAPIV3Schema"),
                "schemas are required",
            )),
            Some(schema) => {
                structural::check(schema, &format!("{path}.schema.openAPIV3Schema"), out)
            }
        }
        for (j, col) in v["additionalPrinterColumns"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            let cp = format!("{path}.additionalPrinterColumns[{j}]");
            if col["name"].as_str().is_none_or(str::is_empty) {
                out.push(Cause::required(&format!("{cp}.name"), ""));
            }
            let ty = col["type"].as_str().unwrap_or("");
            if !["integer", "number", "string", "boolean", "date"].contains(&ty) {
                out.push(Cause::not_supported(
                    &format!("{cp}.type"),
                    ty,
                    &["integer", "number", "string", "boolean", "date"],
                ));
            }
            if col["jsonPath"].as_str().is_none_or(str::is_empty) {
                out.push(Cause::required(&format!("{cp}.jsonPath"), ""));
            }
        }
        if let Some(scale) = v["subresources"].get("scale").filter(|s| s.is_object()) {
            for field in ["specReplicasPath", "statusReplicasPath"] {
                let p = scale[field].as_str().unwrap_or("");
                if p.is_empty() {
                    out.push(Cause::required(
                        &format!("{path}.subresources.scale.{field}"),
                        "",
                    ));
                } else if !p.starts_with('.') {
                    out.push(Cause::invalid(
                        &format!("{path}.subresources.scale.{field}"),
                        &json!(p),
                        "should be a json path starting with .",
                    ));
                }
            }
        }
    }
}

/// The CEL rules of every version's schema, compiled and type-checked (`crate::cel`). Upstream
/// validates its internal form, where schemas identical in every version are one
/// `spec.validation`, so that is the path then (a single-version CRD's too).
fn check_validation_rules(spec: &Value, out: &mut Vec<Cause>) {
    let versions = spec["versions"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    let schemas: Vec<&Value> = versions
        .iter()
        .map(|v| &v["schema"]["openAPIV3Schema"])
        .collect();
    let Some(first) = schemas.first() else {
        return;
    };
    if first.is_object() && schemas.iter().all(|s| s == first) {
        out.extend(crate::cel::check_schema_rules(
            first,
            "spec.validation.openAPIV3Schema",
        ));
        return;
    }
    for (i, schema) in schemas.iter().enumerate() {
        out.extend(crate::cel::check_schema_rules(
            schema,
            &format!("spec.versions[{i}].schema.openAPIV3Schema"),
        ));
    }
}

/// Upstream's ValidateCustomResourceDefinition, for the parts a user meets.
pub fn crd_validation(obj: &Value) -> Vec<Cause> {
    let mut out = Vec::new();
    let spec = &obj["spec"];
    let group = spec["group"].as_str().unwrap_or("");
    let plural = spec["names"]["plural"].as_str().unwrap_or("");
    let name = obj["metadata"]["name"].as_str().unwrap_or("");
    if !group.is_empty() && !plural.is_empty() && name != format!("{plural}.{group}") {
        out.push(Cause::invalid(
            "metadata.name",
            &json!(name),
            "must be spec.names.plural+\".\"+spec.group",
        ));
    }
    if group.is_empty() {
        out.push(Cause::required("spec.group", ""));
    } else if !group.contains('.') {
        out.push(Cause::invalid(
            "spec.group",
            &json!(group),
            "should be a domain with at least one dot",
        ));
    }
    match spec["scope"].as_str().unwrap_or("") {
        "Cluster" | "Namespaced" => {}
        "" => out.push(Cause::required("spec.scope", "")),
        other => out.push(Cause::not_supported(
            "spec.scope",
            other,
            &["Cluster", "Namespaced"],
        )),
    }
    check_names(&spec["names"], &mut out);
    check_versions(spec, &mut out);
    check_validation_rules(spec, &mut out);
    match spec["conversion"]["strategy"].as_str().unwrap_or("None") {
        "None" => {}
        "Webhook" => {
            if spec["conversion"]["webhook"]["clientConfig"].is_null() {
                out.push(Cause::required(
                    "spec.conversion.webhook.clientConfig",
                    "required when strategy is set to Webhook",
                ));
            }
            let versions = &spec["conversion"]["webhook"]["conversionReviewVersions"];
            match versions.as_array() {
                None => out.push(Cause::required(
                    "spec.conversion.webhook.conversionReviewVersions",
                    "",
                )),
                Some(list) if !list.iter().any(|v| v == "v1" || v == "v1beta1") => {
                    out.push(Cause::invalid(
                        "spec.conversion.webhook.conversionReviewVersions",
                        versions,
                        "must include at least one of v1, v1beta1",
                    ))
                }
                Some(_) => {}
            }
        }
        other => out.push(Cause::not_supported(
            "spec.conversion.strategy",
            other,
            &["None", "Webhook"],
        )),
    }
    out
}

fn crd_update_validation(old: &Value, new: &Value) -> Vec<Cause> {
    let mut out = Vec::new();
    for (field, path) in [("group", "spec.group"), ("scope", "spec.scope")] {
        // Upstream lets scope change only while nothing was ever stored; kiln keeps both fixed.
        if old["spec"][field] != new["spec"][field] {
            out.push(Cause::invalid(
                path,
                &new["spec"][field],
                "field is immutable",
            ));
        }
    }
    let versions: Vec<&str> = new["spec"]["versions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v["name"].as_str())
        .collect();
    for (i, stored) in new["status"]["storedVersions"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let s = stored.as_str().unwrap_or("");
        if !versions.contains(&s) {
            out.push(Cause::invalid(
                &format!("status.storedVersions[{i}]"),
                stored,
                "must appear in spec.versions",
            ));
        }
    }
    out
}

#[cfg(test)]
#[path = "apiextensions_tests.rs"]
mod tests;
