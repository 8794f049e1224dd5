//! `metadata.managedFields`: one entry per (manager, operation, subresource), read from and written
//! back to the object, ordered as upstream orders them (Apply before Update, then by time, manager).

use serde_json::{json, Value};

use super::fieldset::{from_fields_v1, to_fields_v1, FieldSet};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Operation {
    Apply,
    Update,
}

impl Operation {
    fn as_str(self) -> &'static str {
        match self {
            Operation::Apply => "Apply",
            Operation::Update => "Update",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub manager: String,
    pub operation: Operation,
    pub subresource: Option<String>,
    pub api_version: String,
    pub time: Option<String>,
    pub fields: FieldSet,
}

impl Entry {
    pub fn is(&self, manager: &str, operation: Operation, subresource: Option<&str>) -> bool {
        self.manager == manager
            && self.operation == operation
            && self.subresource.as_deref() == subresource
    }

    /// How upstream names this manager in a conflict: `"kubectl"`, or for an Update
    /// `"kube-controller-manager" using apps/v1` (with `with subresource "status"` when it has one).
    pub fn describe(&self) -> String {
        let mut s = format!("{:?}", self.manager);
        if let Some(sub) = &self.subresource {
            s.push_str(&format!(" with subresource {sub:?}"));
        }
        if self.operation == Operation::Update {
            s.push_str(&format!(" using {}", self.api_version));
        }
        s
    }
}

/// The entries of an object (unreadable ones are dropped).
pub fn read(obj: &Value) -> Vec<Entry> {
    let Some(list) = obj["metadata"]["managedFields"].as_array() else {
        return Vec::new();
    };
    list.iter()
        .filter_map(|e| {
            let operation = match e["operation"].as_str()? {
                "Apply" => Operation::Apply,
                "Update" => Operation::Update,
                _ => return None,
            };
            Some(Entry {
                manager: e["manager"].as_str().unwrap_or_default().to_string(),
                operation,
                subresource: e["subresource"]
                    .as_str()
                    .filter(|s| !s.is_empty())
                    .map(str::to_string),
                api_version: e["apiVersion"].as_str().unwrap_or_default().to_string(),
                time: e["time"].as_str().map(str::to_string),
                fields: from_fields_v1(&e["fieldsV1"]),
            })
        })
        .collect()
}

/// Writes the entries that own something, in upstream's order; none = no `managedFields`.
pub fn write(obj: &mut Value, mut entries: Vec<Entry>) {
    entries.retain(|e| !e.fields.is_empty());
    entries.sort_by(|a, b| {
        (
            a.operation,
            &a.time,
            &a.manager,
            &a.api_version,
            &a.subresource,
        )
            .cmp(&(
                b.operation,
                &b.time,
                &b.manager,
                &b.api_version,
                &b.subresource,
            ))
    });
    let Some(meta) = obj["metadata"].as_object_mut() else {
        return;
    };
    if entries.is_empty() {
        meta.remove("managedFields");
        return;
    }
    let list: Vec<Value> = entries
        .iter()
        .map(|e| {
            let mut v = json!({
                "manager": e.manager,
                "operation": e.operation.as_str(),
                "apiVersion": e.api_version,
                "fieldsType": "FieldsV1",
                "fieldsV1": to_fields_v1(&e.fields),
            });
            if let Some(t) = &e.time {
                v["time"] = json!(t);
            }
            if let Some(s) = &e.subresource {
                v["subresource"] = json!(s);
            }
            v
        })
        .collect();
    meta.insert("managedFields".into(), Value::Array(list));
}
