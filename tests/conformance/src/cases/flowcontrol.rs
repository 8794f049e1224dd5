//! sig-api-machinery "API priority and fairness" API-operations entries: FlowSchema and
//! PriorityLevelConfiguration through discovery, create, get, list, watch, patch, update, /status
//! (get, patch, update), delete and deletecollection. Both run one script ([`Script`]) on their
//! kind; what differs is the object and the spec fields the patch and update change.
//!
//! The objects are cluster-scoped: their names come from `generateName` and they carry the case's
//! namespace as a label value (upstream uses a random one), and whatever the script's outcome the
//! collection is deleted at the end.

use std::fmt::Debug;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::flowcontrol::v1::{FlowSchema, PriorityLevelConfiguration};
use k8s_openapi::ClusterResourceScope;
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};

use super::api_ops::{group_discovery, update_with_retry, Kind};
use super::{case, Case};
use crate::ctx::{from_json, Ctx};
use crate::error::{CaseError, CaseResult};
use crate::{must, must_eq};

pub const CASES: &[Case] = &[
    case!(
        "[sig-api-machinery] API priority and fairness should support FlowSchema API operations [Conformance]",
        "apf",
        flowschema_api
    ),
    case!(
        "[sig-api-machinery] API priority and fairness should support PriorityLevelConfiguration API operations [Conformance]",
        "apf",
        priority_level_api
    ),
];

const GROUP: &str = "flowcontrol.apiserver.k8s.io";
/// Upstream's wait.ForeverTestTimeout for the watch.
const WATCH_WAIT: Duration = Duration::from_secs(30);

/// One kind's run of the script.
struct Script {
    plural: &'static str,
    label_key: &'static str,
    generate_name: &'static str,
    spec: Value,
    /// Merged into `spec` by the patch; `patched` is then read at that pointer.
    patch_spec: Value,
    patched: (&'static str, Value),
    /// Written into the spec by the update; `updated` is then read at that pointer.
    update_spec: (&'static str, Value),
}

/// FlowSchema API: flowcontrol.apiserver.k8s.io MUST be in /apis, v1 in
/// /apis/flowcontrol.apiserver.k8s.io, flowschemas and flowschemas/status in its v1 document; the
/// resource MUST support create, get, list, watch, update, patch, delete and deletecollection.
async fn flowschema_api(ctx: &Ctx) -> CaseResult {
    let script = Script {
        plural: "flowschemas",
        label_key: "example-e2e-fs-label",
        generate_name: "e2e-example-fs-",
        spec: json!({
            "matchingPrecedence": 10000,
            "priorityLevelConfiguration": {"name": "global-default"},
            "distinguisherMethod": {"type": "ByUser"},
            "rules": [{
                "subjects": [{"kind": "User", "user": {"name": "example-e2e-non-existent-user"}}],
                "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}]
            }]
        }),
        patch_spec: json!({"matchingPrecedence": 9999}),
        patched: ("/spec/matchingPrecedence", json!(9999)),
        update_spec: ("/spec/matchingPrecedence", json!(9000)),
    };
    script.run::<FlowSchema>(ctx).await
}

/// PriorityLevelConfiguration API: as for FlowSchema, with prioritylevelconfigurations and
/// prioritylevelconfigurations/status.
async fn priority_level_api(ctx: &Ctx) -> CaseResult {
    let script = Script {
        plural: "prioritylevelconfigurations",
        label_key: "example-e2e-pl-label",
        generate_name: "e2e-example-pl-",
        spec: json!({
            "type": "Limited",
            "limited": {"nominalConcurrencyShares": 2, "limitResponse": {"type": "Reject"}}
        }),
        patch_spec: json!({"limited": {"nominalConcurrencyShares": 4}}),
        patched: ("/spec/limited/nominalConcurrencyShares", json!(4)),
        update_spec: ("/spec/limited/nominalConcurrencyShares", json!(6)),
    };
    script.run::<PriorityLevelConfiguration>(ctx).await
}

fn to_json<K: Serialize>(o: &K) -> Value {
    serde_json::to_value(o).unwrap_or(Value::Null)
}

fn resource_version<K: Resource>(o: &K) -> CaseResult<u128> {
    let rv = o.meta().resource_version.clone().unwrap_or_default();
    rv.parse()
        .map_err(|_| CaseError::Failed(format!("resourceVersion {rv:?} is not a valid one")))
}

fn has_condition(o: &Value, type_: &str) -> bool {
    o.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| cs.iter().any(|c| c["type"] == type_))
}

impl Script {
    async fn run<K>(&self, ctx: &Ctx) -> CaseResult
    where
        K: Resource<Scope = ClusterResourceScope, DynamicType = ()>
            + Clone
            + Debug
            + DeserializeOwned
            + Serialize
            + Send
            + Sync
            + 'static,
    {
        self.discovery(ctx).await?;
        let api: Api<K> = ctx.all();
        let selector = format!("{}={}", self.label_key, ctx.ns);
        let lp = ListParams::default().labels(&selector);
        let outcome = self.steps(ctx, &api, &lp).await;
        let _ = api.delete_collection(&DeleteParams::default(), &lp).await;
        outcome
    }

    /// /apis lists the group with v1, the group's document lists v1, and v1 lists the resource
    /// and its status subresource.
    async fn discovery(&self, ctx: &Ctx) -> CaseResult {
        let status = format!("{}/status", self.plural);
        group_discovery(ctx, GROUP, "v1", &[self.plural, &status]).await
    }

    async fn steps<K>(&self, ctx: &Ctx, api: &Api<K>, lp: &ListParams) -> CaseResult
    where
        K: Resource<Scope = ClusterResourceScope, DynamicType = ()>
            + Clone
            + Debug
            + DeserializeOwned
            + Serialize
            + Send
            + Sync
            + 'static,
    {
        let template: K = from_json(json!({
            "apiVersion": format!("{GROUP}/v1"),
            "kind": K::kind(&()),
            "metadata": {"generateName": self.generate_name, "labels": {self.label_key: ctx.ns}},
            "spec": self.spec,
        }))?;
        let pp = PostParams::default();
        api.create(&pp, &template).await?;
        api.create(&pp, &template).await?;
        let created = api.create(&pp, &template).await?;
        let name = created.name_any();

        let read = api.get(&name).await?;
        must_eq!(read.uid(), created.uid(), "the UID read back");
        resource_version(&read)?;

        let list = api.list(lp).await?;
        must_eq!(list.items.len(), 3, "filtered list should have 3 items");
        let rv = list.metadata.resource_version.unwrap_or_default();
        let wp = WatchParams::default().labels(lp.label_selector.as_deref().unwrap_or(""));
        let mut watch = api.watch(&wp, &rv).await?.boxed();

        let patched = api
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({
                    "metadata": {"annotations": {"patched": "true"}},
                    "spec": self.patch_spec,
                })),
            )
            .await?;
        let pj = to_json(&patched);
        must_eq!(
            pj.pointer("/metadata/annotations/patched"),
            Some(&json!("true")),
            "patched object should have the applied annotation"
        );
        must_eq!(
            pj.pointer(self.patched.0),
            Some(&self.patched.1),
            "patched object should have the applied spec"
        );
        must!(
            resource_version(&patched)? > resource_version(&created)?,
            "patched object should have a larger resource version"
        );

        let updated = update_json(api, &name, false, |o| {
            o["metadata"]["annotations"]["updated"] = json!("true");
            if let Some(at) = o.pointer_mut(self.update_spec.0) {
                *at = self.update_spec.1.clone();
            }
        })
        .await?;
        let uj = to_json(&updated);
        must_eq!(
            uj.pointer("/metadata/annotations/updated"),
            Some(&json!("true")),
            "updated object should have the applied annotation"
        );
        must_eq!(
            uj.pointer(self.update_spec.0),
            Some(&self.update_spec.1),
            "updated object should have the applied spec"
        );

        // Every event until the patched annotation shows MUST be MODIFIED.
        loop {
            let ev = tokio::time::timeout(WATCH_WAIT, watch.try_next())
                .await
                .map_err(|_| CaseError::Failed("timed out waiting for watch event".into()))??;
            match ev {
                Some(WatchEvent::Modified(o)) => {
                    if to_json(&o).pointer("/metadata/annotations/patched") == Some(&json!("true"))
                    {
                        break;
                    }
                }
                Some(WatchEvent::Bookmark(_)) => {}
                Some(other) => {
                    return Err(CaseError::Failed(format!(
                        "expected a MODIFIED event, got {other:?}"
                    )))
                }
                None => return Err(CaseError::Failed("watch channel should not close".into())),
            }
        }
        drop(watch);

        let raw = ctx
            .kubectl(&[
                "get",
                "--raw",
                &format!("/apis/{GROUP}/v1/{}/{name}/status", self.plural),
            ])
            .await?;
        let status: Value = serde_json::from_str(&raw).map_err(|source| CaseError::Json {
            what: format!("{}/{name}/status", self.plural),
            source,
        })?;
        must_eq!(
            (
                status["apiVersion"].as_str(),
                status["kind"].as_str(),
                status["metadata"]["uid"].as_str()
            ),
            (
                Some(format!("{GROUP}/v1").as_str()),
                Some(K::kind(&()).as_ref()),
                created.uid().as_deref()
            ),
            "the object read through /status"
        );

        let status_patched = api
            .patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"conditions": [
                    {"type": "PatchStatusFailed", "status": "False", "reason": "e2e"}
                ]}})),
            )
            .await?;
        must!(
            has_condition(&to_json(&status_patched), "PatchStatusFailed"),
            "the /status patch's condition is missing: {status_patched:?}"
        );
        let status_updated = update_json(api, &name, true, |o| {
            let condition = json!({"type": "StatusUpdateFailed", "status": "False",
                    "reason": "E2E", "message": "Set from an e2e test"});
            match o
                .pointer_mut("/status/conditions")
                .and_then(Value::as_array_mut)
            {
                Some(cs) => cs.push(condition),
                None => o["status"]["conditions"] = json!([condition]),
            }
        })
        .await?;
        must!(
            has_condition(&to_json(&status_updated), "StatusUpdateFailed"),
            "the /status update's condition is missing: {status_updated:?}"
        );

        api.delete(&name, &DeleteParams::default()).await?;
        match api.get_opt(&name).await? {
            None => {}
            Some(o) => return Err(CaseError::Failed(format!("expected 404, got {o:?}"))),
        }
        must_eq!(
            api.list(lp).await?.items.len(),
            2,
            "filtered list should have 2 items"
        );
        api.delete_collection(&DeleteParams::default(), lp).await?;
        must_eq!(
            api.list(lp).await?.items.len(),
            0,
            "filtered list should have 0 items"
        );
        Ok(())
    }
}

/// [`update_with_retry`] with the change made on the object's JSON.
async fn update_json<K: Kind>(
    api: &Api<K>,
    name: &str,
    status: bool,
    change: impl Fn(&mut Value),
) -> CaseResult<K> {
    update_with_retry(api, name, status, |o| {
        let mut v = to_json(o);
        change(&mut v);
        if let Ok(changed) = serde_json::from_value(v) {
            *o = changed;
        }
    })
    .await
}
