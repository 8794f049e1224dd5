//! The worker's side of [`super::super::security_context`] and [`super::super::image_pull`]: a
//! container's image is pulled with the pod's image pull secrets, and before the container is created
//! its image's user is read (CRI ImageStatus), runAsNonRoot checked against it and the security context
//! completed. A child of [`super`] to use the worker's private state.

use super::*;
use crate::runtime::cri::image_pull;
use crate::runtime::cri::security_context::{self, Seccomp};

impl PodWorker {
    /// Pulls `image` with the credentials of the pod's image pull secrets that match it (upstream's
    /// kuberuntime PullImage); secrets that cannot be read are named in a warning on the pod.
    pub(super) async fn pull_image(&self, image: &str) -> Result<String, image_pull::PullError> {
        let (secrets, failed) = image_pull::fetch_secrets(&self.pod, self.objects.as_deref()).await;
        if !failed.is_empty() {
            self.event(
                None,
                EventType::Warning,
                image_pull::REASON_FAILED_SECRET,
                image_pull::failed_secrets_message(&failed),
            );
        }
        image_pull::pull(self.cri.as_ref(), image, &secrets, &self.sandbox_config).await
    }

    /// Reads the image's user, refuses a root container under runAsNonRoot and completes `config`'s
    /// security context (capabilities, seccomp, masked paths, the image's user); an error is the
    /// CreateContainerConfigError message, as upstream's generateContainerConfig.
    pub(super) async fn complete_security_context(
        &self,
        c: &Container,
        config: &mut cri::ContainerConfig,
    ) -> Result<(), String> {
        let image = c.image.as_deref().unwrap_or_default();
        let user = self
            .cri
            .image_user(image)
            .await
            .map_err(|e| e.to_string())?;
        security_context::verify_run_as_non_root(&self.pod, c, &user, &self.pod_desc())
            .map_err(|e| e.to_string())?;
        let linux = config.linux.get_or_insert_with(Default::default);
        let sc = linux.security_context.get_or_insert_with(Default::default);
        security_context::complete_container(
            &self.pod,
            c,
            &user,
            &Seccomp::node(&self.cfg.pods_root),
            sc,
        )
        .map_err(|e| e.to_string())
    }
}

#[cfg(test)]
#[path = "worker_security_tests.rs"]
mod tests;
