use super::*;
use serde_json::json;

fn schema() -> Value {
    json!({"type": "object", "properties": {"spec": {"type": "object", "required": ["cron"], "properties": {
        "cron": {"type": "string", "pattern": "^(\\d+|\\*)(/\\d+)?(\\s+(\\d+|\\*)(/\\d+)?){4}$"},
        "replicas": {"type": "integer", "minimum": 1, "maximum": 10},
        "mode": {"type": "string", "enum": ["fast", "slow"]},
        "name": {"type": "string", "minLength": 3, "maxLength": 5},
        "tags": {"type": "array", "maxItems": 2, "x-kubernetes-list-type": "set", "items": {"type": "string"}},
        "port": {"x-kubernetes-int-or-string": true},
        "when": {"type": "string", "format": "date-time"},
        "maybe": {"type": "string", "nullable": true},
        "ports": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                  "items": {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}}}}}}})
}

fn messages(obj: Value) -> Vec<String> {
    validate_object(&schema(), &obj, None)
        .iter()
        .map(|c| format!("{}: {}", c.field, c.message))
        .collect()
}

#[test]
fn a_valid_object_has_no_errors() {
    let obj = json!({"apiVersion": "x/v1", "kind": "X", "metadata": {"name": "a"},
        "spec": {"cron": "* * * * */5", "replicas": 3, "mode": "fast", "name": "abcd", "tags": ["a", "b"],
                 "port": "http", "when": "2024-01-01T00:00:00Z", "maybe": null, "ports": [{"name": "a"}, {"name": "b"}]}});
    assert_eq!(messages(obj), Vec::<String>::new());
}

#[test]
fn errors_read_like_upstream() {
    let obj = json!({"spec": {"cron": "* * * *", "replicas": 15}});
    assert_eq!(
        messages(obj),
        vec![
            "spec.cron: Invalid value: \"* * * *\": spec.cron in body should match '^(\\d+|\\*)(/\\d+)?(\\s+(\\d+|\\*)(/\\d+)?){4}$'",
            "spec.replicas: Invalid value: 15: spec.replicas in body should be less than or equal to 10",
        ]
    );
    assert_eq!(
        messages(json!({"spec": {"cron": "* * * * *", "replicas": "three"}})),
        vec!["spec.replicas: Invalid value: \"string\": spec.replicas in body must be of type integer: \"string\""]
    );
    assert_eq!(
        messages(json!({"spec": {}})),
        vec!["spec.cron: Required value"]
    );
    assert_eq!(
        messages(json!({"spec": {"cron": "* * * * *", "mode": "medium"}})),
        vec!["spec.mode: Unsupported value: \"medium\": supported values: \"fast\", \"slow\""]
    );
    assert_eq!(
        messages(json!({"spec": {"cron": "* * * * *", "name": "ab", "tags": ["a", "a", "b"]}})),
        vec![
            "spec.name: Invalid value: \"ab\": spec.name in body should be at least 3 chars long",
            "spec.tags: Too many: 3: must have at most 2 items",
            "spec.tags[1]: Duplicate value: \"a\"",
        ]
    );
    assert_eq!(
        messages(json!({"spec": {"cron": "* * * * *", "port": 1.5, "when": "soon"}})),
        vec![
            "spec.port: Invalid value: \"number\": spec.port in body must be of type integer,string: \"number\"",
            "spec.when: Invalid value: \"soon\": spec.when in body must be of type date-time: \"soon\"",
        ]
    );
    assert_eq!(
        messages(
            json!({"spec": {"cron": "* * * * *", "ports": [{"name": "a"}, {"name": "a"}, {}]}})
        ),
        vec![
            "spec.ports[1]: Duplicate value: map[string]interface {}{\"name\":\"a\"}",
            "spec.ports[2].name: Required value",
        ]
    );
}

#[test]
fn cel_rules_run_where_declared_with_old_self() {
    let schema = json!({"type": "object", "properties": {"spec": {"type": "object",
        "x-kubernetes-validations": [
            {"rule": "self.replicas <= self.maxReplicas", "message": "replicas must not exceed maxReplicas"},
            {"rule": "self.mode == oldSelf.mode", "message": "mode is immutable"}],
        "properties": {"replicas": {"type": "integer"}, "maxReplicas": {"type": "integer"}, "mode": {"type": "string"}}}}});
    let new = json!({"spec": {"replicas": 5, "maxReplicas": 3, "mode": "b"}});
    let causes = validate_object(&schema, &new, None);
    assert_eq!(
        causes.len(),
        1,
        "{causes:?}: the transition rule waits for an update"
    );
    assert_eq!(causes[0].field, "spec");
    assert!(
        causes[0]
            .message
            .contains("replicas must not exceed maxReplicas"),
        "{causes:?}"
    );
    let old = json!({"spec": {"replicas": 1, "maxReplicas": 3, "mode": "a"}});
    let causes = validate_object(
        &schema,
        &json!({"spec": {"replicas": 1, "maxReplicas": 3, "mode": "b"}}),
        Some(&old),
    );
    assert_eq!(causes.len(), 1, "{causes:?}");
    assert!(causes[0].message.contains("mode is immutable"));
}
