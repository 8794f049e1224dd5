//! The deployment controller's decisions, as pure functions over a Deployment and its
//! ReplicaSets: the pod-template hash, the new ReplicaSet, how far RollingUpdate may surge and
//! scale down (upstream's NewRSNewReplicas / reconcileOldReplicaSets arithmetic), Recreate, and
//! which old sets to prune. The status lives in `deployment_status`.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, ReplicaSetSpec};
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::endpointslice::fnv32a;

pub const HASH_LABEL: &str = "pod-template-hash";
pub const REVISION: &str = "deployment.kubernetes.io/revision";
pub const DESIRED_REPLICAS: &str = "deployment.kubernetes.io/desired-replicas";
pub const MAX_REPLICAS: &str = "deployment.kubernetes.io/max-replicas";
/// Annotations of the Deployment that are not copied onto its ReplicaSets.
const NOT_COPIED: &[&str] = &[
    "kubectl.kubernetes.io/last-applied-configuration",
    REVISION,
    "deployment.kubernetes.io/revision-history",
    DESIRED_REPLICAS,
    MAX_REPLICAS,
];

pub fn replicas(d: &Deployment) -> i32 {
    d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
}

pub fn rs_replicas(rs: &ReplicaSet) -> i32 {
    rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
}

pub(crate) fn rs_status(
    rs: &ReplicaSet,
    f: impl Fn(&k8s_openapi::api::apps::v1::ReplicaSetStatus) -> i32,
) -> i32 {
    rs.status.as_ref().map(f).unwrap_or(0)
}

pub fn rs_available(rs: &ReplicaSet) -> i32 {
    rs_status(rs, |s| s.available_replicas.unwrap_or(0))
}

pub fn revision(meta: &ObjectMeta) -> i64 {
    meta.annotations
        .as_ref()
        .and_then(|a| a.get(REVISION))
        .and_then(|r| r.parse().ok())
        .unwrap_or(0)
}

/// Upstream's rand.SafeEncodeString alphabet: no vowels, no look-alike digits, so hashes never
/// spell words.
const SAFE: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// The pod-template-hash: FNV-1a over the template's canonical JSON (and the collision count, so
/// a clash yields a new name), safe-encoded like upstream's.
pub fn template_hash(template: &PodTemplateSpec, collision_count: Option<i32>) -> String {
    let mut bytes = serde_json::to_vec(&without_hash(template)).unwrap_or_default();
    if let Some(c) = collision_count {
        bytes.extend_from_slice(&c.to_le_bytes());
    }
    fnv32a(&bytes)
        .to_string()
        .bytes()
        .map(|b| SAFE[usize::from(b) % SAFE.len()] as char)
        .collect()
}

fn without_hash(template: &PodTemplateSpec) -> PodTemplateSpec {
    let mut t = template.clone();
    if let Some(labels) = t.metadata.as_mut().and_then(|m| m.labels.as_mut()) {
        labels.remove(HASH_LABEL);
    }
    if let Some(m) = t.metadata.as_mut() {
        if m.labels.as_ref().is_some_and(|l| l.is_empty()) {
            m.labels = None;
        }
    }
    t
}

/// Whether the ReplicaSet runs the Deployment's current template (ignoring the hash label).
pub fn same_template(d: &Deployment, rs: &ReplicaSet) -> bool {
    let dt = d.spec.as_ref().map(|s| without_hash(&s.template));
    let rt = rs
        .spec
        .as_ref()
        .and_then(|s| s.template.as_ref())
        .map(without_hash);
    dt.is_some() && dt == rt
}

/// Resolves an IntOrString against the replica count: percentages round up for surge, down for
/// unavailability, as upstream's ResolveFenceposts does.
fn scaled(value: Option<&IntOrString>, total: i32, round_up: bool) -> i32 {
    match value {
        None => {
            let v = total as f64 * 0.25;
            (if round_up { v.ceil() } else { v.floor() }) as i32
        }
        Some(IntOrString::Int(n)) => *n,
        Some(IntOrString::String(s)) => {
            let pct: f64 = s.trim_end_matches('%').parse().unwrap_or(25.0);
            let v = total as f64 * pct / 100.0;
            (if round_up { v.ceil() } else { v.floor() }) as i32
        }
    }
}

pub fn is_recreate(d: &Deployment) -> bool {
    d.spec
        .as_ref()
        .and_then(|s| s.strategy.as_ref())
        .and_then(|s| s.type_.as_deref())
        == Some("Recreate")
}

/// (maxSurge, maxUnavailable) in pods; both zero is not allowed, so unavailable becomes 1.
pub fn fenceposts(d: &Deployment) -> (i32, i32) {
    if is_recreate(d) {
        return (0, 0);
    }
    let ru = d
        .spec
        .as_ref()
        .and_then(|s| s.strategy.as_ref())
        .and_then(|s| s.rolling_update.as_ref());
    let total = replicas(d);
    let surge = scaled(ru.and_then(|r| r.max_surge.as_ref()), total, true);
    let unavailable = scaled(ru.and_then(|r| r.max_unavailable.as_ref()), total, false);
    if surge == 0 && unavailable == 0 {
        (0, 1)
    } else {
        (surge, unavailable)
    }
}

pub fn max_unavailable(d: &Deployment) -> i32 {
    if is_recreate(d) {
        return 0;
    }
    fenceposts(d).1.min(replicas(d))
}

/// The ReplicaSet for the current template, before it exists: `<deployment>-<hash>`, the hash in
/// its selector, labels and template, owned by the Deployment, with the given revision.
pub fn new_replicaset(d: &Deployment, hash: &str, revision: i64, replicas_now: i32) -> ReplicaSet {
    let spec = d.spec.clone().unwrap_or_default();
    let mut template = spec.template.clone();
    let meta = template.metadata.get_or_insert_with(Default::default);
    meta.labels
        .get_or_insert_with(Default::default)
        .insert(HASH_LABEL.into(), hash.into());
    let mut selector = spec.selector.clone();
    selector
        .match_labels
        .get_or_insert_with(Default::default)
        .insert(HASH_LABEL.into(), hash.into());
    let mut annotations = copied_annotations(d);
    annotations.insert(REVISION.into(), revision.to_string());
    annotations.insert(DESIRED_REPLICAS.into(), replicas(d).to_string());
    annotations.insert(
        MAX_REPLICAS.into(),
        (replicas(d) + fenceposts(d).0).to_string(),
    );
    ReplicaSet {
        metadata: ObjectMeta {
            name: Some(format!(
                "{}-{hash}",
                d.metadata.name.as_deref().unwrap_or_default()
            )),
            namespace: d.metadata.namespace.clone(),
            labels: meta.labels.clone(),
            annotations: Some(annotations),
            owner_references: Some(vec![owner_reference(d)]),
            ..Default::default()
        },
        spec: Some(ReplicaSetSpec {
            replicas: Some(replicas_now),
            min_ready_seconds: spec.min_ready_seconds,
            selector,
            template: Some(template),
        }),
        status: None,
    }
}

pub fn copied_annotations(d: &Deployment) -> BTreeMap<String, String> {
    d.metadata
        .annotations
        .clone()
        .unwrap_or_default()
        .into_iter()
        .filter(|(k, _)| !NOT_COPIED.contains(&k.as_str()))
        .collect()
}

pub fn owner_reference(d: &Deployment) -> OwnerReference {
    OwnerReference {
        api_version: "apps/v1".into(),
        kind: "Deployment".into(),
        name: d.metadata.name.clone().unwrap_or_default(),
        uid: d.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// The next revision: one past every old set's.
pub fn next_revision(old: &[&ReplicaSet]) -> i64 {
    old.iter()
        .map(|rs| revision(&rs.metadata))
        .max()
        .unwrap_or(0)
        + 1
}

/// Upstream's NewRSNewReplicas: how many replicas the new set may have now.
pub fn new_rs_replicas(d: &Deployment, new_rs: Option<&ReplicaSet>, old: &[&ReplicaSet]) -> i32 {
    let want = replicas(d);
    let current_new = new_rs.map(rs_replicas).unwrap_or(0);
    if is_recreate(d) {
        return want;
    }
    if current_new >= want {
        return want;
    }
    let (surge, _) = fenceposts(d);
    let total: i32 = old.iter().map(|rs| rs_replicas(rs)).sum::<i32>() + current_new;
    let max_total = want + surge;
    if total >= max_total {
        return current_new;
    }
    current_new + (max_total - total).min(want - current_new)
}

/// Upstream's reconcileOldReplicaSets: the new replica counts of old sets (oldest first) that may
/// go down now without breaking maxUnavailable. Unhealthy old pods are removed first.
pub fn scale_down_old(
    d: &Deployment,
    new_rs: &ReplicaSet,
    old: &[&ReplicaSet],
) -> Vec<(String, i32)> {
    let old_count: i32 = old.iter().map(|rs| rs_replicas(rs)).sum();
    if old_count == 0 {
        return Vec::new();
    }
    let all: i32 = old_count + rs_replicas(new_rs);
    let min_available = replicas(d) - max_unavailable(d);
    let new_unavailable = (rs_replicas(new_rs) - rs_available(new_rs)).max(0);
    let mut budget = all - min_available - new_unavailable;
    if budget <= 0 {
        return Vec::new();
    }
    let mut sorted: Vec<&ReplicaSet> = old.to_vec();
    sorted.sort_by_key(|rs| rs.metadata.creation_timestamp.as_ref().map(|t| t.0));
    let mut target: BTreeMap<String, i32> = sorted
        .iter()
        .map(|rs| {
            (
                rs.metadata.name.clone().unwrap_or_default(),
                rs_replicas(rs),
            )
        })
        .collect();
    // 1. unhealthy replicas of old sets
    for rs in &sorted {
        if budget <= 0 {
            break;
        }
        let name = rs.metadata.name.clone().unwrap_or_default();
        let cur = target[&name];
        let unhealthy = (cur - rs_available(rs)).max(0);
        let down = unhealthy.min(budget);
        if down > 0 {
            target.insert(name, cur - down);
            budget -= down;
        }
    }
    // 2. available ones, as far as the pods available overall allow
    let available: i32 = old.iter().map(|rs| rs_available(rs)).sum::<i32>() + rs_available(new_rs);
    let mut allowed = (available - min_available).max(0);
    for rs in &sorted {
        if allowed <= 0 {
            break;
        }
        let name = rs.metadata.name.clone().unwrap_or_default();
        let cur = target[&name];
        let down = cur.min(allowed);
        if down > 0 {
            target.insert(name, cur - down);
            allowed -= down;
        }
    }
    sorted
        .iter()
        .filter_map(|rs| {
            let name = rs.metadata.name.clone().unwrap_or_default();
            let t = target[&name];
            (t != rs_replicas(rs)).then_some((name, t))
        })
        .collect()
}

/// Old sets beyond revisionHistoryLimit that are already at zero, oldest revision first.
pub fn to_prune(d: &Deployment, old: &[&ReplicaSet]) -> Vec<String> {
    let limit = d
        .spec
        .as_ref()
        .and_then(|s| s.revision_history_limit)
        .unwrap_or(10)
        .max(0) as usize;
    let mut idle: Vec<&&ReplicaSet> = old
        .iter()
        .filter(|rs| {
            rs_replicas(rs) == 0
                && rs_status(rs, |s| s.replicas) == 0
                && rs.metadata.deletion_timestamp.is_none()
        })
        .collect();
    if idle.len() <= limit {
        return Vec::new();
    }
    idle.sort_by_key(|rs| revision(&rs.metadata));
    idle.iter()
        .take(idle.len() - limit)
        .map(|rs| rs.metadata.name.clone().unwrap_or_default())
        .collect()
}

fn replicas_annotation(rs: &ReplicaSet, key: &str) -> Option<i32> {
    rs.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .and_then(|v| v.parse().ok())
}

/// Whether a ReplicaSet's desired- and max-replicas annotations already record the Deployment's
/// current size (upstream's ReplicasAnnotationsNeedUpdate, negated).
pub fn replicas_annotated(d: &Deployment, rs: &ReplicaSet) -> bool {
    replicas_annotation(rs, DESIRED_REPLICAS) == Some(replicas(d))
        && replicas_annotation(rs, MAX_REPLICAS) == Some(replicas(d) + fenceposts(d).0)
}

/// Upstream's isScalingEvent: a set with replicas was sized for another spec.replicas than the
/// Deployment's (its desired-replicas annotation), so the Deployment was scaled since.
pub fn is_scaling_event(d: &Deployment, sets: &[&ReplicaSet]) -> bool {
    sets.iter()
        .filter(|rs| rs_replicas(rs) > 0)
        .any(|rs| replicas_annotation(rs, DESIRED_REPLICAS).is_some_and(|n| n != replicas(d)))
}

fn created(rs: &ReplicaSet) -> (Option<k8s_openapi::jiff::Timestamp>, Option<&str>) {
    (
        rs.metadata.creation_timestamp.as_ref().map(|t| t.0),
        rs.metadata.name.as_deref(),
    )
}

/// Upstream's DeploymentController.scale (the sync of a paused or scaled Deployment): the sizes
/// its sets get, as (name, replicas) for every set to scale or re-annotate. One set with replicas
/// (or, with none, the newest) takes spec.replicas whole; a saturated new set leaves the old ones
/// at 0; otherwise, in a RollingUpdate, the replicas added or removed are spread over the sets
/// with replicas in proportion to their size (GetProportion), larger sets first (on a tie newer
/// first when adding, older first when removing), the rounding leftover going to the first.
pub fn scale_sizes(
    d: &Deployment,
    new_rs: Option<&ReplicaSet>,
    old: &[&ReplicaSet],
) -> Vec<(String, i32)> {
    let want = replicas(d);
    let name = |rs: &ReplicaSet| rs.metadata.name.clone().unwrap_or_default();
    let mut active: Vec<&ReplicaSet> = new_rs
        .into_iter()
        .chain(old.iter().copied())
        .filter(|rs| rs_replicas(rs) > 0)
        .collect();
    // FindActiveOrLatest
    let only = match active.as_slice() {
        [] => new_rs.or_else(|| old.iter().copied().max_by_key(|rs| created(rs))),
        [one] => Some(*one),
        _ => None,
    };
    if let Some(rs) = only {
        return vec![(name(rs), want)];
    }
    // IsSaturated: the new set runs every replica, so the old ones go.
    let saturated = new_rs.is_some_and(|rs| {
        replicas_annotation(rs, DESIRED_REPLICAS) == Some(want)
            && rs_replicas(rs) == want
            && rs_available(rs) == want
    });
    if saturated {
        return old
            .iter()
            .filter(|rs| rs_replicas(rs) > 0)
            .map(|rs| (name(rs), 0))
            .collect();
    }
    if is_recreate(d) {
        return Vec::new();
    }
    let (surge, _) = fenceposts(d);
    let allowed = if want > 0 { want + surge } else { 0 };
    let total: i32 = active.iter().map(|rs| rs_replicas(rs)).sum();
    let to_add = allowed - total;
    // ReplicaSetsBySizeNewer / ReplicaSetsBySizeOlder
    active.sort_by(|a, b| {
        let by_size = rs_replicas(b).cmp(&rs_replicas(a));
        let by_age = created(a).cmp(&created(b));
        by_size.then(if to_add > 0 { by_age.reverse() } else { by_age })
    });
    let mut added = 0;
    let mut sizes: Vec<(String, i32)> = Vec::new();
    for rs in &active {
        let current = rs_replicas(rs);
        let proportion = if to_add == 0 || to_add == added {
            0
        } else {
            // getReplicaSetFraction: the set's share of the new maximum, by the maximum it was
            // sized for (its max-replicas annotation, else its own size).
            let fraction = if want == 0 {
                -current
            } else {
                let before = replicas_annotation(rs, MAX_REPLICAS)
                    .filter(|n| *n != 0)
                    .unwrap_or(current);
                let size = f64::from(current) * f64::from(want + surge) / f64::from(before);
                size.round() as i32 - current
            };
            let room = to_add - added;
            if to_add > 0 {
                fraction.min(room)
            } else {
                fraction.max(room)
            }
        };
        added += proportion;
        sizes.push((name(rs), current + proportion));
    }
    if let Some(first) = sizes.first_mut() {
        first.1 = (first.1 + to_add - added).max(0);
    }
    sizes
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment(replicas: i32, strategy: serde_json::Value) -> Deployment {
        serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "default", "uid": "d-uid", "generation": 4,
                "annotations": {"kubernetes.io/change-cause": "v2", REVISION: "1",
                    "kubectl.kubernetes.io/last-applied-configuration": "{}"}},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                "strategy": strategy,
                "template": {"metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "c", "image": "app:2"}]}}}
        }))
        .unwrap()
    }

    fn rs(name: &str, rev: i64, spec: i32, available: i32, created: &str) -> ReplicaSet {
        serde_json::from_value(json!({
            "metadata": {"name": name, "creationTimestamp": created,
                "annotations": {REVISION: rev.to_string()}},
            "spec": {"replicas": spec, "selector": {"matchLabels": {"app": "web"}}},
            "status": {"replicas": spec, "readyReplicas": available, "availableReplicas": available}
        }))
        .unwrap()
    }

    #[test]
    fn fenceposts_round_like_upstream() {
        assert_eq!(fenceposts(&deployment(10, json!({}))), (3, 2));
        assert_eq!(fenceposts(&deployment(1, json!({}))), (1, 0));
        assert_eq!(fenceposts(&deployment(3, json!({}))), (1, 0));
        let zero = json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": "0%"}});
        assert_eq!(fenceposts(&deployment(4, zero)), (0, 1));
        let pct = json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "50%", "maxUnavailable": 2}});
        assert_eq!(fenceposts(&deployment(3, pct)), (2, 2));
        assert_eq!(
            fenceposts(&deployment(3, json!({"type": "Recreate"}))),
            (0, 0)
        );
    }

    #[test]
    fn template_hash_is_stable_safe_and_changes_with_template_and_collisions() {
        let d = deployment(3, json!({}));
        let t = d.spec.clone().unwrap().template;
        let h = template_hash(&t, None);
        assert_eq!(h, template_hash(&t, None));
        assert!(h.bytes().all(|b| SAFE.contains(&b)), "{h}");
        assert_ne!(h, template_hash(&t, Some(1)));
        let mut t2 = t.clone();
        t2.spec.as_mut().unwrap().containers[0].image = Some("app:3".into());
        assert_ne!(h, template_hash(&t2, None));
        // The hash label itself does not change the hash.
        let rs = new_replicaset(&d, &h, 2, 1);
        assert_eq!(
            template_hash(rs.spec.as_ref().unwrap().template.as_ref().unwrap(), None),
            h
        );
    }

    #[test]
    fn new_replicaset_is_named_labelled_owned_and_numbered() {
        let d = deployment(3, json!({}));
        let rs = new_replicaset(&d, "abc", 2, 1);
        assert_eq!(rs.metadata.name.as_deref(), Some("web-abc"));
        let spec = rs.spec.as_ref().unwrap();
        assert_eq!(spec.replicas, Some(1));
        assert_eq!(
            spec.selector.match_labels.as_ref().unwrap()[HASH_LABEL],
            "abc"
        );
        let tl = spec
            .template
            .as_ref()
            .unwrap()
            .metadata
            .as_ref()
            .unwrap()
            .labels
            .as_ref()
            .unwrap();
        assert_eq!(
            (tl["app"].as_str(), tl[HASH_LABEL].as_str()),
            ("web", "abc")
        );
        let a = rs.metadata.annotations.as_ref().unwrap();
        assert_eq!(a[REVISION], "2");
        assert_eq!(a["kubernetes.io/change-cause"], "v2");
        assert!(!a.contains_key("kubectl.kubernetes.io/last-applied-configuration"));
        let o = &rs.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (o.kind.as_str(), o.uid.as_str(), o.controller),
            ("Deployment", "d-uid", Some(true))
        );
        assert!(same_template(&d, &rs));
    }

    #[test]
    fn rolling_update_surges_then_scales_old_down_within_availability() {
        let d = deployment(3, json!({}));
        let old = rs("web-old", 1, 3, 3, "2025-01-01T00:00:00Z");
        // maxSurge 1: the new set starts at 1.
        assert_eq!(new_rs_replicas(&d, None, &[&old]), 1);
        let new = rs("web-new", 2, 1, 0, "2025-01-02T00:00:00Z");
        assert_eq!(new_rs_replicas(&d, Some(&new), &[&old]), 1);
        // maxUnavailable 0: nothing goes until the new pod is available ...
        assert!(scale_down_old(&d, &new, &[&old]).is_empty());
        // ... then one old pod may go.
        let new = rs("web-new", 2, 1, 1, "2025-01-02T00:00:00Z");
        assert_eq!(
            scale_down_old(&d, &new, &[&old]),
            [("web-old".to_string(), 2)]
        );
        // Unhealthy old pods go first, whatever their availability.
        let sick = rs("web-old", 1, 3, 0, "2025-01-01T00:00:00Z");
        let new0 = rs("web-new", 2, 1, 0, "2025-01-02T00:00:00Z");
        let d10 = deployment(
            3,
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}}),
        );
        assert_eq!(
            scale_down_old(&d10, &new0, &[&sick]),
            [("web-old".to_string(), 2)]
        );
        // Scaling down a finished rollout: the new set follows spec.replicas.
        let done = rs("web-new", 2, 5, 5, "2025-01-02T00:00:00Z");
        assert_eq!(new_rs_replicas(&d, Some(&done), &[]), 3);
        assert_eq!(next_revision(&[&old, &sick]), 2);
    }

    fn annotated(mut rs: ReplicaSet, desired: i32, max: i32) -> ReplicaSet {
        let a = rs.metadata.annotations.get_or_insert_with(Default::default);
        a.insert(DESIRED_REPLICAS.into(), desired.to_string());
        a.insert(MAX_REPLICAS.into(), max.to_string());
        rs
    }

    #[test]
    fn scaling_mid_rollout_spreads_replicas_in_proportion() {
        // Upstream's e2e: 10 replicas, maxSurge 3, maxUnavailable 2, a rollout stuck at 8 old
        // and 5 new replicas, then scaled to 30.
        let strategy =
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 3, "maxUnavailable": 2}});
        let (d10, d30) = (deployment(10, strategy.clone()), deployment(30, strategy));
        let first = annotated(rs("web-1", 1, 8, 8, "2025-01-01T00:00:00Z"), 10, 13);
        let second = annotated(rs("web-2", 2, 5, 0, "2025-01-02T00:00:00Z"), 10, 13);
        assert!(!is_scaling_event(&d10, &[&first, &second]));
        assert!(is_scaling_event(&d30, &[&first, &second]));
        // 8 * 33/13 rounds to 20, 5 * 33/13 to 13.
        assert_eq!(
            scale_sizes(&d30, Some(&second), &[&first]),
            [("web-1".to_string(), 20), ("web-2".to_string(), 13)]
        );
        // Back to 10: the 20 removed are spread the same way.
        let first = annotated(rs("web-1", 1, 20, 20, "2025-01-01T00:00:00Z"), 30, 33);
        let second = annotated(rs("web-2", 2, 13, 0, "2025-01-02T00:00:00Z"), 30, 33);
        assert!(is_scaling_event(&d10, &[&first, &second]));
        assert_eq!(
            scale_sizes(&d10, Some(&second), &[&first]),
            [("web-1".to_string(), 8), ("web-2".to_string(), 5)]
        );
        // On a tie, adding goes to the newer set first, and the leftover of the rounding to the
        // first in that order: 3 sets of 1 (sized for a maximum of 3) scaled to 4.
        let one = |name: &str, created: &str| annotated(rs(name, 1, 1, 1, created), 3, 3);
        let (a, b, c) = (
            one("a", "2025-01-01T00:00:00Z"),
            one("b", "2025-01-02T00:00:00Z"),
            one("c", "2025-01-03T00:00:00Z"),
        );
        let d4 = deployment(
            4,
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}),
        );
        assert_eq!(
            scale_sizes(&d4, Some(&c), &[&a, &b]),
            [
                ("c".to_string(), 2),
                ("b".to_string(), 1),
                ("a".to_string(), 1)
            ]
        );
        // Without a max-replicas annotation a set's own size is the base.
        let mut bare = b.clone();
        bare.metadata
            .annotations
            .as_mut()
            .map(|a| a.remove(MAX_REPLICAS));
        assert_eq!(
            scale_sizes(&d4, Some(&bare), &[&a]),
            [("b".to_string(), 3), ("a".to_string(), 1)]
        );
        // Recreate sets are never spread.
        assert!(
            scale_sizes(&deployment(4, json!({"type": "Recreate"})), Some(&b), &[&a]).is_empty()
        );
    }

    #[test]
    fn scaling_one_set_or_a_saturated_rollout() {
        let d = deployment(10, json!({}));
        // One set with replicas takes spec.replicas whole ...
        let only = annotated(rs("web-1", 1, 3, 3, "2025-01-01T00:00:00Z"), 3, 4);
        let idle = rs("web-0", 0, 0, 0, "2024-01-01T00:00:00Z");
        assert_eq!(
            scale_sizes(&d, None, &[&only, &idle]),
            [("web-1".to_string(), 10)]
        );
        // ... with none, the newest does.
        let idle2 = rs("web-2", 2, 0, 0, "2025-02-01T00:00:00Z");
        assert_eq!(
            scale_sizes(&d, None, &[&idle, &idle2]),
            [("web-2".to_string(), 10)]
        );
        // A saturated new set leaves the old ones at 0.
        let full = annotated(rs("web-2", 2, 10, 10, "2025-02-01T00:00:00Z"), 10, 13);
        assert_eq!(
            scale_sizes(&d, Some(&full), &[&only]),
            [("web-1".to_string(), 0)]
        );
        // The annotations record the Deployment's size and maximum (10 + 25% surge).
        assert!(replicas_annotated(&d, &full));
        assert!(!replicas_annotated(&d, &only));
        assert!(!is_scaling_event(
            &d,
            &[&idle, &rs("x", 1, 2, 2, "2025-01-01T00:00:00Z")]
        ));
    }

    #[test]
    fn recreate_and_history_limit() {
        let d = deployment(3, json!({"type": "Recreate"}));
        assert_eq!(max_unavailable(&d), 0);
        assert_eq!(new_rs_replicas(&d, None, &[]), 3);
        let mut d = deployment(3, json!({}));
        d.spec.as_mut().unwrap().revision_history_limit = Some(1);
        let a = rs("a", 1, 0, 0, "2025-01-01T00:00:00Z");
        let b = rs("b", 3, 0, 0, "2025-01-01T00:00:00Z");
        let c = rs("c", 2, 0, 0, "2025-01-01T00:00:00Z");
        let busy = rs("busy", 4, 1, 1, "2025-01-01T00:00:00Z");
        assert_eq!(to_prune(&d, &[&a, &b, &c, &busy]), ["a", "c"]);
    }
}
