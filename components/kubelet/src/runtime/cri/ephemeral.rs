//! Ephemeral containers (`spec.ephemeralContainers`, added through `pods/ephemeralcontainers` by
//! `kubectl debug`): the worker learns of them from the pod's updates, starts each once the sandbox
//! runs — pulled, created and started like any container, with no probes, hooks or resources — and
//! never restarts one, whatever its exit (upstream's computePodActions starts only those without a
//! status). One that names `targetContainerName` joins that container's PID namespace (CRI
//! NamespaceMode TARGET), so it sees the target's processes. Their statuses go to
//! `status.ephemeralContainerStatuses`. A child of [`super`] to share the worker's container sync.

use k8s_openapi::api::core::v1::EphemeralContainer;

use super::super::api::CriContainer;

use super::*;

/// The worker's ephemeral containers.
#[derive(Debug, Default)]
pub(super) struct Ephemeral {
    ctrs: Vec<Ctr>,
    /// Each container's targetContainerName.
    targets: Vec<Option<String>>,
    /// While one is synced (borrowed into the worker's container list): its index there and target.
    syncing: Option<(usize, Option<String>)>,
}

/// An ephemeral container as the container it runs as (the common fields are the same).
pub(super) fn as_container(ec: &EphemeralContainer) -> Container {
    Container {
        name: ec.name.clone(),
        image: ec.image.clone(),
        image_pull_policy: ec.image_pull_policy.clone(),
        command: ec.command.clone(),
        args: ec.args.clone(),
        working_dir: ec.working_dir.clone(),
        env: ec.env.clone(),
        env_from: ec.env_from.clone(),
        volume_mounts: ec.volume_mounts.clone(),
        volume_devices: ec.volume_devices.clone(),
        termination_message_path: ec.termination_message_path.clone(),
        termination_message_policy: ec.termination_message_policy.clone(),
        security_context: ec.security_context.clone(),
        stdin: ec.stdin,
        stdin_once: ec.stdin_once,
        tty: ec.tty,
        ..Default::default()
    }
}

/// The ephemeral containers of `pod` that `known` (names) lacks, in spec order.
pub(super) fn added<'a>(pod: &'a Pod, known: &[&str]) -> Vec<&'a EphemeralContainer> {
    pod.spec
        .as_ref()
        .and_then(|s| s.ephemeral_containers.as_ref())
        .into_iter()
        .flatten()
        .filter(|ec| !known.contains(&ec.name.as_str()))
        .collect()
}

/// The PID namespace of an ephemeral container with a target: the target's (upstream keeps the
/// pod's when the pod already shares one, and the container's own when the target has not run).
pub(super) fn target_pid_namespace(config: &mut cri::ContainerConfig, target_id: &str) {
    let Some(ns) = config
        .linux
        .as_mut()
        .and_then(|l| l.security_context.as_mut())
        .and_then(|sc| sc.namespace_options.as_mut())
    else {
        return;
    };
    if ns.pid == cri::NamespaceMode::Container as i32 {
        ns.pid = cri::NamespaceMode::Target as i32;
        ns.target_id = target_id.to_string();
    }
}

impl PodWorker {
    /// Takes the ephemeral containers of the pod's latest object that the worker does not run yet
    /// (they are only ever added). True when there were any.
    pub(super) fn add_ephemeral(&mut self, pod: &Pod) -> bool {
        let known: Vec<&str> = self
            .ephemeral
            .ctrs
            .iter()
            .map(|c| c.spec.name.as_str())
            .collect();
        let new: Vec<EphemeralContainer> = added(pod, &known).into_iter().cloned().collect();
        for ec in &new {
            tracing::info!(pod = %self.key, container = %ec.name, target_container = ?ec.target_container_name, "ephemeral container added");
            self.ephemeral.ctrs.push(Ctr::new(
                as_container(ec),
                RestartPolicy::Never,
                "ContainerCreating",
            ));
            self.ephemeral
                .targets
                .push(ec.target_container_name.clone().filter(|t| !t.is_empty()));
        }
        if let Some(spec) = self.pod.spec.as_mut() {
            let all = pod
                .spec
                .as_ref()
                .and_then(|s| s.ephemeral_containers.clone());
            spec.ephemeral_containers = all;
        }
        !new.is_empty()
    }

    /// Starts the ephemeral containers not started yet and notes the exits of the others; each is
    /// synced as one of the worker's containers (pull, create, start, exit) under restartPolicy Never.
    pub(super) async fn sync_ephemeral(&mut self, now: Instant) {
        for k in 0..self.ephemeral.ctrs.len() {
            if self.ephemeral.ctrs[k].done {
                continue;
            }
            let placeholder = Ctr::new(Container::default(), RestartPolicy::Never, "");
            let c = std::mem::replace(&mut self.ephemeral.ctrs[k], placeholder);
            self.ctrs.push(c);
            let i = self.ctrs.len() - 1;
            self.ephemeral.syncing = Some((i, self.ephemeral.targets[k].clone()));
            self.sync_container(i, now).await;
            self.ephemeral.syncing = None;
            if let Some(c) = self.ctrs.pop() {
                self.ephemeral.ctrs[k] = c;
            }
        }
    }

    /// Container `i`'s config, if it is the ephemeral container being synced and names a target
    /// that runs: in the target's PID namespace.
    pub(super) fn ephemeral_namespaces(&self, i: usize, config: &mut cri::ContainerConfig) {
        let Some((at, Some(target))) = &self.ephemeral.syncing else {
            return;
        };
        if *at != i {
            return;
        }
        let target_id = self.ctrs[..*at]
            .iter()
            .find(|c| c.spec.name == *target)
            .and_then(|c| c.id.clone());
        if let Some(id) = target_id {
            target_pid_namespace(config, &id);
        }
    }

    /// Statuses for `status.ephemeralContainerStatuses` (never ready: they serve nothing).
    pub(super) fn ephemeral_statuses(&self) -> Vec<ContainerStatus> {
        self.ephemeral
            .ctrs
            .iter()
            .map(|c| ContainerStatus {
                ready: false,
                ..c.status()
            })
            .collect()
    }

    /// Hands the ephemeral containers to the worker's list for a kill (stopped and removed with the
    /// rest of the pod).
    pub(super) fn merge_ephemeral_for_kill(&mut self) {
        self.ctrs.append(&mut self.ephemeral.ctrs);
        self.ephemeral.targets.clear();
    }

    /// Whether `name` is one of the worker's ephemeral containers (adoption keeps theirs).
    pub(super) fn is_ephemeral(&self, name: &str) -> bool {
        self.ephemeral.ctrs.iter().any(|c| c.spec.name == name)
    }

    /// After a kubelet restart: the current run of each ephemeral container found in the sandbox is
    /// taken over — a running one keeps running, an exited one stays exited (never started again).
    pub(super) fn adopt_ephemeral(&mut self, found: &[CriContainer]) {
        for c in &mut self.ephemeral.ctrs {
            let Some(current) = found
                .iter()
                .filter(|f| {
                    f.labels
                        .get(spec::LABEL_CONTAINER_NAME)
                        .map(String::as_str)
                        .unwrap_or(&f.name)
                        == c.spec.name
                })
                .max_by_key(|f| f.attempt)
            else {
                continue;
            };
            c.id = Some(current.id.clone());
            c.runs = current.attempt + 1;
            match current.state {
                CriState::Running => {
                    let started_at = from_nanos(current.started_at).unwrap_or_else(SystemTime::now);
                    c.state = ContainerState::Running { pid: 0, started_at };
                    c.started = true;
                }
                // The next sync sees the exit; restartPolicy Never ends it there.
                _ => c.exit_handled = false,
            }
        }
    }
}

#[cfg(test)]
#[path = "ephemeral_tests.rs"]
mod tests;
