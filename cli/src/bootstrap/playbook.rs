//! Playbooks as data: YAML files embedded in the binary (from `playbooks/`), overridable by path.

use serde::Deserialize;

use super::BootstrapError;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Selector {
    /// The operator's machine (PKI, kubeconfigs, waiting on the API).
    Local,
    FirstController,
    Controllers,
    Workers,
    All,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PhaseSpec {
    pub name: String,
    pub hosts: Selector,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Playbook {
    pub name: String,
    pub phases: Vec<PhaseSpec>,
}

const EMBEDDED: &[(&str, &str)] = &[
    ("init", include_str!("../../../playbooks/init.yaml")),
    ("join", include_str!("../../../playbooks/join.yaml")),
    (
        "join-control-plane",
        include_str!("../../../playbooks/join-control-plane.yaml"),
    ),
    (
        "apiserver-lb",
        include_str!("../../../playbooks/apiserver-lb.yaml"),
    ),
    (
        "preflight",
        include_str!("../../../playbooks/preflight.yaml"),
    ),
    ("reset", include_str!("../../../playbooks/reset.yaml")),
    (
        "restore-wait",
        include_str!("../../../playbooks/restore-wait.yaml"),
    ),
];

impl Playbook {
    /// The playbook minus the named phases; a name that is not in it is an error (a typo must not silently
    /// run everything).
    pub fn without(mut self, skip: &[String]) -> Result<Playbook, BootstrapError> {
        for name in skip {
            if !self.phases.iter().any(|p| &p.name == name) {
                return Err(BootstrapError::Playbook {
                    path: self.name.clone(),
                    message: format!(
                        "--skip-phases: no phase {name:?} in this playbook ({})",
                        self.phases
                            .iter()
                            .map(|p| p.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                });
            }
        }
        self.phases.retain(|p| !skip.contains(&p.name));
        Ok(self)
    }

    /// The embedded playbook `name`, or the file at `path` when given.
    pub fn load(name: &str, path: Option<&std::path::Path>) -> Result<Playbook, BootstrapError> {
        let (origin, text) = match path {
            Some(p) => (
                p.display().to_string(),
                std::fs::read_to_string(p).map_err(|source| BootstrapError::Io {
                    what: "reading playbook",
                    path: p.to_path_buf(),
                    source,
                })?,
            ),
            None => {
                let (_, t) = EMBEDDED.iter().find(|(n, _)| *n == name).ok_or_else(|| {
                    BootstrapError::Playbook {
                        path: name.to_string(),
                        message: "no such embedded playbook".into(),
                    }
                })?;
                (format!("playbooks/{name}.yaml"), t.to_string())
            }
        };
        let pb: Playbook = serde_norway::from_str(&text).map_err(|e| BootstrapError::Playbook {
            path: origin.clone(),
            message: e.to_string(),
        })?;
        for p in &pb.phases {
            super::phases::table::find(&p.name)?;
        }
        Ok(pb)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_playbooks_parse_and_name_known_phases() {
        for (name, _) in EMBEDDED {
            let pb = Playbook::load(name, None).unwrap();
            assert!(!pb.phases.is_empty());
        }
        let init = Playbook::load("init", None).unwrap();
        assert_eq!(init.phases[0].name, "preflight");
        assert_eq!(init.phases.last().unwrap().name, "wait-node-ready");
    }

    #[test]
    fn skipping_phases_removes_them_and_rejects_unknown_names() {
        let init = Playbook::load("init", None).unwrap();
        let n = init.phases.len();
        let skipped = init
            .clone()
            .without(&["preflight".into(), "upload-config".into()])
            .unwrap();
        assert_eq!(skipped.phases.len(), n - 2);
        assert!(!skipped.phases.iter().any(|p| p.name == "preflight"));
        let e = init.without(&["prefligth".into()]).unwrap_err().to_string();
        assert!(e.contains("prefligth"), "{e}");
    }

    #[test]
    fn unknown_phases_are_rejected_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.yaml");
        std::fs::write(&p, "name: x\nphases:\n  - {name: frobnicate, hosts: all}\n").unwrap();
        let e = Playbook::load("x", Some(&p)).unwrap_err().to_string();
        assert!(e.contains("frobnicate"), "{e}");
    }
}
