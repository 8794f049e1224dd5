//! sig-api-machinery AdmissionWebhook entries: discovery, the configuration objects themselves
//! (matchConditions stored, updated and compiled), and webhooks served by agnhost's `webhook` in a
//! pod ([`WebhookServer`]): ordered configmap mutation, init-container mutation with defaulting,
//! patching, updating and listing validating and mutating configurations. Each case restates its
//! entry's MUSTs in its doc comment.

use std::collections::BTreeMap;

use futures::future::BoxFuture;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::{json, Value};

use super::crds::get_json;
use super::webhook_server::{WebhookServer, ADMISSION};
use super::{case, Case};
use crate::ctx::{from_json, to_json, Ctx};
use crate::error::{CaseError, CaseResult};
use crate::{must, must_eq};

pub const CASES: &[Case] = &[
    case!(
        "[sig-api-machinery] AdmissionWebhook [Privileged:ClusterAdmin] should include webhook resources in discovery documents [Conformance]",
        "webhook",
        discovery
    ),
    case!(
        "[sig-api-machinery] AdmissionWebhook [Privileged:ClusterAdmin] should mutate configmap [Conformance]",
        "webhook",
        mutate_configmap
    ),
    case!(
        "[sig-api-machinery] AdmissionWebhook [Privileged:ClusterAdmin] should mutate pod and apply defaults after mutation [Conformance]",
        "webhook",
        mutate_pod
    ),
    case!(
        "[sig-api-machinery] AdmissionWebhook [Privileged:ClusterAdmin] patching/updating a validating webhook should work [Conformance]",
        "webhook",
        patch_validating
    ),
    case!(
        "[sig-api-machinery] AdmissionWebhook [Privileged:ClusterAdmin] patching/updating a mutating webhook should work [Conformance]",
        "webhook",
        patch_mutating
    ),
    case!(
        "[sig-api-machinery] AdmissionWebhook [Privileged:ClusterAdmin] listing validating webhooks should work [Conformance]",
        "webhook",
        list_validating
    ),
    case!(
        "[sig-api-machinery] AdmissionWebhook [Privileged:ClusterAdmin] listing mutating webhooks should work [Conformance]",
        "webhook",
        list_mutating
    ),
    case!(
        "[sig-api-machinery] AdmissionWebhook [Privileged:ClusterAdmin] should be able to create and update validating webhook configurations with match conditions [Conformance]",
        "webhook",
        validating_match_conditions
    ),
    case!(
        "[sig-api-machinery] AdmissionWebhook [Privileged:ClusterAdmin] should be able to create and update mutating webhook configurations with match conditions [Conformance]",
        "webhook",
        mutating_match_conditions
    ),
    case!(
        "[sig-api-machinery] AdmissionWebhook [Privileged:ClusterAdmin] should reject validating webhook configurations with invalid match conditions [Conformance]",
        "webhook",
        validating_invalid_match_conditions
    ),
    case!(
        "[sig-api-machinery] AdmissionWebhook [Privileged:ClusterAdmin] should reject mutating webhook configurations with invalid match conditions [Conformance]",
        "webhook",
        mutating_invalid_match_conditions
    ),
    case!(
        "[sig-api-machinery] AdmissionWebhook [Privileged:ClusterAdmin] should mutate everything except 'skip-me' configmaps [Conformance]",
        "webhook",
        skip_me
    ),
];

const GROUP: &str = "admissionregistration.k8s.io";

/// Admission webhook, discovery document: admissionregistration.k8s.io MUST be in /apis with v1,
/// /apis/admissionregistration.k8s.io MUST name the group and list v1, and its v1 document MUST
/// list mutatingwebhookconfigurations and validatingwebhookconfigurations.
async fn discovery(ctx: &Ctx) -> CaseResult {
    let apis = get_json(ctx, "/apis").await?;
    let group = apis["groups"]
        .as_array()
        .and_then(|gs| gs.iter().find(|g| g["name"] == GROUP));
    must!(
        group.is_some(),
        "{GROUP} API group not found in /apis discovery document"
    );
    let has_v1 = |g: &serde_json::Value| {
        g["versions"]
            .as_array()
            .is_some_and(|vs| vs.iter().any(|v| v["version"] == "v1"))
    };
    must!(
        group.is_some_and(has_v1),
        "{GROUP}/v1 API group version not found in /apis discovery document"
    );

    let group = get_json(ctx, &format!("/apis/{GROUP}")).await?;
    must_eq!(
        group["name"].as_str(),
        Some(GROUP),
        "verifying API group name in /apis/{GROUP} discovery document"
    );
    must!(
        has_v1(&group),
        "{GROUP}/v1 API group version not found in /apis/{GROUP} discovery document"
    );

    let list = get_json(ctx, &format!("/apis/{GROUP}/v1")).await?;
    must_eq!(
        list["groupVersion"].as_str(),
        Some("admissionregistration.k8s.io/v1"),
        "verifying API group/version in /apis/{GROUP}/v1 discovery document"
    );
    for resource in [
        "mutatingwebhookconfigurations",
        "validatingwebhookconfigurations",
    ] {
        must!(
            list["resources"]
                .as_array()
                .is_some_and(|rs| rs.iter().any(|r| r["name"] == resource)),
            "{resource} resource not found in /apis/{GROUP}/v1 discovery document"
        );
    }
    Ok(())
}

pub(super) type Steps = for<'a> fn(&'a Ctx, &'a WebhookServer) -> BoxFuture<'a, CaseResult>;

/// Upstream's BeforeEach/AfterEach around an entry: deploy the sample webhook, run, tear down.
pub(super) async fn with_server(ctx: &Ctx, steps: Steps) -> CaseResult {
    let server = WebhookServer::deploy(ctx).await?;
    let outcome = steps(ctx, &server).await;
    server.teardown(ctx).await;
    outcome
}

fn data(cm: &ConfigMap) -> BTreeMap<String, String> {
    cm.data.clone().unwrap_or_default()
}

pub(super) fn yes(keys: &[&str]) -> BTreeMap<String, String> {
    keys.iter().map(|k| (k.to_string(), "yes".into())).collect()
}

/// namedToBeMutatedConfigMap: `mutation-start: yes`.
fn to_be_mutated(name: &str) -> CaseResult<ConfigMap> {
    from_json(json!({"metadata": {"name": name}, "data": {"mutation-start": "yes"}}))
}

/// namedNonCompliantConfigMap: the key and value the deny webhook refuses.
pub(super) fn non_compliant(name: &str) -> CaseResult<ConfigMap> {
    from_json(json!({"metadata": {"name": name}, "data": {"webhook-e2e-test": "webhook-disallow"}}))
}

/// Create configmaps (fresh names) until `want_denied` holds of the outcome, within 30 s; an
/// error other than a denial ends the wait. Admitted ones are deleted again.
async fn until_create(ctx: &Ctx, want_denied: bool, what: &str) -> CaseResult {
    let cms: Api<ConfigMap> = ctx.api();
    let mut n = 0u32;
    ctx.wait(what, super::webhook_server::SETTLE, || {
        n += 1;
        let cms = cms.clone();
        let name = format!("non-compliant-{n}");
        async move {
            match cms
                .create(&PostParams::default(), &non_compliant(&name)?)
                .await
            {
                Ok(_) => {
                    cms.delete(&name, &DeleteParams::default()).await?;
                    Ok(if want_denied {
                        Err("the configmap was admitted".to_string())
                    } else {
                        Ok(())
                    })
                }
                Err(kube::Error::Api(s)) if s.message.contains("denied") => {
                    Ok(if want_denied { Ok(()) } else { Err(s.message) })
                }
                Err(e) => Err(e.into()),
            }
        }
    })
    .await
}

/// Create to-be-mutated configmaps until whether `mutation-stage-1` was added is `want`.
async fn until_mutated(ctx: &Ctx, want: bool, what: &str) -> CaseResult {
    let cms: Api<ConfigMap> = ctx.api();
    let mut n = 0u32;
    ctx.wait(what, super::webhook_server::SETTLE, || {
        n += 1;
        let cms = cms.clone();
        let name = format!("to-be-mutated-{n}");
        async move {
            let created = cms
                .create(&PostParams::default(), &to_be_mutated(&name)?)
                .await?;
            cms.delete(&name, &DeleteParams::default()).await?;
            let mutated = data(&created).contains_key("mutation-stage-1");
            Ok(if mutated == want {
                Ok(())
            } else {
                Err(format!("data {:?}", data(&created)))
            })
        }
    })
    .await
}

/// Admission webhook, ordered mutation: two webhooks on configmaps, the second adding its key
/// only when the first one's is there; a created configmap MUST carry both keys.
async fn mutate_configmap(ctx: &Ctx) -> CaseResult {
    with_server(ctx, |c, s| Box::pin(mutate_configmap_steps(c, s))).await
}

async fn mutate_configmap_steps(ctx: &Ctx, s: &WebhookServer) -> CaseResult {
    s.mutating(
        ctx,
        &s.ns,
        json!({}),
        vec![
            s.mutate_configmap(1),
            s.mutate_configmap(2),
            s.mutating_is_ready(),
        ],
    )
    .await?;
    s.wait_ready(ctx).await?;
    let created = ctx
        .api::<ConfigMap>()
        .create(&PostParams::default(), &to_be_mutated("to-be-mutated")?)
        .await?;
    must_eq!(
        data(&created),
        yes(&["mutation-start", "mutation-stage-1", "mutation-stage-2"]),
        "the mutated configmap's data"
    );
    Ok(())
}

/// Admission webhook, mutation with defaulting: a webhook adds an init container to pods; a
/// created pod MUST have it, with terminationMessagePolicy defaulted to File.
async fn mutate_pod(ctx: &Ctx) -> CaseResult {
    with_server(ctx, |c, s| Box::pin(mutate_pod_steps(c, s))).await
}

async fn mutate_pod_steps(ctx: &Ctx, s: &WebhookServer) -> CaseResult {
    let mut hook = json!({
        "name": "adding-init-container.k8s.io",
        "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
            "resources": ["pods"]}],
        "clientConfig": s.client_config("/mutating-pods"),
        "sideEffects": "None",
        "admissionReviewVersions": ["v1", "v1beta1"],
    });
    hook["namespaceSelector"] = json!({"matchLabels": {s.ns.as_str(): "true"}});
    s.mutating(ctx, &s.ns, json!({}), vec![hook, s.mutating_is_ready()])
        .await?;
    s.wait_ready(ctx).await?;
    let pod: Pod = from_json(json!({
        "metadata": {"name": "webhook-to-be-mutated"},
        "spec": {"containers": [{"name": "example", "image": ctx.images().pause()}]}
    }))?;
    let created = ctx.create_pod(&pod).await?;
    let inits = created
        .spec
        .as_ref()
        .and_then(|s| s.init_containers.clone())
        .unwrap_or_default();
    must_eq!(inits.len(), 1, "init containers of the mutated pod");
    must_eq!(
        inits[0].name.as_str(),
        "webhook-added-init-container",
        "the init container's name"
    );
    must_eq!(
        inits[0].termination_message_policy.as_deref(),
        Some("File"),
        "the init container's defaulted terminationMessagePolicy"
    );
    Ok(())
}

/// Admission webhook, update validating webhook: with the webhook's rule changed to UPDATE
/// only, a non-compliant create MUST be admitted; patched back to CREATE, it MUST be denied.
async fn patch_validating(ctx: &Ctx) -> CaseResult {
    with_server(ctx, |c, s| Box::pin(patch_validating_steps(c, s))).await
}

async fn patch_validating_steps(ctx: &Ctx, s: &WebhookServer) -> CaseResult {
    s.validating(
        ctx,
        &s.ns,
        json!({}),
        vec![s.deny_configmap(), s.validating_is_ready()],
    )
    .await?;
    s.wait_ready(ctx).await?;
    until_create(ctx, true, "a non-compliant configmap to be denied").await?;
    let api: Api<ValidatingWebhookConfiguration> = ctx.all();
    update_operations(&api, &s.ns).await?;
    until_create(
        ctx,
        false,
        "a non-compliant configmap to be admitted (rule on UPDATE)",
    )
    .await?;
    patch_operations_back(ctx, "validatingwebhookconfiguration", &s.ns).await?;
    until_create(ctx, true, "a non-compliant configmap to be denied again").await
}

/// Admission webhook, update mutating webhook: with the rule on UPDATE only a created configmap
/// MUST NOT be mutated; patched back to CREATE it MUST be.
async fn patch_mutating(ctx: &Ctx) -> CaseResult {
    with_server(ctx, |c, s| Box::pin(patch_mutating_steps(c, s))).await
}

async fn patch_mutating_steps(ctx: &Ctx, s: &WebhookServer) -> CaseResult {
    s.mutating(
        ctx,
        &s.ns,
        json!({}),
        vec![s.mutate_configmap(1), s.mutating_is_ready()],
    )
    .await?;
    s.wait_ready(ctx).await?;
    let api: Api<MutatingWebhookConfiguration> = ctx.all();
    update_operations(&api, &s.ns).await?;
    until_mutated(ctx, false, "a configmap that is not mutated").await?;
    patch_operations_back(ctx, "mutatingwebhookconfiguration", &s.ns).await?;
    until_mutated(ctx, true, "a configmap that is mutated").await
}

/// The JSON patch upstream sends (through kubectl here): the first rule on CREATE again.
async fn patch_operations_back(ctx: &Ctx, kind: &str, name: &str) -> CaseResult {
    ctx.kubectl(&[
        "patch",
        kind,
        name,
        "--type=json",
        "-p",
        r#"[{"op": "replace", "path": "/webhooks/0/rules/0/operations", "value": ["CREATE"]}]"#,
    ])
    .await?;
    Ok(())
}

/// Get the configuration, set its first webhook's first rule to UPDATE only, update (again on
/// a conflict, five tries).
async fn update_operations<K>(api: &Api<K>, name: &str) -> CaseResult
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + serde::Serialize,
{
    let mut last = String::new();
    for _ in 0..5 {
        let mut o = to_json(&api.get(name).await?);
        o["webhooks"][0]["rules"][0]["operations"] = json!(["UPDATE"]);
        match api
            .replace(name, &PostParams::default(), &from_json(o)?)
            .await
        {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => last = s.message,
            Err(e) => return Err(e.into()),
        }
    }
    Err(CaseError::Failed(format!(
        "updating {name} kept conflicting: {last}"
    )))
}

const LIST_SIZE: usize = 10;

/// Admission webhook, list validating webhooks: 10 labelled configurations MUST all be listed
/// by the label; a non-compliant create MUST be denied; after deletecollection it MUST NOT be.
async fn list_validating(ctx: &Ctx) -> CaseResult {
    with_server(ctx, |c, s| Box::pin(list_validating_steps(c, s))).await
}

async fn list_validating_steps(ctx: &Ctx, s: &WebhookServer) -> CaseResult {
    let labels = json!({"e2e-list-test-uuid": s.ns});
    for i in 0..LIST_SIZE {
        s.validating(
            ctx,
            &format!("{}-{i}", s.ns),
            labels.clone(),
            vec![s.deny_configmap(), s.validating_is_ready()],
        )
        .await?;
    }
    let api: Api<ValidatingWebhookConfiguration> = ctx.all();
    let lp = ListParams::default().labels(&format!("e2e-list-test-uuid={}", s.ns));
    must_eq!(
        api.list(&lp).await?.items.len(),
        LIST_SIZE,
        "validating webhook configurations listed by the label"
    );
    s.wait_ready(ctx).await?;
    until_create(ctx, true, "a non-compliant configmap to be denied").await?;
    api.delete_collection(&DeleteParams::default(), &lp).await?;
    until_create(
        ctx,
        false,
        "a non-compliant configmap to be admitted (no webhooks)",
    )
    .await
}

/// Admission webhook, list mutating webhooks: 10 labelled configurations MUST all be listed; a
/// created configmap MUST be mutated; after deletecollection it MUST NOT be.
async fn list_mutating(ctx: &Ctx) -> CaseResult {
    with_server(ctx, |c, s| Box::pin(list_mutating_steps(c, s))).await
}

async fn list_mutating_steps(ctx: &Ctx, s: &WebhookServer) -> CaseResult {
    let labels = json!({"e2e-list-test-uuid": s.ns});
    for i in 0..LIST_SIZE {
        s.mutating(
            ctx,
            &format!("{}-{i}", s.ns),
            labels.clone(),
            vec![s.mutate_configmap(1), s.mutating_is_ready()],
        )
        .await?;
    }
    let api: Api<MutatingWebhookConfiguration> = ctx.all();
    let lp = ListParams::default().labels(&format!("e2e-list-test-uuid={}", s.ns));
    must_eq!(
        api.list(&lp).await?.items.len(),
        LIST_SIZE,
        "mutating webhook configurations listed by the label"
    );
    s.wait_ready(ctx).await?;
    until_mutated(ctx, true, "a configmap that is mutated").await?;
    api.delete_collection(&DeleteParams::default(), &lp).await?;
    until_mutated(ctx, false, "a configmap that is not mutated (no webhooks)").await
}

/// The configuration objects alone: the cases below store, update and compile matchConditions,
/// which needs no running webhook (the fixtures still name the Service, with an empty CA).
fn fixtures(ctx: &Ctx) -> WebhookServer {
    WebhookServer {
        ns: ctx.ns.clone(),
        markers: format!("{}-markers", ctx.ns),
        ca_bundle: String::new(),
        sample: &ADMISSION,
    }
}

fn conditions(exprs: &[(&str, &str)]) -> Value {
    Value::Array(
        exprs
            .iter()
            .map(|(name, expression)| json!({"name": name, "expression": expression}))
            .collect(),
    )
}

/// newValidatingWebhookWithMatchConditions / newMutatingWebhookWithMatchConditions's first hook.
fn match_conditions_hook(s: &WebhookServer, name: &str, mc: Value, validating: bool) -> Value {
    let mut hook = json!({
        "name": name,
        "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
            "resources": ["configmaps"]}],
        "clientConfig": s.client_config(if validating { "/always-deny" } else { "/mutating-configmaps" }),
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
        "namespaceSelector": {"matchLabels": {s.ns.as_str(): "true"}},
        "matchConditions": mc,
    });
    if validating {
        hook["matchPolicy"] = json!("Equivalent");
    }
    hook
}

const ONE: &[(&str, &str)] = &[("expression-1", "object.metadata.namespace == 'production'")];
const TWO: &[(&str, &str)] = &[
    ("expression-1", "object.metadata.namespace == 'production'"),
    ("expression-2", "object.metadata.namespace == 'staging'"),
];

/// Validating webhook with matchConditions: the stored configuration MUST carry them; after an
/// update the retrieved object MUST carry the new ones.
async fn validating_match_conditions(ctx: &Ctx) -> CaseResult {
    let s = fixtures(ctx);
    let hook = |mc| {
        match_conditions_hook(
            &s,
            "validation-webhook-with-match-conditions.k8s.io",
            mc,
            true,
        )
    };
    let outcome = async {
        s.validating(
            ctx,
            &s.ns,
            json!({}),
            vec![hook(conditions(ONE)), s.validating_is_ready()],
        )
        .await?;
        let api: Api<ValidatingWebhookConfiguration> = ctx.all();
        stored_then_updated(&api, &s.ns).await
    }
    .await;
    s.teardown(ctx).await;
    outcome
}

/// Mutating webhook with matchConditions: as for the validating one.
async fn mutating_match_conditions(ctx: &Ctx) -> CaseResult {
    let s = fixtures(ctx);
    let hook = |mc| match_conditions_hook(&s, "adding-configmap-data.k8s.io", mc, false);
    let outcome = async {
        s.mutating(
            ctx,
            &s.ns,
            json!({}),
            vec![hook(conditions(ONE)), s.mutating_is_ready()],
        )
        .await?;
        let api: Api<MutatingWebhookConfiguration> = ctx.all();
        stored_then_updated(&api, &s.ns).await
    }
    .await;
    s.teardown(ctx).await;
    outcome
}

async fn stored_then_updated<K>(api: &Api<K>, name: &str) -> CaseResult
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + serde::Serialize,
{
    let got = to_json(&api.get(name).await?);
    must_eq!(
        got["webhooks"][0]["matchConditions"],
        conditions(ONE),
        "verifying that match conditions are created"
    );
    let mut changed = got;
    changed["webhooks"][0]["matchConditions"] = conditions(TWO);
    api.replace(name, &PostParams::default(), &from_json(changed)?)
        .await?;
    let got = to_json(&api.get(name).await?);
    must_eq!(
        got["webhooks"][0]["matchConditions"],
        conditions(TWO),
        "verifying that match conditions are updated"
    );
    Ok(())
}

const BAD: &[(&str, &str)] = &[("invalid-expression-1", "... [] bad expression")];

/// A configuration whose matchCondition does not compile MUST be refused, the error saying
/// "compilation failed".
fn refused_for_compilation(result: CaseResult<impl std::fmt::Debug>) -> CaseResult {
    match result {
        Ok(o) => Err(CaseError::Failed(format!(
            "the configuration should have been denied by the api-server, got {o:?}"
        ))),
        Err(e) => {
            let text = e.to_string();
            must!(
                text.contains("compilation failed"),
                "expected \"compilation failed\" in {text}"
            );
            Ok(())
        }
    }
}

async fn validating_invalid_match_conditions(ctx: &Ctx) -> CaseResult {
    let s = fixtures(ctx);
    let hook = match_conditions_hook(
        &s,
        "validation-webhook-with-match-conditions.k8s.io",
        conditions(BAD),
        true,
    );
    let result = s
        .validating(ctx, &s.ns, json!({}), vec![hook, s.validating_is_ready()])
        .await;
    s.teardown(ctx).await;
    refused_for_compilation(result)
}

async fn mutating_invalid_match_conditions(ctx: &Ctx) -> CaseResult {
    let s = fixtures(ctx);
    let hook = match_conditions_hook(&s, "adding-configmap-data.k8s.io", conditions(BAD), false);
    let result = s
        .mutating(ctx, &s.ns, json!({}), vec![hook, s.mutating_is_ready()])
        .await;
    s.teardown(ctx).await;
    refused_for_compilation(result)
}

/// Mutating webhook excluding an object by name: with the matchCondition
/// `object.metadata.name != 'skip-me'`, a configmap of another name MUST be mutated and one
/// named `skip-me` MUST NOT.
async fn skip_me(ctx: &Ctx) -> CaseResult {
    with_server(ctx, |c, s| Box::pin(skip_me_steps(c, s))).await
}

async fn skip_me_steps(ctx: &Ctx, s: &WebhookServer) -> CaseResult {
    let mut hook = s.mutate_configmap(1);
    hook["matchConditions"] = conditions(&[("skip-me", "object.metadata.name != 'skip-me'")]);
    s.mutating(ctx, &s.ns, json!({}), vec![hook, s.mutating_is_ready()])
        .await?;
    s.wait_ready(ctx).await?;
    let cms: Api<ConfigMap> = ctx.api();
    let pp = PostParams::default();
    let mutated = cms.create(&pp, &to_be_mutated("random-name")?).await?;
    must_eq!(
        data(&mutated),
        yes(&["mutation-start", "mutation-stage-1"]),
        "the configmap with another name"
    );
    let skipped = cms.create(&pp, &to_be_mutated("skip-me")?).await?;
    must_eq!(
        data(&skipped),
        yes(&["mutation-start"]),
        "the configmap named skip-me"
    );
    Ok(())
}
