//! The AdmissionWebhook entries that deny, time out, fail closed, spare webhook configurations,
//! or act on custom resources and CRDs, and the CustomResourceConversionWebhook entries: all served
//! by agnhost ([`WebhookServer`]); the shared fixtures are admission_webhooks.rs's. Each case
//! restates its entry's MUSTs in its doc comment.

use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use rand::Rng;
use serde_json::{json, Value};

use super::admission_webhooks::{non_compliant, with_server, yes};
use super::crds::{allow_all_schema, finish, get_json};
use super::webhook_server::{WebhookServer, SETTLE};
use super::{case, Case};
use crate::ctx::{from_json, to_json, Ctx};
use crate::error::{CaseError, CaseResult};
use crate::{must, must_eq};

pub const CASES: &[Case] = &[
    case!(
        "[sig-api-machinery] AdmissionWebhook [Privileged:ClusterAdmin] should be able to deny pod and configmap creation [Conformance]",
        "webhook",
        deny_pod_and_configmap
    ),
    case!(
        "[sig-api-machinery] AdmissionWebhook [Privileged:ClusterAdmin] should be able to deny attaching pod [Conformance]",
        "webhook",
        deny_attach
    ),
    case!(
        "[sig-api-machinery] AdmissionWebhook [Privileged:ClusterAdmin] should be able to deny custom resource creation, update and deletion [Conformance]",
        "webhook",
        deny_custom_resource
    ),
    case!(
        "[sig-api-machinery] AdmissionWebhook [Privileged:ClusterAdmin] should unconditionally reject operations on fail closed webhook [Conformance]",
        "webhook",
        fail_closed
    ),
    case!(
        "[sig-api-machinery] AdmissionWebhook [Privileged:ClusterAdmin] should not be able to mutate or prevent deletion of webhook configuration objects [Conformance]",
        "webhook",
        spare_configurations
    ),
    case!(
        "[sig-api-machinery] AdmissionWebhook [Privileged:ClusterAdmin] should mutate custom resource [Conformance]",
        "webhook",
        mutate_custom_resource
    ),
    case!(
        "[sig-api-machinery] AdmissionWebhook [Privileged:ClusterAdmin] should deny crd creation [Conformance]",
        "webhook",
        deny_crd
    ),
    case!(
        "[sig-api-machinery] AdmissionWebhook [Privileged:ClusterAdmin] should mutate custom resource with different stored version [Conformance]",
        "webhook",
        mutate_stored_version
    ),
    case!(
        "[sig-api-machinery] AdmissionWebhook [Privileged:ClusterAdmin] should mutate custom resource with pruning [Conformance]",
        "webhook",
        mutate_pruning
    ),
    case!(
        "[sig-api-machinery] AdmissionWebhook [Privileged:ClusterAdmin] should honor timeout [Conformance]",
        "webhook",
        honor_timeout
    ),
    case!(
        "[sig-api-machinery] CustomResourceConversionWebhook [Privileged:ClusterAdmin] should be able to convert from CR v1 to CR v2 [Conformance]",
        "crd-webhook",
        convert_v1_to_v2
    ),
    case!(
        "[sig-api-machinery] CustomResourceConversionWebhook [Privileged:ClusterAdmin] should be able to convert a non homogeneous list of CRs [Conformance]",
        "crd-webhook",
        convert_mixed_list
    ),
];

const UNWANTED_CONFIGMAP: &str = "the configmap contains unwanted key and value";
const UNWANTED_CR: &str = "the custom resource contains unwanted data";

/// Fail unless `result` is an error whose text holds every one of `expected`.
fn refused<T: std::fmt::Debug, E: std::fmt::Display>(
    result: Result<T, E>,
    what: &str,
    expected: &[&str],
) -> CaseResult {
    let e = match result {
        Ok(o) => {
            return Err(CaseError::Failed(format!(
                "{what} should have been denied, got {o:?}"
            )))
        }
        Err(e) => e.to_string(),
    };
    for want in expected {
        must!(e.contains(want), "{what}: expected {want:?} in {e:?}");
    }
    Ok(())
}

fn random_suffix() -> String {
    rand::rng()
        .sample_iter(rand::distr::Alphanumeric)
        .filter(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        .take(5)
        .map(char::from)
        .collect()
}

/// f.CreateNamespace: `<base>-<suffix>` with `labels`.
async fn create_namespace(ctx: &Ctx, base: &str, labels: Value) -> CaseResult<String> {
    let name = format!("{base}-{}", random_suffix());
    let ns: Namespace = from_json(json!({"metadata": {"name": name, "labels": labels}}))?;
    ctx.all::<Namespace>()
        .create(&PostParams::default(), &ns)
        .await?;
    Ok(name)
}

async fn delete_namespace(ctx: &Ctx, name: &str) {
    let _ = ctx
        .all::<Namespace>()
        .delete(name, &DeleteParams::background())
        .await;
}

fn without(o: &mut Value, field: &str) {
    if let Some(o) = o.as_object_mut() {
        o.remove(field);
    }
}

/// failingWebhook: CREATE of configmaps at /configmaps but without a CA bundle, so every call
/// fails.
fn failing_hook(s: &WebhookServer, name: &str, policy: &str) -> Value {
    let mut hook = s.configmap_hook(name, "/configmaps");
    without(&mut hook["clientConfig"], "caBundle");
    hook["failurePolicy"] = json!(policy);
    hook
}

fn pause_pod(name: &str, container: &str, labels: Value, image: String) -> CaseResult<Pod> {
    from_json(json!({
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": container, "image": image}]}
    }))
}

/// Admission webhook, deny create: a non-compliant pod and configmap MUST be denied, and so MUST
/// updating (PUT and PATCH) a compliant configmap to be non-compliant; a pod that makes the
/// webhook hang MUST be denied with a webhook timeout error and MUST NOT exist; a non-compliant
/// configmap in a namespace the namespace selector excludes MUST be allowed.
async fn deny_pod_and_configmap(ctx: &Ctx) -> CaseResult {
    with_server(ctx, |c, s| Box::pin(deny_pod_and_configmap_steps(c, s))).await
}

async fn deny_pod_and_configmap_steps(ctx: &Ctx, s: &WebhookServer) -> CaseResult {
    s.validating(
        ctx,
        &s.ns,
        json!({}),
        vec![
            s.hook(
                "deny-unwanted-pod-container-name-and-label.k8s.io",
                &["CREATE"],
                &["pods"],
                "/pods",
            ),
            s.deny_configmap(),
            failing_hook(s, "fail-open.k8s.io", "Ignore"),
            s.validating_is_ready(),
        ],
    )
    .await?;
    s.wait_ready(ctx).await?;
    let pp = PostParams::default();
    let pods: Api<Pod> = ctx.api();
    let disallowed = pause_pod(
        "disallowed-pod",
        "webhook-disallow",
        json!({"webhook-e2e-test": "webhook-disallow"}),
        ctx.images().pause(),
    )?;
    refused(
        pods.create(&pp, &disallowed).await,
        "creating the non-compliant pod",
        &[
            "the pod contains unwanted container name",
            "the pod contains unwanted label",
        ],
    )?;
    let hanging = pause_pod(
        "hanging-pod",
        "wait-forever",
        json!({"webhook-e2e-test": "wait-forever"}),
        ctx.images().pause(),
    )?;
    refused(
        pods.create(&pp, &hanging).await,
        "creating the pod that makes the webhook hang",
        &["webhook", "deadline"],
    )?;
    must!(
        pods.get_opt("hanging-pod").await?.is_none(),
        "the pod the webhook hung on was created"
    );

    let cms: Api<ConfigMap> = ctx.api();
    refused(
        cms.create(&pp, &non_compliant("disallowed-configmap")?)
            .await,
        "creating the non-compliant configmap",
        &[UNWANTED_CONFIGMAP],
    )?;
    let allowed: ConfigMap = from_json(json!({
        "metadata": {"name": "allowed-configmap"}, "data": {"admit": "this"}}))?;
    cms.create(&pp, &allowed).await?;
    let put = async {
        let mut cm = cms.get("allowed-configmap").await?;
        cm.data
            .get_or_insert_with(Default::default)
            .insert("webhook-e2e-test".into(), "webhook-disallow".into());
        cms.replace("allowed-configmap", &pp, &cm).await
    };
    refused(
        put.await,
        "updating (PUT) the configmap to a non-compliant one",
        &[UNWANTED_CONFIGMAP],
    )?;
    refused(
        cms.patch(
            "allowed-configmap",
            &PatchParams::default(),
            &Patch::Strategic(json!({"data": {"webhook-e2e-test": "webhook-disallow"}})),
        )
        .await,
        "patching the configmap to a non-compliant one",
        &[UNWANTED_CONFIGMAP],
    )?;

    let skipped = create_namespace(
        ctx,
        "exempted-namespace",
        json!({"skip-webhook-admission": "yes", s.ns.as_str(): "true"}),
    )
    .await?;
    let outcome = Api::<ConfigMap>::namespaced(ctx.client.clone(), &skipped)
        .create(&pp, &non_compliant("disallowed-configmap")?)
        .await;
    delete_namespace(ctx, &skipped).await;
    outcome.map_err(|e| {
        CaseError::Failed(format!(
            "a non-compliant configmap in the exempted namespace {skipped} was refused: {e}"
        ))
    })?;
    Ok(())
}

/// Admission webhook, deny attach: with a webhook denying CONNECT of pods/attach, `kubectl
/// attach` to a running pod MUST be denied.
async fn deny_attach(ctx: &Ctx) -> CaseResult {
    with_server(ctx, |c, s| Box::pin(deny_attach_steps(c, s))).await
}

async fn deny_attach_steps(ctx: &Ctx, s: &WebhookServer) -> CaseResult {
    let hook = s.hook(
        "deny-attaching-pod.k8s.io",
        &["CONNECT"],
        &["pods/attach"],
        "/pods/attach",
    );
    s.validating(ctx, &s.ns, json!({}), vec![hook, s.validating_is_ready()])
        .await?;
    s.wait_ready(ctx).await?;
    let pod = pause_pod(
        "to-be-attached-pod",
        "container1",
        json!({}),
        ctx.images().pause(),
    )?;
    ctx.create_pod(&pod).await?;
    ctx.wait_running("to-be-attached-pod").await?;
    let ns = format!("--namespace={}", ctx.ns);
    let args = ["attach", &ns, "to-be-attached-pod", "-i", "-c=container1"];
    let attach = ctx.kubectl(&args);
    let outcome = tokio::time::timeout(Duration::from_secs(30), attach)
        .await
        .map_err(|_| {
            CaseError::Failed("'kubectl attach' ran 30s without being denied by the webhook".into())
        })?;
    let want = "attaching to pod 'to-be-attached-pod' is not allowed";
    match outcome {
        Ok(out) => Err(CaseError::Failed(format!(
            "'kubectl attach' should have been denied by the webhook, got {out:?}"
        ))),
        Err(e) => {
            let text = e.to_string();
            must!(
                text.contains(want),
                "unexpected 'kubectl attach' error: expected {want:?} in {text:?}"
            );
            Ok(())
        }
    }
}

/// Admission webhook, fail closed: a webhook that cannot be called (no CA bundle) with failure
/// policy Fail MUST make every matching request fail: a configmap create in its namespace MUST
/// be refused with an internal error.
async fn fail_closed(ctx: &Ctx) -> CaseResult {
    with_server(ctx, |c, s| Box::pin(fail_closed_steps(c, s))).await
}

async fn fail_closed_steps(ctx: &Ctx, s: &WebhookServer) -> CaseResult {
    let mut hook = failing_hook(s, "fail-closed.k8s.io", "Fail");
    hook["namespaceSelector"]["matchExpressions"] = json!([{
        "key": "fail-closed-webhook", "operator": "In", "values": ["yes"]}]);
    s.validating(ctx, &s.ns, json!({}), vec![hook, s.validating_is_ready()])
        .await?;
    s.wait_ready(ctx).await?;
    let fail_ns = create_namespace(
        ctx,
        "fail-closed-namespace",
        json!({"fail-closed-webhook": "yes", s.ns.as_str(): "true"}),
    )
    .await?;
    let cm: ConfigMap = from_json(json!({"metadata": {"name": "foo"}}))?;
    let outcome = Api::<ConfigMap>::namespaced(ctx.client.clone(), &fail_ns)
        .create(&PostParams::default(), &cm)
        .await;
    delete_namespace(ctx, &fail_ns).await;
    match outcome {
        Err(kube::Error::Api(e)) if e.code == 500 && e.reason == "InternalError" => Ok(()),
        other => Err(CaseError::Failed(format!(
            "creating a configmap in {fail_ns}: expected an internal error, got {other:?}"
        ))),
    }
}

/// A hook on the webhook configuration kinds themselves.
fn configurations_hook(s: &WebhookServer, name: &str, operation: &str, path: &str) -> Value {
    let mut hook = s.hook(name, &[operation], &[], path);
    hook["rules"] = json!([{"operations": [operation],
        "apiGroups": ["admissionregistration.k8s.io"], "apiVersions": ["*"],
        "resources": ["validatingwebhookconfigurations", "mutatingwebhookconfigurations"]}]);
    hook["failurePolicy"] = json!("Fail");
    hook
}

/// A dummy webhook matching nothing real, whose calls would fail (path "", no CA) and are
/// ignored.
fn dummy_hook(s: &WebhookServer, name: &str) -> Value {
    let mut hook = s.hook(name, &["CREATE"], &["invalid"], "");
    without(&mut hook["clientConfig"], "caBundle");
    hook["failurePolicy"] = json!("Ignore");
    hook
}

fn added_label(o: &Value) -> bool {
    o["metadata"]["labels"]["added-label"] == json!("yes")
}

/// Admission webhook, admission control not allowed on webhook configuration objects: with a
/// webhook denying deletion of webhook configurations and one adding a label to them, creating
/// a validating and a mutating configuration MUST succeed without the label, and deleting each
/// MUST succeed.
async fn spare_configurations(ctx: &Ctx) -> CaseResult {
    with_server(ctx, |c, s| Box::pin(spare_configurations_steps(c, s))).await
}

async fn spare_configurations_steps(ctx: &Ctx, s: &WebhookServer) -> CaseResult {
    let blocking = format!("{}blocking", s.ns);
    s.validating(
        ctx,
        &blocking,
        json!({}),
        vec![
            configurations_hook(
                s,
                "deny-webhook-configuration-deletions.k8s.io",
                "DELETE",
                "/always-deny",
            ),
            s.validating_is_ready(),
        ],
    )
    .await?;
    s.wait_ready(ctx).await?;
    s.mutating(
        ctx,
        &blocking,
        json!({}),
        vec![
            configurations_hook(
                s,
                "add-label-to-webhook-configurations.k8s.io",
                "CREATE",
                "/add-label",
            ),
            s.mutating_is_ready(),
        ],
    )
    .await?;
    s.wait_ready(ctx).await?;

    let created = s
        .validating(
            ctx,
            &s.ns,
            json!({}),
            vec![
                dummy_hook(s, "dummy-validating-webhook.k8s.io"),
                s.validating_is_ready(),
            ],
        )
        .await?;
    must!(
        !added_label(&to_json(&created)),
        "expected {} not to be mutated by mutating webhooks but it was",
        s.ns
    );
    s.wait_ready(ctx).await?;
    ctx.all::<ValidatingWebhookConfiguration>()
        .delete(&s.ns, &DeleteParams::default())
        .await?;

    let created = s
        .mutating(
            ctx,
            &s.ns,
            json!({}),
            vec![
                dummy_hook(s, "dummy-mutating-webhook.k8s.io"),
                s.mutating_is_ready(),
            ],
        )
        .await?;
    must!(
        !added_label(&to_json(&created)),
        "expected {} not to be mutated by mutating webhooks but it was",
        s.ns
    );
    s.wait_ready(ctx).await?;
    ctx.all::<MutatingWebhookConfiguration>()
        .delete(&s.ns, &DeleteParams::default())
        .await?;
    Ok(())
}

/// Admission webhook, deny custom resource definition: with a webhook denying CRDs labelled
/// `webhook-e2e-test: webhook-disallow`, creating such a CRD MUST be denied.
async fn deny_crd(ctx: &Ctx) -> CaseResult {
    with_server(ctx, |c, s| Box::pin(deny_crd_steps(c, s))).await
}

async fn deny_crd_steps(ctx: &Ctx, s: &WebhookServer) -> CaseResult {
    let mut hook = s.hook(
        "deny-crd-with-unwanted-label.k8s.io",
        &["CREATE"],
        &[],
        "/crd",
    );
    hook["rules"] = json!([{"operations": ["CREATE"], "apiGroups": ["apiextensions.k8s.io"],
        "apiVersions": ["*"], "resources": ["customresourcedefinitions"]}]);
    without(&mut hook, "namespaceSelector");
    hook["objectSelector"] = json!({"matchLabels": {s.ns.as_str(): "true"}});
    s.validating(ctx, &s.ns, json!({}), vec![hook, s.validating_is_ready()])
        .await?;
    s.wait_ready(ctx).await?;
    let name = "e2e-test-webhook-deny-crd";
    let group = "webhook.example.com";
    let mut crd = crd_object(name, "E2e-test-webhook-deny-crd", group, plain_versions());
    crd["metadata"]["labels"] =
        json!({s.ns.as_str(): "true", "webhook-e2e-test": "webhook-disallow"});
    let crds: Api<CustomResourceDefinition> = ctx.all();
    let outcome = crds.create(&PostParams::default(), &from_json(crd)?).await;
    if outcome.is_ok() {
        let _ = crds
            .delete(&format!("{name}s.{group}"), &DeleteParams::default())
            .await;
    }
    refused(
        outcome,
        "creating the labelled custom resource definition",
        &["the crd contains unwanted label"],
    )
}

/// registerSlowWebhook's webhook: /always-allow-delay-5s on configmap creates.
fn slow_hook(s: &WebhookServer, policy: &str, timeout: Option<i32>) -> Value {
    let mut hook = s.configmap_hook(
        "allow-configmap-with-delay-webhook.k8s.io",
        "/always-allow-delay-5s",
    );
    hook["failurePolicy"] = json!(policy);
    if let Some(t) = timeout {
        hook["timeoutSeconds"] = json!(t);
    }
    hook
}

/// The four settings upstream tries: (failure policy, timeout, whether the create must fail).
const TIMEOUTS: &[(&str, Option<i32>, bool)] = &[
    ("Fail", Some(1), true),
    ("Ignore", Some(1), false),
    ("Fail", Some(10), false),
    ("Fail", None, false),
];

/// Admission webhook, honor timeout: with a webhook that waits 5 s, a create MUST time out when
/// the timeout is 1 s and the policy Fail (the error naming the call); it MUST NOT fail with
/// policy Ignore, nor with a 10 s timeout, nor with the timeout left to its 10 s default.
async fn honor_timeout(ctx: &Ctx) -> CaseResult {
    with_server(ctx, |c, s| Box::pin(honor_timeout_steps(c, s))).await
}

async fn honor_timeout_steps(ctx: &Ctx, s: &WebhookServer) -> CaseResult {
    let api: Api<ValidatingWebhookConfiguration> = ctx.all();
    let cms: Api<ConfigMap> = ctx.api();
    let name = "e2e-test-slow-webhook-configmap";
    for &(policy, timeout, fails) in TIMEOUTS {
        let what = format!("failurePolicy {policy}, timeoutSeconds {timeout:?}");
        s.validating(
            ctx,
            &s.ns,
            json!({}),
            vec![slow_hook(s, policy, timeout), s.validating_is_ready()],
        )
        .await?;
        s.wait_ready(ctx).await?;
        let cm: ConfigMap = from_json(json!({"metadata": {"name": name}}))?;
        let outcome = cms.create(&PostParams::default(), &cm).await;
        if fails {
            let e = match outcome {
                Ok(_) => {
                    return Err(CaseError::Failed(format!(
                        "{what}: the create should have timed out reaching the slow webhook"
                    )))
                }
                Err(e) => e.to_string(),
            };
            let timed_out = e.contains("context deadline exceeded") || e.contains("timeout");
            must!(
                timed_out && e.contains("/always-allow-delay-5s?timeout=1s"),
                "{what}: expected an HTTP/dial timeout error querying the slow webhook, got {e:?}"
            );
        } else {
            outcome.map_err(|e| CaseError::Failed(format!("{what}: {e}")))?;
            cms.delete(name, &DeleteParams::default()).await?;
        }
        api.delete(&s.ns, &DeleteParams::default()).await?;
    }
    Ok(())
}

/// A test CRD: namespaced, in the case's namespace.
struct TestCrd {
    name: String,
    group: String,
    plural: String,
    kind: String,
}

impl TestCrd {
    fn api(&self, ctx: &Ctx, version: &str) -> Api<DynamicObject> {
        let resource = ApiResource {
            group: self.group.clone(),
            version: version.into(),
            api_version: format!("{}/{version}", self.group),
            kind: self.kind.clone(),
            plural: self.plural.clone(),
        };
        Api::namespaced_with(ctx.client.clone(), &ctx.ns, &resource)
    }

    /// An instance at `version` named `name` with the `body` fields.
    fn instance(&self, version: &str, name: &str, body: Value) -> CaseResult<DynamicObject> {
        let mut o = json!({
            "apiVersion": format!("{}/{version}", self.group), "kind": self.kind,
            "metadata": {"name": name},
        });
        if let (Some(o), Some(b)) = (o.as_object_mut(), body.as_object()) {
            o.extend(b.clone());
        }
        from_json(o)
    }
}

fn crd_object(name: &str, kind: &str, group: &str, versions: Value) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{name}s.{group}")},
        "spec": {
            "group": group, "versions": versions, "scope": "Namespaced",
            "names": {"singular": name, "kind": kind, "listKind": format!("{kind}List"),
                "plural": format!("{name}s")},
        }
    })
}

fn version(name: &str, storage: bool, schema: Value) -> Value {
    json!({"name": name, "served": true, "storage": storage, "schema": schema})
}

/// crd.CreateTestCRD's one version.
fn plain_versions() -> Value {
    json!([version("v1", true, allow_all_schema())])
}

/// The CRDs the cases use, as upstream's options make them.
#[derive(Debug, Clone, Copy)]
enum Shape {
    /// crd.CreateTestCRD: group `webhook-crd-test.k8s.io`, v1.
    Plain,
    /// createAdmissionWebhookMultiVersionTestCRDWithV1Storage: `webhook.example.com`, v1
    /// stored, v2 served.
    MultiVersion,
    /// The same, with a schema knowing only mutation-start and mutation-stage-1 under `data`.
    Pruning,
    /// crd_conversion_webhook.go's: `stable.example.com`, v1 `hostPort`, v2 `host` and `port`,
    /// converted by the webhook.
    Conversion,
}

fn typed_schema(fields: &[&str]) -> Value {
    let props: serde_json::Map<String, Value> = fields
        .iter()
        .map(|f| (f.to_string(), json!({"type": "string"})))
        .collect();
    json!({"openAPIV3Schema": {"type": "object", "properties": props}})
}

/// apiVersions (v1 stored) or alternativeAPIVersions (v2 stored) of the conversion test.
fn conversion_versions(v2_stored: bool) -> Value {
    json!([
        version("v1", !v2_stored, typed_schema(&["hostPort"])),
        version("v2", v2_stored, typed_schema(&["host", "port"])),
    ])
}

impl Shape {
    fn base_and_group(self) -> (&'static str, &'static str) {
        match self {
            Shape::Plain => ("webhook", "webhook-crd-test.k8s.io"),
            Shape::MultiVersion | Shape::Pruning => ("webhook", "webhook.example.com"),
            Shape::Conversion => ("crd-webhook", "stable.example.com"),
        }
    }

    fn spec(self, s: &WebhookServer) -> (Value, Option<Value>) {
        match self {
            Shape::Plain => (plain_versions(), None),
            Shape::MultiVersion => (
                json!([
                    version("v1", true, allow_all_schema()),
                    version("v2", false, allow_all_schema())
                ]),
                None,
            ),
            Shape::Pruning => {
                let schema = json!({"openAPIV3Schema": {"type": "object", "properties": {
                    "data": typed_schema(&["mutation-start", "mutation-stage-1"])["openAPIV3Schema"],
                }}});
                (
                    json!([
                        version("v1", true, schema.clone()),
                        version("v2", false, schema)
                    ]),
                    None,
                )
            }
            Shape::Conversion => (
                conversion_versions(false),
                Some(json!({"strategy": "Webhook", "webhook": {
                    "clientConfig": s.client_config("/crdconvert"),
                    "conversionReviewVersions": ["v1", "v1beta1"],
                }})),
            ),
        }
    }
}

/// crd.CreateMultiVersionTestCRD: `e2e-test-<base>-<suffix>-crds.<group>`, created, then waited
/// for until every served version lists it in discovery.
async fn create_test_crd(ctx: &Ctx, s: &WebhookServer, shape: Shape) -> CaseResult<TestCrd> {
    let (base, group) = shape.base_and_group();
    let suffix = random_suffix();
    let name = format!("e2e-test-{base}-{suffix}-crd");
    let kind = format!("E2e-test-{base}-{suffix}-crd");
    let (versions, conversion) = shape.spec(s);
    let served: Vec<String> = versions
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v["name"].as_str().map(String::from))
        .collect();
    let mut crd = crd_object(&name, &kind, group, versions);
    if let Some(c) = conversion {
        crd["spec"]["conversion"] = c;
    }
    ctx.all::<CustomResourceDefinition>()
        .create(&PostParams::default(), &from_json(crd)?)
        .await?;
    let crd = TestCrd {
        name: format!("{name}s.{group}"),
        group: group.into(),
        plural: format!("{name}s"),
        kind,
    };
    for v in &served {
        let path = format!("/apis/{group}/{v}");
        ctx.wait(
            &format!("{} in the discovery of {group}/{v}", crd.plural),
            SETTLE,
            || async {
                let listed = match get_json(ctx, &path).await {
                    Ok(doc) => doc["resources"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .any(|r| r["name"] == json!(crd.plural)),
                    Err(CaseError::Kube(kube::Error::Api(e))) if e.code == 404 => false,
                    Err(e) => return Err(e),
                };
                Ok(if listed { Ok(()) } else { Err("not listed") })
            },
        )
        .await?;
    }
    Ok(crd)
}

type CrdSteps = for<'a> fn(&'a Ctx, &'a WebhookServer, &'a TestCrd) -> BoxFuture<'a, CaseResult>;

/// BeforeEach (the admission or conversion server), a test CRD of `shape`, the steps, then the
/// CRD deleted and the server torn down.
async fn with_crd(ctx: &Ctx, shape: Shape, steps: CrdSteps) -> CaseResult {
    let s = match shape {
        Shape::Conversion => WebhookServer::deploy_conversion(ctx).await?,
        _ => WebhookServer::deploy(ctx).await?,
    };
    let outcome = async {
        let crd = create_test_crd(ctx, &s, shape).await?;
        let result = steps(ctx, &s, &crd).await;
        let cleanup = ctx
            .all::<CustomResourceDefinition>()
            .delete(&crd.name, &DeleteParams::default())
            .await
            .map(|_| ())
            .map_err(CaseError::from);
        finish(result, cleanup)
    }
    .await;
    s.teardown(ctx).await;
    outcome
}

/// A hook on the CRD's served versions.
fn cr_hook(s: &WebhookServer, crd: &TestCrd, name: &str, ops: &[&str], path: &str) -> Value {
    let mut hook = s.hook(name, ops, &[], path);
    hook["rules"] = json!([{"operations": ops, "apiGroups": [crd.group],
        "apiVersions": ["v1", "v2"], "resources": [crd.plural]}]);
    hook
}

/// registerMutatingWebhookForCustomResource: stage 1 on CREATE and UPDATE, stage 2 on CREATE.
async fn register_cr_mutation(ctx: &Ctx, s: &WebhookServer, crd: &TestCrd) -> CaseResult {
    let path = "/mutating-custom-resource";
    s.mutating(
        ctx,
        &s.ns,
        json!({}),
        vec![
            cr_hook(
                s,
                crd,
                "mutate-custom-resource-data-stage-1.k8s.io",
                &["CREATE", "UPDATE"],
                path,
            ),
            cr_hook(
                s,
                crd,
                "mutate-custom-resource-data-stage-2.k8s.io",
                &["CREATE"],
                path,
            ),
            s.mutating_is_ready(),
        ],
    )
    .await?;
    s.wait_ready(ctx).await
}

/// Admission webhook, deny custom resource create and delete: with a webhook denying unwanted
/// custom resource data, creating a non-compliant custom resource MUST be denied, updating a
/// compliant one to be non-compliant MUST be denied, deleting one marked non-deletable MUST be
/// denied; once updated to compliant data its deletion MUST succeed.
async fn deny_custom_resource(ctx: &Ctx) -> CaseResult {
    with_crd(ctx, Shape::Plain, |c, s, crd| {
        Box::pin(deny_custom_resource_steps(c, s, crd))
    })
    .await
}

async fn deny_custom_resource_steps(ctx: &Ctx, s: &WebhookServer, crd: &TestCrd) -> CaseResult {
    let hook = cr_hook(
        s,
        crd,
        "deny-unwanted-custom-resource-data.k8s.io",
        &["CREATE", "UPDATE", "DELETE"],
        "/custom-resource",
    );
    s.validating(ctx, &s.ns, json!({}), vec![hook, s.validating_is_ready()])
        .await?;
    s.wait_ready(ctx).await?;
    let api = crd.api(ctx, "v1");
    let pp = PostParams::default();
    let with = |name: &str, value: &str| {
        crd.instance("v1", name, json!({"data": {"webhook-e2e-test": value}}))
    };
    refused(
        api.create(&pp, &with("cr-instance-1", "webhook-disallow")?)
            .await,
        "creating the non-compliant custom resource",
        &[UNWANTED_CR],
    )?;
    api.create(&pp, &with("cr-instance-2", "webhook-nondeletable")?)
        .await?;
    let update = |value: &'static str| {
        let api = api.clone();
        async move {
            let mut cr = to_json(&api.get("cr-instance-2").await?);
            cr["data"]["webhook-e2e-test"] = json!(value);
            let cr: DynamicObject = from_json(cr)?;
            CaseResult::Ok(
                api.replace("cr-instance-2", &PostParams::default(), &cr)
                    .await?,
            )
        }
    };
    refused(
        update("webhook-disallow").await,
        "updating the custom resource with disallowed data",
        &[UNWANTED_CR],
    )?;
    refused(
        api.delete("cr-instance-2", &DeleteParams::default()).await,
        "deleting the non-deletable custom resource",
        &["the custom resource cannot be deleted because it contains unwanted key and value"],
    )?;
    update("webhook-allow").await?;
    api.delete("cr-instance-2", &DeleteParams::default())
        .await?;
    Ok(())
}

/// testMutatingCustomResourceWebhook: cr-instance-1 with `mutation-start` created at v1; its
/// data MUST be what the two stages add (stage 2's key pruned when `pruned`).
async fn created_mutated(ctx: &Ctx, s: &WebhookServer, crd: &TestCrd, pruned: bool) -> CaseResult {
    register_cr_mutation(ctx, s, crd).await?;
    let cr = crd.instance(
        "v1",
        "cr-instance-1",
        json!({"data": {"mutation-start": "yes"}}),
    )?;
    let created = crd
        .api(ctx, "v1")
        .create(&PostParams::default(), &cr)
        .await?;
    let keys: &[&str] = if pruned {
        &["mutation-start", "mutation-stage-1"]
    } else {
        &["mutation-start", "mutation-stage-1", "mutation-stage-2"]
    };
    must_eq!(
        to_json(&created)["data"],
        to_json(&yes(keys)),
        "the mutated custom resource's data"
    );
    Ok(())
}

/// Admission webhook, mutate custom resource: a created custom resource MUST carry the data
/// both mutating webhooks add.
async fn mutate_custom_resource(ctx: &Ctx) -> CaseResult {
    with_crd(ctx, Shape::Plain, |c, s, crd| {
        Box::pin(created_mutated(c, s, crd, false))
    })
    .await
}

/// Admission webhook, mutate custom resource with pruning: with a schema knowing only
/// mutation-start and mutation-stage-1, those MUST be present and mutation-stage-2 MUST NOT.
async fn mutate_pruning(ctx: &Ctx) -> CaseResult {
    with_crd(ctx, Shape::Pruning, |c, s, crd| {
        Box::pin(created_mutated(c, s, crd, true))
    })
    .await
}

/// Admission webhook, mutate custom resource with different stored version: a custom resource
/// created while v1 is stored, the CRD then patched to store v2, a JSON patch at v2 adding a
/// field MUST succeed, the result carrying the field and the mutated data.
async fn mutate_stored_version(ctx: &Ctx) -> CaseResult {
    with_crd(ctx, Shape::MultiVersion, |c, s, crd| {
        Box::pin(mutate_stored_version_steps(c, s, crd))
    })
    .await
}

async fn mutate_stored_version_steps(ctx: &Ctx, s: &WebhookServer, crd: &TestCrd) -> CaseResult {
    register_cr_mutation(ctx, s, crd).await?;
    let cr = crd.instance(
        "v1",
        "cr-instance-1",
        json!({"data": {"mutation-start": "yes"}}),
    )?;
    crd.api(ctx, "v1")
        .create(&PostParams::default(), &cr)
        .await?;
    let preserve = json!({"openAPIV3Schema": {"x-kubernetes-preserve-unknown-fields": true,
        "type": "object"}});
    let v2_stored = json!({"spec": {"versions": [
        version("v1", false, preserve.clone()),
        version("v2", true, preserve),
    ]}});
    ctx.all::<CustomResourceDefinition>()
        .patch(
            &crd.name,
            &PatchParams::default(),
            &Patch::Strategic(v2_stored),
        )
        .await?;
    let path = format!(
        "/apis/{}/v2/namespaces/{}/{}/cr-instance-1",
        crd.group, ctx.ns, crd.plural
    );
    let req = http::Request::patch(&path)
        .header(http::header::CONTENT_TYPE, "application/json-patch+json")
        .body(br#"[{ "op": "add", "path": "/dummy", "value": "test" }]"#.to_vec())
        .map_err(|e| CaseError::Failed(format!("building PATCH {path}: {e}")))?;
    let patched: Value = ctx.client.request(req).await?;
    let patched = to_json(&patched);
    must_eq!(
        patched["data"],
        to_json(&yes(&[
            "mutation-start",
            "mutation-stage-1",
            "mutation-stage-2"
        ])),
        "the patched custom resource's data"
    );
    must_eq!(patched["dummy"], json!("test"), "the field the patch added");
    Ok(())
}

/// waitWebhookConversionReady: create stub custom resources at `version` (which needs the
/// webhook to convert them to the stored version) until one succeeds, then delete it.
async fn wait_conversion_ready(ctx: &Ctx, crd: &TestCrd, version: &str) -> CaseResult {
    let api = crd.api(ctx, version);
    let stub = crd.instance(version, &ctx.ns, json!({}))?;
    ctx.wait("the conversion webhook to be ready", SETTLE, || async {
        Ok(match api.create(&PostParams::default(), &stub).await {
            Ok(_) => Ok(()),
            Err(e) => Err(e.to_string()),
        })
    })
    .await?;
    api.delete(&ctx.ns, &DeleteParams::default()).await?;
    Ok(())
}

/// verifyV1Object / verifyV2Object: `hostPort` at v1, `host` and `port` at v2.
fn check_version(crd: &TestCrd, o: &Value, version: &str) -> CaseResult {
    let name = o["metadata"]["name"].as_str().unwrap_or_default();
    must_eq!(
        o["apiVersion"],
        json!(format!("{}/{version}", crd.group)),
        "{name}'s apiVersion"
    );
    let want = if version == "v1" {
        (json!("localhost:8080"), Value::Null, Value::Null)
    } else {
        (Value::Null, json!("localhost"), json!("8080"))
    };
    must_eq!(
        (o["hostPort"].clone(), o["host"].clone(), o["port"].clone()),
        want,
        "{name} at {version}: (hostPort, host, port)"
    );
    Ok(())
}

fn host_port(crd: &TestCrd, name: &str) -> CaseResult<DynamicObject> {
    crd.instance("v1", name, json!({"hostPort": "localhost:8080"}))
}

/// Custom Resource Definition Conversion Webhook, conversion custom resource: a custom resource
/// created at v1 MUST be readable at v2, converted.
async fn convert_v1_to_v2(ctx: &Ctx) -> CaseResult {
    with_crd(ctx, Shape::Conversion, |c, _, crd| {
        Box::pin(convert_v1_to_v2_steps(c, crd))
    })
    .await
}

async fn convert_v1_to_v2_steps(ctx: &Ctx, crd: &TestCrd) -> CaseResult {
    wait_conversion_ready(ctx, crd, "v2").await?;
    crd.api(ctx, "v1")
        .create(&PostParams::default(), &host_port(crd, "cr-instance-1")?)
        .await?;
    let v2 = crd.api(ctx, "v2").get("cr-instance-1").await?;
    check_version(crd, &to_json(&v2), "v2")
}

/// Custom Resource Definition Conversion Webhook, convert mixed version list: one custom
/// resource stored at v1, the storage version changed to v2, another created; listing at v1
/// and at v2 MUST return both, each in the listed version.
async fn convert_mixed_list(ctx: &Ctx) -> CaseResult {
    with_crd(ctx, Shape::Conversion, |c, _, crd| {
        Box::pin(convert_mixed_list_steps(c, crd))
    })
    .await
}

async fn convert_mixed_list_steps(ctx: &Ctx, crd: &TestCrd) -> CaseResult {
    wait_conversion_ready(ctx, crd, "v2").await?;
    let v1 = crd.api(ctx, "v1");
    let pp = PostParams::default();
    v1.create(&pp, &host_port(crd, "cr-instance-1")?).await?;
    let crds: Api<CustomResourceDefinition> = ctx.all();
    let mut updated = false;
    for _ in 0..5 {
        let mut o = to_json(&crds.get(&crd.name).await?);
        o["spec"]["versions"] = conversion_versions(true);
        match crds.replace(&crd.name, &pp, &from_json(o)?).await {
            Ok(_) => {
                updated = true;
                break;
            }
            Err(kube::Error::Api(e)) if e.code == 409 => continue,
            Err(e) => return Err(e.into()),
        }
    }
    must!(updated, "updating {} kept conflicting", crd.name);
    // Upstream retries this create: the CRD's change may re-create the resource's handlers.
    let mut created = Err(CaseError::Failed("not tried".into()));
    for _ in 0..5 {
        created = v1
            .create(&pp, &host_port(crd, "cr-instance-2")?)
            .await
            .map_err(CaseError::from);
        if created.is_ok() {
            break;
        }
    }
    created?;
    for version in ["v1", "v2"] {
        let list = crd.api(ctx, version).list(&Default::default()).await?;
        let mut names: Vec<String> = list
            .items
            .iter()
            .map(|o| o.metadata.name.clone().unwrap_or_default())
            .collect();
        names.sort();
        must_eq!(
            names,
            vec!["cr-instance-1".to_string(), "cr-instance-2".to_string()],
            "custom resources listed at {version}"
        );
        for o in &list.items {
            check_version(crd, &to_json(o), version)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_conversion_crd_moves_its_storage_to_v2() {
        for (v2_stored, stored) in [(false, "v1"), (true, "v2")] {
            let versions = conversion_versions(v2_stored);
            let names: Vec<&Value> = versions
                .as_array()
                .unwrap()
                .iter()
                .filter(|v| v["storage"] == json!(true))
                .map(|v| &v["name"])
                .collect();
            assert_eq!(names, vec![&json!(stored)]);
        }
    }
}
