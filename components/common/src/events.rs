//! core/v1 Events, written the way client-go's recorder does (`<object>.<hex nanos>` names, source
//! component, first/last timestamps) so `kubectl describe` and `kubectl get events` show them.
//! Repeats of the same reason and message for the same object bump `count` instead of piling up
//! new objects, like client-go's event correlator. Used by kiln-scheduler and kiln-controller-manager
//! (the kubelet has its own, queued and rate-limited, in kiln-kubelet's `events`).

use std::collections::HashMap;
use std::sync::Mutex;

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::Resource;
use serde_json::json;

#[derive(Debug, thiserror::Error)]
pub enum EventError {
    #[error("writing event {name} in {namespace}: {source}")]
    Write {
        namespace: String,
        name: String,
        source: kube::Error,
    },
}

/// Event types.
pub const NORMAL: &str = "Normal";
pub const WARNING: &str = "Warning";

/// (object uid, reason, message): events with the same key are one series.
type SeriesKey = (String, String, String);

pub struct EventRecorder {
    client: kube::Client,
    component: String,
    instance: String,
    /// (object uid, reason, message) → (event name, count) of the last event written for it.
    seen: Mutex<HashMap<SeriesKey, (String, i32)>>,
}

/// A reference to any object for `involvedObject`.
pub fn object_reference<K: Resource<DynamicType = ()>>(obj: &K) -> ObjectReference {
    let meta = obj.meta();
    ObjectReference {
        api_version: Some(K::api_version(&()).to_string()),
        kind: Some(K::kind(&()).to_string()),
        name: meta.name.clone(),
        namespace: meta.namespace.clone(),
        uid: meta.uid.clone(),
        resource_version: meta.resource_version.clone(),
        ..Default::default()
    }
}

impl EventRecorder {
    pub fn new(client: kube::Client, component: &str, instance: &str) -> EventRecorder {
        EventRecorder {
            client,
            component: component.to_string(),
            instance: instance.to_string(),
            seen: Mutex::new(HashMap::new()),
        }
    }

    pub async fn record(
        &self,
        object: &ObjectReference,
        type_: &str,
        reason: &str,
        message: &str,
    ) -> Result<(), EventError> {
        let namespace = object
            .namespace
            .clone()
            .unwrap_or_else(|| "default".to_string());
        let api: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
        let now = Timestamp::now();
        let key = (
            object.uid.clone().unwrap_or_default(),
            reason.to_string(),
            message.to_string(),
        );
        let previous = self.seen.lock().expect("event cache").get(&key).cloned();
        if let Some((name, count)) = previous {
            let patch = json!({"count": count + 1, "lastTimestamp": Time(now)});
            match api
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => {
                    self.seen
                        .lock()
                        .expect("event cache")
                        .insert(key, (name, count + 1));
                    return Ok(());
                }
                // Gone (expired or deleted): write a fresh one below.
                Err(kube::Error::Api(s)) if s.is_not_found() => {}
                Err(source) => {
                    return Err(EventError::Write {
                        namespace,
                        name,
                        source,
                    })
                }
            }
        }
        let name = format!(
            "{}.{:x}",
            object.name.as_deref().unwrap_or("unknown"),
            now.as_nanosecond()
        );
        let event = Event {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(namespace.clone()),
                ..Default::default()
            },
            involved_object: object.clone(),
            reason: Some(reason.to_string()),
            message: Some(message.to_string()),
            type_: Some(type_.to_string()),
            source: Some(EventSource {
                component: Some(self.component.clone()),
                host: None,
            }),
            first_timestamp: Some(Time(now)),
            last_timestamp: Some(Time(now)),
            count: Some(1),
            // Legacy core/v1 form (no eventTime), as client-go's record package writes it.
            reporting_component: Some(self.component.clone()),
            reporting_instance: Some(self.instance.clone()),
            ..Default::default()
        };
        api.create(&PostParams::default(), &event)
            .await
            .map_err(|source| EventError::Write {
                namespace,
                name: name.clone(),
                source,
            })?;
        let mut seen = self.seen.lock().expect("event cache");
        // Bounded memory: objects come and go; forgetting only costs one extra event object.
        if seen.len() > 10_000 {
            seen.clear();
        }
        seen.insert(key, (name, 1));
        Ok(())
    }
}
