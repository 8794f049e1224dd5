//! configMap volumes: the ConfigMap's keys as files (all keys, or the `items` key→path list), with
//! `defaultMode` (0644) or an item's own mode. Also the key→path projection secrets and projected
//! volumes share.

use k8s_openapi::api::core::v1::{ConfigMapVolumeSource, KeyToPath};

use super::atomic_writer::{FileSpec, Files};
use super::VolumeError;
use crate::pod_objects::Payload;

pub const DEFAULT_MODE: u32 = 0o644;

/// The files for one object: every key (path = key), or only `items`. A listed key the object lacks is
/// an error unless `optional`.
pub fn key_to_paths(
    kind: &'static str,
    name: &str,
    data: &Payload,
    items: Option<&[KeyToPath]>,
    mode: u32,
    optional: bool,
) -> Result<Files, VolumeError> {
    let mut out = Files::new();
    match items.filter(|i| !i.is_empty()) {
        None => {
            for (k, v) in data {
                out.insert(
                    k.clone(),
                    FileSpec {
                        data: v.clone(),
                        mode,
                    },
                );
            }
        }
        Some(items) => {
            for item in items {
                let Some(v) = data.get(&item.key) else {
                    if optional {
                        continue;
                    }
                    return Err(VolumeError::MissingKey {
                        kind,
                        name: name.into(),
                        key: item.key.clone(),
                    });
                };
                out.insert(
                    item.path.clone(),
                    FileSpec {
                        data: v.clone(),
                        mode: item.mode.map(|m| m as u32).unwrap_or(mode),
                    },
                );
            }
        }
    }
    Ok(out)
}

/// `data`: the ConfigMap, or None when it does not exist (an empty volume when optional).
pub fn files(src: &ConfigMapVolumeSource, data: Option<&Payload>) -> Result<Files, VolumeError> {
    let optional = src.optional == Some(true);
    let Some(data) = data else {
        if optional {
            return Ok(Files::new());
        }
        return Err(VolumeError::NotFound {
            kind: "configmap",
            name: src.name.clone(),
        });
    };
    let mode = src.default_mode.map(|m| m as u32).unwrap_or(DEFAULT_MODE);
    key_to_paths(
        "configmap",
        &src.name,
        data,
        src.items.as_deref(),
        mode,
        optional,
    )
}
