//! The webhook configurations and ValidatingAdmissionPolicies (with bindings), kept in memory by a store watch (as upstream's informer), so a write
//! finds its webhooks without reading the store. Listed once before the server serves, then followed;
//! a broken or compacted watch relists.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::watch;

use super::hook::{Hook, Kind};
use crate::registry::admission_registration::{
    MUTATING_ADMISSION_POLICIES, MUTATING_ADMISSION_POLICY_BINDINGS,
    MUTATING_WEBHOOK_CONFIGURATIONS, VALIDATING_ADMISSION_POLICIES,
    VALIDATING_ADMISSION_POLICY_BINDINGS, VALIDATING_WEBHOOK_CONFIGURATIONS,
};
use crate::registry::lifecycle::from_stored;
use crate::storage::{Store, StoreError, StoreEvent};

/// Pause before relisting after the watch failed.
const RELIST_PAUSE: Duration = Duration::from_secs(1);

/// Configuration name → its webhooks; a BTreeMap because upstream calls configurations in name order.
type Configurations = BTreeMap<String, Vec<Arc<Hook>>>;

/// Name → stored object (ValidatingAdmissionPolicies and their bindings).
type Objects = BTreeMap<String, Arc<Value>>;

#[derive(Debug, Default)]
struct State {
    mutating: Configurations,
    validating: Configurations,
    policies: Objects,
    bindings: Objects,
    mutating_policies: Objects,
    mutating_bindings: Objects,
}

impl State {
    fn insert(&mut self, source: Source, name: String, obj: Value) {
        match source {
            Source::Hooks(Kind::Mutating) => {
                self.mutating.insert(name, hooks_of(Kind::Mutating, &obj));
            }
            Source::Hooks(Kind::Validating) => {
                self.validating
                    .insert(name, hooks_of(Kind::Validating, &obj));
            }
            Source::Policies => {
                self.policies.insert(name, Arc::new(obj));
            }
            Source::Bindings => {
                self.bindings.insert(name, Arc::new(obj));
            }
            Source::MutatingPolicies => {
                self.mutating_policies.insert(name, Arc::new(obj));
            }
            Source::MutatingBindings => {
                self.mutating_bindings.insert(name, Arc::new(obj));
            }
        }
    }
}

/// The kinds the cache follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    Hooks(Kind),
    Policies,
    Bindings,
    MutatingPolicies,
    MutatingBindings,
}

const SOURCES: [Source; 6] = [
    Source::Hooks(Kind::Mutating),
    Source::Hooks(Kind::Validating),
    Source::Policies,
    Source::Bindings,
    Source::MutatingPolicies,
    Source::MutatingBindings,
];

/// Shared handle to the cached webhooks; clones see the same state.
#[derive(Debug, Clone, Default)]
pub struct Webhooks {
    state: Arc<RwLock<State>>,
}

fn prefix(source: Source) -> String {
    match source {
        Source::Hooks(Kind::Mutating) => MUTATING_WEBHOOK_CONFIGURATIONS.key_prefix(None),
        Source::Hooks(Kind::Validating) => VALIDATING_WEBHOOK_CONFIGURATIONS.key_prefix(None),
        Source::Policies => VALIDATING_ADMISSION_POLICIES.key_prefix(None),
        Source::Bindings => VALIDATING_ADMISSION_POLICY_BINDINGS.key_prefix(None),
        Source::MutatingPolicies => MUTATING_ADMISSION_POLICIES.key_prefix(None),
        Source::MutatingBindings => MUTATING_ADMISSION_POLICY_BINDINGS.key_prefix(None),
    }
}

fn name_from_key(key: &str) -> String {
    key.rsplit('/').next().unwrap_or("").to_string()
}

fn parse(value: &[u8], revision: i64) -> Option<Value> {
    match from_stored(value, revision) {
        Ok(obj) => Some(obj),
        Err(e) => {
            tracing::warn!(error = %e.message, "unreadable admission configuration skipped");
            None
        }
    }
}

fn hooks_of(kind: Kind, obj: &Value) -> Vec<Arc<Hook>> {
    Hook::from_configuration(kind, obj)
        .into_iter()
        .map(Arc::new)
        .collect()
}

impl Webhooks {
    /// Lists both kinds, then follows them until `stop` changes.
    pub async fn start(store: Store, stop: watch::Receiver<bool>) -> Result<Self, StoreError> {
        let hooks = Webhooks::default();
        for source in SOURCES {
            let revision = hooks.relist(&store, source).await?;
            tokio::spawn(
                hooks
                    .clone()
                    .follow(store.clone(), source, revision, stop.clone()),
            );
        }
        Ok(hooks)
    }

    /// Every webhook of one kind: configurations by name, webhooks in their listed order.
    pub fn hooks(&self, kind: Kind) -> Vec<Arc<Hook>> {
        let state = self.state.read().unwrap_or_else(|e| e.into_inner());
        let configs = match kind {
            Kind::Mutating => &state.mutating,
            Kind::Validating => &state.validating,
        };
        configs.values().flatten().cloned().collect()
    }

    /// The ValidatingAdmissionPolicies and their bindings, each by name.
    pub fn policies(&self) -> (Vec<Arc<Value>>, Vec<Arc<Value>>) {
        let state = self.state.read().unwrap_or_else(|e| e.into_inner());
        (
            state.policies.values().cloned().collect(),
            state.bindings.values().cloned().collect(),
        )
    }

    /// The MutatingAdmissionPolicies and their bindings, each by name.
    pub fn mutating_policies(&self) -> (Vec<Arc<Value>>, Vec<Arc<Value>>) {
        let state = self.state.read().unwrap_or_else(|e| e.into_inner());
        (
            state.mutating_policies.values().cloned().collect(),
            state.mutating_bindings.values().cloned().collect(),
        )
    }

    fn put(&self, source: Source, name: String, obj: Value) {
        let mut state = self.state.write().unwrap_or_else(|e| e.into_inner());
        state.insert(source, name, obj);
    }

    fn remove(&self, source: Source, name: &str) {
        let mut state = self.state.write().unwrap_or_else(|e| e.into_inner());
        match source {
            Source::Hooks(Kind::Mutating) => drop(state.mutating.remove(name)),
            Source::Hooks(Kind::Validating) => drop(state.validating.remove(name)),
            Source::Policies => drop(state.policies.remove(name)),
            Source::Bindings => drop(state.bindings.remove(name)),
            Source::MutatingPolicies => drop(state.mutating_policies.remove(name)),
            Source::MutatingBindings => drop(state.mutating_bindings.remove(name)),
        }
    }

    /// Replaces one kind's objects with the store's; returns the list's revision.
    async fn relist(&self, store: &Store, source: Source) -> Result<i64, StoreError> {
        let (items, revision) = store.list(&prefix(source)).await?;
        // Built aside and swapped in whole, so a request never sees a half-listed kind.
        let mut fresh = State::default();
        for i in &items {
            if let Some(obj) = parse(&i.value, i.mod_revision) {
                fresh.insert(source, name_from_key(&i.key), obj);
            }
        }
        let mut state = self.state.write().unwrap_or_else(|e| e.into_inner());
        match source {
            Source::Hooks(Kind::Mutating) => state.mutating = fresh.mutating,
            Source::Hooks(Kind::Validating) => state.validating = fresh.validating,
            Source::Policies => state.policies = fresh.policies,
            Source::Bindings => state.bindings = fresh.bindings,
            Source::MutatingPolicies => state.mutating_policies = fresh.mutating_policies,
            Source::MutatingBindings => state.mutating_bindings = fresh.mutating_bindings,
        }
        drop(state);
        tracing::debug!(
            ?source,
            count = items.len(),
            "admission configurations listed"
        );
        Ok(revision)
    }

    fn apply(&self, source: Source, event: StoreEvent) -> bool {
        match event {
            StoreEvent::Put { current, .. } => {
                if let Some(obj) = parse(&current.value, current.mod_revision) {
                    self.put(source, name_from_key(&current.key), obj);
                }
                true
            }
            StoreEvent::Delete { key, .. } => {
                self.remove(source, &name_from_key(&key));
                true
            }
            StoreEvent::Compacted { .. } => false,
        }
    }

    async fn follow(
        self,
        store: Store,
        source: Source,
        mut revision: i64,
        mut stop: watch::Receiver<bool>,
    ) {
        loop {
            let followed = async {
                let mut w = store.watch(&prefix(source), revision + 1).await?;
                while let Some(events) = w.next().await? {
                    for e in events {
                        if !self.apply(source, e) {
                            return Ok::<(), StoreError>(());
                        }
                    }
                }
                Ok(())
            };
            tokio::select! {
                _ = stop.changed() => return,
                r = followed => {
                    if let Err(e) = r {
                        tracing::warn!(?source, error = %e, "admission configuration watch failed; relisting");
                    }
                }
            }
            loop {
                tokio::select! {
                    _ = stop.changed() => return,
                    _ = tokio::time::sleep(RELIST_PAUSE) => {}
                }
                match self.relist(&store, source).await {
                    Ok(r) => {
                        revision = r;
                        break;
                    }
                    Err(e) => {
                        tracing::warn!(?source, error = %e, "relisting admission configurations failed")
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::Versioned;

    fn put(name: &str, hooks: &[&str]) -> StoreEvent {
        let webhooks: Vec<_> = hooks
            .iter()
            .map(|h| serde_json::json!({"name": h}))
            .collect();
        let obj = serde_json::json!({"metadata": {"name": name}, "webhooks": webhooks});
        StoreEvent::Put {
            current: Versioned {
                key: format!("/registry/validatingwebhookconfigurations/{name}"),
                value: serde_json::to_vec(&obj).unwrap(),
                mod_revision: 5,
            },
            prev: None,
        }
    }

    fn names(w: &Webhooks) -> Vec<String> {
        w.hooks(Kind::Validating)
            .iter()
            .map(|h| h.name.clone())
            .collect()
    }

    #[test]
    fn events_keep_configurations_in_name_order() {
        let w = Webhooks::default();
        assert!(w.apply(Source::Hooks(Kind::Validating), put("zz", &["z1.x.y"])));
        w.apply(
            Source::Hooks(Kind::Validating),
            put("aa", &["a1.x.y", "a2.x.y"]),
        );
        assert_eq!(names(&w), ["a1.x.y", "a2.x.y", "z1.x.y"]);
        w.apply(Source::Hooks(Kind::Validating), put("aa", &["a3.x.y"]));
        assert_eq!(names(&w), ["a3.x.y", "z1.x.y"]);
        w.apply(
            Source::Hooks(Kind::Validating),
            StoreEvent::Delete {
                key: "/registry/validatingwebhookconfigurations/zz".into(),
                revision: 6,
                prev: None,
            },
        );
        assert_eq!(names(&w), ["a3.x.y"]);
        assert!(w.hooks(Kind::Mutating).is_empty());
        assert!(!w.apply(
            Source::Hooks(Kind::Validating),
            StoreEvent::Compacted {
                compact_revision: 3
            }
        ));
    }
}
