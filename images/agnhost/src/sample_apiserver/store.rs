//! The objects, in memory. Upstream's sample-apiserver keeps them in an etcd sidecar; the e2e
//! entry runs one replica and only needs them for the life of the pod, so a map with one
//! resourceVersion counter (bumped by every write, as etcd's revision is) serves the same API.
//! A second replica would not see the first's objects: run one.

use std::collections::BTreeMap;
use std::sync::Mutex;

use serde_json::{json, Value};

use super::meta::{new_uid, now_rfc3339, Selector};
use super::status::ApiError;
use super::wardle::{Resource, GROUP};

/// (resource, namespace — empty for cluster-scoped, name)
type Key = (String, String, String);

#[derive(Default)]
struct Inner {
    revision: u64,
    objects: BTreeMap<Key, Value>,
}

#[derive(Default)]
pub struct Store {
    inner: Mutex<Inner>,
}

fn key(res: &Resource, ns: &str, name: &str) -> Key {
    (res.plural.to_string(), ns.to_string(), name.to_string())
}

impl Store {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Stores a new object; the server sets uid, creationTimestamp and resourceVersion.
    pub fn create(&self, res: &Resource, ns: &str, mut obj: Value) -> Result<Value, ApiError> {
        let name = obj["metadata"]["name"].as_str().unwrap_or("").to_string();
        let mut inner = self.lock();
        let k = key(res, ns, &name);
        if inner.objects.contains_key(&k) {
            return Err(ApiError::already_exists(GROUP, res.plural, &name));
        }
        inner.revision += 1;
        let meta = &mut obj["metadata"];
        meta["uid"] = json!(new_uid());
        meta["creationTimestamp"] = json!(now_rfc3339());
        meta["resourceVersion"] = json!(inner.revision.to_string());
        if let Some(m) = meta.as_object_mut() {
            m.remove("deletionTimestamp");
        }
        inner.objects.insert(k, obj.clone());
        Ok(obj)
    }

    pub fn get(&self, res: &Resource, ns: &str, name: &str) -> Result<Value, ApiError> {
        self.lock()
            .objects
            .get(&key(res, ns, name))
            .cloned()
            .ok_or_else(|| ApiError::not_found(GROUP, res.plural, name))
    }

    /// The objects of `res` in `ns` (every namespace when None) that match, and the revision
    /// the list is at.
    pub fn list(&self, res: &Resource, ns: Option<&str>, selector: &Selector) -> (Vec<Value>, u64) {
        let inner = self.lock();
        let empty = serde_json::Map::new();
        let items = inner
            .objects
            .iter()
            .filter(|((r, n, _), _)| r == res.plural && ns.is_none_or(|want| want == n))
            .map(|(_, o)| o)
            .filter(|o| selector.matches(o["metadata"]["labels"].as_object().unwrap_or(&empty)))
            .cloned()
            .collect();
        (items, inner.revision)
    }

    /// Replaces an object: a resourceVersion in `obj` MUST be the stored one (optimistic
    /// concurrency); uid and creationTimestamp stay the server's.
    pub fn update(&self, res: &Resource, ns: &str, mut obj: Value) -> Result<Value, ApiError> {
        let name = obj["metadata"]["name"].as_str().unwrap_or("").to_string();
        let mut inner = self.lock();
        let k = key(res, ns, &name);
        let Some(current) = inner.objects.get(&k) else {
            return Err(ApiError::not_found(GROUP, res.plural, &name));
        };
        let sent = obj["metadata"]["resourceVersion"].as_str().unwrap_or("");
        if !sent.is_empty() && Some(sent) != current["metadata"]["resourceVersion"].as_str() {
            return Err(ApiError::conflict(GROUP, res.plural, &name));
        }
        let (uid, created) = (
            current["metadata"]["uid"].clone(),
            current["metadata"]["creationTimestamp"].clone(),
        );
        if obj == *current {
            return Ok(obj);
        }
        inner.revision += 1;
        obj["metadata"]["uid"] = uid;
        obj["metadata"]["creationTimestamp"] = created;
        obj["metadata"]["resourceVersion"] = json!(inner.revision.to_string());
        inner.objects.insert(k, obj.clone());
        Ok(obj)
    }

    pub fn delete(&self, res: &Resource, ns: &str, name: &str) -> Result<Value, ApiError> {
        let mut inner = self.lock();
        let removed = inner.objects.remove(&key(res, ns, name));
        match removed {
            Some(o) => {
                inner.revision += 1;
                Ok(o)
            }
            None => Err(ApiError::not_found(GROUP, res.plural, name)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::wardle::resource;
    use super::*;

    #[test]
    fn writes_bump_the_resource_version_and_stale_updates_conflict() {
        let s = Store::default();
        let fl = resource("flunders").unwrap();
        let a = s
            .create(fl, "ns", json!({"metadata": {"name": "a"}}))
            .unwrap();
        assert_eq!(a["metadata"]["resourceVersion"], "1");
        let e = s
            .create(fl, "ns", json!({"metadata": {"name": "a"}}))
            .unwrap_err();
        assert_eq!(e.reason, "AlreadyExists");
        s.create(
            fl,
            "other",
            json!({"metadata": {"name": "a", "labels": {"x": "y"}}}),
        )
        .unwrap();
        assert_eq!(s.list(fl, Some("ns"), &Selector::default()).0.len(), 1);
        let (all, rv) = s.list(fl, None, &Selector::parse("x=y").unwrap());
        assert_eq!((all.len(), rv), (1, 2));

        let mut changed = a.clone();
        changed["spec"] = json!({"reference": "b"});
        let updated = s.update(fl, "ns", changed.clone()).unwrap();
        assert_eq!(updated["metadata"]["resourceVersion"], "3");
        assert_eq!(updated["metadata"]["uid"], a["metadata"]["uid"]);
        let e = s.update(fl, "ns", changed).unwrap_err();
        assert_eq!(e.reason, "Conflict");

        s.delete(fl, "ns", "a").unwrap();
        assert_eq!(s.get(fl, "ns", "a").unwrap_err().code, 404);
        assert_eq!(s.delete(fl, "ns", "a").unwrap_err().code, 404);
    }
}
