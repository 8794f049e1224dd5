//! Serving one custom resource in every version its CRD serves. Objects are stored as written;
//! with the `None` conversion strategy versions differ only in apiVersion, so a read in another
//! version rewrites that field (upstream's nopConverter). Stored bytes that already name the
//! wanted version (compact JSON starts with its sorted first key, apiVersion) are passed through
//! untouched, so single-version CRDs pay nothing. Schema defaults apply on reads as well (upstream
//! defaults when decoding from storage), for CRDs that declare any. Built-in kinds served in
//! several versions (`ResourceSpec.convert`) go through the same paths with their own converter.

use serde_json::{json, Value};

use crate::registry::ResourceSpec;
use crate::status::ApiError;
use crate::storage::{Store, Versioned};

fn wanted(spec: &ResourceSpec) -> Option<String> {
    (spec.custom.is_some() || spec.convert.is_some()).then(|| spec.api_version())
}

/// Sets apiVersion to the served version (and applies schema defaults). CRDs with a conversion
/// webhook are converted by [`served`] instead.
pub fn to_served(spec: &ResourceSpec, obj: &mut Value) {
    if let Some(convert) = spec.convert {
        let api_version = spec.api_version();
        if obj.is_object() && obj["apiVersion"].as_str() != Some(api_version.as_str()) {
            convert(obj, spec.version);
            obj["apiVersion"] = json!(api_version);
        }
        return;
    }
    let Some(cr) = spec.custom else { return };
    if cr.conversion_webhook.is_some() {
        return;
    }
    let api_version = spec.api_version();
    if obj["apiVersion"].as_str() != Some(api_version.as_str()) && obj.is_object() {
        obj["apiVersion"] = json!(api_version);
    }
    if cr.has_defaults {
        cr.apply_defaults(obj);
    }
}

/// The stored bytes rewritten for the served version; `None` when they are right as they are.
/// `mod_revision`: the store revision the bytes were written at; objects written since the CRD's
/// current schema was first served were defaulted on write and need no read-time defaulting.
pub fn stored_to_served(spec: &ResourceSpec, bytes: &[u8], mod_revision: i64) -> Option<Vec<u8>> {
    let api_version = wanted(spec)?;
    if spec
        .custom
        .is_some_and(|cr| cr.conversion_webhook.is_some())
    {
        return None;
    }
    let defaults = spec
        .custom
        .is_some_and(|cr| cr.has_defaults && mod_revision <= cr.defaults_since);
    let prefix = format!("{{\"apiVersion\":{}", json!(api_version));
    if !defaults && bytes.starts_with(prefix.as_bytes()) {
        return None;
    }
    let original: Value = serde_json::from_slice(bytes).ok()?;
    let mut obj = original.clone();
    to_served(spec, &mut obj);
    if obj == original {
        return None;
    }
    serde_json::to_vec(&obj).ok()
}

/// Rewrites stored bytes in place when needed.
pub fn convert_in_place(spec: &ResourceSpec, bytes: &mut Vec<u8>, mod_revision: i64) {
    if let Some(converted) = stored_to_served(spec, bytes, mod_revision) {
        *bytes = converted;
    }
}

/// Objects in the served version: the CRD's conversion webhook gets, in one review, every object
/// stored in another version; then schema defaults apply. Without a webhook, as [`to_served`].
pub async fn served(
    store: &Store,
    spec: &ResourceSpec,
    mut objects: Vec<Value>,
) -> Result<Vec<Value>, ApiError> {
    let Some(cr) = spec.custom else {
        for obj in &mut objects {
            to_served(spec, obj);
        }
        return Ok(objects);
    };
    let Some(webhook) = &cr.conversion_webhook else {
        for obj in &mut objects {
            to_served(spec, obj);
        }
        return Ok(objects);
    };
    let api_version = spec.api_version();
    let stale: Vec<usize> = (0..objects.len())
        .filter(|i| objects[*i]["apiVersion"].as_str() != Some(api_version.as_str()))
        .collect();
    if !stale.is_empty() {
        let batch: Vec<Value> = stale.iter().map(|i| objects[*i].clone()).collect();
        let converted = super::conversion::convert(store, spec, webhook, batch).await?;
        for (i, obj) in stale.into_iter().zip(converted) {
            objects[i] = obj;
        }
    }
    if cr.has_defaults {
        for obj in &mut objects {
            cr.apply_defaults(obj);
        }
    }
    Ok(objects)
}

/// [`served`] for stored bytes (list pages): only CRDs with a conversion webhook do work here.
pub async fn served_stored(
    store: &Store,
    spec: &ResourceSpec,
    items: &mut [Versioned],
) -> Result<(), ApiError> {
    let converts = spec.custom.and_then(|cr| cr.conversion_webhook.as_ref());
    if converts.is_none() {
        return Ok(());
    }
    let objects: Vec<Value> = items
        .iter()
        .map(|i| serde_json::from_slice(&i.value).unwrap_or(Value::Null))
        .collect();
    let converted = served(store, spec, objects).await?;
    for (item, obj) in items.iter_mut().zip(converted) {
        item.value = serde_json::to_vec(&obj).unwrap_or_default();
    }
    Ok(())
}
