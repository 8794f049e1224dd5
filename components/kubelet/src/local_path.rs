//! The node-local `kiln.io/local-path` provisioner, run inside each kubelet for its own node: it
//! watches claims, PVs and StorageClasses, asks [`crate::local_path_plan`] what to do, and does it
//! through two narrow traits — [`VolumeDirs`] for the node's filesystem and [`VolumeApi`] for the API
//! writes — so the executor is tested with recording doubles and the real ones stay small. Every
//! directory it makes or removes is re-checked here to be a direct child of `--local-path-dir` and not
//! a symlink, whatever the plan said (a PV's path is user-writable data).

use std::collections::BTreeMap;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{DeleteParams, PostParams, Preconditions};
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher::{self, watcher};
use kube::runtime::WatchStreamExt;
use kube::{Api, Client, ResourceExt};
use tokio::sync::watch;

use crate::local_path_plan::{self, Action, ClaimKey, World};

/// Default `--local-path-dir`.
pub const DEFAULT_DIR: &str = "/var/lib/kiln/local-path";
/// A full look even without watch events (a failed step is retried by it).
const RESYNC: Duration = Duration::from_secs(15);

#[derive(Debug, thiserror::Error)]
pub enum LocalPathError {
    #[error("refusing to touch {path}: not a directory directly under the local-path dir {root}")]
    OutsideRoot { path: PathBuf, root: PathBuf },
    #[error("refusing to remove {0}: it is a symlink, not the volume's directory")]
    Symlink(PathBuf),
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Api(String),
}

/// The node's filesystem, as the provisioner uses it.
pub trait VolumeDirs: Send + Sync {
    /// Makes `path` (and the root above it) with mode 0777; an existing directory is fine.
    fn make(&self, root: &Path, path: &Path) -> Result<(), LocalPathError>;
    /// Removes `path` and everything in it; a missing one is fine.
    fn remove(&self, root: &Path, path: &Path) -> Result<(), LocalPathError>;
}

/// The API writes the provisioner makes.
#[async_trait]
pub trait VolumeApi: Send + Sync {
    /// Creates the PV; one that already exists counts as made.
    async fn create_pv(&self, pv: &PersistentVolume) -> Result<(), LocalPathError>;
    /// Deletes the PV with this uid; a missing one counts as deleted.
    async fn delete_pv(&self, name: &str, uid: &str) -> Result<(), LocalPathError>;
    /// Best effort: an event about the claim.
    async fn claim_event(&self, claim: &ClaimKey, warning: bool, reason: &str, message: &str);
}

/// What one pass did, for logs and tests.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    pub provisioned: Vec<String>,
    pub deleted: Vec<String>,
    pub failed: Vec<String>,
}

/// Takes the plan's actions. `reported`: the last failure message per claim, so a claim that keeps
/// failing the same way gets one event, not one per pass.
pub async fn apply(
    root: &Path,
    actions: Vec<Action>,
    dirs: &dyn VolumeDirs,
    api: &dyn VolumeApi,
    reported: &mut BTreeMap<String, String>,
) -> Outcome {
    let mut out = Outcome::default();
    for action in actions {
        match action {
            Action::Provision { claim, dir, pv } => {
                let pv_name = pv.name_any();
                let step = async {
                    dirs.make(root, &dir)?;
                    api.create_pv(&pv).await
                };
                match step.await {
                    Ok(()) => {
                        tracing::info!(claim = %format!("{}/{}", claim.namespace, claim.name), pv = %pv_name, dir = %dir.display(), "provisioned a local-path volume");
                        reported.remove(&claim.uid);
                        api.claim_event(
                            &claim,
                            false,
                            "ProvisioningSucceeded",
                            &format!("Successfully provisioned volume {pv_name}"),
                        )
                        .await;
                        out.provisioned.push(pv_name);
                    }
                    Err(e) => fail(api, reported, &claim, e.to_string(), &mut out).await,
                }
            }
            Action::Fail { claim, message } => fail(api, reported, &claim, message, &mut out).await,
            Action::Delete { pv, uid, dir } => {
                let step = async {
                    dirs.remove(root, &dir)?;
                    api.delete_pv(&pv, &uid).await
                };
                match step.await {
                    Ok(()) => {
                        tracing::info!(pv = %pv, dir = %dir.display(), "deleted a released local-path volume and its data");
                        out.deleted.push(pv);
                    }
                    Err(e) => {
                        tracing::warn!(pv = %pv, error = %e, "deleting a released local-path volume; retrying");
                        out.failed.push(pv);
                    }
                }
            }
        }
    }
    out
}

async fn fail(
    api: &dyn VolumeApi,
    reported: &mut BTreeMap<String, String>,
    claim: &ClaimKey,
    message: String,
    out: &mut Outcome,
) {
    let key = format!("{}/{}", claim.namespace, claim.name);
    if reported.get(&claim.uid) != Some(&message) {
        tracing::warn!(claim = %key, error = %message, "local-path provisioning failed; retrying");
        api.claim_event(claim, true, "ProvisioningFailed", &message)
            .await;
        reported.insert(claim.uid.clone(), message);
    }
    out.failed.push(key);
}

/// The real filesystem, with the provisioner's guards.
pub struct HostDirs;

fn guard(root: &Path, path: &Path) -> Result<(), LocalPathError> {
    if local_path_plan::is_under_root(root, path) {
        Ok(())
    } else {
        Err(LocalPathError::OutsideRoot {
            path: path.to_path_buf(),
            root: root.to_path_buf(),
        })
    }
}

impl VolumeDirs for HostDirs {
    fn make(&self, root: &Path, path: &Path) -> Result<(), LocalPathError> {
        guard(root, path)?;
        let io = |what, p: &Path| {
            let p = p.to_path_buf();
            move |source| LocalPathError::Io {
                what,
                path: p,
                source,
            }
        };
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(root)
            .map_err(io("creating", root))?;
        match std::fs::symlink_metadata(path) {
            Ok(m) if m.file_type().is_symlink() => {
                return Err(LocalPathError::Symlink(path.to_path_buf()))
            }
            Ok(_) => {}
            Err(_) => std::fs::DirBuilder::new()
                .mode(0o777)
                .create(path)
                .map_err(io("creating", path))?,
        }
        // 0777 whatever the umask, so a non-root container can write its volume.
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o777))
            .map_err(io("chmod", path))
    }

    fn remove(&self, root: &Path, path: &Path) -> Result<(), LocalPathError> {
        guard(root, path)?;
        match std::fs::symlink_metadata(path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(source) => Err(LocalPathError::Io {
                what: "reading",
                path: path.to_path_buf(),
                source,
            }),
            Ok(m) if m.file_type().is_symlink() => Err(LocalPathError::Symlink(path.to_path_buf())),
            // remove_dir_all removes symlinks inside without following them.
            Ok(_) => std::fs::remove_dir_all(path).map_err(|source| LocalPathError::Io {
                what: "removing",
                path: path.to_path_buf(),
                source,
            }),
        }
    }
}

/// The API through the kubelet's client (the node's RBAC: `system:kiln:local-path-provisioner`).
pub struct KubeVolumes {
    pub client: Client,
    pub node: String,
}

#[async_trait]
impl VolumeApi for KubeVolumes {
    async fn create_pv(&self, pv: &PersistentVolume) -> Result<(), LocalPathError> {
        let api: Api<PersistentVolume> = Api::all(self.client.clone());
        match api.create(&PostParams::default(), pv).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
            Err(e) => Err(LocalPathError::Api(format!(
                "creating PersistentVolume {}: {e}",
                pv.name_any()
            ))),
        }
    }

    async fn delete_pv(&self, name: &str, uid: &str) -> Result<(), LocalPathError> {
        let api: Api<PersistentVolume> = Api::all(self.client.clone());
        let dp = DeleteParams {
            preconditions: (!uid.is_empty()).then(|| Preconditions {
                uid: Some(uid.into()),
                resource_version: None,
            }),
            ..Default::default()
        };
        match api.delete(name, &dp).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(LocalPathError::Api(format!(
                "deleting PersistentVolume {name}: {e}"
            ))),
        }
    }

    async fn claim_event(&self, claim: &ClaimKey, warning: bool, reason: &str, message: &str) {
        use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
        let now = k8s_openapi::jiff::Timestamp::now();
        let ev = Event {
            metadata: ObjectMeta {
                generate_name: Some(format!("{}.", claim.name)),
                namespace: Some(claim.namespace.clone()),
                ..Default::default()
            },
            involved_object: ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("PersistentVolumeClaim".into()),
                namespace: Some(claim.namespace.clone()),
                name: Some(claim.name.clone()),
                uid: Some(claim.uid.clone()),
                ..Default::default()
            },
            reason: Some(reason.into()),
            message: Some(message.into()),
            type_: Some(if warning { "Warning" } else { "Normal" }.into()),
            source: Some(EventSource {
                component: Some(format!("{}_{}", local_path_plan::PROVISIONER, self.node)),
                host: Some(self.node.clone()),
            }),
            reporting_component: Some(local_path_plan::PROVISIONER.into()),
            reporting_instance: Some(self.node.clone()),
            first_timestamp: Some(Time(now)),
            last_timestamp: Some(Time(now)),
            event_time: Some(MicroTime(now)),
            count: Some(1),
            action: Some("Provisioning".into()),
            ..Default::default()
        };
        let api: Api<Event> = Api::namespaced(self.client.clone(), &claim.namespace);
        if let Err(e) = api.create(&PostParams::default(), &ev).await {
            tracing::debug!(error = %e, "posting a provisioning event");
        }
    }
}

fn watched<K>(api: Api<K>, tx: watch::Sender<()>) -> (Store<K>, impl futures::Stream<Item = ()>)
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let (store, writer) = reflector::store();
    let stream = watcher(api, watcher::Config::default())
        .default_backoff()
        .modify(|o| o.managed_fields_mut().clear())
        .reflect(writer)
        .map(move |ev| {
            if let Err(e) = ev {
                tracing::debug!(error = %e, "local-path provisioner watch; retrying");
            }
            tx.send_replace(());
        });
    (store, stream)
}

/// Runs the provisioner for `node` under `root` until shutdown. Waits for the first full list of all
/// three kinds, then plans after every change (and every [`RESYNC`]).
pub async fn run(client: Client, node: String, root: PathBuf, mut shutdown: watch::Receiver<bool>) {
    let (tx, mut changed) = watch::channel(());
    let (claims, s1) = watched(
        Api::<PersistentVolumeClaim>::all(client.clone()),
        tx.clone(),
    );
    let (volumes, s2) = watched(Api::<PersistentVolume>::all(client.clone()), tx.clone());
    let (classes, s3) = watched(Api::<StorageClass>::all(client.clone()), tx);
    let events = futures::stream::select(s1, futures::stream::select(s2, s3));
    let mut stop = shutdown.clone();
    tokio::spawn(async move {
        let mut events = std::pin::pin!(events);
        loop {
            tokio::select! {
                ev = events.next() => if ev.is_none() { return },
                _ = stop.wait_for(|s| *s) => return,
            }
        }
    });
    tracing::info!(node = %node, dir = %root.display(), "local-path provisioner: watching claims");
    let ready = async {
        let _ = claims.wait_until_ready().await;
        let _ = volumes.wait_until_ready().await;
        let _ = classes.wait_until_ready().await;
    };
    tokio::select! {
        _ = ready => {}
        _ = shutdown.wait_for(|s| *s) => return,
    }
    let api = KubeVolumes {
        client,
        node: node.clone(),
    };
    let dirs = HostDirs;
    let mut reported = BTreeMap::new();
    loop {
        let (c, v, k) = (claims.state(), volumes.state(), classes.state());
        let c: Vec<PersistentVolumeClaim> = c.iter().map(|o| (**o).clone()).collect();
        let v: Vec<PersistentVolume> = v.iter().map(|o| (**o).clone()).collect();
        let k: Vec<StorageClass> = k.iter().map(|o| (**o).clone()).collect();
        let actions = local_path_plan::plan(&World {
            node: &node,
            root: &root,
            claims: &c,
            volumes: &v,
            classes: &k,
        });
        if !actions.is_empty() {
            apply(&root, actions, &dirs, &api, &mut reported).await;
        }
        let stop = tokio::select! {
            _ = changed.changed() => false,
            _ = tokio::time::sleep(RESYNC) => false,
            _ = shutdown.wait_for(|s| *s) => true,
        };
        if stop {
            return;
        }
        // Let a burst of events settle into one pass.
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Starts the provisioner beside the workload loop (nothing when `root` is empty: turned off).
pub fn start(client: Client, node: &str, root: &Path, shutdown: watch::Receiver<bool>) {
    if root.as_os_str().is_empty() {
        tracing::info!("local-path provisioner off (--local-path-dir is empty)");
        return;
    }
    tokio::spawn(run(client, node.into(), root.into(), shutdown));
}

#[cfg(test)]
#[path = "local_path_tests.rs"]
mod tests;
