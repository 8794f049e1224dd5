//! Actuating an admitted in-place resize ([`crate::pod_resize`]): the pod's cgroup takes the new
//! pod limits, each container whose cpu or memory changed gets its new settings through CRI
//! UpdateContainerResources — or, where its resizePolicy says RestartContainer for a changed
//! resource, is restarted — and the worker runs with the new resources from then on (a container
//! created later is created with them).

use super::PodWorker;
use crate::container_status::ContainerState;
use crate::pod_resize::{self, Step};
use crate::qos_cgroups;
use crate::runtime::cri::resources;
use k8s_openapi::api::core::v1::Pod;

impl PodWorker {
    /// Applies `pod`'s container resources where they differ from those the worker runs with
    /// (the runtime hands over only admitted ones). A failure is reported as PodResizeInProgress
    /// (reason Error) and retried with the next update.
    pub(super) async fn resize(&mut self, pod: &Pod) {
        let wanted = pod_resize::container_resources(pod);
        let resizable: Vec<usize> = (0..self.ctrs.len())
            .filter(|i| *i >= self.n_init || self.ctrs[*i].restartable)
            .collect();
        let mut steps = Vec::new();
        for i in resizable {
            let Some(res) = wanted.get(&self.ctrs[i].spec.name) else {
                continue;
            };
            let mut is = self.ctrs[i].spec.clone();
            is.resources = Some(res.clone()).filter(|r| *r != Default::default());
            is.resize_policy = pod
                .spec
                .iter()
                .flat_map(|s| s.init_containers.iter().flatten().chain(&s.containers))
                .find(|c| c.name == is.name)
                .and_then(|c| c.resize_policy.clone());
            if let Some(step) = pod_resize::step(&self.ctrs[i].spec, &is) {
                steps.push((i, is, step));
            }
        }
        if steps.is_empty() {
            return;
        }
        // The pod as it runs from now on: container settings are computed from it (QoS, OOM score).
        self.pod = pod_resize::with_resources_of(&self.pod, pod);
        let mut errors = Vec::new();
        // The pod cgroup first, so a container's raised limit is not capped by the pod's; again
        // after the containers, which is what lowers it.
        if let Some(Err(e)) = self.pod_cgroup_limits() {
            tracing::debug!(pod = %self.key, error = %e, "raising the pod cgroup before a resize");
        }
        let memory =
            kiln_common::quantity::parse(&self.cfg.allocatable.memory).map_or(0, |m| m.0 / 1000);
        for (i, is, step) in steps {
            self.ctrs[i].spec = is;
            let running = matches!(self.ctrs[i].state, ContainerState::Running { .. });
            let Some(id) = self.ctrs[i].id.clone().filter(|_| running) else {
                // Not running: it is created with the new resources.
                continue;
            };
            let name = self.ctrs[i].spec.name.clone();
            match step {
                Step::Update => {
                    let r = resources::linux_resources(&self.pod, &self.ctrs[i].spec, memory);
                    tracing::info!(pod = %self.key, container = %name, "resizing container in place");
                    if let Err(e) = self.cri.update_container_resources(&id, &r).await {
                        errors.push(format!("container {name}: {e}"));
                    }
                }
                Step::Restart => {
                    let why = format!("Container {name} resize requires restart");
                    if let Err(e) = self.stop_one(i, &id, self.grace, why).await {
                        errors.push(format!("container {name}: {e}"));
                    }
                }
            }
        }
        if let Some(Err(e)) = self.pod_cgroup_limits() {
            errors.push(format!("pod cgroup: {e}"));
        }
        self.resize_error = (!errors.is_empty()).then(|| errors.join("; "));
    }

    /// The pod cgroup's limits from the pod as it runs now (None: pod cgroups are not managed).
    fn pod_cgroup_limits(&self) -> Option<Result<(), crate::cgroupfs::CgroupError>> {
        self.cfg.cgroups.as_ref().map(|cg| {
            let path = qos_cgroups::pod_cgroup(&self.pod);
            let limits = qos_cgroups::pod_resources(&self.pod, self.cfg.pod_pids_limit);
            cg.ensure(&path, &limits)
        })
    }

    /// What the pod's containers run with, for its status.
    pub(super) fn resize_status(&self) -> pod_resize::ResizeStatus {
        pod_resize::ResizeStatus {
            allocated: pod_resize::container_resources(&self.pod),
            pending: None,
            error: self.resize_error.clone(),
        }
    }
}
