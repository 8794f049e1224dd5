use serde_json::{json, Value};

use super::*;

fn writer<'a>(manager: &'a str) -> Writer<'a> {
    Writer {
        manager,
        api_version: "apps/v1",
        subresource: None,
        tracks_status: false,
        now: "2026-11-29T22:00:00Z",
    }
}

fn deploy(replicas: i64, image: &str) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "labels": {"app": "web"}},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "app", "image": image}]}}}})
}

fn managers(obj: &Value) -> Vec<(String, String)> {
    obj["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            (
                e["manager"].as_str().unwrap().to_string(),
                e["operation"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn apply_creates_with_an_apply_entry_for_the_configs_fields() {
    let out = apply(None, &deploy(2, "i:1"), &writer("kubectl"), false).unwrap();
    assert_eq!(out["spec"]["replicas"], 2);
    assert_eq!(managers(&out), [("kubectl".into(), "Apply".into())]);
    let f = &out["metadata"]["managedFields"][0]["fieldsV1"];
    assert_eq!(f["f:spec"]["f:replicas"], json!({}));
    assert_eq!(
        f["f:spec"]["f:template"]["f:spec"]["f:containers"]["k:{\"name\":\"app\"}"],
        json!({".": {}, "f:image": {}, "f:name": {}})
    );
    assert!(f.get("f:apiVersion").is_none() && f["f:metadata"].get("f:name").is_none());
}

#[test]
fn another_manager_conflicts_on_a_differing_value_unless_forced() {
    let live = apply(None, &deploy(2, "i:1"), &writer("kubectl"), false).unwrap();
    let other = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web"}, "spec": {"replicas": 5}});
    let err = apply(Some(&live), &other, &writer("other"), false).unwrap_err();
    let FieldManagerError::Conflicts(c) = &err else {
        panic!("{err:?}")
    };
    assert_eq!(c.len(), 1);
    assert_eq!(c[0].field(), ".spec.replicas");
    assert_eq!(
        err.to_string(),
        "Apply failed with 1 conflict: conflict with \"kubectl\": .spec.replicas"
    );
    // The same value is shared, not a conflict.
    let same = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web"}, "spec": {"replicas": 2}});
    let shared = apply(Some(&live), &same, &writer("other"), false).unwrap();
    assert_eq!(managers(&shared).len(), 2);

    let forced = apply(Some(&live), &other, &writer("other"), true).unwrap();
    assert_eq!(forced["spec"]["replicas"], 5);
    let entries = entries::read(&forced);
    let replicas: Path = vec![
        fieldset::Elem::Field("spec".into()),
        fieldset::Elem::Field("replicas".into()),
    ];
    let kubectl = entries.iter().find(|e| e.manager == "kubectl").unwrap();
    let other = entries.iter().find(|e| e.manager == "other").unwrap();
    assert!(!kubectl.fields.contains(&replicas));
    assert!(other.fields.contains(&replicas));
    // kubectl now conflicts in turn.
    let err = apply(Some(&forced), &deploy(2, "i:1"), &writer("kubectl"), false).unwrap_err();
    assert!(err.to_string().contains("conflict with \"other\""), "{err}");
}

#[test]
fn fields_dropped_from_the_config_are_removed_unless_someone_else_owns_them() {
    let mut first = deploy(2, "i:1");
    first["metadata"]["labels"]["tier"] = json!("front");
    first["spec"]["template"]["spec"]["containers"][0]["env"] =
        json!([{"name": "A", "value": "1"}]);
    let live = apply(None, &first, &writer("kubectl"), false).unwrap();
    let out = apply(Some(&live), &deploy(2, "i:2"), &writer("kubectl"), false).unwrap();
    assert!(out["metadata"]["labels"].get("tier").is_none(), "{out}");
    assert!(
        out["spec"]["template"]["spec"]["containers"][0]
            .get("env")
            .is_none(),
        "{out}"
    );
    assert_eq!(
        out["spec"]["template"]["spec"]["containers"][0]["image"],
        "i:2"
    );

    // A field another manager also set stays.
    let mut shared = live.clone();
    let mut label = json!({"metadata": {"labels": {"tier": "front", "other": "x"}}});
    label["apiVersion"] = json!("apps/v1");
    label["kind"] = json!("Deployment");
    shared = apply(Some(&shared), &label, &writer("labeler"), false).unwrap();
    let out = apply(Some(&shared), &deploy(2, "i:1"), &writer("kubectl"), false).unwrap();
    assert_eq!(out["metadata"]["labels"]["tier"], "front");
}

#[test]
fn updates_take_the_fields_they_change() {
    let live = apply(None, &deploy(2, "i:1"), &writer("kubectl"), false).unwrap();
    let mut new = live.clone();
    new["spec"]["replicas"] = json!(4);
    track_update(Some(&live), &mut new, &writer("kubectl-scale"));
    assert_eq!(
        managers(&new),
        [
            ("kubectl".into(), "Apply".into()),
            ("kubectl-scale".into(), "Update".into())
        ]
    );
    let scale = &new["metadata"]["managedFields"][1];
    assert_eq!(scale["fieldsV1"], json!({"f:spec": {"f:replicas": {}}}));
    assert!(new["metadata"]["managedFields"][0]["fieldsV1"]["f:spec"]
        .get("f:replicas")
        .is_none());
    // An apply of the old value now conflicts with the Update manager, named upstream's way.
    let err = apply(Some(&new), &deploy(2, "i:1"), &writer("kubectl"), false).unwrap_err();
    assert_eq!(
        err.to_string(),
        "Apply failed with 1 conflict: conflict with \"kubectl-scale\" using apps/v1: .spec.replicas"
    );
    // A write that changes nothing records nothing new.
    let mut same = new.clone();
    track_update(Some(&new), &mut same, &writer("someone"));
    assert_eq!(managers(&same).len(), 2);
    // An empty list clears managedFields.
    let mut cleared = new.clone();
    cleared["metadata"]["managedFields"] = json!([]);
    track_update(Some(&new), &mut cleared, &writer("x"));
    assert!(cleared["metadata"].get("managedFields").is_none());
}

#[test]
fn create_records_an_update_entry_and_apply_needs_type_meta() {
    let mut obj = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "c", "uid": "u"}, "data": {"k": "v"}});
    track_update(None, &mut obj, &writer("kubectl-create"));
    assert_eq!(
        obj["metadata"]["managedFields"][0]["fieldsV1"],
        json!({"f:data": {"f:k": {}}})
    );
    let bad = json!({"metadata": {"name": "c"}});
    assert!(matches!(
        apply(None, &bad, &writer("m"), false),
        Err(FieldManagerError::Invalid(_))
    ));
}

#[test]
fn user_agent_names_the_manager() {
    assert_eq!(
        manager_from_user_agent(Some("kubectl/v1.32.0 (linux/amd64) kubernetes/abc")),
        "kubectl"
    );
    assert_eq!(manager_from_user_agent(None), "unknown");
}

#[test]
fn kubectl_takes_over_from_client_side_apply_on_last_applied_fields() {
    let mut live = deploy(2, "i:1");
    let last = serde_json::to_string(&deploy(2, "i:1")).unwrap();
    live["metadata"]["annotations"] =
        json!({"kubectl.kubernetes.io/last-applied-configuration": last});
    let mut w = writer("kubectl-client-side-apply");
    w.now = "2026-11-29T21:00:00Z";
    track_update(None, &mut live, &w);
    // kubectl's apply of a changed image takes the field over instead of conflicting...
    let out = apply(Some(&live), &deploy(2, "i:2"), &writer("kubectl"), false).unwrap();
    assert_eq!(
        out["spec"]["template"]["spec"]["containers"][0]["image"],
        "i:2"
    );
    // ... which another manager may not.
    let err = apply(Some(&live), &deploy(2, "i:2"), &writer("other"), false).unwrap_err();
    assert!(
        err.to_string()
            .contains("conflict with \"kubectl-client-side-apply\" using apps/v1"),
        "{err}"
    );
}
