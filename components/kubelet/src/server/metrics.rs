//! `/metrics`: a few gauges and counters in the Prometheus text format, named like upstream's where
//! upstream has one.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;

use super::pods::NodePod;
use crate::container_status::ContainerState;

#[derive(Default)]
pub struct Metrics {
    /// Requests served, by (kind of path, status code).
    requests: Mutex<BTreeMap<(&'static str, u16), u64>>,
}

impl Metrics {
    pub fn record(&self, path: &'static str, code: u16) {
        *self
            .requests
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry((path, code))
            .or_default() += 1;
    }

    pub fn render(&self, node: &str, pods: &[NodePod]) -> String {
        let mut out = String::new();
        let mut states: BTreeMap<&str, u64> =
            [("running", 0), ("exited", 0), ("created", 0)].into();
        for st in pods.iter().filter_map(|p| p.status.as_ref()) {
            for c in &st.containers {
                let s = match c.state {
                    ContainerState::Running { .. } => "running",
                    ContainerState::Terminated(_) => "exited",
                    ContainerState::Waiting { .. } => "created",
                };
                *states.entry(s).or_default() += 1;
            }
        }
        let running_pods = pods
            .iter()
            .filter(|p| {
                p.status
                    .as_ref()
                    .is_some_and(|s| s.containers.iter().any(|c| c.is_running()))
            })
            .count();
        let _ = writeln!(
            out,
            "# HELP kubelet_node_name The node's name. The count is always 1.\n# TYPE kubelet_node_name gauge\nkubelet_node_name{{node=\"{node}\"}} 1"
        );
        let _ = writeln!(
            out,
            "# HELP kubelet_running_pods Number of pods that have a running container.\n# TYPE kubelet_running_pods gauge\nkubelet_running_pods {running_pods}"
        );
        let _ = writeln!(
            out,
            "# HELP kubelet_running_containers Number of containers currently running, by state.\n# TYPE kubelet_running_containers gauge"
        );
        for (state, n) in states {
            let _ = writeln!(
                out,
                "kubelet_running_containers{{container_state=\"{state}\"}} {n}"
            );
        }
        let restarts: i64 = pods
            .iter()
            .filter_map(|p| p.status.as_ref())
            .flat_map(|s| s.containers.iter().map(|c| c.restart_count as i64))
            .sum();
        let _ = writeln!(
            out,
            "# HELP kiln_kubelet_container_restarts Sum of the restart counts of this node's containers.\n# TYPE kiln_kubelet_container_restarts gauge\nkiln_kubelet_container_restarts {restarts}"
        );
        let _ = writeln!(
            out,
            "# HELP kiln_kubelet_http_requests_total Requests served by the kubelet server.\n# TYPE kiln_kubelet_http_requests_total counter"
        );
        for ((path, code), n) in self
            .requests
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
        {
            let _ = writeln!(
                out,
                "kiln_kubelet_http_requests_total{{path=\"{path}\",code=\"{code}\"}} {n}"
            );
        }
        out
    }
}
