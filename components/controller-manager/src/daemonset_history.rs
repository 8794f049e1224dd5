//! DaemonSet revision history, pure (upstream's daemon/update.go constructHistory,
//! dedupCurHistories and cleanupHistory): every template the set has run is a ControllerRevision
//! `<ds>-<hash>` holding the template as a replace patch (the StatefulSet revisions' data), so
//! `kubectl rollout history|undo daemonset` read and apply it. The revision that records the
//! current template is the one pods are labelled for; a template seen before (an undo) gets its
//! old revision back, renumbered newest, with its old hash — so pods already running it count as
//! updated and are not replaced.

use std::collections::BTreeSet;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use serde_json::Value;

use crate::daemonset_plan::{current_hash, owner_reference, HASH_LABEL};
use crate::statefulset_plan::{sort_revisions, template_patch};

/// The data a revision of this set's current template holds.
pub fn revision_data(ds: &DaemonSet) -> Value {
    template_patch(&ds.spec.clone().unwrap_or_default().template)
}

/// The hash a revision (and the pods made from it) carry.
pub fn revision_hash_of(revision: &ControllerRevision) -> Option<&str> {
    revision
        .metadata
        .labels
        .as_ref()?
        .get(HASH_LABEL)
        .map(String::as_str)
}

/// A new revision for the set's template: `<ds>-<hash>` (hash: ComputeHash of the template and
/// the collision count), the template's labels plus the hash, the set's annotations (kubectl's
/// change-cause), owned by the set.
pub fn new_revision(ds: &DaemonSet, number: i64) -> ControllerRevision {
    let hash = current_hash(ds);
    let spec = ds.spec.clone().unwrap_or_default();
    let mut labels = spec
        .template
        .metadata
        .and_then(|m| m.labels)
        .unwrap_or_default();
    labels.insert(HASH_LABEL.into(), hash.clone());
    ControllerRevision {
        metadata: ObjectMeta {
            name: Some(format!(
                "{}-{hash}",
                ds.metadata.name.as_deref().unwrap_or("ds")
            )),
            namespace: ds.metadata.namespace.clone(),
            labels: Some(labels),
            annotations: ds.metadata.annotations.clone(),
            owner_references: Some(vec![owner_reference(ds)]),
            ..Default::default()
        },
        data: Some(RawExtension(revision_data(ds))),
        revision: number,
    }
}

fn data_of(r: &ControllerRevision) -> Option<&Value> {
    r.data.as_ref().map(|d| &d.0)
}

/// What constructHistory does this sync.
#[derive(Debug, Clone, PartialEq)]
pub enum Current {
    /// The newest revision records the template already.
    Latest(Arc<ControllerRevision>),
    /// An older revision records it (a roll back): number it after the newest.
    Renumber(Arc<ControllerRevision>, i64),
    /// No revision records it: create this one.
    Create(Box<ControllerRevision>),
}

#[derive(Debug, Clone, PartialEq)]
pub struct HistoryPlan {
    pub current: Current,
    /// Other revisions that record the same template (dedupCurHistories): deleted once their
    /// pods carry the kept revision's hash.
    pub duplicates: Vec<Arc<ControllerRevision>>,
}

/// `revisions`: the set's own revisions, any order.
pub fn plan_history(ds: &DaemonSet, revisions: &[Arc<ControllerRevision>]) -> HistoryPlan {
    let mut sorted = revisions.to_vec();
    sort_revisions(&mut sorted);
    let data = revision_data(ds);
    let max = sorted.last().map(|r| r.revision).unwrap_or(0);
    let (mut matching, others): (Vec<_>, Vec<_>) =
        sorted.into_iter().partition(|r| data_of(r) == Some(&data));
    let Some(keep) = matching.pop() else {
        return HistoryPlan {
            current: Current::Create(Box::new(new_revision(ds, max + 1))),
            duplicates: Vec::new(),
        };
    };
    // The kept revision is the highest-numbered match; the others are duplicates.
    let max_other = others.iter().map(|r| r.revision).max().unwrap_or(0);
    let current = if keep.revision < max_other {
        Current::Renumber(keep, max + 1)
    } else {
        Current::Latest(keep)
    };
    HistoryPlan {
        current,
        duplicates: matching,
    }
}

/// cleanupHistory: beyond revisionHistoryLimit (default 10) old revisions, delete the oldest
/// that no pod still runs. Upstream counts every old revision against the limit, live or not.
pub fn revisions_to_prune(
    ds: &DaemonSet,
    revisions: &[Arc<ControllerRevision>],
    current: &str,
    pods: &[Arc<Pod>],
) -> Vec<String> {
    let live: BTreeSet<&str> = pods
        .iter()
        .filter_map(|p| p.metadata.labels.as_ref()?.get(HASH_LABEL))
        .map(String::as_str)
        .collect();
    let mut old: Vec<Arc<ControllerRevision>> = revisions
        .iter()
        .filter(|r| r.metadata.name.as_deref() != Some(current))
        .cloned()
        .collect();
    sort_revisions(&mut old);
    let limit = ds
        .spec
        .as_ref()
        .and_then(|s| s.revision_history_limit)
        .unwrap_or(10)
        .max(0) as usize;
    let mut to_kill = old.len().saturating_sub(limit);
    let mut out = Vec::new();
    for r in old {
        if to_kill == 0 {
            break;
        }
        if revision_hash_of(&r).is_some_and(|h| live.contains(h)) {
            continue;
        }
        out.extend(r.metadata.name.clone());
        to_kill -= 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ds(image: &str) -> DaemonSet {
        serde_json::from_value(json!({
            "metadata": {"name": "agent", "namespace": "ns", "uid": "ds-uid",
                "annotations": {"kubernetes.io/change-cause": "set image"}},
            "spec": {"selector": {"matchLabels": {"app": "agent"}}, "revisionHistoryLimit": 1,
                "template": {"metadata": {"labels": {"app": "agent"}},
                    "spec": {"containers": [{"name": "c", "image": image}]}}}
        }))
        .unwrap()
    }

    fn stored(ds: &DaemonSet, number: i64) -> Arc<ControllerRevision> {
        let mut r = new_revision(ds, number);
        // What the apiserver hands back: the data as plain JSON.
        r.data = Some(RawExtension(
            serde_json::from_str(&serde_json::to_string(&r.data.unwrap().0).unwrap()).unwrap(),
        ));
        Arc::new(r)
    }

    #[test]
    fn a_revision_records_the_template_as_a_replace_patch() {
        let d = ds("agent:1");
        let r = new_revision(&d, 1);
        let hash = current_hash(&d);
        assert_eq!(r.metadata.name.as_deref(), Some(&*format!("agent-{hash}")));
        assert_eq!(revision_hash_of(&r), Some(hash.as_str()));
        assert_eq!(r.metadata.labels.as_ref().unwrap()["app"], "agent");
        let data = &r.data.as_ref().unwrap().0;
        assert_eq!(data["spec"]["template"]["$patch"], "replace");
        assert_eq!(
            data["spec"]["template"]["spec"]["containers"][0]["image"],
            "agent:1"
        );
        assert_eq!(
            r.metadata.annotations.as_ref().unwrap()["kubernetes.io/change-cause"],
            "set image"
        );
        assert_eq!(
            r.metadata.owner_references.as_ref().unwrap()[0].kind,
            "DaemonSet"
        );
    }

    #[test]
    fn history_creates_keeps_and_renumbers_on_undo() {
        let v1 = ds("agent:1");
        let v2 = ds("agent:2");
        // First sync: nothing recorded yet.
        match plan_history(&v1, &[]).current {
            Current::Create(r) => assert_eq!(r.revision, 1),
            other => panic!("{other:?}"),
        }
        let r1 = stored(&v1, 1);
        assert_eq!(
            plan_history(&v1, std::slice::from_ref(&r1)).current,
            Current::Latest(r1.clone())
        );
        // An update: a second revision.
        match plan_history(&v2, std::slice::from_ref(&r1)).current {
            Current::Create(r) => assert_eq!(r.revision, 2),
            other => panic!("{other:?}"),
        }
        // The undo: revision 1 comes back as 3, same name and hash.
        let r2 = stored(&v2, 2);
        let plan = plan_history(&v1, &[r2.clone(), r1.clone()]);
        assert_eq!(plan.current, Current::Renumber(r1.clone(), 3));
        assert!(plan.duplicates.is_empty());
        // Two revisions of one template: the newest is kept.
        let mut dup = (*stored(&v1, 4)).clone();
        dup.metadata.name = Some("agent-dup".into());
        let dup = Arc::new(dup);
        let plan = plan_history(&v1, &[r1.clone(), r2.clone(), dup.clone()]);
        assert_eq!(plan.current, Current::Latest(dup));
        assert_eq!(plan.duplicates, vec![r1]);
    }

    #[test]
    fn pruning_keeps_the_limit_and_live_revisions() {
        let revs: Vec<_> = (1..=4)
            .map(|n| stored(&ds(&format!("agent:{n}")), n))
            .collect();
        let current = revs[3].metadata.name.clone().unwrap();
        let live_hash = revision_hash_of(&revs[0]).unwrap().to_string();
        let pod: Arc<Pod> = Arc::new(
            serde_json::from_value(json!({"metadata": {"labels": {HASH_LABEL: live_hash}}}))
                .unwrap(),
        );
        // limit 1 of 3 old: two go, the oldest is skipped because a pod runs it.
        let gone = revisions_to_prune(&ds("agent:4"), &revs, &current, &[pod]);
        let names: Vec<String> = revs[1..3]
            .iter()
            .map(|r| r.metadata.name.clone().unwrap())
            .collect();
        assert_eq!(gone, names);
        assert!(revisions_to_prune(&ds("agent:4"), &revs[2..], &current, &[]).is_empty());
    }
}
