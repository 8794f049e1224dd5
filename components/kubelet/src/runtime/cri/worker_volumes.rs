//! The pod's volumes ([`crate::volumes`]): set up once before its containers, the API-backed ones
//! (configMap, secret, projected, downwardAPI) rewritten every [`VOLUME_RESYNC`] and when the pod's
//! metadata changes. A child of the worker to use its private state.

use super::*;

impl PodWorker {
    /// Takes the plan's volume step: sets the volumes up (once; the pod waits in ContainerCreating
    /// until that works) or refreshes the API-backed ones (every [`VOLUME_RESYNC`]). False: not ready
    /// to go on.
    pub(super) async fn sync_volumes(&mut self, step: VolumeStep, now: Instant) -> bool {
        match step {
            VolumeStep::Keep => {}
            VolumeStep::SetUp | VolumeStep::SetUpBesideSandbox => {
                let objects = self.objects.clone();
                if let Err(e) = self.volumes.set_up(objects.as_deref(), unix_now()).await {
                    self.volumes_failed(e);
                    return false;
                }
                self.next_volume_refresh = Some(now + VOLUME_RESYNC);
            }
            VolumeStep::Refresh => {
                self.next_volume_refresh = Some(now + VOLUME_RESYNC);
                self.refresh_volumes().await;
            }
        }
        true
    }

    /// Rewrites the API-backed volumes from the current objects and the pod's current metadata.
    pub(super) async fn refresh_volumes(&mut self) {
        let objects = self.objects.clone();
        match self.volumes.refresh(objects.as_deref(), unix_now()).await {
            Ok(changed) if !changed.is_empty() => {
                tracing::info!(pod = %self.key, volumes = ?changed, "volume contents updated")
            }
            Ok(_) => {}
            // The old contents stay; the next refresh tries again.
            Err(e) => tracing::warn!(pod = %self.key, error = %e, "refreshing volumes"),
        }
    }

    /// The pod waits in ContainerCreating until its volumes can be set up.
    pub(super) fn volumes_failed(&mut self, e: crate::volumes::VolumeError) {
        let message = format!("MountVolume.SetUp failed: {e}");
        tracing::warn!(pod = %self.key, error = %e, "setting up volumes");
        let same = matches!(&self.ctrs[0].state, ContainerState::Waiting { message: Some(m), .. } if *m == message);
        if !same {
            self.event(None, EventType::Warning, "FailedMount", message.clone());
        }
        for c in self.ctrs.iter_mut().filter(|c| c.id.is_none()) {
            c.state = waiting("ContainerCreating", Some(message.clone()));
        }
    }
}
