//! serviceaccount: a `default` ServiceAccount in every active namespace, created with the namespace
//! and recreated if deleted (upstream's serviceaccount controller). Terminating namespaces are
//! left alone: their content is going.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kube::api::{Api, ObjectMeta, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;

use crate::context::Context;

pub const DEFAULT_NAME: &str = "default";

#[derive(Debug, thiserror::Error)]
pub enum ServiceAccountError {
    #[error("ensuring {namespace}/default: {source}")]
    Ensure {
        namespace: String,
        source: kube::Error,
    },
}

/// Active: not being deleted (namespaces without a phase yet count as active).
pub fn active(ns: &Namespace) -> bool {
    ns.metadata.deletion_timestamp.is_none()
        && ns.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Terminating")
}

pub fn default_account() -> ServiceAccount {
    ServiceAccount {
        metadata: ObjectMeta {
            name: Some(DEFAULT_NAME.into()),
            ..Default::default()
        },
        ..Default::default()
    }
}

pub async fn run(ctx: Context) {
    let namespaces: Api<Namespace> = Api::all(ctx.client.clone());
    let accounts: Api<ServiceAccount> = Api::all(ctx.client.clone());
    Controller::new(namespaces, watcher::Config::default())
        .watches(
            accounts,
            watcher::Config::default().fields(&format!("metadata.name={DEFAULT_NAME}")),
            |sa| {
                sa.metadata
                    .namespace
                    .map(|ns| ObjectRef::<Namespace>::new(&ns))
            },
        )
        .run(reconcile, error_policy, Arc::new(ctx))
        .for_each(|_| async {})
        .await;
}

async fn reconcile(ns: Arc<Namespace>, ctx: Arc<Context>) -> Result<Action, ServiceAccountError> {
    if !active(&ns) {
        return Ok(Action::await_change());
    }
    let name = ns.metadata.name.clone().unwrap_or_default();
    let api: Api<ServiceAccount> = Api::namespaced(ctx.client.clone(), &name);
    let err = |source| ServiceAccountError::Ensure {
        namespace: name.clone(),
        source,
    };
    if api.get_opt(DEFAULT_NAME).await.map_err(err)?.is_some() {
        return Ok(Action::await_change());
    }
    match api.create(&PostParams::default(), &default_account()).await {
        Ok(_) => tracing::info!(namespace = %name, "created the default service account"),
        // Someone made it meanwhile, or the namespace began terminating.
        Err(kube::Error::Api(e)) if e.code == 409 || e.code == 403 || e.code == 404 => {}
        Err(e) => return Err(err(e)),
    }
    Ok(Action::await_change())
}

fn error_policy(_: Arc<Namespace>, err: &ServiceAccountError, _: Arc<Context>) -> Action {
    tracing::warn!(error = %err, "serviceaccount");
    Action::requeue(Duration::from_secs(2))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::NamespaceStatus;

    #[test]
    fn only_active_namespaces_get_one() {
        let mut ns = Namespace::default();
        assert!(active(&ns));
        ns.status = Some(NamespaceStatus {
            phase: Some("Terminating".into()),
            ..Default::default()
        });
        assert!(!active(&ns));
        assert_eq!(default_account().metadata.name.as_deref(), Some("default"));
    }
}
