use super::*;
use serde_json::{json, Value};

fn node(name: &str, labels: Value) -> Node {
    let mut l = labels;
    l["kubernetes.io/hostname"] = json!(name);
    serde_json::from_value(json!({"metadata": {"name": name, "labels": l}})).unwrap()
}

fn class(name: &str, mode: &str, provisioner: &str, topologies: Value) -> StorageClass {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "provisioner": provisioner,
        "volumeBindingMode": mode,
        "allowedTopologies": topologies
    }))
    .unwrap()
}

fn claim(name: &str, spec: Value, meta: Value) -> PersistentVolumeClaim {
    let mut m = json!({"name": name, "namespace": "default", "uid": format!("uid-{name}"), "resourceVersion": "1"});
    for (k, v) in meta.as_object().cloned().unwrap_or_default() {
        m[k] = v;
    }
    let mut s =
        json!({"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}});
    for (k, v) in spec.as_object().cloned().unwrap_or_default() {
        s[k] = v;
    }
    serde_json::from_value(json!({"metadata": m, "spec": s})).unwrap()
}

fn bound_claim(name: &str, pv: &str) -> PersistentVolumeClaim {
    claim(
        name,
        json!({"volumeName": pv, "storageClassName": "manual"}),
        json!({"annotations": {"pv.kubernetes.io/bind-completed": "yes"}}),
    )
}

fn pv(name: &str, size: &str, class: &str, hosts: &[&str], extra: Value) -> PersistentVolume {
    let affinity = if hosts.is_empty() {
        Value::Null
    } else {
        json!({"required": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": hosts}]}]}})
    };
    let mut v = json!({
        "metadata": {"name": name, "resourceVersion": "1"},
        "spec": {"capacity": {"storage": size}, "accessModes": ["ReadWriteOnce"],
                 "storageClassName": class, "nodeAffinity": affinity, "local": {"path": "/x"}},
        "status": {"phase": "Available"}
    });
    for (k, val) in extra.as_object().cloned().unwrap_or_default() {
        if k == "spec" {
            for (sk, sv) in val.as_object().cloned().unwrap_or_default() {
                v["spec"][sk] = sv;
            }
        } else {
            v[k] = val;
        }
    }
    serde_json::from_value(v).unwrap()
}

fn pod(volumes: Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "default", "uid": "pod-uid"},
        "spec": {"containers": [], "volumes": volumes}
    }))
    .unwrap()
}

fn pvc_pod(claims: &[&str]) -> Pod {
    pod(Value::Array(
        claims
            .iter()
            .map(|c| json!({"name": c, "persistentVolumeClaim": {"claimName": c}}))
            .collect(),
    ))
}

fn wffc_cache() -> VolumeCache {
    let mut cache = VolumeCache::default();
    cache.upsert_class(class(
        "local-path",
        "WaitForFirstConsumer",
        "kiln.io/local-path",
        Value::Null,
    ));
    cache.upsert_class(class(
        "manual",
        "WaitForFirstConsumer",
        "kubernetes.io/no-provisioner",
        Value::Null,
    ));
    cache.upsert_class(class("fast", "Immediate", "x.io/fast", Value::Null));
    cache
}

fn reasons(state: &BindingState, n: &Node) -> Vec<&'static str> {
    match find_pod_volumes(state, n) {
        Err(FilterRejection::Reasons(r)) => r,
        other => panic!("expected reasons, got {other:?}"),
    }
}

#[test]
fn a_pod_without_claims_is_skipped() {
    let p = pod(json!([{"name": "cfg", "configMap": {"name": "x"}}]));
    assert!(pre_filter(&p, &VolumeCache::default()).unwrap().is_none());
}

#[test]
fn missing_deleting_lost_and_foreign_claims_reject_the_pod() {
    let mut cache = wffc_cache();
    assert_eq!(
        pre_filter(&pvc_pod(&["data"]), &cache).unwrap_err(),
        "persistentvolumeclaim \"data\" not found"
    );
    cache.upsert_claim(claim(
        "data",
        json!({}),
        json!({"deletionTimestamp": "2026-01-01T00:00:00Z", "finalizers": ["kubernetes.io/pvc-protection"]}),
    ));
    assert_eq!(
        pre_filter(&pvc_pod(&["data"]), &cache).unwrap_err(),
        "persistentvolumeclaim \"data\" is being deleted"
    );
    let mut lost = claim("data", json!({"volumeName": "gone"}), json!({}));
    lost.status = Some(serde_json::from_value(json!({"phase": "Lost"})).unwrap());
    cache.upsert_claim(lost);
    assert_eq!(
        pre_filter(&pvc_pod(&["data"]), &cache).unwrap_err(),
        "persistentvolumeclaim \"data\" bound to non-existent persistentvolume \"gone\""
    );

    let eph = pod(json!([{"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}]));
    assert_eq!(
        pre_filter(&eph, &cache).unwrap_err(),
        "waiting for ephemeral volume controller to create the persistentvolumeclaim \"web-scratch\""
    );
    cache.upsert_claim(claim(
        "web-scratch",
        json!({"storageClassName": "local-path"}),
        json!({}),
    ));
    assert_eq!(
        pre_filter(&eph, &cache).unwrap_err(),
        "PVC default/web-scratch was not created for pod default/web (pod is not owner)"
    );
    cache.upsert_claim(claim(
        "web-scratch",
        json!({"storageClassName": "local-path"}),
        json!({"ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "web", "uid": "pod-uid", "controller": true}]}),
    ));
    let state = pre_filter(&eph, &cache).unwrap().unwrap();
    assert_eq!(
        state.delayed.len(),
        1,
        "the ephemeral claim waits for a node"
    );
}

#[test]
fn unbound_immediate_and_prebound_claims_wait_for_the_pv_controller() {
    let mut cache = wffc_cache();
    cache.upsert_claim(claim("a", json!({"storageClassName": "fast"}), json!({})));
    assert_eq!(
        pre_filter(&pvc_pod(&["a"]), &cache).unwrap_err(),
        REASON_UNBOUND_IMMEDIATE
    );
    // No class at all, or a class that does not exist: Immediate too.
    cache.upsert_claim(claim("a", json!({}), json!({})));
    assert_eq!(
        pre_filter(&pvc_pod(&["a"]), &cache).unwrap_err(),
        REASON_UNBOUND_IMMEDIATE
    );
    cache.upsert_claim(claim("a", json!({"storageClassName": "nope"}), json!({})));
    assert_eq!(
        pre_filter(&pvc_pod(&["a"]), &cache).unwrap_err(),
        REASON_UNBOUND_IMMEDIATE
    );
    // Pre-bound to a PV but not bound yet, even with a WaitForFirstConsumer class.
    cache.upsert_claim(claim(
        "a",
        json!({"storageClassName": "local-path", "volumeName": "pv1"}),
        json!({}),
    ));
    assert_eq!(
        pre_filter(&pvc_pod(&["a"]), &cache).unwrap_err(),
        REASON_UNBOUND_IMMEDIATE
    );
}

#[test]
fn a_bound_pv_pins_the_pod_to_its_node() {
    let mut cache = wffc_cache();
    cache.upsert_claim(bound_claim("data", "pv1"));
    cache.upsert_volume(pv("pv1", "1Gi", "manual", &["a"], json!({})));
    let state = pre_filter(&pvc_pod(&["data"]), &cache).unwrap().unwrap();
    let plan = find_pod_volumes(&state, &node("a", json!({}))).unwrap();
    assert!(plan.is_empty(), "nothing to bind");
    assert_eq!(
        reasons(&state, &node("b", json!({}))),
        [REASON_NODE_CONFLICT]
    );
    // The zone affinity of the seeds' mysql PV.
    let mut zoned = pv("pv1", "1Gi", "manual", &[], json!({}));
    zoned.spec.as_mut().unwrap().node_affinity = Some(
        serde_json::from_value(json!({"required": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["us-east-1a"]}]}]}}))
        .unwrap(),
    );
    cache.upsert_volume(zoned);
    let state = pre_filter(&pvc_pod(&["data"]), &cache).unwrap().unwrap();
    assert_eq!(
        reasons(&state, &node("a", json!({}))),
        [REASON_NODE_CONFLICT]
    );
    assert!(find_pod_volumes(
        &state,
        &node("a", json!({"topology.kubernetes.io/zone": "us-east-1a"}))
    )
    .is_ok());
}

#[test]
fn a_bound_claim_whose_pv_is_gone() {
    let mut cache = wffc_cache();
    cache.upsert_claim(bound_claim("data", "pv1"));
    let state = pre_filter(&pvc_pod(&["data"]), &cache).unwrap().unwrap();
    assert_eq!(
        reasons(&state, &node("a", json!({}))),
        [REASON_PV_NOT_EXIST]
    );
}

#[test]
fn wffc_claims_take_the_smallest_fitting_available_pv_reachable_from_the_node() {
    let mut cache = wffc_cache();
    cache.upsert_claim(claim(
        "data",
        json!({"storageClassName": "manual"}),
        json!({}),
    ));
    cache.upsert_volume(pv("big", "10Gi", "manual", &["a"], json!({})));
    cache.upsert_volume(pv("small", "2Gi", "manual", &["a"], json!({})));
    cache.upsert_volume(pv("tiny", "500Mi", "manual", &["a"], json!({})));
    cache.upsert_volume(pv("other-class", "1Gi", "fast", &["a"], json!({})));
    cache.upsert_volume(pv("on-b", "1Gi", "manual", &["b"], json!({})));
    cache.upsert_volume(pv(
        "released",
        "1Gi",
        "manual",
        &["a"],
        json!({"status": {"phase": "Released"}}),
    ));
    cache.upsert_volume(pv(
        "rwx-only",
        "1Gi",
        "manual",
        &["a"],
        json!({"spec": {"accessModes": ["ReadWriteMany"]}}),
    ));
    cache.upsert_volume(pv(
        "block",
        "1Gi",
        "manual",
        &["a"],
        json!({"spec": {"volumeMode": "Block"}}),
    ));
    let state = pre_filter(&pvc_pod(&["data"]), &cache).unwrap().unwrap();
    let plan = find_pod_volumes(&state, &node("a", json!({}))).unwrap();
    assert_eq!(plan.static_bindings.len(), 1);
    assert_eq!(
        plan.static_bindings[0].1.metadata.name.as_deref(),
        Some("small")
    );
    let plan = find_pod_volumes(&state, &node("b", json!({}))).unwrap();
    assert_eq!(
        plan.static_bindings[0].1.metadata.name.as_deref(),
        Some("on-b")
    );
    // No PV on node c, and the class cannot provision.
    assert_eq!(
        reasons(&state, &node("c", json!({}))),
        [REASON_BIND_CONFLICT]
    );
}

#[test]
fn a_pv_pre_bound_to_the_claim_wins_and_pvs_claimed_by_others_are_skipped() {
    let mut cache = wffc_cache();
    cache.upsert_claim(claim(
        "data",
        json!({"storageClassName": "manual"}),
        json!({}),
    ));
    cache.upsert_volume(pv(
        "taken",
        "1Gi",
        "manual",
        &["a"],
        json!({"spec": {"claimRef": {"namespace": "default", "name": "someone-else"}}}),
    ));
    let state = pre_filter(&pvc_pod(&["data"]), &cache).unwrap().unwrap();
    assert_eq!(
        reasons(&state, &node("a", json!({}))),
        [REASON_BIND_CONFLICT]
    );
    cache.upsert_volume(pv(
        "mine",
        "5Gi",
        "manual",
        &["a"],
        json!({"spec": {"claimRef": {"namespace": "default", "name": "data"}}, "status": {"phase": "Pending"}}),
    ));
    cache.upsert_volume(pv("smaller", "1Gi", "manual", &["a"], json!({})));
    let state = pre_filter(&pvc_pod(&["data"]), &cache).unwrap().unwrap();
    let plan = find_pod_volumes(&state, &node("a", json!({}))).unwrap();
    assert_eq!(
        plan.static_bindings[0].1.metadata.name.as_deref(),
        Some("mine")
    );
}

#[test]
fn two_claims_never_get_the_same_pv() {
    let mut cache = wffc_cache();
    cache.upsert_claim(claim(
        "one",
        json!({"storageClassName": "manual"}),
        json!({}),
    ));
    cache.upsert_claim(claim(
        "two",
        json!({"storageClassName": "manual"}),
        json!({}),
    ));
    cache.upsert_volume(pv("pv1", "1Gi", "manual", &["a"], json!({})));
    let state = pre_filter(&pvc_pod(&["one", "two"]), &cache)
        .unwrap()
        .unwrap();
    assert_eq!(
        reasons(&state, &node("a", json!({}))),
        [REASON_BIND_CONFLICT]
    );
    cache.upsert_volume(pv("pv2", "1Gi", "manual", &["a"], json!({})));
    let state = pre_filter(&pvc_pod(&["one", "two"]), &cache)
        .unwrap()
        .unwrap();
    assert_eq!(
        find_pod_volumes(&state, &node("a", json!({})))
            .unwrap()
            .static_bindings
            .len(),
        2
    );
}

#[test]
fn dynamic_provisioning_respects_allowed_topologies_and_selected_nodes() {
    let mut cache = wffc_cache();
    cache.upsert_claim(claim(
        "data",
        json!({"storageClassName": "local-path"}),
        json!({}),
    ));
    let state = pre_filter(&pvc_pod(&["data"]), &cache).unwrap().unwrap();
    let plan = find_pod_volumes(&state, &node("a", json!({}))).unwrap();
    assert_eq!(plan.provisions.len(), 1, "no PV: provision it");
    assert_eq!(describe(&plan), "data->provision");

    cache.upsert_class(class(
        "local-path",
        "WaitForFirstConsumer",
        "kiln.io/local-path",
        json!([{"matchLabelExpressions": [{"key": "disk", "values": ["ssd"]}]}]),
    ));
    let state = pre_filter(&pvc_pod(&["data"]), &cache).unwrap().unwrap();
    assert_eq!(
        reasons(&state, &node("a", json!({}))),
        [REASON_BIND_CONFLICT]
    );
    assert!(find_pod_volumes(&state, &node("a", json!({"disk": "ssd"}))).is_ok());

    // A selected node was already chosen: every other node fails at once.
    cache.upsert_claim(claim(
        "data",
        json!({"storageClassName": "local-path"}),
        json!({"annotations": {ANN_SELECTED_NODE: "b"}}),
    ));
    let state = pre_filter(&pvc_pod(&["data"]), &cache).unwrap().unwrap();
    assert_eq!(
        reasons(&state, &node("a", json!({"disk": "ssd"}))),
        [REASON_BIND_CONFLICT]
    );
    assert_eq!(
        find_pod_volumes(&state, &node("b", json!({"disk": "ssd"})))
            .unwrap()
            .provisions
            .len(),
        1
    );
}

#[test]
fn bound_and_unbound_reasons_are_reported_together() {
    let mut cache = wffc_cache();
    cache.upsert_claim(bound_claim("old", "pv1"));
    cache.upsert_volume(pv("pv1", "1Gi", "manual", &["a"], json!({})));
    cache.upsert_claim(claim(
        "new",
        json!({"storageClassName": "manual"}),
        json!({}),
    ));
    let state = pre_filter(&pvc_pod(&["old", "new"]), &cache)
        .unwrap()
        .unwrap();
    assert_eq!(
        reasons(&state, &node("b", json!({}))),
        [REASON_NODE_CONFLICT, REASON_BIND_CONFLICT]
    );
}

#[test]
fn reserve_assumes_and_unreserve_forgets() {
    let mut cache = wffc_cache();
    cache.upsert_claim(claim(
        "data",
        json!({"storageClassName": "manual"}),
        json!({}),
    ));
    cache.upsert_claim(claim(
        "scratch",
        json!({"storageClassName": "local-path"}),
        json!({}),
    ));
    cache.upsert_volume(pv("pv1", "1Gi", "manual", &["a"], json!({})));
    let p = pvc_pod(&["data", "scratch"]);
    let state = pre_filter(&p, &cache).unwrap().unwrap();
    let plan = find_pod_volumes(&state, &node("a", json!({}))).unwrap();
    let reservation = reserve(&mut cache, "a", &plan);
    assert_eq!(reservation.volumes.len(), 1);
    let written = &reservation.volumes[0];
    let claim_ref = written.spec.as_ref().unwrap().claim_ref.as_ref().unwrap();
    assert_eq!(claim_ref.name.as_deref(), Some("data"));
    assert_eq!(claim_ref.uid.as_deref(), Some("uid-data"));
    assert_eq!(claim_ref.kind.as_deref(), Some("PersistentVolumeClaim"));
    assert_eq!(
        written.metadata.annotations.as_ref().unwrap()[ANN_BOUND_BY_CONTROLLER],
        "yes"
    );
    assert_eq!(
        reservation.claims[0].metadata.annotations.as_ref().unwrap()[ANN_SELECTED_NODE],
        "a"
    );
    // The next pod wanting a PV of that class no longer sees pv1 as free.
    let mut other = pvc_pod(&["data2"]);
    other.metadata.name = Some("other".into());
    cache.upsert_claim(claim(
        "data2",
        json!({"storageClassName": "manual"}),
        json!({}),
    ));
    let state = pre_filter(&other, &cache).unwrap().unwrap();
    assert_eq!(
        reasons(&state, &node("a", json!({}))),
        [REASON_BIND_CONFLICT]
    );
    unreserve(&mut cache, &reservation);
    let state = pre_filter(&other, &cache).unwrap().unwrap();
    assert!(find_pod_volumes(&state, &node("a", json!({}))).is_ok());
    assert!(!cache.is_claim_assumed("default/scratch"));
}

#[test]
fn a_user_pre_bound_pv_is_not_marked_bound_by_controller() {
    let c = claim("data", json!({}), json!({}));
    let v = pv(
        "pv1",
        "1Gi",
        "manual",
        &[],
        json!({"spec": {"claimRef": {"namespace": "default", "name": "data"}}}),
    );
    let out = bind_volume_to_claim(&v, &c);
    assert!(out
        .metadata
        .annotations
        .as_ref()
        .is_none_or(|a| !a.contains_key(ANN_BOUND_BY_CONTROLLER)));
    assert_eq!(
        out.spec.unwrap().claim_ref.unwrap().uid.as_deref(),
        Some("uid-data"),
        "the uid is filled in"
    );
}
