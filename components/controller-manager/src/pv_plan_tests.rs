use super::*;
use serde_json::json;

fn pv(v: serde_json::Value) -> PersistentVolume {
    serde_json::from_value(v).unwrap()
}

fn pvc(v: serde_json::Value) -> PersistentVolumeClaim {
    serde_json::from_value(v).unwrap()
}

fn available(name: &str) -> serde_json::Value {
    json!({"metadata": {"name": name, "resourceVersion": "5"},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Retain", "hostPath": {"path": "/data"}},
        "status": {"phase": "Available"}})
}

fn pending(extra_spec: serde_json::Value) -> serde_json::Value {
    let mut v = json!({"metadata": {"name": "data", "namespace": "ns", "uid": "claim-uid",
            "resourceVersion": "7"},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "",
            "resources": {"requests": {"storage": "1Gi"}}},
        "status": {"phase": "Pending"}});
    for (k, val) in extra_spec.as_object().unwrap() {
        v["spec"][k] = val.clone();
    }
    v
}

fn class(name: &str, mode: &str, default: bool) -> Arc<StorageClass> {
    let mut v = json!({"metadata": {"name": name}, "provisioner": "kiln.io/local-path",
        "reclaimPolicy": "Delete", "volumeBindingMode": mode});
    if default {
        v["metadata"]["annotations"] = json!({ANN_DEFAULT_CLASS: "true"});
    }
    Arc::new(serde_json::from_value(v).unwrap())
}

fn sync(
    claim: &PersistentVolumeClaim,
    vols: &[PersistentVolume],
    classes: &[Arc<StorageClass>],
) -> Vec<Step> {
    sync_with_pods(claim, vols, classes, &[])
}

fn sync_with_pods(
    claim: &PersistentVolumeClaim,
    vols: &[PersistentVolume],
    classes: &[Arc<StorageClass>],
    pods: &[Arc<Pod>],
) -> Vec<Step> {
    let volumes: Vec<Arc<PersistentVolume>> = vols.iter().cloned().map(Arc::new).collect();
    sync_claim(
        claim,
        &Caches {
            volumes: &volumes,
            classes,
            pods,
        },
    )
    .unwrap()
}

fn events(steps: &[Step]) -> Vec<(On, &str, &str)> {
    steps
        .iter()
        .filter_map(|s| match s {
            Step::Event {
                on,
                reason,
                message,
                ..
            } => Some((*on, *reason, message.as_str())),
            _ => None,
        })
        .collect()
}

/// The objects as the steps leave them, applied in order.
fn apply(
    volume: &PersistentVolume,
    claim: &PersistentVolumeClaim,
    steps: &[Step],
) -> (PersistentVolume, PersistentVolumeClaim) {
    let (mut v, mut c) = (volume.clone(), claim.clone());
    for s in steps {
        match s {
            Step::UpdateVolume(n) => {
                assert_eq!(name_of(n.as_ref()), name_of(&v));
                let status = v.status.clone();
                v = (**n).clone();
                v.status = status;
            }
            Step::VolumePhase { phase, message, .. } => {
                let st = v.status.get_or_insert_with(Default::default);
                st.phase = Some(phase.clone());
                st.message = message.clone();
            }
            Step::UpdateClaim(n) => {
                let status = c.status.clone();
                c = (**n).clone();
                c.status = status;
            }
            Step::ClaimStatus(st) => c.status = Some((**st).clone()),
            Step::Event { .. } | Step::SyncClaim { .. } => {}
        }
    }
    (v, c)
}

fn ann<'a, K: kube::Resource>(obj: &'a K, key: &str) -> Option<&'a str> {
    annotation(&obj.meta().annotations, key)
}

#[test]
fn a_claim_binds_to_a_matching_volume_volume_first() {
    let volume = pv(available("pv1"));
    let claim = pvc(pending(json!({})));
    let steps = sync(&claim, std::slice::from_ref(&volume), &[]);
    // The order restarts rely on: claimRef, volume phase, claim, claim status.
    assert!(matches!(steps[0], Step::UpdateVolume(_)));
    assert!(matches!(&steps[1], Step::VolumePhase { phase, .. } if phase == "Bound"));
    assert!(matches!(steps[2], Step::UpdateClaim(_)));
    assert!(matches!(steps[3], Step::ClaimStatus(_)));
    assert_eq!(steps.len(), 4);
    let (v, c) = apply(&volume, &claim, &steps);
    let r = v.spec.as_ref().unwrap().claim_ref.as_ref().unwrap();
    assert_eq!(
        (
            r.namespace.as_deref(),
            r.name.as_deref(),
            r.uid.as_deref(),
            r.kind.as_deref()
        ),
        (
            Some("ns"),
            Some("data"),
            Some("claim-uid"),
            Some("PersistentVolumeClaim")
        )
    );
    assert_eq!(ann(&v, ANN_BOUND_BY_CONTROLLER), Some("yes"));
    assert_eq!(c.spec.as_ref().unwrap().volume_name.as_deref(), Some("pv1"));
    assert_eq!(ann(&c, ANN_BIND_COMPLETED), Some("yes"));
    assert_eq!(ann(&c, ANN_BOUND_BY_CONTROLLER), Some("yes"));
    let st = c.status.as_ref().unwrap();
    assert_eq!(st.phase.as_deref(), Some("Bound"));
    assert_eq!(st.capacity.as_ref().unwrap()["storage"].0, "1Gi");
    assert_eq!(
        st.access_modes.as_deref(),
        Some(&["ReadWriteOnce".to_string()][..])
    );

    // Converged: a re-sync of both changes nothing.
    assert_eq!(sync(&c, std::slice::from_ref(&v), &[]), vec![]);
    assert_eq!(sync_volume(&v, Some(&c), &[]), vec![]);
}

#[test]
fn a_restart_after_the_claim_ref_finishes_the_same_binding() {
    let volume = pv(available("pv1"));
    let other = pv(available("pv0"));
    let claim = pvc(pending(json!({})));
    let steps = sync(&claim, std::slice::from_ref(&volume), &[]);
    // Only the volume was written before the crash.
    let (half, _) = apply(&volume, &claim, &steps[..1]);
    // The claim's sync picks that volume over an equally good free one and finishes.
    let steps = sync(&claim, &[other, half.clone()], &[]);
    let (v, c) = apply(&half, &claim, &steps);
    assert!(
        !steps.iter().any(|s| matches!(s, Step::UpdateVolume(_))),
        "claimRef already right"
    );
    assert_eq!(c.spec.as_ref().unwrap().volume_name.as_deref(), Some("pv1"));
    assert_eq!(v.status.as_ref().unwrap().phase.as_deref(), Some("Bound"));
    // The volume's own sync meanwhile only asks for the claim's sync, never releases it.
    assert_eq!(
        sync_volume(&half, Some(&claim), &[]),
        vec![Step::SyncClaim {
            namespace: "ns".into(),
            name: "data".into()
        }]
    );
}

#[test]
fn no_volume_and_no_class_stays_pending_with_upstreams_event() {
    let mut claim = pending(json!({}));
    claim["status"] = json!({});
    let steps = sync(&pvc(claim), &[], &[]);
    assert_eq!(
        events(&steps),
        vec![(
            On::Claim,
            "FailedBinding",
            "no persistent volumes available for this claim and no storage class is set"
        )]
    );
    assert!(matches!(&steps[1], Step::ClaimStatus(s) if s.phase.as_deref() == Some("Pending")));
}

#[test]
fn a_classless_claim_gets_the_default_class_first() {
    let mut claim = pending(json!({}));
    claim["spec"]
        .as_object_mut()
        .unwrap()
        .remove("storageClassName");
    let classes = [
        class("slow", "Immediate", false),
        class("local-path", "WaitForFirstConsumer", true),
    ];
    let steps = sync(&pvc(claim.clone()), &[], &classes);
    match steps.as_slice() {
        [Step::UpdateClaim(c)] => assert_eq!(
            c.spec.as_ref().unwrap().storage_class_name.as_deref(),
            Some("local-path")
        ),
        other => panic!("{other:?}"),
    }
    // An explicit "" is a request for no class, never defaulted.
    claim["spec"]["storageClassName"] = json!("");
    let steps = sync(&pvc(claim), &[], &classes);
    assert_eq!(events(&steps)[0].1, "FailedBinding");
}

#[test]
fn wait_for_first_consumer_waits_until_a_node_is_selected() {
    let classes = [class("local-path", "WaitForFirstConsumer", true)];
    let claim = pvc(pending(json!({"storageClassName": "local-path"})));
    // Even a matching free volume is left to the scheduler.
    let mut free = available("pv1");
    free["spec"]["storageClassName"] = json!("local-path");
    let steps = sync(&claim, &[pv(free)], &classes);
    assert_eq!(
        events(&steps),
        vec![(
            On::Claim,
            "WaitForFirstConsumer",
            "waiting for first consumer to be created before binding"
        )]
    );
    assert!(!steps
        .iter()
        .any(|s| matches!(s, Step::UpdateClaim(_) | Step::UpdateVolume(_))));

    // A pod that uses it but is not scheduled yet is named.
    let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "web", "namespace": "ns"},
        "spec": {"containers": [], "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]}}))
    .unwrap();
    let steps = sync_with_pods(&claim, &[], &classes, &[Arc::new(pod)]);
    assert_eq!(
        events(&steps),
        vec![(
            On::Claim,
            "WaitForPodScheduled",
            "waiting for pod web to be scheduled"
        )]
    );

    // The scheduler picked a node: the claim is handed to the external provisioner.
    let mut selected = pending(json!({"storageClassName": "local-path"}));
    selected["metadata"]["annotations"] = json!({ANN_SELECTED_NODE: "host2"});
    let selected = pvc(selected);
    let steps = sync(&selected, &[], &classes);
    let Step::UpdateClaim(c) = &steps[0] else {
        panic!("{steps:?}")
    };
    assert_eq!(
        ann(c.as_ref(), ANN_STORAGE_PROVISIONER),
        Some("kiln.io/local-path")
    );
    assert_eq!(
        ann(c.as_ref(), ANN_BETA_STORAGE_PROVISIONER),
        Some("kiln.io/local-path")
    );
    assert_eq!(events(&steps), vec![(On::Claim, "ExternalProvisioning",
        "Waiting for a volume to be created either by the external provisioner 'kiln.io/local-path' or manually by the system administrator. If volume creation is delayed, please verify that the provisioner is running and correctly registered.")]);
    // Annotated already: only the event again.
    let steps = sync(c, &[], &classes);
    assert_eq!(steps.len(), 1);
}

#[test]
fn an_immediate_class_provisions_at_once_and_a_missing_class_fails() {
    let classes = [class("fast", "Immediate", false)];
    let steps = sync(
        &pvc(pending(json!({"storageClassName": "fast"}))),
        &[],
        &classes,
    );
    assert!(matches!(steps[0], Step::UpdateClaim(_)));
    assert_eq!(events(&steps)[0].1, "ExternalProvisioning");
    let steps = sync(
        &pvc(pending(json!({"storageClassName": "gone"}))),
        &[],
        &classes,
    );
    assert_eq!(
        events(&steps),
        vec![(
            On::Claim,
            "ProvisioningFailed",
            "storageclass.storage.k8s.io \"gone\" not found"
        )]
    );
    let mut none: StorageClass = (*class("none", "Immediate", false)).clone();
    none.provisioner = "kubernetes.io/no-provisioner".into();
    let steps = sync(
        &pvc(pending(json!({"storageClassName": "none"}))),
        &[],
        &[Arc::new(none)],
    );
    assert_eq!(
        events(&steps),
        vec![(
            On::Claim,
            "ProvisioningFailed",
            "no volume plugin matched name: kubernetes.io/no-provisioner"
        )]
    );
}

#[test]
fn a_missing_binding_mode_is_an_error() {
    let mut c: StorageClass = (*class("odd", "Immediate", false)).clone();
    c.volume_binding_mode = None;
    let claim = pvc(pending(json!({"storageClassName": "odd"})));
    let err = sync_claim(
        &claim,
        &Caches {
            volumes: &[],
            classes: &[Arc::new(c)],
            pods: &[],
        },
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "VolumeBindingMode not set for StorageClass \"odd\""
    );
}

#[test]
fn a_claim_naming_its_volume() {
    let claim = pvc(pending(json!({"volumeName": "pv1"})));
    // Not there yet: Pending, no event.
    let steps = sync(&pvc(pending(json!({"volumeName": "pv1"}))), &[], &[]);
    assert!(events(&steps).is_empty());
    // There and free but too small: VolumeMismatch.
    let mut small = available("pv1");
    small["spec"]["capacity"]["storage"] = json!("1Mi");
    let steps = sync(&claim, &[pv(small)], &[]);
    assert_eq!(
        events(&steps),
        vec![(
            On::Claim,
            "VolumeMismatch",
            "Cannot bind to requested volume \"pv1\": requested PV is too small"
        )]
    );
    // There and free: bound, the claim without bound-by-controller (the user chose).
    let volume = pv(available("pv1"));
    let steps = sync(&claim, std::slice::from_ref(&volume), &[]);
    let (v, c) = apply(&volume, &claim, &steps);
    assert_eq!(ann(&v, ANN_BOUND_BY_CONTROLLER), Some("yes"));
    assert_eq!(ann(&c, ANN_BOUND_BY_CONTROLLER), None);
    assert_eq!(ann(&c, ANN_BIND_COMPLETED), Some("yes"));
    // Taken by someone else.
    let mut taken = available("pv1");
    taken["spec"]["claimRef"] = json!({"namespace": "ns", "name": "other", "uid": "x"});
    let steps = sync(&claim, &[pv(taken.clone())], &[]);
    assert_eq!(
        events(&steps),
        vec![(
            On::Claim,
            "FailedBinding",
            "volume \"pv1\" already bound to a different claim."
        )]
    );
    // ... which the controller itself had bound: an error, nothing written.
    let mut ours = pending(json!({"volumeName": "pv1"}));
    ours["metadata"]["annotations"] = json!({ANN_BOUND_BY_CONTROLLER: "yes"});
    let volumes = [Arc::new(pv(taken))];
    let err = sync_claim(
        &pvc(ours),
        &Caches {
            volumes: &volumes,
            classes: &[],
            pods: &[],
        },
    )
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("volume already claimed by \"ns/other\""),
        "{err}"
    );
}

#[test]
fn a_pre_bound_volume_is_completed_without_bound_by_controller() {
    let mut pre = available("pv1");
    pre["spec"]["claimRef"] = json!({"namespace": "ns", "name": "data"});
    let volume = pv(pre);
    let claim = pvc(pending(json!({})));
    let steps = sync(&claim, std::slice::from_ref(&volume), &[]);
    let (v, _) = apply(&volume, &claim, &steps);
    assert_eq!(
        v.spec
            .as_ref()
            .unwrap()
            .claim_ref
            .as_ref()
            .unwrap()
            .uid
            .as_deref(),
        Some("claim-uid")
    );
    assert_eq!(ann(&v, ANN_BOUND_BY_CONTROLLER), None, "the user bound it");
    // Its own sync keeps a user's pre-bound volume Available until then.
    let mut pre_released = available("pv1");
    pre_released["spec"]["claimRef"] = json!({"namespace": "ns", "name": "data"});
    pre_released["status"]["phase"] = json!("Pending");
    let steps = sync_volume(&pv(pre_released), None, &[]);
    assert!(matches!(&steps[..], [Step::VolumePhase { phase, .. }] if phase == "Available"));
}

fn bound_pair() -> (PersistentVolume, PersistentVolumeClaim) {
    let volume = pv(available("pv1"));
    let claim = pvc(pending(json!({})));
    let steps = sync(&claim, std::slice::from_ref(&volume), &[]);
    apply(&volume, &claim, &steps)
}

#[test]
fn a_bound_claim_whose_volume_went_is_lost() {
    let (_, claim) = bound_pair();
    let steps = sync(&claim, &[], &[]);
    assert_eq!(
        events(&steps),
        vec![(
            On::Claim,
            "ClaimLost",
            "Bound claim has lost its PersistentVolume. Data on the volume is lost!"
        )]
    );
    let (_, lost) = apply(&pv(available("x")), &claim, &steps);
    let st = lost.status.as_ref().unwrap();
    assert_eq!(st.phase.as_deref(), Some("Lost"));
    assert!(st.capacity.is_none() && st.access_modes.is_none());
    // Once Lost, the event is not repeated.
    assert_eq!(sync(&lost, &[], &[]), vec![]);

    let mut no_name = claim.clone();
    no_name.spec.as_mut().unwrap().volume_name = None;
    assert_eq!(
        events(&sync(&no_name, &[], &[]))[0].2,
        "Bound claim has lost reference to PersistentVolume. Data on the volume is lost!"
    );
}

#[test]
fn a_bound_claim_on_someone_elses_volume_is_misbound_and_an_unbound_volume_is_rebound() {
    let (volume, claim) = bound_pair();
    let mut stolen = volume.clone();
    stolen
        .spec
        .as_mut()
        .unwrap()
        .claim_ref
        .as_mut()
        .unwrap()
        .uid = Some("other".into());
    assert_eq!(events(&sync(&claim, &[stolen], &[]))[0].1, "ClaimMisbound");
    let mut unbound = volume.clone();
    unbound.spec.as_mut().unwrap().claim_ref = None;
    let steps = sync(&claim, std::slice::from_ref(&unbound), &[]);
    let (v, _) = apply(&unbound, &claim, &steps);
    assert_eq!(
        v.spec.unwrap().claim_ref.unwrap().uid.as_deref(),
        Some("claim-uid")
    );
}

#[test]
fn volume_phases() {
    // Unused: Available.
    let mut fresh = available("pv1");
    fresh["status"] = json!({"phase": "Pending"});
    let steps = sync_volume(&pv(fresh), None, &[]);
    assert!(matches!(&steps[..], [Step::VolumePhase { phase, .. }] if phase == "Available"));
    // Bound to a claim bound to it: Bound.
    let (mut v, c) = bound_pair();
    v.status.as_mut().unwrap().phase = Some("Available".into());
    let steps = sync_volume(&v, Some(&c), &[]);
    assert!(matches!(&steps[..], [Step::VolumePhase { phase, .. }] if phase == "Bound"));
}

#[test]
fn a_retained_volume_is_released_when_its_claim_goes() {
    let (volume, claim) = bound_pair();
    let steps = sync_volume(&volume, None, &[]);
    assert!(
        matches!(&steps[..], [Step::VolumePhase { phase, message: None, .. }] if phase == "Released")
    );
    // A new claim of the same name is not the old one.
    let mut newer = claim.clone();
    newer.metadata.uid = Some("new-uid".into());
    assert_eq!(sync_volume(&volume, Some(&newer), &[]), steps);
    // Released stays Released.
    let (released, _) = apply(&volume, &claim, &steps);
    assert_eq!(sync_volume(&released, None, &[]), vec![]);
}

fn released_with(policy: &str, provisioned_by: Option<&str>) -> PersistentVolume {
    let (mut v, _) = bound_pair();
    v.spec.as_mut().unwrap().persistent_volume_reclaim_policy = Some(policy.into());
    if let Some(p) = provisioned_by {
        v.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(ANN_DYNAMICALLY_PROVISIONED.into(), p.into());
    }
    v
}

#[test]
fn delete_is_left_to_the_external_provisioner() {
    let v = released_with("Delete", Some("kiln.io/local-path"));
    let steps = sync_volume(&v, None, &[]);
    assert!(matches!(&steps[..], [Step::VolumePhase { phase, .. }] if phase == "Released"));
}

#[test]
fn delete_of_a_volume_nobody_provisioned_fails_as_upstream() {
    let v = released_with("Delete", None);
    let steps = sync_volume(&v, None, &[]);
    assert!(matches!(&steps[0], Step::VolumePhase { phase, .. } if phase == "Released"));
    let msg = "error getting deleter volume plugin for volume \"pv1\": no deletable volume plugin matched";
    assert!(
        matches!(&steps[1], Step::VolumePhase { phase, message: Some(m), .. } if phase == "Failed" && m == msg)
    );
    assert_eq!(
        events(&steps),
        vec![(On::Volume, "VolumeFailedDelete", msg)]
    );
    // Failed keeps its phase; no new event.
    let (failed, _) = apply(&v, &pvc(pending(json!({}))), &steps);
    assert_eq!(sync_volume(&failed, None, &[]), vec![]);
}

#[test]
fn recycle_fails_without_a_recycler_unless_pods_still_use_the_claim() {
    let v = released_with("Recycle", None);
    let steps = sync_volume(&v, None, &[]);
    assert_eq!(
        events(&steps),
        vec![(
            On::Volume,
            "VolumeFailedRecycle",
            "No recycler plugin found for the volume!"
        )]
    );
    let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "web", "namespace": "ns"},
        "spec": {"nodeName": "n", "containers": [], "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]},
        "status": {"phase": "Running"}}))
    .unwrap();
    let steps = sync_volume(&v, None, &[Arc::new(pod)]);
    assert_eq!(
        events(&steps),
        vec![(
            On::Volume,
            "VolumeFailedRecycle",
            "Volume is used by pods: ns/web"
        )]
    );
}

#[test]
fn an_unknown_policy_fails() {
    let steps = sync_volume(&released_with("Shred", None), None, &[]);
    assert_eq!(events(&steps)[0].1, "VolumeUnknownReclaimPolicy");
}

#[test]
fn a_volume_whose_claim_went_elsewhere() {
    let (volume, mut claim) = bound_pair();
    claim.spec.as_mut().unwrap().volume_name = Some("pv2".into());
    // Bound by the controller: unbound and Available again.
    let steps = sync_volume(&volume, Some(&claim), &[]);
    let (v, _) = apply(&volume, &claim, &steps);
    assert!(v.spec.as_ref().unwrap().claim_ref.is_none());
    assert_eq!(ann(&v, ANN_BOUND_BY_CONTROLLER), None);
    assert_eq!(v.status.unwrap().phase.as_deref(), Some("Available"));
    // Pre-bound by a user: keeps the claim's name, loses its UID.
    let mut user = volume.clone();
    user.metadata.annotations = None;
    let steps = sync_volume(&user, Some(&claim), &[]);
    let (v, _) = apply(&user, &claim, &steps);
    let r = v.spec.unwrap().claim_ref.unwrap();
    assert_eq!((r.name.as_deref(), r.uid), (Some("data"), None));
    // Provisioned for it with Delete: released for its provisioner.
    let mut provisioned = volume.clone();
    provisioned
        .spec
        .as_mut()
        .unwrap()
        .persistent_volume_reclaim_policy = Some("Delete".into());
    provisioned
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(
            ANN_DYNAMICALLY_PROVISIONED.into(),
            "kiln.io/local-path".into(),
        );
    let steps = sync_volume(&provisioned, Some(&claim), &[]);
    assert!(matches!(&steps[..], [Step::VolumePhase { phase, .. }] if phase == "Released"));
}

#[test]
fn a_volume_mode_mismatch_is_reported_on_both() {
    let mut block = available("pv1");
    block["spec"]["volumeMode"] = json!("Block");
    block["spec"]["claimRef"] = json!({"namespace": "ns", "name": "data", "uid": "claim-uid"});
    let steps = sync_volume(&pv(block), Some(&pvc(pending(json!({})))), &[]);
    assert_eq!(
        events(&steps),
        vec![
            (On::Volume, "VolumeMismatch", "Cannot bind PersistentVolume to requested PersistentVolumeClaim \"data\" due to incompatible volumeMode."),
            (On::Claim, "VolumeMismatch", "Cannot bind PersistentVolume \"pv1\" to requested PersistentVolumeClaim due to incompatible volumeMode."),
        ]
    );
}

#[test]
fn the_newest_default_class_wins() {
    let mut older: StorageClass = (*class("a-old", "Immediate", true)).clone();
    older.metadata.creation_timestamp =
        Some(serde_json::from_value(json!("2026-01-01T00:00:00Z")).unwrap());
    let mut newer: StorageClass = (*class("z-new", "Immediate", true)).clone();
    newer.metadata.creation_timestamp =
        Some(serde_json::from_value(json!("2026-02-01T00:00:00Z")).unwrap());
    let classes = [
        Arc::new(older),
        Arc::new(newer),
        class("plain", "Immediate", false),
    ];
    assert_eq!(name_of(default_class(&classes).unwrap()), "z-new");
    assert!(default_class(&classes[2..]).is_none());
}
