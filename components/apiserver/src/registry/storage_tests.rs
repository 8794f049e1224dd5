use super::*;

fn fields(causes: &[Cause]) -> Vec<String> {
    causes.iter().map(|c| c.field.clone()).collect()
}

fn message<'a>(causes: &'a [Cause], field: &str) -> &'a str {
    causes
        .iter()
        .find(|c| c.field == field)
        .map(|c| c.message.as_str())
        .unwrap_or_else(|| panic!("no cause for {field}: {causes:?}"))
}

fn pv(spec: Value) -> Value {
    let mut v = json!({"metadata": {"name": "pv1"}, "spec": spec});
    pv_defaults(&mut v);
    v
}

fn local_pv() -> Value {
    pv(json!({
        "capacity": {"storage": "1Gi"},
        "accessModes": ["ReadWriteOnce"],
        "storageClassName": "local-path",
        "local": {"path": "/var/lib/kiln/local-path/pvc-1"},
        "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": ["host1"]}]}]}},
    }))
}

fn pvc(spec: Value) -> Value {
    let mut v = json!({"metadata": {"name": "data", "namespace": "default"}, "spec": spec});
    pvc_defaults(&mut v);
    v
}

fn claim() -> Value {
    pvc(
        json!({"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}},
        "storageClassName": "local-path"}),
    )
}

#[test]
fn pv_defaults_follow_set_defaults_persistent_volume() {
    let v = local_pv();
    assert_eq!(v["spec"]["persistentVolumeReclaimPolicy"], "Retain");
    assert_eq!(v["spec"]["volumeMode"], "Filesystem");
    assert_eq!(v["status"]["phase"], "Pending");
    assert!(v["status"]["lastPhaseTransitionTime"].is_string());
    assert!(pv_validation(&v).is_empty(), "{:?}", pv_validation(&v));
    let mut kept = json!({"spec": {"persistentVolumeReclaimPolicy": "Delete", "volumeMode": "Block"},
        "status": {"phase": "Bound"}});
    pv_defaults(&mut kept);
    assert_eq!(kept["spec"]["persistentVolumeReclaimPolicy"], "Delete");
    assert_eq!(kept["status"]["phase"], "Bound");
}

#[test]
fn pvc_defaults_follow_set_defaults_persistent_volume_claim() {
    let c = claim();
    assert_eq!(c["spec"]["volumeMode"], "Filesystem");
    assert_eq!(c["status"]["phase"], "Pending");
    assert!(pvc_validation(&c).is_empty(), "{:?}", pvc_validation(&c));
}

#[test]
fn pv_needs_exactly_one_volume_type() {
    let none = pv(json!({"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"]}));
    let c = pv_validation(&none);
    assert_eq!(fields(&c), ["spec"]);
    assert_eq!(c[0].message, "Required value: must specify a volume type");
    assert_eq!(c[0].reason, "FieldValueRequired");

    let two = pv(
        json!({"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
        "hostPath": {"path": "/data"}, "nfs": {"server": "s", "path": "/x"}}),
    );
    let c = pv_validation(&two);
    assert_eq!(fields(&c), ["spec.nfs"]);
    assert_eq!(
        c[0].message,
        "Forbidden: may not specify more than 1 volume type"
    );
}

#[test]
fn pv_capacity_and_access_modes() {
    let v = pv(json!({"hostPath": {"path": "/d"}}));
    let c = pv_validation(&v);
    assert_eq!(
        fields(&c),
        ["spec.accessModes", "spec.capacity", "spec.capacity"]
    );
    assert_eq!(message(&c, "spec.accessModes"), "Required value");
    assert_eq!(c[1].message, "Required value");
    assert_eq!(
        c[2].message,
        "Unsupported value: core.ResourceList{}: supported values: \"storage\""
    );

    let zero = pv(
        json!({"capacity": {"storage": "0"}, "accessModes": ["ReadWriteOnce", "ReadWriteOncePod", "Sometimes"],
        "hostPath": {"path": "/d"}}),
    );
    let c = pv_validation(&zero);
    assert_eq!(
        fields(&c),
        [
            "spec.accessModes",
            "spec.accessModes",
            "spec.capacity[storage]"
        ]
    );
    assert_eq!(
        c[0].message,
        "Unsupported value: \"Sometimes\": supported values: \"ReadOnlyMany\", \"ReadWriteMany\", \"ReadWriteOnce\", \"ReadWriteOncePod\""
    );
    assert_eq!(
        c[1].message,
        "Forbidden: may not use ReadWriteOncePod with other access modes"
    );
    assert_eq!(c[2].message, "Invalid value: 0: must be greater than zero");
}

#[test]
fn pv_local_needs_node_affinity_and_a_path() {
    let mut v = local_pv();
    v["spec"].as_object_mut().unwrap().remove("nodeAffinity");
    v["spec"]["local"]["path"] = json!("");
    let c = pv_validation(&v);
    assert_eq!(fields(&c), ["spec.local.path", "spec.nodeAffinity"]);
    assert_eq!(
        c[1].message,
        "Required value: Local volume requires node affinity"
    );

    let mut no_terms = local_pv();
    no_terms["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"] = json!([]);
    let c = pv_validation(&no_terms);
    assert_eq!(fields(&c), ["spec.nodeAffinity.required.nodeSelectorTerms"]);
    let mut no_values = local_pv();
    no_values["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"][0]
        ["values"] = json!([]);
    assert_eq!(
        fields(&pv_validation(&no_values)),
        ["spec.nodeAffinity.required.nodeSelectorTerms[0].matchExpressions[0].values"]
    );
    let mut no_required = local_pv();
    no_required["spec"]["nodeAffinity"] = json!({});
    assert_eq!(
        message(&pv_validation(&no_required), "spec.nodeAffinity.required"),
        "Required value: must specify required node constraints"
    );
}

#[test]
fn pv_host_path_reclaim_class_and_mode() {
    let v = pv(
        json!({"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
        "hostPath": {"path": "/"}, "persistentVolumeReclaimPolicy": "Recycle",
        "storageClassName": "Bad_Class", "volumeMode": "Raw"}),
    );
    let c = pv_validation(&v);
    assert_eq!(
        fields(&c),
        [
            "spec.persistentVolumeReclaimPolicy",
            "spec.storageClassName",
            "spec.volumeMode"
        ]
    );
    assert_eq!(
        c[0].message,
        "Forbidden: may not be 'recycle' for a hostPath mount of '/'"
    );
    assert!(c[1]
        .message
        .starts_with("Invalid value: \"Bad_Class\": a lowercase RFC 1123 subdomain"));
    assert_eq!(
        c[2].message,
        "Unsupported value: \"Raw\": supported values: \"Block\", \"Filesystem\""
    );
    let bad_policy = pv(
        json!({"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
        "hostPath": {"path": "/d"}, "persistentVolumeReclaimPolicy": "Keep"}),
    );
    assert_eq!(
        pv_validation(&bad_policy)[0].message,
        "Unsupported value: \"Keep\": supported values: \"Delete\", \"Recycle\", \"Retain\""
    );
    let no_path = pv(
        json!({"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
        "hostPath": {"path": "/a/../b"}}),
    );
    assert_eq!(
        pv_validation(&no_path)[0].message,
        "Invalid value: \"/a/../b\": must not contain '..'"
    );
}

#[test]
fn pv_updates_keep_the_source_mode_and_affinity() {
    let old = local_pv();
    let mut bound = old.clone();
    bound["spec"]["claimRef"] = json!({"namespace": "default", "name": "data", "uid": "u"});
    bound["spec"]["capacity"]["storage"] = json!("2Gi");
    bound["spec"]["persistentVolumeReclaimPolicy"] = json!("Delete");
    assert!(pv_update_validation(&old, &bound).is_empty());

    let mut moved = old.clone();
    moved["spec"]["local"]["path"] = json!("/elsewhere");
    moved["spec"]["volumeMode"] = json!("Block");
    moved["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"][0]
        ["values"] = json!(["host2"]);
    let c = pv_update_validation(&old, &moved);
    assert_eq!(
        fields(&c),
        ["spec.persistentvolumesource", "volumeMode", "nodeAffinity"]
    );
    assert!(c[0]
        .message
        .starts_with("Forbidden: spec.persistentvolumesource is immutable after creation\n"));
    assert!(c[0].message.contains("/elsewhere"), "{}", c[0].message);
    assert_eq!(c[1].message, "Invalid value: \"Block\": field is immutable");
}

#[test]
fn pvc_requires_access_modes_and_storage() {
    let c = pvc_validation(&pvc(json!({"resources": {}})));
    assert_eq!(fields(&c), ["spec.accessModes", "spec.resources[storage]"]);
    assert_eq!(
        c[0].message,
        "Required value: at least 1 access mode is required"
    );
    assert_eq!(c[1].message, "Required value");
    let zero = pvc(
        json!({"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "0"}},
        "storageClassName": "UPPER", "volumeMode": "Raw",
        "dataSource": {"kind": "Snapshot", "name": "s"}}),
    );
    let c = pvc_validation(&zero);
    assert_eq!(
        fields(&c),
        [
            "spec.resources[storage]",
            "spec.storageClassName",
            "spec.volumeMode",
            "spec.dataSource"
        ]
    );
    assert_eq!(c[0].message, "Invalid value: 0: must be greater than zero");
    assert_eq!(
        c[3].message,
        "Invalid value: \"Snapshot\": must be 'PersistentVolumeClaim' when referencing the default apiGroup"
    );
}

#[test]
fn pvc_spec_is_immutable_but_for_binding_and_bound_resizing() {
    let old = claim();
    let mut class_change = old.clone();
    class_change["spec"]["storageClassName"] = json!("other");
    let c = pvc_update_validation(&old, &class_change);
    assert_eq!(fields(&c), ["spec"]);
    assert!(c[0].message.starts_with(
        "Forbidden: spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims\n"
    ));
    assert!(c[0]
        .message
        .contains("- \tStorageClassName: &\"local-path\","));
    assert!(c[0].message.contains("+ \tStorageClassName: &\"other\","));

    // The binder sets volumeName once; a bound claim may grow.
    let mut binding = old.clone();
    binding["spec"]["volumeName"] = json!("pvc-1");
    assert!(pvc_update_validation(&old, &binding).is_empty());
    let mut rebinding = binding.clone();
    rebinding["spec"]["volumeName"] = json!("pvc-2");
    assert_eq!(
        fields(&pvc_update_validation(&binding, &rebinding)),
        ["spec"]
    );

    let mut pending_grow = old.clone();
    pending_grow["spec"]["resources"]["requests"]["storage"] = json!("2Gi");
    assert_eq!(
        fields(&pvc_update_validation(&old, &pending_grow)),
        ["spec"]
    );
    let mut bound = binding.clone();
    bound["status"]["phase"] = json!("Bound");
    let mut grow = bound.clone();
    grow["spec"]["resources"]["requests"]["storage"] = json!("2Gi");
    assert!(pvc_update_validation(&bound, &grow).is_empty());
    let mut shrink = bound.clone();
    shrink["spec"]["resources"]["requests"]["storage"] = json!("512Mi");
    let c = pvc_update_validation(&bound, &shrink);
    assert_eq!(fields(&c), ["spec.resources.requests.storage"]);
    assert_eq!(
        c[0].message,
        "Forbidden: field can not be less than previous value"
    );
    // Same size spelled differently is not a shrink.
    let mut respelled = bound.clone();
    respelled["spec"]["resources"]["requests"]["storage"] = json!("1024Mi");
    assert!(pvc_update_validation(&bound, &respelled).is_empty());
}

#[test]
fn pvc_class_may_be_set_once_when_it_had_none() {
    let mut old = claim();
    old["spec"]
        .as_object_mut()
        .unwrap()
        .remove("storageClassName");
    let mut set = old.clone();
    set["spec"]["storageClassName"] = json!("local-path");
    assert!(pvc_update_validation(&old, &set).is_empty());
    let mut mode = old.clone();
    mode["spec"]["volumeMode"] = json!("Block");
    let c = pvc_update_validation(&old, &mode);
    assert_eq!(fields(&c), ["spec", "volumeMode"]);
}

#[test]
fn columns_follow_the_printers() {
    let mut v = local_pv();
    v["spec"]["accessModes"] = json!(["ReadWriteMany", "ReadWriteOnce", "ReadWriteOnce"]);
    assert_eq!(pv_capacity(&v, 0), "1Gi");
    assert_eq!(pv_access_modes(&v, 0), "RWO,RWX");
    assert_eq!(pv_reclaim(&v, 0), "Retain");
    assert_eq!(pv_status(&v, 0), "Pending");
    assert_eq!(pv_claim(&v, 0), "");
    assert_eq!(storage_class(&v, 0), "local-path");
    assert_eq!(volume_attributes_class(&v, 0), "<unset>");
    assert_eq!(volume_mode_cell(&v, 0), "Filesystem");
    v["spec"]["claimRef"] = json!({"namespace": "default", "name": "data"});
    v["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
    assert_eq!(pv_claim(&v, 0), "default/data");
    assert_eq!(pv_status(&v, 0), "Terminating");
    v["metadata"]["annotations"] = json!({BETA_STORAGE_CLASS: "beta"});
    assert_eq!(storage_class(&v, 0), "beta");

    let mut c = claim();
    assert_eq!(pvc_status(&c, 0), "Pending");
    assert_eq!(pvc_capacity(&c, 0), "");
    assert_eq!(pvc_access_modes(&c, 0), "");
    c["spec"]["volumeName"] = json!("pvc-1");
    c["status"] = json!({"phase": "Bound", "capacity": {"storage": "2Gi"},
        "accessModes": ["ReadWriteOncePod"]});
    assert_eq!(pvc_volume(&c, 0), "pvc-1");
    assert_eq!(pvc_capacity(&c, 0), "2Gi");
    assert_eq!(pvc_access_modes(&c, 0), "RWOP");

    let names: Vec<&str> = PERSISTENT_VOLUMES.table.iter().map(|c| c.name).collect();
    assert_eq!(
        names,
        [
            "Name",
            "Capacity",
            "Access Modes",
            "Reclaim Policy",
            "Status",
            "Claim",
            "StorageClass",
            "VolumeAttributesClass",
            "Reason",
            "Age",
            "VolumeMode"
        ]
    );
    let names: Vec<&str> = PERSISTENT_VOLUME_CLAIMS
        .table
        .iter()
        .map(|c| c.name)
        .collect();
    assert_eq!(
        names,
        [
            "Name",
            "Status",
            "Volume",
            "Capacity",
            "Access Modes",
            "StorageClass",
            "VolumeAttributesClass",
            "Age",
            "VolumeMode"
        ]
    );
    assert_eq!(PERSISTENT_VOLUME_CLAIMS.table[8].priority, 1);
}
