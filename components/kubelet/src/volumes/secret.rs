//! secret volumes: like configMap volumes, files default to 0644 (upstream's SecretVolumeSourceDefaultMode,
//! which the conformance entries check: `-rw-r--r--`); `defaultMode` or an item's mode wins. The kubelet
//! puts the volume on a tmpfs ([`super::PodVolumes::secrets_in_memory`]), so secrets never reach the disk.

use k8s_openapi::api::core::v1::SecretVolumeSource;

use super::atomic_writer::Files;
use super::configmap::key_to_paths;
use super::VolumeError;
use crate::pod_objects::Payload;

pub const DEFAULT_MODE: u32 = 0o644;

/// `data`: the Secret, or None when it does not exist (an empty volume when optional).
pub fn files(src: &SecretVolumeSource, data: Option<&Payload>) -> Result<Files, VolumeError> {
    let name = src.secret_name.clone().unwrap_or_default();
    let optional = src.optional == Some(true);
    let Some(data) = data else {
        if optional {
            return Ok(Files::new());
        }
        return Err(VolumeError::NotFound {
            kind: "secret",
            name,
        });
    };
    let mode = src.default_mode.map(|m| m as u32).unwrap_or(DEFAULT_MODE);
    key_to_paths("secret", &name, data, src.items.as_deref(), mode, optional)
}
