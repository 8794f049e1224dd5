//! sig-api-machinery ValidatingAdmissionPolicy entries: a policy bound to the case's namespace
//! (labelled `<namespace>: "true"`, upstream's labelNamespace) MUST deny what its CEL validations
//! (and variables) refuse and let the rest through; ValidatingAdmissionPolicy and its Binding
//! MUST support discovery, create, get, list, watch, patch, update, delete and deletecollection
//! (the policy also get, patch and update of /status).

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams,
    WatchEvent, WatchParams,
};
use kube::ResourceExt;
use rand::Rng;
use serde_json::{json, Value};

use super::api_ops::group_discovery;
use super::{case, Case};
use crate::ctx::{from_json, to_json, Ctx};
use crate::error::{CaseError, CaseResult};
use crate::{must, must_eq};

pub const CASES: &[Case] = &[
    case!(
        "[sig-api-machinery] ValidatingAdmissionPolicy [Privileged:ClusterAdmin] should validate against a Deployment [Conformance]",
        "validating-admission-policy",
        against_deployment
    ),
    case!(
        "[sig-api-machinery] ValidatingAdmissionPolicy [Privileged:ClusterAdmin] should allow expressions to refer variables. [Conformance]",
        "validating-admission-policy",
        with_variables
    ),
    case!(
        "[sig-api-machinery] ValidatingAdmissionPolicy [Privileged:ClusterAdmin] should support ValidatingAdmissionPolicy API operations [Conformance]",
        "validating-admission-policy",
        policy_api
    ),
    case!(
        "[sig-api-machinery] ValidatingAdmissionPolicy [Privileged:ClusterAdmin] should support ValidatingAdmissionPolicyBinding API operations [Conformance]",
        "validating-admission-policy",
        binding_api
    ),
];

const GROUP: &str = "admissionregistration.k8s.io";
/// How long the marker may take to be denied (upstream waits for the test's whole timeout).
const MARKER_WAIT: Duration = Duration::from_secs(60);
/// wait.ForeverTestTimeout.
const FOREVER: Duration = Duration::from_secs(30);

fn resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: GROUP.into(),
        version: "v1".into(),
        api_version: format!("{GROUP}/v1"),
        kind: kind.into(),
        plural: plural.into(),
    }
}

fn policies(ctx: &Ctx) -> Api<DynamicObject> {
    Api::all_with(
        ctx.client.clone(),
        &resource("ValidatingAdmissionPolicy", "validatingadmissionpolicies"),
    )
}

fn bindings(ctx: &Ctx) -> Api<DynamicObject> {
    Api::all_with(
        ctx.client.clone(),
        &resource(
            "ValidatingAdmissionPolicyBinding",
            "validatingadmissionpolicybindings",
        ),
    )
}

/// basicDeployment / basicReplicaSet: `app: nginx`, one nginx container.
fn workload(kind: &str, name: &str, replicas: i32) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": kind,
        "metadata": {"name": name, "labels": {"app": "nginx"}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "nginx"}},
            "template": {
                "metadata": {"labels": {"app": "nginx"}},
                "spec": {"containers": [{"name": "nginx", "image": "nginx:latest"}]},
            },
        },
    })
}

/// A policy as upstream's builder makes it: matching the case's labelled namespace and CREATE
/// and UPDATE of apps/v1 deployments, with `variables` and `validations`.
fn policy(ctx: &Ctx, variables: Value, validations: Value) -> Value {
    json!({
        "apiVersion": format!("{GROUP}/v1"),
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": format!("{}.policy.example.com", ctx.ns)},
        "spec": {
            "matchConstraints": {
                "namespaceSelector": {"matchLabels": {ctx.ns.as_str(): "true"}},
                "resourceRules": [{
                    "operations": ["CREATE", "UPDATE"],
                    "apiGroups": ["apps"], "apiVersions": ["v1"], "resources": ["deployments"],
                }],
            },
            "variables": variables,
            "validations": validations,
        },
    })
}

/// createBinding: the policy bound, with Deny, to namespaces labelled `<namespace>: "true"`.
fn binding(ctx: &Ctx, policy: &str) -> Value {
    json!({
        "apiVersion": format!("{GROUP}/v1"),
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": format!("{}.binding.example.com", ctx.ns)},
        "spec": {
            "policyName": policy,
            "matchResources": {"namespaceSelector": {"matchLabels": {ctx.ns.as_str(): "true"}}},
            "validationActions": ["Deny"],
        },
    })
}

/// Label the namespace, make the policy and its binding, then run the enforcement checks:
/// the marker (one replica) MUST come to be denied as Invalid (422), a Deployment of `replicas`
/// MUST be created, a one-replica ReplicaSet (not matched) MUST be created. The policy and
/// binding are deleted whatever happens.
async fn enforce(ctx: &Ctx, variables: Value, validations: Value, replicas: i32) -> CaseResult {
    ctx.all::<Namespace>()
        .patch(
            &ctx.ns,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {ctx.ns.as_str(): "true"}}})),
        )
        .await?;
    let pp = PostParams::default();
    let made = policies(ctx)
        .create(&pp, &from_json(policy(ctx, variables, validations))?)
        .await?;
    let policy_name = made.name_any();
    let bound = bindings(ctx)
        .create(&pp, &from_json(binding(ctx, &policy_name))?)
        .await;
    let result = match &bound {
        Ok(_) => enforce_checks(ctx, replicas).await,
        Err(e) => Err(CaseError::Failed(format!("create policy binding: {e}"))),
    };
    let dp = DeleteParams::default();
    let mut cleanup = Ok(());
    if let Ok(b) = &bound {
        cleanup = bindings(ctx).delete(&b.name_any(), &dp).await.map(|_| ());
    }
    let cleanup = cleanup
        .and(policies(ctx).delete(&policy_name, &dp).await.map(|_| ()))
        .map_err(CaseError::from);
    result.and(cleanup)
}

async fn enforce_checks(ctx: &Ctx, replicas: i32) -> CaseResult {
    let deployments: Api<Deployment> = ctx.api();
    let pp = PostParams::default();
    let dp = DeleteParams::default();
    let marker: Deployment = from_json(workload("Deployment", "marker-deployment", 1))?;
    ctx.wait("the marker to be denied", MARKER_WAIT, || async {
        let created = deployments.create(&pp, &marker).await;
        let _ = deployments.delete("marker-deployment", &dp).await;
        match created {
            Err(kube::Error::Api(s)) if s.code == 422 => Ok(Ok(())),
            Err(e) => Err(CaseError::from(e)),
            Ok(_) => Ok(Err("the marker was admitted")),
        }
    })
    .await?;

    let replicated: Deployment = from_json(workload("Deployment", "replicated", replicas))?;
    let created = deployments.create(&pp, &replicated).await;
    let _ = deployments.delete("replicated", &dp).await;
    created.map_err(|e| CaseError::Failed(format!("create replicated Deployment: {e}")))?;

    let replica_sets: Api<ReplicaSet> = ctx.api();
    let rs: ReplicaSet = from_json(workload("ReplicaSet", "non-replicated", 1))?;
    let created = replica_sets.create(&pp, &rs).await;
    let _ = replica_sets.delete("non-replicated", &dp).await;
    created.map_err(|e| CaseError::Failed(format!("create non-replicated ReplicaSet: {e}")))?;
    Ok(())
}

/// Against a Deployment: a policy requiring `object.spec.replicas > 1` (with a message
/// expression) and the request's namespace to be the case's MUST deny a one-replica Deployment,
/// admit a two-replica one, and leave ReplicaSets alone.
async fn against_deployment(ctx: &Ctx) -> CaseResult {
    let validations = json!([
        {"expression": "object.spec.replicas > 1",
         "messageExpression": "'wants replicas > 1, got ' + object.spec.replicas"},
        {"expression": format!("namespaceObject.metadata.name == '{}'", ctx.ns),
         "message": "Internal error! Other namespace should not be allowed."},
    ]);
    enforce(ctx, json!([]), validations, 2).await
}

/// Variables: validations reading `variables.replicas` (object.spec.replicas) and
/// `variables.oddReplicas` MUST deny a one-replica Deployment, admit a three-replica one, and
/// leave ReplicaSets alone.
async fn with_variables(ctx: &Ctx) -> CaseResult {
    let variables = json!([
        {"name": "replicas", "expression": "object.spec.replicas"},
        {"name": "oddReplicas", "expression": "variables.replicas % 2 == 1"},
    ]);
    let validations = json!([
        {"expression": "variables.replicas > 1"},
        {"expression": "variables.oddReplicas"},
    ]);
    enforce(ctx, variables, validations, 3).await
}

/// What the two API-operations entries differ in.
struct Ops {
    kind: &'static str,
    plural: &'static str,
    label_key: &'static str,
    generate_name: &'static str,
    spec: fn() -> Value,
    /// The merge patch's spec and the (pointer, value) the patched object MUST show.
    patch_spec: fn() -> Value,
    patched: (&'static str, fn() -> Value),
    /// The update's (pointer, value), which the updated object MUST show.
    updated: (&'static str, fn() -> Value),
    /// Whether /status is served (and exercised).
    status: bool,
}

const POLICY_OPS: Ops = Ops {
    kind: "ValidatingAdmissionPolicy",
    plural: "validatingadmissionpolicies",
    label_key: "example-e2e-vap-label",
    generate_name: "e2e-example-vap-",
    spec: || {
        json!({
            "validations": [{"expression": "object.spec.replicas <= 100"}],
            "matchConstraints": {"resourceRules": [{
                "operations": ["CREATE"],
                "apiGroups": ["apps"], "apiVersions": ["v1"], "resources": ["deployments"],
            }]},
        })
    },
    patch_spec: || json!({"failurePolicy": "Ignore"}),
    patched: ("/spec/failurePolicy", || json!("Ignore")),
    updated: ("/spec/failurePolicy", || json!("Fail")),
    status: true,
};

const BINDING_OPS: Ops = Ops {
    kind: "ValidatingAdmissionPolicyBinding",
    plural: "validatingadmissionpolicybindings",
    label_key: "example-e2e-vapb-label",
    generate_name: "e2e-example-vapb-",
    spec: || json!({"policyName": "replicalimit-policy.example.com", "validationActions": ["Deny"]}),
    patch_spec: || json!({"validationActions": ["Warn"]}),
    patched: ("/spec/validationActions", || json!(["Warn"])),
    updated: ("/spec/validationActions", || json!(["Deny"])),
    status: false,
};

/// ValidatingAdmissionPolicy API: admissionregistration.k8s.io/v1 MUST be in /apis and its group
/// document, validatingadmissionpolicies and its /status MUST be in the version's resources; the
/// resource MUST support create, get, list, watch, patch, update, get/patch/update of /status,
/// delete and deletecollection.
async fn policy_api(ctx: &Ctx) -> CaseResult {
    POLICY_OPS.run(ctx).await
}

/// ValidatingAdmissionPolicyBinding API: as the policy's, without /status.
async fn binding_api(ctx: &Ctx) -> CaseResult {
    BINDING_OPS.run(ctx).await
}

/// Whether the object is only waiting for its finalizers (deletionTimestamp set, finalizers left).
fn finalizing(o: &DynamicObject) -> bool {
    o.metadata.deletion_timestamp.is_some() && !o.finalizers().is_empty()
}

fn has_condition(o: &Value, type_: &str) -> bool {
    o.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| cs.iter().any(|c| c["type"] == type_))
}

impl Ops {
    fn api(&self, ctx: &Ctx) -> Api<DynamicObject> {
        Api::all_with(ctx.client.clone(), &resource(self.kind, self.plural))
    }

    async fn run(&self, ctx: &Ctx) -> CaseResult {
        let status = format!("{}/status", self.plural);
        let mut wanted = vec![self.plural];
        if self.status {
            wanted.push(&status);
        }
        group_discovery(ctx, GROUP, "v1", &wanted).await?;
        let value: String = rand::rng()
            .sample_iter(rand::distr::Alphanumeric)
            .filter(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
            .take(8)
            .map(char::from)
            .collect();
        let lp = ListParams::default().labels(&format!("{}={value}", self.label_key));
        let api = self.api(ctx);
        let result = self.steps(&api, &lp, &value).await;
        let cleanup = api
            .delete_collection(&DeleteParams::default(), &lp)
            .await
            .map(|_| ())
            .map_err(CaseError::from);
        result.and(cleanup)
    }

    /// retry.RetryOnConflict: get, change, update (or update /status), again on a conflict.
    async fn update(
        &self,
        api: &Api<DynamicObject>,
        name: &str,
        status: bool,
        change: impl Fn(&mut Value),
    ) -> CaseResult<Value> {
        let mut last = String::new();
        for _ in 0..5 {
            let mut obj = to_json(&api.get(name).await?);
            change(&mut obj);
            let obj: DynamicObject = from_json(obj)?;
            let pp = PostParams::default();
            let sent = if status {
                api.replace_status(name, &pp, &obj).await
            } else {
                api.replace(name, &pp, &obj).await
            };
            match sent {
                Ok(o) => return Ok(to_json(&o)),
                Err(kube::Error::Api(s)) if s.code == 409 => last = s.message,
                Err(e) => return Err(e.into()),
            }
        }
        Err(CaseError::Failed(format!(
            "updating {name} kept conflicting: {last}"
        )))
    }

    async fn steps(&self, api: &Api<DynamicObject>, lp: &ListParams, value: &str) -> CaseResult {
        let template: DynamicObject = from_json(json!({
            "apiVersion": format!("{GROUP}/v1"),
            "kind": self.kind,
            "metadata": {"generateName": self.generate_name, "labels": {self.label_key: value}},
            "spec": (self.spec)(),
        }))?;
        let pp = PostParams::default();
        for _ in 0..2 {
            api.create(&pp, &template).await?;
        }
        let created = api.create(&pp, &template).await?;
        let name = created.name_any();
        let read = api.get(&name).await?;
        must_eq!(read.uid(), created.uid(), "the UID read back");

        let list = api.list(lp).await?;
        let rv = list.metadata.resource_version.unwrap_or_default();
        let wp = WatchParams::default().labels(lp.label_selector.as_deref().unwrap_or(""));
        let mut watch = api.watch(&wp, &rv).await?.boxed();

        let patched = to_json(
            &api.patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({
                    "metadata": {"annotations": {"patched": "true"}},
                    "spec": (self.patch_spec)(),
                })),
            )
            .await?,
        );
        must_eq!(
            patched.pointer("/metadata/annotations/patched"),
            Some(&json!("true")),
            "patched object should have the applied annotation"
        );
        must_eq!(
            patched.pointer(self.patched.0),
            Some(&(self.patched.1)()),
            "patched object should have the applied spec"
        );

        let updated = self
            .update(api, &name, false, |o| {
                o["metadata"]["annotations"]["updated"] = json!("true");
                if let Some(at) = o.pointer_mut(self.updated.0) {
                    *at = (self.updated.1)();
                }
            })
            .await?;
        must_eq!(
            updated.pointer("/metadata/annotations/updated"),
            Some(&json!("true")),
            "updated object should have the applied annotation"
        );
        must_eq!(
            updated.pointer(self.updated.0),
            Some(&(self.updated.1)()),
            "updated object should have the applied spec"
        );

        // Every event until the patched annotation shows MUST be MODIFIED.
        loop {
            let ev = tokio::time::timeout(FOREVER, watch.try_next())
                .await
                .map_err(|_| CaseError::Failed("timed out waiting for watch event".into()))??;
            match ev {
                Some(WatchEvent::Modified(o)) => {
                    if o.annotations().get("patched").map(String::as_str) == Some("true") {
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

        if self.status {
            self.status_steps(api, &name, &created).await?;
        }

        api.delete(&name, &DeleteParams::default()).await?;
        match api.get_opt(&name).await? {
            None => {}
            Some(o) if finalizing(&o) => {}
            Some(o) => {
                return Err(CaseError::Failed(format!(
                    "expected deleted object, got {o:?}"
                )))
            }
        }
        let left = api.list(lp).await?;
        let without_finalizer = left
            .items
            .iter()
            .filter(|o| o.finalizers().is_empty())
            .count();
        must_eq!(without_finalizer, 2, "filtered list should have 2 items");
        api.delete_collection(&DeleteParams::default(), lp).await?;
        let left = api.list(lp).await?;
        let remaining = left.items.iter().filter(|o| !finalizing(o)).count();
        must_eq!(remaining, 0, "filtered list should have 0 items");
        Ok(())
    }

    /// /status: get MUST return the object (its kind and UID); a merge patch and an update adding
    /// a condition MUST each show it.
    async fn status_steps(
        &self,
        api: &Api<DynamicObject>,
        name: &str,
        created: &DynamicObject,
    ) -> CaseResult {
        let read = to_json(&api.get_status(name).await?);
        must_eq!(
            (
                read["apiVersion"].as_str(),
                read["kind"].as_str(),
                read["metadata"]["uid"].as_str()
            ),
            (
                Some(format!("{GROUP}/v1").as_str()),
                Some(self.kind),
                created.uid().as_deref()
            ),
            "the object read through /status"
        );
        let patched = to_json(
            &api.patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"conditions": [{
                    "type": "PatchStatusFailed", "status": "False", "reason": "e2e",
                    "message": "Set from an e2e test", "lastTransitionTime": "2024-01-01T00:00:00Z",
                }]}})),
            )
            .await?,
        );
        must!(
            has_condition(&patched, "PatchStatusFailed"),
            "expect the patched status exist: {patched}"
        );
        let updated = self
            .update(api, name, true, |o| {
                let condition = json!({"type": "StatusUpdateFailed", "status": "False",
                    "reason": "E2E", "message": "Set from an e2e test",
                    "lastTransitionTime": "2024-01-01T00:00:00Z"});
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
            has_condition(&updated, "StatusUpdateFailed"),
            "expect the updated status exist: {updated}"
        );
        Ok(())
    }
}
