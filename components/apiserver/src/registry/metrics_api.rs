//! metrics.k8s.io/v1beta1 as metrics-server registers it: NodeMetrics (`nodes`, cluster-wide) and
//! PodMetrics (`pods`, namespaced), get and list only. Nothing is stored: requests are answered by
//! `crate::resource_metrics` from the kubelets' summaries; the key roots below are never written
//! and keep these kinds apart from the real nodes and pods (a namespace's clean-up lists them).

use super::strategy::ResourceSpec;

/// The API group metrics-server registers (and `crate::resource_metrics` serves).
pub const GROUP: &str = "metrics.k8s.io";

const READ_ONLY: &[&str] = &["get", "list"];

pub static NODE_METRICS: ResourceSpec = ResourceSpec {
    group: GROUP,
    version: "v1beta1",
    plural: "nodes",
    singular: "",
    kind: "NodeMetrics",
    list_kind: "NodeMetricsList",
    namespaced: false,
    verbs: READ_ONLY,
    key_root: Some("/registry/kiln/metrics.k8s.io/nodes"),
    ..ResourceSpec::BASE
};

pub static POD_METRICS: ResourceSpec = ResourceSpec {
    group: GROUP,
    version: "v1beta1",
    plural: "pods",
    singular: "",
    kind: "PodMetrics",
    list_kind: "PodMetricsList",
    namespaced: true,
    verbs: READ_ONLY,
    key_root: Some("/registry/kiln/metrics.k8s.io/pods"),
    ..ResourceSpec::BASE
};
