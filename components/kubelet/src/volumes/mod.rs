//! A workload pod's volumes on the node: each lives in
//! `<root>/pods/<uid>/volumes/kubernetes.io~<plugin>/<name>` (hostPath excepted: it is the node's own
//! path) and is bind-mounted into containers by containerd from the CRI mounts built here. emptyDir and
//! hostPath are set up once; configMap, secret, projected and downwardAPI volumes are written with the
//! [`atomic_writer`] and rewritten by [`PodVolumes::refresh`] (called every few seconds by the pod's
//! worker) so changes reach running containers well within a minute. The service-account volume is
//! added here when the pod does not opt out and the API server issues tokens. [`PodVolumes::tear_down`]
//! unmounts and removes everything when the pod is gone. persistentVolumeClaim and ephemeral volumes
//! ([`pvc`]) mount their PV's node-local directory, which teardown leaves alone (the data is the PV's).
//! A pod's `securityContext.fsGroup` owns its emptyDir and API-backed volumes (group, group access,
//! setgid directories), as upstream's SetVolumeOwnership.

pub mod atomic_writer;
pub mod configmap;
pub mod empty_dir;
pub mod fs_group_policy;
pub mod host_path;
pub mod projected;
pub mod pvc;
pub mod secret;
pub mod sub_path;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::{Container, Pod, ProjectedVolumeSource, Volume};

use crate::env_resources::NodeAllocatable;
use crate::pod_objects::{ObjectError, PodObjects};
use empty_dir::Medium;
use projected::HeldToken;

/// Where pods find their service-account credentials.
pub const SA_MOUNT_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// The volume the kubelet adds for them.
pub const SA_VOLUME: &str = "kube-api-access";

#[derive(Debug, thiserror::Error)]
pub enum VolumeError {
    #[error("{kind} {name:?} not found")]
    NotFound { kind: &'static str, name: String },
    #[error("{kind} references non-existent key: {key} ({kind} {name:?})")]
    MissingKey {
        kind: &'static str,
        name: String,
        key: String,
    },
    #[error("hostPath type check failed: {path} {message}")]
    HostPathType { path: String, message: String },
    #[error("{0}")]
    Unsupported(String),
    #[error("error processing PVC {namespace}/{name}: {message}")]
    Claim {
        namespace: String,
        name: String,
        message: String,
    },
    #[error("volume {0:?} is not defined in the pod")]
    NoSuchVolume(String),
    #[error(transparent)]
    SubPath(#[from] sub_path::SubPathError),
    #[error("the API server issued no token for service account {namespace}/{service_account} (no signing key, or no such service account)")]
    NoToken {
        namespace: String,
        service_account: String,
    },
    #[error(transparent)]
    Objects(#[from] ObjectError),
    #[error(transparent)]
    Writer(#[from] atomic_writer::WriterError),
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("volume {volume:?}: {source}")]
    Volume {
        volume: String,
        #[source]
        source: Box<VolumeError>,
    },
}

impl VolumeError {
    pub fn io(what: &'static str, path: &Path, source: std::io::Error) -> Self {
        VolumeError::Io {
            what,
            path: path.to_path_buf(),
            source,
        }
    }

    fn in_volume(self, volume: &str) -> Self {
        VolumeError::Volume {
            volume: volume.into(),
            source: Box::new(self),
        }
    }
}

/// `<root>/<uid>`: everything the kubelet keeps for one pod.
pub fn pod_dir(pods_root: &Path, uid: &str) -> PathBuf {
    pods_root.join(uid)
}

/// `<root>/<uid>/volumes/kubernetes.io~<plugin>/<name>`, upstream's layout.
pub fn volume_dir(pods_root: &Path, uid: &str, plugin: &str, name: &str) -> PathBuf {
    pod_dir(pods_root, uid)
        .join("volumes")
        .join(format!("kubernetes.io~{plugin}"))
        .join(name)
}

#[derive(Debug, Clone)]
enum Source {
    EmptyDir(Medium),
    HostPath {
        path: PathBuf,
        type_: Option<String>,
    },
    ConfigMap(k8s_openapi::api::core::v1::ConfigMapVolumeSource),
    Secret(k8s_openapi::api::core::v1::SecretVolumeSource),
    Projected(ProjectedVolumeSource),
    DownwardApi(k8s_openapi::api::core::v1::DownwardAPIVolumeSource),
    /// persistentVolumeClaim or ephemeral: the bound PV's directory, resolved at set-up.
    Claim(pvc::ClaimSource),
}

impl Source {
    fn plugin(&self) -> &'static str {
        match self {
            Source::EmptyDir(_) => "empty-dir",
            Source::HostPath { .. } => "host-path",
            Source::ConfigMap(_) => "configmap",
            Source::Secret(_) => "secret",
            Source::Projected(_) => "projected",
            Source::DownwardApi(_) => "downward-api",
            Source::Claim(_) => "local-volume",
        }
    }

    /// Written from API objects, re-written on refresh, always mounted read-only (as upstream).
    fn is_api_backed(&self) -> bool {
        matches!(
            self,
            Source::ConfigMap(_)
                | Source::Secret(_)
                | Source::Projected(_)
                | Source::DownwardApi(_)
        )
    }

    fn parse(pod: &Pod, v: &Volume) -> Result<Self, VolumeError> {
        if let Some(c) = pvc::claim_source(pod, v) {
            return Ok(Source::Claim(c));
        }
        if let Some(e) = &v.empty_dir {
            return Medium::parse(e.medium.as_deref())
                .map(Source::EmptyDir)
                .map_err(VolumeError::Unsupported);
        }
        if let Some(h) = &v.host_path {
            return Ok(Source::HostPath {
                path: PathBuf::from(&h.path),
                type_: h.type_.clone(),
            });
        }
        if let Some(c) = &v.config_map {
            return Ok(Source::ConfigMap(c.clone()));
        }
        if let Some(s) = &v.secret {
            return Ok(Source::Secret(s.clone()));
        }
        if let Some(p) = &v.projected {
            return Ok(Source::Projected(p.clone()));
        }
        if let Some(d) = &v.downward_api {
            return Ok(Source::DownwardApi(d.clone()));
        }
        Err(VolumeError::Unsupported(format!(
            "volume {:?}: only emptyDir, hostPath, configMap, secret, projected, downwardAPI, persistentVolumeClaim and ephemeral volumes are supported",
            v.name
        )))
    }
}

#[derive(Debug, Clone)]
struct Vol {
    name: String,
    source: Source,
    /// The kubelet's own service-account volume (dropped when the API server issues no tokens).
    automatic: bool,
}

pub struct PodVolumes {
    pod: Pod,
    pods_root: PathBuf,
    vols: Vec<Vol>,
    tokens: HashMap<String, HeldToken>,
    /// Claim volumes' PV directories, by volume name, once set up.
    claims: HashMap<String, pvc::Resolved>,
    set_up: bool,
    /// Secret and projected volumes on tmpfs (upstream's choice; needs root, so tests opt out).
    secrets_in_memory: bool,
    /// The node's allocatable: what downwardAPI `resourceFieldRef` files read for unset limits.
    allocatable: NodeAllocatable,
    /// `spec.securityContext.fsGroup`: emptyDir and the API-backed volumes belong to this group
    /// ([`atomic_writer::set_volume_ownership`], upstream's SetVolumeOwnership).
    fs_group: Option<u32>,
    /// `spec.securityContext.fsGroupChangePolicy`: whether a volume whose root already matches is
    /// walked again.
    fs_group_policy: fs_group_policy::ChangePolicy,
}

/// Does any container already mount something at the service-account path?
fn mounts_sa_path(pod: &Pod) -> bool {
    let spec = pod.spec.as_ref();
    spec.into_iter()
        .flat_map(|s| {
            s.containers
                .iter()
                .chain(s.init_containers.iter().flatten())
        })
        .flat_map(|c| c.volume_mounts.iter().flatten())
        .any(|m| m.mount_path.trim_end_matches('/') == SA_MOUNT_PATH)
}

impl PodVolumes {
    /// The pod's volumes, checked for kinds this kubelet supports. `service_account`: add the
    /// service-account volume unless the pod opts out (automountServiceAccountToken: false).
    pub fn new(pod: &Pod, pods_root: &Path, service_account: bool) -> Result<Self, VolumeError> {
        let spec = pod.spec.clone().unwrap_or_default();
        let mut vols = Vec::new();
        for v in spec.volumes.iter().flatten() {
            vols.push(Vol {
                name: v.name.clone(),
                source: Source::parse(pod, v)?,
                automatic: false,
            });
        }
        let wants_sa = service_account
            && spec.automount_service_account_token != Some(false)
            && !mounts_sa_path(pod)
            && !vols.iter().any(|v| v.name == SA_VOLUME);
        if wants_sa {
            vols.push(Vol {
                name: SA_VOLUME.into(),
                source: Source::Projected(projected::service_account_source()),
                automatic: true,
            });
        }
        Ok(PodVolumes {
            pod: pod.clone(),
            pods_root: pods_root.to_path_buf(),
            vols,
            tokens: HashMap::new(),
            claims: HashMap::new(),
            set_up: false,
            secrets_in_memory: false,
            allocatable: NodeAllocatable::default(),
            fs_group: spec
                .security_context
                .as_ref()
                .and_then(|s| s.fs_group)
                .and_then(|g| u32::try_from(g).ok()),
            fs_group_policy: fs_group_policy::ChangePolicy::parse(
                spec.security_context
                    .as_ref()
                    .and_then(|s| s.fs_group_change_policy.as_deref()),
            ),
        })
    }

    /// Puts secret and projected volumes on tmpfs.
    pub fn secrets_in_memory(mut self, on: bool) -> Self {
        self.secrets_in_memory = on;
        self
    }

    /// The node's allocatable, for downwardAPI `resourceFieldRef` files of containers without limits.
    pub fn node_allocatable(mut self, allocatable: NodeAllocatable) -> Self {
        self.allocatable = allocatable;
        self
    }

    fn uid(&self) -> &str {
        self.pod.metadata.uid.as_deref().unwrap_or_default()
    }

    /// The pod's object changed in the API: downwardAPI files (plain and projected) show its new labels
    /// and annotations from the next [`Self::refresh`] on. The volumes themselves cannot change.
    pub fn update_pod(&mut self, pod: &Pod) {
        self.pod.metadata.labels = pod.metadata.labels.clone();
        self.pod.metadata.annotations = pod.metadata.annotations.clone();
    }

    /// Where a volume's contents are on the node.
    fn host_dir(&self, v: &Vol) -> PathBuf {
        match &v.source {
            Source::HostPath { path, .. } => path.clone(),
            Source::Claim(_) if self.claims.contains_key(&v.name) => {
                self.claims[&v.name].path.clone()
            }
            s => volume_dir(&self.pods_root, self.uid(), s.plugin(), &v.name),
        }
    }

    pub fn is_set_up(&self) -> bool {
        self.set_up
    }

    /// True when the pod has no volume that touches the node (nothing to set up or clean).
    pub fn is_empty(&self) -> bool {
        self.vols.is_empty()
    }

    /// Makes every volume; done once before the sandbox (a failure is retried by the next call).
    pub async fn set_up(
        &mut self,
        objects: Option<&dyn PodObjects>,
        now: i64,
    ) -> Result<(), VolumeError> {
        if self.set_up {
            return Ok(());
        }
        for v in self.vols.clone() {
            let dir = self.host_dir(&v);
            match &v.source {
                Source::EmptyDir(medium) => {
                    empty_dir::set_up(&dir, *medium).map_err(|e| e.in_volume(&v.name))?;
                    if let Some(group) = self.fs_group {
                        fs_group_policy::apply(&dir, group, false, self.fs_group_policy)
                            .map_err(|e| VolumeError::from(e).in_volume(&v.name))?;
                    }
                }
                Source::Secret(_) | Source::Projected(_) if self.secrets_in_memory => {
                    empty_dir::set_up_with_mode(&dir, Medium::Memory, 0o755)
                        .map_err(|e| e.in_volume(&v.name))?
                }
                Source::HostPath { path, type_ } => {
                    host_path::check(path, type_.as_deref()).map_err(|e| e.in_volume(&v.name))?
                }
                Source::Claim(src) => {
                    let objects = objects
                        .ok_or(ObjectError::NoClient)
                        .map_err(|e| VolumeError::from(e).in_volume(&v.name))?;
                    let resolved = pvc::resolve(&self.pod, src, objects)
                        .await
                        .map_err(|e| e.in_volume(&v.name))?;
                    tracing::info!(pod = ?self.pod.metadata.name, volume = %v.name, pv = %resolved.pv, path = %resolved.path.display(), "claim volume resolved");
                    // A writable `local` PV is the pod's fsGroup's, as upstream's local plugin
                    // mounts it (hostPath PVs are left alone).
                    if let (Some(group), true) =
                        (self.fs_group, resolved.managed && !resolved.read_only)
                    {
                        fs_group_policy::apply(&resolved.path, group, false, self.fs_group_policy)
                            .map_err(|e| VolumeError::from(e).in_volume(&v.name))?;
                    }
                    self.claims.insert(v.name.clone(), resolved);
                }
                _ => {}
            }
        }
        self.refresh(objects, now).await?;
        self.set_up = true;
        Ok(())
    }

    /// Re-writes the API-backed volumes from the current objects (a no-op on disk when nothing
    /// changed). Returns the names of the volumes whose files changed.
    pub async fn refresh(
        &mut self,
        objects: Option<&dyn PodObjects>,
        now: i64,
    ) -> Result<Vec<String>, VolumeError> {
        let mut changed = Vec::new();
        let mut dropped = Vec::new();
        for v in self.vols.clone() {
            if !v.source.is_api_backed() {
                continue;
            }
            let files = match self.files(&v, objects, now).await {
                Ok(f) => f,
                Err(VolumeError::NoToken { .. }) if v.automatic => {
                    tracing::warn!(pod = ?self.pod.metadata.name, "the API server issues no service-account token for this pod; not mounting {SA_MOUNT_PATH}");
                    dropped.push(v.name.clone());
                    continue;
                }
                Err(e) => return Err(e.in_volume(&v.name)),
            };
            let dir = self.host_dir(&v);
            if atomic_writer::write_owned(&dir, &files, self.fs_group)
                .map_err(|e| VolumeError::from(e).in_volume(&v.name))?
            {
                changed.push(v.name.clone());
            }
        }
        self.vols.retain(|v| !dropped.contains(&v.name));
        Ok(changed)
    }

    async fn files(
        &mut self,
        v: &Vol,
        objects: Option<&dyn PodObjects>,
        now: i64,
    ) -> Result<atomic_writer::Files, VolumeError> {
        let ns = self
            .pod
            .metadata
            .namespace
            .as_deref()
            .unwrap_or("default")
            .to_string();
        match &v.source {
            Source::ConfigMap(src) => {
                let objects = objects.ok_or(ObjectError::NoClient)?;
                let data = objects.config_map(&ns, &src.name).await?;
                configmap::files(src, data.as_ref())
            }
            Source::Secret(src) => {
                let objects = objects.ok_or(ObjectError::NoClient)?;
                let name = src.secret_name.clone().unwrap_or_default();
                let data = objects.secret(&ns, &name).await?;
                secret::files(src, data.as_ref())
            }
            Source::Projected(src) => {
                let objects = objects.ok_or(ObjectError::NoClient)?;
                let node = &self.allocatable;
                projected::files(
                    &self.pod,
                    &v.name,
                    src,
                    objects,
                    &mut self.tokens,
                    now,
                    node,
                )
                .await
            }
            Source::DownwardApi(src) => projected::downward_files(
                &self.pod,
                src.items.as_deref().unwrap_or_default(),
                src.default_mode
                    .map(|m| m as u32)
                    .unwrap_or(projected::DEFAULT_MODE),
                &self.allocatable,
            ),
            Source::EmptyDir(_) | Source::HostPath { .. } | Source::Claim(_) => {
                Ok(Default::default())
            }
        }
    }

    /// The CRI mounts for one container: its volumeMounts (readOnly, subPath, propagation) and the
    /// service-account volume. Call after [`Self::set_up`]. A subPathExpr here sees no variables;
    /// the pod worker uses [`Self::container_mounts`] with the container's env.
    pub fn mounts(&self, c: &Container) -> Result<Vec<cri::Mount>, VolumeError> {
        self.container_mounts(c, &[])
    }

    /// [`Self::mounts`] with `env`, the container's variables in CRI order, for its subPathExprs.
    pub fn container_mounts(
        &self,
        c: &Container,
        env: &[(String, String)],
    ) -> Result<Vec<cri::Mount>, VolumeError> {
        let mut out = Vec::new();
        for m in c.volume_mounts.iter().flatten() {
            let v = self
                .vols
                .iter()
                .find(|v| v.name == m.name)
                .ok_or_else(|| VolumeError::NoSuchVolume(m.name.clone()))?;
            let sub = match m.sub_path_expr.as_deref().filter(|s| !s.is_empty()) {
                Some(expr) => sub_path::expand(expr, env)?,
                None => m.sub_path.clone().unwrap_or_default(),
            };
            let base = self.host_dir(v);
            let host = if sub.is_empty() {
                base
            } else {
                sub_path::check(&sub)?;
                let create = matches!(
                    v.source,
                    Source::EmptyDir(_) | Source::HostPath { .. } | Source::Claim(_)
                );
                sub_path::resolve(&base, &sub, create).map_err(|e| {
                    tracing::warn!(pod = %self.uid(), container = %c.name, volume = %m.name, error = %e, "subPath");
                    e.user_facing(&m.name, &c.name)
                })?
            };
            let claim_read_only = self.claims.get(&v.name).is_some_and(|c| c.read_only);
            out.push(cri::Mount {
                container_path: m.mount_path.clone(),
                host_path: host.display().to_string(),
                readonly: m.read_only == Some(true) || v.source.is_api_backed() || claim_read_only,
                propagation: match m.mount_propagation.as_deref() {
                    Some("HostToContainer") => {
                        cri::MountPropagation::PropagationHostToContainer as i32
                    }
                    Some("Bidirectional") => cri::MountPropagation::PropagationBidirectional as i32,
                    _ => cri::MountPropagation::PropagationPrivate as i32,
                },
                ..Default::default()
            });
        }
        if let Some(v) = self.vols.iter().find(|v| v.automatic) {
            if !out
                .iter()
                .any(|m| m.container_path.trim_end_matches('/') == SA_MOUNT_PATH)
            {
                out.push(cri::Mount {
                    container_path: SA_MOUNT_PATH.into(),
                    host_path: self.host_dir(v).display().to_string(),
                    readonly: true,
                    ..Default::default()
                });
            }
        }
        Ok(out)
    }

    /// Unmounts the pod's tmpfs volumes and removes its directory.
    pub fn tear_down(&self) -> Result<(), VolumeError> {
        remove_pod_dir(&pod_dir(&self.pods_root, self.uid()))
    }
}

/// Unmounts whatever is mounted under a pod's directory (only the kubelet mounts there: tmpfs volumes),
/// deepest first, then removes the directory — and refuses to if a mount is left, so nothing is ever
/// deleted through a mount.
fn remove_pod_dir(dir: &Path) -> Result<(), VolumeError> {
    if !dir.exists() {
        return Ok(());
    }
    let mut mounts = all_mounts_under(dir);
    mounts.sort_by_key(|m| std::cmp::Reverse(m.len()));
    for m in mounts {
        empty_dir::unmount(Path::new(&m))?;
    }
    if let Some(m) = mounts_under(dir) {
        return Err(VolumeError::io(
            "removing",
            dir,
            std::io::Error::other(format!("{m} is still mounted")),
        ));
    }
    std::fs::remove_dir_all(dir).map_err(|e| VolumeError::io("removing", dir, e))
}

/// Removes the directories of pods this kubelet no longer runs (left by a previous run, whose sandboxes
/// were removed at start): unmounts whatever is mounted under each (deepest first), then deletes it.
/// Returns how many were removed.
pub fn remove_orphans(pods_root: &Path, known: &[String]) -> Result<usize, VolumeError> {
    let entries = match std::fs::read_dir(pods_root) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(VolumeError::io("reading", pods_root, e)),
    };
    let mut removed = 0;
    for entry in entries {
        let entry = entry.map_err(|e| VolumeError::io("reading", pods_root, e))?;
        let uid = entry.file_name().to_string_lossy().into_owned();
        if known.contains(&uid) {
            continue;
        }
        remove_pod_dir(&entry.path())?;
        tracing::info!(pod_uid = %uid, "removed the volumes of a pod this kubelet no longer runs");
        removed += 1;
    }
    Ok(removed)
}

fn all_mounts_under(dir: &Path) -> Vec<String> {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    let prefix = dir.display().to_string();
    info.lines()
        .filter_map(|l| l.split(' ').nth(4))
        .filter(|m| *m == prefix || m.starts_with(&format!("{prefix}/")))
        .map(String::from)
        .collect()
}

/// The first mount point at or under `dir`, from /proc/self/mountinfo.
fn mounts_under(dir: &Path) -> Option<String> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let prefix = dir.display().to_string();
    info.lines()
        .filter_map(|l| l.split(' ').nth(4))
        .find(|m| *m == prefix || m.starts_with(&format!("{prefix}/")))
        .map(String::from)
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
