//! Fake nodes for tests that run controllers or the scheduler without a kubelet.

/// A fake node (no kubelet): created, then its status written through nodes/status like a
/// kubelet's registration.
pub async fn create_node(client: &kube::Client, name: &str, cpu: &str, taints: serde_json::Value) {
    use k8s_openapi::api::core::v1::Node;
    use kube::api::{Api, Patch, PatchParams, PostParams};
    let nodes: Api<Node> = Api::all(client.clone());
    let node: Node = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": {"taints": taints}
    }))
    .unwrap();
    nodes.create(&PostParams::default(), &node).await.unwrap();
    let status = serde_json::json!({"status": {
        "capacity": {"cpu": cpu, "memory": "8Gi", "pods": "110", "ephemeral-storage": "20Gi"},
        "allocatable": {"cpu": cpu, "memory": "8Gi", "pods": "110", "ephemeral-storage": "20Gi"},
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
            "message": "kubelet is posting ready status"}]
    }});
    nodes
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
}
