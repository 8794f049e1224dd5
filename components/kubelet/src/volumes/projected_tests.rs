//! downwardAPI files of a projected or downwardAPI volume: fieldRef and resourceFieldRef (with the
//! node's allocatable for unset limits), as upstream's conformance pods lay them out.

use super::*;
use crate::pod_objects::FakeObjects;

fn node() -> NodeAllocatable {
    NodeAllocatable {
        cpu: "4".into(),
        memory: "8Gi".into(),
    }
}

/// Upstream's `downwardAPIVolumeBasePod` items: podname and the four resources of `client-container`.
fn items() -> Vec<DownwardAPIVolumeFile> {
    let resource = |path: &str, r: &str| serde_json::json!({"path": path, "resourceFieldRef": {"containerName": "client-container", "resource": r}});
    serde_json::from_value(serde_json::json!([
        {"path": "podname", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}},
        resource("cpu_limit", "limits.cpu"),
        resource("cpu_request", "requests.cpu"),
        resource("memory_limit", "limits.memory"),
        resource("memory_request", "requests.memory"),
        {"path": "mem_mi", "mode": 0o400, "resourceFieldRef": {"containerName": "client-container",
            "resource": "limits.memory", "divisor": "1Mi"}},
    ]))
    .unwrap()
}

fn pod(resources: serde_json::Value) -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": "downwardapi-volume", "namespace": "ns", "uid": "u1"},
        "spec": {"containers": [{"name": "client-container", "image": "agnhost", "resources": resources}]}
    }))
    .unwrap()
}

fn text(files: &Files, path: &str) -> String {
    String::from_utf8(files[path].data.clone()).unwrap()
}

#[test]
fn resource_fields_are_the_containers_resources_rounded_up() {
    let p = pod(serde_json::json!({
        "requests": {"cpu": "250m", "memory": "32Mi"},
        "limits": {"cpu": "1250m", "memory": "128Mi"}
    }));
    let files = downward_files(&p, &items(), 0o644, &node()).unwrap();
    assert_eq!(text(&files, "podname"), "downwardapi-volume");
    assert_eq!(text(&files, "cpu_limit"), "2");
    assert_eq!(text(&files, "cpu_request"), "1");
    assert_eq!(text(&files, "memory_limit"), "134217728");
    assert_eq!(text(&files, "memory_request"), "33554432");
    assert_eq!(text(&files, "mem_mi"), "128");
    assert_eq!(files["mem_mi"].mode, 0o400);
    assert_eq!(files["cpu_limit"].mode, 0o644);
}

#[test]
fn unset_limits_are_the_nodes_allocatable() {
    let files = downward_files(&pod(serde_json::json!({})), &items(), 0o644, &node()).unwrap();
    assert_eq!(text(&files, "cpu_limit"), "4");
    assert_eq!(text(&files, "memory_limit"), (8u64 << 30).to_string());
    assert_eq!(text(&files, "cpu_request"), "0");
    assert_eq!(text(&files, "mem_mi"), "8192");
    // Without a known allocatable an unset limit has no value: the volume is not written.
    let unknown = NodeAllocatable::default();
    assert!(downward_files(&pod(serde_json::json!({})), &items(), 0o644, &unknown).is_err());
}

#[test]
fn a_resource_field_must_name_an_existing_container() {
    let p = pod(serde_json::json!({}));
    for sel in [
        serde_json::json!({"resource": "limits.cpu"}),
        serde_json::json!({"containerName": "other", "resource": "limits.cpu"}),
        serde_json::json!({"containerName": "client-container", "resource": "limits.gpu"}),
    ] {
        let f: DownwardAPIVolumeFile =
            serde_json::from_value(serde_json::json!({"path": "x", "resourceFieldRef": sel}))
                .unwrap();
        let err = downward_value(&p, &f, &node()).unwrap_err().to_string();
        assert!(err.starts_with("downwardAPI x: "), "{err}");
    }
}

#[tokio::test]
async fn a_projected_downward_source_reads_resources_too() {
    let p = pod(serde_json::json!({"limits": {"cpu": "1250m"}}));
    let src: ProjectedVolumeSource = serde_json::from_value(serde_json::json!({
        "defaultMode": 0o400,
        "sources": [{"downwardAPI": {"items": items()}}]
    }))
    .unwrap();
    let objects = FakeObjects::default();
    let files = files(
        &p,
        "podinfo",
        &src,
        &objects,
        &mut HashMap::new(),
        0,
        &node(),
    )
    .await
    .unwrap();
    assert_eq!(text(&files, "cpu_limit"), "2");
    // requests follow the limit when unset (the API's defaulting), memory falls back to the node.
    assert_eq!(text(&files, "cpu_request"), "2");
    assert_eq!(text(&files, "memory_limit"), (8u64 << 30).to_string());
    assert_eq!(files["podname"].mode, 0o400);
}
