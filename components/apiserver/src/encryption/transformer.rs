//! Which provider chain a storage key uses, and the chain itself: upstream's prefix transformers.
//! The first provider of a resource's chain writes; every provider reads the values whose prefix is
//! its own (identity reads what has no `k8s:enc:` prefix). A value read by any provider but the
//! first is *stale*: the update path writes it again even when the object did not change, which is
//! how a key rotation re-encrypts (upstream's GuaranteedUpdate does the same).

use std::sync::Arc;

use super::config::{group_resource, Provider, ResourceEntry};
use crate::registry::ResourceSpec;

const ENCRYPTED: &[u8] = b"k8s:enc:";

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum TransformError {
    #[error("no matching prefix found")]
    NoMatchingPrefix,
    #[error("identity transformer tried to read encrypted data")]
    IdentityReadEncrypted,
    #[error("{0}")]
    Cipher(#[from] super::ciphers::CipherError),
}

/// One resource's providers in read order.
#[derive(Debug)]
pub struct Chain {
    providers: Vec<Provider>,
}

impl Chain {
    pub fn new(providers: Vec<Provider>) -> Chain {
        Chain { providers }
    }

    /// The stored form of `plain` under `key` (the first provider's).
    pub fn write(&self, key: &str, plain: Vec<u8>) -> Vec<u8> {
        match self.providers.first() {
            Some(Provider {
                prefix,
                cipher: Some(cipher),
            }) => {
                let sealed = cipher.seal(&plain, key.as_bytes());
                [prefix.as_slice(), &sealed].concat()
            }
            _ => plain,
        }
    }

    /// The plaintext of a stored value, and whether a provider other than the first read it.
    pub fn read(&self, key: &str, stored: Vec<u8>) -> Result<(Vec<u8>, bool), TransformError> {
        let mut identity_failed = false;
        for (i, p) in self.providers.iter().enumerate() {
            if !stored.starts_with(&p.prefix) {
                continue;
            }
            let stale = i != 0;
            match &p.cipher {
                None if stored.starts_with(ENCRYPTED) => identity_failed = true,
                None => return Ok((stored, stale)),
                Some(cipher) => {
                    let plain = cipher.open(&stored[p.prefix.len()..], key.as_bytes())?;
                    return Ok((plain, stale));
                }
            }
        }
        Err(if identity_failed {
            TransformError::IdentityReadEncrypted
        } else {
            TransformError::NoMatchingPrefix
        })
    }

    /// Whether a stored value was written by a provider other than the first (or cannot be read).
    pub fn is_stale(&self, stored: &[u8]) -> bool {
        match self.providers.iter().position(|p| {
            stored.starts_with(&p.prefix) && (p.cipher.is_some() || !stored.starts_with(ENCRYPTED))
        }) {
            Some(i) => i != 0,
            None => true,
        }
    }
}

/// Every resource's chain, found by the storage key: an exact resource first, then its group's
/// wildcard (`*.apps`, `*.` for core), then `*.*` — the precedence upstream gives them.
#[derive(Debug, Default)]
pub struct Transformers {
    /// Key roots (`/registry/secrets/`) of exactly named resources.
    exact: Vec<(String, Arc<Chain>)>,
    /// Key roots of resources covered by a group wildcard.
    group: Vec<(String, Arc<Chain>)>,
    all: Option<Arc<Chain>>,
}

/// The key roots of a group/resource: the built-in kinds' roots, else a custom resource's
/// `/registry/<group>/<plural>/` (core: `/registry/<plural>/`).
fn roots(specs: &[&ResourceSpec], group: &str, resource: &str) -> Vec<String> {
    let mut out: Vec<String> = specs
        .iter()
        .filter(|s| s.group == group && (resource == "*" || s.plural == resource))
        .map(|s| s.key_prefix(None))
        .collect();
    if resource == "*" {
        if !group.is_empty() {
            out.push(format!("/registry/{group}/"));
        }
    } else if out.is_empty() {
        out.push(match group {
            "" => format!("/registry/{resource}/"),
            g => format!("/registry/{g}/{resource}/"),
        });
    }
    out.sort();
    out.dedup();
    out
}

impl Transformers {
    pub fn new(entries: Vec<ResourceEntry>, specs: &[&ResourceSpec]) -> Transformers {
        let mut t = Transformers::default();
        for entry in entries {
            let chain = Arc::new(Chain::new(entry.providers));
            for res in &entry.resources {
                let (group, resource) = group_resource(res);
                if (group, resource) == ("*", "*") {
                    // The first `*.*` wins, as every other first match.
                    t.all.get_or_insert_with(|| chain.clone());
                    continue;
                }
                let tier = if resource == "*" {
                    &mut t.group
                } else {
                    &mut t.exact
                };
                for root in roots(specs, group, resource) {
                    if !tier.iter().any(|(r, _)| *r == root) {
                        tier.push((root, chain.clone()));
                    }
                }
            }
        }
        t
    }

    /// The chain for a storage key; None = stored as it is.
    pub fn chain(&self, key: &str) -> Option<&Chain> {
        fn longest<'a>(tier: &'a [(String, Arc<Chain>)], key: &str) -> Option<&'a Chain> {
            tier.iter()
                .filter(|(root, _)| key.starts_with(root.as_str()))
                .max_by_key(|(root, _)| root.len())
                .map(|(_, c)| c.as_ref())
        }
        longest(&self.exact, key)
            .or_else(|| longest(&self.group, key))
            .or(self.all.as_deref())
    }

    pub fn write(&self, key: &str, plain: Vec<u8>) -> Vec<u8> {
        match self.chain(key) {
            Some(chain) => chain.write(key, plain),
            None => plain,
        }
    }

    pub fn read(&self, key: &str, stored: Vec<u8>) -> Result<(Vec<u8>, bool), TransformError> {
        match self.chain(key) {
            Some(chain) => chain.read(key, stored),
            None => Ok((stored, false)),
        }
    }

    pub fn is_stale(&self, key: &str, stored: &[u8]) -> bool {
        self.chain(key).is_some_and(|c| c.is_stale(stored))
    }
}

#[cfg(test)]
mod tests {
    use super::super::config::parse;
    use super::*;

    const K1: &str = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";
    const K2: &str = "ZmVkY2JhOTg3NjU0MzIxMGZlZGNiYTk4NzY1NDMyMTA=";

    fn transformers(resources: &str, providers: &str) -> Transformers {
        let text = format!(
            "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: {resources}\n  providers: {providers}\n"
        );
        let specs = crate::registry::Registry::default().all();
        Transformers::new(parse("t", text.as_bytes()).unwrap(), &specs)
    }

    #[test]
    fn the_first_provider_writes_with_upstreams_prefix_and_others_read_stale() {
        let old = transformers(
            "[secrets]",
            &format!("[{{aesgcm: {{keys: [{{name: key1, secret: {K1}}}]}}}}]"),
        );
        let key = "/registry/secrets/default/s";
        let stored = old.write(key, b"{\"data\":1}".to_vec());
        assert!(stored.starts_with(b"k8s:enc:aesgcm:v1:key1:"));
        assert!(!stored
            .windows(10)
            .any(|w| w == b"{\"data\":1}"[..10].as_ref()));
        assert_eq!(
            old.read(key, stored.clone()).unwrap(),
            (b"{\"data\":1}".to_vec(), false)
        );
        assert!(!old.is_stale(key, &stored));

        // A second key listed first: writes with key2, still reads key1's values (stale).
        let new = transformers(
            "[secrets]",
            &format!("[{{aesgcm: {{keys: [{{name: key2, secret: {K2}}}, {{name: key1, secret: {K1}}}]}}}}]"),
        );
        assert_eq!(
            new.read(key, stored.clone()).unwrap(),
            (b"{\"data\":1}".to_vec(), true)
        );
        assert!(new.is_stale(key, &stored));
        assert!(new
            .write(key, b"x".to_vec())
            .starts_with(b"k8s:enc:aesgcm:v1:key2:"));
        // The etcd key is authenticated: the value under another key does not open.
        assert!(new.read("/registry/secrets/other/s", stored).is_err());
    }

    #[test]
    fn identity_reads_plaintext_only_and_unlisted_resources_stay_plain() {
        let t = transformers(
            "[secrets]",
            &format!("[{{secretbox: {{keys: [{{name: sb, secret: {K1}}}]}}}}, {{identity: {{}}}}]"),
        );
        let key = "/registry/secrets/ns/a";
        assert_eq!(t.read(key, b"{}".to_vec()).unwrap(), (b"{}".to_vec(), true));
        assert!(t
            .write(key, b"{}".to_vec())
            .starts_with(b"k8s:enc:secretbox:v1:sb:"));
        assert_eq!(t.write("/registry/configmaps/ns/a", b"{}".to_vec()), b"{}");
        let only_gcm = transformers(
            "[secrets]",
            &format!("[{{aesgcm: {{keys: [{{name: k, secret: {K1}}}]}}}}]"),
        );
        assert_eq!(
            only_gcm.read(key, b"{}".to_vec()),
            Err(TransformError::NoMatchingPrefix)
        );
        let only_identity = transformers("[secrets]", "[{identity: {}}]");
        assert_eq!(
            only_identity.read(key, b"k8s:enc:aescbc:v1:k:xxxx".to_vec()),
            Err(TransformError::IdentityReadEncrypted)
        );
    }

    #[test]
    fn wildcards_follow_upstreams_precedence() {
        let text = format!(
            "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:
- resources: ['*.*']
  providers: [{{aescbc: {{keys: [{{name: all, secret: {K1}}}]}}}}]
- resources: ['*.apps']
  providers: [{{aescbc: {{keys: [{{name: apps, secret: {K1}}}]}}}}]
- resources: [secrets, widgets.example.com]
  providers: [{{aescbc: {{keys: [{{name: exact, secret: {K1}}}]}}}}]
"
        );
        let specs = crate::registry::Registry::default().all();
        let t = Transformers::new(parse("t", text.as_bytes()).unwrap(), &specs);
        let prefix = |key: &str| {
            let out = t.write(key, b"{}".to_vec());
            // `k8s:enc:<provider>:v1:<key>:` — the fifth colon ends it (the random IV and ciphertext
            // after it may hold colons too).
            let end = out
                .iter()
                .enumerate()
                .filter(|(_, b)| **b == b':')
                .nth(4)
                .map_or(0, |(i, _)| i + 1);
            String::from_utf8_lossy(&out[..end]).into_owned()
        };
        assert_eq!(prefix("/registry/secrets/ns/a"), "k8s:enc:aescbc:v1:exact:");
        assert_eq!(
            prefix("/registry/example.com/widgets/ns/a"),
            "k8s:enc:aescbc:v1:exact:"
        );
        assert_eq!(
            prefix("/registry/deployments/ns/a"),
            "k8s:enc:aescbc:v1:apps:"
        );
        assert_eq!(
            prefix("/registry/configmaps/ns/a"),
            "k8s:enc:aescbc:v1:all:"
        );
    }
}
