//! One generic registry keyed by group/version/resource. Per-kind behaviour lives in `ResourceSpec`
//! data (`strategy.rs`, `resources.rs`); object lifecycle rules shared by all kinds in `lifecycle.rs`.

pub mod apps;
pub mod certificates;
pub mod columns;
pub mod config_keys;
pub mod cronjobs;
pub mod defaults;
pub mod jobs;
pub mod lifecycle;
pub mod policy;
pub mod rbac;
pub mod replication;
pub mod resources;
pub mod services;
pub mod statefulsets;
pub mod storage;
pub mod storage_classes;
pub mod storage_quantity;
pub mod strategy;

pub use strategy::ResourceSpec;

/// The served resources, looked up by group/version/plural (or short name / kind for discovery).
#[derive(Debug, Clone)]
pub struct Registry {
    specs: Vec<&'static ResourceSpec>,
}

impl Default for Registry {
    fn default() -> Self {
        Registry {
            specs: resources::ALL.to_vec(),
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
        self.specs
            .iter()
            .copied()
            .find(|s| s.group == group && s.version == version && s.plural == plural)
    }

    pub fn all(&self) -> &[&'static ResourceSpec] {
        &self.specs
    }

    /// Group names other than core, each with its versions, in registration order.
    pub fn groups(&self) -> Vec<(&'static str, Vec<&'static str>)> {
        let mut out: Vec<(&'static str, Vec<&'static str>)> = Vec::new();
        for s in self.specs.iter().filter(|s| !s.group.is_empty()) {
            match out.iter_mut().find(|(g, _)| *g == s.group) {
                Some((_, versions)) if !versions.contains(&s.version) => versions.push(s.version),
                Some(_) => {}
                None => out.push((s.group, vec![s.version])),
            }
        }
        out
    }

    pub fn in_group_version(&self, group: &str, version: &str) -> Vec<&'static ResourceSpec> {
        self.specs
            .iter()
            .copied()
            .filter(|s| s.group == group && s.version == version)
            .collect()
    }
}
