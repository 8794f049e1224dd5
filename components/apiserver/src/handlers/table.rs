//! `Accept: application/json;as=Table;v=v1;g=meta.k8s.io`: server-side printing, so kubectl shows
//! each kind's columns (priority 1 columns only with `-o wide`).

use std::collections::HashMap;

use axum::http::HeaderMap;
use serde_json::{json, Value};

use crate::registry::ResourceSpec;

pub fn wants_table(headers: &HeaderMap) -> bool {
    headers
        .get_all(axum::http::header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .next()
        .is_some_and(|first| first.contains("as=Table") && first.contains("g=meta.k8s.io"))
}

/// `includeObject`: None, Metadata (default) or Object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Include {
    None,
    Metadata,
    Object,
}

impl Include {
    pub fn from_query(query: &HashMap<String, String>) -> Self {
        match query.get("includeObject").map(String::as_str) {
            Some("None") => Include::None,
            Some("Object") => Include::Object,
            _ => Include::Metadata,
        }
    }
}

fn now() -> i64 {
    time::OffsetDateTime::now_utc().unix_timestamp()
}

fn row(spec: &ResourceSpec, obj: &Value, include: Include, now: i64) -> Value {
    let cells: Vec<Value> = spec.table.iter().map(|c| (c.cell)(obj, now)).collect();
    let object = match include {
        Include::None => Value::Null,
        Include::Object => obj.clone(),
        Include::Metadata => json!({
            "kind": "PartialObjectMetadata",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": obj["metadata"],
        }),
    };
    if object.is_null() {
        json!({ "cells": cells })
    } else {
        json!({ "cells": cells, "object": object })
    }
}

pub fn table(
    spec: &ResourceSpec,
    objects: &[Value],
    resource_version: Option<&str>,
    include: Include,
) -> Value {
    let now = now();
    let columns: Vec<Value> = spec
        .table
        .iter()
        .map(|c| {
            json!({
                "name": c.name,
                "type": c.type_,
                "format": c.format,
                "description": c.description,
                "priority": c.priority,
            })
        })
        .collect();
    let mut metadata = json!({});
    if let Some(rv) = resource_version {
        metadata["resourceVersion"] = json!(rv);
    }
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": metadata,
        "columnDefinitions": columns,
        "rows": objects.iter().map(|o| row(spec, o, include, now)).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::resources::PODS;

    #[test]
    fn kubectl_accept_header_selects_table() {
        let mut h = HeaderMap::new();
        h.insert(
            "accept",
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
                .parse()
                .unwrap(),
        );
        assert!(wants_table(&h));
        h.insert("accept", "application/json".parse().unwrap());
        assert!(!wants_table(&h));
    }

    #[test]
    fn pod_table_has_kubectl_columns() {
        let pod = json!({"metadata": {"name": "p", "namespace": "default"},
                         "spec": {"containers": [{"name": "c"}]}, "status": {"phase": "Pending"}});
        let t = table(&PODS, &[pod], Some("7"), Include::Metadata);
        let names: Vec<&str> = t["columnDefinitions"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["priority"] == 0)
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["Name", "Ready", "Status", "Restarts", "Age"]);
        assert_eq!(t["rows"][0]["cells"][0], "p");
        assert_eq!(t["rows"][0]["object"]["metadata"]["namespace"], "default");
    }
}
