//! One node as the scheduler sees it: the Node object and the pods placed on it, with the resources
//! they request (what the filters and scorers read, and the cache keeps one of per node).

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;

use crate::pod_info::{HostPort, PodInfo, PodKey};
use crate::resources::{node_allocatable, Resources};

/// A node and what is placed on it. `node` is None while pods name a node the watch has not
/// delivered yet (or one just deleted); such entries are never scheduling candidates.
#[derive(Debug, Clone, Default)]
pub struct NodeInfo {
    pub name: String,
    pub node: Option<Arc<Node>>,
    pub allocatable: Resources,
    pub pods: BTreeMap<PodKey, PodInfo>,
    pub requested: Resources,
    pub non_zero_requested: (i64, i64),
}

impl NodeInfo {
    pub fn new(node: Node) -> NodeInfo {
        let mut info = NodeInfo {
            name: node.metadata.name.clone().unwrap_or_default(),
            ..Default::default()
        };
        info.set_node(node);
        info
    }

    /// Replaces the Node object (a watch update), recomputing allocatable.
    pub(crate) fn set_node(&mut self, node: Node) {
        self.allocatable = node_allocatable(&node);
        self.node = Some(Arc::new(node));
    }

    pub fn add_pod(&mut self, pod: PodInfo) {
        self.remove_pod(&pod.key.clone());
        self.requested.add(&pod.requests);
        self.requested.pods += 1;
        self.non_zero_requested.0 += pod.non_zero.0;
        self.non_zero_requested.1 += pod.non_zero.1;
        self.pods.insert(pod.key.clone(), pod);
    }

    pub fn remove_pod(&mut self, key: &str) {
        if let Some(old) = self.pods.remove(key) {
            self.requested.sub(&old.requests);
            self.requested.pods -= 1;
            self.non_zero_requested.0 -= old.non_zero.0;
            self.non_zero_requested.1 -= old.non_zero.1;
        }
    }

    pub fn used_ports(&self) -> impl Iterator<Item = &HostPort> {
        self.pods.values().flat_map(|p| p.host_ports.iter())
    }
}
