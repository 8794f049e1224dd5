use super::*;

fn fields(causes: &[Cause]) -> Vec<String> {
    causes.iter().map(|c| c.field.clone()).collect()
}

fn class(extra: Value) -> Value {
    let mut sc = json!({"metadata": {"name": "local-path"}, "provisioner": "kiln.io/local-path"});
    for (k, v) in extra.as_object().unwrap() {
        sc[k] = v.clone();
    }
    storage_class_defaults(&mut sc);
    sc
}

#[test]
fn storage_class_defaults_and_validation() {
    let sc = class(json!({}));
    assert_eq!(sc["reclaimPolicy"], "Delete");
    assert_eq!(sc["volumeBindingMode"], "Immediate");
    assert!(storage_class_validation(&sc).is_empty());

    let mut bad = class(json!({"reclaimPolicy": "Recycle", "volumeBindingMode": "Later"}));
    bad["provisioner"] = json!("");
    let c = storage_class_validation(&bad);
    assert_eq!(
        fields(&c),
        ["provisioner", "reclaimPolicy", "volumeBindingMode"]
    );
    assert_eq!(c[0].message, "Required value");
    assert_eq!(
        c[1].message,
        "Unsupported value: \"Recycle\": supported values: \"Delete\", \"Retain\""
    );
    assert_eq!(
        c[2].message,
        "Unsupported value: \"Later\": supported values: \"Immediate\", \"WaitForFirstConsumer\""
    );
    let odd = class(json!({"provisioner": "kiln.io/local path"}));
    let c = storage_class_validation(&odd);
    assert_eq!(fields(&c), ["provisioner"]);
    assert!(c[0]
        .message
        .starts_with("Invalid value: \"kiln.io/local path\": name part must consist of"));
}

#[test]
fn storage_class_updates_keep_provisioner_parameters_policy_and_mode() {
    let old = class(json!({"parameters": {"a": "b"}}));
    let mut new = old.clone();
    new["allowVolumeExpansion"] = json!(true);
    new["metadata"]["annotations"] = json!({DEFAULT_CLASS_ANNOTATION: "true"});
    assert!(storage_class_update_validation(&old, &new).is_empty());
    new["parameters"] = json!({"a": "c"});
    new["provisioner"] = json!("other.io/x");
    new["reclaimPolicy"] = json!("Retain");
    new["volumeBindingMode"] = json!("WaitForFirstConsumer");
    let c = storage_class_update_validation(&old, &new);
    assert_eq!(
        fields(&c),
        [
            "parameters",
            "provisioner",
            "reclaimPolicy",
            "volumeBindingMode"
        ]
    );
    assert_eq!(
        c[0].message,
        "Forbidden: updates to parameters are forbidden."
    );
    assert_eq!(
        c[1].message,
        "Forbidden: updates to provisioner are forbidden."
    );
    assert_eq!(
        c[2].message,
        "Forbidden: updates to reclaimPolicy are forbidden."
    );
    assert_eq!(
        c[3].message,
        "Invalid value: \"WaitForFirstConsumer\": field is immutable"
    );
}

#[test]
fn storage_class_columns() {
    let mut sc = class(json!({"volumeBindingMode": "WaitForFirstConsumer"}));
    assert_eq!(sc_name(&sc, 0), "local-path");
    sc["metadata"]["annotations"] = json!({DEFAULT_CLASS_ANNOTATION: "true"});
    assert_eq!(sc_name(&sc, 0), "local-path (default)");
    assert_eq!(sc_provisioner(&sc, 0), "kiln.io/local-path");
    assert_eq!(sc_reclaim(&sc, 0), "Delete");
    assert_eq!(sc_binding(&sc, 0), "WaitForFirstConsumer");
    assert_eq!(sc_expansion(&sc, 0), false);
    let names: Vec<&str> = STORAGE_CLASSES.table.iter().map(|c| c.name).collect();
    assert_eq!(
        names,
        [
            "Name",
            "Provisioner",
            "ReclaimPolicy",
            "VolumeBindingMode",
            "AllowVolumeExpansion",
            "Age"
        ]
    );
}

#[test]
fn csi_driver_defaults_validation_and_immutability() {
    let mut d = json!({"metadata": {"name": "hostpath.csi.k8s.io"}});
    csi_driver_defaults(&mut d);
    let s = &d["spec"];
    assert_eq!(s["attachRequired"], true);
    assert_eq!(s["podInfoOnMount"], false);
    assert_eq!(s["storageCapacity"], false);
    assert_eq!(s["fsGroupPolicy"], "ReadWriteOnceWithFSType");
    assert_eq!(s["requiresRepublish"], false);
    assert_eq!(s["seLinuxMount"], false);
    assert_eq!(s["volumeLifecycleModes"], json!(["Persistent"]));
    assert!(csi_driver_validation(&d).is_empty());
    assert_eq!(driver_modes(&d, 0), "Persistent");
    assert_eq!(driver_tokens(&d, 0), "<unset>");

    let mut bad = d.clone();
    bad["spec"]["fsGroupPolicy"] = json!("Sometimes");
    bad["spec"]["volumeLifecycleModes"] = json!(["Forever"]);
    bad["spec"]["tokenRequests"] =
        json!([{"audience": "a", "expirationSeconds": 60}, {"audience": "a"}]);
    let c = csi_driver_validation(&bad);
    assert_eq!(
        fields(&c),
        [
            "spec.fsGroupPolicy",
            "spec.tokenRequests[0].expirationSeconds",
            "spec.tokenRequests[1].audience",
            "spec.volumeLifecycleModes"
        ]
    );

    let mut changed = d.clone();
    changed["spec"]["attachRequired"] = json!(false);
    changed["spec"]["podInfoOnMount"] = json!(true);
    let c = csi_driver_update_validation(&d, &changed);
    assert_eq!(fields(&c), ["spec.attachedRequired"]);
    assert_eq!(c[0].message, "Invalid value: false: field is immutable");
}

#[test]
fn csi_node_volume_attachment_and_capacity() {
    let node =
        json!({"spec": {"drivers": [{"name": "d", "nodeID": "n"}, {"name": "d", "nodeID": ""}]}});
    assert_eq!(
        fields(&csi_node_validation(&node)),
        ["spec.drivers[1].name", "spec.drivers[1].nodeID"]
    );
    assert_eq!(node_drivers(&node, 0), 2);
    let old =
        json!({"spec": {"drivers": [{"name": "d", "nodeID": "n", "allocatable": {"count": 1}}]}});
    let count =
        json!({"spec": {"drivers": [{"name": "d", "nodeID": "n", "allocatable": {"count": 2}}]}});
    assert!(csi_node_update_validation(&old, &count).is_empty());
    let id = json!({"spec": {"drivers": [{"name": "d", "nodeID": "m"}]}});
    assert_eq!(
        fields(&csi_node_update_validation(&old, &id)),
        ["spec.drivers"]
    );

    let va = json!({"spec": {"attacher": "d", "nodeName": "host1",
        "source": {"persistentVolumeName": "pv1"}}, "status": {"attached": true}});
    assert!(volume_attachment_validation(&va).is_empty());
    assert_eq!(va_pv(&va, 0), "pv1");
    assert_eq!(va_attached(&va, 0), true);
    let empty = json!({"spec": {"nodeName": "host1", "source": {}}});
    let c = volume_attachment_validation(&empty);
    assert_eq!(fields(&c), ["spec.attacher", "spec.source"]);
    assert_eq!(
        c[1].message,
        "Required value: must specify exactly one of inlineVolumeSpec and persistentVolumeName"
    );
    let mut moved = va.clone();
    moved["spec"]["nodeName"] = json!("host2");
    assert_eq!(
        fields(&volume_attachment_update_validation(&va, &moved)),
        ["spec"]
    );

    let cap = json!({"storageClassName": "local-path", "capacity": "10Gi",
        "nodeTopology": {"matchLabels": {"kubernetes.io/hostname": "host1"}}});
    assert!(capacity_validation(&cap).is_empty());
    assert_eq!(cap_capacity(&cap, 0), "10Gi");
    let mut other = cap.clone();
    other["storageClassName"] = json!("fast");
    assert_eq!(
        fields(&capacity_update_validation(&cap, &other)),
        ["storageClassName"]
    );
    assert_eq!(cap_capacity(&json!({}), 0), "<unset>");
}

/// A StorageClass as client-go's protobuf encoding carries it decodes to the JSON the registry reads.
#[test]
fn storage_class_protobuf_decodes() {
    fn field(n: u32, payload: &[u8]) -> Vec<u8> {
        let mut out = vec![((n << 3) | 2) as u8, payload.len() as u8];
        out.extend_from_slice(payload);
        out
    }
    let meta = field(1, b"local-path");
    let entry = [field(1, b"path"), field(2, b"/var/lib/kiln")].concat();
    let mut body = [
        field(1, &meta),
        field(2, b"kiln.io/local-path"),
        field(3, &entry),
        field(4, b"Delete"),
        field(7, b"WaitForFirstConsumer"),
    ]
    .concat();
    body.extend([(6 << 3) as u8, 1]); // allowVolumeExpansion: true (varint)
    let v = crate::protobuf::message("k8s.io.api.storage.v1.StorageClass", &body).unwrap();
    assert_eq!(v["metadata"]["name"], "local-path");
    assert_eq!(v["provisioner"], "kiln.io/local-path");
    assert_eq!(v["parameters"], json!({"path": "/var/lib/kiln"}));
    assert_eq!(v["reclaimPolicy"], "Delete");
    assert_eq!(v["volumeBindingMode"], "WaitForFirstConsumer");
    assert_eq!(v["allowVolumeExpansion"], true);
    assert!(storage_class_validation(&v).is_empty());
}
