//! The scheduler's view of the cluster: one `NodeInfo` per node with the pods assigned to it (bound
//! ones from the watch, plus pods this scheduler assumed but whose binding the watch has not shown
//! yet), so the next decision already counts resources and ports of the previous ones.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;

use crate::node_info::NodeInfo;
use crate::nominator::Nominator;
use crate::pod_info::{pod_key, PodInfo, PodKey};
use crate::volume_cache::{ClaimKey, VolumeCache};

/// Succeeded and Failed pods hold no resources (upstream's informer leaves them out).
pub fn is_terminal(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded") | Some("Failed")
    )
}

pub fn assigned_node(pod: &Pod) -> Option<&str> {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .filter(|n| !n.is_empty())
}

/// Image names as upstream compares them: a reference without a tag or digest means `:latest`.
pub fn normalized_image(name: &str) -> String {
    let last = name.rsplit('/').next().unwrap_or(name);
    if last.contains(':') || last.contains('@') {
        name.to_string()
    } else {
        format!("{name}:latest")
    }
}

#[derive(Debug, Default)]
pub struct Cache {
    /// By name, so [`Cache::nodes`] is in name order without sorting per pod.
    nodes: BTreeMap<String, NodeInfo>,
    /// Which node each placed pod counts against, and whether only this scheduler knows it.
    placed: HashMap<PodKey, (String, bool)>,
    /// image → (size, number of nodes that have it), rebuilt when nodes change.
    images: HashMap<String, (i64, usize)>,
    /// How many placed pods use each claim.
    claim_users: HashMap<ClaimKey, usize>,
    volumes: VolumeCache,
    /// Pending pods nominated to nodes by preemption.
    nominator: Nominator,
    /// PodDisruptionBudgets by "namespace/name", which preemption tries not to violate.
    pdbs: BTreeMap<String, Arc<PodDisruptionBudget>>,
}

impl Cache {
    pub fn upsert_node(&mut self, node: Node) {
        let name = node.metadata.name.clone().unwrap_or_default();
        match self.nodes.get_mut(&name) {
            Some(info) => info.set_node(node),
            None => {
                self.nodes.insert(name, NodeInfo::new(node));
            }
        }
        self.rebuild_images();
    }

    pub fn remove_node(&mut self, name: &str) {
        if let Some(info) = self.nodes.get_mut(name) {
            info.node = None;
            if info.pods.is_empty() {
                self.nodes.remove(name);
            }
        }
        self.rebuild_images();
    }

    fn rebuild_images(&mut self) {
        self.images.clear();
        for node in self.nodes.values().filter_map(|n| n.node.as_ref()) {
            let images = node.status.as_ref().and_then(|s| s.images.as_ref());
            for image in images.into_iter().flatten() {
                for name in image.names.iter().flatten() {
                    let entry = self.images.entry(normalized_image(name)).or_insert((0, 0));
                    entry.0 = image.size_bytes.unwrap_or(0);
                    entry.1 += 1;
                }
            }
        }
    }

    /// (size in bytes, number of nodes holding it).
    pub fn image_state(&self, image: &str) -> Option<(i64, usize)> {
        self.images.get(&normalized_image(image)).copied()
    }

    /// Applies a pod from the watch: assigned, non-terminal pods count against their node.
    pub fn upsert_pod(&mut self, pod: &Pod) {
        let key = pod_key(pod);
        match assigned_node(pod) {
            Some(node) if !is_terminal(pod) => {
                self.place(PodInfo::new(pod), node, false);
            }
            // Still unbound in the watch although assumed: the binding is in flight, keep it.
            None if self.is_assumed(&key) => {}
            _ => self.remove_pod(&key),
        }
    }

    fn place(&mut self, info: PodInfo, node: &str, assumed: bool) {
        let key = info.key.clone();
        self.remove_pod(&key);
        for claim in &info.claims {
            *self.claim_users.entry(claim.clone()).or_insert(0) += 1;
        }
        self.nodes
            .entry(node.to_string())
            .or_insert_with(|| NodeInfo {
                name: node.to_string(),
                ..Default::default()
            })
            .add_pod(info);
        self.placed.insert(key, (node.to_string(), assumed));
    }

    pub fn remove_pod(&mut self, key: &str) {
        if let Some((node, _)) = self.placed.remove(key) {
            if let Some(info) = self.nodes.get_mut(&node) {
                for claim in info
                    .pods
                    .get(key)
                    .map(|p| p.claims.clone())
                    .unwrap_or_default()
                {
                    if let Some(n) = self.claim_users.get_mut(&claim) {
                        *n -= 1;
                        if *n == 0 {
                            self.claim_users.remove(&claim);
                        }
                    }
                }
                info.remove_pod(key);
                if info.node.is_none() && info.pods.is_empty() {
                    self.nodes.remove(&node);
                }
            }
        }
    }

    /// Counts the pod against the node before the binding is written, so the next cycles see it;
    /// a placed pod is nominated nowhere any more.
    pub fn assume(&mut self, pod: &Pod, node: &str) {
        let info = PodInfo::new(pod);
        self.nominator.remove(&info.key);
        self.place(info, node, true);
    }

    /// The binding failed: the pod no longer counts anywhere.
    pub fn forget_assumed(&mut self, key: &str) {
        if self.is_assumed(key) {
            self.remove_pod(key);
        }
    }

    pub fn is_placed(&self, key: &str) -> bool {
        self.placed.contains_key(key)
    }

    pub fn placed_keys(&self) -> Vec<PodKey> {
        self.placed.keys().cloned().collect()
    }

    pub fn is_assumed(&self, key: &str) -> bool {
        self.placed.get(key).is_some_and(|(_, assumed)| *assumed)
    }

    /// Nodes known from the watch (the candidates), in name order so results are reproducible.
    pub fn nodes(&self) -> Vec<&NodeInfo> {
        self.nodes.values().filter(|n| n.node.is_some()).collect()
    }

    pub fn node(&self, name: &str) -> Option<&NodeInfo> {
        self.nodes.get(name)
    }

    /// Does a placed (bound or assumed) pod use this "namespace/name" claim?
    pub fn claim_in_use(&self, claim: &str) -> bool {
        self.claim_users.contains_key(claim)
    }

    pub fn volumes(&self) -> &VolumeCache {
        &self.volumes
    }

    pub fn volumes_mut(&mut self) -> &mut VolumeCache {
        &mut self.volumes
    }

    pub fn nominator(&self) -> &Nominator {
        &self.nominator
    }

    pub fn nominator_mut(&mut self) -> &mut Nominator {
        &mut self.nominator
    }

    pub fn upsert_pdb(&mut self, pdb: PodDisruptionBudget) {
        self.pdbs.insert(pdb_key(&pdb), Arc::new(pdb));
    }

    pub fn remove_pdb(&mut self, key: &str) {
        self.pdbs.remove(key);
    }

    /// Forgets every budget the predicate rejects (after a relist).
    pub fn retain_pdbs(&mut self, keep: impl Fn(&str) -> bool) {
        self.pdbs.retain(|k, _| keep(k));
    }

    pub fn pdbs(&self) -> impl Iterator<Item = &PodDisruptionBudget> {
        self.pdbs.values().map(|p| p.as_ref())
    }
}

/// "namespace/name" of a budget.
pub fn pdb_key(pdb: &PodDisruptionBudget) -> String {
    format!(
        "{}/{}",
        pdb.metadata.namespace.as_deref().unwrap_or("default"),
        pdb.metadata.name.as_deref().unwrap_or_default()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pod_info::HostPort;
    use crate::resources::Resources;
    use serde_json::json;

    fn node(name: &str) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "status": {"allocatable": {"cpu": "2", "memory": "4Gi", "pods": "110"}}
        }))
        .unwrap()
    }

    fn pod(name: &str, node: Option<&str>, cpu: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x",
                "resources": {"requests": {"cpu": cpu}},
                "ports": [{"containerPort": 80, "hostPort": 8080}]}]}
        }))
        .unwrap()
    }

    #[test]
    fn assumed_pods_count_until_bound_or_forgotten() {
        let mut cache = Cache::default();
        cache.upsert_node(node("n1"));
        let p = pod("a", None, "500m");
        cache.assume(&p, "n1");
        assert_eq!(cache.node("n1").unwrap().requested.milli_cpu, 500);
        // The watch still shows the pod unbound: the assumption stays.
        cache.upsert_pod(&p);
        assert!(cache.is_assumed("default/a"));
        assert_eq!(cache.node("n1").unwrap().requested.pods, 1);
        // The watch shows it bound: confirmed, counted once.
        cache.upsert_pod(&pod("a", Some("n1"), "500m"));
        assert!(!cache.is_assumed("default/a"));
        assert_eq!(cache.node("n1").unwrap().requested.milli_cpu, 500);
        cache.remove_pod("default/a");
        assert_eq!(cache.node("n1").unwrap().requested, Resources::default());

        cache.assume(&p, "n1");
        cache.forget_assumed("default/a");
        assert_eq!(cache.node("n1").unwrap().requested.pods, 0);
    }

    #[test]
    fn placed_pods_count_as_claim_users() {
        let mut cache = Cache::default();
        let mut p = pod("a", Some("n1"), "1");
        p.spec.as_mut().unwrap().volumes = Some(vec![serde_json::from_value(
            json!({"name": "v", "persistentVolumeClaim": {"claimName": "data"}}),
        )
        .unwrap()]);
        cache.upsert_pod(&p);
        assert!(cache.claim_in_use("default/data"));
        assert!(!cache.claim_in_use("default/other"));
        cache.remove_pod("default/a");
        assert!(!cache.claim_in_use("default/data"));
    }

    #[test]
    fn pods_on_unknown_nodes_are_kept_but_not_candidates() {
        let mut cache = Cache::default();
        cache.upsert_pod(&pod("a", Some("later"), "1"));
        assert!(cache.nodes().is_empty());
        cache.upsert_node(node("later"));
        assert_eq!(cache.nodes()[0].requested.milli_cpu, 1000);
    }

    #[test]
    fn host_ports_conflict_on_wildcard_or_same_ip() {
        let hp = |ip: &str, port| HostPort {
            ip: ip.into(),
            protocol: "TCP".into(),
            port,
        };
        assert!(hp("", 80).conflicts(&hp("10.0.0.1", 80)));
        assert!(!hp("10.0.0.2", 80).conflicts(&hp("10.0.0.1", 80)));
        assert!(!hp("", 80).conflicts(&hp("", 81)));
    }

    #[test]
    fn images_normalize_to_latest() {
        assert_eq!(normalized_image("nginx"), "nginx:latest");
        assert_eq!(normalized_image("reg:5000/app"), "reg:5000/app:latest");
        assert_eq!(normalized_image("reg:5000/app:1"), "reg:5000/app:1");
    }
}
