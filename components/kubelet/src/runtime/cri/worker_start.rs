//! Starting a container: its image per imagePullPolicy (with the image pull back-off), its CRI config
//! (env, mounts, security context, resources), CreateContainer and StartContainer, then its postStart
//! hook. A child of the worker to use its private state.

use super::*;

impl PodWorker {
    /// Pulls (per policy), creates and starts container `i`, then runs its postStart hook; a failure
    /// leaves it Waiting with the kubelet's reason, to be retried on a later sync.
    pub(super) async fn start_container(&mut self, i: usize, now: Instant) {
        let cri = self.cri.clone();
        let Some(sandbox_id) = self.sandbox_id.clone() else {
            return;
        };
        let backoff = self.cfg.backoff;
        let image = self.ctrs[i].spec.image.clone().unwrap_or_default();
        let name = self.ctrs[i].spec.name.clone();
        let present = match cri.image_present(&image).await {
            Ok(p) => p,
            Err(e) => {
                self.ctrs[i].state = waiting("ErrImagePull", Some(e.to_string()));
                return;
            }
        };
        let pull = match spec::pull_policy(&self.ctrs[i].spec) {
            "Never" if !present => {
                let message =
                    format!("Container image {image:?} is not present with pull policy of Never");
                self.warn_on_change(i, "ErrImageNeverPull", &message, message.clone());
                self.ctrs[i].state = waiting("ErrImageNeverPull", Some(message));
                return;
            }
            "Never" => false,
            "IfNotPresent" => !present,
            _ => true,
        };
        let quiet = self.ctrs[i].image_reported == Some(self.ctrs[i].runs);
        if pull {
            if self.ctrs[i].pull_retry_at.is_some_and(|at| now < at) {
                let message = format!("Back-off pulling image {image:?}");
                let entering = !matches!(&self.ctrs[i].state, ContainerState::Waiting { reason, .. } if reason == "ImagePullBackOff");
                if entering {
                    self.event(Some(i), EventType::Normal, "BackOff", message.clone());
                }
                self.ctrs[i].state = waiting("ImagePullBackOff", Some(message));
                return;
            }
            tracing::info!(pod = %self.key, container = %name, %image, "pulling image");
            if !quiet {
                self.event(
                    Some(i),
                    EventType::Normal,
                    "Pulling",
                    format!("Pulling image {image:?}"),
                );
            }
            let started = Instant::now();
            match self.pull_image(&image).await {
                Ok(_) => {
                    let c = &mut self.ctrs[i];
                    c.pull_failures = 0;
                    c.pull_retry_at = None;
                    c.image_reported = Some(c.runs);
                    if !quiet {
                        self.event(
                            Some(i),
                            EventType::Normal,
                            "Pulled",
                            format!(
                                "Successfully pulled image {image:?} in {:.3}s",
                                started.elapsed().as_secs_f64()
                            ),
                        );
                    }
                }
                Err(e) => {
                    let c = &mut self.ctrs[i];
                    c.pull_failures += 1;
                    c.pull_retry_at = Some(now + backoff.delay(c.pull_failures - 1));
                    tracing::warn!(pod = %self.key, %image, error = %e, "pulling image failed");
                    c.state = waiting("ErrImagePull", Some(e.to_string()));
                    self.event(
                        Some(i),
                        EventType::Warning,
                        "Failed",
                        format!("Failed to pull image {image:?}: {e}"),
                    );
                    self.event(
                        Some(i),
                        EventType::Warning,
                        "Failed",
                        "Error: ErrImagePull".into(),
                    );
                    return;
                }
            }
        } else if !quiet {
            self.ctrs[i].image_reported = Some(self.ctrs[i].runs);
            self.event(
                Some(i),
                EventType::Normal,
                "Pulled",
                format!("Container image {image:?} already present on machine"),
            );
        }
        let attempt = self.ctrs[i].runs;
        let config = match self.container_config(i, attempt).await {
            Ok(c) => c,
            Err(message) => {
                self.warn_on_change(i, "Failed", &message, format!("Error: {message}"));
                self.ctrs[i].state = waiting("CreateContainerConfigError", Some(message));
                return;
            }
        };
        let id = match cri
            .create_container(&sandbox_id, &config, &self.sandbox_config)
            .await
        {
            Ok(id) => id,
            Err(e) => {
                self.warn_on_change(i, "Failed", &e.to_string(), format!("Error: {e}"));
                self.ctrs[i].state = waiting("CreateContainerError", Some(e.to_string()));
                return;
            }
        };
        self.event(
            Some(i),
            EventType::Normal,
            "Created",
            format!("Created container {name}"),
        );
        let c = &mut self.ctrs[i];
        c.runs += 1;
        // Keep one dead container (the run before this one) for its log; remove older ones.
        if let Some(old) = c.previous.take() {
            if let Err(e) = cri.remove_container(&old).await {
                if !e.is_not_found() {
                    tracing::warn!(pod = %self.key, container = %old, error = %e, "removing dead container");
                }
            }
        }
        c.previous = c.id.replace(id.clone());
        c.exit_handled = false;
        c.started = false;
        c.restart_at = None;
        c.exit_shown_until = None;
        if let Err(e) = cri.start_container(&id).await {
            // containerd marks the container exited (StartError); the next sync restarts it per policy.
            tracing::warn!(pod = %self.key, container = %name, error = %e, "starting container");
            self.ctrs[i].state = waiting("RunContainerError", Some(e.to_string()));
            self.event(Some(i), EventType::Warning, "Failed", format!("Error: {e}"));
            return;
        }
        tracing::info!(pod = %self.key, container = %name, id = %id, restart_count = self.ctrs[i].restart_count(), "container started");
        self.event(
            Some(i),
            EventType::Normal,
            "Started",
            format!("Started container {name}"),
        );
        if !self.post_start(i, &id).await {
            return;
        }
        let c = &mut self.ctrs[i];
        c.state = ContainerState::Running {
            pid: 0,
            started_at: SystemTime::now(),
        };
        c.readiness = c
            .spec
            .readiness_probe
            .as_ref()
            .map(|p| ProbeState::new(p, now, false));
        c.liveness = c
            .spec
            .liveness_probe
            .as_ref()
            .map(|p| ProbeState::new(p, now, true));
        c.startup = c
            .spec
            .startup_probe
            .as_ref()
            .map(|p| ProbeState::new(p, now, false));
        c.started = c.startup.is_none();
        c.ready = c.readiness.is_none() && c.started;
    }

    /// Runs container `i`'s postStart hook (if any) right after it started; on failure the container is
    /// killed (the next sync restarts it per policy, with back-off) and false is returned.
    pub(super) async fn post_start(&mut self, i: usize, id: &str) -> bool {
        let Some(h) = self.ctrs[i]
            .spec
            .lifecycle
            .as_ref()
            .and_then(|l| l.post_start.clone())
        else {
            return true;
        };
        let spec = self.ctrs[i].spec.clone();
        // Upstream does not bound postStart; this does, so a hung hook cannot wedge the pod's worker
        // (deleting the pod waits for the current sync).
        let limit = Some(POST_START_LIMIT);
        let Err(e) = hooks::run(
            &h,
            &spec,
            id,
            self.pod_ip.as_deref(),
            self.cri.as_ref(),
            limit,
        )
        .await
        else {
            return true;
        };
        let message = format!(
            "{} for Container {:?} in Pod {:?} failed - error: {e}",
            hooks::describe(&h),
            spec.name,
            self.pod_desc()
        );
        tracing::warn!(pod = %self.key, container = %spec.name, error = %e, "postStart hook failed; killing the container");
        self.event(
            Some(i),
            EventType::Warning,
            "FailedPostStartHook",
            message.clone(),
        );
        let grace = self.grace;
        let why = format!("FailedPostStartHook: container {} is killed", spec.name);
        if let Err(e) = self.stop_one(i, id, grace, why).await {
            tracing::warn!(pod = %self.key, container = %spec.name, error = %e, "stopping container after its postStart hook failed");
        }
        self.ctrs[i].state = waiting("PostStartHookError", Some(message));
        false
    }

    /// Container `i`'s CRI config with its env (reading the ConfigMaps and Secrets it refers to) and
    /// mounts; an error is the CreateContainerConfigError message.
    pub(super) async fn container_config(
        &self,
        i: usize,
        attempt: u32,
    ) -> Result<cri::ContainerConfig, String> {
        let c = &self.ctrs[i].spec;
        let ns = self.pod.metadata.namespace.as_deref().unwrap_or("default");
        let mut fetched = env::fetch(ns, c, self.objects.as_deref())
            .await
            .map_err(|e| e.to_string())?;
        fetched.service_env = self.service_env()?;
        let ctx = env::FieldContext {
            node_name: &self.cfg.node_name,
            node_ip: &self.cfg.node_ip,
            pod_ip: self.pod_ip.as_deref(),
            allocatable: Some(&self.cfg.allocatable),
        };
        let envs = env::build(&self.pod, c, &ctx, &fetched).map_err(|e| e.to_string())?;
        let mut mounts = self
            .volumes
            .container_mounts(c, &envs)
            .map_err(|e| e.to_string())?;
        mounts.extend(self.hosts_mount(c)?);
        mounts.extend(self.termination_mount(i, attempt));
        let mut config = spec::container_config(&self.pod, c, attempt, envs, mounts)
            .map_err(|e| e.to_string())?;
        self.complete_security_context(c, &mut config).await?;
        // Requests and limits become the container's cgroup settings (enforced by containerd).
        let memory =
            kiln_common::quantity::parse(&self.cfg.allocatable.memory).map_or(0, |m| m.0 / 1000);
        if let Some(linux) = config.linux.as_mut() {
            linux.resources = Some(crate::runtime::cri::resources::linux_resources(
                &self.pod, c, memory,
            ));
        }
        self.ephemeral_namespaces(i, &mut config);
        Ok(config)
    }
}

/// The bound on a postStart hook (see [`PodWorker::post_start`]).
const POST_START_LIMIT: Duration = Duration::from_secs(120);
