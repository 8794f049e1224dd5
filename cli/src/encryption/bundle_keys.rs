//! A restore of a snapshot bundle taken before a rotation: the restored store holds Secrets sealed with
//! keys the state directory's configuration may have retired since. Those keys travel in the bundle
//! (its state directory's `pki/encryption-config.yaml`, or a controller bundle's `pki/<host>/` copy);
//! they are added back as read keys after the current ones, so every restored Secret reads, and the
//! current key keeps writing. `kiln encryption rotate` then re-seals them and drops the old keys again.

use std::path::{Path, PathBuf};

use super::keys::KeySet;
use super::steps::Files;
use super::EncryptionError;
use crate::bootstrap::phases::apiserver_config::ENCRYPTION_CONFIG;

/// The bundle's configuration: the operator's copy, else a controller's.
fn bundle_config(bundle_state: &Path) -> Option<PathBuf> {
    let pki = bundle_state.join("pki");
    let own = pki.join(ENCRYPTION_CONFIG);
    if own.exists() {
        return Some(own);
    }
    let mut hosts: Vec<PathBuf> = std::fs::read_dir(&pki)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join(ENCRYPTION_CONFIG))
        .filter(|p| p.exists())
        .collect();
    hosts.sort();
    hosts.into_iter().next()
}

/// Adds the bundle's keys that the current configuration lacks (as read keys) and writes it; the
/// labels of the keys added (empty: nothing changed). A key name in both with another secret is
/// refused: the two could not be told apart by the stored prefix.
pub fn adopt(files: &Files, bundle_state: &Path) -> Result<Vec<String>, EncryptionError> {
    let Some(from) = bundle_config(bundle_state) else {
        return Ok(vec![]);
    };
    if !files.config.exists() {
        return Ok(vec![]);
    }
    let text = std::fs::read_to_string(&from).map_err(|source| EncryptionError::Io {
        what: "reading",
        path: from.clone(),
        source,
    })?;
    let theirs = KeySet::parse(&text).map_err(|e| EncryptionError::At {
        path: from.clone(),
        source: Box::new(e),
    })?;
    let mut ours = files.keys()?;
    let mut added = vec![];
    for k in theirs.keys {
        match ours.get(&k.name) {
            Some(o) if *o == k => {}
            Some(_) => {
                return Err(EncryptionError::Inconsistent(format!(
                    "the bundle's encryption key {} differs from {}'s key of that name",
                    k.name,
                    files.config.display()
                )))
            }
            None => {
                added.push(k.label());
                ours.keys.push(k);
            }
        }
    }
    if theirs.identity && !ours.identity {
        ours.identity = true;
        added.push("identity".into());
    }
    if !added.is_empty() {
        files.write_keys(&ours)?;
    }
    Ok(added)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bootstrap::phases::apiserver_config::encryption_config_text;
    use crate::config::EncryptionProvider;

    const K1: &str = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";
    const K2: &str = "ZmVkY2JhOTg3NjU0MzIxMGZlZGNiYTk4NzY1NDMyMTA=";

    fn write(dir: &Path, rel: &str, keys: &[(&str, &str)]) {
        let keys: Vec<(String, String)> = keys
            .iter()
            .map(|(n, s)| (n.to_string(), s.to_string()))
            .collect();
        let p = dir.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, encryption_config_text(EncryptionProvider::Aesgcm, &keys)).unwrap();
    }

    #[test]
    fn retired_keys_of_an_older_bundle_come_back_as_read_keys() {
        let state = tempfile::tempdir().unwrap();
        let bundle = tempfile::tempdir().unwrap();
        let files = Files::in_state_dir(state.path());
        write(state.path(), "pki/encryption-config.yaml", &[("key2", K2)]);
        // A controller's bundle: its copy under pki/<host>/.
        write(
            bundle.path(),
            "pki/host1/encryption-config.yaml",
            &[("key1", K1)],
        );
        assert_eq!(adopt(&files, bundle.path()).unwrap(), ["aesgcm key1"]);
        let keys = files.keys().unwrap();
        let names: Vec<&str> = keys.keys.iter().map(|k| k.name.as_str()).collect();
        assert_eq!(names, ["key2", "key1"], "the current key still writes");
        // Again: nothing to add, nothing written.
        assert!(adopt(&files, bundle.path()).unwrap().is_empty());
        // A bundle made after the rotation, or without encryption: nothing changes.
        let same = tempfile::tempdir().unwrap();
        write(same.path(), "pki/encryption-config.yaml", &[("key2", K2)]);
        assert!(adopt(&files, same.path()).unwrap().is_empty());
        assert!(adopt(&files, tempfile::tempdir().unwrap().path())
            .unwrap()
            .is_empty());
        // The same name with another secret cannot be told apart in the store.
        let clash = tempfile::tempdir().unwrap();
        write(clash.path(), "pki/encryption-config.yaml", &[("key2", K1)]);
        let err = adopt(&files, clash.path()).unwrap_err().to_string();
        assert!(err.contains("encryption key key2 differs"), "{err}");
    }
}
