//! `kiln encryption rotate` as data: upstream's "Rotating a decryption key" ([`STEPS`]), the walker
//! that takes a rotation through them, and the record of how far it got
//! (`<stateDir>/encryption-rotation.json`), so an interrupted rotation resumes where it stopped.
//!
//! Every step is idempotent: its configuration is computed from the file as it is (a re-run writes the
//! same text, and the new key's secret is made once, by `add`), the rollout installs only what differs
//! and waits for each API server anyway, the re-encrypt rewrites only what is still sealed with another
//! key. The record moves to the next step only once a step is done, and goes when the rotation ends.
//! Side effects on the cluster go through [`Effects`]; the files are the state directory's.

use std::path::{Path, PathBuf};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use super::keys::{Key, KeySet, Sealed};
use super::EncryptionError;
use crate::config::EncryptionProvider;

/// The rotation's steps, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Step {
    Add,
    Promote,
    Reencrypt,
    Retire,
}

/// What a step does after writing its configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Install the configuration on each controller and restart its API server, one at a time,
    /// each ready again (/readyz) before the next.
    RollOut,
    /// Rewrite every Secret not sealed with the new key, then check that none is left.
    Reencrypt,
}

pub struct StepSpec {
    pub step: Step,
    pub name: &'static str,
    /// The configuration this step runs with, from the one before and the new key.
    pub config: fn(&KeySet, &Key) -> KeySet,
    pub action: Action,
    /// Refuse the step unless every Secret is already sealed with the new key (checked before its
    /// configuration is written): what drops a key must not strand a Secret under it.
    pub all_sealed_first: bool,
    pub summary: &'static str,
}

/// The new key right after the one that writes: every API server can read it, none writes it yet.
fn add(keys: &KeySet, new: &Key) -> KeySet {
    let mut out = keys.without(&new.name);
    out.keys.insert(out.keys.len().min(1), new.clone());
    out
}

/// The new key first: it writes; the old ones still read.
fn promote(keys: &KeySet, new: &Key) -> KeySet {
    let mut out = keys.without(&new.name);
    out.keys.insert(0, new.clone());
    out
}

fn unchanged(keys: &KeySet, _: &Key) -> KeySet {
    keys.clone()
}

/// Only the new key (and identity where the file had it, as init writes it).
fn retire(keys: &KeySet, new: &Key) -> KeySet {
    KeySet {
        keys: vec![new.clone()],
        identity: keys.identity,
    }
}

/// Upstream's procedure ("Encrypting Confidential Data at Rest", rotating a decryption key).
pub const STEPS: &[StepSpec] = &[
    StepSpec {
        step: Step::Add,
        name: "add",
        config: add,
        action: Action::RollOut,
        all_sealed_first: false,
        summary: "add the new key as the second key (it reads, the current key still writes); restart each API server",
    },
    StepSpec {
        step: Step::Promote,
        name: "promote",
        config: promote,
        action: Action::RollOut,
        all_sealed_first: false,
        summary: "make the new key the first (it writes); restart each API server",
    },
    StepSpec {
        step: Step::Reencrypt,
        name: "re-encrypt",
        config: unchanged,
        action: Action::Reencrypt,
        all_sealed_first: false,
        summary: "replace every Secret not sealed with the new key, unchanged (the API server writes a stale value again); check none is left",
    },
    StepSpec {
        step: Step::Retire,
        name: "retire",
        config: retire,
        action: Action::RollOut,
        all_sealed_first: true,
        summary: "remove the old keys; restart each API server",
    },
];

fn spec(step: Step) -> &'static StepSpec {
    STEPS
        .iter()
        .find(|s| s.step == step)
        .expect("every step is in STEPS")
}

/// The record of a rotation under way: the step to do next and the key being rotated in (its name
/// only; the secret lives in the configuration file alone).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Rotation {
    pub step: Step,
    pub new_key: String,
    pub provider: EncryptionProvider,
}

/// The state directory's two files.
#[derive(Debug, Clone)]
pub struct Files {
    /// `<stateDir>/pki/encryption-config.yaml`.
    pub config: PathBuf,
    /// `<stateDir>/encryption-rotation.json`.
    pub rotation: PathBuf,
}

pub const ROTATION_FILE: &str = "encryption-rotation.json";

fn read_err(path: &Path) -> impl FnOnce(std::io::Error) -> EncryptionError + '_ {
    move |source| EncryptionError::Io {
        what: "reading",
        path: path.to_path_buf(),
        source,
    }
}

impl Files {
    pub fn in_state_dir(state_dir: &Path) -> Files {
        Files {
            config: state_dir
                .join("pki")
                .join(crate::bootstrap::phases::apiserver_config::ENCRYPTION_CONFIG),
            rotation: state_dir.join(ROTATION_FILE),
        }
    }

    pub fn keys(&self) -> Result<KeySet, EncryptionError> {
        let text = std::fs::read_to_string(&self.config).map_err(read_err(&self.config))?;
        KeySet::parse(&text).map_err(|e| EncryptionError::At {
            path: self.config.clone(),
            source: Box::new(e),
        })
    }

    /// Writes the configuration (temp file + rename, 0600) when its text changes. The file's mtime
    /// moves on even within the clock's granularity: the run's hash cache is keyed by (size, mtime),
    /// and two configurations of one rotation can have the same size.
    pub fn write_keys(&self, keys: &KeySet) -> Result<bool, EncryptionError> {
        let text = keys.render();
        let before = std::fs::read_to_string(&self.config).ok();
        if before.as_deref() == Some(text.as_str()) {
            return Ok(false);
        }
        let old_mtime = std::fs::metadata(&self.config)
            .and_then(|m| m.modified())
            .ok();
        kiln_pki::files::write_atomic(&self.config, text.as_bytes(), 0o600)
            .map_err(|e| EncryptionError::Write(e.to_string()))?;
        if let Some(old) = old_mtime {
            let f = std::fs::File::options()
                .append(true)
                .open(&self.config)
                .map_err(read_err(&self.config))?;
            let now = f
                .metadata()
                .and_then(|m| m.modified())
                .map_err(read_err(&self.config))?;
            if now <= old {
                f.set_modified(old + std::time::Duration::from_millis(1))
                    .map_err(read_err(&self.config))?;
            }
        }
        Ok(true)
    }

    pub fn rotation(&self) -> Result<Option<Rotation>, EncryptionError> {
        match std::fs::read(&self.rotation) {
            Ok(b) => serde_json::from_slice(&b)
                .map(Some)
                .map_err(|e| EncryptionError::Write(format!("{}: {e}", self.rotation.display()))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(read_err(&self.rotation)(e)),
        }
    }

    /// The record, written with temp file + rename (a crash leaves the old record or the new one).
    pub fn set_rotation(&self, r: Option<&Rotation>) -> Result<(), EncryptionError> {
        match r {
            Some(r) => {
                let text = serde_json::to_vec_pretty(r).expect("a rotation serializes");
                kiln_pki::files::write_atomic(&self.rotation, &text, 0o600)
                    .map_err(|e| EncryptionError::Write(e.to_string()))
            }
            None => match std::fs::remove_file(&self.rotation) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(EncryptionError::Io {
                    what: "removing",
                    path: self.rotation.clone(),
                    source: e,
                }),
                _ => Ok(()),
            },
        }
    }
}

/// How a replace of one Secret ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rewritten {
    Replaced,
    /// Deleted meanwhile: nothing to re-encrypt.
    Gone,
}

/// The rotation's side effects on the cluster.
#[async_trait]
pub trait Effects: Send + Sync {
    /// Install the state directory's configuration on controller `host` and restart its API server
    /// (its manifest's config hash changes); Ok once it is Ready and answers /readyz. `Ok` says what
    /// was done.
    async fn roll_out(&self, host: &str) -> Result<String, String>;
    /// Every Secret's storage key (`/registry/secrets/<namespace>/<name>`) and what sealed its value.
    async fn census(&self) -> Result<Vec<(String, Sealed)>, String>;
    /// Replace the Secret with itself through the API (upstream's `kubectl get … | kubectl replace`).
    async fn rewrite(&self, namespace: &str, name: &str) -> Result<Rewritten, String>;
}

/// Where the walk starts: the record's step, or a new rotation to `next_name` with `provider`.
pub fn start(
    record: Option<Rotation>,
    keys: &KeySet,
    provider: EncryptionProvider,
) -> (Rotation, bool) {
    match record {
        Some(r) => (r, true),
        None => (
            Rotation {
                step: Step::Add,
                new_key: keys.next_name(),
                provider,
            },
            false,
        ),
    }
}

/// The steps left from `at`, with the hosts each restarts, as `--dry-run` prints them.
pub fn plan(at: Step, controllers: &[String]) -> Vec<String> {
    STEPS
        .iter()
        .skip_while(|s| s.step != at)
        .map(|s| {
            let hosts = match s.action {
                Action::RollOut if skip_rollout(s.step, controllers) => {
                    " (one API server: its restart comes with the next step)".to_string()
                }
                Action::RollOut => format!(" ({})", controllers.join(", ")),
                Action::Reencrypt => String::new(),
            };
            format!("{}: {}{hosts}", s.name, s.summary)
        })
        .collect()
}

/// With one API server nothing else needs to read the new key before it writes: upstream lets that
/// restart go.
fn skip_rollout(step: Step, controllers: &[String]) -> bool {
    step == Step::Add && controllers.len() <= 1
}

fn storage_name(key: &str) -> Option<(&str, &str)> {
    key.strip_prefix("/registry/secrets/")?.split_once('/')
}

/// Secrets not sealed with `key`, as (storage key, what sealed them).
fn not_sealed_with<'a>(census: &'a [(String, Sealed)], key: &Key) -> Vec<&'a (String, Sealed)> {
    census.iter().filter(|(_, s)| !s.is(key)).collect()
}

fn left_over(left: &[&(String, Sealed)]) -> String {
    let shown: Vec<String> = left
        .iter()
        .take(5)
        .map(|(k, s)| format!("{k} ({s})"))
        .collect();
    format!(
        "{} Secret(s) not sealed with the new key: {}{}",
        left.len(),
        shown.join(", "),
        if left.len() > 5 { ", …" } else { "" }
    )
}

async fn reencrypt(
    effects: &dyn Effects,
    new: &Key,
    say: &(dyn Fn(&str) + Sync),
) -> Result<String, EncryptionError> {
    let census = effects.census().await.map_err(EncryptionError::Cluster)?;
    let stale = not_sealed_with(&census, new);
    let (mut replaced, mut gone) = (0, 0);
    for (key, sealed) in &stale {
        let Some((ns, name)) = storage_name(key) else {
            return Err(EncryptionError::Cluster(format!(
                "{key}: not a Secret's storage key"
            )));
        };
        match effects.rewrite(ns, name).await {
            Ok(Rewritten::Replaced) => replaced += 1,
            Ok(Rewritten::Gone) => gone += 1,
            Err(e) => {
                return Err(EncryptionError::Cluster(format!(
                    "replacing Secret {ns}/{name} (sealed with {sealed}): {e}"
                )))
            }
        }
        if (replaced + gone) % 100 == 0 {
            say(&format!(
                "re-encrypt: {}/{} Secrets",
                replaced + gone,
                stale.len()
            ));
        }
    }
    let after = effects.census().await.map_err(EncryptionError::Cluster)?;
    let left = not_sealed_with(&after, new);
    if !left.is_empty() {
        return Err(EncryptionError::NotAllSealed(left_over(&left)));
    }
    Ok(format!(
        "{replaced} Secret(s) replaced{}; all {} sealed with {}",
        if gone > 0 {
            format!(", {gone} deleted meanwhile")
        } else {
            String::new()
        },
        after.len(),
        new.label()
    ))
}

/// Takes the rotation from the recorded step (or a new one) to its end. `provider` is cluster.yaml's:
/// the new key is of that provider, so changing it there and rotating moves the Secrets to it.
pub async fn rotate(
    effects: &dyn Effects,
    files: &Files,
    provider: EncryptionProvider,
    controllers: &[String],
    say: &(dyn Fn(&str) + Sync),
) -> Result<Rotation, EncryptionError> {
    let keys = files.keys()?;
    let (mut rotation, resumed) = start(files.rotation()?, &keys, provider);
    if resumed {
        say(&format!(
            "resuming the rotation to {} at step {}",
            rotation.new_key,
            spec(rotation.step).name
        ));
    } else {
        files.set_rotation(Some(&rotation))?;
        say(&format!(
            "rotating to a new {} key {} (the record is {})",
            rotation.provider.name(),
            rotation.new_key,
            files.rotation.display()
        ));
    }
    let done = rotation.clone();
    let mut at = STEPS.iter().position(|s| s.step == rotation.step);
    while let Some(i) = at {
        let s = &STEPS[i];
        let keys = files.keys()?;
        // Only `add` brings the key in; a later step without it would write with a key no other API
        // server has (a configuration restored from an older copy, say).
        let new = match keys.get(&rotation.new_key) {
            Some(k) => k.clone(),
            None if s.step == Step::Add => Key::generate(rotation.provider, &rotation.new_key),
            None => {
                return Err(EncryptionError::Inconsistent(format!(
                    "{} records step {} of a rotation to {}, but {} has no key {}; remove the record to start a new rotation",
                    files.rotation.display(),
                    s.name,
                    rotation.new_key,
                    files.config.display(),
                    rotation.new_key
                )))
            }
        };
        if s.all_sealed_first {
            let census = effects.census().await.map_err(EncryptionError::Cluster)?;
            let left = not_sealed_with(&census, &new);
            if !left.is_empty() {
                return Err(EncryptionError::NotAllSealed(left_over(&left)));
            }
        }
        let next = (s.config)(&keys, &new);
        if files.write_keys(&next)? {
            let order: Vec<String> = next.keys.iter().map(Key::label).collect();
            say(&format!(
                "{}: {} now reads {}{} ({} writes)",
                s.name,
                files.config.display(),
                order.join(", "),
                if next.identity { ", identity" } else { "" },
                order[0]
            ));
        }
        match s.action {
            Action::RollOut if skip_rollout(s.step, controllers) => say(&format!(
                "{}: one API server: its restart comes with the next step",
                s.name
            )),
            Action::RollOut => {
                for h in controllers {
                    let detail = effects.roll_out(h).await.map_err(|why| {
                        EncryptionError::Cluster(format!(
                            "step {}: restarting the API server on {h}: {why}; re-run to resume",
                            s.name
                        ))
                    })?;
                    say(&format!("{}: {h}: {detail}", s.name));
                }
            }
            Action::Reencrypt => {
                let detail = reencrypt(effects, &new, say).await?;
                say(&format!("{}: {detail}", s.name));
            }
        }
        at = (i + 1 < STEPS.len()).then_some(i + 1);
        match at {
            Some(n) => {
                rotation.step = STEPS[n].step;
                files.set_rotation(Some(&rotation))?;
            }
            None => files.set_rotation(None)?,
        }
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::sync::Mutex;

    /// A cluster in memory: Secrets by storage key → the key that sealed them; the API servers'
    /// configurations as rolled out. Records every call; fails the calls it is told to.
    struct Recorder {
        files: Files,
        calls: Mutex<Vec<String>>,
        secrets: Mutex<BTreeMap<String, Sealed>>,
        fail: Mutex<Vec<String>>,
        /// What each host's API server runs with (the config's writer), after a roll-out.
        writer: Mutex<BTreeMap<String, String>>,
    }

    impl Recorder {
        fn new(files: Files, secrets: &[(&str, &str)]) -> Recorder {
            Recorder {
                files,
                calls: Mutex::default(),
                secrets: Mutex::new(
                    secrets
                        .iter()
                        .map(|(k, key)| {
                            let sealed = match *key {
                                "plain" => Sealed::Plain,
                                n => Sealed::Key {
                                    provider: "aesgcm".into(),
                                    name: n.into(),
                                },
                            };
                            (format!("/registry/secrets/{k}"), sealed)
                        })
                        .collect(),
                ),
                fail: Mutex::default(),
                writer: Mutex::default(),
            }
        }
        fn calls(&self) -> Vec<String> {
            std::mem::take(&mut *self.calls.lock().unwrap())
        }
        fn failing(&self, call: &str) {
            self.fail.lock().unwrap().push(call.into());
        }
        /// Records `<step> <call>` (the step from the record on disk, as the walk left it).
        fn record(&self, call: String) -> Result<(), String> {
            let step = match self.files.rotation().unwrap() {
                Some(r) => spec(r.step).name,
                None => "-",
            };
            let call = format!("{step} {call}");
            self.calls.lock().unwrap().push(call.clone());
            let mut fail = self.fail.lock().unwrap();
            match fail.iter().position(|f| *f == call) {
                Some(i) => {
                    fail.remove(i);
                    Err(format!("{call} broke"))
                }
                None => Ok(()),
            }
        }
    }

    #[async_trait]
    impl Effects for Recorder {
        async fn roll_out(&self, host: &str) -> Result<String, String> {
            self.record(format!("roll-out {host}"))?;
            let keys = self.files.keys().map_err(|e| e.to_string())?;
            let w = keys.writer().unwrap();
            self.writer
                .lock()
                .unwrap()
                .insert(host.into(), w.name.clone());
            Ok("ready".into())
        }
        async fn census(&self) -> Result<Vec<(String, Sealed)>, String> {
            self.record("census".into())?;
            Ok(self.secrets.lock().unwrap().clone().into_iter().collect())
        }
        async fn rewrite(&self, namespace: &str, name: &str) -> Result<Rewritten, String> {
            self.record(format!("rewrite {namespace}/{name}"))?;
            // The first API server writes (the walk only re-encrypts once every one runs the new key).
            let writer = self
                .writer
                .lock()
                .unwrap()
                .values()
                .next()
                .cloned()
                .unwrap();
            self.secrets.lock().unwrap().insert(
                format!("/registry/secrets/{namespace}/{name}"),
                Sealed::Key {
                    provider: "aesgcm".into(),
                    name: writer,
                },
            );
            Ok(Rewritten::Replaced)
        }
    }

    const K1: &str = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";

    fn setup() -> (tempfile::TempDir, Files) {
        let dir = tempfile::tempdir().unwrap();
        let files = Files::in_state_dir(dir.path());
        let text = crate::bootstrap::phases::apiserver_config::encryption_config_text(
            EncryptionProvider::Aesgcm,
            &[("key1".into(), K1.into())],
        );
        std::fs::create_dir_all(files.config.parent().unwrap()).unwrap();
        std::fs::write(&files.config, text).unwrap();
        (dir, files)
    }

    fn hosts(n: &[&str]) -> Vec<String> {
        n.iter().map(|s| s.to_string()).collect()
    }

    fn quiet(_: &str) {}

    /// The configuration's keys as `name` in read order, `+identity` at the end when there.
    fn order(files: &Files) -> String {
        let k = files.keys().unwrap();
        let mut v: Vec<String> = k.keys.iter().map(|k| k.name.clone()).collect();
        if k.identity {
            v.push("identity".into());
        }
        v.join(",")
    }

    #[tokio::test]
    async fn a_rotation_walks_upstreams_steps_host_by_host() {
        let (_d, files) = setup();
        let r = Recorder::new(
            files.clone(),
            &[("default/a", "key1"), ("kube-system/b", "plain")],
        );
        let c = hosts(&["c1", "c2"]);
        let done = rotate(&r, &files, EncryptionProvider::Aesgcm, &c, &quiet)
            .await
            .unwrap();
        assert_eq!(done.new_key, "key2");
        assert_eq!(
            r.calls(),
            [
                "add roll-out c1",
                "add roll-out c2",
                "promote roll-out c1",
                "promote roll-out c2",
                "re-encrypt census",
                "re-encrypt rewrite default/a",
                "re-encrypt rewrite kube-system/b",
                "re-encrypt census",
                "retire census",
                "retire roll-out c1",
                "retire roll-out c2",
            ]
        );
        assert_eq!(order(&files), "key2,identity");
        // The old secret is gone from the file, the new one kept; no record is left.
        let text = std::fs::read_to_string(&files.config).unwrap();
        assert!(!text.contains(K1));
        assert!(files.rotation().unwrap().is_none());
        assert!(r.secrets.lock().unwrap().values().all(|s| s
            == &Sealed::Key {
                provider: "aesgcm".into(),
                name: "key2".into()
            }));
    }

    #[tokio::test]
    async fn the_configuration_after_each_step() {
        let (_d, files) = setup();
        let r = Recorder::new(files.clone(), &[("default/a", "key1")]);
        let c = hosts(&["c1", "c2"]);
        let mut seen = vec![];
        for step in [
            "add roll-out c1",
            "promote roll-out c2",
            "re-encrypt census",
            "retire census",
        ] {
            r.failing(step);
            let _ = rotate(&r, &files, EncryptionProvider::Aesgcm, &c, &quiet).await;
            seen.push((files.rotation().unwrap().map(|r| r.step), order(&files)));
        }
        rotate(&r, &files, EncryptionProvider::Aesgcm, &c, &quiet)
            .await
            .unwrap();
        seen.push((files.rotation().unwrap().map(|r| r.step), order(&files)));
        assert_eq!(
            seen,
            [
                (Some(Step::Add), "key1,key2,identity".to_string()),
                (Some(Step::Promote), "key2,key1,identity".to_string()),
                (Some(Step::Reencrypt), "key2,key1,identity".to_string()),
                // The re-encrypt passed; the census before retire failed: nothing dropped yet.
                (Some(Step::Retire), "key2,key1,identity".to_string()),
                (None, "key2,identity".to_string()),
            ]
        );
    }

    #[tokio::test]
    async fn an_interrupted_rollout_resumes_at_its_step_with_the_same_key() {
        let (_d, files) = setup();
        let r = Recorder::new(files.clone(), &[("default/a", "key1")]);
        let c = hosts(&["c1", "c2", "c3"]);
        r.failing("add roll-out c2");
        let err = rotate(&r, &files, EncryptionProvider::Aesgcm, &c, &quiet)
            .await
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("step add: restarting the API server on c2: add roll-out c2 broke; re-run to resume"),
            "{err}"
        );
        let secret = files.keys().unwrap().get("key2").unwrap().secret.clone();
        assert_eq!(r.calls(), ["add roll-out c1", "add roll-out c2"]);
        // The re-run starts the add step again (c1's install is a no-op there), keeps key2's secret.
        rotate(&r, &files, EncryptionProvider::Aesgcm, &c, &quiet)
            .await
            .unwrap();
        let calls = r.calls();
        assert_eq!(
            &calls[..6],
            [
                "add roll-out c1",
                "add roll-out c2",
                "add roll-out c3",
                "promote roll-out c1",
                "promote roll-out c2",
                "promote roll-out c3"
            ]
        );
        assert_eq!(files.keys().unwrap().get("key2").unwrap().secret, secret);
        assert_eq!(order(&files), "key2,identity");
    }

    #[tokio::test]
    async fn a_secret_left_under_the_old_key_stops_the_rotation_before_the_key_goes() {
        let (_d, files) = setup();
        let r = Recorder::new(files.clone(), &[("default/a", "key1")]);
        let c = hosts(&["c1"]);
        // The rewrite "succeeds" but a Secret stays behind (say, one that no API server reads).
        r.secrets
            .lock()
            .unwrap()
            .insert("/registry/secrets/x/stuck".into(), Sealed::Unknown);
        r.failing("re-encrypt rewrite x/stuck");
        let err = rotate(&r, &files, EncryptionProvider::Aesgcm, &c, &quiet)
            .await
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("replacing Secret x/stuck (sealed with an unknown provider): re-encrypt rewrite x/stuck broke"),
            "{err}"
        );
        assert_eq!(files.rotation().unwrap().unwrap().step, Step::Reencrypt);
        assert_eq!(order(&files), "key2,key1,identity");
        // A hand-made record at retire with the Secret still stuck: refused, the old key kept.
        files
            .set_rotation(Some(&Rotation {
                step: Step::Retire,
                new_key: "key2".into(),
                provider: EncryptionProvider::Aesgcm,
            }))
            .unwrap();
        let err = rotate(&r, &files, EncryptionProvider::Aesgcm, &c, &quiet)
            .await
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("1 Secret(s) not sealed with the new key: /registry/secrets/x/stuck"),
            "{err}"
        );
        assert_eq!(order(&files), "key2,key1,identity");
    }

    #[tokio::test]
    async fn one_api_server_skips_the_add_restart_and_a_new_provider_is_cluster_yamls() {
        let (_d, files) = setup();
        let r = Recorder::new(files.clone(), &[]);
        rotate(
            &r,
            &files,
            EncryptionProvider::Secretbox,
            &hosts(&["c1"]),
            &quiet,
        )
        .await
        .unwrap();
        assert_eq!(
            r.calls(),
            [
                "promote roll-out c1",
                "re-encrypt census",
                "re-encrypt census",
                "retire census",
                "retire roll-out c1"
            ]
        );
        let k = files.keys().unwrap();
        assert_eq!(k.writer().unwrap().label(), "secretbox key2");
        // A second rotation makes key3.
        rotate(
            &r,
            &files,
            EncryptionProvider::Secretbox,
            &hosts(&["c1"]),
            &quiet,
        )
        .await
        .unwrap();
        assert_eq!(order(&files), "key3,identity");
    }

    #[tokio::test]
    async fn a_record_whose_key_is_missing_is_refused() {
        let (_d, files) = setup();
        files
            .set_rotation(Some(&Rotation {
                step: Step::Promote,
                new_key: "key7".into(),
                provider: EncryptionProvider::Aesgcm,
            }))
            .unwrap();
        let r = Recorder::new(files.clone(), &[]);
        let err = rotate(
            &r,
            &files,
            EncryptionProvider::Aesgcm,
            &hosts(&["c1"]),
            &quiet,
        )
        .await
        .unwrap_err()
        .to_string();
        assert!(err.contains("has no key key7"), "{err}");
        assert!(r.calls().is_empty());
        assert_eq!(order(&files), "key1,identity");
    }

    #[test]
    fn the_plan_from_each_starting_state() {
        let names = |at: Step, c: &[&str]| -> Vec<String> {
            plan(at, &hosts(c))
                .into_iter()
                .map(|l| l.split(':').next().unwrap().to_string())
                .collect()
        };
        assert_eq!(
            names(Step::Add, &["c1"]),
            ["add", "promote", "re-encrypt", "retire"]
        );
        assert_eq!(
            names(Step::Promote, &["c1"]),
            ["promote", "re-encrypt", "retire"]
        );
        assert_eq!(names(Step::Reencrypt, &["c1"]), ["re-encrypt", "retire"]);
        assert_eq!(names(Step::Retire, &["c1"]), ["retire"]);
        let p = plan(Step::Add, &hosts(&["c1", "c2"]));
        assert!(p[0].ends_with("restart each API server (c1, c2)"), "{p:?}");
        let p = plan(Step::Add, &hosts(&["c1"]));
        assert!(
            p[0].ends_with("(one API server: its restart comes with the next step)"),
            "{p:?}"
        );
        // Where a plan starts: the record's step, else a new rotation.
        let keys = KeySet::parse(
            &crate::bootstrap::phases::apiserver_config::encryption_config_text(
                EncryptionProvider::Aesgcm,
                &[("key4".into(), K1.into())],
            ),
        )
        .unwrap();
        let (r, resumed) = start(None, &keys, EncryptionProvider::Aescbc);
        assert_eq!(
            (r.step, r.new_key.as_str(), resumed),
            (Step::Add, "key5", false)
        );
        let rec = Rotation {
            step: Step::Reencrypt,
            new_key: "key5".into(),
            provider: EncryptionProvider::Aesgcm,
        };
        assert_eq!(
            start(Some(rec.clone()), &keys, EncryptionProvider::Aescbc),
            (rec, true)
        );
    }

    #[test]
    fn step_transforms_keep_the_other_keys_secrets() {
        let keys = KeySet {
            keys: vec![
                Key {
                    provider: EncryptionProvider::Aesgcm,
                    name: "key2".into(),
                    secret: "b".into(),
                },
                Key {
                    provider: EncryptionProvider::Aescbc,
                    name: "key1".into(),
                    secret: "a".into(),
                },
            ],
            identity: false,
        };
        let new = Key {
            provider: EncryptionProvider::Secretbox,
            name: "key3".into(),
            secret: "c".into(),
        };
        let names = |k: &KeySet| {
            k.keys
                .iter()
                .map(|k| k.name.as_str())
                .collect::<Vec<_>>()
                .join(",")
        };
        assert_eq!(names(&add(&keys, &new)), "key2,key3,key1");
        assert_eq!(
            names(&add(&add(&keys, &new), &new)),
            "key2,key3,key1",
            "idempotent"
        );
        assert_eq!(names(&promote(&add(&keys, &new), &new)), "key3,key2,key1");
        assert_eq!(retire(&keys, &new).keys, vec![new.clone()]);
        assert!(!retire(&keys, &new).identity);
    }
}
