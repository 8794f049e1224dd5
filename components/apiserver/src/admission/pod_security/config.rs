//! PodSecurity's configuration: upstream's PodSecurityConfiguration (defaults per mode, exempt
//! usernames, namespaces and runtime classes), read from the PodSecurity entry of the
//! AdmissionConfiguration file given by `--admission-control-config-file`, inline
//! (`configuration:`) or in a file of its own (`path:`, relative to the admission file). Without a
//! file, or without a PodSecurity entry, every mode is privileged:latest and nothing is exempt.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::api::{Level, LevelVersion, Policy, Version};
use crate::registry::dns_names::{is_label, is_subdomain, LABEL_MSG, SUBDOMAIN_MSG};

const ADMISSION_API_VERSIONS: &[&str] = &[
    "apiserver.config.k8s.io/v1",
    "apiserver.config.k8s.io/v1alpha1",
    "apiserver.k8s.io/v1alpha1",
];
const POD_SECURITY_API_VERSIONS: &[&str] = &[
    "pod-security.admission.config.k8s.io/v1",
    "pod-security.admission.config.k8s.io/v1beta1",
    "pod-security.admission.config.k8s.io/v1alpha1",
];

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ConfigError {
    #[error("admission control config file {file}: {reason}")]
    Read { file: String, reason: String },
    #[error("admission control config file {file}: {field}: {reason}")]
    Invalid {
        file: String,
        field: String,
        reason: String,
    },
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Exemptions {
    pub usernames: Vec<String>,
    pub namespaces: Vec<String>,
    pub runtime_classes: Vec<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub defaults: Policy,
    pub exemptions: Exemptions,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            defaults: Policy::PRIVILEGED,
            exemptions: Exemptions::default(),
        }
    }
}

impl Config {
    pub fn exempt_namespace(&self, ns: &str) -> bool {
        !ns.is_empty() && self.exemptions.namespaces.iter().any(|n| n == ns)
    }
    pub fn exempt_user(&self, user: &str) -> bool {
        !user.is_empty() && self.exemptions.usernames.iter().any(|u| u == user)
    }
    pub fn exempt_runtime_class(&self, class: Option<&str>) -> bool {
        class.is_some_and(|c| {
            !c.is_empty() && self.exemptions.runtime_classes.iter().any(|r| r == c)
        })
    }
}

/// Reads `--admission-control-config-file` (None: the defaults).
pub fn load(file: Option<&str>) -> Result<Config, ConfigError> {
    let Some(file) = file else {
        return Ok(Config::default());
    };
    let text = std::fs::read_to_string(file).map_err(|e| ConfigError::Read {
        file: file.to_string(),
        reason: e.to_string(),
    })?;
    let dir = Path::new(file).parent().unwrap_or(Path::new("."));
    parse(file, &text, dir)
}

fn yaml(file: &str, text: &str) -> Result<Value, ConfigError> {
    serde_norway::from_str(text).map_err(|e| ConfigError::Read {
        file: file.to_string(),
        reason: format!("not YAML or JSON: {e}"),
    })
}

/// Parses an AdmissionConfiguration's text; `dir` resolves relative `path:` entries.
pub fn parse(file: &str, text: &str, dir: &Path) -> Result<Config, ConfigError> {
    let invalid = |field: &str, reason: String| ConfigError::Invalid {
        file: file.to_string(),
        field: field.to_string(),
        reason,
    };
    let root = yaml(file, text)?;
    expect_type(
        &root,
        "",
        ADMISSION_API_VERSIONS,
        "AdmissionConfiguration",
        &invalid,
    )?;
    let plugins = match &root["plugins"] {
        Value::Null => return Ok(Config::default()),
        Value::Array(p) => p,
        _ => return Err(invalid("plugins", "must be a list".into())),
    };
    let Some((i, entry)) = plugins
        .iter()
        .enumerate()
        .find(|(_, p)| p["name"].as_str() == Some("PodSecurity"))
    else {
        return Ok(Config::default());
    };
    let at = format!("plugins[{i}]");
    match (&entry["configuration"], entry["path"].as_str()) {
        (Value::Null, None) => Ok(Config::default()),
        (Value::Null, Some(path)) => {
            let full: PathBuf = dir.join(path);
            let shown = full.to_string_lossy().into_owned();
            let text = std::fs::read_to_string(&full)
                .map_err(|e| invalid(&format!("{at}.path"), format!("reading {shown}: {e}")))?;
            let inner = |field: &str, reason: String| ConfigError::Invalid {
                file: shown.clone(),
                field: field.to_string(),
                reason,
            };
            pod_security(&yaml(&shown, &text)?, "", &inner)
        }
        (conf, None) => pod_security(conf, &format!("{at}.configuration"), &invalid),
        (_, Some(_)) => Err(invalid(
            &at,
            "configuration and path are mutually exclusive".into(),
        )),
    }
}

fn join(prefix: &str, field: &str) -> String {
    if prefix.is_empty() {
        field.to_string()
    } else {
        format!("{prefix}.{field}")
    }
}

fn expect_type(
    v: &Value,
    at: &str,
    api_versions: &[&str],
    kind: &str,
    invalid: &dyn Fn(&str, String) -> ConfigError,
) -> Result<(), ConfigError> {
    let api_version = v["apiVersion"].as_str().unwrap_or("");
    if !api_versions.contains(&api_version) {
        return Err(invalid(
            &join(at, "apiVersion"),
            format!(
                "Unsupported value: {api_version:?}: supported values: {}",
                api_versions
                    .iter()
                    .map(|s| format!("{s:?}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ));
    }
    if v["kind"].as_str() != Some(kind) {
        return Err(invalid(
            &join(at, "kind"),
            format!("must be {kind:?}, not {}", v["kind"]),
        ));
    }
    Ok(())
}

/// A PodSecurityConfiguration object, validated as upstream does.
fn pod_security(
    v: &Value,
    at: &str,
    invalid: &dyn Fn(&str, String) -> ConfigError,
) -> Result<Config, ConfigError> {
    expect_type(
        v,
        at,
        POD_SECURITY_API_VERSIONS,
        "PodSecurityConfiguration",
        invalid,
    )?;
    let defaults = &v["defaults"];
    let text = |field: &str| -> Result<String, ConfigError> {
        match &defaults[field] {
            Value::Null => Ok(String::new()),
            Value::String(s) => Ok(s.clone()),
            other => Err(invalid(
                &join(at, &format!("defaults.{field}")),
                format!("must be a string, not {other}"),
            )),
        }
    };
    let mode = |level_field: &str| -> Result<LevelVersion, ConfigError> {
        let version_field = format!("{level_field}-version");
        let (level, version) = (text(level_field)?, text(&version_field)?);
        let level = if level.is_empty() {
            Level::Privileged
        } else {
            Level::parse(&level).map_err(|e| {
                invalid(
                    &join(at, &format!("defaults.{level_field}")),
                    format!("Invalid value: {level:?}: {e}"),
                )
            })?
        };
        let version = if version.is_empty() {
            Version::Latest
        } else {
            Version::parse(&version).map_err(|e| {
                invalid(
                    &join(at, &format!("defaults.{version_field}")),
                    format!("Invalid value: {version:?}: {e}"),
                )
            })?
        };
        Ok(LevelVersion { level, version })
    };
    let defaults = Policy {
        enforce: mode("enforce")?,
        audit: mode("audit")?,
        warn: mode("warn")?,
    };
    let list = |field: &str, check: &dyn Fn(&str) -> Option<String>| {
        let path = join(at, &format!("exemptions.{field}"));
        let items = match &v["exemptions"][field] {
            Value::Null => return Ok(Vec::new()),
            Value::Array(a) => a,
            _ => return Err(invalid(&path, "must be a list of strings".into())),
        };
        let mut out: Vec<String> = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let at = format!("{path}[{i}]");
            let s = item
                .as_str()
                .ok_or_else(|| invalid(&at, "must be a string".into()))?;
            if let Some(problem) = check(s) {
                return Err(invalid(&at, format!("Invalid value: {s:?}: {problem}")));
            }
            if out.iter().any(|x| x == s) {
                return Err(invalid(&at, format!("Duplicate value: {s:?}")));
            }
            out.push(s.to_string());
        }
        Ok(out)
    };
    let exemptions = Exemptions {
        namespaces: list("namespaces", &|s| {
            (!is_label(s)).then(|| LABEL_MSG.to_string())
        })?,
        runtime_classes: list("runtimeClasses", &|s| {
            (!is_subdomain(s)).then(|| SUBDOMAIN_MSG.to_string())
        })?,
        usernames: list("usernames", &|s| {
            s.is_empty()
                .then(|| "username must not be empty".to_string())
        })?,
    };
    Ok(Config {
        defaults,
        exemptions,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(text: &str) -> Result<Config, ConfigError> {
        parse("/etc/kiln/admission.yaml", text, Path::new("/nonexistent"))
    }

    const HEAD: &str = "apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: PodSecurity
  configuration:
    apiVersion: pod-security.admission.config.k8s.io/v1
    kind: PodSecurityConfiguration
";

    #[test]
    fn defaults_are_privileged_latest() {
        assert_eq!(load(None).unwrap(), Config::default());
        let c = p(&format!("{HEAD}    defaults:\n      enforce: baseline\n")).unwrap();
        assert_eq!(c.defaults.enforce.to_string(), "baseline:latest");
        assert_eq!(c.defaults.warn.to_string(), "privileged:latest");
        // No PodSecurity entry: the defaults.
        let other = "apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\nplugins:\n- name: EventRateLimit\n  path: x.yaml\n";
        assert_eq!(p(other).unwrap(), Config::default());
    }

    #[test]
    fn full_configuration() {
        let c = p(&format!(
            "{HEAD}    defaults:
      enforce: restricted
      enforce-version: v1.30
      audit: baseline
      warn: restricted
      warn-version: latest
    exemptions:
      usernames: [system:serviceaccount:kube-system:replicaset-controller]
      namespaces: [kube-system]
      runtimeClasses: [kata.example.com]
"
        ))
        .unwrap();
        assert_eq!(c.defaults.enforce.to_string(), "restricted:v1.30");
        assert_eq!(c.defaults.audit.to_string(), "baseline:latest");
        assert!(c.exempt_namespace("kube-system") && !c.exempt_namespace("default"));
        assert!(c.exempt_user("system:serviceaccount:kube-system:replicaset-controller"));
        assert!(c.exempt_runtime_class(Some("kata.example.com")));
        assert!(!c.exempt_runtime_class(None));
    }

    #[test]
    fn errors_name_the_file_and_field() {
        let e = p(&format!("{HEAD}    defaults:\n      enforce: strict\n")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "admission control config file /etc/kiln/admission.yaml: plugins[0].configuration.defaults.enforce: Invalid value: \"strict\": must be one of privileged, baseline, restricted"
        );
        let e = p(&format!(
            "{HEAD}    defaults:\n      warn-version: \"1.25\"\n"
        ))
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("plugins[0].configuration.defaults.warn-version: Invalid value: \"1.25\": must be \"latest\" or \"v1.x\""),
            "{e}"
        );
        let e = p(&format!(
            "{HEAD}    exemptions:\n      namespaces: [ok, Bad_NS]\n"
        ))
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("plugins[0].configuration.exemptions.namespaces[1]: Invalid value: \"Bad_NS\": a lowercase RFC 1123 label"),
            "{e}"
        );
        let e = p(&format!("{HEAD}    exemptions:\n      usernames: [a, a]\n")).unwrap_err();
        assert!(
            e.to_string()
                .ends_with("exemptions.usernames[1]: Duplicate value: \"a\""),
            "{e}"
        );
        let e = p("apiVersion: v1\nkind: ConfigMap\n").unwrap_err();
        assert!(
            e.to_string()
                .contains(": apiVersion: Unsupported value: \"v1\""),
            "{e}"
        );
        let e = p("plugins: [").unwrap_err();
        assert!(matches!(e, ConfigError::Read { .. }), "{e}");
        let e = load(Some("/nonexistent/admission.yaml")).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("admission control config file /nonexistent/admission.yaml: "),
            "{e}"
        );
    }

    #[test]
    fn path_entries_are_read_relative_to_the_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("pss.yaml"),
            "apiVersion: pod-security.admission.config.k8s.io/v1beta1\nkind: PodSecurityConfiguration\ndefaults:\n  warn: baseline\n",
        )
        .unwrap();
        let admission = dir.path().join("admission.yaml");
        std::fs::write(
            &admission,
            "apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\nplugins:\n- name: PodSecurity\n  path: pss.yaml\n",
        )
        .unwrap();
        let c = load(admission.to_str()).unwrap();
        assert_eq!(c.defaults.warn.to_string(), "baseline:latest");
    }
}
