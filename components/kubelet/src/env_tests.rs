//! Env resolution on values, with the in-memory objects.

use super::*;
use crate::pod_objects::FakeObjects;

fn pod(container: serde_json::Value) -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": "web", "namespace": "apps", "uid": "u1",
                     "labels": {"app": "web"}, "annotations": {"team": "kiln"}},
        "spec": {"serviceAccountName": "builder", "containers": [container]}
    }))
    .unwrap()
}

fn ctx() -> FieldContext<'static> {
    FieldContext {
        node_name: "host1",
        node_ip: "10.250.0.11",
        pod_ip: Some("10.244.1.7"),
        allocatable: None,
    }
}

fn objects() -> FakeObjects {
    let o = FakeObjects::default();
    o.put_config_map(
        "apps",
        "settings",
        &[("color", "blue"), ("size", "L"), ("bad key", "x")],
    );
    o.put_secret(
        "apps",
        "creds",
        &[("password", "s3cret"), ("user", "admin")],
    );
    o
}

async fn resolve(p: &Pod, o: &FakeObjects) -> Result<Vec<(String, String)>, EnvError> {
    let c = &p.spec.as_ref().unwrap().containers[0];
    let fetched = fetch("apps", c, Some(o)).await?;
    build(p, c, &ctx(), &fetched)
}

fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
    v.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[tokio::test]
async fn env_from_refs_fields_and_literals_in_upstream_order() {
    let p = pod(serde_json::json!({
        "name": "main", "image": "img",
        "envFrom": [
            {"configMapRef": {"name": "settings"}, "prefix": "CFG_"},
            {"secretRef": {"name": "creds"}}
        ],
        "env": [
            {"name": "COLOR", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "color"}}},
            {"name": "PASS", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "password"}}},
            {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            {"name": "UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
            {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "HOST", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}},
            {"name": "SA", "valueFrom": {"fieldRef": {"fieldPath": "spec.serviceAccountName"}}},
            {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
            {"name": "GREETING", "value": "$(POD) on $(NODE) costs $$5, $(UNSET) stays"},
            {"name": "user", "value": "overridden"}
        ]
    }));
    let env = resolve(&p, &objects()).await.unwrap();
    assert_eq!(
        env,
        pairs(&[
            ("CFG_color", "blue"),
            ("CFG_size", "L"),
            ("password", "s3cret"),
            ("COLOR", "blue"),
            ("PASS", "s3cret"),
            ("POD", "web"),
            ("NS", "apps"),
            ("UID", "u1"),
            ("NODE", "host1"),
            ("IP", "10.244.1.7"),
            ("HOST", "10.250.0.11"),
            ("SA", "builder"),
            ("APP", "web"),
            ("GREETING", "web on host1 costs $5, $(UNSET) stays"),
            ("user", "overridden"),
        ]),
        "the invalid name 'CFG_bad key' is skipped"
    );
}

#[tokio::test]
async fn missing_objects_and_keys_are_upstream_errors_unless_optional() {
    let o = objects();
    let one = |env: serde_json::Value| {
        pod(serde_json::json!({"name": "main", "image": "img", "env": [env]}))
    };
    let err = resolve(
        &one(serde_json::json!({"name": "X", "valueFrom": {"configMapKeyRef": {"name": "nope", "key": "k"}}})),
        &o,
    )
    .await
    .unwrap_err();
    assert_eq!(err.to_string(), "configmap \"nope\" not found");
    let err = resolve(
        &one(serde_json::json!({"name": "X", "valueFrom": {"secretKeyRef": {"name": "nope", "key": "k"}}})),
        &o,
    )
    .await
    .unwrap_err();
    assert_eq!(err.to_string(), "secret \"nope\" not found");
    let err = resolve(
        &one(serde_json::json!({"name": "X", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}})),
        &o,
    )
    .await
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "couldn't find key token in Secret apps/creds"
    );
    let err = resolve(
        &one(serde_json::json!({"name": "X", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "k"}}})),
        &o,
    )
    .await
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "couldn't find key k in ConfigMap apps/settings"
    );
    // optional: the variable is left out.
    let p = pod(serde_json::json!({"name": "main", "image": "img",
    "envFrom": [{"secretRef": {"name": "nope", "optional": true}}],
    "env": [
        {"name": "A", "valueFrom": {"secretKeyRef": {"name": "nope", "key": "k", "optional": true}}},
        {"name": "B", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "k", "optional": true}}},
        {"name": "C", "value": "c"}
    ]}));
    assert_eq!(resolve(&p, &o).await.unwrap(), pairs(&[("C", "c")]));
    let p = pod(serde_json::json!({"name": "main", "image": "img",
        "envFrom": [{"configMapRef": {"name": "nope"}}]}));
    assert_eq!(
        resolve(&p, &o).await.unwrap_err().to_string(),
        "configmap \"nope\" not found"
    );
}

#[tokio::test]
async fn literals_need_no_api_and_unsupported_sources_say_so() {
    let p = pod(
        serde_json::json!({"name": "main", "image": "img", "env": [{"name": "A", "value": "1"}]}),
    );
    let c = &p.spec.as_ref().unwrap().containers[0];
    let fetched = fetch("apps", c, None).await.unwrap();
    assert_eq!(
        build(&p, c, &ctx(), &fetched).unwrap(),
        pairs(&[("A", "1")])
    );
    let p = pod(serde_json::json!({"name": "main", "image": "img",
        "env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "user"}}}]}));
    let c = &p.spec.as_ref().unwrap().containers[0];
    let err = fetch("apps", c, None).await.unwrap_err();
    assert!(err.to_string().contains("no API client"), "{err}");
    let p = pod(serde_json::json!({"name": "main", "image": "img",
        "env": [{"name": "X", "valueFrom": {"fieldRef": {"fieldPath": "status.phase"}}}]}));
    let c = &p.spec.as_ref().unwrap().containers[0];
    let err = build(&p, c, &ctx(), &Fetched::default()).unwrap_err();
    assert!(err.to_string().contains("status.phase"), "{err}");
}

#[test]
fn expansion_follows_upstream_rules() {
    let defined = pairs(&[("A", "x"), ("B", "y")]);
    assert_eq!(expand("$(A)-$(B)", &defined), "x-y");
    assert_eq!(expand("$$(A)", &defined), "$(A)");
    assert_eq!(expand("$(C) $ $(A", &defined), "$(C) $ $(A");
}

#[tokio::test]
async fn resource_field_refs_read_limits_requests_and_the_node_allocatable() {
    let p = pod(serde_json::json!({
        "name": "main", "image": "img",
        "resources": {"limits": {"memory": "128Mi"}, "requests": {"cpu": "250m"}},
        "env": [
            {"name": "MEM_MI", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}}},
            {"name": "CPU_M", "valueFrom": {"resourceFieldRef": {"resource": "requests.cpu", "divisor": "1m"}}},
            {"name": "CPU_LIMIT", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}}
        ]
    }));
    let c = &p.spec.as_ref().unwrap().containers[0];
    let node = NodeAllocatable {
        cpu: "3".into(),
        memory: "2Gi".into(),
    };
    let ctx = FieldContext {
        allocatable: Some(&node),
        ..ctx()
    };
    let env = build(&p, c, &ctx, &Fetched::default()).unwrap();
    assert_eq!(
        env,
        pairs(&[("MEM_MI", "128"), ("CPU_M", "250"), ("CPU_LIMIT", "3")])
    );
    // Without a known allocatable, a missing limit is upstream-style config error, not a silent 0.
    let err = build(&p, c, &self::ctx(), &Fetched::default()).unwrap_err();
    assert!(err.to_string().contains("CPU_LIMIT"), "{err}");
}

fn with_services(vars: &[(&str, &str)]) -> Fetched {
    Fetched {
        service_env: pairs(vars),
        ..Default::default()
    }
}

#[test]
fn service_variables_come_after_the_containers_own_which_override_them() {
    let p = pod(serde_json::json!({
        "name": "main", "image": "img",
        "env": [
            {"name": "KUBERNETES_SERVICE_PORT", "value": "6443"},
            {"name": "API", "value": "https://$(KUBERNETES_SERVICE_HOST):$(KUBERNETES_SERVICE_PORT)"},
            {"name": "WEB", "value": "$(WEB_SERVICE_HOST) $(NOPE)"}
        ]
    }));
    let c = &p.spec.as_ref().unwrap().containers[0];
    let fetched = with_services(&[
        ("KUBERNETES_SERVICE_HOST", "10.96.0.1"),
        ("KUBERNETES_SERVICE_PORT", "443"),
        ("WEB_SERVICE_HOST", "10.96.3.4"),
    ]);
    assert_eq!(
        build(&p, c, &ctx(), &fetched).unwrap(),
        pairs(&[
            ("KUBERNETES_SERVICE_PORT", "6443"),
            // The container's own value of a name wins in expansion too; others come from Services.
            ("API", "https://10.96.0.1:6443"),
            ("WEB", "10.96.3.4 $(NOPE)"),
            ("KUBERNETES_SERVICE_HOST", "10.96.0.1"),
            ("WEB_SERVICE_HOST", "10.96.3.4"),
        ])
    );
}

#[tokio::test]
async fn env_from_overrides_service_variables_too() {
    let o = FakeObjects::default();
    o.put_config_map("apps", "cm", &[("WEB_SERVICE_HOST", "override")]);
    let p = pod(serde_json::json!({
        "name": "main", "image": "img", "envFrom": [{"configMapRef": {"name": "cm"}}]
    }));
    let c = &p.spec.as_ref().unwrap().containers[0];
    let mut fetched = fetch("apps", c, Some(&o)).await.unwrap();
    fetched.service_env = pairs(&[
        ("WEB_SERVICE_HOST", "10.96.3.4"),
        ("WEB_SERVICE_PORT", "80"),
    ]);
    assert_eq!(
        build(&p, c, &ctx(), &fetched).unwrap(),
        pairs(&[("WEB_SERVICE_HOST", "override"), ("WEB_SERVICE_PORT", "80")])
    );
}
