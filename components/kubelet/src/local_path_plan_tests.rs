use super::*;

const ROOT: &str = "/var/lib/kiln/local-path";

fn claim(name: &str, annotations: serde_json::Value) -> PersistentVolumeClaim {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": "apps", "uid": format!("uid-{name}"),
                     "resourceVersion": "7", "annotations": annotations},
        "spec": {"storageClassName": "local-path", "accessModes": ["ReadWriteOnce"],
                 "resources": {"requests": {"storage": "2Gi"}}},
        "status": {"phase": "Pending"}
    }))
    .unwrap()
}

fn ours(name: &str) -> PersistentVolumeClaim {
    claim(
        name,
        serde_json::json!({SELECTED_NODE: "host1", STORAGE_PROVISIONER: PROVISIONER}),
    )
}

fn class(reclaim: &str) -> StorageClass {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": "local-path"},
        "provisioner": PROVISIONER, "reclaimPolicy": reclaim,
        "volumeBindingMode": "WaitForFirstConsumer"
    }))
    .unwrap()
}

fn plan_of(claims: &[PersistentVolumeClaim], volumes: &[PersistentVolume]) -> Vec<Action> {
    plan(&World {
        node: "host1",
        root: Path::new(ROOT),
        claims,
        volumes,
        classes: &[class("Delete")],
    })
}

fn provisioned(actions: &[Action]) -> Vec<PersistentVolume> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Provision { pv, .. } => Some((**pv).clone()),
            _ => None,
        })
        .collect()
}

fn released(mut pv: PersistentVolume) -> PersistentVolume {
    pv.metadata.uid = Some("pv-uid".into());
    pv.status = Some(serde_json::from_value(serde_json::json!({"phase": "Released"})).unwrap());
    pv
}

#[test]
fn a_claim_selected_for_this_node_gets_the_contracts_pv() {
    let actions = plan_of(&[ours("data")], &[]);
    let [Action::Provision { claim, dir, pv }] = actions.as_slice() else {
        panic!("{actions:?}")
    };
    assert_eq!(claim.name, "data");
    assert_eq!(
        dir,
        Path::new("/var/lib/kiln/local-path/pvc-uid-data_apps_data")
    );
    let got = serde_json::to_value(pv.as_ref()).unwrap();
    assert_eq!(
        got,
        serde_json::json!({
            "apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": "pvc-uid-data",
                         "annotations": {"pv.kubernetes.io/provisioned-by": "kiln.io/local-path"}},
            "spec": {
                "capacity": {"storage": "2Gi"},
                "accessModes": ["ReadWriteOnce"],
                "volumeMode": "Filesystem",
                "storageClassName": "local-path",
                "persistentVolumeReclaimPolicy": "Delete",
                "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "namespace": "apps",
                             "name": "data", "uid": "uid-data", "resourceVersion": "7"},
                "local": {"path": "/var/lib/kiln/local-path/pvc-uid-data_apps_data"},
                "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "kubernetes.io/hostname", "operator": "In", "values": ["host1"]}]}]}}
            }
        })
    );
    // The class's reclaim policy is copied.
    let retain = plan(&World {
        node: "host1",
        root: Path::new(ROOT),
        claims: &[ours("data")],
        volumes: &[],
        classes: &[class("Retain")],
    });
    assert_eq!(
        provisioned(&retain)[0]
            .spec
            .as_ref()
            .unwrap()
            .persistent_volume_reclaim_policy
            .as_deref(),
        Some("Retain")
    );
}

#[test]
fn claims_of_other_nodes_provisioners_bound_or_deleting_are_left_alone() {
    let other_node = claim(
        "a",
        serde_json::json!({SELECTED_NODE: "host2", STORAGE_PROVISIONER: PROVISIONER}),
    );
    let other_provisioner = claim(
        "b",
        serde_json::json!({SELECTED_NODE: "host1", STORAGE_PROVISIONER: "ebs.csi.aws.com"}),
    );
    let not_selected = claim("c", serde_json::json!({STORAGE_PROVISIONER: PROVISIONER}));
    let mut bound = ours("d");
    bound.spec.as_mut().unwrap().volume_name = Some("somewhere".into());
    let mut deleting = ours("e");
    deleting.metadata.deletion_timestamp =
        Some(serde_json::from_value(serde_json::json!("2026-12-03T00:00:00Z")).unwrap());
    let beta = claim(
        "f",
        serde_json::json!({SELECTED_NODE: "host1", BETA_STORAGE_PROVISIONER: PROVISIONER}),
    );
    let actions = plan_of(
        &[
            other_node,
            other_provisioner,
            not_selected,
            bound,
            deleting,
            beta,
        ],
        &[],
    );
    let names: Vec<_> = provisioned(&actions)
        .iter()
        .map(|p| p.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(
        names,
        vec!["pvc-uid-f"],
        "only the beta-annotated claim of this node"
    );
}

#[test]
fn a_claim_whose_pv_exists_is_not_provisioned_again() {
    let first = provisioned(&plan_of(&[ours("data")], &[]));
    assert_eq!(first.len(), 1);
    // After a restart (or before the PV controller binds), the PV named for the claim is there.
    assert!(plan_of(&[ours("data")], &first).is_empty());
}

#[test]
fn unprovisionable_claims_fail_with_a_reason() {
    let mut block = ours("blk");
    block.spec.as_mut().unwrap().volume_mode = Some("Block".into());
    let mut no_size = ours("nosize");
    no_size.spec.as_mut().unwrap().resources = None;
    let mut no_class = ours("noclass");
    no_class.spec.as_mut().unwrap().storage_class_name = Some("gold".into());
    let actions = plan_of(&[block, no_size, no_class], &[]);
    let msgs: Vec<String> = actions
        .iter()
        .map(|a| match a {
            Action::Fail { claim, message } => format!("{}: {message}", claim.name),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        msgs,
        vec![
            "blk: kiln.io/local-path provisions only Filesystem volumes, not volumeMode Block",
            "nosize: the claim requests no storage (spec.resources.requests.storage)",
            "noclass: storageclass.storage.k8s.io \"gold\" not found",
        ]
    );
}

#[test]
fn a_released_delete_pv_of_this_node_is_deleted_and_nothing_else_is() {
    let pv = provisioned(&plan_of(&[ours("data")], &[])).remove(0);
    let actions = plan_of(&[], &[released(pv.clone())]);
    assert_eq!(
        actions,
        vec![Action::Delete {
            pv: "pvc-uid-data".into(),
            uid: "pv-uid".into(),
            dir: PathBuf::from("/var/lib/kiln/local-path/pvc-uid-data_apps_data"),
        }]
    );
    type Change = Box<dyn Fn(&mut PersistentVolume)>;
    let variants: Vec<(&str, Change)> = vec![
        (
            "still bound",
            Box::new(|p| p.status.as_mut().unwrap().phase = Some("Bound".into())),
        ),
        (
            "retain",
            Box::new(|p| {
                p.spec.as_mut().unwrap().persistent_volume_reclaim_policy = Some("Retain".into())
            }),
        ),
        (
            "another provisioner",
            Box::new(|p| {
                p.metadata.annotations = Some(BTreeMap::from([(PROVISIONED_BY.into(), "x".into())]))
            }),
        ),
        (
            "another node",
            Box::new(|p| {
                p.spec
                    .as_mut()
                    .unwrap()
                    .node_affinity
                    .as_mut()
                    .unwrap()
                    .required
                    .as_mut()
                    .unwrap()
                    .node_selector_terms[0]
                    .match_expressions
                    .as_mut()
                    .unwrap()[0]
                    .values = Some(vec!["host2".into()])
            }),
        ),
        (
            "two nodes",
            Box::new(|p| {
                p.spec
                    .as_mut()
                    .unwrap()
                    .node_affinity
                    .as_mut()
                    .unwrap()
                    .required
                    .as_mut()
                    .unwrap()
                    .node_selector_terms[0]
                    .match_expressions
                    .as_mut()
                    .unwrap()[0]
                    .values = Some(vec!["host1".into(), "host2".into()])
            }),
        ),
        (
            "escaping path",
            Box::new(|p| {
                p.spec.as_mut().unwrap().local.as_mut().unwrap().path =
                    "/var/lib/kiln/local-path/../../../etc".into()
            }),
        ),
        (
            "the root itself",
            Box::new(|p| p.spec.as_mut().unwrap().local.as_mut().unwrap().path = ROOT.into()),
        ),
        (
            "a deeper path",
            Box::new(|p| {
                p.spec.as_mut().unwrap().local.as_mut().unwrap().path = format!("{ROOT}/a/b")
            }),
        ),
        (
            "elsewhere",
            Box::new(|p| {
                p.spec.as_mut().unwrap().local.as_mut().unwrap().path = "/home/user".into()
            }),
        ),
    ];
    for (why, change) in variants {
        let mut p = released(pv.clone());
        change(&mut p);
        assert!(plan_of(&[], &[p]).is_empty(), "{why}");
    }
}

#[test]
fn an_empty_root_turns_the_provisioner_off() {
    let pv = released(provisioned(&plan_of(&[ours("data")], &[])).remove(0));
    let actions = plan(&World {
        node: "host1",
        root: Path::new(""),
        claims: &[ours("x")],
        volumes: &[pv],
        classes: &[class("Delete")],
    });
    assert!(actions.is_empty());
}

#[test]
fn only_direct_children_of_the_root_count_as_under_it() {
    let root = Path::new(ROOT);
    assert!(is_under_root(root, &root.join("pvc-1_ns_n")));
    for bad in [
        "/var/lib/kiln/local-path",
        "/var/lib/kiln/local-path/a/b",
        "/var/lib/kiln/local-path/../x",
        "/var/lib/kiln/local-path/./x",
        "relative/x",
        "/var/lib/kiln/other/x",
    ] {
        assert!(!is_under_root(root, Path::new(bad)), "{bad}");
    }
    assert!(!is_under_root(Path::new(""), Path::new("/x")));
    assert!(!is_under_root(Path::new("rel"), Path::new("rel/x")));
}
