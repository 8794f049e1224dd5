//! Table columns of a custom resource: Name, then `additionalPrinterColumns` (each a JSONPath into
//! the object), or Name and Age when the CRD names none — what kubectl shows on upstream.

use jsonpath_rust::JsonPath;
use serde_json::{json, Value};

use crate::custom_resource::{CustomResource, PrinterColumn};

/// `columnDefinitions[]` for the CR's Table.
pub fn definitions(cr: &CustomResource) -> Vec<Value> {
    let mut out = vec![json!({
        "name": "Name", "type": "string", "format": "name",
        "description": "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names",
        "priority": 0,
    })];
    for c in columns(cr) {
        out.push(json!({
            "name": c.name, "type": c.type_, "format": c.format,
            "description": c.description, "priority": c.priority,
        }));
    }
    out
}

/// One row's cells, in `definitions` order.
pub fn cells(cr: &CustomResource, obj: &Value, now: i64) -> Vec<Value> {
    let mut out = vec![obj["metadata"]["name"].clone()];
    for c in columns(cr) {
        out.push(cell(&c, obj, now));
    }
    out
}

fn columns(cr: &CustomResource) -> Vec<PrinterColumn> {
    if !cr.printer_columns.is_empty() {
        return cr.printer_columns.clone();
    }
    vec![PrinterColumn {
        name: "Age".into(),
        type_: "date".into(),
        format: String::new(),
        description: "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata".into(),
        priority: 0,
        json_path: ".metadata.creationTimestamp".into(),
    }]
}

/// The values a JSONPath selects (`.spec.replicas`, `.status.conditions[?(@.type=="Ready")].status`).
pub fn select<'a>(obj: &'a Value, path: &str) -> Vec<&'a Value> {
    let query = format!("${}", path.trim());
    obj.query(&query).unwrap_or_default()
}

/// Upstream prints the first match; a `date` column is a timestamp kubectl renders as an age, and
/// a missing value is an empty cell (null).
fn cell(c: &PrinterColumn, obj: &Value, _now: i64) -> Value {
    let Some(v) = select(obj, &c.json_path).into_iter().next().cloned() else {
        return Value::Null;
    };
    match (c.type_.as_str(), &v) {
        ("integer", Value::Number(n)) => json!(n
            .as_i64()
            .unwrap_or_else(|| n.as_f64().unwrap_or(0.0) as i64)),
        ("string", Value::String(_)) | ("date", Value::String(_)) => v,
        ("string", other) => json!(other.to_string()),
        _ => v,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cr(columns: Vec<PrinterColumn>) -> CustomResource {
        CustomResource {
            crd_name: "widgets.example.com".into(),
            schema: None,
            storage_version: "v1".into(),
            printer_columns: columns,
            scale: None,
            deprecation: None,
            terminating: false,
            has_defaults: false,
            defaults_since: 0,
            conversion_webhook: None,
        }
    }

    #[test]
    fn printer_columns_follow_json_paths() {
        let col = |name: &str, ty: &str, path: &str| PrinterColumn {
            name: name.into(),
            type_: ty.into(),
            format: String::new(),
            description: String::new(),
            priority: 0,
            json_path: path.into(),
        };
        let c = cr(vec![
            col("Replicas", "integer", ".spec.replicas"),
            col(
                "Ready",
                "string",
                ".status.conditions[?(@.type==\"Ready\")].status",
            ),
            col("Missing", "string", ".spec.nothing"),
        ]);
        let obj = json!({"metadata": {"name": "w"}, "spec": {"replicas": 3},
                         "status": {"conditions": [{"type": "Synced", "status": "False"},
                                                   {"type": "Ready", "status": "True"}]}});
        assert_eq!(
            cells(&c, &obj, 0),
            vec![json!("w"), json!(3), json!("True"), Value::Null]
        );
        assert_eq!(definitions(&c).len(), 4);
    }

    #[test]
    fn without_printer_columns_the_table_is_name_and_age() {
        let c = cr(vec![]);
        let obj = json!({"metadata": {"name": "w", "creationTimestamp": "2024-01-01T00:00:00Z"}});
        assert_eq!(
            cells(&c, &obj, 0),
            vec![json!("w"), json!("2024-01-01T00:00:00Z")]
        );
        assert_eq!(definitions(&c)[1]["name"], "Age");
    }
}
