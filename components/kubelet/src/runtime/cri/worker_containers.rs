//! One container's part of a sync: observe its current run (CRI ContainerStatus), plan
//! ([`pod_plan::plan_container`]), act — probe it, record an exit, show the crash-loop back-off, or start
//! it ([`super::start`]). A child of the worker to use its private state.

use super::*;

impl Ctr {
    /// The restart bookkeeping the plan reads.
    fn track(&self) -> RestartTrack {
        RestartTrack {
            done: self.done,
            exit_handled: self.exit_handled,
            restart_count: self.restart_count(),
            restart_at: self.restart_at,
            exit_shown_until: self.exit_shown_until,
        }
    }
}

impl PodWorker {
    pub(super) async fn sync_container(&mut self, i: usize, now: Instant) {
        if self.ctrs[i].done {
            return;
        }
        let seen = self.observe_container(i).await;
        let c = &self.ctrs[i];
        let plan = pod_plan::plan_container(&c.track(), &seen, c.policy, self.cfg.backoff, now);
        if let (Some(exit), ContainerSeen::Exited(exited)) = (plan.exit, seen) {
            self.record_exit(i, exited, exit);
        }
        if plan.exit_shown_over {
            let c = &mut self.ctrs[i];
            c.exit_shown_until = None;
            if let ContainerState::Terminated(t) = &c.state {
                c.last_termination = Some(t.clone());
            }
        }
        match plan.step {
            ContainerStep::Nothing | ContainerStep::ShowExit => {}
            ContainerStep::Probe { started_at } => {
                self.ctrs[i].state = ContainerState::Running { pid: 0, started_at };
                self.hold_probes_for_initial_delay(i, started_at, now);
                if let Some(id) = self.ctrs[i].id.clone() {
                    self.probe(i, &id, now).await;
                }
            }
            ContainerStep::BackOff => self.show_back_off(i),
            ContainerStep::Start => self.start_container(i, now).await,
        }
    }

    /// What CRI says of container `i`'s current run.
    async fn observe_container(&mut self, i: usize) -> ContainerSeen {
        let Some(id) = self.ctrs[i].id.clone() else {
            return ContainerSeen::NotCreated;
        };
        let status = self.cri.container_status(&id).await;
        if let Ok(st) = &status {
            self.ctrs[i].user = st.user.clone();
        }
        match status {
            Ok(st) if st.state == CriState::Running => ContainerSeen::Running {
                started_at: from_nanos(st.started_at).unwrap_or_else(SystemTime::now),
            },
            // Created but not started: StartContainer is retried by recreating.
            Ok(st) if st.state == CriState::Created => ContainerSeen::Exited(Terminated {
                exit_code: 128,
                signal: None,
                reason: "StartError".into(),
                message: Some(st.message).filter(|m| !m.is_empty()),
                started_at: None,
                finished_at: SystemTime::now(),
            }),
            // The message is read once, when the exit is first seen: only then is it used.
            Ok(st) => ContainerSeen::Exited(kill_status::terminated(
                &st,
                if self.ctrs[i].exit_handled {
                    None
                } else {
                    self.exit_message(i, &st)
                },
            )),
            Err(e) if e.is_not_found() => ContainerSeen::Exited(Terminated {
                exit_code: 137,
                signal: None,
                reason: "ContainerStatusUnknown".into(),
                message: Some("the container could not be located".into()),
                started_at: None,
                finished_at: SystemTime::now(),
            }),
            Err(e) => {
                tracing::warn!(pod = %self.key, container = %self.ctrs[i].spec.name, error = %e, "container status");
                ContainerSeen::Unknown
            }
        }
    }

    /// A newly seen exit of container `i`: it is no longer ready, its probes start over with its next
    /// run, and it is done or waits for its restart as `exit` says.
    fn record_exit(&mut self, i: usize, exited: Terminated, exit: ExitPlan) {
        let key = &self.key;
        let c = &mut self.ctrs[i];
        c.exit_handled = true;
        c.ready = false;
        c.readiness = None;
        c.liveness = None;
        tracing::info!(pod = %key, container = %c.spec.name, exit_code = exited.exit_code, reason = %exited.reason, "container exited");
        match exit {
            ExitPlan::Final => {
                c.state = ContainerState::Terminated(exited);
                c.done = true;
            }
            ExitPlan::Restart {
                delay,
                at,
                show_until,
            } => {
                c.restart_at = Some(at);
                c.backoff = delay;
                match show_until {
                    None => c.last_termination = Some(exited),
                    Some(until) => {
                        c.state = ContainerState::Terminated(exited);
                        c.exit_shown_until = Some(until);
                    }
                }
            }
        }
    }

    /// Container `i` waits out its back-off: CrashLoopBackOff, with a BackOff event as it enters it.
    fn show_back_off(&mut self, i: usize) {
        let key = self.key.clone();
        let c = &mut self.ctrs[i];
        // The whole back-off, not the time left: the status only changes when the state does.
        let secs = c.backoff.as_secs();
        let entering = !matches!(&c.state, ContainerState::Waiting { reason, .. } if reason == "CrashLoopBackOff");
        c.state = waiting(
            "CrashLoopBackOff",
            Some(format!(
                "back-off {secs}s restarting failed container={} pod={key}",
                c.spec.name
            )),
        );
        if entering {
            let name = c.spec.name.clone();
            let message = format!(
                "Back-off restarting failed container {name} in pod {}",
                self.pod_desc()
            );
            self.event(Some(i), EventType::Warning, "BackOff", message);
        }
    }
}
