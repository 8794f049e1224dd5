//! StatefulSet decisions, as pure functions (upstream's stateful_set_utils.go and the body of
//! stateful_set_control.go's updateStatefulSet): stable identities `<set>-<ordinal>`, the
//! ControllerRevision of a template (its data is the template as a replace patch, like upstream's
//! getPatch, so `kubectl rollout undo` can apply it), and one sync's steps — create, delete,
//! fix identity — in OrderedReady or Parallel order, with RollingUpdate honouring the partition.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::apps::v1::{ControllerRevision, StatefulSet, StatefulSetStatus};
use k8s_openapi::api::core::v1::{
    PersistentVolumeClaim, PersistentVolumeClaimVolumeSource, Pod, PodTemplateSpec, Volume,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;
use serde_json::{json, Value};

use crate::pods::{is_available, is_ready};

pub const POD_NAME_LABEL: &str = "statefulset.kubernetes.io/pod-name";
pub const POD_INDEX_LABEL: &str = "apps.kubernetes.io/pod-index";
/// On pods: the name of their ControllerRevision; on a ControllerRevision: its hash.
pub const REVISION_LABEL: &str = "controller-revision-hash";

/// Upstream's rand.SafeEncodeString alphabet (no vowels, no look-alike digits).
const SAFE: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

pub fn replicas(set: &StatefulSet) -> i32 {
    set.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
}

pub fn start_ordinal(set: &StatefulSet) -> i32 {
    set.spec
        .as_ref()
        .and_then(|s| s.ordinals.as_ref())
        .and_then(|o| o.start)
        .unwrap_or(0)
}

fn min_ready_seconds(set: &StatefulSet) -> i32 {
    set.spec
        .as_ref()
        .and_then(|s| s.min_ready_seconds)
        .unwrap_or(0)
}

fn set_name(set: &StatefulSet) -> &str {
    set.metadata.name.as_deref().unwrap_or_default()
}

/// OrderedReady (the default) waits for each pod; Parallel ("burst") does not.
pub fn is_parallel(set: &StatefulSet) -> bool {
    set.spec
        .as_ref()
        .and_then(|s| s.pod_management_policy.as_deref())
        == Some("Parallel")
}

pub fn is_on_delete(set: &StatefulSet) -> bool {
    set.spec
        .as_ref()
        .and_then(|s| s.update_strategy.as_ref())
        .and_then(|u| u.type_.as_deref())
        == Some("OnDelete")
}

pub fn partition(set: &StatefulSet) -> i32 {
    set.spec
        .as_ref()
        .and_then(|s| s.update_strategy.as_ref())
        .and_then(|u| u.rolling_update.as_ref())
        .and_then(|r| r.partition)
        .unwrap_or(0)
}

/// getStatefulSetMaxUnavailable: rollingUpdate.maxUnavailable (default 1) against the desired
/// replicas, a percentage rounded down, and never below 1 (a small percentage would otherwise
/// stall the update). The API rejects anything else, so a malformed value counts as the default.
pub fn max_unavailable(set: &StatefulSet) -> i32 {
    let value = set
        .spec
        .as_ref()
        .and_then(|s| s.update_strategy.as_ref())
        .and_then(|u| u.rolling_update.as_ref())
        .and_then(|r| r.max_unavailable.as_ref());
    let n = match value {
        None => 1,
        Some(IntOrString::Int(n)) => *n,
        Some(IntOrString::String(s)) => s
            .strip_suffix('%')
            .and_then(|p| p.parse::<i64>().ok())
            .map(|p| (p * i64::from(replicas(set).max(0)) / 100) as i32)
            .unwrap_or(1),
    };
    n.max(1)
}

/// `<parent>-<ordinal>` split at the last dash, as upstream's statefulPodRegex.
pub fn parent_and_ordinal(name: &str) -> Option<(&str, i32)> {
    let (parent, ordinal) = name.rsplit_once('-')?;
    if ordinal.is_empty() || !ordinal.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((parent, ordinal.parse().ok()?))
}

pub fn ordinal_of(pod: &Pod) -> Option<i32> {
    parent_and_ordinal(pod.metadata.name.as_deref().unwrap_or_default()).map(|(_, o)| o)
}

/// Only pods named after the set belong to it (upstream's isMemberOf filter of the claim).
pub fn is_member(set: &StatefulSet, pod: &Pod) -> bool {
    parent_and_ordinal(pod.metadata.name.as_deref().unwrap_or_default())
        .is_some_and(|(parent, _)| parent == set_name(set))
}

pub fn pod_name(set: &StatefulSet, ordinal: i32) -> String {
    format!("{}-{ordinal}", set_name(set))
}

pub fn pod_revision(pod: &Pod) -> &str {
    pod.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(REVISION_LABEL))
        .map(String::as_str)
        .unwrap_or_default()
}

fn phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or_default()
}

/// A pod the API holds (it has a phase); one this sync only intends to create has none.
fn is_created(pod: &Pod) -> bool {
    !phase(pod).is_empty()
}

fn is_terminating(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
}

fn running_and_ready(pod: &Pod) -> bool {
    phase(pod) == "Running" && is_ready(pod)
}

fn running_and_available(pod: &Pod, min_ready: i32, now: Timestamp) -> bool {
    phase(pod) == "Running" && is_available(pod, min_ready, now)
}

/// isUnavailable: not running and available for minReadySeconds, or on its way out.
fn is_unavailable(pod: &Pod, min_ready: i32, now: Timestamp) -> bool {
    !running_and_available(pod, min_ready, now) || is_terminating(pod)
}

fn is_healthy(pod: &Pod) -> bool {
    running_and_ready(pod) && !is_terminating(pod)
}

pub fn owner_reference(set: &StatefulSet) -> OwnerReference {
    OwnerReference {
        api_version: "apps/v1".into(),
        kind: "StatefulSet".into(),
        name: set_name(set).to_string(),
        uid: set.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// Objects with sorted keys, so the data (and its hash) is the same for the same template — the
/// bytes Go's json.Marshal of a map would give.
fn canonical(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            let sorted: BTreeMap<&String, Value> =
                m.iter().map(|(k, v)| (k, canonical(v))).collect();
            let mut out = serde_json::Map::new();
            for (k, v) in sorted {
                out.insert(k.clone(), v);
            }
            Value::Object(out)
        }
        Value::Array(a) => Value::Array(a.iter().map(canonical).collect()),
        other => other.clone(),
    }
}

/// Upstream's getPatch: `{"spec":{"template":{...,"$patch":"replace"}}}`. Go encodes an empty
/// creationTimestamp as null, and kubectl compares its own encoding with this one for undo.
pub fn revision_data(set: &StatefulSet) -> Value {
    let template = set
        .spec
        .as_ref()
        .map(|s| s.template.clone())
        .unwrap_or_default();
    template_patch(&template)
}

/// The replace patch of a pod template that StatefulSet and DaemonSet revisions both record
/// (their getPatch functions produce the same shape).
pub fn template_patch(template: &PodTemplateSpec) -> Value {
    let mut t = serde_json::to_value(template).unwrap_or_else(|_| json!({}));
    if t["metadata"].get("creationTimestamp").is_none() {
        t["metadata"]["creationTimestamp"] = Value::Null;
    }
    t["$patch"] = json!("replace");
    canonical(&json!({"spec": {"template": t}}))
}

/// The pod template a revision records (upstream's ApplyRevision of the replace patch).
pub fn template_of(revision: &ControllerRevision) -> Option<PodTemplateSpec> {
    let mut t = revision.data.as_ref()?.0.pointer("/spec/template")?.clone();
    t.as_object_mut()?.remove("$patch");
    serde_json::from_value(t).ok()
}

fn fnv1_32(bytes: &[u8]) -> u32 {
    bytes.iter().fold(2_166_136_261u32, |h, b| {
        h.wrapping_mul(16_777_619) ^ u32::from(*b)
    })
}

/// HashControllerRevision: FNV-1 over the data and the decimal collision count, safe-encoded.
pub fn revision_hash(data: &Value, collision_count: i32) -> String {
    let mut bytes = serde_json::to_vec(data).unwrap_or_default();
    bytes.extend_from_slice(collision_count.to_string().as_bytes());
    fnv1_32(&bytes)
        .to_string()
        .bytes()
        .map(|b| SAFE[usize::from(b) % SAFE.len()] as char)
        .collect()
}

/// ControllerRevisionName: the parent's name (cut to 223 characters) and the hash.
pub fn revision_name(parent: &str, hash: &str) -> String {
    let prefix: String = parent.chars().take(223).collect();
    format!("{prefix}-{hash}")
}

/// newRevision: labelled with the template's labels and its hash, annotated like the set (so
/// kubectl's change-cause shows in `rollout history`), owned by the set.
pub fn new_revision(set: &StatefulSet, number: i64, collision_count: i32) -> ControllerRevision {
    let data = revision_data(set);
    let hash = revision_hash(&data, collision_count);
    let mut labels = set
        .spec
        .as_ref()
        .and_then(|s| s.template.metadata.as_ref())
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    labels.insert(REVISION_LABEL.into(), hash.clone());
    ControllerRevision {
        metadata: ObjectMeta {
            name: Some(revision_name(set_name(set), &hash)),
            namespace: set.metadata.namespace.clone(),
            labels: Some(labels),
            annotations: Some(set.metadata.annotations.clone().unwrap_or_default()),
            owner_references: Some(vec![owner_reference(set)]),
            ..Default::default()
        },
        data: Some(RawExtension(data)),
        revision: number,
    }
}

/// SortControllerRevisions: by revision number, then creation time, then name.
pub fn sort_revisions(revisions: &mut [Arc<ControllerRevision>]) {
    revisions.sort_by(|a, b| {
        a.revision
            .cmp(&b.revision)
            .then_with(|| {
                let t =
                    |r: &ControllerRevision| r.metadata.creation_timestamp.as_ref().map(|t| t.0);
                t(a).cmp(&t(b))
            })
            .then_with(|| a.metadata.name.cmp(&b.metadata.name))
    });
}

pub fn next_revision(sorted: &[Arc<ControllerRevision>]) -> i64 {
    sorted.last().map(|r| r.revision + 1).unwrap_or(1)
}

fn same_data(a: &ControllerRevision, b: &ControllerRevision) -> bool {
    a.data.as_ref().map(|d| &d.0) == b.data.as_ref().map(|d| &d.0)
}

/// What getStatefulSetRevisions does to find the update revision.
#[derive(Debug)]
pub enum UpdateRevision {
    /// The newest revision already records the template.
    Latest(Arc<ControllerRevision>),
    /// An older revision records it (a roll back): give it the next number.
    Renumber(Arc<ControllerRevision>, i64),
    /// No revision records it: create this one.
    Create(Box<ControllerRevision>),
}

pub fn resolve_update_revision(
    set: &StatefulSet,
    sorted: &[Arc<ControllerRevision>],
    collision_count: i32,
) -> UpdateRevision {
    let candidate = new_revision(set, next_revision(sorted), collision_count);
    let equal = sorted.iter().rev().find(|r| same_data(r, &candidate));
    match (equal, sorted.last()) {
        (Some(e), Some(last)) if Arc::ptr_eq(e, last) => UpdateRevision::Latest(e.clone()),
        (Some(e), _) => UpdateRevision::Renumber(e.clone(), candidate.revision),
        (None, _) => UpdateRevision::Create(Box::new(candidate)),
    }
}

/// The claim templates' PersistentVolumeClaims for one ordinal: `<claim>-<set>-<ordinal>`,
/// labelled with the template's labels and the set's matchLabels.
pub fn claims_for(set: &StatefulSet, ordinal: i32) -> Vec<PersistentVolumeClaim> {
    let spec = set.spec.as_ref();
    let match_labels = spec
        .and_then(|s| s.selector.match_labels.clone())
        .unwrap_or_default();
    spec.and_then(|s| s.volume_claim_templates.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|mut claim| {
            let template = claim.metadata.name.clone().unwrap_or_default();
            claim.metadata.name = Some(format!("{template}-{}-{ordinal}", set_name(set)));
            claim.metadata.namespace = set.metadata.namespace.clone();
            let labels = claim.metadata.labels.get_or_insert_with(Default::default);
            labels.extend(match_labels.clone());
            claim.status = None;
            claim
        })
        .collect()
}

/// updateStorage: every claim template becomes a volume named like the template, replacing a
/// template volume of that name.
fn apply_storage(set: &StatefulSet, ordinal: i32, pod: &mut Pod) {
    let templates = set
        .spec
        .as_ref()
        .and_then(|s| s.volume_claim_templates.clone())
        .unwrap_or_default();
    if templates.is_empty() {
        return;
    }
    let Some(spec) = pod.spec.as_mut() else {
        return;
    };
    let claims = claims_for(set, ordinal);
    let mut volumes: Vec<Volume> = Vec::new();
    for (template, claim) in templates.iter().zip(&claims) {
        volumes.push(Volume {
            name: template.metadata.name.clone().unwrap_or_default(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: claim.metadata.name.clone().unwrap_or_default(),
                read_only: None,
            }),
            ..Default::default()
        });
    }
    let names: BTreeSet<String> = volumes.iter().map(|v| v.name.clone()).collect();
    for v in spec.volumes.take().unwrap_or_default() {
        if !names.contains(&v.name) {
            volumes.push(v);
        }
    }
    spec.volumes = Some(volumes);
}

/// newStatefulSetPod: the template's pod with its stable identity, owned by the set, labelled
/// with its revision.
pub fn new_pod(set: &StatefulSet, template: &PodTemplateSpec, revision: &str, ordinal: i32) -> Pod {
    let meta = template.metadata.clone().unwrap_or_default();
    let name = pod_name(set, ordinal);
    let mut labels = meta.labels.unwrap_or_default();
    labels.insert(POD_NAME_LABEL.into(), name.clone());
    labels.insert(POD_INDEX_LABEL.into(), ordinal.to_string());
    labels.insert(REVISION_LABEL.into(), revision.to_string());
    let mut spec = template.spec.clone().unwrap_or_default();
    // Set only at creation (they are immutable): the pod is `<name>.<serviceName>` in DNS.
    spec.hostname = Some(name.clone());
    spec.subdomain = set
        .spec
        .as_ref()
        .and_then(|s| s.service_name.clone())
        .filter(|s| !s.is_empty());
    let mut pod = Pod {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: set.metadata.namespace.clone(),
            labels: Some(labels),
            annotations: meta.annotations,
            finalizers: meta.finalizers,
            owner_references: Some(vec![owner_reference(set)]),
            ..Default::default()
        },
        spec: Some(spec),
        status: None,
    };
    apply_storage(set, ordinal, &mut pod);
    pod
}

/// identityMatches: named after the set and ordinal, in its namespace, with its pod-name label.
pub fn identity_matches(set: &StatefulSet, pod: &Pod) -> bool {
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    let labels = pod.metadata.labels.clone().unwrap_or_default();
    is_member(set, pod)
        && pod.metadata.namespace == set.metadata.namespace
        && labels.get(POD_NAME_LABEL).map(String::as_str) == Some(name)
        && ordinal_of(pod).map(|o| o.to_string()).as_ref() == labels.get(POD_INDEX_LABEL)
}

/// One thing a sync does, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    Create(Box<Pod>),
    Delete {
        pod: String,
        why: DeleteWhy,
    },
    /// Restore the identity labels of a pod someone changed.
    Relabel {
        pod: String,
        labels: BTreeMap<String, String>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeleteWhy {
    /// Failed: recreated (upstream's RecreatingFailedPod).
    Failed,
    /// Succeeded: recreated (RecreatingTerminatedPod).
    Succeeded,
    ScaleDown,
    /// Not at the update revision (RollingUpdate).
    Update,
}

/// The revisions a sync works between.
#[derive(Debug, Clone)]
pub struct Revisions {
    pub current: String,
    pub current_template: PodTemplateSpec,
    pub update: String,
    pub update_template: PodTemplateSpec,
}

#[derive(Debug, Default)]
pub struct Plan {
    pub steps: Vec<Step>,
    pub status: StatefulSetStatus,
}

/// newVersionedStatefulSetPod: below the partition, new pods get the current revision.
fn versioned_pod(set: &StatefulSet, rev: &Revisions, ordinal: i32) -> Pod {
    let start = start_ordinal(set);
    let current_status = set
        .status
        .as_ref()
        .and_then(|s| s.current_replicas)
        .unwrap_or(0);
    let rolling = set.spec.as_ref().and_then(|s| s.update_strategy.as_ref());
    let below = match rolling {
        Some(u) if u.type_.as_deref() == Some("RollingUpdate") => match &u.rolling_update {
            Some(r) => ordinal < start + r.partition.unwrap_or(0),
            None => ordinal < start + current_status,
        },
        _ => false,
    };
    if below {
        new_pod(set, &rev.current_template, &rev.current, ordinal)
    } else {
        new_pod(set, &rev.update_template, &rev.update, ordinal)
    }
}

/// computeReplicaStatus over the sync's view of the pods.
fn count(
    status: &mut StatefulSetStatus,
    pods: &[Pod],
    rev: &Revisions,
    min_ready: i32,
    now: Timestamp,
) {
    let (mut replicas, mut ready, mut available, mut current, mut updated) = (0, 0, 0, 0, 0);
    for pod in pods {
        if is_created(pod) {
            replicas += 1;
        }
        if running_and_ready(pod) {
            ready += 1;
            if running_and_available(pod, min_ready, now) {
                available += 1;
            }
        }
        if is_created(pod) && !is_terminating(pod) {
            if pod_revision(pod) == rev.current {
                current += 1;
            }
            if pod_revision(pod) == rev.update {
                updated += 1;
            }
        }
    }
    status.replicas = replicas;
    status.ready_replicas = Some(ready);
    status.available_replicas = Some(available);
    status.current_replicas = Some(current);
    status.updated_replicas = Some(updated);
}

/// One sync of updateStatefulSet over the set's claimed pods.
pub fn plan(
    set: &StatefulSet,
    pods: &[Arc<Pod>],
    rev: &Revisions,
    collision_count: i32,
    now: Timestamp,
) -> Plan {
    let start = start_ordinal(set);
    let want = replicas(set).max(0);
    let min_ready = min_ready_seconds(set);
    let monotonic = !is_parallel(set);
    let mut slots: Vec<Option<Pod>> = vec![None; want as usize];
    let mut condemned: Vec<Pod> = Vec::new();
    for pod in pods {
        let Some(ord) = ordinal_of(pod) else { continue };
        if ord >= start && ord < start + want {
            slots[(ord - start) as usize] = Some((**pod).clone());
        } else {
            condemned.push((**pod).clone());
        }
    }
    let mut replicas: Vec<Pod> = slots
        .into_iter()
        .enumerate()
        .map(|(i, p)| p.unwrap_or_else(|| versioned_pod(set, rev, start + i as i32)))
        .collect();
    condemned.sort_by_key(|p| std::cmp::Reverse(ordinal_of(p)));
    // The first unhealthy pod, by ascending ordinal over replicas then condemned: scale-down may
    // proceed past it (it is the one being removed), but not past any other.
    let first_unhealthy = replicas
        .iter()
        .chain(condemned.iter().rev())
        .find(|p| !is_healthy(p))
        .and_then(|p| p.metadata.name.clone());

    let mut plan = Plan {
        steps: Vec::new(),
        status: StatefulSetStatus {
            observed_generation: set.metadata.generation,
            current_revision: Some(rev.current.clone()),
            update_revision: Some(rev.update.clone()),
            collision_count: Some(collision_count),
            ..Default::default()
        },
    };
    let all = |r: &[Pod], c: &[Pod]| r.iter().chain(c).cloned().collect::<Vec<_>>();
    if set.metadata.deletion_timestamp.is_some() {
        count(
            &mut plan.status,
            &all(&replicas, &condemned),
            rev,
            min_ready,
            now,
        );
        return plan;
    }

    let mut blocked = false;
    for (i, slot) in replicas.iter_mut().enumerate() {
        let ordinal = start + i as i32;
        let name = pod_name(set, ordinal);
        let p = &*slot;
        if matches!(phase(p), "Failed" | "Succeeded") && !is_terminating(p) {
            let why = if phase(p) == "Failed" {
                DeleteWhy::Failed
            } else {
                DeleteWhy::Succeeded
            };
            plan.steps.push(Step::Delete {
                pod: name.clone(),
                why,
            });
            *slot = versioned_pod(set, rev, ordinal);
        }
        let p = &*slot;
        if !is_created(p) {
            plan.steps.push(Step::Create(Box::new(p.clone())));
            if monotonic {
                blocked = true;
                break;
            }
            continue;
        }
        if monotonic
            && (is_terminating(p)
                || !running_and_ready(p)
                || !running_and_available(p, min_ready, now))
        {
            blocked = true;
            break;
        }
        if !identity_matches(set, p) {
            let mut labels = p.metadata.labels.clone().unwrap_or_default();
            labels.insert(POD_NAME_LABEL.into(), name.clone());
            labels.insert(POD_INDEX_LABEL.into(), ordinal.to_string());
            plan.steps.push(Step::Relabel { pod: name, labels });
        }
    }
    if !blocked {
        for p in &condemned {
            if is_terminating(p) {
                if monotonic {
                    blocked = true;
                    break;
                }
                continue;
            }
            let first = first_unhealthy.as_deref() == p.metadata.name.as_deref();
            if monotonic && !first && !running_and_available(p, min_ready, now) {
                blocked = true;
                break;
            }
            plan.steps.push(Step::Delete {
                pod: p.metadata.name.clone().unwrap_or_default(),
                why: DeleteWhy::ScaleDown,
            });
            if monotonic {
                blocked = true;
                break;
            }
        }
    }
    count(
        &mut plan.status,
        &all(&replicas, &condemned),
        rev,
        min_ready,
        now,
    );
    if blocked || is_on_delete(set) {
        return plan;
    }
    // RollingUpdate as upstream's updateStatefulSetAfterInvariantEstablished, the path taken with
    // the MaxUnavailableStatefulSet gate on: kiln honours rollingUpdate.maxUnavailable (its default
    // of 1 is the one-at-a-time update of the gate-off path). Every replica that is unavailable
    // (terminating, not yet created or not available) uses up the budget; what is left goes to
    // the highest indexes at or above the partition that are not at the update revision, deleted
    // now and recreated at it by later syncs.
    let unavailable = replicas
        .iter()
        .filter(|p| is_unavailable(p, min_ready, now))
        .count() as i32;
    let mut budget = max_unavailable(set) - unavailable;
    let update_min = partition(set).max(0) as usize;
    for p in replicas.iter().skip(update_min).rev() {
        if budget <= 0 {
            break;
        }
        if pod_revision(p) != rev.update && !is_terminating(p) {
            plan.steps.push(Step::Delete {
                pod: p.metadata.name.clone().unwrap_or_default(),
                why: DeleteWhy::Update,
            });
            let current = plan.status.current_replicas.unwrap_or(0);
            plan.status.current_replicas = Some(current - 1);
            budget -= 1;
        }
    }
    plan
}

/// completeRollingUpdate: once every pod runs the update revision and is ready, it becomes the
/// current revision.
pub fn complete_rolling_update(set: &StatefulSet, status: &mut StatefulSetStatus) {
    let rolling = !is_on_delete(set);
    if rolling
        && status.updated_replicas == Some(status.replicas)
        && status.ready_replicas == Some(status.replicas)
    {
        status.current_replicas = status.updated_replicas;
        status.current_revision = status.update_revision.clone();
    }
}

/// truncateHistory: revisions no pod uses, beyond revisionHistoryLimit, oldest first.
pub fn revisions_to_prune(
    set: &StatefulSet,
    sorted: &[Arc<ControllerRevision>],
    pods: &[Arc<Pod>],
    current: &str,
    update: &str,
) -> Vec<String> {
    let mut live: BTreeSet<&str> = [current, update].into_iter().collect();
    live.extend(pods.iter().map(|p| pod_revision(p)));
    let history: Vec<String> = sorted
        .iter()
        .filter_map(|r| r.metadata.name.clone())
        .filter(|n| !live.contains(n.as_str()))
        .collect();
    let limit = set
        .spec
        .as_ref()
        .and_then(|s| s.revision_history_limit)
        .unwrap_or(10)
        .max(0) as usize;
    let excess = history.len().saturating_sub(limit);
    history.into_iter().take(excess).collect()
}

#[cfg(test)]
#[path = "statefulset_plan_tests.rs"]
mod tests;
