//! The pod's own cgroup (`/kubepods[/<tier>]/pod<uid>`, see [`crate::qos_cgroups`]): made with the
//! pod's limits before its sandbox, whose `cgroup_parent` it is, and removed with the pod — the
//! containers' cgroups live below it, so the pod as a whole is held to what its containers declare.

use super::PodWorker;
use crate::qos_cgroups;

impl PodWorker {
    /// Before the sandbox: the pod cgroup exists and carries the pod's limits; then the DNS and
    /// hostname the sandbox is made with.
    pub(super) fn prepare_pod(&mut self) -> Result<(), String> {
        if let Some(cgroups) = &self.cfg.cgroups {
            let path = qos_cgroups::pod_cgroup(&self.pod);
            let limits = qos_cgroups::pod_resources(&self.pod, self.cfg.pod_pids_limit);
            cgroups
                .ensure(&path, &limits)
                .map_err(|e| format!("unable to ensure pod container exists: {e}"))?;
        }
        self.prepare_sandbox()
    }

    /// After the pod's containers and sandbox are gone; a cgroup that cannot go yet (a process still
    /// exiting) is left to the node's sweep of pods that are gone.
    pub(super) fn remove_pod_cgroup(&self) {
        if let Some(cgroups) = &self.cfg.cgroups {
            let path = qos_cgroups::pod_cgroup(&self.pod);
            if let Err(e) = cgroups.remove(&path) {
                tracing::warn!(pod = %self.key, error = %e, "removing the pod's cgroup");
            }
        }
    }
}
