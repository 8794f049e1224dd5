//! `--encryption-provider-config`: upstream's `apiserver.config.k8s.io/v1` EncryptionConfiguration,
//! decoded strictly and validated with upstream's field paths and texts
//! (`apis/apiserver/validation/validation_encryption.go`), so a mistake names the file and the field.

use std::path::Path;

use base64::Engine;
use serde::Deserialize;

use super::ciphers::Cipher;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("error opening encryption provider configuration file {path:?}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("encryption provider configuration file {0:?} is empty")]
    Empty(String),
    #[error("error decoding encryption provider configuration file {path:?}: {message}")]
    Decode { path: String, message: String },
    #[error("error while parsing encryption provider configuration file {path:?}: {message}")]
    Invalid { path: String, message: String },
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct File {
    #[serde(default)]
    kind: String,
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    resources: Vec<ResourceConfiguration>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ResourceConfiguration {
    #[serde(default)]
    resources: Vec<String>,
    #[serde(default)]
    providers: Vec<ProviderConfiguration>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProviderConfiguration {
    aesgcm: Option<Keys>,
    aescbc: Option<Keys>,
    secretbox: Option<Keys>,
    identity: Option<serde_json::Value>,
    kms: Option<serde_json::Value>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Keys {
    #[serde(default)]
    keys: Vec<Key>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Key {
    #[serde(default)]
    name: String,
    #[serde(default)]
    secret: String,
}

/// One provider key (or identity) in read order; the first writes.
#[derive(Debug, Clone)]
pub struct Provider {
    /// `k8s:enc:<provider>:v1:<key name>:`, empty for identity.
    pub prefix: Vec<u8>,
    /// None = identity.
    pub cipher: Option<Cipher>,
}

/// One `resources[]` entry: the resources it names (`secrets`, `deployments.apps`, `*.apps`, `*.`,
/// `*.*`) and its providers flattened key by key.
#[derive(Debug, Clone)]
pub struct ResourceEntry {
    pub resources: Vec<String>,
    pub providers: Vec<Provider>,
}

/// A provider key's cipher from its secret.
type MakeCipher = fn(&[u8]) -> Result<Cipher, super::ciphers::CipherError>;

const AES_KEY_SIZES: &[usize] = &[16, 24, 32];
const SECRETBOX_KEY_SIZES: &[usize] = &[32];

/// A strict decoding error as `<exact field path>: <problem> at line L column C`. serde_norway
/// names only the enclosing mapping in its own text; serde_path_to_error knows the field.
pub(crate) fn yaml_error(e: serde_path_to_error::Error<serde_norway::Error>) -> String {
    let at = e.path().to_string();
    let inner = e.into_inner().to_string();
    let inner = match inner.split_once(": ") {
        Some((p, rest)) if !p.contains(' ') && at.starts_with(p) => rest.to_string(),
        _ => inner,
    };
    if at == "." {
        inner
    } else {
        format!("{at}: {inner}")
    }
}

/// Reads, decodes and validates the file.
pub fn load(path: &Path) -> Result<Vec<ResourceEntry>, ConfigError> {
    let shown = path.display().to_string();
    let data = std::fs::read(path).map_err(|source| ConfigError::Read {
        path: shown.clone(),
        source,
    })?;
    parse(&shown, &data)
}

pub fn parse(path: &str, data: &[u8]) -> Result<Vec<ResourceEntry>, ConfigError> {
    if data.iter().all(u8::is_ascii_whitespace) {
        return Err(ConfigError::Empty(path.to_string()));
    }
    let decode = |message: String| ConfigError::Decode {
        path: path.to_string(),
        message,
    };
    let doc = serde_norway::Deserializer::from_slice(data);
    let file: File = serde_path_to_error::deserialize(doc).map_err(|e| decode(yaml_error(e)))?;
    if file.kind != "EncryptionConfiguration"
        || !matches!(
            file.api_version.as_str(),
            "apiserver.config.k8s.io/v1" | "apiserver.k8s.io/v1"
        )
    {
        return Err(decode(format!(
            "got unexpected config type: {}, Kind={}",
            file.api_version, file.kind
        )));
    }
    let mut errors = Vec::new();
    let entries = validate(&file, &mut errors);
    if !errors.is_empty() {
        // field.ErrorList.ToAggregate(): one error alone, several as `[a, b]`.
        let message = if errors.len() == 1 {
            errors.remove(0)
        } else {
            format!("[{}]", errors.join(", "))
        };
        return Err(ConfigError::Invalid {
            path: path.to_string(),
            message,
        });
    }
    Ok(entries)
}

fn validate(file: &File, errors: &mut Vec<String>) -> Vec<ResourceEntry> {
    if file.resources.is_empty() {
        errors.push("resources: Required value: at least one resources is required".into());
        return Vec::new();
    }
    let mut entries = Vec::new();
    for (i, conf) in file.resources.iter().enumerate() {
        let r = format!("resources[{i}].resources");
        let p = format!("resources[{i}].providers");
        if conf.resources.is_empty() {
            errors.push(format!("{r}: Required value: at least one {r} is required"));
        }
        validate_overlap(&conf.resources, &r, errors);
        validate_names(&conf.resources, &r, errors);
        if conf.providers.is_empty() {
            errors.push(format!("{p}: Required value: at least one {p} is required"));
        }
        let mut providers = Vec::new();
        for (j, provider) in conf.providers.iter().enumerate() {
            let path = format!("{p}[{j}]");
            providers.extend(provider_keys(provider, &path, errors));
        }
        entries.push(ResourceEntry {
            resources: conf.resources.clone(),
            providers,
        });
    }
    entries
}

fn provider_keys(
    provider: &ProviderConfiguration,
    path: &str,
    errors: &mut Vec<String>,
) -> Vec<Provider> {
    let found = [
        provider.kms.is_some(),
        provider.aesgcm.is_some(),
        provider.aescbc.is_some(),
        provider.secretbox.is_some(),
        provider.identity.is_some(),
    ]
    .iter()
    .filter(|x| **x)
    .count();
    if found == 0 {
        errors.push(format!("{path}: Invalid value: provider does not contain any of the expected providers: KMS, AESGCM, AESCBC, Secretbox, Identity"));
        return Vec::new();
    }
    if found > 1 {
        errors.push(format!("{path}: Invalid value: more than one provider specified in a single element, should split into different list elements"));
        return Vec::new();
    }
    if provider.kms.is_some() {
        errors.push(format!(
            "{path}.kms: Unsupported value: kms providers are not supported by kiln-apiserver; use aesgcm, aescbc, secretbox or identity"
        ));
        return Vec::new();
    }
    if provider.identity.is_some() {
        return vec![Provider {
            prefix: Vec::new(),
            cipher: None,
        }];
    }
    let (name, keys, sizes, make): (&str, &Keys, &[usize], MakeCipher) =
        if let Some(k) = &provider.aesgcm {
            ("aesgcm", k, AES_KEY_SIZES, Cipher::aes_gcm)
        } else if let Some(k) = &provider.aescbc {
            ("aescbc", k, AES_KEY_SIZES, Cipher::aes_cbc)
        } else if let Some(k) = &provider.secretbox {
            ("secretbox", k, SECRETBOX_KEY_SIZES, Cipher::secretbox)
        } else {
            return Vec::new();
        };
    let keys_path = format!("{path}.{name}.keys");
    if keys.keys.is_empty() {
        errors.push(format!(
            "{keys_path}: Required value: at least one keys is required"
        ));
        return Vec::new();
    }
    let mut out = Vec::new();
    for (i, key) in keys.keys.iter().enumerate() {
        let at = format!("{keys_path}[{i}]");
        if key.name.is_empty() {
            errors.push(format!(
                "{at}.name: Required value: name is a mandatory field for a key"
            ));
        }
        if key.secret.is_empty() {
            errors.push(format!(
                "{at}.secret: Required value: secret is a mandatory field for a key"
            ));
            continue;
        }
        let Ok(secret) = base64::engine::general_purpose::STANDARD.decode(key.secret.trim()) else {
            errors.push(format!(
                "{at}.secret: Invalid value: \"REDACTED\": secrets must be base64 encoded"
            ));
            continue;
        };
        if !sizes.contains(&secret.len()) {
            let sizes: Vec<String> = sizes.iter().map(usize::to_string).collect();
            errors.push(format!(
                "{at}.secret: Invalid value: \"REDACTED\": secret is not of the expected length, got {}, expected one of [{}]",
                secret.len(),
                sizes.join(" ")
            ));
            continue;
        }
        match make(&secret) {
            Ok(cipher) if !key.name.is_empty() => out.push(Provider {
                prefix: format!("k8s:enc:{name}:v1:{}:", key.name).into_bytes(),
                cipher: Some(cipher),
            }),
            Ok(_) => {}
            Err(e) => errors.push(format!("{at}.secret: Invalid value: \"REDACTED\": {e}")),
        }
    }
    out
}

/// `group/resource` as schema.ParseGroupResource reads `resource.group`.
pub fn group_resource(s: &str) -> (&str, &str) {
    match s.split_once('.') {
        Some((resource, group)) => (group, resource),
        None => ("", s),
    }
}

fn go_list(items: &[String]) -> String {
    format!(
        "[]string{{{}}}",
        items
            .iter()
            .map(|s| format!("{s:?}"))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

fn validate_overlap(resources: &[String], path: &str, errors: &mut Vec<String>) {
    if resources.len() < 2 {
        return;
    }
    let grs: Vec<(&str, &str)> = resources.iter().map(|r| group_resource(r)).collect();
    let (mut overlap, mut duplicate) = (false, false);
    for (i, a) in grs.iter().enumerate() {
        for (j, b) in grs.iter().enumerate() {
            if i == j {
                continue;
            }
            if a == b {
                duplicate = true;
                continue;
            }
            if *a == ("*", "*") || (a.0 == b.0 && (a.1 == "*" || b.1 == "*")) {
                overlap = true;
            }
        }
    }
    if duplicate {
        errors.push(format!(
            "{path}: Invalid value: {}: the same resource cannot be specified multiple times",
            go_list(resources)
        ));
    }
    if overlap {
        errors.push(format!("{path}: Invalid value: {}: using overlapping resources such as 'secrets' and '*.' in the same resource list is not allowed as they will be masked", go_list(resources)));
    }
}

fn validate_names(resources: &[String], path: &str, errors: &mut Vec<String>) {
    for (j, res) in resources.iter().enumerate() {
        let at = format!("{path}[{j}]");
        let (group, resource) = group_resource(res);
        let problem = if res.to_lowercase() != *res {
            Some("resource name should not contain capital letters")
        } else if res == "*" {
            Some("use '*.' to encrypt all the resources from core API group or *.* to encrypt all resources")
        } else if matches!(
            res.as_str(),
            "apiserveripinfo" | "serviceipallocations" | "servicenodeportallocations"
        ) {
            Some("resources which do not have REST API/s cannot be encrypted")
        } else if group == "events.k8s.io" {
            Some("'*.events.k8s.io' objects are stored using the 'events' API group in etcd. Use 'events' instead in the config file")
        } else if group == "extensions" {
            Some("'extensions' group has been removed and cannot be used for encryption")
        } else if group == "*" && resource != "*" {
            Some("encrypting the same resource across groups is not supported")
        } else {
            None
        };
        if let Some(p) = problem {
            errors.push(format!("{at}: Invalid value: {res:?}: {p}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY32: &str = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="; // 32 bytes

    fn config(body: &str) -> String {
        format!("apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\n{body}")
    }

    fn err(body: &str) -> String {
        parse("/etc/kiln/enc.yaml", config(body).as_bytes())
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn providers_flatten_key_by_key_in_order() {
        let entries = parse(
            "f",
            config(&format!(
                "resources:
- resources: [secrets, '*.apps']
  providers:
  - aesgcm:
      keys:
      - {{name: key2, secret: {KEY32}}}
      - {{name: key1, secret: {KEY32}}}
  - secretbox:
      keys: [{{name: sb, secret: {KEY32}}}]
  - identity: {{}}
"
            ))
            .as_bytes(),
        )
        .unwrap();
        let prefixes: Vec<String> = entries[0]
            .providers
            .iter()
            .map(|p| String::from_utf8(p.prefix.clone()).unwrap())
            .collect();
        assert_eq!(
            prefixes,
            [
                "k8s:enc:aesgcm:v1:key2:",
                "k8s:enc:aesgcm:v1:key1:",
                "k8s:enc:secretbox:v1:sb:",
                ""
            ]
        );
    }

    #[test]
    fn errors_name_the_file_and_the_field() {
        let e = err("resources:\n- resources: [secrets]\n  providers:\n  - aesgcm:\n      keys: [{name: k, secret: c2hvcnQ=}]\n");
        assert!(e.contains("/etc/kiln/enc.yaml"), "{e}");
        assert!(
            e.contains("resources[0].providers[0].aesgcm.keys[0].secret: Invalid value: \"REDACTED\": secret is not of the expected length, got 5, expected one of [16 24 32]"),
            "{e}"
        );
        let e = err("resources:\n- resources: [secrets]\n  providers:\n  - kms: {name: x, endpoint: unix:///k.sock}\n");
        assert!(
            e.contains(
                "resources[0].providers[0].kms: Unsupported value: kms providers are not supported"
            ),
            "{e}"
        );
        let e = err("resources:\n- resources: [secrets]\n  providers:\n  - aesgcm:\n      keys: [{name: k, secret: '!!!'}]\n");
        assert!(e.contains("secrets must be base64 encoded"), "{e}");
        let e = err("resources:\n- resources: ['*', Secrets]\n  providers: [{identity: {}}]\n");
        assert!(
            e.contains("resources[0].resources[0]: Invalid value: \"*\": use '*.' to encrypt all"),
            "{e}"
        );
        assert!(e.contains("resources[0].resources[1]: Invalid value: \"Secrets\": resource name should not contain capital letters"), "{e}");
        let e = err("resources:\n- resources: [secrets]\n  providers: [{aesgcm: {keys: [{name: k, secret: x}]}, identity: {}}]\n");
        assert!(e.contains("more than one provider specified"), "{e}");
        let e = err("resources:\n- resources: [secrets]\n  provider: []\n");
        assert!(
            e.contains("resources[0].provider: unknown field `provider`"),
            "{e}"
        );
        let e = err("resources: []\n");
        assert!(e.contains("at least one resources is required"), "{e}");
        let e = parse("f", b"apiVersion: v1\nkind: ConfigMap\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("got unexpected config type"), "{e}");
        let e = err("resources:\n- resources: [secrets, '*.']\n  providers: [{identity: {}}]\n");
        assert!(e.contains("overlapping resources"), "{e}");
    }
}
