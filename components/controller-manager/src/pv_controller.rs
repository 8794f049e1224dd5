//! persistentvolume-binder: the loop around `pv_plan` — caches of claims, volumes, classes and pods,
//! one work queue of claims and volumes synced one at a time (so two syncs never race to bind),
//! every object resynced each 15 s (`--pvclaimbinder-sync-period`'s default), and the plan's steps
//! executed in order. The controller remembers what it wrote until its caches catch up, as
//! upstream's storeVolumeUpdate / storeClaimUpdate do, so a sync right after a binding does not
//! plan from the state before it.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use kiln_common::client::process_identity;
use kiln_common::events::{object_reference, EventRecorder};
use kube::api::{Api, PostParams};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::Resource;

use crate::context::{spawn_reflector, spawn_reflector_with_changes, Context};
use crate::pv_plan::{sync_claim, sync_volume, Caches, On, PlanError, Step};
use crate::pv_queue::Queue;

const RESYNC: Duration = Duration::from_secs(15);

#[derive(Debug, thiserror::Error)]
pub enum BinderError {
    #[error("{action} {object}: {source}")]
    Api {
        action: &'static str,
        object: String,
        source: kube::Error,
    },
    #[error("{object}: {source}")]
    Plan { object: String, source: PlanError },
}

impl BinderError {
    fn is_conflict(&self) -> bool {
        matches!(self, BinderError::Api { source: kube::Error::Api(s), .. } if s.code == 409)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Key {
    Claim { namespace: String, name: String },
    Volume(String),
}

fn claim_key(c: &PersistentVolumeClaim) -> Key {
    Key::Claim {
        namespace: c.metadata.namespace.clone().unwrap_or_default(),
        name: c.metadata.name.clone().unwrap_or_default(),
    }
}

fn resource_version<K: Resource>(obj: &K) -> u64 {
    obj.meta()
        .resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// What this controller wrote, kept until the cache holds that version or a newer one.
struct Written<K> {
    objects: HashMap<String, K>,
}

impl<K: Resource + Clone> Written<K> {
    fn new() -> Self {
        Written {
            objects: HashMap::new(),
        }
    }

    /// The newer of the cached object and the one written; None once the cache lost it (deleted).
    fn newest(&mut self, key: &str, cached: Option<Arc<K>>) -> Option<K> {
        let cached = cached?;
        match self.objects.get(key) {
            Some(mine) if resource_version(mine) > resource_version(cached.as_ref()) => {
                Some(mine.clone())
            }
            _ => {
                self.objects.remove(key);
                Some((*cached).clone())
            }
        }
    }

    fn remember(&mut self, key: String, obj: K) {
        self.objects.insert(key, obj);
    }
}

struct Binder {
    client: kube::Client,
    recorder: Arc<EventRecorder>,
    claims: Store<PersistentVolumeClaim>,
    volumes: Store<PersistentVolume>,
    classes: Store<StorageClass>,
    pods: Store<Pod>,
    queue: Arc<Queue<Key>>,
    written_claims: Written<PersistentVolumeClaim>,
    written_volumes: Written<PersistentVolume>,
}

pub async fn run(ctx: Context) {
    let client = ctx.client.clone();
    let (claims, claim_changes, _claims_task) =
        spawn_reflector_with_changes::<PersistentVolumeClaim>(&client);
    let (volumes, volume_changes, _volumes_task) =
        spawn_reflector_with_changes::<PersistentVolume>(&client);
    let (classes, _classes_task) = spawn_reflector::<StorageClass>(&client);
    let (pods, _pods_task) = spawn_reflector::<Pod>(&client);
    for ready in [
        claims.wait_until_ready().await,
        volumes.wait_until_ready().await,
        classes.wait_until_ready().await,
        pods.wait_until_ready().await,
    ] {
        if ready.is_err() {
            return;
        }
    }
    let queue = Queue::new();
    let q = queue.clone();
    tokio::spawn(claim_changes.for_each(move |c| {
        // A deleted claim's volume must notice, to be released.
        if let Some(v) = c.spec.as_ref().and_then(|s| s.volume_name.clone()) {
            q.push(Key::Volume(v));
        }
        q.push(claim_key(&c));
        futures::future::ready(())
    }));
    let q = queue.clone();
    tokio::spawn(volume_changes.for_each(move |v| {
        if let Some(r) = v.spec.as_ref().and_then(|s| s.claim_ref.as_ref()) {
            q.push(Key::Claim {
                namespace: r.namespace.clone().unwrap_or_default(),
                name: r.name.clone().unwrap_or_default(),
            });
        }
        q.push(Key::Volume(v.metadata.name.clone().unwrap_or_default()));
        futures::future::ready(())
    }));
    let (q, resync_claims, resync_volumes) = (queue.clone(), claims.clone(), volumes.clone());
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(RESYNC).await;
            for c in resync_claims.state() {
                q.push(claim_key(&c));
            }
            for v in resync_volumes.state() {
                q.push(Key::Volume(v.metadata.name.clone().unwrap_or_default()));
            }
        }
    });
    let mut binder = Binder {
        recorder: Arc::new(EventRecorder::new(
            client.clone(),
            "persistentvolume-controller",
            &process_identity(),
        )),
        client,
        claims,
        volumes,
        classes,
        pods,
        queue: queue.clone(),
        written_claims: Written::new(),
        written_volumes: Written::new(),
    };
    loop {
        let key = queue.pop().await;
        let result = match &key {
            Key::Claim { namespace, name } => binder.sync_claim(namespace, name).await,
            Key::Volume(name) => binder.sync_volume(name).await,
        };
        match result {
            Ok(()) => {}
            // Planned from a copy older than the stored one: the watch brings the newer one.
            Err(e) if e.is_conflict() => {
                tracing::debug!(error = %e, "persistentvolume-binder: conflict, retrying");
                queue.push_after(key, Duration::from_secs(1));
            }
            Err(e) => {
                tracing::warn!(error = %e, "persistentvolume-binder");
                queue.push_after(key, Duration::from_secs(5));
            }
        }
    }
}

impl Binder {
    fn volume_list(&mut self) -> Vec<Arc<PersistentVolume>> {
        let cached = self.volumes.state();
        cached
            .into_iter()
            .filter_map(|v| {
                let name = v.metadata.name.clone().unwrap_or_default();
                self.written_volumes.newest(&name, Some(v)).map(Arc::new)
            })
            .collect()
    }

    fn cached_claim(&mut self, namespace: &str, name: &str) -> Option<PersistentVolumeClaim> {
        let cached = self.claims.get(&ObjectRef::new(name).within(namespace));
        self.written_claims
            .newest(&format!("{namespace}/{name}"), cached)
    }

    async fn sync_claim(&mut self, namespace: &str, name: &str) -> Result<(), BinderError> {
        let Some(claim) = self.cached_claim(namespace, name) else {
            return Ok(());
        };
        let volumes = self.volume_list();
        let classes = self.classes.state();
        let pods: Vec<Arc<Pod>> = self
            .pods
            .state()
            .into_iter()
            .filter(|p| p.metadata.namespace.as_deref() == Some(namespace))
            .collect();
        let steps = sync_claim(
            &claim,
            &Caches {
                volumes: &volumes,
                classes: &classes,
                pods: &pods,
            },
        )
        .map_err(|source| BinderError::Plan {
            object: format!("PersistentVolumeClaim {namespace}/{name}"),
            source,
        })?;
        self.execute(steps, Some(claim), None).await
    }

    /// The claim a volume points to, as upstream finds it: the cache, then the API when the cache
    /// may simply lag (a volume not yet released), or when the cached claim has another UID.
    async fn claim_of(
        &mut self,
        volume: &PersistentVolume,
    ) -> Result<Option<PersistentVolumeClaim>, BinderError> {
        let Some(r) = volume.spec.as_ref().and_then(|s| s.claim_ref.as_ref()) else {
            return Ok(None);
        };
        let (ns, name) = (
            r.namespace.clone().unwrap_or_default(),
            r.name.clone().unwrap_or_default(),
        );
        let cached = self.cached_claim(&ns, &name);
        let phase = volume
            .status
            .as_ref()
            .and_then(|s| s.phase.as_deref())
            .unwrap_or("");
        let ask = match &cached {
            None => !matches!(phase, "Released" | "Failed"),
            Some(c) => c.metadata.uid != r.uid,
        };
        if !ask {
            return Ok(cached);
        }
        Api::<PersistentVolumeClaim>::namespaced(self.client.clone(), &ns)
            .get_opt(&name)
            .await
            .map_err(|source| BinderError::Api {
                action: "reading",
                object: format!("PersistentVolumeClaim {ns}/{name}"),
                source,
            })
    }

    async fn sync_volume(&mut self, name: &str) -> Result<(), BinderError> {
        let cached = self.volumes.get(&ObjectRef::new(name));
        let Some(volume) = self.written_volumes.newest(name, cached) else {
            return Ok(());
        };
        let claim = self.claim_of(&volume).await?;
        let pods = self.pods.state();
        let steps = sync_volume(&volume, claim.as_ref(), &pods);
        self.execute(steps, claim, Some(volume)).await
    }

    /// Awaited, not spawned: the recorder aggregates a repeated event by patching the one it
    /// created, and two concurrent records of the same event would both create one (the
    /// duplicate ExternalProvisioning event a claim used to get).
    async fn event(
        &self,
        reference: k8s_openapi::api::core::v1::ObjectReference,
        type_: &'static str,
        reason: &'static str,
        message: String,
    ) {
        if let Err(error) = self
            .recorder
            .record(&reference, type_, reason, &message)
            .await
        {
            tracing::warn!(%error, reason, "recording an event failed");
        }
    }

    /// The steps in order; each write starts from the newest copy this sync has of its object.
    async fn execute(
        &mut self,
        steps: Vec<Step>,
        mut claim: Option<PersistentVolumeClaim>,
        volume: Option<PersistentVolume>,
    ) -> Result<(), BinderError> {
        let mut volumes: HashMap<String, PersistentVolume> = HashMap::new();
        let volumes_api: Api<PersistentVolume> = Api::all(self.client.clone());
        for step in steps {
            match step {
                Step::UpdateVolume(mut v) => {
                    let name = v.metadata.name.clone().unwrap_or_default();
                    if let Some(latest) = volumes.get(&name) {
                        v.metadata.resource_version = latest.metadata.resource_version.clone();
                    }
                    let written = volumes_api
                        .replace(&name, &PostParams::default(), &v)
                        .await
                        .map_err(api_err("updating", "PersistentVolume", &name))?;
                    tracing::info!(volume = %name, claim = ?v.spec.as_ref().and_then(|s| s.claim_ref.as_ref()).and_then(|r| r.name.clone()), "volume updated");
                    self.written_volumes.remember(name.clone(), written.clone());
                    volumes.insert(name, written);
                }
                Step::VolumePhase {
                    volume: planned,
                    phase,
                    message,
                } => {
                    let name = planned.metadata.name.clone().unwrap_or_default();
                    let mut v = volumes.get(&name).cloned().unwrap_or(*planned);
                    let status = v.status.get_or_insert_with(Default::default);
                    status.phase = Some(phase.clone());
                    status.message = message;
                    let written = volumes_api
                        .replace_status(&name, &PostParams::default(), &v)
                        .await
                        .map_err(api_err("updating status of", "PersistentVolume", &name))?;
                    tracing::info!(volume = %name, %phase, "volume entered phase");
                    self.written_volumes.remember(name.clone(), written.clone());
                    volumes.insert(name, written);
                }
                Step::UpdateClaim(mut c) => {
                    let (ns, name) = (
                        c.metadata.namespace.clone().unwrap_or_default(),
                        c.metadata.name.clone().unwrap_or_default(),
                    );
                    if let Some(latest) = &claim {
                        c.metadata.resource_version = latest.metadata.resource_version.clone();
                    }
                    let written =
                        Api::<PersistentVolumeClaim>::namespaced(self.client.clone(), &ns)
                            .replace(&name, &PostParams::default(), &c)
                            .await
                            .map_err(api_err(
                                "updating",
                                "PersistentVolumeClaim",
                                &format!("{ns}/{name}"),
                            ))?;
                    self.written_claims
                        .remember(format!("{ns}/{name}"), written.clone());
                    claim = Some(written);
                }
                Step::ClaimStatus(status) => {
                    let Some(mut c) = claim.clone() else { continue };
                    let (ns, name) = (
                        c.metadata.namespace.clone().unwrap_or_default(),
                        c.metadata.name.clone().unwrap_or_default(),
                    );
                    let phase = status.phase.clone().unwrap_or_default();
                    c.status = Some(*status);
                    let written =
                        Api::<PersistentVolumeClaim>::namespaced(self.client.clone(), &ns)
                            .replace_status(&name, &PostParams::default(), &c)
                            .await
                            .map_err(api_err(
                                "updating status of",
                                "PersistentVolumeClaim",
                                &format!("{ns}/{name}"),
                            ))?;
                    tracing::info!(claim = %format!("{ns}/{name}"), %phase, "claim entered phase");
                    self.written_claims
                        .remember(format!("{ns}/{name}"), written.clone());
                    claim = Some(written);
                }
                Step::Event {
                    on,
                    type_,
                    reason,
                    message,
                } => {
                    let reference = match on {
                        On::Claim => claim.as_ref().map(object_reference),
                        On::Volume => volume.as_ref().map(object_reference),
                    };
                    if let Some(r) = reference {
                        self.event(r, type_, reason, message).await;
                    }
                }
                Step::SyncClaim { namespace, name } => {
                    self.queue.push(Key::Claim { namespace, name })
                }
            }
        }
        Ok(())
    }
}

fn api_err<'a>(
    action: &'static str,
    kind: &'static str,
    name: &'a str,
) -> impl FnOnce(kube::Error) -> BinderError + 'a {
    move |source| BinderError::Api {
        action,
        object: format!("{kind} {name}"),
        source,
    }
}
