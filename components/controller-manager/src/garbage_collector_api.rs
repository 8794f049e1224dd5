//! The collector's side effects through the API server: owners looked up by kind, name and UID;
//! deletions with a UID precondition; owner references and finalizers changed by merge patches
//! guarded by the object's resourceVersion (read just before, retried on a conflict), as upstream's
//! JSON merge patches are.

use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{
    Api, DeleteParams, DynamicObject, Patch, PatchParams, Preconditions, PropagationPolicy,
};
use serde_json::json;

use super::graph::Node;
use super::process::{GcApi, OwnerState, Propagation};
use super::rate::RateLimiter;
use super::{GcError, Kind, FOREGROUND};

/// Tries of a read-modify-patch that keeps meeting newer versions of the object.
const CONFLICT_RETRIES: usize = 5;

pub struct KubeApi {
    pub client: kube::Client,
    pub kinds: Arc<Vec<Kind>>,
    /// Every request waits for a token first.
    pub limiter: RateLimiter,
}

fn not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

fn conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

impl KubeApi {
    fn api_for(&self, node: &Node) -> Api<DynamicObject> {
        let kind = &self.kinds[node.kind];
        match &node.namespace {
            Some(ns) if kind.namespaced => {
                Api::namespaced_with(self.client.clone(), ns, &kind.resource)
            }
            _ => Api::all_with(self.client.clone(), &kind.resource),
        }
    }

    /// The object as it is now, if it is still the one with the node's UID.
    async fn current(&self, node: &Node) -> Result<Option<DynamicObject>, GcError> {
        self.limiter.acquire().await;
        let found = self.api_for(node).get_opt(&node.name).await?;
        Ok(found.filter(|o| o.metadata.uid.as_deref() == Some(node.uid.as_str())))
    }

    /// Patches the object's metadata with `change(current)` (None: nothing to change), guarded
    /// by the resourceVersion it was computed from.
    async fn patch_metadata(
        &self,
        node: &Node,
        change: impl Fn(&DynamicObject) -> Option<serde_json::Value>,
    ) -> Result<(), GcError> {
        let api = self.api_for(node);
        for _ in 0..CONFLICT_RETRIES {
            let Some(now) = self.current(node).await? else {
                return Ok(());
            };
            let Some(mut metadata) = change(&now) else {
                return Ok(());
            };
            metadata["resourceVersion"] = json!(now.metadata.resource_version);
            let patch = json!({ "metadata": metadata });
            self.limiter.acquire().await;
            match api
                .patch(&node.name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => return Ok(()),
                Err(e) if not_found(&e) => return Ok(()),
                Err(e) if conflict(&e) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(GcError::Conflicts {
            name: node.name.clone(),
        })
    }

    /// Sets the object's owner references to `change(current)` when that differs.
    async fn update_owner_references(
        &self,
        node: &Node,
        change: impl Fn(&mut Vec<OwnerReference>),
    ) -> Result<(), GcError> {
        self.patch_metadata(node, |now| {
            let before = now.metadata.owner_references.clone().unwrap_or_default();
            let mut after = before.clone();
            change(&mut after);
            if after == before {
                return None;
            }
            // null removes the field, as an object without owners is written.
            let refs = if after.is_empty() {
                serde_json::Value::Null
            } else {
                json!(after)
            };
            Some(json!({ "ownerReferences": refs }))
        })
        .await
    }
}

impl GcApi for KubeApi {
    async fn owner_state(
        &self,
        dependent: &Node,
        owner: &OwnerReference,
    ) -> Result<Option<OwnerState>, GcError> {
        let (group, _) = owner
            .api_version
            .split_once('/')
            .unwrap_or(("", &owner.api_version));
        let Some(kind) = self
            .kinds
            .iter()
            .find(|k| k.resource.group == group && k.resource.kind == owner.kind)
        else {
            return Ok(None);
        };
        let api: Api<DynamicObject> = match (&dependent.namespace, kind.namespaced) {
            (Some(ns), true) => Api::namespaced_with(self.client.clone(), ns, &kind.resource),
            // A cluster-scoped object cannot have a namespaced owner: that reference is dangling.
            (None, true) => return Ok(Some(OwnerState::Gone)),
            (_, false) => Api::all_with(self.client.clone(), &kind.resource),
        };
        self.limiter.acquire().await;
        let found = api
            .get_opt(&owner.name)
            .await?
            .filter(|f| f.metadata.uid.as_deref() == Some(owner.uid.as_str()));
        Ok(Some(match found {
            None => OwnerState::Gone,
            Some(f)
                if f.metadata.deletion_timestamp.is_some()
                    && f.metadata
                        .finalizers
                        .iter()
                        .flatten()
                        .any(|x| x == FOREGROUND) =>
            {
                OwnerState::Waiting
            }
            Some(_) => OwnerState::Solid,
        }))
    }

    async fn delete(&self, node: &Node, policy: Propagation) -> Result<(), GcError> {
        let params = DeleteParams {
            propagation_policy: Some(match policy {
                Propagation::Background => PropagationPolicy::Background,
                Propagation::Foreground => PropagationPolicy::Foreground,
                Propagation::Orphan => PropagationPolicy::Orphan,
            }),
            preconditions: Some(Preconditions {
                uid: Some(node.uid.clone()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        self.limiter.acquire().await;
        match self.api_for(node).delete(&node.name, &params).await {
            Ok(_) => Ok(()),
            // Gone already, or a new object of that name (the UID precondition failed).
            Err(e) if not_found(&e) || conflict(&e) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    async fn remove_owner_references(&self, node: &Node, owners: &[String]) -> Result<(), GcError> {
        self.update_owner_references(node, |refs| refs.retain(|r| !owners.contains(&r.uid)))
            .await
    }

    async fn unblock_owner_references(&self, node: &Node) -> Result<(), GcError> {
        self.update_owner_references(node, |refs| {
            for r in refs.iter_mut() {
                if r.block_owner_deletion == Some(true) {
                    r.block_owner_deletion = Some(false);
                }
            }
        })
        .await
    }

    async fn remove_finalizer(&self, node: &Node, finalizer: &'static str) -> Result<(), GcError> {
        self.patch_metadata(node, |now| {
            let finalizers = now.metadata.finalizers.clone().unwrap_or_default();
            if !finalizers.iter().any(|f| f == finalizer) {
                return None;
            }
            let keep: Vec<&String> = finalizers.iter().filter(|f| *f != finalizer).collect();
            Some(json!({ "finalizers": keep }))
        })
        .await
    }
}
