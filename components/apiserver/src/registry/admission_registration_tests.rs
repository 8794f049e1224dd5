//! Defaults, field errors and table cells of admissionregistration.k8s.io (`admission_registration.rs`).

use super::validation::*;
use super::*;
use crate::status::Cause;

fn hook(name: &str) -> Value {
    json!({"name": name, "sideEffects": "None", "admissionReviewVersions": ["v1"],
           "clientConfig": {"url": "https://127.0.0.1:9443/mutate"},
           "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                      "resources": ["configmaps"]}]})
}

fn messages(causes: &[Cause]) -> Vec<String> {
    causes
        .iter()
        .map(|c| format!("{}: {}", c.field, c.message))
        .collect()
}

#[test]
fn webhook_defaults_match_upstream() {
    let mut obj = json!({"webhooks": [hook("a.example.com"),
        {"name": "b.example.com", "clientConfig": {"service": {"name": "s", "namespace": "n"}}}]});
    default_mutating(&mut obj);
    let h = &obj["webhooks"][0];
    assert_eq!(h["failurePolicy"], "Fail");
    assert_eq!(h["matchPolicy"], "Equivalent");
    assert_eq!(h["namespaceSelector"], json!({}));
    assert_eq!(h["objectSelector"], json!({}));
    assert_eq!(h["timeoutSeconds"], 10);
    assert_eq!(h["reinvocationPolicy"], "Never");
    assert_eq!(h["rules"][0]["scope"], "*");
    assert!(
        h.get("sideEffects").is_some(),
        "sideEffects is not defaulted in v1"
    );
    assert_eq!(obj["webhooks"][1]["clientConfig"]["service"]["port"], 443);
    let mut v = json!({"webhooks": [hook("a.example.com")]});
    default_validating(&mut v);
    assert!(v["webhooks"][0].get("reinvocationPolicy").is_none());
}

#[test]
fn valid_configuration_has_no_causes() {
    let mut obj = json!({"webhooks": [hook("a.example.com"), hook("b.example.com")]});
    default_mutating(&mut obj);
    assert_eq!(messages(&validate_mutating(&obj)), Vec::<String>::new());
}

#[test]
fn webhook_field_errors_use_upstream_texts() {
    let mut bad = hook("a.example.com");
    bad["admissionReviewVersions"] = json!(["v1beta1"]);
    bad["sideEffects"] = json!("Some");
    bad["timeoutSeconds"] = json!(31);
    bad["clientConfig"] = json!({"url": "http://127.0.0.1/x?y=1"});
    let mut missing = hook("a.example.com");
    missing.as_object_mut().unwrap().remove("sideEffects");
    missing["clientConfig"] =
        json!({"url": "https://h/", "service": {"name": "s", "namespace": "n"}});
    let got = messages(&validate_validating(
        &json!({"webhooks": [bad, missing, hook("short.name")]}),
    ));
    let want = [
        r#"webhooks[0].sideEffects: Unsupported value: "Some": supported values: "None", "NoneOnDryRun""#,
        r#"webhooks[0].admissionReviewVersions: Invalid value: []string{"v1beta1"}: must include at least one of v1"#,
        "webhooks[0].timeoutSeconds: Invalid value: 31: the timeout value must be between 1 and 30 seconds",
        r#"webhooks[0].clientConfig.url: Invalid value: "http": 'https' is the only allowed URL scheme; desired format: https://host[/path]"#,
        r#"webhooks[0].clientConfig.url: Invalid value: "y=1": query parameters are not permitted in the URL"#,
        r#"webhooks[1].name: Duplicate value: "a.example.com""#,
        "webhooks[1].sideEffects: Required value: must specify one of None, NoneOnDryRun",
        "webhooks[1].clientConfig: Required value: exactly one of url or service is required",
        r#"webhooks[2].name: Invalid value: "short.name": should be a domain with at least three segments separated by dots"#,
    ];
    assert_eq!(got, want);
}

#[test]
fn rule_errors() {
    let mut h = hook("a.example.com");
    h["rules"] = json!([{"operations": ["*", "CREATE"], "apiGroups": [], "apiVersions": ["v1"],
                          "resources": ["pods"], "scope": "Everywhere"}]);
    let got = messages(&validate_mutating(&json!({"webhooks": [h]})));
    assert!(got.contains(&r#"webhooks[0].rules[0].operations: Invalid value: []string{"*", "CREATE"}: if '*' is present, must not specify other operations"#.to_string()), "{got:?}");
    assert!(
        got.contains(&"webhooks[0].rules[0].apiGroups: Required value".to_string()),
        "{got:?}"
    );
    assert!(got.contains(&r#"webhooks[0].rules[0].scope: Unsupported value: "Everywhere": supported values: "*", "Cluster", "Namespaced""#.to_string()), "{got:?}");
}

#[test]
fn match_conditions_must_compile_and_be_named_uniquely() {
    let mut h = hook("a.example.com");
    h["matchConditions"] = json!([{"name": "x", "expression": "object.metadata.name != 'a'"}]);
    assert!(validate_mutating(&json!({"webhooks": [h.clone()]})).is_empty());
    h["matchConditions"] =
        json!([{"name": "x", "expression": "true"}, {"name": "x", "expression": "1 +"}]);
    let got = messages(&validate_mutating(&json!({"webhooks": [h]})));
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(
        got[0],
        r#"webhooks[0].matchConditions[1].name: Duplicate value: "x""#
    );
    assert!(
        got[1].starts_with(
            r#"webhooks[0].matchConditions[1].expression: Invalid value: "1 +": compilation failed"#
        ),
        "{got:?}"
    );
}

#[test]
fn policy_and_binding_validation() {
    let mut p = json!({"spec": {"validations": [{"expression": "object.spec.replicas < 5"}],
        "matchConstraints": {"resourceRules": [{"operations": ["CREATE"], "apiGroups": ["apps"],
            "apiVersions": ["v1"], "resources": ["deployments"]}]}}});
    default_policy(&mut p);
    assert_eq!(p["spec"]["failurePolicy"], "Fail");
    assert_eq!(p["spec"]["matchConstraints"]["matchPolicy"], "Equivalent");
    assert!(validate_policy(&p).is_empty(), "{:?}", validate_policy(&p));
    let b = json!({"spec": {"policyName": "p", "validationActions": ["Deny", "Warn"]}});
    let got = messages(&validate_binding(&b));
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(got[0].starts_with("spec.validationActions: Invalid value"));
    assert_eq!(
        messages(&validate_binding(&json!({"spec": {"policyName": "p"}}))),
        ["spec.validationActions: Required value: at least one validation action is required"]
    );
}

#[test]
fn table_cells() {
    let obj = json!({"webhooks": [{}, {}]});
    assert_eq!(webhook_count(&obj, 0), json!(2));
    assert_eq!(param_kind(&json!({"spec": {}}), 0), json!("<unset>"));
    assert_eq!(
        param_ref(
            &json!({"spec": {"paramRef": {"name": "a", "namespace": "n"}}}),
            0
        ),
        json!("n/a")
    );
}
