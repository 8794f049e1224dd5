//! resourcequota: keeps every ResourceQuota's status true — `hard` is the spec's, `used` what the
//! namespace's objects count against it (`kiln_common::quota`, the same counting the API server's
//! admission charges with). A quota is recounted when it changes and when an object of a kind it
//! can count changes in its namespace (pods, services, configmaps, secrets, replication
//! controllers, replica sets, claims), and every 30 s for the kinds no watch covers
//! (`count/<resource>.<group>` of any other kind, custom resources included), as upstream's full
//! resync. The API server's charges raise `used` between recounts; a recount corrects them.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{
    ConfigMap, PersistentVolumeClaim, Pod, ReplicationController, ResourceQuota, Secret, Service,
};
use kiln_common::quota::{self, Amount, Usage};
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use kube::discovery::{self, ApiResource};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::context::Context;

/// How often every quota is recounted even without a change seen.
const RESYNC: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum QuotaError {
    #[error("listing {resource} in {namespace}: {source}")]
    List {
        resource: String,
        namespace: String,
        source: kube::Error,
    },
    #[error("updating the status of resourcequota {namespace}/{name}: {source}")]
    Status {
        namespace: String,
        name: String,
        source: kube::Error,
    },
    #[error("encoding resourcequota {0}: {1}")]
    Encode(String, serde_json::Error),
}

/// The kind (group, plural) a quota resource name is counted from; None for names nothing counts.
pub fn kind_of(resource: &str) -> Option<(String, String)> {
    let core = |p: &str| Some((String::new(), p.to_string()));
    if let Some(counted) = resource.strip_prefix("count/") {
        return Some(match counted.split_once('.') {
            Some((plural, group)) => (group.to_string(), plural.to_string()),
            None => (String::new(), counted.to_string()),
        });
    }
    if resource.contains(".storageclass.storage.k8s.io/") || resource == "requests.storage" {
        return core("persistentvolumeclaims");
    }
    match resource {
        "pods" | "cpu" | "memory" | "ephemeral-storage" => core("pods"),
        "services" | "services.nodeports" | "services.loadbalancers" => core("services"),
        "configmaps"
        | "secrets"
        | "replicationcontrollers"
        | "resourcequotas"
        | "persistentvolumeclaims" => core(resource),
        r if r.starts_with("requests.") || r.starts_with("limits.") => core("pods"),
        _ => None,
    }
}

/// The status a quota should have, given every object (by kind) of its namespace: `hard` as the
/// spec's, `used` for each hard resource (zero when nothing uses it).
pub fn desired_status(
    quota_obj: &Value,
    objects: &BTreeMap<(String, String), Vec<Value>>,
) -> Value {
    let hard = quota::resource_list(&quota_obj["spec"]["hard"]);
    let mut used = Usage::new();
    for ((group, plural), items) in objects {
        for obj in items {
            if quota::selects(quota_obj, group, plural, obj) {
                quota::add(
                    &mut used,
                    &quota::tracked(quota_obj, &quota::usage(group, plural, obj)),
                );
            }
        }
    }
    for (name, h) in &hard {
        used.entry(name.clone()).or_insert(Amount {
            value: kiln_common::quantity::Milli::ZERO,
            binary: h.binary,
        });
    }
    serde_json::json!({
        "hard": quota_obj["spec"]["hard"].clone(),
        "used": quota::to_resource_list(&used),
    })
}

/// Whether two ResourceLists hold the same quantities, however spelled.
fn same_lists(a: &Value, b: &Value) -> bool {
    let (a, b) = (quota::resource_list(a), quota::resource_list(b));
    a.len() == b.len()
        && a.iter()
            .all(|(k, v)| b.get(k).is_some_and(|w| w.value == v.value))
}

pub fn status_is_current(quota_obj: &Value, desired: &Value) -> bool {
    let status = &quota_obj["status"];
    status["hard"].is_object()
        && status["used"].is_object()
        && same_lists(&status["hard"], &desired["hard"])
        && same_lists(&status["used"], &desired["used"])
}

struct State {
    ctx: Context,
}

/// Maps a changed object to every quota of its namespace.
fn quotas_of<K: Resource>(
    store: Store<ResourceQuota>,
) -> impl Fn(K) -> Vec<ObjectRef<ResourceQuota>> {
    move |obj: K| {
        let ns = obj.meta().namespace.clone();
        store
            .state()
            .iter()
            .filter(|q| q.metadata.namespace == ns)
            .map(|q| ObjectRef::from_obj(q.as_ref()))
            .collect()
    }
}

pub async fn run(ctx: Context) {
    let client = ctx.client.clone();
    let controller = Controller::new(
        Api::<ResourceQuota>::all(client.clone()),
        watcher::Config::default(),
    );
    let store = controller.store();
    fn all<K>(client: &kube::Client) -> Api<K>
    where
        K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
    {
        Api::all(client.clone())
    }
    let cfg = watcher::Config::default;
    controller
        .watches(all::<Pod>(&client), cfg(), quotas_of(store.clone()))
        .watches(all::<Service>(&client), cfg(), quotas_of(store.clone()))
        .watches(all::<ConfigMap>(&client), cfg(), quotas_of(store.clone()))
        .watches(all::<Secret>(&client), cfg(), quotas_of(store.clone()))
        .watches(
            all::<ReplicationController>(&client),
            cfg(),
            quotas_of(store.clone()),
        )
        .watches(
            all::<PersistentVolumeClaim>(&client),
            cfg(),
            quotas_of(store.clone()),
        )
        .watches(all::<ReplicaSet>(&client), cfg(), quotas_of(store.clone()))
        .run(reconcile, error_policy, Arc::new(State { ctx }))
        .for_each(|_| async {})
        .await;
}

/// The API resource a (group, plural) is served as, found through discovery.
async fn api_resource(client: &kube::Client, group: &str, plural: &str) -> Option<ApiResource> {
    if group.is_empty() {
        let kind = plural.trim_end_matches('s');
        return Some(ApiResource {
            group: String::new(),
            version: "v1".into(),
            api_version: "v1".into(),
            kind: kind.to_string(),
            plural: plural.to_string(),
        });
    }
    let g = discovery::group(client, group).await.ok()?;
    let (ar, _) = g
        .recommended_resources()
        .into_iter()
        .find(|(ar, _)| ar.plural == plural)?;
    Some(ar)
}

async fn reconcile(q: Arc<ResourceQuota>, st: Arc<State>) -> Result<Action, QuotaError> {
    let ns = q.namespace().unwrap_or_default();
    let name = q.name_any();
    let client = &st.ctx.client;
    let quota_obj =
        serde_json::to_value(q.as_ref()).map_err(|e| QuotaError::Encode(name.clone(), e))?;
    let mut kinds: Vec<(String, String)> = quota_obj["spec"]["hard"]
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(k, _)| kind_of(k))
        .collect();
    kinds.sort();
    kinds.dedup();
    let mut objects = BTreeMap::new();
    for (group, plural) in kinds {
        let Some(ar) = api_resource(client, &group, &plural).await else {
            // A kind not served (yet): nothing of it exists to count.
            objects.insert((group, plural), Vec::new());
            continue;
        };
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &ar);
        let list = api
            .list(&ListParams::default())
            .await
            .map_err(|source| QuotaError::List {
                resource: format!("{plural}.{group}"),
                namespace: ns.clone(),
                source,
            })?;
        let items = list
            .items
            .into_iter()
            .filter_map(|o| serde_json::to_value(o).ok())
            .collect();
        objects.insert((group, plural), items);
    }
    let desired = desired_status(&quota_obj, &objects);
    if status_is_current(&quota_obj, &desired) {
        return Ok(Action::requeue(RESYNC));
    }
    let mut updated = quota_obj.clone();
    updated["status"] = desired;
    let body: ResourceQuota =
        serde_json::from_value(updated).map_err(|e| QuotaError::Encode(name.clone(), e))?;
    let api: Api<ResourceQuota> = Api::namespaced(client.clone(), &ns);
    match api
        .replace_status(&name, &PostParams::default(), &body)
        .await
    {
        Ok(_) => tracing::debug!(namespace = %ns, quota = %name, "recounted"),
        // A charge or an edit got in first: the watch brings the quota back for another count.
        Err(kube::Error::Api(e)) if e.code == 409 || e.code == 404 => {}
        Err(source) => {
            return Err(QuotaError::Status {
                namespace: ns,
                name,
                source,
            })
        }
    }
    Ok(Action::requeue(RESYNC))
}

fn error_policy(_: Arc<ResourceQuota>, err: &QuotaError, _: Arc<State>) -> Action {
    tracing::warn!(error = %err, "resourcequota");
    Action::requeue(Duration::from_secs(2))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn resource_names_map_to_the_kinds_that_count_them() {
        let k = |r: &str| kind_of(r).map(|(g, p)| format!("{p}.{g}"));
        assert_eq!(k("cpu").as_deref(), Some("pods."));
        assert_eq!(k("requests.example.com/dongle").as_deref(), Some("pods."));
        assert_eq!(k("services.nodeports").as_deref(), Some("services."));
        assert_eq!(
            k("count/replicasets.apps").as_deref(),
            Some("replicasets.apps")
        );
        assert_eq!(
            k("count/widgets.example.com").as_deref(),
            Some("widgets.example.com")
        );
        assert_eq!(k("count/secrets").as_deref(), Some("secrets."));
        assert_eq!(
            k("gold.storageclass.storage.k8s.io/requests.storage").as_deref(),
            Some("persistentvolumeclaims.")
        );
        assert_eq!(k("resourcequotas").as_deref(), Some("resourcequotas."));
        assert_eq!(k("nonsense"), None);
    }

    #[test]
    fn status_counts_selected_objects_and_zeroes_the_rest() {
        let q = json!({"spec": {"hard": {"pods": "5", "cpu": "1", "memory": "500Mi", "services": "2"}}});
        let pod = |cpu: &str, phase: &str| {
            json!({"spec": {"containers": [{"name": "c",
            "resources": {"requests": {"cpu": cpu}}}]}, "status": {"phase": phase}})
        };
        let objects = BTreeMap::from([
            (
                (String::new(), "pods".to_string()),
                vec![
                    pod("200m", "Running"),
                    pod("300m", "Pending"),
                    pod("1", "Succeeded"),
                ],
            ),
            ((String::new(), "services".to_string()), vec![]),
        ]);
        let st = desired_status(&q, &objects);
        assert_eq!(
            st["used"],
            json!({"pods": "2", "cpu": "500m", "memory": "0", "services": "0"})
        );
        assert_eq!(st["hard"], q["spec"]["hard"]);
        let mut current = q.clone();
        current["status"] = json!({"hard": {"pods": "5", "cpu": "1000m", "memory": "500Mi", "services": "2"},
            "used": {"pods": "2", "cpu": "0.5", "memory": "0", "services": "0"}});
        assert!(status_is_current(&current, &st));
        current["status"]["used"]["pods"] = json!("3");
        assert!(!status_is_current(&current, &st));
        let scoped = json!({"spec": {"hard": {"pods": "5"}, "scopes": ["Terminating"]}});
        assert_eq!(
            desired_status(&scoped, &objects)["used"],
            json!({"pods": "0"})
        );
    }
}
