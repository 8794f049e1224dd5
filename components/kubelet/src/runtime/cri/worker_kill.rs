//! Killing: one container (a Killing event, its preStop hook within the grace period, then StopContainer
//! with what is left of it) and the whole pod (every container at once, sidecars in upstream's
//! termination order, then the sandbox, the volumes and the pod's cgroup). A child of the worker to use
//! its private state.

use super::*;

impl PodWorker {
    /// Stops container `i` (`id`) as the kubelet kills one: a Killing event (`why`), its preStop hook
    /// within the grace period, then StopContainer with what is left of it.
    pub(super) async fn stop_one(
        &self,
        i: usize,
        id: &str,
        grace: Duration,
        why: String,
    ) -> Result<(), CriError> {
        self.stop_in_turn(i, id, grace, why, None).await
    }

    /// [`PodWorker::stop_one`]; while the pod is killed, after its preStop hook the container waits
    /// its turn in `order` (a sidecar outlives the app containers and the sidecars after it).
    pub(super) async fn stop_in_turn(
        &self,
        i: usize,
        id: &str,
        grace: Duration,
        why: String,
        order: Option<&init_sync::TerminationOrder>,
    ) -> Result<(), CriError> {
        let c = &self.ctrs[i].spec;
        self.event(Some(i), EventType::Normal, "Killing", why);
        stop_container(
            self.cri.as_ref(),
            &StopCtx {
                recorder: self.recorder.as_ref(),
                obj: self.obj.container(&c.name, i < self.n_init),
                pod_desc: self.pod_desc(),
                pod_ip: self.pod_ip.as_deref(),
                turn: order.map(|o| (o, i)),
            },
            c,
            id,
            grace,
        )
        .await
    }

    /// Stops every container (Killing event, preStop hook, SIGTERM, what is left of `grace`, SIGKILL),
    /// then the sandbox, and removes them all.
    pub async fn kill(&mut self, grace: Duration) -> Result<(), WorkerError> {
        self.merge_ephemeral_for_kill();
        let mut errors = Vec::new();
        // Only a running container gets its preStop hook and a Killing event; exited ones are just
        // removed below (StopContainer on them is a no-op).
        let running: Vec<(usize, String)> = self
            .ctrs
            .iter()
            .enumerate()
            .filter_map(|(i, c)| c.id.clone().map(|id| (i, id)))
            .collect();
        let live: Vec<usize> = running
            .iter()
            .map(|(i, _)| *i)
            .filter(|&i| matches!(self.ctrs[i].state, ContainerState::Running { .. }))
            .collect();
        let order = init_sync::TerminationOrder::new(self, &live);
        // In parallel: each container may use its whole grace period (sidecars wait their turn).
        let this = &*self;
        let order = &order;
        let stops = futures::future::join_all(running.iter().map(|(i, id)| async move {
            if matches!(this.ctrs[*i].state, ContainerState::Running { .. }) {
                let why = format!("Stopping container {}", this.ctrs[*i].spec.name);
                this.stop_in_turn(*i, id, grace, why, Some(order)).await
            } else {
                this.cri.stop_container(id, grace.as_secs() as i64).await
            }
        }))
        .await;
        for e in stops.into_iter().filter_map(Result::err) {
            if !e.is_not_found() {
                errors.push(e.to_string());
            }
        }
        self.record_final_states(&running).await;
        let cri = self.cri.clone();
        if let Some(sb) = &self.sandbox_id {
            if let Err(e) = cri.stop_pod_sandbox(sb).await {
                if !e.is_not_found() {
                    errors.push(e.to_string());
                }
            }
        }
        for c in &mut self.ctrs {
            for id in [c.id.take(), c.previous.take()].into_iter().flatten() {
                if let Err(e) = cri.remove_container(&id).await {
                    if !e.is_not_found() {
                        errors.push(e.to_string());
                    }
                }
            }
            c.ready = false;
            c.done = true;
        }
        if let Some(sb) = self.sandbox_id.take() {
            if let Err(e) = cri.remove_pod_sandbox(&sb).await {
                if !e.is_not_found() {
                    errors.push(e.to_string());
                }
            }
        }
        // Volumes go only once no container can still use them.
        if errors.is_empty() {
            if let Err(e) = self.volumes.tear_down() {
                errors.push(e.to_string());
            }
            self.remove_pod_cgroup();
        }
        if errors.is_empty() {
            tracing::info!(pod = %self.key, "pod stopped and removed");
            Ok(())
        } else {
            Err(WorkerError::Cleanup {
                pod: self.key.clone(),
                message: errors.join("; "),
            })
        }
    }
}

/// A container's shutdown window after its preStop hook: never less than this (upstream's minimum), so
/// a hook that used the whole grace period does not turn into an immediate SIGKILL.
const MIN_GRACE_AFTER_PRE_STOP: Duration = Duration::from_secs(2);

/// What a container stop reports its preStop failure with.
struct StopCtx<'a> {
    recorder: &'a dyn EventRecorder,
    obj: ObjectRef,
    pod_desc: String,
    pod_ip: Option<&'a str>,
    /// While the pod is killed: the termination order and this container's place in it.
    turn: Option<(&'a init_sync::TerminationOrder, usize)>,
}

/// The preStop hook (bounded by `grace`, its time counted against it), the wait for its turn (what
/// is left of `grace`), then StopContainer.
async fn stop_container(
    cri: &dyn CriApi,
    ctx: &StopCtx<'_>,
    c: &Container,
    id: &str,
    grace: Duration,
) -> Result<(), CriError> {
    let mut left = grace;
    let pre_stop = c.lifecycle.as_ref().and_then(|l| l.pre_stop.as_ref());
    if let Some(h) = pre_stop.filter(|_| !grace.is_zero()) {
        let started = Instant::now();
        if let Err(e) = hooks::run(h, c, id, ctx.pod_ip, cri, Some(grace)).await {
            tracing::warn!(pod = %ctx.pod_desc, container = %c.name, error = %e, "preStop hook failed");
            ctx.recorder.record(
                &ctx.obj,
                EventType::Warning,
                "FailedPreStopHook",
                format!(
                    "{} for Container {:?} in Pod {:?} failed - error: {e}",
                    hooks::describe(h),
                    c.name,
                    ctx.pod_desc
                ),
            );
        }
        left = grace
            .saturating_sub(started.elapsed())
            .max(MIN_GRACE_AFTER_PRE_STOP);
    }
    if let Some((order, i)) = ctx.turn {
        let waited = order.wait_for_turn(i, left).await;
        if !waited.is_zero() {
            left = left.saturating_sub(waited).max(MIN_GRACE_AFTER_PRE_STOP);
        }
    }
    // Whole seconds, rounded up: CRI's timeout unit.
    let secs = left.as_secs() + u64::from(left.subsec_nanos() > 0);
    let stopped = cri.stop_container(id, secs as i64).await;
    if let Some((order, i)) = ctx.turn {
        order.terminated(i);
    }
    stopped
}
