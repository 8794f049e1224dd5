//! Claim volumes against in-memory claims and PVs on a temp directory.

use super::*;
use crate::pod_objects::FakeObjects;
use crate::volumes::PodVolumes;

fn pod(volumes: serde_json::Value, mounts: serde_json::Value) -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": "web", "namespace": "apps", "uid": "pod-uid"},
        "spec": {"volumes": volumes,
                 "containers": [{"name": "main", "image": "img", "volumeMounts": mounts}]}
    }))
    .unwrap()
}

fn claim(name: &str, extra: serde_json::Value) -> PersistentVolumeClaim {
    let mut v = serde_json::json!({
        "metadata": {"name": name, "namespace": "apps", "uid": format!("{name}-uid")},
        "spec": {"volumeName": "pv1", "accessModes": ["ReadWriteOnce"]},
        "status": {"phase": "Bound"}
    });
    merge(&mut v, extra);
    serde_json::from_value(v).unwrap()
}

fn pv(claim_uid: &str, source: serde_json::Value) -> PersistentVolume {
    let mut v = serde_json::json!({
        "metadata": {"name": "pv1"},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                 "claimRef": {"namespace": "apps", "name": "data", "uid": claim_uid}}
    });
    merge(&mut v["spec"], source);
    serde_json::from_value(v).unwrap()
}

fn merge(into: &mut serde_json::Value, from: serde_json::Value) {
    match (into, from) {
        (serde_json::Value::Object(a), serde_json::Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k).or_insert(serde_json::Value::Null), v);
            }
        }
        (slot, v) => *slot = v,
    }
}

fn objects(c: PersistentVolumeClaim, v: Option<PersistentVolume>) -> FakeObjects {
    let o = FakeObjects::default();
    let name = c.metadata.name.clone().unwrap();
    o.claims.lock().unwrap().insert(("apps".into(), name), c);
    if let Some(v) = v {
        o.volumes.lock().unwrap().insert("pv1".into(), v);
    }
    o
}

fn pvc_pod() -> Pod {
    pod(
        serde_json::json!([{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]),
        serde_json::json!([{"name": "data", "mountPath": "/data"}]),
    )
}

async fn set_up_error(p: &Pod, o: &FakeObjects) -> String {
    let tmp = tempfile::tempdir().unwrap();
    let mut vols = PodVolumes::new(p, tmp.path(), false).unwrap();
    let e = vols.set_up(Some(o), 0).await.unwrap_err().to_string();
    assert!(!vols.is_set_up());
    e
}

#[tokio::test]
async fn a_bound_local_pv_is_mounted_from_its_own_directory_and_teardown_keeps_the_data() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("pv-dir");
    std::fs::create_dir(&data).unwrap();
    std::fs::write(data.join("keep"), "x").unwrap();
    let o = objects(
        claim("data", serde_json::json!({})),
        Some(pv(
            "data-uid",
            serde_json::json!({"local": {"path": data.to_str().unwrap()}}),
        )),
    );
    let p = pod(
        serde_json::json!([{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]),
        serde_json::json!([{"name": "data", "mountPath": "/data"},
                           {"name": "data", "mountPath": "/logs", "subPath": "logs", "readOnly": true}]),
    );
    let root = tmp.path().join("pods");
    let mut vols = PodVolumes::new(&p, &root, false).unwrap();
    vols.set_up(Some(&o), 0).await.unwrap();
    let mounts = vols
        .mounts(&p.spec.as_ref().unwrap().containers[0])
        .unwrap();
    assert_eq!(mounts[0].host_path, data.display().to_string());
    assert!(!mounts[0].readonly);
    // subPath is made inside the PV's directory, as for other writable volumes.
    assert_eq!(
        mounts[1].host_path,
        data.canonicalize()
            .unwrap()
            .join("logs")
            .display()
            .to_string()
    );
    assert!(mounts[1].readonly);
    vols.tear_down().unwrap();
    assert_eq!(std::fs::read_to_string(data.join("keep")).unwrap(), "x");
}

#[tokio::test]
async fn a_read_only_claim_volume_mounts_read_only_and_host_path_pvs_get_their_type_check() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("made-by-type");
    let o = objects(
        claim("data", serde_json::json!({})),
        Some(pv(
            "data-uid",
            serde_json::json!({"hostPath": {"path": data.to_str().unwrap(), "type": "DirectoryOrCreate"}}),
        )),
    );
    let p = pod(
        serde_json::json!([{"name": "data", "persistentVolumeClaim": {"claimName": "data", "readOnly": true}}]),
        serde_json::json!([{"name": "data", "mountPath": "/data"}]),
    );
    let mut vols = PodVolumes::new(&p, &tmp.path().join("pods"), false).unwrap();
    vols.set_up(Some(&o), 0).await.unwrap();
    assert!(data.is_dir());
    let m = vols
        .mounts(&p.spec.as_ref().unwrap().containers[0])
        .unwrap();
    assert!(m[0].readonly);
    assert_eq!(m[0].host_path, data.display().to_string());
}

#[tokio::test]
async fn a_missing_unbound_or_deleting_claim_is_refused_with_upstreams_words() {
    let p = pvc_pod();
    let none = FakeObjects::default();
    assert_eq!(
        set_up_error(&p, &none).await,
        "volume \"data\": error processing PVC apps/data: failed to fetch PVC from API server: persistentvolumeclaims \"data\" not found"
    );
    let pending = objects(
        claim(
            "data",
            serde_json::json!({"spec": {"volumeName": null}, "status": {"phase": "Pending"}}),
        ),
        None,
    );
    assert_eq!(
        set_up_error(&p, &pending).await,
        "volume \"data\": error processing PVC apps/data: PVC apps/data has non-bound phase (\"Pending\") or empty pvc.Spec.VolumeName (\"\")"
    );
    let deleting = objects(
        claim(
            "data",
            serde_json::json!({"metadata": {"deletionTimestamp": "2026-12-03T00:00:00Z"}}),
        ),
        None,
    );
    assert_eq!(
        set_up_error(&p, &deleting).await,
        "volume \"data\": error processing PVC apps/data: can't start pod because PVC apps/data is being deleted"
    );
    let no_pv = objects(claim("data", serde_json::json!({})), None);
    assert!(set_up_error(&p, &no_pv)
        .await
        .ends_with("failed to fetch PV pv1 from API server: persistentvolumes \"pv1\" not found"));
}

#[tokio::test]
async fn a_pv_bound_to_another_claim_or_of_an_unsupported_kind_is_refused_by_name() {
    let p = pvc_pod();
    let other = objects(
        claim("data", serde_json::json!({})),
        Some(pv(
            "someone-else",
            serde_json::json!({"local": {"path": "/tmp"}}),
        )),
    );
    assert!(set_up_error(&p, &other).await.ends_with(
        "found PV object \"pv1\" but its pv.Spec.ClaimRef.UID (\"someone-else\") does not point to claim.UID (\"data-uid\")"
    ));
    let nfs = objects(
        claim("data", serde_json::json!({})),
        Some(pv(
            "data-uid",
            serde_json::json!({"nfs": {"server": "10.250.0.9", "path": "/x"}}),
        )),
    );
    assert!(set_up_error(&p, &nfs).await.ends_with(
        "PersistentVolume \"pv1\" uses nfs: only local and hostPath persistent volumes are supported by kiln-kubelet"
    ));
    let gone = objects(
        claim("data", serde_json::json!({})),
        Some(pv(
            "data-uid",
            serde_json::json!({"local": {"path": "/nonexistent/kiln-pv"}}),
        )),
    );
    assert!(set_up_error(&p, &gone)
        .await
        .ends_with("path \"/nonexistent/kiln-pv\" does not exist"));
}

#[tokio::test]
async fn an_ephemeral_volume_uses_the_pod_volume_claim_only_when_the_pod_owns_it() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("eph");
    std::fs::create_dir(&data).unwrap();
    let p = pod(
        serde_json::json!([{"name": "scratch", "ephemeral": {"volumeClaimTemplate": {
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}}}]),
        serde_json::json!([{"name": "scratch", "mountPath": "/scratch"}]),
    );
    let mut stranger = claim("web-scratch", serde_json::json!({}));
    let source = serde_json::json!({"local": {"path": data.to_str().unwrap()}});
    let mut volume = pv("web-scratch-uid", source);
    volume
        .spec
        .as_mut()
        .unwrap()
        .claim_ref
        .as_mut()
        .unwrap()
        .name = Some("web-scratch".into());
    let o = objects(stranger.clone(), Some(volume.clone()));
    assert_eq!(
        set_up_error(&p, &o).await,
        "volume \"scratch\": error processing PVC apps/web-scratch: PVC apps/web-scratch was not created for pod apps/web (pod is not owner)"
    );
    stranger.metadata.owner_references = Some(vec![serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Pod", "name": "web", "uid": "pod-uid", "controller": true
    }))
    .unwrap()]);
    let o = objects(stranger, Some(volume));
    let mut vols = PodVolumes::new(&p, &tmp.path().join("pods"), false).unwrap();
    vols.set_up(Some(&o), 0).await.unwrap();
    let m = vols
        .mounts(&p.spec.as_ref().unwrap().containers[0])
        .unwrap();
    assert_eq!(m[0].host_path, data.display().to_string());
}

#[test]
fn block_mode_and_unbound_pvs_are_refused() {
    let c = claim("data", serde_json::json!({}));
    let mut v = pv(
        "data-uid",
        serde_json::json!({"local": {"path": "/x"}, "volumeMode": "Block"}),
    );
    assert!(pv_path(&v, &c).unwrap_err().contains("volumeMode Block"));
    v.spec.as_mut().unwrap().volume_mode = None;
    assert_eq!(pv_path(&v, &c).unwrap(), PathBuf::from("/x"));
    v.spec.as_mut().unwrap().claim_ref = None;
    assert!(pv_path(&v, &c)
        .unwrap_err()
        .contains("nil pv.Spec.ClaimRef"));
}

/// A pod's fsGroup owns a writable `local` PV (upstream's local plugin sets the volume's
/// ownership), honouring fsGroupChangePolicy; a hostPath PV is left as it is.
#[tokio::test]
async fn fs_group_owns_a_local_pv_by_its_change_policy_and_leaves_host_path_pvs_alone() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let group = if nix::unistd::geteuid().is_root() {
        4321
    } else {
        nix::unistd::getegid().as_raw()
    };
    let tmp = tempfile::tempdir().unwrap();
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
    let set_up = |source: serde_json::Value, policy: &'static str| {
        let tmp = tmp.path().to_path_buf();
        async move {
            let o = objects(
                claim("data", serde_json::json!({})),
                Some(pv("data-uid", source)),
            );
            let mut p = pvc_pod();
            p.spec.as_mut().unwrap().security_context = serde_json::from_value(
                serde_json::json!({"fsGroup": group, "fsGroupChangePolicy": policy}),
            )
            .unwrap();
            let mut vols = PodVolumes::new(&p, &tmp.join("pods"), false).unwrap();
            vols.set_up(Some(&o), 0).await.unwrap();
        }
    };
    let local = tmp.path().join("local-pv");
    std::fs::create_dir(&local).unwrap();
    std::fs::write(local.join("db"), "x").unwrap();
    std::fs::set_permissions(local.join("db"), std::fs::Permissions::from_mode(0o600)).unwrap();
    let local_source = serde_json::json!({"local": {"path": local.to_str().unwrap()}});
    set_up(local_source.clone(), "OnRootMismatch").await;
    assert_eq!(std::fs::metadata(&local).unwrap().gid(), group);
    assert_eq!(mode(&local) & 0o2770, 0o2770);
    assert_eq!(mode(&local.join("db")), 0o660);
    // The root matches now: OnRootMismatch leaves what the workload changed below it; Always not.
    std::fs::set_permissions(local.join("db"), std::fs::Permissions::from_mode(0o600)).unwrap();
    set_up(local_source.clone(), "OnRootMismatch").await;
    assert_eq!(mode(&local.join("db")), 0o600);
    set_up(local_source, "Always").await;
    assert_eq!(mode(&local.join("db")), 0o660);

    let host = tmp.path().join("host-pv");
    std::fs::create_dir(&host).unwrap();
    std::fs::set_permissions(&host, std::fs::Permissions::from_mode(0o755)).unwrap();
    let before = std::fs::metadata(&host).unwrap().gid();
    set_up(
        serde_json::json!({"hostPath": {"path": host.to_str().unwrap()}}),
        "Always",
    )
    .await;
    assert_eq!(std::fs::metadata(&host).unwrap().gid(), before);
    assert_eq!(mode(&host), 0o755);
}
