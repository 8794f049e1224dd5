//! horizontal-pod-autoscaling: every 15 s (`--horizontal-pod-autoscaler-sync-period`) each
//! HorizontalPodAutoscaler's target is read through its `/scale` subresource, the pods its
//! selector picks and their PodMetrics (metrics.k8s.io, through the API server, as upstream's
//! metrics client reads them) are listed, and [`crate::hpa_plan::plan`] decides; this file does the
//! calls: the scale update, the events and the status.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kiln_common::events::{object_reference, EventRecorder};
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use serde_json::{json, Value};

use crate::context::Context;
use crate::hpa_behavior::History;
use crate::hpa_plan::{plan, set_condition, Observed, ScaleView};

pub const SYNC_PERIOD: Duration = Duration::from_secs(15);

#[derive(Debug, thiserror::Error)]
pub enum HpaError {
    #[error("{action} for HorizontalPodAutoscaler {hpa}: {source}")]
    Api {
        action: &'static str,
        hpa: String,
        source: kube::Error,
    },
}

/// Kinds with a `/scale` subresource kiln serves, so the common targets need no discovery.
const SCALABLE: &[(&str, &str, &str)] = &[
    ("apps", "Deployment", "deployments"),
    ("apps", "ReplicaSet", "replicasets"),
    ("apps", "StatefulSet", "statefulsets"),
    ("", "ReplicationController", "replicationcontrollers"),
];

struct Controller {
    ctx: Context,
    /// Events come from `horizontal-pod-autoscaler`, as upstream's.
    recorder: EventRecorder,
    /// Recommendations and scale events per HPA (`ns/name`), as upstream keeps them in memory.
    histories: Mutex<HashMap<String, History>>,
}

pub async fn run(ctx: Context) {
    let c = Controller {
        recorder: EventRecorder::new(
            ctx.client.clone(),
            "horizontal-pod-autoscaler",
            &kiln_common::client::process_identity(),
        ),
        ctx,
        histories: Mutex::new(HashMap::new()),
    };
    loop {
        c.sync_all().await;
        tokio::time::sleep(SYNC_PERIOD).await;
    }
}

fn now_ms() -> i64 {
    Timestamp::now().as_millisecond()
}

impl Controller {
    async fn sync_all(&self) {
        let api: Api<HorizontalPodAutoscaler> = Api::all(self.ctx.client.clone());
        let list = match api.list(&ListParams::default()).await {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(error = %e, "listing HorizontalPodAutoscalers");
                return;
            }
        };
        let keys: Vec<String> = list.items.iter().map(key).collect();
        self.histories
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|k, _| keys.contains(k));
        for hpa in list.items {
            if hpa.metadata.deletion_timestamp.is_some() {
                continue;
            }
            if let Err(e) = self.reconcile(hpa).await {
                tracing::warn!(error = %e, "horizontal-pod-autoscaling");
            }
        }
    }

    async fn resource_of(&self, api_version: &str, kind: &str) -> Result<ApiResource, String> {
        let (group, version) = match api_version.split_once('/') {
            Some((g, v)) => (g, v),
            None => ("", api_version),
        };
        let gvk = GroupVersionKind::gvk(group, version, kind);
        if let Some((_, _, plural)) = SCALABLE.iter().find(|(g, k, _)| *g == group && *k == kind) {
            return Ok(ApiResource::from_gvk_with_plural(&gvk, plural));
        }
        kube::discovery::pinned_kind(&self.ctx.client, &gvk)
            .await
            .map(|(ar, _)| ar)
            .map_err(|e| e.to_string())
    }

    async fn record(
        &self,
        hpa: &HorizontalPodAutoscaler,
        warning: bool,
        reason: &str,
        message: &str,
    ) {
        let type_ = if warning { "Warning" } else { "Normal" };
        if let Err(e) = self
            .recorder
            .record(&object_reference(hpa), type_, reason, message)
            .await
        {
            tracing::debug!(error = %e, "recording an HPA event");
        }
    }

    async fn reconcile(&self, mut hpa: HorizontalPodAutoscaler) -> Result<(), HpaError> {
        let ns = hpa.metadata.namespace.clone().unwrap_or_default();
        let original = hpa.status.clone();
        let target = hpa
            .spec
            .as_ref()
            .map(|s| s.scale_target_ref.clone())
            .unwrap_or_default();
        let api_version = target.api_version.clone().unwrap_or_default();
        let scale = match self.resource_of(&api_version, &target.kind).await {
            Ok(ar) => {
                let api: Api<DynamicObject> =
                    Api::namespaced_with(self.ctx.client.clone(), &ns, &ar);
                api.get_scale(&target.name)
                    .await
                    .map(|s| (api, s))
                    .map_err(|e| match e {
                        kube::Error::Api(s) => s.message,
                        other => other.to_string(),
                    })
            }
            Err(e) => Err(e),
        };
        let (target_api, scale) = match scale {
            Ok(v) => v,
            Err(e) => {
                self.record(&hpa, true, "FailedGetScale", &e).await;
                let mut status = hpa.status.clone().unwrap_or_default();
                let mut conditions = status.conditions.take().unwrap_or_default();
                set_condition(
                    &mut conditions,
                    "AbleToScale",
                    false,
                    "FailedGetScale",
                    &format!(
                        "the HPA controller was unable to get the target's current scale: {e}"
                    ),
                    &Time(Timestamp::now()),
                );
                status.conditions = Some(conditions);
                hpa.status = Some(status);
                return self.write_status(&hpa, &original).await;
            }
        };
        let view = ScaleView {
            spec_replicas: scale.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0),
            status_replicas: scale.status.as_ref().map(|s| s.replicas).unwrap_or(0),
            selector: scale
                .status
                .as_ref()
                .and_then(|s| s.selector.clone())
                .unwrap_or_default(),
        };
        let (pods, metrics) = if view.selector.is_empty() {
            (Ok(Vec::new()), Ok(Vec::new()))
        } else {
            self.observe(&ns, &view.selector).await
        };
        let observed = Observed {
            pods: pods.as_deref().map_err(Clone::clone),
            metrics: metrics.as_deref().map_err(Clone::clone),
        };
        let hpa_key = key(&hpa);
        let outcome = {
            let mut histories = self.histories.lock().unwrap_or_else(|p| p.into_inner());
            let history = histories.entry(hpa_key.clone()).or_default();
            plan(&hpa, &view, &observed, history, now_ms())
        };
        for e in &outcome.events {
            self.record(&hpa, e.warning, &e.reason, &e.message).await;
        }
        let mut status = outcome.status.clone();
        if let Some(n) = outcome.rescale {
            let patch = json!({"spec": {"replicas": n}});
            match target_api
                .patch_scale(&target.name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => {
                    let mut conditions = status.conditions.take().unwrap_or_default();
                    set_condition(
                        &mut conditions,
                        "AbleToScale",
                        true,
                        "SucceededRescale",
                        &format!("the HPA controller was able to update the target scale to {n}"),
                        &Time(Timestamp::now()),
                    );
                    status.conditions = Some(conditions);
                    let message = format!("New size: {n}; reason: {}", outcome.reason);
                    tracing::info!(hpa = %hpa_key, %message, "rescaled");
                    self.record(&hpa, false, "SuccessfulRescale", &message)
                        .await;
                }
                Err(e) => {
                    let err = match e {
                        kube::Error::Api(s) => s.message,
                        other => other.to_string(),
                    };
                    self.record(
                        &hpa,
                        true,
                        "FailedRescale",
                        &format!("New size: {n}; reason: {}; error: {err}", outcome.reason),
                    )
                    .await;
                    let mut conditions = status.conditions.take().unwrap_or_default();
                    set_condition(
                        &mut conditions,
                        "AbleToScale",
                        false,
                        "FailedUpdateScale",
                        &format!("the HPA controller was unable to update the target scale: {err}"),
                        &Time(Timestamp::now()),
                    );
                    status.conditions = Some(conditions);
                    // Nothing was scaled: keep the last scale time and desired count.
                    let before = original.clone().unwrap_or_default();
                    status.last_scale_time = before.last_scale_time;
                    status.desired_replicas = before.desired_replicas;
                }
            }
        }
        hpa.status = Some(status);
        self.write_status(&hpa, &original).await?;
        if let Some(e) = outcome.error {
            tracing::debug!(hpa = %hpa_key, error = %e, "horizontal-pod-autoscaling");
        }
        Ok(())
    }

    /// The target's pods and their PodMetrics, both by the scale's selector.
    async fn observe(
        &self,
        ns: &str,
        selector: &str,
    ) -> (Result<Vec<Pod>, String>, Result<Vec<Value>, String>) {
        let lp = ListParams::default().labels(selector);
        let pods = Api::<Pod>::namespaced(self.ctx.client.clone(), ns)
            .list(&lp)
            .await
            .map(|l| l.items)
            .map_err(|e| e.to_string());
        let gvk = GroupVersionKind::gvk("metrics.k8s.io", "v1beta1", "PodMetrics");
        let ar = ApiResource::from_gvk_with_plural(&gvk, "pods");
        let metrics = Api::<DynamicObject>::namespaced_with(self.ctx.client.clone(), ns, &ar)
            .list(&lp)
            .await
            .map(|l| {
                l.items
                    .into_iter()
                    .filter_map(|o| serde_json::to_value(o).ok())
                    .collect()
            })
            .map_err(|e| match e {
                kube::Error::Api(s) => s.message,
                other => other.to_string(),
            });
        (pods, metrics)
    }

    /// UpdateStatus when the status changed (upstream's updateStatusIfNeeded).
    async fn write_status(
        &self,
        hpa: &HorizontalPodAutoscaler,
        original: &Option<k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscalerStatus>,
    ) -> Result<(), HpaError> {
        if &hpa.status == original {
            return Ok(());
        }
        let ns = hpa.metadata.namespace.clone().unwrap_or_default();
        let name = hpa.metadata.name.clone().unwrap_or_default();
        let api: Api<HorizontalPodAutoscaler> = Api::namespaced(self.ctx.client.clone(), &ns);
        match api.replace_status(&name, &PostParams::default(), hpa).await {
            Ok(_) => Ok(()),
            // Changed or gone meanwhile: the next sync starts from the new object.
            Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => Ok(()),
            Err(source) => Err(HpaError::Api {
                action: "updating status",
                hpa: format!("{ns}/{name}"),
                source,
            }),
        }
    }
}

fn key(hpa: &HorizontalPodAutoscaler) -> String {
    format!(
        "{}/{}",
        hpa.metadata.namespace.as_deref().unwrap_or_default(),
        hpa.metadata.name.as_deref().unwrap_or_default()
    )
}
