//! Pods nominated to nodes (upstream's PodNominator) and the filters that respect them. A pod that
//! preempted others waits on its nominated node for its victims to go; until it is bound, the room
//! they free is its own: other pods of lower or equal priority are filtered as if the nominated
//! pods already ran there (upstream's RunFilterPluginsWithNominatedPods, two passes).

use std::collections::{BTreeSet, HashMap};

use k8s_openapi::api::core::v1::Pod;

use crate::filters::{run_filters, FilterInput, FilterResult};
use crate::pod_info::{PodInfo, PodKey};

/// The pod's `status.nominatedNodeName`, when set.
pub fn status_nominated_node(pod: &Pod) -> Option<&str> {
    pod.status
        .as_ref()
        .and_then(|s| s.nominated_node_name.as_deref())
        .filter(|n| !n.is_empty())
}

#[derive(Debug, Clone)]
struct Nomination {
    node: String,
    info: PodInfo,
    /// Seen in the pod's status (not only this scheduler's own, not yet written, decision).
    from_status: bool,
}

#[derive(Debug, Default)]
pub struct Nominator {
    by_pod: HashMap<PodKey, Nomination>,
    by_node: HashMap<String, BTreeSet<PodKey>>,
}

impl Nominator {
    /// Nominates the pod to `node` (replacing an earlier nomination).
    pub fn nominate(&mut self, info: PodInfo, node: &str) {
        self.insert(info, node, false);
    }

    fn insert(&mut self, info: PodInfo, node: &str, from_status: bool) {
        let key = info.key.clone();
        self.remove(&key);
        self.by_node
            .entry(node.to_string())
            .or_default()
            .insert(key.clone());
        self.by_pod.insert(
            key,
            Nomination {
                node: node.to_string(),
                info,
                from_status,
            },
        );
    }

    pub fn remove(&mut self, key: &str) {
        if let Some(n) = self.by_pod.remove(key) {
            if let Some(keys) = self.by_node.get_mut(&n.node) {
                keys.remove(key);
                if keys.is_empty() {
                    self.by_node.remove(&n.node);
                }
            }
        }
    }

    /// A pod from the watch. A pending pod whose status names a node is nominated there; one whose
    /// status no longer does (cleared by someone) is not. A status without a nomination leaves this
    /// scheduler's own in place, as its write may not have arrived yet (upstream's
    /// UpdateNominatedPod keeps it the same way). Any other pod is nominated nowhere.
    pub fn update_from_pod(&mut self, pod: &Pod, pending: bool) {
        let info = PodInfo::new(pod);
        if !pending {
            self.remove(&info.key);
            return;
        }
        match status_nominated_node(pod) {
            Some(node) => self.insert(info, node, true),
            None => match self.by_pod.get_mut(&info.key) {
                Some(n) if n.from_status => self.remove(&info.key),
                Some(n) => n.info = info,
                None => {}
            },
        }
    }

    /// Where the pod is nominated, if anywhere.
    pub fn node_of(&self, key: &str) -> Option<&str> {
        self.by_pod.get(key).map(|n| n.node.as_str())
    }

    /// The pods nominated to `node`.
    pub fn pods_on<'a>(&'a self, node: &str) -> impl Iterator<Item = &'a PodInfo> + 'a {
        self.by_node
            .get(node)
            .into_iter()
            .flatten()
            .filter_map(|k| self.by_pod.get(k).map(|n| &n.info))
    }

    pub fn is_empty(&self) -> bool {
        self.by_pod.is_empty()
    }
}

/// The filters with the node's nominated pods of equal or higher priority counted as running there
/// (the pod must not take room freed for them), then without them (some filters fail only when a
/// nominated pod is absent); both must pass. Without such nominated pods, one plain pass.
pub fn run_filters_with_nominated(input: &FilterInput, nominator: &Nominator) -> FilterResult {
    let mut ahead = nominator
        .pods_on(&input.node_info.name)
        .filter(|p| p.priority >= input.pod_info.priority && p.key != input.pod_info.key)
        .peekable();
    if ahead.peek().is_none() {
        return run_filters(input);
    }
    let mut with_nominated = input.node_info.clone();
    for p in ahead {
        with_nominated.add_pod(p.clone());
    }
    run_filters(&FilterInput {
        node_info: &with_nominated,
        ..*input
    })?;
    run_filters(input)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node_info::NodeInfo;
    use crate::volume_filters::PodVolumes;
    use serde_json::json;

    fn pod(name: &str, priority: i32, fakecpu: &str, nominated: Option<&str>) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}")},
            "spec": {"priority": priority, "containers": [{"name": "c", "image": "x",
                "resources": {"requests": {"example.com/fakecpu": fakecpu}}}]},
            "status": {"nominatedNodeName": nominated}
        }))
        .unwrap()
    }

    fn node_info() -> NodeInfo {
        NodeInfo::new(
            serde_json::from_value(json!({
                "metadata": {"name": "n1"},
                "status": {"allocatable": {"pods": "110", "example.com/fakecpu": "1000"}}
            }))
            .unwrap(),
        )
    }

    fn check(p: &Pod, info: &NodeInfo, nominator: &Nominator) -> FilterResult {
        let pi = PodInfo::new(p);
        run_filters_with_nominated(
            &FilterInput {
                pod: p,
                pod_info: &pi,
                node_info: info,
                node: info.node.as_ref().unwrap(),
                volumes: &PodVolumes::default(),
            },
            nominator,
        )
    }

    #[test]
    fn room_freed_for_a_nominated_pod_is_not_taken_by_lower_priority_pods() {
        let mut info = node_info();
        info.add_pod(PodInfo::new(&pod("running", 3, "450", None)));
        let mut nominator = Nominator::default();
        nominator.nominate(PodInfo::new(&pod("preemptor", 4, "500", None)), "n1");
        let lower = pod("rs-pod1", 1, "200", None);
        assert_eq!(
            check(&lower, &info, &nominator).unwrap_err().reasons,
            ["Insufficient example.com/fakecpu"]
        );
        // A pod of higher priority than the nominated one does not yield to it.
        assert!(check(&pod("urgent", 5, "200", None), &info, &nominator).is_ok());
        // The nominated pod itself fits on its node.
        assert!(check(&pod("preemptor", 4, "500", None), &info, &nominator).is_ok());
        assert!(check(&lower, &info, &Nominator::default()).is_ok());
    }

    #[test]
    fn nominations_follow_the_watch_and_keep_unwritten_decisions() {
        let mut n = Nominator::default();
        let p = pod("p", 4, "1", None);
        n.nominate(PodInfo::new(&p), "n1");
        // The status write has not arrived: the own decision stays.
        n.update_from_pod(&p, true);
        assert_eq!(n.node_of("ns/p"), Some("n1"));
        // The status names another node: it wins.
        n.update_from_pod(&pod("p", 4, "1", Some("n2")), true);
        assert_eq!(n.node_of("ns/p"), Some("n2"));
        assert_eq!(n.pods_on("n1").count(), 0);
        assert_eq!(n.pods_on("n2").count(), 1);
        // Cleared in the status: no nomination.
        n.update_from_pod(&p, true);
        assert_eq!(n.node_of("ns/p"), None);
        // Bound (no longer pending): gone.
        n.update_from_pod(&pod("p", 4, "1", Some("n2")), true);
        n.update_from_pod(&pod("p", 4, "1", Some("n2")), false);
        assert!(n.is_empty());
    }
}
