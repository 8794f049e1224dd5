//! Volumes on a temp root with in-memory API objects (no root needed, except the tmpfs test).

use super::*;
use crate::pod_objects::{FakeObjects, IssuedToken};

fn pod(spec: serde_json::Value) -> Pod {
    let mut v = serde_json::json!({
        "metadata": {"name": "web", "namespace": "apps", "uid": "u1"},
        "spec": {"containers": [{"name": "main", "image": "img"}]}
    });
    for (k, val) in spec.as_object().unwrap() {
        v["spec"][k] = val.clone();
    }
    serde_json::from_value(v).unwrap()
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap()
}

fn mode(p: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).unwrap().permissions().mode() & 0o7777
}

#[test]
fn paths_follow_upstreams_layout() {
    assert_eq!(
        volume_dir(
            Path::new("/var/lib/kiln/kubelet/pods"),
            "u1",
            "configmap",
            "cfg"
        ),
        Path::new("/var/lib/kiln/kubelet/pods/u1/volumes/kubernetes.io~configmap/cfg")
    );
    assert_eq!(pod_dir(Path::new("/r/pods"), "u1"), Path::new("/r/pods/u1"));
}

#[tokio::test]
async fn config_map_secret_empty_dir_and_host_path_volumes_and_their_mounts() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("pods");
    let host = tmp.path().join("host-data");
    let o = FakeObjects::default();
    o.put_config_map("apps", "settings", &[("color", "blue"), ("size", "L")]);
    o.put_secret("apps", "creds", &[("password", "s3cret")]);
    let p = pod(serde_json::json!({
        "volumes": [
            {"name": "cfg", "configMap": {"name": "settings"}},
            {"name": "picked", "configMap": {"name": "settings", "defaultMode": 0o600,
                "items": [{"key": "size", "path": "sub/size.txt"}, {"key": "color", "path": "c", "mode": 0o444}]}},
            {"name": "sec", "secret": {"secretName": "creds"}},
            {"name": "scratch", "emptyDir": {}},
            {"name": "data", "hostPath": {"path": host.to_str().unwrap(), "type": "DirectoryOrCreate"}}
        ],
        "containers": [{"name": "main", "image": "img", "volumeMounts": [
            {"name": "cfg", "mountPath": "/etc/cfg"},
            {"name": "sec", "mountPath": "/etc/sec"},
            {"name": "scratch", "mountPath": "/scratch"},
            {"name": "scratch", "mountPath": "/logs", "subPath": "logs"},
            {"name": "data", "mountPath": "/data", "readOnly": true},
            {"name": "cfg", "mountPath": "/etc/color", "subPath": "color"}
        ]}]
    }));
    let mut vols = PodVolumes::new(&p, &root, false).unwrap();
    vols.set_up(Some(&o), 0).await.unwrap();
    let cfg = volume_dir(&root, "u1", "configmap", "cfg");
    assert_eq!(read(&cfg.join("color")), "blue");
    assert_eq!(mode(&cfg.join("color")), 0o644);
    let picked = volume_dir(&root, "u1", "configmap", "picked");
    assert_eq!(read(&picked.join("sub/size.txt")), "L");
    assert_eq!(mode(&picked.join("sub/size.txt")), 0o600);
    assert_eq!(mode(&picked.join("c")), 0o444);
    assert!(std::fs::symlink_metadata(picked.join("size")).is_err());
    let sec = volume_dir(&root, "u1", "secret", "sec");
    assert_eq!(read(&sec.join("password")), "s3cret");
    assert_eq!(
        mode(&sec.join("password")),
        0o644,
        "secrets default to 0644, as upstream's"
    );
    let scratch = volume_dir(&root, "u1", "empty-dir", "scratch");
    assert!(scratch.is_dir());
    assert_eq!(mode(&scratch), 0o777);
    assert!(host.is_dir(), "DirectoryOrCreate made the host path");

    let c = &p.spec.as_ref().unwrap().containers[0];
    let m: Vec<(String, String, bool)> = vols
        .mounts(c)
        .unwrap()
        .into_iter()
        .map(|m| (m.container_path, m.host_path, m.readonly))
        .collect();
    let s = |p: &Path| p.display().to_string();
    assert_eq!(
        m[0],
        ("/etc/cfg".into(), s(&cfg), true),
        "configMap mounts are read-only"
    );
    assert_eq!(m[1], ("/etc/sec".into(), s(&sec), true));
    assert_eq!(m[2], ("/scratch".into(), s(&scratch), false));
    assert_eq!(m[3].0, "/logs");
    assert!(
        scratch.join("logs").is_dir(),
        "an emptyDir subPath is created"
    );
    assert_eq!(m[4], ("/data".into(), s(&host), true));
    assert!(
        m[5].1.starts_with(&s(&cfg)) && m[5].1.ends_with("/color") && m[5].1.contains("/..20"),
        "a configMap subPath is the resolved file: {}",
        m[5].1
    );

    // An update reaches the volume on refresh; an unchanged one writes nothing.
    o.put_config_map("apps", "settings", &[("color", "green"), ("size", "L")]);
    let changed = vols.refresh(Some(&o), 10).await.unwrap();
    assert_eq!(changed, vec!["cfg".to_string(), "picked".to_string()]);
    assert_eq!(read(&cfg.join("color")), "green");
    assert!(vols.refresh(Some(&o), 20).await.unwrap().is_empty());

    vols.tear_down().unwrap();
    assert!(!pod_dir(&root, "u1").exists());
    assert!(host.is_dir(), "a hostPath is the node's and stays");
}

#[tokio::test]
async fn missing_objects_keep_the_pod_waiting_unless_optional() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("pods");
    let o = FakeObjects::default();
    let p = pod(serde_json::json!({"volumes": [{"name": "cfg", "configMap": {"name": "nope"}}]}));
    let mut vols = PodVolumes::new(&p, &root, false).unwrap();
    let err = vols.set_up(Some(&o), 0).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "volume \"cfg\": configmap \"nope\" not found"
    );
    assert!(!vols.is_set_up());

    let p = pod(serde_json::json!({"volumes": [
        {"name": "cfg", "configMap": {"name": "nope", "optional": true}},
        {"name": "sec", "secret": {"secretName": "nope", "optional": true}}
    ]}));
    let mut vols = PodVolumes::new(&p, &root, false).unwrap();
    vols.set_up(Some(&o), 0).await.unwrap();
    assert!(volume_dir(&root, "u1", "configmap", "cfg")
        .join("..data")
        .is_dir());

    o.put_config_map("apps", "settings", &[("color", "blue")]);
    let p = pod(
        serde_json::json!({"volumes": [{"name": "cfg", "configMap": {"name": "settings",
        "items": [{"key": "shape", "path": "shape"}]}}]}),
    );
    let err = PodVolumes::new(&p, &tmp.path().join("other"), false)
        .unwrap()
        .set_up(Some(&o), 0)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("non-existent key: shape"), "{err}");

    let p =
        pod(serde_json::json!({"volumes": [{"name": "x", "nfs": {"server": "s", "path": "/"}}]}));
    assert!(
        PodVolumes::new(&p, &root, false).is_err(),
        "unknown kinds are refused"
    );
    let p = pod(
        serde_json::json!({"volumes": [{"name": "d", "hostPath": {"path": "/nonexistent/kiln", "type": "Directory"}}]}),
    );
    let err = PodVolumes::new(&p, &root, false)
        .unwrap()
        .set_up(None, 0)
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("hostPath type check failed"),
        "{err}"
    );
}

#[tokio::test]
async fn service_account_volume_has_token_ca_and_namespace_and_refreshes_late_in_life() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("pods");
    let o = FakeObjects::default();
    *o.token.lock().unwrap() = Some(IssuedToken {
        token: "jwt-1".into(),
        expires_at: 1000,
    });
    let p = pod(serde_json::json!({}));
    let mut vols = PodVolumes::new(&p, &root, true).unwrap();
    vols.set_up(Some(&o), 0).await.unwrap();
    let dir = volume_dir(&root, "u1", "projected", SA_VOLUME);
    assert_eq!(read(&dir.join("token")), "jwt-1");
    assert_eq!(read(&dir.join("namespace")), "apps");
    assert_eq!(
        read(&dir.join("ca.crt")),
        "CA-FROM-KUBECONFIG\n",
        "no kube-root-ca.crt: the cluster CA"
    );
    let c = &p.spec.as_ref().unwrap().containers[0];
    let m = vols.mounts(c).unwrap();
    assert_eq!(m.len(), 1);
    assert_eq!(m[0].container_path, SA_MOUNT_PATH);
    assert!(m[0].readonly);

    // Not refreshed before 80 % of its life, refreshed after.
    *o.token.lock().unwrap() = Some(IssuedToken {
        token: "jwt-2".into(),
        expires_at: 2000,
    });
    vols.refresh(Some(&o), 700).await.unwrap();
    assert_eq!(read(&dir.join("token")), "jwt-1");
    assert_eq!(*o.token_requests.lock().unwrap(), 1);
    vols.refresh(Some(&o), 850).await.unwrap();
    assert_eq!(read(&dir.join("token")), "jwt-2");

    // The namespace's kube-root-ca.crt wins when it exists.
    o.put_config_map("apps", "kube-root-ca.crt", &[("ca.crt", "ROOT-CA")]);
    vols.refresh(Some(&o), 900).await.unwrap();
    assert_eq!(read(&dir.join("ca.crt")), "ROOT-CA");

    // Opted out, or an API server that issues no tokens: no service-account mount.
    let p = pod(serde_json::json!({"automountServiceAccountToken": false}));
    let mut vols = PodVolumes::new(&p, &tmp.path().join("b"), true).unwrap();
    vols.set_up(Some(&o), 0).await.unwrap();
    assert!(vols.mounts(c).unwrap().is_empty());
    assert!(vols.is_empty());
    *o.token.lock().unwrap() = None;
    let p = pod(serde_json::json!({}));
    let mut vols = PodVolumes::new(&p, &tmp.path().join("c"), true).unwrap();
    vols.set_up(Some(&o), 0).await.unwrap();
    assert!(vols.mounts(c).unwrap().is_empty());
}

#[tokio::test]
#[ignore = "needs root: mounting tmpfs (CI runs it with --include-ignored)"]
async fn memory_empty_dir_is_a_tmpfs_unmounted_on_tear_down() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "needs root: mounting tmpfs"
    );
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("pods");
    let p =
        pod(serde_json::json!({"volumes": [{"name": "mem", "emptyDir": {"medium": "Memory"}}]}));
    let mut vols = PodVolumes::new(&p, &root, false).unwrap();
    vols.set_up(None, 0).await.unwrap();
    let dir = volume_dir(&root, "u1", "empty-dir", "mem");
    assert!(empty_dir::is_mount_point(&dir));
    assert!(mounts_under(&root).is_some());
    vols.tear_down().unwrap();
    assert!(mounts_under(&root).is_none());
    assert!(!pod_dir(&root, "u1").exists());
}

#[tokio::test]
async fn orphaned_pod_dirs_are_removed_and_known_ones_kept() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("pods");
    assert_eq!(remove_orphans(&root, &[]).unwrap(), 0, "no root yet");
    let p = pod(serde_json::json!({"volumes": [{"name": "scratch", "emptyDir": {}}]}));
    PodVolumes::new(&p, &root, false)
        .unwrap()
        .set_up(None, 0)
        .await
        .unwrap();
    std::fs::create_dir_all(root.join("u2/volumes")).unwrap();
    assert_eq!(remove_orphans(&root, &["u1".to_string()]).unwrap(), 1);
    assert!(root.join("u1").is_dir());
    assert!(!root.join("u2").exists());
}

#[tokio::test]
#[ignore = "needs root: mounting tmpfs (CI runs it with --include-ignored)"]
async fn secrets_in_memory_are_on_tmpfs_and_unmounted_on_tear_down() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "needs root: mounting tmpfs"
    );
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("pods");
    let o = FakeObjects::default();
    o.put_secret("apps", "creds", &[("password", "s3cret")]);
    let p =
        pod(serde_json::json!({"volumes": [{"name": "sec", "secret": {"secretName": "creds"}}]}));
    let mut vols = PodVolumes::new(&p, &root, false)
        .unwrap()
        .secrets_in_memory(true);
    vols.set_up(Some(&o), 0).await.unwrap();
    let dir = volume_dir(&root, "u1", "secret", "sec");
    assert!(empty_dir::is_mount_point(&dir));
    assert_eq!(mode(&dir), 0o755);
    assert_eq!(read(&dir.join("password")), "s3cret");
    o.put_secret("apps", "creds", &[("password", "changed")]);
    vols.refresh(Some(&o), 10).await.unwrap();
    assert_eq!(read(&dir.join("password")), "changed");
    vols.tear_down().unwrap();
    assert!(mounts_under(&root).is_none());
    assert!(!pod_dir(&root, "u1").exists());
}

/// A group the test may give files to: any as root, else the process's own.
fn test_group() -> u32 {
    if nix::unistd::geteuid().is_root() {
        4321
    } else {
        nix::unistd::getegid().as_raw()
    }
}

fn gid(p: &Path) -> u32 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(p).unwrap().gid()
}

#[tokio::test]
async fn fs_group_owns_api_backed_and_empty_dir_volumes_as_upstreams_set_volume_ownership() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("pods");
    let group = test_group();
    let o = FakeObjects::default();
    o.put_config_map("apps", "settings", &[("color", "blue")]);
    o.put_secret("apps", "creds", &[("password", "s3cret")]);
    let p = pod(serde_json::json!({
        "securityContext": {"runAsUser": 1000, "fsGroup": group},
        "volumes": [
            {"name": "cfg", "configMap": {"name": "settings",
                "items": [{"key": "color", "path": "path/to/color", "mode": 0o400}]}},
            {"name": "sec", "secret": {"secretName": "creds", "defaultMode": 0o440}},
            {"name": "down", "downwardAPI": {"items": [{"path": "name", "fieldRef": {"fieldPath": "metadata.name"}}]}},
            {"name": "scratch", "emptyDir": {}}
        ]
    }));
    let mut vols = PodVolumes::new(&p, &root, false).unwrap();
    vols.set_up(Some(&o), 0).await.unwrap();

    let cfg = volume_dir(&root, "u1", "configmap", "cfg");
    let file = cfg.join("path/to/color");
    assert_eq!(read(&file), "blue");
    assert_eq!(gid(&file), group);
    assert_eq!(
        mode(&file),
        0o440,
        "a read-only volume's file gains group read"
    );
    assert_eq!(gid(&cfg.join("path/to")), group);
    assert_eq!(
        mode(&cfg.join("path/to")),
        0o2755,
        "directories gain setgid and group search"
    );
    assert_eq!(mode(&cfg), 0o2755);
    let sec = volume_dir(&root, "u1", "secret", "sec");
    assert_eq!(mode(&sec.join("password")), 0o440);
    assert_eq!(gid(&sec.join("password")), group);
    let down = volume_dir(&root, "u1", "downward-api", "down");
    assert_eq!(mode(&down.join("name")), 0o644 | 0o440);
    assert_eq!(gid(&down.join("name")), group);
    let scratch = volume_dir(&root, "u1", "empty-dir", "scratch");
    assert_eq!(gid(&scratch), group);
    assert_eq!(
        mode(&scratch),
        0o2777,
        "a writable volume's directory: setgid"
    );

    // The group's modes are the payload's on the next resync: nothing is rewritten.
    assert!(vols.refresh(Some(&o), 10).await.unwrap().is_empty());
    // An update is owned too.
    o.put_secret("apps", "creds", &[("password", "changed")]);
    assert_eq!(
        vols.refresh(Some(&o), 20).await.unwrap(),
        vec!["sec".to_string()]
    );
    assert_eq!(read(&sec.join("password")), "changed");
    assert_eq!(gid(&sec.join("password")), group);
    assert_eq!(mode(&sec.join("password")), 0o440);

    // Without fsGroup nothing changes hands.
    let p =
        pod(serde_json::json!({"volumes": [{"name": "cfg", "configMap": {"name": "settings"}}]}));
    let other = tmp.path().join("other");
    let mut vols = PodVolumes::new(&p, &other, false).unwrap();
    vols.set_up(Some(&o), 0).await.unwrap();
    let cfg = volume_dir(&other, "u1", "configmap", "cfg");
    assert_eq!(mode(&cfg.join("color")), 0o644);
    assert_eq!(mode(&cfg), 0o755);
}

#[tokio::test]
async fn api_backed_sub_paths_resolve_to_the_payload_file_or_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("pods");
    let o = FakeObjects::default();
    o.put_config_map(
        "apps",
        "my-configmap",
        &[("configmap-key", "configmap-value")],
    );
    let p = pod(serde_json::json!({
        "volumes": [
            {"name": "cm", "configMap": {"name": "my-configmap"}},
            {"name": "proj", "projected": {"sources": [{"configMap": {"name": "my-configmap",
                "items": [{"key": "configmap-key", "path": "projected/configmap-key"}]}}]}},
            {"name": "down", "downwardAPI": {"items": [{"path": "downward/podname",
                "fieldRef": {"fieldPath": "metadata.name"}}]}}
        ],
        "containers": [{"name": "main", "image": "img", "volumeMounts": [
            {"name": "cm", "mountPath": "/etc/resolv.conf", "subPath": "configmap-key"},
            {"name": "proj", "mountPath": "/test-volume", "subPath": "projected/configmap-key"},
            {"name": "down", "mountPath": "/d", "subPath": "downward/podname"},
            {"name": "down", "mountPath": "/dd", "subPath": "downward"}
        ]}]
    }));
    let mut vols = PodVolumes::new(&p, &root, false).unwrap();
    vols.set_up(Some(&o), 0).await.unwrap();
    let c = &p.spec.as_ref().unwrap().containers[0];
    let m = vols.mounts(c).unwrap();
    assert_eq!(m.len(), 4);
    assert_eq!(m[0].container_path, "/etc/resolv.conf");
    assert_eq!(read(Path::new(&m[0].host_path)), "configmap-value");
    assert_eq!(read(Path::new(&m[1].host_path)), "configmap-value");
    assert_eq!(read(Path::new(&m[2].host_path)), "web");
    assert!(Path::new(&m[3].host_path).join("podname").is_file());
    assert!(
        m.iter().all(|m| m.readonly),
        "API-backed volumes are read-only"
    );
    assert!(
        m.iter().all(|m| !Path::new(&m.host_path)
            .symlink_metadata()
            .unwrap()
            .file_type()
            .is_symlink()),
        "a subPath is the resolved path, never the volume's link"
    );
    let bad = serde_json::json!([{"name": "cm", "mountPath": "/x", "subPath": "nope"}]);
    let mut c2 = c.clone();
    c2.volume_mounts = serde_json::from_value(bad).unwrap();
    assert!(vols.mounts(&c2).is_err(), "a missing key is no subPath");
}

#[tokio::test]
async fn downward_api_files_follow_the_pods_updated_labels_and_annotations() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("pods");
    let o = FakeObjects::default();
    let items = serde_json::json!([
        {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
        {"path": "builder", "fieldRef": {"fieldPath": "metadata.annotations['builder']"}}
    ]);
    let mut p = pod(serde_json::json!({"volumes": [
        {"name": "down", "downwardAPI": {"items": items}},
        {"name": "proj", "projected": {"sources": [{"downwardAPI": {"items": items}}]}}
    ]}));
    p.metadata.labels = Some([("key1".to_string(), "value1".to_string())].into());
    p.metadata.annotations = Some([("builder".to_string(), "bar".to_string())].into());
    let mut vols = PodVolumes::new(&p, &root, false).unwrap();
    vols.set_up(Some(&o), 0).await.unwrap();
    let dirs = [
        volume_dir(&root, "u1", "downward-api", "down"),
        volume_dir(&root, "u1", "projected", "proj"),
    ];
    for d in &dirs {
        assert_eq!(read(&d.join("labels")), "key1=\"value1\"\n");
        assert_eq!(read(&d.join("builder")), "bar");
    }

    // Only the pod's labels and annotations are taken from the update.
    let mut updated = p.clone();
    updated.metadata.labels = Some(
        [("key1", "value1"), ("key3", "value3")]
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .into(),
    );
    updated.metadata.annotations = Some([("builder".to_string(), "foo".to_string())].into());
    updated.metadata.name = Some("renamed".into());
    vols.update_pod(&updated);
    assert_eq!(
        vols.refresh(Some(&o), 10).await.unwrap(),
        vec!["down".to_string(), "proj".to_string()]
    );
    for d in &dirs {
        assert_eq!(
            read(&d.join("labels")),
            "key1=\"value1\"\nkey3=\"value3\"\n"
        );
        assert_eq!(read(&d.join("builder")), "foo");
    }
    assert_eq!(vols.pod.metadata.name.as_deref(), Some("web"));
}
