//! The pod's sandbox: seen as a sync begins ([`pod_plan::SandboxSeen`]), made (the pause image pulled
//! first, the RuntimeClass's handler asked for, the pod's cgroup prepared; beside the volumes for a new
//! pod), killed and made again when it is lost. A child of the worker to use its private state.

use super::*;

impl PodWorker {
    /// What CRI says of the pod's sandbox.
    pub(super) async fn observe_sandbox(&self) -> SandboxSeen {
        let Some(sb) = &self.sandbox_id else {
            return SandboxSeen::Absent;
        };
        match self.cri.pod_sandbox_status(sb).await {
            Ok(s) if s.ready => SandboxSeen::Ready,
            Ok(_) => SandboxSeen::NotReady,
            Err(e) if e.is_not_found() => SandboxSeen::Gone,
            Err(e) => {
                tracing::warn!(pod = %self.key, error = %e, "pod sandbox status");
                SandboxSeen::Unknown
            }
        }
    }

    /// A new pod's volumes and its sandbox, which do not depend on each other, side by side (the first
    /// sync costs the slower of the two, not their sum). False: the pod cannot go on this sync.
    pub(super) async fn set_up_beside_sandbox(&mut self, now: Instant) -> bool {
        let objects = self.objects.clone();
        let prepared = match self.runtime_handler().await {
            Ok(h) => self.prepare_pod().map(|()| h),
            Err(e) => Err(e),
        };
        let (cri, cfg, config, key) = (
            self.cri.as_ref(),
            &self.cfg,
            &self.sandbox_config,
            &self.key,
        );
        let host_network = self.host_network;
        let (volumes, sandbox) = tokio::join!(
            self.volumes.set_up(objects.as_deref(), unix_now()),
            async move {
                let handler = prepared?;
                new_sandbox(cri, cfg, config, &handler, host_network, key).await
            },
        );
        match sandbox {
            Ok((id, ip)) => self.sandbox_ready(id, ip),
            Err(message) => self.sandbox_failed(message),
        }
        match volumes {
            Ok(()) => self.next_volume_refresh = Some(now + VOLUME_RESYNC),
            Err(e) => {
                self.volumes_failed(e);
                return false;
            }
        }
        self.sandbox_id.is_some()
    }

    /// Makes the pod's sandbox (its volumes are set up). False: it failed, the pod waits in
    /// ContainerCreating and the next sync tries again.
    pub(super) async fn create_sandbox(&mut self) -> bool {
        let handler = match self.runtime_handler().await {
            Ok(h) => h,
            Err(message) => {
                self.sandbox_failed(message);
                return false;
            }
        };
        if let Err(message) = self.prepare_pod() {
            self.sandbox_failed(message);
            return false;
        }
        let made = new_sandbox(
            self.cri.as_ref(),
            &self.cfg,
            &self.sandbox_config,
            &handler,
            self.host_network,
            &self.key,
        )
        .await;
        match made {
            Ok((id, ip)) => {
                self.sandbox_ready(id, ip);
                true
            }
            Err(message) => {
                self.sandbox_failed(message);
                false
            }
        }
    }

    /// The CRI handler of the pod's RuntimeClass ("" without one), read each time a sandbox is
    /// made, as upstream's runtimeClassManager; the error is upstream's sandbox failure text.
    pub(super) async fn runtime_handler(&self) -> Result<String, String> {
        let Some(class) = &self.runtime_class else {
            return Ok(String::new());
        };
        let not_found = || format!("runtimeclass.node.k8s.io {class:?} not found");
        let Some(objects) = &self.objects else {
            return Err(not_found());
        };
        match objects.runtime_handler(class).await {
            Ok(Some(h)) => Ok(h),
            Ok(None) => Err(not_found()),
            Err(e) => Err(format!("failed to lookup RuntimeClass {class}: {e}")),
        }
    }

    /// The sandbox died (its pause process, or the node's network for it): remove it with its containers;
    /// the next step makes a new one, and the containers restart per restartPolicy (their old ids are gone).
    pub(super) async fn drop_sandbox(&mut self, id: &str, why: &str) {
        tracing::warn!(pod = %self.key, sandbox = %id, why, "pod sandbox lost; recreating it");
        self.event(
            None,
            EventType::Normal,
            "SandboxChanged",
            "Pod sandbox changed, it will be killed and re-created.".into(),
        );
        let _ = self.cri.stop_pod_sandbox(id).await;
        if let Err(e) = self.cri.remove_pod_sandbox(id).await {
            if !e.is_not_found() {
                tracing::warn!(pod = %self.key, sandbox = %id, error = %e, "removing lost sandbox");
            }
        }
        self.sandbox_id = None;
        self.pod_ip = None;
        if let Some(m) = self.sandbox_config.metadata.as_mut() {
            m.attempt += 1;
        }
        // A new sandbox runs the init containers again before app containers restart (upstream).
        if self.ctrs[self.n_init..].iter().any(|c| !c.done) {
            self.initialized = false;
            for c in &mut self.ctrs[..self.n_init] {
                c.done = false;
                c.id = None;
                c.previous = None;
                c.ready = false;
                c.state = waiting("PodInitializing", None);
            }
            if self.n_init > 0 {
                // Their containers went with the sandbox; they restart (per policy) after init.
                for c in self.ctrs[self.n_init..].iter_mut().filter(|c| !c.done) {
                    c.ready = false;
                    c.state = waiting("PodInitializing", None);
                }
            }
        }
    }

    pub(super) fn sandbox_ready(&mut self, id: String, ip: Option<String>) {
        tracing::info!(pod = %self.key, sandbox = %id, ip = ?ip, "pod sandbox running");
        self.pod_ip = ip;
        self.sandbox_id = Some(id);
    }

    /// The pod waits in ContainerCreating; the next sync tries again.
    pub(super) fn sandbox_failed(&mut self, message: String) {
        tracing::warn!(pod = %self.key, error = %message, "creating pod sandbox");
        let same = matches!(&self.ctrs[0].state, ContainerState::Waiting { message: Some(m), .. } if *m == message);
        if !same {
            self.event(
                None,
                EventType::Warning,
                "FailedCreatePodSandBox",
                format!("Failed to create pod sandbox: {message}"),
            );
        }
        for c in self.ctrs.iter_mut().filter(|c| c.id.is_none()) {
            c.state = waiting("ContainerCreating", Some(message.clone()));
        }
    }
}

/// Pulls the pause image if missing and runs the pod's sandbox; returns its id and the pod's IP (the
/// node's with hostNetwork).
async fn new_sandbox(
    cri: &dyn CriApi,
    cfg: &WorkerConfig,
    config: &cri::PodSandboxConfig,
    handler: &str,
    host_network: bool,
    pod: &str,
) -> Result<(String, Option<String>), String> {
    let pause = &cfg.pause_image;
    let present = cri.image_present(pause).await.map_err(|e| e.to_string())?;
    if !present {
        tracing::info!(%pod, image = %pause, "pulling pause image");
        cri.pull_image(pause, config)
            .await
            .map_err(|e| e.to_string())?;
    }
    let id = cri
        .run_pod_sandbox(config, handler)
        .await
        .map_err(|e| e.to_string())?;
    let ip = if host_network {
        Some(cfg.node_ip.clone())
    } else {
        match cri.pod_sandbox_status(&id).await {
            Ok(s) => s.ip,
            Err(e) => {
                // The sandbox runs but is unusable without its address: remove it, try again later.
                let _ = cri.stop_pod_sandbox(&id).await;
                let _ = cri.remove_pod_sandbox(&id).await;
                return Err(e.to_string());
            }
        }
    };
    Ok((id, ip))
}
