//! The keys of the cluster's EncryptionConfiguration as kiln writes it (`<stateDir>/pki/encryption-config.yaml`):
//! one `resources[]` entry for Secrets whose providers are keys in read order — the first writes —
//! then, optionally, `identity` (reads Secrets stored before encryption was turned on). Parsed from the
//! file and rendered back, so a rotation can move keys around and keep every secret it does not touch.
//! Also: which key a stored value was sealed with, from upstream's `k8s:enc:<provider>:v1:<key>:` prefix.

use std::fmt;

use base64::Engine;
use rand::RngCore;

use super::EncryptionError;
use crate::config::EncryptionProvider;

/// One provider key. Its secret never reaches `Debug` output or logs.
#[derive(Clone, PartialEq, Eq)]
pub struct Key {
    pub provider: EncryptionProvider,
    pub name: String,
    /// base64 of the key's bytes, as in the file.
    pub secret: String,
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{} (secret redacted)",
            self.provider.name(),
            self.name
        )
    }
}

impl Key {
    /// A new random 32-byte key (every provider takes 32 bytes).
    pub fn generate(provider: EncryptionProvider, name: &str) -> Key {
        let mut bytes = [0u8; 32];
        rand::rng().fill_bytes(&mut bytes);
        Key {
            provider,
            name: name.to_string(),
            secret: base64::engine::general_purpose::STANDARD.encode(bytes),
        }
    }

    /// `aesgcm key2`, as messages name a key.
    pub fn label(&self) -> String {
        format!("{} {}", self.provider.name(), self.name)
    }
}

/// The Secrets' providers in read order (the first key writes), and whether identity follows them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeySet {
    pub keys: Vec<Key>,
    pub identity: bool,
}

fn provider_named(name: &str) -> Option<EncryptionProvider> {
    [
        EncryptionProvider::Aesgcm,
        EncryptionProvider::Aescbc,
        EncryptionProvider::Secretbox,
    ]
    .into_iter()
    .find(|p| p.name() == name)
}

impl KeySet {
    /// Reads the file kiln wrote; anything else (other resources, kms, identity before a key) is
    /// refused rather than guessed at: a rotation must not drop a key it did not understand.
    pub fn parse(text: &str) -> Result<KeySet, EncryptionError> {
        let bad = |why: &str| EncryptionError::Config(why.to_string());
        let v: serde_json::Value =
            serde_norway::from_str(text).map_err(|e| bad(&format!("not YAML: {e}")))?;
        if v["kind"] != "EncryptionConfiguration" {
            return Err(bad("kind is not EncryptionConfiguration"));
        }
        let resources = v["resources"]
            .as_array()
            .ok_or_else(|| bad("no resources"))?;
        let [entry] = resources.as_slice() else {
            return Err(bad(
                "more than one resources entry (kiln writes one, for secrets)",
            ));
        };
        if entry["resources"] != serde_json::json!(["secrets"]) {
            return Err(bad("the resources entry is not [secrets]"));
        }
        let providers = entry["providers"]
            .as_array()
            .ok_or_else(|| bad("no providers"))?;
        let mut set = KeySet {
            keys: vec![],
            identity: false,
        };
        for p in providers {
            let map = p
                .as_object()
                .filter(|m| m.len() == 1)
                .ok_or_else(|| bad("a provider entry is not one provider"))?;
            let (name, body) = map.iter().next().expect("one entry");
            if set.identity {
                return Err(bad("a provider after identity"));
            }
            if name == "identity" {
                set.identity = true;
                continue;
            }
            let provider = provider_named(name)
                .ok_or_else(|| bad(&format!("provider {name} is not one kiln manages")))?;
            for k in body["keys"]
                .as_array()
                .ok_or_else(|| bad(&format!("{name} has no keys")))?
            {
                let (Some(key_name), Some(secret)) = (k["name"].as_str(), k["secret"].as_str())
                else {
                    return Err(bad(&format!("a key of {name} lacks its name or secret")));
                };
                if set.get(key_name).is_some() {
                    return Err(bad(&format!("key name {key_name} appears twice")));
                }
                set.keys.push(Key {
                    provider,
                    name: key_name.to_string(),
                    secret: secret.to_string(),
                });
            }
        }
        if set.keys.is_empty() {
            return Err(bad("no encryption key"));
        }
        Ok(set)
    }

    /// The file's text: consecutive keys of one provider share its entry, so the read order is kept.
    pub fn render(&self) -> String {
        let mut providers = String::new();
        let mut last: Option<EncryptionProvider> = None;
        for k in &self.keys {
            if last != Some(k.provider) {
                providers.push_str(&format!(
                    "      - {}:\n          keys:\n",
                    k.provider.name()
                ));
                last = Some(k.provider);
            }
            providers.push_str(&format!(
                "            - name: {}\n              secret: {}\n",
                k.name, k.secret
            ));
        }
        if self.identity {
            providers.push_str("      - identity: {}\n");
        }
        format!(
            "# managed by kiln: the key that encrypts this cluster's Secrets in the store. Keep it\n\
             # with the cluster's PKI; without it the Secrets of a restored snapshot cannot be read.\n\
             apiVersion: apiserver.config.k8s.io/v1\n\
             kind: EncryptionConfiguration\n\
             resources:\n  - resources:\n      - secrets\n    providers:\n{providers}"
        )
    }

    /// The key that writes.
    pub fn writer(&self) -> Option<&Key> {
        self.keys.first()
    }

    pub fn get(&self, name: &str) -> Option<&Key> {
        self.keys.iter().find(|k| k.name == name)
    }

    /// `key<N+1>` for the highest `key<N>` in use (`key1` is what init makes).
    pub fn next_name(&self) -> String {
        let n = self
            .keys
            .iter()
            .filter_map(|k| k.name.strip_prefix("key")?.parse::<u64>().ok())
            .max()
            .unwrap_or(0);
        format!("key{}", n + 1)
    }

    /// A copy without `name`.
    pub fn without(&self, name: &str) -> KeySet {
        KeySet {
            keys: self
                .keys
                .iter()
                .filter(|k| k.name != name)
                .cloned()
                .collect(),
            identity: self.identity,
        }
    }
}

/// What sealed a stored value.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Sealed {
    /// `k8s:enc:<provider>:v1:<name>:`.
    Key { provider: String, name: String },
    /// No `k8s:enc:` prefix: stored as it is (identity).
    Plain,
    /// A `k8s:enc:` prefix kiln cannot name.
    Unknown,
}

impl Sealed {
    pub fn of(value: &[u8]) -> Sealed {
        let Some(rest) = value.strip_prefix(b"k8s:enc:") else {
            return Sealed::Plain;
        };
        // provider, version, key name: the fields before the ciphertext, which may hold colons.
        let mut parts = rest.splitn(4, |b| *b == b':');
        let (Some(provider), Some(b"v1"), Some(name), Some(_)) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Sealed::Unknown;
        };
        match (std::str::from_utf8(provider), std::str::from_utf8(name)) {
            (Ok(p), Ok(n)) if !p.is_empty() && !n.is_empty() => Sealed::Key {
                provider: p.to_string(),
                name: n.to_string(),
            },
            _ => Sealed::Unknown,
        }
    }

    /// Whether `key` sealed it.
    pub fn is(&self, key: &Key) -> bool {
        matches!(self, Sealed::Key { provider, name } if *provider == key.provider.name() && *name == key.name)
    }
}

impl fmt::Display for Sealed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Sealed::Key { provider, name } => write!(f, "{provider} {name}"),
            Sealed::Plain => f.write_str("identity (not encrypted)"),
            Sealed::Unknown => f.write_str("an unknown provider"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bootstrap::phases::apiserver_config::encryption_config_text;

    fn key(p: EncryptionProvider, name: &str, secret: &str) -> Key {
        Key {
            provider: p,
            name: name.into(),
            secret: secret.into(),
        }
    }

    #[test]
    fn inits_file_parses_and_renders_back_to_the_same_text() {
        let text = encryption_config_text(
            EncryptionProvider::Secretbox,
            &[("key1".into(), "c2VjcmV0".into())],
        );
        let set = KeySet::parse(&text).unwrap();
        assert_eq!(
            set,
            KeySet {
                keys: vec![key(EncryptionProvider::Secretbox, "key1", "c2VjcmV0")],
                identity: true
            }
        );
        assert_eq!(set.render(), text);
        assert_eq!(set.next_name(), "key2");
    }

    #[test]
    fn mixed_providers_keep_their_read_order() {
        let set = KeySet {
            keys: vec![
                key(EncryptionProvider::Aescbc, "key3", "Mw=="),
                key(EncryptionProvider::Aesgcm, "key2", "Mg=="),
                key(EncryptionProvider::Aesgcm, "key1", "MQ=="),
            ],
            identity: false,
        };
        let text = set.render();
        assert_eq!(text.matches("- aesgcm:").count(), 1, "{text}");
        assert!(!text.contains("identity"));
        assert_eq!(KeySet::parse(&text).unwrap(), set);
        assert_eq!(set.writer().unwrap().name, "key3");
        assert_eq!(set.next_name(), "key4");
        assert_eq!(set.without("key2").keys.len(), 2);
        // The secret stays out of Debug output.
        assert!(!format!("{set:?}").contains("Mw=="));
    }

    #[test]
    fn what_kiln_did_not_write_is_refused() {
        let base = "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\n";
        for (body, why) in [
            ("resources: [{resources: [secrets], providers: [{kms: {name: x}}]}]", "kms is not one kiln manages"),
            ("resources: [{resources: [secrets, configmaps], providers: [{identity: {}}]}]", "not [secrets]"),
            ("resources: [{resources: [secrets], providers: [{identity: {}}, {aesgcm: {keys: [{name: a, secret: b}]}}]}]", "after identity"),
            ("resources: [{resources: [secrets], providers: [{identity: {}}]}]", "no encryption key"),
            ("resources: [{resources: [secrets], providers: [{aesgcm: {keys: [{name: a, secret: b}]}}, {aescbc: {keys: [{name: a, secret: c}]}}]}]", "appears twice"),
        ] {
            let err = KeySet::parse(&format!("{base}{body}\n")).unwrap_err().to_string();
            assert!(err.contains(why), "{body}: {err}");
        }
    }

    #[test]
    fn the_stored_prefix_names_the_key() {
        let k2 = key(EncryptionProvider::Aesgcm, "key2", "");
        let s = Sealed::of(b"k8s:enc:aesgcm:v1:key2:\x00:ab:");
        assert!(s.is(&k2));
        assert_eq!(s.to_string(), "aesgcm key2");
        assert!(!Sealed::of(b"k8s:enc:aescbc:v1:key2:xx").is(&k2));
        assert_eq!(Sealed::of(b"{\"kind\":\"Secret\"}"), Sealed::Plain);
        assert_eq!(Sealed::of(b"k8s:enc:kms:v2:x"), Sealed::Unknown);
        assert_eq!(Sealed::of(b"k8s:enc:aesgcm:v1:"), Sealed::Unknown);
    }
}
