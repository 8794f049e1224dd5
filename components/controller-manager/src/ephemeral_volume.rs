//! ephemeral-volume (upstream's pkg/controller/volume/ephemeral): every generic ephemeral volume
//! of a pod gets its claim `<pod>-<volume>` from the volumeClaimTemplate, controlled by the pod
//! (controller + blockOwnerDeletion), so the garbage collector removes it with the pod. A claim of
//! that name the pod does not own is a conflict, reported on the pod as upstream does; pods being
//! deleted are left alone.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kiln_common::client::process_identity;
use kiln_common::events::{object_reference, EventRecorder, WARNING};
use kube::api::{Api, PostParams};
use kube::runtime::reflector::{ObjectRef, Store};

use crate::context::{spawn_reflector, spawn_reflector_with_changes, Context};
use crate::pv_pods::{claim_is_for_pod, ephemeral_claim_name};
use crate::pv_queue::Queue;

#[derive(Debug, thiserror::Error)]
pub enum EphemeralError {
    #[error("pod {pod}, ephemeral volume {volume}: {message}")]
    Volume {
        pod: String,
        volume: String,
        message: String,
    },
}

/// What one pod needs.
#[derive(Debug, Clone, PartialEq)]
pub enum Need {
    Create(Box<PersistentVolumeClaim>),
    /// The claim's name is taken by a claim the pod does not control.
    Conflict {
        volume: String,
        message: String,
    },
}

/// The claim upstream makes for an ephemeral volume: the template's labels, annotations and spec.
pub fn claim_for(
    pod: &Pod,
    volume: &str,
    template: &k8s_openapi::api::core::v1::PersistentVolumeClaimTemplate,
) -> PersistentVolumeClaim {
    PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(ephemeral_claim_name(pod, volume)),
            namespace: pod.metadata.namespace.clone(),
            labels: template.metadata.as_ref().and_then(|m| m.labels.clone()),
            annotations: template
                .metadata
                .as_ref()
                .and_then(|m| m.annotations.clone()),
            owner_references: Some(vec![OwnerReference {
                api_version: "v1".into(),
                kind: "Pod".into(),
                name: pod.metadata.name.clone().unwrap_or_default(),
                uid: pod.metadata.uid.clone().unwrap_or_default(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]),
            ..Default::default()
        },
        spec: Some(template.spec.clone()),
        status: None,
    }
}

/// syncHandler + handleVolume, volume by volume; the first conflict stops the pod's sync, as
/// upstream's error return does.
pub fn plan(pod: &Pod, existing: impl Fn(&str) -> Option<Arc<PersistentVolumeClaim>>) -> Vec<Need> {
    if pod.metadata.deletion_timestamp.is_some() {
        return vec![];
    }
    let mut needs = Vec::new();
    for v in pod.spec.iter().flat_map(|s| s.volumes.iter().flatten()) {
        let Some(template) = v
            .ephemeral
            .as_ref()
            .and_then(|e| e.volume_claim_template.as_ref())
        else {
            continue;
        };
        let name = ephemeral_claim_name(pod, &v.name);
        match existing(&name) {
            Some(claim) if claim_is_for_pod(pod, &claim) => {}
            Some(claim) => {
                let message = format!(
                    "PVC {}/{} was not created for pod {}/{} (pod is not owner)",
                    claim.metadata.namespace.as_deref().unwrap_or_default(),
                    name,
                    pod.metadata.namespace.as_deref().unwrap_or_default(),
                    pod.metadata.name.as_deref().unwrap_or_default(),
                );
                needs.push(Need::Conflict {
                    volume: v.name.clone(),
                    message,
                });
                break;
            }
            None => needs.push(Need::Create(Box::new(claim_for(pod, &v.name, template)))),
        }
    }
    needs
}

type Key = (String, String);

pub async fn run(ctx: Context) {
    let (pods, pod_changes, _pods_task) = spawn_reflector_with_changes::<Pod>(&ctx.client);
    let (claims, _claims_task) = spawn_reflector::<PersistentVolumeClaim>(&ctx.client);
    if pods.wait_until_ready().await.is_err() || claims.wait_until_ready().await.is_err() {
        return;
    }
    let recorder = Arc::new(EventRecorder::new(
        ctx.client.clone(),
        "ephemeral_volume",
        &process_identity(),
    ));
    let queue: Arc<Queue<Key>> = Queue::new();
    let q = queue.clone();
    tokio::spawn(pod_changes.for_each(move |p| {
        let ephemeral = p
            .spec
            .iter()
            .flat_map(|s| s.volumes.iter().flatten())
            .any(|v| v.ephemeral.is_some());
        if ephemeral {
            q.push((
                p.metadata.namespace.clone().unwrap_or_default(),
                p.metadata.name.clone().unwrap_or_default(),
            ));
        }
        futures::future::ready(())
    }));
    loop {
        let key = queue.pop().await;
        if let Err(e) = sync(&ctx.client, &recorder, &pods, &claims, &key).await {
            tracing::warn!(error = %e, "ephemeral-volume");
            queue.push_after(key, Duration::from_secs(5));
        }
    }
}

async fn sync(
    client: &kube::Client,
    recorder: &EventRecorder,
    pods: &Store<Pod>,
    claims: &Store<PersistentVolumeClaim>,
    (ns, name): &Key,
) -> Result<(), EphemeralError> {
    let Some(pod) = pods.get(&ObjectRef::new(name).within(ns)) else {
        return Ok(());
    };
    let api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    let needs = plan(&pod, |c| claims.get(&ObjectRef::new(c).within(ns)));
    for need in needs {
        let (volume, message) = match need {
            Need::Conflict { volume, message } => (volume, message),
            Need::Create(claim) => {
                let claim_name = claim.metadata.name.clone().unwrap_or_default();
                match api.create(&PostParams::default(), &claim).await {
                    Ok(_) => {
                        tracing::info!(claim = %format!("{ns}/{claim_name}"), "created ephemeral volume claim");
                        continue;
                    }
                    // Made meanwhile (the cache lags): the next sync checks who owns it.
                    Err(kube::Error::Api(e)) if e.code == 409 => continue,
                    Err(e) => {
                        let volume = claim_name
                            .strip_prefix(&format!("{name}-"))
                            .unwrap_or(&claim_name)
                            .to_string();
                        (volume, format!("create PVC {claim_name}: {e}"))
                    }
                }
            }
        };
        let _ = recorder
            .record(
                &object_reference(pod.as_ref()),
                WARNING,
                "FailedBinding",
                &format!("ephemeral volume {volume}: {message}"),
            )
            .await;
        return Err(EphemeralError::Volume {
            pod: format!("{ns}/{name}"),
            volume,
            message,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod() -> Pod {
        serde_json::from_value(
            json!({"metadata": {"name": "web", "namespace": "ns", "uid": "pod-uid"},
            "spec": {"containers": [], "volumes": [
                {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {
                    "metadata": {"labels": {"type": "scratch"}, "annotations": {"a": "b"}},
                    "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "local-path",
                        "resources": {"requests": {"storage": "1Gi"}}}}}},
                {"name": "plain", "emptyDir": {}}]}}),
        )
        .unwrap()
    }

    #[test]
    fn a_missing_claim_is_created_owned_by_the_pod() {
        let needs = plan(&pod(), |_| None);
        let [Need::Create(c)] = needs.as_slice() else {
            panic!("{needs:?}")
        };
        assert_eq!(c.metadata.name.as_deref(), Some("web-scratch"));
        assert_eq!(c.metadata.namespace.as_deref(), Some("ns"));
        assert_eq!(c.metadata.labels.as_ref().unwrap()["type"], "scratch");
        assert_eq!(c.metadata.annotations.as_ref().unwrap()["a"], "b");
        let r = &c.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (
                r.kind.as_str(),
                r.name.as_str(),
                r.uid.as_str(),
                r.controller,
                r.block_owner_deletion
            ),
            ("Pod", "web", "pod-uid", Some(true), Some(true))
        );
        assert_eq!(
            c.spec.as_ref().unwrap().storage_class_name.as_deref(),
            Some("local-path")
        );
    }

    #[test]
    fn an_owned_claim_is_left_and_a_foreign_one_conflicts() {
        let owned = Arc::new(claim_for(
            &pod(),
            "scratch",
            pod().spec.unwrap().volumes.unwrap()[0]
                .ephemeral
                .as_ref()
                .unwrap()
                .volume_claim_template
                .as_ref()
                .unwrap(),
        ));
        assert_eq!(plan(&pod(), |_| Some(owned.clone())), vec![]);
        let mut foreign = (*owned).clone();
        foreign.metadata.owner_references = None;
        let foreign = Arc::new(foreign);
        assert_eq!(
            plan(&pod(), |_| Some(foreign.clone())),
            vec![Need::Conflict {
                volume: "scratch".into(),
                message: "PVC ns/web-scratch was not created for pod ns/web (pod is not owner)"
                    .into()
            }]
        );
    }

    #[test]
    fn a_pod_being_deleted_gets_nothing() {
        let mut p = pod();
        p.metadata.deletion_timestamp =
            Some(serde_json::from_value(json!("2026-01-01T00:00:00Z")).unwrap());
        assert_eq!(plan(&p, |_| None), vec![]);
    }
}
