//! One generic registry keyed by group/version/resource. Per-kind behaviour lives in `ResourceSpec`
//! data (`strategy.rs`, `resources.rs`); object lifecycle rules shared by all kinds in `lifecycle.rs`.

pub mod admission_registration;
pub mod apiextensions;
pub mod apiregistration;
pub mod apparmor_annotations;
pub mod apps;
pub mod autoscaling;
pub mod certificates;
pub mod columns;
pub mod config_keys;
pub mod cronjobs;
pub mod defaults;
pub mod dns_names;
pub mod ephemeral_containers;
pub mod events;
pub mod flowcontrol;
pub mod jobs;
pub mod lifecycle;
pub mod metrics_api;
pub mod networking;
pub mod pod_resize;
pub mod pod_resources;
pub mod policy;
pub mod priority_classes;
pub mod quotas;
pub mod rbac;
pub mod replication;
pub mod resources;
pub mod runtime_classes;
pub mod security_context_apparmor;
pub mod security_context_fields;
pub mod services;
pub mod statefulsets;
pub mod storage;
pub mod storage_classes;
pub mod storage_quantity;
pub mod strategy;

use std::sync::{Arc, RwLock};

pub use strategy::ResourceSpec;

/// The served resources, looked up by group/version/plural (or short name / kind for discovery):
/// the built-in kinds, fixed at start, and the custom resources of established CRDs, which
/// `crd::controller` replaces as CRDs come and go. Clones share the custom set.
#[derive(Debug, Clone)]
pub struct Registry {
    builtin: Vec<&'static ResourceSpec>,
    custom: Arc<RwLock<Vec<&'static ResourceSpec>>>,
}

impl Default for Registry {
    fn default() -> Self {
        Registry {
            builtin: resources::ALL.to_vec(),
            custom: Arc::default(),
        }
    }
}

impl Registry {
    pub fn lookup(
        &self,
        group: &str,
        version: &str,
        plural: &str,
    ) -> Option<&'static ResourceSpec> {
        self.all()
            .into_iter()
            .find(|s| s.group == group && s.version == version && s.plural == plural)
    }

    /// Every served resource: built-in kinds first, then custom resources.
    pub fn all(&self) -> Vec<&'static ResourceSpec> {
        let custom = self.custom.read().unwrap_or_else(|e| e.into_inner());
        self.builtin.iter().chain(custom.iter()).copied().collect()
    }

    /// Replaces the custom resources (every served version of every established CRD).
    pub fn set_custom(&self, specs: Vec<&'static ResourceSpec>) {
        *self.custom.write().unwrap_or_else(|e| e.into_inner()) = specs;
    }

    /// The built-in resource for group/plural in any version (a CRD may not claim one).
    pub fn builtin_group_resource(&self, group: &str, plural: &str) -> bool {
        self.builtin
            .iter()
            .any(|s| s.group == group && s.plural == plural)
    }

    /// Group names other than core, each with its versions, in registration order.
    pub fn groups(&self) -> Vec<(&'static str, Vec<&'static str>)> {
        let mut out: Vec<(&'static str, Vec<&'static str>)> = Vec::new();
        for s in self.all().into_iter().filter(|s| !s.group.is_empty()) {
            match out.iter_mut().find(|(g, _)| *g == s.group) {
                Some((_, versions)) if !versions.contains(&s.version) => versions.push(s.version),
                Some(_) => {}
                None => out.push((s.group, vec![s.version])),
            }
        }
        out
    }

    pub fn in_group_version(&self, group: &str, version: &str) -> Vec<&'static ResourceSpec> {
        self.all()
            .into_iter()
            .filter(|s| s.group == group && s.version == version)
            .collect()
    }
}
