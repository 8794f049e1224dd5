//! `Accept: application/json;as=Table;v=v1;g=meta.k8s.io`: server-side printing, so kubectl shows
//! each kind's columns (priority 1 columns only with `-o wide`).

use std::collections::HashMap;

use axum::http::HeaderMap;
use serde_json::{json, Value};

use super::stored::Stored;
use crate::registry::ResourceSpec;
use crate::status::ApiError;
use crate::storage::Versioned;

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

fn cells(spec: &ResourceSpec, obj: &Value, now: i64) -> Vec<Value> {
    if let Some(cr) = spec.custom {
        return crate::crd::columns::cells(cr, obj, now);
    }
    spec.table.iter().map(|c| (c.cell)(obj, now)).collect()
}

fn row(spec: &ResourceSpec, obj: &Value, include: Include, now: i64) -> Value {
    let cells = cells(spec, obj, now);
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
    let mut metadata = json!({});
    if let Some(rv) = resource_version {
        metadata["resourceVersion"] = json!(rv);
    }
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": metadata,
        "columnDefinitions": columns(spec),
        "rows": objects.iter().map(|o| row(spec, o, include, now)).collect::<Vec<_>>(),
    })
}

fn columns(spec: &ResourceSpec) -> Value {
    if let Some(cr) = spec.custom {
        return Value::Array(crate::crd::columns::definitions(cr));
    }
    spec.table
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
        .collect()
}

/// The Table of stored objects, written straight to JSON: what [`table`] gives for the decoded
/// objects (byte for byte), with each row's `object` copied from the stored bytes rather than
/// decoded and serialised again. `metadata` is the list's (resourceVersion, continue).
pub fn write_table(
    out: &mut Vec<u8>,
    spec: &ResourceSpec,
    items: &[Versioned],
    metadata: &Value,
    include: Include,
) -> Result<(), ApiError> {
    let now = now();
    // Keys in sorted order, as a serialised `Value` has them.
    out.extend_from_slice(br#"{"apiVersion":"meta.k8s.io/v1","columnDefinitions":"#);
    write_value(out, &columns(spec));
    out.extend_from_slice(br#","kind":"Table","metadata":"#);
    write_value(out, metadata);
    out.extend_from_slice(br#","rows":["#);
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        let object = Stored::parse(&item.value, item.mod_revision)?;
        out.extend_from_slice(br#"{"cells":"#);
        write_value(out, &Value::Array(cells(spec, &object.view()?, now)));
        match include {
            Include::None => {}
            Include::Metadata => {
                out.extend_from_slice(
                    br#","object":{"apiVersion":"meta.k8s.io/v1","kind":"PartialObjectMetadata","metadata":"#,
                );
                object.write_metadata(out)?;
                out.push(b'}');
            }
            Include::Object => {
                out.extend_from_slice(br#","object":"#);
                object.write(out)?;
            }
        }
        out.push(b'}');
    }
    out.extend_from_slice(b"]}");
    Ok(())
}

fn write_value(out: &mut Vec<u8>, value: &Value) {
    // Serialising a Value into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, value);
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
