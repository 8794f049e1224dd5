use super::*;

fn sts() -> Value {
    json!({"metadata": {"name": "web", "namespace": "default"},
        "spec": {"serviceName": "nginx", "selector": {"matchLabels": {"app": "w"}},
            "template": {"metadata": {"labels": {"app": "w"}},
                "spec": {"containers": [{"name": "w", "image": "nginx:1.0"}]}}}})
}

#[test]
fn statefulset_defaults_match_upstream() {
    let mut s = sts();
    statefulset_defaults(&mut s);
    let spec = &s["spec"];
    assert_eq!(spec["replicas"], 1);
    assert_eq!(spec["revisionHistoryLimit"], 10);
    assert_eq!(spec["podManagementPolicy"], "OrderedReady");
    assert_eq!(
        spec["updateStrategy"],
        json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0, "maxUnavailable": 1}})
    );
    assert_eq!(
        spec["persistentVolumeClaimRetentionPolicy"],
        json!({"whenDeleted": "Retain", "whenScaled": "Retain"})
    );
    assert!(spec.get("minReadySeconds").is_none());
    assert_eq!(spec["template"]["spec"]["restartPolicy"], "Always");
    assert_eq!(
        spec["template"]["spec"]["containers"][0]["imagePullPolicy"],
        "IfNotPresent"
    );
    assert!(statefulset_validation(&s).is_empty());
}

#[test]
fn on_delete_gets_no_rolling_update() {
    let mut s = sts();
    s["spec"]["updateStrategy"] = json!({"type": "OnDelete"});
    statefulset_defaults(&mut s);
    assert_eq!(s["spec"]["updateStrategy"], json!({"type": "OnDelete"}));
    s["spec"]["updateStrategy"]["rollingUpdate"] = json!({"partition": 1});
    let causes = statefulset_validation(&s);
    assert_eq!(causes[0].field, "spec.updateStrategy.rollingUpdate");
    assert!(causes[0]
        .message
        .ends_with("only allowed for updateStrategy 'RollingUpdate'"));
}

#[test]
fn validation_names_upstream_fields_and_messages() {
    let mut s = sts();
    statefulset_defaults(&mut s);
    s["spec"]["replicas"] = json!(-1);
    s["spec"]["ordinals"] = json!({"start": -2});
    s["spec"]["podManagementPolicy"] = json!("Burst");
    s["spec"]["persistentVolumeClaimRetentionPolicy"]["whenScaled"] = json!("Keep");
    s["spec"]["template"]["spec"]["restartPolicy"] = json!("Never");
    s["spec"]["template"]["spec"]["activeDeadlineSeconds"] = json!(5);
    s["spec"]["template"]["metadata"]["labels"] = json!({"app": "x"});
    let causes = statefulset_validation(&s);
    let got: Vec<(&str, &str)> = causes
        .iter()
        .map(|c| (c.field.as_str(), c.message.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            (
                "spec.podManagementPolicy",
                "Invalid value: \"Burst\": must be 'OrderedReady' or 'Parallel'"
            ),
            (
                "spec.persistentVolumeClaimRetentionPolicy.whenScaled",
                "Unsupported value: \"Keep\": supported values: \"Retain\", \"Delete\""
            ),
            (
                "spec.replicas",
                "Invalid value: -1: must be greater than or equal to 0"
            ),
            (
                "spec.ordinals.start",
                "Invalid value: -2: must be greater than or equal to 0"
            ),
            (
                "spec.template.metadata.labels",
                "Invalid value: map[string]string{\"app\":\"x\"}: `selector` does not match template `labels`"
            ),
            (
                "spec.template.spec.restartPolicy",
                "Unsupported value: \"Never\": supported values: \"Always\""
            ),
            (
                "spec.template.spec.activeDeadlineSeconds",
                "Forbidden: activeDeadlineSeconds in StatefulSet is not Supported"
            ),
        ]
    );
    let mut no_selector = sts();
    statefulset_defaults(&mut no_selector);
    no_selector["spec"]["selector"] = json!({});
    assert!(statefulset_validation(&no_selector)[0]
        .message
        .ends_with("empty selector is invalid for statefulset"));
}

#[test]
fn updates_may_change_only_the_mutable_fields() {
    let mut old = sts();
    statefulset_defaults(&mut old);
    let mut new = old.clone();
    new["spec"]["replicas"] = json!(5);
    new["spec"]["template"]["spec"]["containers"][0]["image"] = json!("nginx:2");
    new["spec"]["updateStrategy"]["rollingUpdate"]["partition"] = json!(2);
    new["spec"]["minReadySeconds"] = json!(3);
    new["spec"]["ordinals"] = json!({"start": 1});
    assert!(statefulset_update_validation(&old, &new).is_empty());
    new["spec"]["serviceName"] = json!("other");
    let causes = statefulset_update_validation(&old, &new);
    assert_eq!(causes.len(), 1);
    assert_eq!(causes[0].field, "spec");
    assert_eq!(causes[0].message, format!("Forbidden: {FROZEN_SPEC}"));
    let mut hist = old.clone();
    hist["spec"]["revisionHistoryLimit"] = json!(2);
    assert_eq!(statefulset_update_validation(&old, &hist).len(), 1);
}

#[test]
fn status_counts_are_bounded() {
    let mut s = sts();
    statefulset_defaults(&mut s);
    s["status"] = json!({"replicas": 1, "readyReplicas": 2, "availableReplicas": 1});
    let causes = statefulset_validation(&s);
    assert_eq!(causes.len(), 1);
    assert_eq!(causes[0].field, "status.readyReplicas");
}

#[test]
fn columns_render_like_kubectl() {
    let mut s = sts();
    s["spec"]["replicas"] = json!(3);
    s["status"] = json!({"readyReplicas": 2});
    assert_eq!(statefulset_ready(&s, 0), "2/3");
    let names: Vec<&str> = STATEFULSETS.table.iter().map(|c| c.name).collect();
    assert_eq!(names, ["Name", "Ready", "Age", "Containers", "Images"]);
    let cr = json!({"metadata": {"name": "web-6d4f", "ownerReferences": [
        {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web", "uid": "u", "controller": true}]},
        "revision": 3, "data": {}});
    assert_eq!(revision_controller(&cr, 0), "statefulset.apps/web");
    assert_eq!(revision_number(&cr, 0), 3);
    assert_eq!(revision_controller(&json!({"metadata": {}}), 0), "<none>");
    let names: Vec<&str> = CONTROLLERREVISIONS.table.iter().map(|c| c.name).collect();
    assert_eq!(names, ["Name", "Controller", "Revision", "Age"]);
}

#[test]
fn controller_revision_data_is_required_and_immutable() {
    let cr = json!({"metadata": {"name": "r"}, "revision": 1, "data": {"a": 1}});
    assert!(controllerrevision_validation(&cr).is_empty());
    assert_eq!(
        controllerrevision_validation(&json!({"revision": -1}))
            .iter()
            .map(|c| c.field.as_str())
            .collect::<Vec<_>>(),
        ["data", "revision"]
    );
    let mut renumbered = cr.clone();
    renumbered["revision"] = json!(4);
    assert!(controllerrevision_update_validation(&cr, &renumbered).is_empty());
    let mut changed = cr.clone();
    changed["data"] = json!({"a": 2});
    assert_eq!(
        controllerrevision_update_validation(&cr, &changed)[0].field,
        "data"
    );
}

#[test]
fn max_unavailable_is_a_positive_int_or_percent_up_to_100() {
    let field = "spec.updateStrategy.rollingUpdate.maxUnavailable";
    let check = |value: Value| -> Vec<String> {
        let mut s = sts();
        s["spec"]["updateStrategy"] =
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": value}});
        statefulset_defaults(&mut s);
        statefulset_validation(&s)
            .into_iter()
            .map(|c| {
                assert_eq!(c.field, field);
                c.message
            })
            .collect()
    };
    assert!(check(json!(2)).is_empty());
    assert!(check(json!("50%")).is_empty());
    assert_eq!(
        check(json!(0)),
        ["Invalid value: intstr.IntOrString{Type:0, IntVal:0, StrVal:\"\"}: cannot be 0"]
    );
    assert_eq!(
        check(json!("0%")),
        ["Invalid value: intstr.IntOrString{Type:1, IntVal:0, StrVal:\"0%\"}: cannot be 0"]
    );
    assert_eq!(
        check(json!(-1)),
        ["Invalid value: -1: must be greater than or equal to 0"]
    );
    assert_eq!(
        check(json!("150%")),
        ["Invalid value: intstr.IntOrString{Type:1, IntVal:0, StrVal:\"150%\"}: must not be greater than 100%"]
    );
    let bad = check(json!("abc"));
    assert_eq!(bad.len(), 2, "{bad:?}");
    assert!(bad[0].contains("a valid percent string must be"));
    assert!(bad[1].ends_with("cannot be 0"));
}
