//! A Local APIService for every group/version kiln serves itself, like upstream's autoregister
//! and CRD registration controllers: `v1.` for core, `v1.apps`, …, labelled
//! `kube-aggregator.kubernetes.io/automanaged` (`onstart` for built-in kinds, `true` for CRD
//! versions, which go again when their CRD does), always `Available=True reason Local`.

use serde_json::{json, Value};

use super::AggregatorError;
use crate::registry::apiregistration::APISERVICES;
use crate::registry::lifecycle::{
    from_stored, now_rfc3339, prepare_create, to_stored, FieldValidation,
};
use crate::registry::Registry;
use crate::storage::{Store, StoreError, Versioned};

pub const AUTOMANAGED: &str = "kube-aggregator.kubernetes.io/automanaged";

/// Upstream's priorities for the built-in groups (kube-apiserver's apiVersionPriorities); other
/// built-in groups sort after them.
const GROUP_PRIORITIES: &[(&str, i64)] = &[
    ("", 18000),
    ("apps", 17800),
    ("events.k8s.io", 17750),
    ("authentication.k8s.io", 17700),
    ("authorization.k8s.io", 17600),
    ("autoscaling", 17500),
    ("batch", 17400),
    ("certificates.k8s.io", 17300),
    ("networking.k8s.io", 17200),
    ("policy", 17100),
    ("rbac.authorization.k8s.io", 17000),
    ("storage.k8s.io", 16800),
    ("apiextensions.k8s.io", 16700),
    ("admissionregistration.k8s.io", 16700),
    ("scheduling.k8s.io", 16600),
    ("coordination.k8s.io", 16500),
    ("node.k8s.io", 16300),
    ("discovery.k8s.io", 16200),
    ("flowcontrol.apiserver.k8s.io", 16100),
    ("apiregistration.k8s.io", 18000),
];

/// CRD versions: upstream's crdregistration values.
const CUSTOM_GROUP_PRIORITY: i64 = 1000;
const CUSTOM_VERSION_PRIORITY: i64 = 100;

pub fn apiservice_name(group: &str, version: &str) -> String {
    format!("{version}.{group}")
}

pub fn available_condition() -> Value {
    json!({"type": "Available", "status": "True", "lastTransitionTime": now_rfc3339(),
           "reason": "Local", "message": "Local APIServices are always available"})
}

/// The Local APIServices the registry calls for, by name.
pub fn desired(registry: &Registry) -> Vec<Value> {
    let mut out = Vec::new();
    let mut groups: Vec<(&str, Vec<&str>, bool)> = vec![("", vec!["v1"], false)];
    for (group, versions) in registry.groups() {
        let custom = registry
            .in_group_version(group, versions[0])
            .iter()
            .all(|s| s.custom.is_some());
        groups.push((group, versions, custom));
    }
    for (group, versions, custom) in groups {
        let group_priority = if custom {
            CUSTOM_GROUP_PRIORITY
        } else {
            GROUP_PRIORITIES
                .iter()
                .find(|(g, _)| *g == group)
                .map(|(_, p)| *p)
                .unwrap_or(16000)
        };
        let count = versions.len() as i64;
        for (i, version) in versions.iter().enumerate() {
            // The registry lists the preferred version first: it gets the highest priority.
            let version_priority = if custom {
                CUSTOM_VERSION_PRIORITY + (count - i as i64)
            } else if group.is_empty() {
                1
            } else {
                15 + (count - 1 - i as i64)
            };
            out.push(json!({
                "apiVersion": "apiregistration.k8s.io/v1",
                "kind": "APIService",
                "metadata": {
                    "name": apiservice_name(group, version),
                    "labels": {AUTOMANAGED: if custom { "true" } else { "onstart" }},
                },
                "spec": {"group": group, "version": version,
                         "groupPriorityMinimum": group_priority, "versionPriority": version_priority},
            }));
        }
    }
    out
}

fn is_local_available(obj: &Value) -> bool {
    obj["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Available" && c["status"] == "True" && c["reason"] == "Local")
}

/// Creates the missing Local APIServices, marks stored Local ones available, and deletes the
/// CRD ones whose group/version is no longer served.
pub async fn ensure(
    store: &Store,
    registry: &Registry,
    stored: &[(Versioned, Value)],
) -> Result<(), AggregatorError> {
    let want = desired(registry);
    for obj in &want {
        let name = obj["metadata"]["name"].as_str().unwrap_or("");
        match stored.iter().find(|(_, o)| o["metadata"]["name"] == name) {
            None => create(store, obj.clone()).await?,
            Some((item, current)) => {
                // A service-backed APIService for a local group/version is the user's choice.
                if current["spec"]["service"].is_object() || is_local_available(current) {
                    continue;
                }
                let mut updated = current.clone();
                set_available(&mut updated, available_condition());
                write(store, item, &updated).await?;
            }
        }
    }
    for (item, obj) in stored {
        let automanaged = obj["metadata"]["labels"][AUTOMANAGED] == "true";
        let still_served = want
            .iter()
            .any(|w| w["metadata"]["name"] == obj["metadata"]["name"]);
        if automanaged && !still_served && !obj["spec"]["service"].is_object() {
            match store.delete(&item.key, item.mod_revision).await {
                Ok(_) | Err(StoreError::Conflict | StoreError::NotFound) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(())
}

/// Replaces the Available condition (the only one APIServices carry).
pub fn set_available(obj: &mut Value, condition: Value) {
    if !obj["status"].is_object() {
        obj["status"] = json!({});
    }
    let mut conditions: Vec<Value> = obj["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    conditions.retain(|c| c["type"] != "Available");
    conditions.push(condition);
    obj["status"]["conditions"] = json!(conditions);
}

async fn create(store: &Store, obj: Value) -> Result<(), AggregatorError> {
    let name = obj["metadata"]["name"].as_str().unwrap_or("").to_string();
    let mut prepared =
        prepare_create(&APISERVICES, None, obj, FieldValidation::Strict).map_err(|e| {
            AggregatorError::Invalid {
                what: format!("APIService {name}"),
                message: e.message,
            }
        })?;
    set_available(&mut prepared, available_condition());
    match store
        .create(&APISERVICES.key(None, &name), to_stored(&prepared))
        .await
    {
        Ok(_) | Err(StoreError::AlreadyExists) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// A compare-and-swap write; losing the race is fine, the next pass looks again.
pub async fn write(store: &Store, item: &Versioned, obj: &Value) -> Result<(), AggregatorError> {
    match store
        .update(&item.key, to_stored(obj), item.mod_revision)
        .await
    {
        Ok(_) | Err(StoreError::Conflict | StoreError::NotFound) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Every stored APIService, decoded, with the revision the list was read at.
pub async fn list(store: &Store) -> Result<(Vec<(Versioned, Value)>, i64), AggregatorError> {
    let (items, revision) = store.list(&APISERVICES.key_prefix(None)).await?;
    let objs = items
        .into_iter()
        .filter_map(|item| {
            let obj = from_stored(&item.value, item.mod_revision).ok()?;
            Some((item, obj))
        })
        .collect();
    Ok((objs, revision))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::apiregistration::apiservice_validation;

    #[test]
    fn every_built_in_group_version_gets_a_valid_local_apiservice() {
        let want = desired(&Registry::default());
        let names: Vec<&str> = want
            .iter()
            .map(|o| o["metadata"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(names[0], "v1.");
        assert!(names.contains(&"v1.apps"));
        assert!(names.contains(&"v1.apiregistration.k8s.io"));
        for obj in &want {
            assert!(apiservice_validation(obj).is_empty(), "{obj}");
            assert_eq!(obj["metadata"]["labels"][AUTOMANAGED], "onstart");
        }
        let apps = want
            .iter()
            .find(|o| o["metadata"]["name"] == "v1.apps")
            .unwrap();
        assert_eq!(apps["spec"]["groupPriorityMinimum"], 17800);
    }

    #[test]
    fn the_available_condition_is_replaced_not_duplicated() {
        let mut obj = json!({"status": {"conditions": [{"type": "Available", "status": "False"}]}});
        set_available(&mut obj, available_condition());
        let conditions = obj["status"]["conditions"].as_array().unwrap();
        assert_eq!(conditions.len(), 1);
        assert!(is_local_available(&obj));
    }
}
