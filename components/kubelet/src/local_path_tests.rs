//! The executor with recording doubles, and the real filesystem guards on a temp dir.

use std::sync::Mutex;

use super::*;
use crate::local_path_plan::PROVISIONER;

#[derive(Default)]
struct Recorder {
    calls: Mutex<Vec<String>>,
    /// Every create_pv answers this error while set.
    fail_create: Mutex<Option<String>>,
    fail_make: Mutex<bool>,
}

impl Recorder {
    fn calls(&self) -> Vec<String> {
        self.calls.lock().unwrap().clone()
    }
}

impl VolumeDirs for Recorder {
    fn make(&self, root: &Path, path: &Path) -> Result<(), LocalPathError> {
        guard(root, path)?;
        if *self.fail_make.lock().unwrap() {
            return Err(LocalPathError::Io {
                what: "creating",
                path: path.into(),
                source: std::io::Error::other("disk full"),
            });
        }
        self.calls
            .lock()
            .unwrap()
            .push(format!("mkdir {}", path.display()));
        Ok(())
    }

    fn remove(&self, root: &Path, path: &Path) -> Result<(), LocalPathError> {
        guard(root, path)?;
        self.calls
            .lock()
            .unwrap()
            .push(format!("rm -r {}", path.display()));
        Ok(())
    }
}

#[async_trait]
impl VolumeApi for Recorder {
    async fn create_pv(&self, pv: &PersistentVolume) -> Result<(), LocalPathError> {
        if let Some(m) = self.fail_create.lock().unwrap().clone() {
            return Err(LocalPathError::Api(m));
        }
        self.calls
            .lock()
            .unwrap()
            .push(format!("create pv {}", pv.name_any()));
        Ok(())
    }

    async fn delete_pv(&self, name: &str, uid: &str) -> Result<(), LocalPathError> {
        self.calls
            .lock()
            .unwrap()
            .push(format!("delete pv {name} uid={uid}"));
        Ok(())
    }

    async fn claim_event(&self, claim: &ClaimKey, warning: bool, reason: &str, message: &str) {
        let t = if warning { "Warning" } else { "Normal" };
        self.calls.lock().unwrap().push(format!(
            "event {}/{} {t} {reason}: {message}",
            claim.namespace, claim.name
        ));
    }
}

const ROOT: &str = "/var/lib/kiln/local-path";

fn claim() -> PersistentVolumeClaim {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": "data", "namespace": "apps", "uid": "u1", "annotations": {
            local_path_plan::SELECTED_NODE: "host1", local_path_plan::STORAGE_PROVISIONER: PROVISIONER}},
        "spec": {"storageClassName": "local-path", "accessModes": ["ReadWriteOnce"],
                 "resources": {"requests": {"storage": "1Gi"}}}
    }))
    .unwrap()
}

fn class() -> StorageClass {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": "local-path"}, "provisioner": PROVISIONER, "reclaimPolicy": "Delete"
    }))
    .unwrap()
}

fn plan_for(claims: &[PersistentVolumeClaim], volumes: &[PersistentVolume]) -> Vec<Action> {
    local_path_plan::plan(&World {
        node: "host1",
        root: Path::new(ROOT),
        claims,
        volumes,
        classes: &[class()],
    })
}

#[tokio::test]
async fn provisioning_makes_the_directory_before_the_pv_and_reports_it() {
    let r = Recorder::default();
    let mut reported = BTreeMap::new();
    let out = apply(
        Path::new(ROOT),
        plan_for(&[claim()], &[]),
        &r,
        &r,
        &mut reported,
    )
    .await;
    assert_eq!(out.provisioned, vec!["pvc-u1"]);
    assert_eq!(
        r.calls(),
        vec![
            "mkdir /var/lib/kiln/local-path/pvc-u1_apps_data",
            "create pv pvc-u1",
            "event apps/data Normal ProvisioningSucceeded: Successfully provisioned volume pvc-u1",
        ]
    );
}

#[tokio::test]
async fn a_failure_is_reported_once_per_message_and_retried() {
    let r = Recorder::default();
    *r.fail_create.lock().unwrap() = Some("forbidden".into());
    let mut reported = BTreeMap::new();
    for _ in 0..3 {
        let out = apply(
            Path::new(ROOT),
            plan_for(&[claim()], &[]),
            &r,
            &r,
            &mut reported,
        )
        .await;
        assert_eq!(out.failed, vec!["apps/data"]);
    }
    let events: Vec<_> = r
        .calls()
        .into_iter()
        .filter(|c| c.starts_with("event"))
        .collect();
    assert_eq!(
        events,
        vec!["event apps/data Warning ProvisioningFailed: forbidden"]
    );
    // The directory is made on every try (idempotent); the PV once the API lets it.
    *r.fail_create.lock().unwrap() = None;
    let out = apply(
        Path::new(ROOT),
        plan_for(&[claim()], &[]),
        &r,
        &r,
        &mut reported,
    )
    .await;
    assert_eq!(out.provisioned, vec!["pvc-u1"]);
    assert!(reported.is_empty());
}

#[tokio::test]
async fn a_failed_mkdir_creates_no_pv() {
    let r = Recorder::default();
    *r.fail_make.lock().unwrap() = true;
    let mut reported = BTreeMap::new();
    apply(
        Path::new(ROOT),
        plan_for(&[claim()], &[]),
        &r,
        &r,
        &mut reported,
    )
    .await;
    assert!(
        !r.calls().iter().any(|c| c.starts_with("create pv")),
        "{:?}",
        r.calls()
    );
}

#[tokio::test]
async fn deletion_removes_the_directory_then_the_pv_and_refuses_paths_outside_the_root() {
    let r = Recorder::default();
    let mut reported = BTreeMap::new();
    let actions = vec![
        Action::Delete {
            pv: "pvc-u1".into(),
            uid: "pv-uid".into(),
            dir: PathBuf::from(format!("{ROOT}/pvc-u1_apps_data")),
        },
        // A plan that somehow named another path: the executor's guard still refuses it.
        Action::Delete {
            pv: "evil".into(),
            uid: "x".into(),
            dir: PathBuf::from("/etc"),
        },
    ];
    let out = apply(Path::new(ROOT), actions, &r, &r, &mut reported).await;
    assert_eq!(out.deleted, vec!["pvc-u1"]);
    assert_eq!(out.failed, vec!["evil"]);
    assert_eq!(
        r.calls(),
        vec![
            "rm -r /var/lib/kiln/local-path/pvc-u1_apps_data",
            "delete pv pvc-u1 uid=pv-uid",
        ]
    );
}

#[test]
fn host_dirs_make_0777_directories_and_remove_only_real_children_of_the_root() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("local-path");
    let dir = root.join("pvc-u1_apps_data");
    HostDirs.make(&root, &dir).unwrap();
    let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o777);
    // Idempotent (a restart mid-way makes it again).
    std::fs::write(dir.join("f"), "data").unwrap();
    HostDirs.make(&root, &dir).unwrap();
    assert_eq!(std::fs::read_to_string(dir.join("f")).unwrap(), "data");
    // A symlink in the root is never followed into: not removed through, not made into.
    let outside = tmp.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::fs::write(outside.join("precious"), "x").unwrap();
    let link = root.join("pvc-link_apps_x");
    std::os::unix::fs::symlink(&outside, &link).unwrap();
    assert!(matches!(
        HostDirs.remove(&root, &link),
        Err(LocalPathError::Symlink(_))
    ));
    assert!(matches!(
        HostDirs.make(&root, &link),
        Err(LocalPathError::Symlink(_))
    ));
    assert!(outside.join("precious").exists());
    assert!(matches!(
        HostDirs.remove(&root, &outside),
        Err(LocalPathError::OutsideRoot { .. })
    ));
    assert!(matches!(
        HostDirs.remove(&root, &root.join("a/../..")),
        Err(LocalPathError::OutsideRoot { .. })
    ));
    HostDirs.remove(&root, &dir).unwrap();
    assert!(!dir.exists());
    // Already gone: fine.
    HostDirs.remove(&root, &dir).unwrap();
}
