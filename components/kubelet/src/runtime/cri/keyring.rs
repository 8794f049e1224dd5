//! Registry credentials from a pod's image pull secrets, matched to an image as upstream's
//! credentialprovider keyring does: each secret (`kubernetes.io/dockerconfigjson` or
//! `kubernetes.io/dockercfg`) maps registry locations (`host[:port][/path]`, optionally with a scheme
//! and `*` wildcards in host labels) to a username and password; an image gets every credential whose
//! location matches its repository, most specific location first; Docker Hub images also get those of
//! `index.docker.io`. Pure: the secrets are read by the caller ([`super::image_pull`]).

use std::collections::{BTreeMap, HashMap};

use base64::Engine;
use k8s_cri::v1 as cri;
use serde::Deserialize;

use crate::pod_objects::Payload;

pub const TYPE_DOCKER_CONFIG_JSON: &str = "kubernetes.io/dockerconfigjson";
pub const KEY_DOCKER_CONFIG_JSON: &str = ".dockerconfigjson";
pub const TYPE_DOCKERCFG: &str = "kubernetes.io/dockercfg";
pub const KEY_DOCKERCFG: &str = ".dockercfg";

/// Docker Hub as credentials name it, and as image names do.
const DEFAULT_REGISTRY_HOST: &str = "index.docker.io";
const DEFAULT_DOMAIN: &str = "docker.io";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyringError {
    #[error("{0}")]
    Json(String),
    #[error("must be formatted as base64(username:password)")]
    Auth,
    #[error("{0}")]
    Base64(String),
}

/// A Secret as the keyring reads it: its type and data.
#[derive(Clone, PartialEq, Eq)]
pub struct PullSecret {
    pub type_: String,
    pub data: Payload,
}

impl std::fmt::Debug for PullSecret {
    // Never the data: it holds passwords.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PullSecret")
            .field("type", &self.type_)
            .field("keys", &self.data.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// One registry credential.
#[derive(Clone, PartialEq, Eq)]
pub struct Credential {
    pub username: String,
    pub password: String,
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credential")
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

impl Credential {
    pub fn auth_config(&self) -> cri::AuthConfig {
        cri::AuthConfig {
            username: self.username.clone(),
            password: self.password.clone(),
            ..Default::default()
        }
    }
}

/// One entry of a docker config: `auth` (base64 of `user:password`), when set, overrides the
/// separate fields (upstream's DockerConfigEntry.UnmarshalJSON).
#[derive(Deserialize, Default)]
struct Entry {
    #[serde(default)]
    username: String,
    #[serde(default)]
    password: String,
    #[serde(default)]
    auth: String,
}

#[derive(Deserialize)]
struct ConfigJson {
    #[serde(default)]
    auths: BTreeMap<String, Entry>,
}

fn decode_auth(field: &str) -> Result<(String, String), KeyringError> {
    // Padded and unpadded base64 are both accepted, as upstream.
    let decoded = if field.trim().ends_with('=') {
        base64::engine::general_purpose::STANDARD.decode(field)
    } else {
        base64::engine::general_purpose::STANDARD_NO_PAD.decode(field)
    }
    .map_err(|e| KeyringError::Base64(e.to_string()))?;
    let text = String::from_utf8_lossy(&decoded);
    let (user, password) = text.split_once(':').ok_or(KeyringError::Auth)?;
    Ok((user.to_string(), password.to_string()))
}

impl Entry {
    fn credential(self) -> Result<Credential, KeyringError> {
        if self.auth.is_empty() {
            return Ok(Credential {
                username: self.username,
                password: self.password,
            });
        }
        let (username, password) = decode_auth(&self.auth)?;
        Ok(Credential { username, password })
    }
}

/// `scheme://host[:port]/path` split into host (with port) and path, as Go's url.Parse sees it
/// (userinfo, query and fragment aside).
fn host_and_path(location: &str) -> (&str, &str) {
    let rest = location
        .strip_prefix("https://")
        .or_else(|| location.strip_prefix("http://"))
        .unwrap_or(location);
    let rest = rest.split(['?', '#']).next().unwrap_or(rest);
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    let host = authority.rsplit('@').next().unwrap_or(authority);
    (host, path)
}

/// The key a location is indexed under: host, plus its path unless that is empty or `/` (`/v1/` and
/// `/v2/` prefixes count as the host, as docker's client does).
fn index_key(location: &str) -> String {
    let (host, path) = host_and_path(location);
    let path = if path.starts_with("/v1/") || path.starts_with("/v2/") {
        &path[3..]
    } else {
        path
    };
    if path.is_empty() || path == "/" {
        host.to_string()
    } else {
        format!("{host}{path}")
    }
}

/// Credentials by location, most specific first.
#[derive(Debug, Default, Clone)]
pub struct Keyring {
    /// Keys, reverse-sorted so that `reg/team` comes before `reg` (upstream's order).
    index: Vec<String>,
    creds: HashMap<String, Vec<Credential>>,
}

impl Keyring {
    /// The keyring of a pod's pull secrets (upstream's MakeDockerKeyring): secrets of other types, or
    /// without their key, are skipped; one that does not parse fails the whole pull, as upstream.
    pub fn from_secrets(secrets: &[PullSecret]) -> Result<Keyring, KeyringError> {
        let mut k = Keyring::default();
        for s in secrets {
            let json = |key: &str| s.data.get(key).filter(|b| !b.is_empty());
            let entries: BTreeMap<String, Entry> = if s.type_ == TYPE_DOCKER_CONFIG_JSON {
                match json(KEY_DOCKER_CONFIG_JSON) {
                    Some(b) => {
                        serde_json::from_slice::<ConfigJson>(b)
                            .map_err(|e| KeyringError::Json(e.to_string()))?
                            .auths
                    }
                    None => continue,
                }
            } else if s.type_ == TYPE_DOCKERCFG {
                match json(KEY_DOCKERCFG) {
                    Some(b) => {
                        serde_json::from_slice(b).map_err(|e| KeyringError::Json(e.to_string()))?
                    }
                    None => continue,
                }
            } else {
                continue;
            };
            for (location, entry) in entries {
                k.add(&location, entry.credential()?);
            }
        }
        Ok(k)
    }

    fn add(&mut self, location: &str, cred: Credential) {
        let key = index_key(location);
        self.creds.entry(key.clone()).or_default().push(cred);
        if !self.index.contains(&key) {
            self.index.push(key);
        }
        self.index.sort();
        self.index.reverse();
    }

    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// The credentials to try for `image`, in order; empty: pull anonymously.
    pub fn lookup(&self, image: &str) -> Vec<Credential> {
        let repo = repository(image);
        let mut out: Vec<Credential> = Vec::new();
        for k in &self.index {
            if urls_match(k, &repo) {
                out.extend(self.creds[k].iter().cloned());
            }
        }
        if out.is_empty() && is_default_registry(&repo) {
            if let Some(c) = self.creds.get(DEFAULT_REGISTRY_HOST) {
                out.extend(c.iter().cloned());
            }
        }
        out
    }
}

/// Does the first path component name a registry? (docker's rule: a `.` or `:`, `localhost`, or
/// upper case, which repository names cannot have.)
fn is_domain(part: &str) -> bool {
    part.contains(['.', ':']) || part == "localhost" || part.chars().any(|c| c.is_ascii_uppercase())
}

/// The image's repository, normalized as docker's reference parser does (`busybox:1` →
/// `docker.io/library/busybox`), without tag or digest: what credentials are matched against.
pub fn repository(image: &str) -> String {
    let name = image.split('@').next().unwrap_or(image);
    let name = match name.rfind(':') {
        Some(i) if !name[i..].contains('/') => &name[..i],
        _ => name,
    };
    let (domain, path) = match name.split_once('/') {
        Some((d, rest)) if is_domain(d) => (d, rest.to_string()),
        _ => (DEFAULT_DOMAIN, name.to_string()),
    };
    let domain = if domain == DEFAULT_REGISTRY_HOST {
        DEFAULT_DOMAIN
    } else {
        domain
    };
    if domain == DEFAULT_DOMAIN && !path.contains('/') {
        format!("{domain}/library/{path}")
    } else {
        format!("{domain}/{path}")
    }
}

/// Upstream's isDefaultRegistryMatch, on a normalized repository.
fn is_default_registry(repo: &str) -> bool {
    let (first, rest) = match repo.split_once('/') {
        Some((f, r)) => (f, Some(r)),
        None => (repo, None),
    };
    if first.is_empty() {
        return false;
    }
    rest.is_none()
        || first == DEFAULT_DOMAIN
        || first == DEFAULT_REGISTRY_HOST
        || !first.contains(['.', ':'])
}

/// Host labels and port (`reg.example.com:5000` → [reg, example, com], "5000").
fn split_host(host: &str) -> (Vec<&str>, &str) {
    match host.rsplit_once(':') {
        Some((h, port)) if !h.contains(':') => (h.split('.').collect(), port),
        _ => (host.split('.').collect(), ""),
    }
}

/// Upstream's URLsMatch: same port, as many host labels, each matching its glob, and the
/// credential's path a prefix of the image's.
fn urls_match(glob: &str, target: &str) -> bool {
    let (g_host, g_path) = host_and_path(glob);
    let (t_host, t_path) = host_and_path(target);
    let (g_parts, g_port) = split_host(g_host);
    let (t_parts, t_port) = split_host(t_host);
    g_port == t_port
        && g_parts.len() == t_parts.len()
        && t_path.starts_with(g_path)
        && g_parts
            .iter()
            .zip(&t_parts)
            .all(|(g, t)| glob_match(g.as_bytes(), t.as_bytes()))
}

/// Shell-style matching of one host label: `*` any run, `?` one character, anything else itself
/// (upstream uses filepath.Match; character classes are not supported here).
fn glob_match(pattern: &[u8], text: &[u8]) -> bool {
    match pattern.split_first() {
        None => text.is_empty(),
        Some((b'*', rest)) => (0..=text.len()).any(|i| glob_match(rest, &text[i..])),
        Some((b'?', rest)) => !text.is_empty() && glob_match(rest, &text[1..]),
        Some((c, rest)) => text.first() == Some(c) && glob_match(rest, &text[1..]),
    }
}

#[cfg(test)]
#[path = "keyring_tests.rs"]
mod tests;
