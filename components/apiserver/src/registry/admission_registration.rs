//! admissionregistration.k8s.io/v1: the webhook configurations the admission dispatcher
//! (`admission::webhook`) calls, and ValidatingAdmissionPolicy / its bindings. Cluster-scoped; defaults
//! and field errors follow upstream's `SetDefaults_*` and `ValidateMutatingWebhookConfiguration` etc.

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
    ValidatingWebhookConfiguration,
};
use serde_json::{json, Value};

use super::columns::{self as c, col};
use super::strategy::{typed, ResourceSpec};
use validation::{validate_binding, validate_mutating, validate_policy, validate_validating};

#[path = "admission_registration_cel.rs"]
mod cel;
#[path = "admission_registration_validation.rs"]
mod validation;

#[path = "admission_registration_mutating.rs"]
mod mutating;
pub use cel::{policy_type_issues, CheckedTypes};
pub use mutating::{
    MUTATING_ADMISSION_POLICIES, MUTATING_ADMISSION_POLICIES_V1ALPHA1,
    MUTATING_ADMISSION_POLICY_BINDINGS, MUTATING_ADMISSION_POLICY_BINDINGS_V1ALPHA1,
};

pub const GROUP: &str = "admissionregistration.k8s.io";

/// AdmissionReview versions kiln-apiserver speaks (upstream also accepts v1beta1; kiln sends v1 only).
pub const ACCEPTED_REVIEW_VERSIONS: &[&str] = &["v1"];

fn webhook_count(obj: &Value, _: i64) -> Value {
    json!(obj["webhooks"].as_array().map_or(0, Vec::len))
}

fn validation_count(obj: &Value, _: i64) -> Value {
    json!(obj["spec"]["validations"].as_array().map_or(0, Vec::len))
}

fn param_kind(obj: &Value, _: i64) -> Value {
    let pk = &obj["spec"]["paramKind"];
    if !pk.is_object() {
        return json!("<unset>");
    }
    json!(format!(
        "{}/{}",
        pk["apiVersion"].as_str().unwrap_or(""),
        pk["kind"].as_str().unwrap_or("")
    ))
}

fn policy_name(obj: &Value, _: i64) -> Value {
    obj["spec"]["policyName"].clone()
}

fn param_ref(obj: &Value, _: i64) -> Value {
    let pr = &obj["spec"]["paramRef"];
    if !pr.is_object() {
        return json!("<unset>");
    }
    let name = pr["name"].as_str().unwrap_or("*");
    json!(match pr["namespace"].as_str() {
        Some(ns) if !ns.is_empty() => format!("{ns}/{name}"),
        _ => name.to_string(),
    })
}

fn set_default(obj: &mut Value, field: &str, value: Value) {
    if obj.is_object() && obj.get(field).is_none_or(Value::is_null) {
        obj[field] = value;
    }
}

/// `SetDefaults_Rule`: scope `*`.
fn default_rules(rules: &mut Value) {
    for r in rules.as_array_mut().into_iter().flatten() {
        set_default(r, "scope", json!("*"));
    }
}

fn default_webhook(hook: &mut Value, mutating: bool) {
    set_default(hook, "failurePolicy", json!("Fail"));
    set_default(hook, "matchPolicy", json!("Equivalent"));
    set_default(hook, "namespaceSelector", json!({}));
    set_default(hook, "objectSelector", json!({}));
    set_default(hook, "timeoutSeconds", json!(10));
    if mutating {
        set_default(hook, "reinvocationPolicy", json!("Never"));
    }
    default_rules(&mut hook["rules"]);
    if let Some(svc) = hook["clientConfig"]["service"].as_object_mut() {
        svc.entry("port").or_insert(json!(443));
    }
}

fn default_mutating(obj: &mut Value) {
    for h in obj["webhooks"].as_array_mut().into_iter().flatten() {
        default_webhook(h, true);
    }
}

fn default_validating(obj: &mut Value) {
    for h in obj["webhooks"].as_array_mut().into_iter().flatten() {
        default_webhook(h, false);
    }
}

fn default_match_resources(m: &mut Value) {
    if !m.is_object() {
        return;
    }
    set_default(m, "matchPolicy", json!("Equivalent"));
    set_default(m, "namespaceSelector", json!({}));
    set_default(m, "objectSelector", json!({}));
    default_rules(&mut m["resourceRules"]);
    default_rules(&mut m["excludeResourceRules"]);
}

fn default_policy(obj: &mut Value) {
    let spec = &mut obj["spec"];
    set_default(spec, "failurePolicy", json!("Fail"));
    default_match_resources(&mut spec["matchConstraints"]);
}

fn default_binding(obj: &mut Value) {
    let spec = &mut obj["spec"];
    default_match_resources(&mut spec["matchResources"]);
    if spec["paramRef"].is_object() {
        set_default(
            &mut spec["paramRef"],
            "parameterNotFoundAction",
            json!("Deny"),
        );
    }
}

pub static MUTATING_WEBHOOK_CONFIGURATIONS: ResourceSpec = ResourceSpec {
    group: GROUP,
    plural: "mutatingwebhookconfigurations",
    singular: "mutatingwebhookconfiguration",
    kind: "MutatingWebhookConfiguration",
    list_kind: "MutatingWebhookConfigurationList",
    namespaced: false,
    categories: &["api-extensions"],
    table: &[
        c::NAME_COL,
        col(
            "Webhooks",
            "integer",
            "",
            "Webhooks indicates the number of webhooks rules defined in this configuration",
            0,
            webhook_count,
        ),
        c::AGE_COL,
    ],
    decode: typed::<MutatingWebhookConfiguration>,
    defaults: default_mutating,
    validate: validate_mutating,
    ..ResourceSpec::BASE
};

pub static VALIDATING_WEBHOOK_CONFIGURATIONS: ResourceSpec = ResourceSpec {
    group: GROUP,
    plural: "validatingwebhookconfigurations",
    singular: "validatingwebhookconfiguration",
    kind: "ValidatingWebhookConfiguration",
    list_kind: "ValidatingWebhookConfigurationList",
    namespaced: false,
    categories: &["api-extensions"],
    table: &[
        c::NAME_COL,
        col(
            "Webhooks",
            "integer",
            "",
            "Webhooks indicates the number of webhooks rules defined in this configuration",
            0,
            webhook_count,
        ),
        c::AGE_COL,
    ],
    decode: typed::<ValidatingWebhookConfiguration>,
    defaults: default_validating,
    validate: validate_validating,
    ..ResourceSpec::BASE
};

pub static VALIDATING_ADMISSION_POLICIES: ResourceSpec = ResourceSpec {
    group: GROUP,
    plural: "validatingadmissionpolicies",
    singular: "validatingadmissionpolicy",
    kind: "ValidatingAdmissionPolicy",
    list_kind: "ValidatingAdmissionPolicyList",
    namespaced: false,
    categories: &["api-extensions"],
    status_subresource: true,
    generation: true,
    table: &[
        c::NAME_COL,
        col(
            "Validations",
            "integer",
            "",
            "Validations indicates the number of validation rules defined in this configuration",
            0,
            validation_count,
        ),
        col(
            "ParamKind",
            "string",
            "",
            "ParamKind specifies the kind of resources used to parameterize this policy",
            0,
            param_kind,
        ),
        c::AGE_COL,
    ],
    decode: typed::<ValidatingAdmissionPolicy>,
    defaults: default_policy,
    validate: validate_policy,
    ..ResourceSpec::BASE
};

/// The columns `kubectl get` shows for both policy binding kinds (validating and mutating), as upstream.
pub(super) const BINDING_TABLE: &[super::strategy::Column] = &[
    c::NAME_COL,
    col(
        "PolicyName",
        "string",
        "",
        "PolicyName indicates the policy definition which the policy binding binded to",
        0,
        policy_name,
    ),
    col(
        "ParamRef",
        "string",
        "",
        "ParamRef indicates the param resource which sets the configration param",
        0,
        param_ref,
    ),
    c::AGE_COL,
];

pub static VALIDATING_ADMISSION_POLICY_BINDINGS: ResourceSpec = ResourceSpec {
    group: GROUP,
    plural: "validatingadmissionpolicybindings",
    singular: "validatingadmissionpolicybinding",
    kind: "ValidatingAdmissionPolicyBinding",
    list_kind: "ValidatingAdmissionPolicyBindingList",
    namespaced: false,
    categories: &["api-extensions"],
    table: BINDING_TABLE,
    decode: typed::<ValidatingAdmissionPolicyBinding>,
    defaults: default_binding,
    validate: validate_binding,
    ..ResourceSpec::BASE
};

/// This group's kinds, for `resources::ALL`.
pub static ALL: &[&ResourceSpec] = &[
    &MUTATING_WEBHOOK_CONFIGURATIONS,
    &VALIDATING_WEBHOOK_CONFIGURATIONS,
    &VALIDATING_ADMISSION_POLICIES,
    &VALIDATING_ADMISSION_POLICY_BINDINGS,
    &MUTATING_ADMISSION_POLICIES,
    &MUTATING_ADMISSION_POLICIES_V1ALPHA1,
    &MUTATING_ADMISSION_POLICY_BINDINGS,
    &MUTATING_ADMISSION_POLICY_BINDINGS_V1ALPHA1,
];

#[cfg(test)]
#[path = "admission_registration_tests.rs"]
mod tests;
