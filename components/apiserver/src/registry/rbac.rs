//! rbac.authorization.k8s.io/v1 roles and bindings, and the review kinds (authorization.k8s.io
//! access reviews, authentication.k8s.io self reviews) that are computed per request, never stored.

use k8s_openapi::api::authentication::v1::{SelfSubjectReview, TokenReview};
use k8s_openapi::api::authorization::v1::{
    LocalSubjectAccessReview, SelfSubjectAccessReview, SelfSubjectRulesReview, SubjectAccessReview,
};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use serde_json::{json, Value};

use super::columns::{self as c, col};
use super::strategy::{typed, Column, ResourceSpec};
use crate::status::Cause;

fn role_ref(obj: &Value, _: i64) -> Value {
    json!(format!(
        "{}/{}",
        obj["roleRef"]["kind"].as_str().unwrap_or(""),
        obj["roleRef"]["name"].as_str().unwrap_or("")
    ))
}

fn subjects_of(obj: &Value, kind: &str) -> Vec<String> {
    obj["subjects"]
        .as_array()
        .map(|l| {
            l.iter()
                .filter(|s| s["kind"] == kind)
                .map(|s| match s["namespace"].as_str() {
                    Some(ns) if kind == "ServiceAccount" => {
                        format!("{ns}/{}", s["name"].as_str().unwrap_or(""))
                    }
                    _ => s["name"].as_str().unwrap_or("").to_string(),
                })
                .collect()
        })
        .unwrap_or_default()
}

fn users(obj: &Value, _: i64) -> Value {
    json!(subjects_of(obj, "User").join(", "))
}
fn groups(obj: &Value, _: i64) -> Value {
    json!(subjects_of(obj, "Group").join(", "))
}
fn service_accounts(obj: &Value, _: i64) -> Value {
    json!(subjects_of(obj, "ServiceAccount").join(", "))
}

const BINDING_TABLE: &[Column] = &[
    c::NAME_COL,
    col(
        "Role",
        "string",
        "",
        "RoleRef is the role being bound",
        0,
        role_ref,
    ),
    c::AGE_COL,
    col("Users", "string", "", "Users in the binding", 1, users),
    col("Groups", "string", "", "Groups in the binding", 1, groups),
    col(
        "ServiceAccounts",
        "string",
        "",
        "ServiceAccounts in the binding",
        1,
        service_accounts,
    ),
];

fn binding_validation(obj: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let r = &obj["roleRef"];
    if r["name"].as_str().unwrap_or("").is_empty() {
        causes.push(Cause::required("roleRef.name", ""));
    }
    let kind = r["kind"].as_str().unwrap_or("");
    if !matches!(kind, "Role" | "ClusterRole") {
        causes.push(Cause {
            reason: "FieldValueNotSupported",
            message: format!(
                "Unsupported value: {kind:?}: supported values: \"Role\", \"ClusterRole\""
            ),
            field: "roleRef.kind".into(),
        });
    }
    for (i, s) in obj["subjects"].as_array().into_iter().flatten().enumerate() {
        if s["name"].as_str().unwrap_or("").is_empty() {
            causes.push(Cause::required(&format!("subjects[{i}].name"), ""));
        }
        if s["kind"] == "ServiceAccount" && s["namespace"].as_str().unwrap_or("").is_empty() {
            causes.push(Cause::required(&format!("subjects[{i}].namespace"), ""));
        }
    }
    causes
}

fn binding_defaults(obj: &mut Value) {
    if obj["roleRef"]["apiGroup"].is_null() && obj["roleRef"].is_object() {
        obj["roleRef"]["apiGroup"] = json!("rbac.authorization.k8s.io");
    }
    for s in obj["subjects"].as_array_mut().into_iter().flatten() {
        if s["apiGroup"].is_null() && matches!(s["kind"].as_str(), Some("User" | "Group")) {
            s["apiGroup"] = json!("rbac.authorization.k8s.io");
        }
    }
}

pub static ROLES: ResourceSpec = ResourceSpec {
    group: "rbac.authorization.k8s.io",
    plural: "roles",
    singular: "role",
    kind: "Role",
    list_kind: "RoleList",
    name_is_path_segment: true,
    table: &[c::NAME_COL, c::CREATED_AT_COL],
    decode: typed::<Role>,
    ..ResourceSpec::BASE
};

pub static ROLE_BINDINGS: ResourceSpec = ResourceSpec {
    group: "rbac.authorization.k8s.io",
    plural: "rolebindings",
    singular: "rolebinding",
    kind: "RoleBinding",
    list_kind: "RoleBindingList",
    name_is_path_segment: true,
    table: BINDING_TABLE,
    decode: typed::<RoleBinding>,
    defaults: binding_defaults,
    validate: binding_validation,
    ..ResourceSpec::BASE
};

pub static CLUSTER_ROLES: ResourceSpec = ResourceSpec {
    group: "rbac.authorization.k8s.io",
    plural: "clusterroles",
    singular: "clusterrole",
    kind: "ClusterRole",
    list_kind: "ClusterRoleList",
    namespaced: false,
    name_is_path_segment: true,
    table: &[c::NAME_COL, c::CREATED_AT_COL],
    decode: typed::<ClusterRole>,
    ..ResourceSpec::BASE
};

pub static CLUSTER_ROLE_BINDINGS: ResourceSpec = ResourceSpec {
    group: "rbac.authorization.k8s.io",
    plural: "clusterrolebindings",
    singular: "clusterrolebinding",
    kind: "ClusterRoleBinding",
    list_kind: "ClusterRoleBindingList",
    namespaced: false,
    name_is_path_segment: true,
    table: BINDING_TABLE,
    decode: typed::<ClusterRoleBinding>,
    defaults: binding_defaults,
    validate: binding_validation,
    ..ResourceSpec::BASE
};

const CREATE_ONLY: &[&str] = &["create"];

pub static SELF_SUBJECT_ACCESS_REVIEWS: ResourceSpec = ResourceSpec {
    group: "authorization.k8s.io",
    plural: "selfsubjectaccessreviews",
    singular: "selfsubjectaccessreview",
    kind: "SelfSubjectAccessReview",
    list_kind: "",
    namespaced: false,
    verbs: CREATE_ONLY,
    decode: typed::<SelfSubjectAccessReview>,
    ephemeral: true,
    ..ResourceSpec::BASE
};

pub static SELF_SUBJECT_RULES_REVIEWS: ResourceSpec = ResourceSpec {
    group: "authorization.k8s.io",
    plural: "selfsubjectrulesreviews",
    singular: "selfsubjectrulesreview",
    kind: "SelfSubjectRulesReview",
    list_kind: "",
    namespaced: false,
    verbs: CREATE_ONLY,
    decode: typed::<SelfSubjectRulesReview>,
    ephemeral: true,
    ..ResourceSpec::BASE
};

pub static SUBJECT_ACCESS_REVIEWS: ResourceSpec = ResourceSpec {
    group: "authorization.k8s.io",
    plural: "subjectaccessreviews",
    singular: "subjectaccessreview",
    kind: "SubjectAccessReview",
    list_kind: "",
    namespaced: false,
    verbs: CREATE_ONLY,
    decode: typed::<SubjectAccessReview>,
    ephemeral: true,
    ..ResourceSpec::BASE
};

pub static SELF_SUBJECT_REVIEWS: ResourceSpec = SELF_SUBJECT_REVIEW_BASE;

const SELF_SUBJECT_REVIEW_BASE: ResourceSpec = ResourceSpec {
    group: "authentication.k8s.io",
    plural: "selfsubjectreviews",
    singular: "selfsubjectreview",
    kind: "SelfSubjectReview",
    list_kind: "",
    namespaced: false,
    verbs: CREATE_ONLY,
    decode: typed::<SelfSubjectReview>,
    ephemeral: true,
    ..ResourceSpec::BASE
};

/// authentication.k8s.io/v1beta1, served upstream through 1.29 and what kubectl 1.27's `auth whoami`
/// asks for; the same shape as v1, so it is decoded as v1 and answered in the version it was sent in.
pub static SELF_SUBJECT_REVIEWS_V1BETA1: ResourceSpec = ResourceSpec {
    version: "v1beta1",
    decode: self_subject_review_v1beta1,
    ..SELF_SUBJECT_REVIEW_BASE
};

fn self_subject_review_v1beta1(mut value: Value) -> Result<Value, String> {
    const V1BETA1: &str = "authentication.k8s.io/v1beta1";
    if value["apiVersion"] == V1BETA1 {
        value["apiVersion"] = Value::from("authentication.k8s.io/v1");
    }
    let mut out = typed::<SelfSubjectReview>(value)?;
    out["apiVersion"] = Value::from(V1BETA1);
    Ok(out)
}

pub static LOCAL_SUBJECT_ACCESS_REVIEWS: ResourceSpec = ResourceSpec {
    group: "authorization.k8s.io",
    plural: "localsubjectaccessreviews",
    singular: "localsubjectaccessreview",
    kind: "LocalSubjectAccessReview",
    list_kind: "",
    namespaced: true,
    verbs: CREATE_ONLY,
    decode: typed::<LocalSubjectAccessReview>,
    ephemeral: true,
    ..ResourceSpec::BASE
};

pub static TOKEN_REVIEWS: ResourceSpec = ResourceSpec {
    group: "authentication.k8s.io",
    plural: "tokenreviews",
    singular: "tokenreview",
    kind: "TokenReview",
    list_kind: "",
    namespaced: false,
    verbs: CREATE_ONLY,
    decode: typed::<TokenReview>,
    ephemeral: true,
    ..ResourceSpec::BASE
};
