//! MutatingAdmissionPolicy and MutatingAdmissionPolicyBinding (admissionregistration.k8s.io
//! v1beta1, as Kubernetes 1.34 serves them, and v1alpha1, as 1.32 does; the two are field for
//! field the same, so one set of stored objects serves both). Defaults are upstream's
//! `SetDefaults_MutatingAdmissionPolicySpec` / `SetDefaults_MatchResources` / `SetDefaults_ParamRef`;
//! field errors follow `validateMutatingAdmissionPolicySpec` and its binding's. The admission
//! plugin that runs them is `admission::mutating_policy`.

use k8s_openapi::api::admissionregistration::v1alpha1::{
    MutatingAdmissionPolicy, MutatingAdmissionPolicyBinding,
};
use serde_json::{json, Value};

use super::super::columns::{self as c, col};
use super::super::strategy::{typed, ResourceSpec};
use super::validation::{one_of, strings, validate_match_conditions};
use super::{default_binding, default_policy, param_kind, GROUP};
use crate::cel::mutation::MutationProgram;
use crate::status::Cause;

/// What a MutatingAdmissionPolicy may match: a mutation cannot apply to a delete
/// (`supportedMutatingOperations`, sorted as upstream lists it).
const MUTATING_OPERATIONS: &[&str] = &["*", "CONNECT", "CREATE", "UPDATE"];

fn mutation_count(obj: &Value, _: i64) -> Value {
    json!(obj["spec"]["mutations"].as_array().map_or(0, Vec::len))
}

/// Both versions decode through k8s-openapi's v1alpha1 types (the crate's 1.33 API has no
/// v1beta1 MutatingAdmissionPolicy), keeping the version the object was written in.
fn decode_as<T>(mut value: Value) -> Result<Value, String>
where
    T: serde::de::DeserializeOwned + serde::Serialize,
{
    let written = value["apiVersion"].clone();
    if written.is_string() {
        value["apiVersion"] = json!(format!("{GROUP}/v1alpha1"));
    }
    let mut out = typed::<T>(value)?;
    if written.is_string() {
        out["apiVersion"] = written;
    }
    Ok(out)
}

fn decode_policy(value: Value) -> Result<Value, String> {
    decode_as::<MutatingAdmissionPolicy>(value)
}

fn decode_binding(value: Value) -> Result<Value, String> {
    decode_as::<MutatingAdmissionPolicyBinding>(value)
}

/// The two versions differ only in their apiVersion.
fn convert(obj: &mut Value, version: &str) {
    obj["apiVersion"] = json!(format!("{GROUP}/{version}"));
}

/// A CEL expression field: required, and it must compile.
fn validate_expression(expression: &Value, path: &str, causes: &mut Vec<Cause>) {
    let text = expression.as_str().unwrap_or("");
    if text.trim().is_empty() {
        causes.push(Cause::required(path, ""));
    } else if let Err(e) = MutationProgram::compile(text) {
        causes.push(Cause::invalid(path, &json!(text), &e.to_string()));
    }
}

fn validate_mutation(m: &Value, path: &str, causes: &mut Vec<Cause>) {
    let (json_patch, apply) = (&m["jsonPatch"], &m["applyConfiguration"]);
    match m["patchType"].as_str().unwrap_or("") {
        "" => causes.push(Cause::required(&format!("{path}.patchType"), "")),
        "JSONPatch" => {
            if json_patch.is_object() {
                let p = format!("{path}.jsonPatch.expression");
                validate_expression(&json_patch["expression"], &p, causes);
            } else {
                causes.push(Cause::required(
                    &format!("{path}.jsonPatch"),
                    "must be specified when patchType is JSONPatch",
                ));
            }
            if apply.is_object() {
                causes.push(Cause::invalid(
                    &format!("{path}.applyConfiguration"),
                    &json!("{applyConfiguration}"),
                    "must not be specified when patchType is JSONPatch",
                ));
            }
        }
        "ApplyConfiguration" => {
            if apply.is_object() {
                let p = format!("{path}.applyConfiguration.expression");
                validate_expression(&apply["expression"], &p, causes);
            } else {
                causes.push(Cause::required(
                    &format!("{path}.applyConfiguration"),
                    "must be specified when patchType is ApplyConfiguration",
                ));
            }
            if json_patch.is_object() {
                causes.push(Cause::invalid(
                    &format!("{path}.jsonPatch"),
                    &json!("{jsonPatch}"),
                    "must not be specified when patchType is ApplyConfiguration",
                ));
            }
        }
        other => causes.push(Cause::not_supported(
            &format!("{path}.patchType"),
            other,
            &["ApplyConfiguration", "JSONPatch"],
        )),
    }
}

fn validate_variables(list: &Value, causes: &mut Vec<Cause>) {
    for (i, v) in list.as_array().into_iter().flatten().enumerate() {
        let p = format!("spec.variables[{i}]");
        let name = v["name"].as_str().unwrap_or("");
        if name.trim().is_empty() {
            causes.push(Cause::required(
                &format!("{p}.name"),
                "name is not specified",
            ));
        } else if !crate::cel::is_identifier(name) {
            causes.push(Cause::invalid(
                &format!("{p}.name"),
                &json!(name),
                "name is not a valid CEL identifier",
            ));
        }
        let expression = v["expression"].as_str().unwrap_or("");
        if expression.trim().is_empty() {
            causes.push(Cause::required(
                &format!("{p}.expression"),
                "expression is not specified",
            ));
        } else if let Err(e) = crate::cel::Program::compile(expression) {
            causes.push(Cause::invalid(
                &format!("{p}.expression"),
                &json!(expression),
                &e.to_string(),
            ));
        }
    }
}

/// The rule checks shared with ValidatingAdmissionPolicy, then no DELETE.
fn validate_match(m: &Value, path: &str, causes: &mut Vec<Cause>) {
    super::validation::validate_match_resources(m, path, causes);
    for rule in m["resourceRules"].as_array().into_iter().flatten() {
        for op in strings(&rule["operations"]) {
            if !MUTATING_OPERATIONS.contains(&op) {
                causes.push(Cause::not_supported(
                    &format!("{path}.resourceRules.operations"),
                    op,
                    MUTATING_OPERATIONS,
                ));
            }
        }
    }
}

fn validate_policy(obj: &Value) -> Vec<Cause> {
    let spec = &obj["spec"];
    let mut causes = Vec::new();
    match spec["failurePolicy"].as_str() {
        None => causes.push(Cause::required("spec.failurePolicy", "")),
        Some(_) => one_of(
            &mut causes,
            "spec.failurePolicy",
            &spec["failurePolicy"],
            &["Fail", "Ignore"],
        ),
    }
    let pk = &spec["paramKind"];
    if pk.is_object() {
        for f in ["apiVersion", "kind"] {
            if pk[f].as_str().unwrap_or("").is_empty() {
                causes.push(Cause::required(&format!("spec.paramKind.{f}"), ""));
            }
        }
    }
    match &spec["matchConstraints"] {
        m if m.is_object() => {
            validate_match(m, "spec.matchConstraints", &mut causes);
            if m["resourceRules"].as_array().is_none_or(Vec::is_empty) {
                causes.push(Cause::required("spec.matchConstraints.resourceRules", ""));
            }
        }
        _ => causes.push(Cause::required("spec.matchConstraints", "")),
    }
    validate_match_conditions(
        &spec["matchConditions"],
        "spec.matchConditions",
        &mut causes,
    );
    validate_variables(&spec["variables"], &mut causes);
    match spec["mutations"].as_array().filter(|m| !m.is_empty()) {
        None => causes.push(Cause::required(
            "spec.mutations",
            "mutations must contain at least one item",
        )),
        Some(mutations) => {
            for (i, m) in mutations.iter().enumerate() {
                validate_mutation(m, &format!("spec.mutations[{i}]"), &mut causes);
            }
        }
    }
    match spec["reinvocationPolicy"].as_str().unwrap_or("") {
        "" => causes.push(Cause::required("spec.reinvocationPolicy", "")),
        p => one_of(
            &mut causes,
            "spec.reinvocationPolicy",
            &json!(p),
            &["IfNeeded", "Never"],
        ),
    }
    causes
}

/// `validateParamRef`.
fn validate_param_ref(pr: &Value, causes: &mut Vec<Cause>) {
    if !pr.is_object() {
        return;
    }
    let has_name = pr["name"].as_str().is_some_and(|n| !n.is_empty());
    let has_selector = pr["selector"].is_object();
    if has_name && has_selector {
        causes.push(Cause::forbidden(
            "spec.paramRef.name",
            "name and selector are mutually exclusive",
        ));
        causes.push(Cause::forbidden(
            "spec.paramRef.selector",
            "name and selector are mutually exclusive",
        ));
    }
    if !has_name && !has_selector {
        causes.push(Cause::required(
            "spec.paramRef",
            "one of name or selector must be specified",
        ));
    }
    match pr["parameterNotFoundAction"].as_str().unwrap_or("") {
        "" => causes.push(Cause::required("spec.paramRef.parameterNotFoundAction", "")),
        a => one_of(
            causes,
            "spec.paramRef.parameterNotFoundAction",
            &json!(a),
            &["Deny", "Allow"],
        ),
    }
}

fn validate_binding(obj: &Value) -> Vec<Cause> {
    let spec = &obj["spec"];
    let mut causes = Vec::new();
    if spec["policyName"].as_str().unwrap_or("").is_empty() {
        causes.push(Cause::required("spec.policyName", ""));
    }
    validate_param_ref(&spec["paramRef"], &mut causes);
    if spec["matchResources"].is_object() {
        validate_match(&spec["matchResources"], "spec.matchResources", &mut causes);
    }
    causes
}

/// `SetDefaults_MutatingAdmissionPolicySpec` (failurePolicy Fail) and the match defaults.
fn default_mutating_policy(obj: &mut Value) {
    default_policy(obj);
}

const POLICY: ResourceSpec = ResourceSpec {
    group: GROUP,
    version: "v1beta1",
    plural: "mutatingadmissionpolicies",
    singular: "mutatingadmissionpolicy",
    kind: "MutatingAdmissionPolicy",
    list_kind: "MutatingAdmissionPolicyList",
    namespaced: false,
    categories: &["api-extensions"],
    generation: true,
    table: &[
        c::NAME_COL,
        col(
            "Mutations",
            "integer",
            "",
            "Mutation indicates the number of mutations rules defined in this configuration",
            0,
            mutation_count,
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
    decode: decode_policy,
    defaults: default_mutating_policy,
    validate: validate_policy,
    convert: Some(convert),
    ..ResourceSpec::BASE
};

const BINDING: ResourceSpec = ResourceSpec {
    group: GROUP,
    version: "v1beta1",
    plural: "mutatingadmissionpolicybindings",
    singular: "mutatingadmissionpolicybinding",
    kind: "MutatingAdmissionPolicyBinding",
    list_kind: "MutatingAdmissionPolicyBindingList",
    namespaced: false,
    categories: &["api-extensions"],
    table: super::BINDING_TABLE,
    decode: decode_binding,
    defaults: default_binding,
    validate: validate_binding,
    convert: Some(convert),
    ..ResourceSpec::BASE
};

/// v1beta1 first: the preferred version, as Kubernetes 1.34 serves it.
pub static MUTATING_ADMISSION_POLICIES: ResourceSpec = POLICY;
pub static MUTATING_ADMISSION_POLICIES_V1ALPHA1: ResourceSpec = ResourceSpec {
    version: "v1alpha1",
    ..POLICY
};
pub static MUTATING_ADMISSION_POLICY_BINDINGS: ResourceSpec = BINDING;
pub static MUTATING_ADMISSION_POLICY_BINDINGS_V1ALPHA1: ResourceSpec = ResourceSpec {
    version: "v1alpha1",
    ..BINDING
};

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(spec: Value) -> Value {
        json!({"apiVersion": "admissionregistration.k8s.io/v1alpha1",
               "kind": "MutatingAdmissionPolicy", "metadata": {"name": "p"}, "spec": spec})
    }

    fn fields(causes: &[Cause]) -> Vec<String> {
        causes
            .iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect()
    }

    fn good() -> Value {
        json!({
            "matchConstraints": {"resourceRules": [{"operations": ["CREATE"], "apiGroups": [""],
                "apiVersions": ["v1"], "resources": ["pods"]}]},
            "reinvocationPolicy": "Never",
            "mutations": [{"patchType": "ApplyConfiguration",
                "applyConfiguration": {"expression": "Object{metadata: Object.metadata{labels: {'a': 'b'}}}"}}],
        })
    }

    #[test]
    fn defaults_and_a_valid_policy() {
        let mut p = policy(good());
        default_mutating_policy(&mut p);
        assert_eq!(p["spec"]["failurePolicy"], "Fail");
        assert_eq!(p["spec"]["matchConstraints"]["matchPolicy"], "Equivalent");
        assert!(validate_policy(&p).is_empty(), "{:?}", validate_policy(&p));
        let decoded = decode_policy(policy(good())).unwrap();
        assert_eq!(
            decoded["apiVersion"],
            "admissionregistration.k8s.io/v1alpha1"
        );
        let mut beta = policy(good());
        beta["apiVersion"] = json!("admissionregistration.k8s.io/v1beta1");
        assert_eq!(
            decode_policy(beta).unwrap()["apiVersion"],
            "admissionregistration.k8s.io/v1beta1"
        );
    }

    #[test]
    fn invalid_policies_name_the_field() {
        let mut spec = good();
        spec["matchConstraints"]["resourceRules"][0]["operations"] = json!(["DELETE"]);
        spec["reinvocationPolicy"] = json!("Sometimes");
        spec["mutations"] = json!([
            {"patchType": "JSONPatch"},
            {"patchType": "ApplyConfiguration", "applyConfiguration": {"expression": "Object{"},
             "jsonPatch": {"expression": "[]"}},
            {"patchType": "Merge"},
        ]);
        let mut p = policy(spec);
        default_mutating_policy(&mut p);
        let got = fields(&validate_policy(&p));
        assert_eq!(got[0], "spec.matchConstraints.resourceRules.operations: Unsupported value: \"DELETE\": supported values: \"*\", \"CONNECT\", \"CREATE\", \"UPDATE\"");
        assert_eq!(
            got[1],
            "spec.mutations[0].jsonPatch: Required value: must be specified when patchType is JSONPatch"
        );
        assert!(
            got[2].starts_with("spec.mutations[1].applyConfiguration.expression: Invalid value: \"Object{\": compilation failed: ERROR: <input>:1:"),
            "{}",
            got[2]
        );
        assert_eq!(got[3], "spec.mutations[1].jsonPatch: Invalid value: \"{jsonPatch}\": must not be specified when patchType is ApplyConfiguration");
        assert_eq!(got[4], "spec.mutations[2].patchType: Unsupported value: \"Merge\": supported values: \"ApplyConfiguration\", \"JSONPatch\"");
        assert_eq!(got[5], "spec.reinvocationPolicy: Unsupported value: \"Sometimes\": supported values: \"IfNeeded\", \"Never\"");
        assert_eq!(got.len(), 6, "{got:?}");
        let empty = validate_policy(&policy(json!({"failurePolicy": "Fail"})));
        assert_eq!(
            fields(&empty),
            [
                "spec.matchConstraints: Required value",
                "spec.mutations: Required value: mutations must contain at least one item",
                "spec.reinvocationPolicy: Required value",
            ]
        );
    }

    #[test]
    fn binding_param_ref_rules() {
        let b = json!({"spec": {"policyName": "p",
            "paramRef": {"name": "x", "selector": {}, "parameterNotFoundAction": "Maybe"}}});
        assert_eq!(
            fields(&validate_binding(&b)),
            [
                "spec.paramRef.name: Forbidden: name and selector are mutually exclusive",
                "spec.paramRef.selector: Forbidden: name and selector are mutually exclusive",
                "spec.paramRef.parameterNotFoundAction: Unsupported value: \"Maybe\": supported values: \"Deny\", \"Allow\"",
            ]
        );
        let mut defaulted = json!({"spec": {"policyName": "p", "paramRef": {"name": "x"}}});
        default_binding(&mut defaulted);
        assert!(validate_binding(&defaulted).is_empty());
    }
}
