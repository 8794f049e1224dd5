use super::*;
use crate::registry::lifecycle::{prepare_create, prepare_update, FieldValidation, UpdateScope};

fn crd(name: &str) -> Value {
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
           "metadata": {"name": name},
           "spec": {"group": "example.com", "scope": "Namespaced",
                    "names": {"plural": "widgets", "kind": "Widget"},
                    "versions": [{"name": "v1", "served": true, "storage": true,
                                  "schema": {"openAPIV3Schema": {"type": "object"}}}]}})
}

fn messages(e: crate::status::ApiError) -> String {
    e.message
}

#[test]
fn a_crd_is_defaulted_like_upstream() {
    let c = prepare_create(
        &CUSTOM_RESOURCE_DEFINITIONS,
        None,
        crd("widgets.example.com"),
        FieldValidation::Strict,
    )
    .unwrap();
    assert_eq!(c["spec"]["names"]["singular"], "widget");
    assert_eq!(c["spec"]["names"]["listKind"], "WidgetList");
    assert_eq!(c["spec"]["conversion"]["strategy"], "None");
    assert_eq!(c["status"]["storedVersions"], json!(["v1"]));
    assert_eq!(
        c["status"]["acceptedNames"],
        json!({"plural": "", "kind": ""})
    );
    assert_eq!(c["metadata"]["generation"], 1);
}

#[test]
fn invalid_crds_name_each_field() {
    let e = prepare_create(
        &CUSTOM_RESOURCE_DEFINITIONS,
        None,
        crd("widgets.other.com"),
        FieldValidation::Strict,
    )
    .unwrap_err();
    assert_eq!(e.code, 422);
    assert!(messages(e).contains("metadata.name: Invalid value: \"widgets.other.com\": must be spec.names.plural+\".\"+spec.group"));
    let mut c = crd("widgets.example.com");
    c["spec"]["versions"][0]["storage"] = json!(false);
    c["spec"]["versions"][0]["schema"] = json!(null);
    c["spec"]["scope"] = json!("Global");
    let msg = messages(
        prepare_create(
            &CUSTOM_RESOURCE_DEFINITIONS,
            None,
            c,
            FieldValidation::Strict,
        )
        .unwrap_err(),
    );
    assert!(
        msg.contains("must have exactly one version marked as storage version"),
        "{msg}"
    );
    assert!(
        msg.contains(
            "spec.versions[0].schema.openAPIV3Schema: Required value: schemas are required"
        ),
        "{msg}"
    );
    assert!(
        msg.contains("spec.scope: Unsupported value: \"Global\""),
        "{msg}"
    );
}

#[test]
fn scope_and_group_are_immutable_and_new_storage_versions_are_recorded() {
    let old = prepare_create(
        &CUSTOM_RESOURCE_DEFINITIONS,
        None,
        crd("widgets.example.com"),
        FieldValidation::Strict,
    )
    .unwrap();
    let mut new = old.clone();
    new["spec"]["scope"] = json!("Cluster");
    let e = prepare_update(
        &CUSTOM_RESOURCE_DEFINITIONS,
        UpdateScope::Main,
        None,
        &old,
        new,
        FieldValidation::Strict,
    )
    .unwrap_err();
    assert!(
        e.message
            .contains("spec.scope: Invalid value: \"Cluster\": field is immutable"),
        "{}",
        e.message
    );
    let mut new = old.clone();
    new["spec"]["versions"] = json!([
        {"name": "v1", "served": true, "storage": false, "schema": {"openAPIV3Schema": {"type": "object"}}},
        {"name": "v2", "served": true, "storage": true, "schema": {"openAPIV3Schema": {"type": "object"}}}]);
    let n = prepare_update(
        &CUSTOM_RESOURCE_DEFINITIONS,
        UpdateScope::Main,
        None,
        &old,
        new,
        FieldValidation::Strict,
    )
    .unwrap();
    assert_eq!(n["status"]["storedVersions"], json!(["v1", "v2"]));
    assert_eq!(n["metadata"]["generation"], 2);
}
