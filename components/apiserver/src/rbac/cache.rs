//! A watch-fed copy of the RBAC policy: roles, cluster roles and their bindings.
//!
//! Why: an authorization decision used to list every ClusterRoleBinding (and the namespace's
//! RoleBindings) from the store and fetch each bound role, several linearizable reads per request.
//! Under the conformance load those reads made every non-admin request 1–5 s slower than an
//! admin's, long enough for the controller-manager's and scheduler's lease renewals (a GET and a
//! PUT within the 10 s renew deadline) to fail again and again. Upstream's RBAC authorizer reads
//! informer caches for the same reason. Like those, this copy trails the store by a watch event;
//! `Authorizer::authorize` checks a decision the copy denies again against the store, so a binding
//! created a moment ago is honoured at once (a revoked one stops working within a watch event, as
//! upstream's).

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::watch;

use crate::registry::lifecycle::from_stored;
use crate::storage::{Store, StoreError, StoreEvent, Versioned};

/// After a failed list or watch, wait this long before listing again.
const RETRY: Duration = Duration::from_secs(1);

#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    #[error("store: {0}")]
    Store(#[from] StoreError),
    #[error("the store closed the watch on {0}")]
    WatchEnded(String),
    #[error("the watch on {prefix} was compacted at revision {revision}")]
    Compacted { prefix: String, revision: i64 },
}

/// What the copy holds of one key prefix: nothing usable until the first list succeeded, and
/// again nothing while a broken watch is being replaced (events may have been missed).
#[derive(Default)]
struct Copy {
    synced: bool,
    items: BTreeMap<String, Arc<Value>>,
}

/// The objects under one store key prefix (e.g. `/registry/clusterrolebindings/`), by key.
pub struct PrefixCache {
    prefix: String,
    copy: RwLock<Copy>,
}

impl PrefixCache {
    pub fn new(prefix: String) -> Arc<PrefixCache> {
        Arc::new(PrefixCache {
            prefix,
            copy: RwLock::new(Copy::default()),
        })
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Copy> {
        // A panic while holding the lock cannot leave a half-applied batch that matters more
        // than serving: the next relist replaces the whole map.
        self.copy.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Copy> {
        self.copy.write().unwrap_or_else(|e| e.into_inner())
    }

    /// The objects whose key starts with `prefix` (this cache's prefix or a narrower one, e.g.
    /// one namespace's), or `None` while the copy is not in sync.
    pub fn list(&self, prefix: &str) -> Option<Vec<Arc<Value>>> {
        let copy = self.read();
        if !copy.synced {
            return None;
        }
        Some(
            copy.items
                .range(prefix.to_string()..)
                .take_while(|(k, _)| k.starts_with(prefix))
                .map(|(_, v)| v.clone())
                .collect(),
        )
    }

    /// `Some(object or None)` from the copy, or `None` while it is not in sync.
    pub fn get(&self, key: &str) -> Option<Option<Arc<Value>>> {
        let copy = self.read();
        copy.synced.then(|| copy.items.get(key).cloned())
    }

    /// Replaces the copy with a fresh list.
    fn reset(&self, items: &[Versioned]) {
        let fresh = items
            .iter()
            .filter_map(|i| parse(&i.key, &i.value, i.mod_revision))
            .collect();
        let mut copy = self.write();
        copy.items = fresh;
        copy.synced = true;
    }

    /// Applies one watch batch.
    fn apply(&self, events: &[StoreEvent]) {
        let mut copy = self.write();
        for event in events {
            match event {
                StoreEvent::Put { current, .. } => {
                    match parse(&current.key, &current.value, current.mod_revision) {
                        Some((k, v)) => {
                            copy.items.insert(k, v);
                        }
                        None => {
                            copy.items.remove(&current.key);
                        }
                    }
                }
                StoreEvent::Delete { key, .. } => {
                    copy.items.remove(key);
                }
                StoreEvent::Compacted { .. } => {}
            }
        }
    }

    fn unsync(&self) {
        self.write().synced = false;
    }

    /// Lists, then follows the watch; on any break the copy goes out of sync (callers read the
    /// store) until the next list. Ends when `stop` changes.
    pub async fn run(self: Arc<Self>, store: Store, mut stop: watch::Receiver<bool>) {
        loop {
            let followed = tokio::select! {
                _ = stop.changed() => return,
                r = self.follow(&store) => r,
            };
            self.unsync();
            if let Err(e) = followed {
                tracing::warn!(prefix = %self.prefix, error = %e, "RBAC policy cache: relisting");
            }
            tokio::select! {
                _ = stop.changed() => return,
                _ = tokio::time::sleep(RETRY) => {}
            }
        }
    }

    async fn follow(&self, store: &Store) -> Result<(), CacheError> {
        let (items, revision) = store.list(&self.prefix).await?;
        let mut watch = store.watch(&self.prefix, revision + 1).await?;
        self.reset(&items);
        loop {
            let Some(events) = watch.next().await? else {
                return Err(CacheError::WatchEnded(self.prefix.clone()));
            };
            if let Some(StoreEvent::Compacted { compact_revision }) = events.first() {
                return Err(CacheError::Compacted {
                    prefix: self.prefix.clone(),
                    revision: *compact_revision,
                });
            }
            self.apply(&events);
        }
    }
}

/// A stored object as the authorizer reads it; an undecodable one is left out (and logged), as
/// the store-reading path reports it as corrupt.
fn parse(key: &str, value: &[u8], revision: i64) -> Option<(String, Arc<Value>)> {
    match from_stored(value, revision) {
        Ok(v) => Some((key.to_string(), Arc::new(v))),
        Err(_) => {
            tracing::warn!(%key, "RBAC policy cache: stored object is not valid JSON");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(key: &str, name: &str) -> Versioned {
        Versioned {
            key: key.into(),
            value: serde_json::to_vec(&serde_json::json!({"metadata": {"name": name}})).unwrap(),
            mod_revision: 7,
        }
    }

    fn names(items: Option<Vec<Arc<Value>>>) -> Vec<String> {
        items
            .expect("in sync")
            .iter()
            .map(|v| v["metadata"]["name"].as_str().unwrap().to_string())
            .collect()
    }

    #[test]
    fn nothing_is_answered_before_the_first_list() {
        let c = PrefixCache::new("/registry/rolebindings/".into());
        assert!(c.list("/registry/rolebindings/").is_none());
        assert!(c.get("/registry/rolebindings/a/x").is_none());
        c.reset(&[]);
        assert_eq!(c.list("/registry/rolebindings/"), Some(vec![]));
        assert_eq!(c.get("/registry/rolebindings/a/x"), Some(None));
    }

    #[test]
    fn a_namespace_prefix_lists_only_that_namespace() {
        let c = PrefixCache::new("/registry/rolebindings/".into());
        c.reset(&[
            stored("/registry/rolebindings/a/x", "x"),
            stored("/registry/rolebindings/ab/y", "y"),
            stored("/registry/rolebindings/b/z", "z"),
        ]);
        assert_eq!(names(c.list("/registry/rolebindings/a/")), ["x"]);
        assert_eq!(names(c.list("/registry/rolebindings/")), ["x", "y", "z"]);
    }

    #[test]
    fn watch_events_update_the_copy_and_a_break_unsyncs_it() {
        let c = PrefixCache::new("/registry/clusterroles/".into());
        c.reset(&[stored("/registry/clusterroles/a", "a")]);
        c.apply(&[
            StoreEvent::Put {
                current: stored("/registry/clusterroles/b", "b"),
                prev: None,
            },
            StoreEvent::Delete {
                key: "/registry/clusterroles/a".into(),
                revision: 9,
                prev: None,
            },
            StoreEvent::Put {
                current: Versioned {
                    key: "/registry/clusterroles/c".into(),
                    value: b"not json".to_vec(),
                    mod_revision: 10,
                },
                prev: None,
            },
        ]);
        assert_eq!(names(c.list("/registry/clusterroles/")), ["b"]);
        assert!(c.get("/registry/clusterroles/a").unwrap().is_none());
        c.unsync();
        assert!(c.list("/registry/clusterroles/").is_none());
    }
}
