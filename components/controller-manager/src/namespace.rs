//! namespace: empties a Terminating namespace, then lets it go. Like upstream's namespace
//! controller it finds every namespaced kind through discovery (so kinds added to the apiserver
//! are covered without a list here), deletes the namespace's objects of each kind (deletecollection
//! where served, one by one otherwise), waits until none are left (graceful pods wait for their
//! kubelet, finalizers for their controllers), and then removes the `kubernetes` finalizer from
//! spec.finalizers through namespaces/<name>/finalize; the apiserver deletes the namespace with
//! that write once no finalizer is left.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, ListParams, PostParams};
use kube::discovery::{verbs, ApiCapabilities, Discovery, Scope};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;

use crate::context::Context;

/// The finalizer this controller owns.
pub const FINALIZER: &str = "kubernetes";
/// How soon to look again while objects are still going.
const RECHECK: Duration = Duration::from_secs(1);

#[derive(Debug, thiserror::Error)]
pub enum NamespaceError {
    #[error("discovery: {0}")]
    Discovery(#[source] kube::Error),
    #[error("deleting {resource} in {namespace}: {source}")]
    Delete {
        resource: String,
        namespace: String,
        source: kube::Error,
    },
    #[error("finalizing namespace {namespace}: {source}")]
    Finalize {
        namespace: String,
        source: kube::Error,
    },
}

/// How a kind's objects are deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeleteMode {
    Collection,
    OneByOne,
}

/// Namespaced kinds that can be listed and deleted; everything else is not the namespace's content.
pub fn delete_mode(namespaced: bool, caps_verbs: &[String]) -> Option<DeleteMode> {
    let has = |v: &str| caps_verbs.iter().any(|x| x == v);
    if !namespaced || !has(verbs::LIST) {
        return None;
    }
    if has(verbs::DELETE_COLLECTION) {
        Some(DeleteMode::Collection)
    } else if has(verbs::DELETE) {
        Some(DeleteMode::OneByOne)
    } else {
        None
    }
}

/// Whether the namespace is being deleted and still carries this controller's finalizer.
pub fn needs_cleanup(ns: &Namespace) -> bool {
    ns.metadata.deletion_timestamp.is_some() && spec_finalizers(ns).iter().any(|f| f == FINALIZER)
}

fn spec_finalizers(ns: &Namespace) -> &[String] {
    ns.spec
        .as_ref()
        .and_then(|s| s.finalizers.as_deref())
        .unwrap_or(&[])
}

/// The namespace as the finalize request sends it: spec.finalizers without ours.
pub fn without_finalizer(ns: &Namespace) -> Namespace {
    let mut out = ns.clone();
    let left: Vec<String> = spec_finalizers(ns)
        .iter()
        .filter(|f| f.as_str() != FINALIZER)
        .cloned()
        .collect();
    out.spec.get_or_insert_with(Default::default).finalizers = Some(left);
    out
}

pub async fn run(ctx: Context) {
    let api: Api<Namespace> = Api::all(ctx.client.clone());
    Controller::new(api, watcher::Config::default())
        .run(reconcile, error_policy, Arc::new(ctx))
        .for_each(|_| async {})
        .await;
}

async fn content_kinds(
    client: &kube::Client,
) -> Result<Vec<(ApiResource, DeleteMode)>, NamespaceError> {
    let discovery = Discovery::new(client.clone())
        .run()
        .await
        .map_err(NamespaceError::Discovery)?;
    let mut kinds = Vec::new();
    for group in discovery.groups() {
        for (resource, caps) in group.recommended_resources() {
            let ApiCapabilities {
                scope, operations, ..
            } = &caps;
            if let Some(mode) = delete_mode(*scope == Scope::Namespaced, operations) {
                kinds.push((resource, mode));
            }
        }
    }
    Ok(kinds)
}

/// Deletes what is left of one kind; returns how many objects of it remain.
async fn empty_kind(
    client: &kube::Client,
    ns: &str,
    resource: &ApiResource,
    mode: DeleteMode,
) -> Result<usize, NamespaceError> {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, resource);
    let err = |source| NamespaceError::Delete {
        resource: resource.plural.clone(),
        namespace: ns.to_string(),
        source,
    };
    let present = match api.list(&ListParams::default()).await {
        Ok(list) => list.items,
        // Advertised but not listable per namespace after all: nothing of it to wait for.
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 405 => return Ok(0),
        Err(e) => return Err(err(e)),
    };
    if present.is_empty() {
        return Ok(0);
    }
    let dp = DeleteParams::background();
    match mode {
        DeleteMode::Collection => {
            api.delete_collection(&dp, &ListParams::default())
                .await
                .map_err(err)?;
        }
        DeleteMode::OneByOne => {
            for obj in &present {
                let name = obj.metadata.name.as_deref().unwrap_or("");
                match api.delete(name, &dp).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(e)) if e.code == 404 => {}
                    Err(e) => return Err(err(e)),
                }
            }
        }
    }
    Ok(api
        .list(&ListParams::default())
        .await
        .map_err(err)?
        .items
        .len())
}

async fn reconcile(ns: Arc<Namespace>, ctx: Arc<Context>) -> Result<Action, NamespaceError> {
    if !needs_cleanup(&ns) {
        return Ok(Action::await_change());
    }
    let name = ns.metadata.name.clone().unwrap_or_default();
    let mut remaining = 0;
    for (resource, mode) in content_kinds(&ctx.client).await? {
        remaining += empty_kind(&ctx.client, &name, &resource, mode).await?;
    }
    if remaining > 0 {
        tracing::debug!(namespace = %name, remaining, "namespace content still going");
        return Ok(Action::requeue(RECHECK));
    }
    let api: Api<Namespace> = Api::all(ctx.client.clone());
    match api
        .replace_subresource(
            "finalize",
            &name,
            &PostParams::default(),
            &without_finalizer(&ns),
        )
        .await
    {
        Ok(_) => tracing::info!(namespace = %name, "namespace emptied and finalized"),
        Err(kube::Error::Api(e)) if e.code == 404 => {}
        Err(source) => {
            return Err(NamespaceError::Finalize {
                namespace: name,
                source,
            })
        }
    }
    Ok(Action::await_change())
}

fn error_policy(_: Arc<Namespace>, err: &NamespaceError, _: Arc<Context>) -> Action {
    tracing::warn!(error = %err, "namespace");
    Action::requeue(Duration::from_secs(2))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::NamespaceSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn v(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn which_kinds_are_content() {
        let all = v(&[
            "create",
            "delete",
            "deletecollection",
            "get",
            "list",
            "watch",
        ]);
        assert_eq!(delete_mode(true, &all), Some(DeleteMode::Collection));
        assert_eq!(
            delete_mode(true, &v(&["delete", "get", "list"])),
            Some(DeleteMode::OneByOne)
        );
        assert_eq!(delete_mode(false, &all), None, "cluster-scoped");
        assert_eq!(delete_mode(true, &v(&["create"])), None, "reviews");
        assert_eq!(delete_mode(true, &v(&["get", "list"])), None);
    }

    #[test]
    fn finalizer_handling() {
        let mut ns = Namespace {
            spec: Some(NamespaceSpec {
                finalizers: Some(v(&["kubernetes", "example.com/other"])),
            }),
            ..Default::default()
        };
        assert!(!needs_cleanup(&ns), "not being deleted");
        ns.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
        assert!(needs_cleanup(&ns));
        let out = without_finalizer(&ns);
        assert_eq!(
            out.spec.unwrap().finalizers.unwrap(),
            v(&["example.com/other"])
        );
        let done = without_finalizer(&ns);
        assert!(!needs_cleanup(&done));
    }
}
