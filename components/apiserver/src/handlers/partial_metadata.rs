//! `Accept: application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1` (`as=PartialObjectMetadataList`
//! for a list): only the objects' metadata, as upstream's response transformation serves it to metadata
//! clients (kube-rs's get_metadata, list_metadata and patch_metadata; client-go's metadata client, which
//! the garbage collector and metadata informers use). `v1beta1` too, as upstream.
//!
//! Served for get, patch and list; a watch still streams whole objects.

use axum::http::HeaderMap;
use serde_json::{json, Value};

use super::stored::Stored;
use crate::status::ApiError;
use crate::storage::Versioned;

/// The `meta.k8s.io` apiVersion the first Accept media type asks `kind` in, if it asks for `kind`.
fn wanted(headers: &HeaderMap, kind: &str) -> Option<&'static str> {
    let first = headers
        .get_all(axum::http::header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .next()?;
    let (mut as_kind, mut group, mut version) = (None, None, None);
    for param in first.split(';').skip(1) {
        match param.split_once('=').map(|(k, v)| (k.trim(), v.trim())) {
            Some(("as", v)) => as_kind = Some(v),
            Some(("g", v)) => group = Some(v),
            Some(("v", v)) => version = Some(v),
            _ => {}
        }
    }
    if as_kind != Some(kind) || group != Some("meta.k8s.io") {
        return None;
    }
    match version {
        Some("v1") => Some("meta.k8s.io/v1"),
        Some("v1beta1") => Some("meta.k8s.io/v1beta1"),
        _ => None,
    }
}

/// Asked for one object as PartialObjectMetadata: its apiVersion.
pub fn object_version(headers: &HeaderMap) -> Option<&'static str> {
    wanted(headers, "PartialObjectMetadata")
}

/// Asked for a list as PartialObjectMetadataList: its apiVersion.
pub fn list_version(headers: &HeaderMap) -> Option<&'static str> {
    wanted(headers, "PartialObjectMetadataList")
}

/// One object as PartialObjectMetadata.
pub fn object(api_version: &str, obj: &Value) -> Value {
    json!({
        "apiVersion": api_version,
        "kind": "PartialObjectMetadata",
        "metadata": obj["metadata"],
    })
}

/// Stored objects as a PartialObjectMetadataList (keys in sorted order, as a serialised `Value` has
/// them), each item's metadata copied from its stored bytes with resourceVersion set.
pub fn write_list(
    api_version: &str,
    items: &[Versioned],
    metadata: &Value,
) -> Result<Vec<u8>, ApiError> {
    let version = serde_json::to_string(api_version).unwrap_or_default();
    let mut out = Vec::with_capacity(items.len() * 512 + 256);
    out.extend_from_slice(br#"{"apiVersion":"#);
    out.extend_from_slice(version.as_bytes());
    out.extend_from_slice(br#","items":["#);
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(br#"{"apiVersion":"#);
        out.extend_from_slice(version.as_bytes());
        out.extend_from_slice(br#","kind":"PartialObjectMetadata","metadata":"#);
        Stored::parse(&item.value, item.mod_revision)?.write_metadata(&mut out)?;
        out.push(b'}');
    }
    out.extend_from_slice(br#"],"kind":"PartialObjectMetadataList","metadata":"#);
    let _ = serde_json::to_writer(&mut out, metadata);
    out.push(b'}');
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accept(v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(axum::http::header::ACCEPT, v.parse().unwrap());
        h
    }

    #[test]
    fn only_the_first_media_type_asking_for_meta_k8s_io_counts() {
        // What kube-rs sends for get_metadata / patch_metadata and for list_metadata.
        let get = accept("application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1");
        assert_eq!(object_version(&get), Some("meta.k8s.io/v1"));
        assert_eq!(list_version(&get), None);
        let list = accept("application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1beta1");
        assert_eq!(list_version(&list), Some("meta.k8s.io/v1beta1"));
        assert_eq!(object_version(&list), None);
        // Another group, an unknown version, or a fallback after plain JSON: the whole object.
        for other in [
            "application/json;as=PartialObjectMetadata;g=example.com;v=v1",
            "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v9",
            "application/json, application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1",
            "application/json;as=Table;g=meta.k8s.io;v=v1",
        ] {
            assert_eq!(object_version(&accept(other)), None, "{other}");
        }
        assert_eq!(object_version(&HeaderMap::new()), None);
    }

    #[test]
    fn an_object_and_a_list_keep_only_metadata() {
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"a": "b"}},
                         "spec": {"containers": []}});
        assert_eq!(
            object("meta.k8s.io/v1", &pod),
            json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
                   "metadata": {"name": "p", "labels": {"a": "b"}}})
        );
        let items = [Versioned {
            key: "/registry/pods/default/p".into(),
            value: serde_json::to_vec(&pod).unwrap(),
            mod_revision: 7,
        }];
        let list = write_list("meta.k8s.io/v1", &items, &json!({"resourceVersion": "9"})).unwrap();
        let list: Value = serde_json::from_slice(&list).unwrap();
        assert_eq!(
            list,
            json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadataList",
                   "metadata": {"resourceVersion": "9"},
                   "items": [{"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
                              "metadata": {"name": "p", "labels": {"a": "b"}, "resourceVersion": "7"}}]})
        );
    }
}
