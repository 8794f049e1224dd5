//! Admission webhooks end to end: kiln-apiserver on a real store calls a real HTTPS webhook server on
//! 127.0.0.1 (serving certificate from a test CA, given to kiln as caBundle): a JSON patch shows on
//! the stored object, a denial's message reaches the client, a slow webhook fails the request with
//! failurePolicy Fail and is skipped with Ignore, objectSelector skips objects, warnings reach kubectl,
//! matchConditions ask RBAC through `authorizer`, a policy's status carries its type check.

use std::net::SocketAddr;
use std::time::Duration;

use axum::routing::post;
use axum::{Json, Router};
use base64::Engine;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
    ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kiln_testkit::{Cluster, Pki, WAIT};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{json, Value};

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn answer(review: &Value, response: Value) -> Json<Value> {
    let mut response = response;
    response["uid"] = review["request"]["uid"].clone();
    Json(
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}),
    )
}

/// Adds `mutated: "yes"` and warns.
async fn mutate(Json(review): Json<Value>) -> Json<Value> {
    let has_labels = review["request"]["object"]["metadata"]["labels"].is_object();
    let patch = if has_labels {
        json!([{"op": "add", "path": "/metadata/labels/mutated", "value": "yes"}])
    } else {
        json!([{"op": "add", "path": "/metadata/labels", "value": {"mutated": "yes"}}])
    };
    answer(
        &review,
        json!({"allowed": true, "patchType": "JSONPatch",
               "patch": b64(&serde_json::to_vec(&patch).unwrap()),
               "warnings": ["configmap mutated by the test webhook"]}),
    )
}

/// Refuses objects named `forbidden-*`.
async fn deny(Json(review): Json<Value>) -> Json<Value> {
    let name = review["request"]["name"].as_str().unwrap_or("");
    if name.starts_with("forbidden-") {
        answer(
            &review,
            json!({"allowed": false, "status": {"code": 403, "message": "names starting with forbidden- are not allowed"}}),
        )
    } else {
        answer(&review, json!({"allowed": true}))
    }
}

/// Answers after the caller's timeout.
async fn slow(Json(review): Json<Value>) -> Json<Value> {
    tokio::time::sleep(Duration::from_secs(4)).await;
    answer(&review, json!({"allowed": true}))
}

/// Serves the webhooks over TLS on 127.0.0.1 with a certificate for 127.0.0.1; returns the address
/// and the CA's PEM.
async fn webhook_server() -> (SocketAddr, String) {
    let pki = Pki::new();
    let pair = pki.serving_as("webhook");
    (
        serve_webhooks(&pair.cert, &pair.key).await,
        pki.ca.cert.clone(),
    )
}

/// A CA and a serving certificate for the Service name `dns` (what kiln verifies for a service
/// clientConfig): (CA PEM, cert PEM, key PEM).
fn service_certificate(dns: &str) -> (String, String, String) {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec![dns.to_string()])
        .unwrap()
        .signed_by(&key, &issuer)
        .unwrap();
    (ca.pem(), cert.pem(), key.serialize_pem())
}

async fn serve_webhooks(cert_pem: &str, key_pem: &str) -> SocketAddr {
    let app = Router::new()
        .route("/mutate", post(mutate))
        .route("/deny", post(deny))
        .route("/slow", post(slow));
    kiln_testkit::serve_https(app, cert_pem, key_pem).await
}

fn webhook(name: &str, url: String, ca: &str, resources: &str, extra: Value) -> Value {
    let mut h = json!({
        "name": name,
        "clientConfig": {"url": url, "caBundle": b64(ca.as_bytes())},
        "rules": [{"operations": ["CREATE", "UPDATE"], "apiGroups": [""], "apiVersions": ["v1"],
                   "resources": [resources]}],
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
    });
    for (k, v) in extra.as_object().unwrap() {
        h[k] = v.clone();
    }
    h
}

fn api_error(e: kube::Error) -> Box<kube::core::Status> {
    match e {
        kube::Error::Api(s) => s,
        other => panic!("expected an API error, got {other:?}"),
    }
}

fn configmap(name: &str, labels: Value) -> ConfigMap {
    serde_json::from_value(
        json!({"metadata": {"name": name, "labels": labels}, "data": {"k": "v"}}),
    )
    .unwrap()
}

fn secret(name: &str) -> Secret {
    serde_json::from_value(json!({"metadata": {"name": name}, "stringData": {"k": "v"}})).unwrap()
}

/// Retries `attempt` until it returns Some: the configuration cache follows the store by watch.
async fn eventually<T, F, Fut>(what: &str, mut attempt: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if let Some(v) = attempt().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mutating_and_validating_webhooks() {
    let c = Cluster::start().await;
    let (addr, ca) = webhook_server().await;
    let client = c.admin().await;
    let pp = PostParams::default();

    let mutating: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let m: MutatingWebhookConfiguration = serde_json::from_value(json!({
        "metadata": {"name": "test-mutate"},
        "webhooks": [webhook("label.webhooks.kiln.test", format!("https://{addr}/mutate"), &ca, "configmaps",
            json!({"objectSelector": {"matchExpressions": [{"key": "skip", "operator": "DoesNotExist"}]}}))],
    }))
    .unwrap();
    let stored = mutating.create(&pp, &m).await.unwrap();
    let hook = &stored.webhooks.as_ref().unwrap()[0];
    assert_eq!(hook.failure_policy.as_deref(), Some("Fail"), "defaulted");
    assert_eq!(hook.timeout_seconds, Some(10));
    assert_eq!(hook.reinvocation_policy.as_deref(), Some("Never"));

    let validating: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let v: ValidatingWebhookConfiguration = serde_json::from_value(json!({
        "metadata": {"name": "test-deny"},
        "webhooks": [
            webhook("deny.webhooks.kiln.test", format!("https://{addr}/deny"), &ca, "configmaps", json!({})),
            webhook("slow.webhooks.kiln.test", format!("https://{addr}/slow"), &ca, "secrets", json!({"timeoutSeconds": 1})),
        ],
    }))
    .unwrap();
    validating.create(&pp, &v).await.unwrap();

    // Mutation: the patch is on the stored object.
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let mut n = 0;
    let created = eventually("the mutating webhook", || {
        n += 1;
        let cms = cms.clone();
        async move {
            let cm = cms
                .create(
                    &PostParams::default(),
                    &configmap(&format!("m{n}"), json!({"app": "x"})),
                )
                .await
                .unwrap();
            cm.metadata
                .labels
                .as_ref()?
                .get("mutated")
                .is_some()
                .then_some(cm)
        }
    })
    .await;
    let name = created.metadata.name.clone().unwrap();
    let got = cms.get(&name).await.unwrap();
    let labels = got.metadata.labels.unwrap();
    assert_eq!(labels.get("mutated").map(String::as_str), Some("yes"));
    assert_eq!(labels.get("app").map(String::as_str), Some("x"));

    // objectSelector: a labelled object skips the webhook.
    let skipped = cms
        .create(&pp, &configmap("skipped", json!({"skip": "true"})))
        .await
        .unwrap();
    assert!(!skipped.metadata.labels.unwrap().contains_key("mutated"));

    // Denial: the webhook's message, in upstream's words.
    let err = api_error(
        eventually("the validating webhook", || {
            let cms = cms.clone();
            async move {
                cms.create(
                    &PostParams::default(),
                    &configmap("forbidden-one", json!({})),
                )
                .await
                .err()
            }
        })
        .await,
    );
    assert_eq!(err.code, 403);
    assert_eq!(
        err.message,
        "admission webhook \"deny.webhooks.kiln.test\" denied the request: names starting with forbidden- are not allowed"
    );
    assert!(
        cms.get_opt("forbidden-one").await.unwrap().is_none(),
        "nothing stored"
    );

    // Warnings reach the client as Warning headers (kubectl prints them).
    let (ok, _, stderr) = c
        .kubectl(
            &c.admin_kubeconfig,
            &["create", "configmap", "warned", "--from-literal=a=b"],
        )
        .await;
    assert!(ok, "{stderr}");
    assert!(
        stderr.contains("Warning: configmap mutated by the test webhook"),
        "{stderr}"
    );

    // A webhook slower than timeoutSeconds: failurePolicy Fail refuses the request...
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "default");
    let err = api_error(secrets.create(&pp, &secret("s1")).await.unwrap_err());
    assert_eq!((err.code, err.reason.as_str()), (500, "InternalError"));
    assert_eq!(
        err.message,
        format!("Internal error occurred: failed calling webhook \"slow.webhooks.kiln.test\": failed to call webhook: Post \"https://{addr}/slow?timeout=1s\": context deadline exceeded")
    );
    // ... and Ignore lets it through.
    let current = validating.get("test-deny").await.unwrap();
    let mut updated = serde_json::to_value(&current).unwrap();
    updated["webhooks"][1]["failurePolicy"] = json!("Ignore");
    validating
        .patch(
            "test-deny",
            &PatchParams::default(),
            &Patch::Merge(json!({"webhooks": updated["webhooks"]})),
        )
        .await
        .unwrap();
    let mut n = 0;
    eventually("failurePolicy Ignore", || {
        n += 1;
        let secrets = secrets.clone();
        async move {
            secrets
                .create(&PostParams::default(), &secret(&format!("s-ignored-{n}")))
                .await
                .ok()
        }
    })
    .await;

    // Webhook configurations themselves are never sent to webhooks.
    validating
        .delete("test-deny", &Default::default())
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validating_admission_policy_denies_and_warns() {
    let c = Cluster::start().await;
    let client = c.admin().await;
    let pp = PostParams::default();
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(client.clone());
    let policy: ValidatingAdmissionPolicy = serde_json::from_value(json!({
        "metadata": {"name": "small-configmaps"},
        "spec": {
            "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
            "matchConstraints": {"resourceRules": [{"operations": ["CREATE", "UPDATE"], "apiGroups": [""],
                "apiVersions": ["v1"], "resources": ["configmaps"]}]},
            "matchConditions": [{"name": "not-params", "expression": "object.metadata.name != 'limits'"}],
            "validations": [{"expression": "size(object.data) <= int(params.data.max)",
                             "messageExpression": "'at most ' + params.data.max + ' keys'"}],
        },
    }))
    .unwrap();
    let stored = policies.create(&pp, &policy).await.unwrap();
    assert_eq!(
        stored.spec.unwrap().failure_policy.as_deref(),
        Some("Fail"),
        "defaulted"
    );
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let limits: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "limits"}, "data": {"max": "1"}}))
            .unwrap();
    cms.create(&pp, &limits).await.unwrap();
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(client.clone());
    let binding: ValidatingAdmissionPolicyBinding = serde_json::from_value(json!({
        "metadata": {"name": "small-configmaps-default"},
        "spec": {"policyName": "small-configmaps", "validationActions": ["Deny"],
                 "paramRef": {"name": "limits", "namespace": "default"}},
    }))
    .unwrap();
    bindings.create(&pp, &binding).await.unwrap();

    let two: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "two"}, "data": {"a": "1", "b": "2"}}))
            .unwrap();
    let err = api_error(
        eventually("the policy", || {
            let (cms, two) = (cms.clone(), two.clone());
            async move { cms.create(&PostParams::default(), &two).await.err() }
        })
        .await,
    );
    assert_eq!((err.code, err.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        err.message,
        "configmaps \"two\" is forbidden: ValidatingAdmissionPolicy 'small-configmaps' with binding 'small-configmaps-default' denied request: at most 1 keys"
    );
    let one: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "one"}, "data": {"a": "1"}})).unwrap();
    cms.create(&pp, &one).await.unwrap();

    // Warn instead of Deny: the request goes through with a warning.
    bindings
        .patch(
            "small-configmaps-default",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"validationActions": ["Warn"]}})),
        )
        .await
        .unwrap();
    let path = c.dir.path().join("two.yaml");
    std::fs::write(&path, serde_json::to_string(&two).unwrap()).unwrap();
    let path = path.to_string_lossy().into_owned();
    let stderr = eventually("the Warn action", || {
        let path = path.clone();
        let c = &c;
        async move {
            let (ok, _, stderr) = c
                .kubectl(&c.admin_kubeconfig, &["create", "-f", &path])
                .await;
            ok.then_some(stderr)
        }
    })
    .await;
    assert!(
        stderr.contains("Warning: Validation failed for ValidatingAdmissionPolicy 'small-configmaps' with binding 'small-configmaps-default': at most 1 keys"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_client_config_goes_to_a_ready_endpoint() {
    let c = Cluster::start().await;
    let (ca, cert, key) = service_certificate("hook.default.svc");
    let addr = serve_webhooks(&cert, &key).await;
    let client = c.admin().await;
    let pp = PostParams::default();
    let services: Api<k8s_openapi::api::core::v1::Service> =
        Api::namespaced(client.clone(), "default");
    services
        .create(
            &pp,
            &serde_json::from_value(json!({"metadata": {"name": "hook"},
            "spec": {"ports": [{"name": "https", "port": 443, "targetPort": 8443}]}}))
            .unwrap(),
        )
        .await
        .unwrap();
    let slices: Api<k8s_openapi::api::discovery::v1::EndpointSlice> =
        Api::namespaced(client.clone(), "default");
    slices
        .create(
            &pp,
            &serde_json::from_value(json!({
            "metadata": {"name": "hook-1", "labels": {"kubernetes.io/service-name": "hook"}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["127.0.0.2"], "conditions": {"ready": false}},
                          {"addresses": ["127.0.0.1"], "conditions": {"ready": true}}],
            "ports": [{"name": "https", "port": addr.port(), "protocol": "TCP"}]}))
            .unwrap(),
        )
        .await
        .unwrap();
    let validating: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let v: ValidatingWebhookConfiguration = serde_json::from_value(json!({
        "metadata": {"name": "by-service"},
        "webhooks": [{"name": "deny.webhooks.kiln.test",
            "clientConfig": {"service": {"namespace": "default", "name": "hook", "path": "/deny"},
                             "caBundle": b64(ca.as_bytes())},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]}],
            "sideEffects": "None", "admissionReviewVersions": ["v1"]}],
    }))
    .unwrap();
    let stored = validating.create(&pp, &v).await.unwrap();
    let svc = stored.webhooks.unwrap()[0]
        .client_config
        .service
        .clone()
        .unwrap();
    assert_eq!(svc.port, Some(443), "defaulted");
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let err = api_error(
        eventually("the webhook behind the Service", || {
            let cms = cms.clone();
            async move {
                cms.create(
                    &PostParams::default(),
                    &configmap("forbidden-svc", json!({})),
                )
                .await
                .err()
            }
        })
        .await,
    );
    assert_eq!(
        err.message,
        "admission webhook \"deny.webhooks.kiln.test\" denied the request: names starting with forbidden- are not allowed"
    );
    cms.create(&pp, &configmap("allowed-svc", json!({})))
        .await
        .unwrap();
}

const CHECKED_POLICY: &str = r#"apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: checked
spec:
  matchConstraints:
    resourceRules:
    - {operations: [CREATE], apiGroups: [""], apiVersions: [v1], resources: [configmaps]}
  validations:
  - expression: object.data
  - expression: params.max == 1
  - expression: "true"
    messageExpression: "1 + 1"
"#;

const BIG_CONFIGMAPS: &str = r#"apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: big-configmaps
spec:
  matchConstraints:
    resourceRules:
    - {operations: [CREATE], apiGroups: [""], apiVersions: [v1], resources: [configmaps]}
  variables:
  - name: big
    expression: size(object.data) > 1
  - name: broken
    expression: object.data.nope == 'x'
  - name: mayCreateSecrets
    expression: authorizer.group('').resource('secrets').namespace(object.metadata.namespace).check('create').allowed()
  validations:
  - expression: "!variables.big || variables.mayCreateSecrets"
    message: only those who may create secrets may create big configmaps
  - expression: "!object.metadata.name.startsWith('broken') || variables.broken"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: big-configmaps
spec:
  policyName: big-configmaps
  validationActions: [Deny]
"#;

const CONFIGMAP_WRITER: &str = r#"apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: configmap-writer, namespace: default}
rules:
- {apiGroups: [""], resources: [configmaps], verbs: [create, get]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: alice-configmaps, namespace: default}
subjects: [{kind: User, name: alice, apiGroup: rbac.authorization.k8s.io}]
roleRef: {kind: Role, name: configmap-writer, apiGroup: rbac.authorization.k8s.io}
"#;

const SECRET_WRITER: &str = r#"apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: secret-writer, namespace: default}
rules:
- {apiGroups: [""], resources: [secrets], verbs: [create]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: alice-secrets, namespace: default}
subjects: [{kind: User, name: alice, apiGroup: rbac.authorization.k8s.io}]
roleRef: {kind: Role, name: secret-writer, apiGroup: rbac.authorization.k8s.io}
"#;

/// With the real kubectl: a policy whose expressions do not type-check is refused with
/// upstream's paths and texts; a policy's `authorizer` checks are answered by RBAC for the
/// requesting user; a variable is evaluated only when read, so a broken one fails only the
/// requests whose validation reads it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_expressions_are_checked_authorized_and_lazy() {
    let c = Cluster::start().await;
    let write = |name: &str, content: &str| {
        let p = c.dir.path().join(name);
        std::fs::write(&p, content).unwrap();
        p.to_string_lossy().into_owned()
    };
    let (ok, _, err) = c
        .kubectl(
            &c.admin_kubeconfig,
            &["apply", "-f", &write("checked.yaml", CHECKED_POLICY)],
        )
        .await;
    assert!(!ok);
    for want in [
        "spec.validations[0].expression: Invalid value: \"object.data\": must evaluate to bool",
        "spec.validations[1].expression: Invalid value: \"params.max == 1\": compilation failed: ERROR: <input>:1:1: undeclared reference to 'params' (in container '')",
        "spec.validations[2].messageExpression: Invalid value: \"1 + 1\": must evaluate to string",
    ] {
        assert!(err.contains(want), "missing {want:?} in:\n{err}");
    }

    c.kubectl_ok(&["apply", "-f", &write("big.yaml", BIG_CONFIGMAPS)])
        .await;
    c.kubectl_ok(&["apply", "-f", &write("cm.yaml", CONFIGMAP_WRITER)])
        .await;
    let alice = c.kubeconfig_for("alice", &[]);
    let big = |name: &str| {
        write(
            &format!("{name}.yaml"),
            &format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}, namespace: default}}\ndata: {{a: '1', b: '2'}}\n"),
        )
    };
    // alice may create configmaps but not secrets: her big configmap is refused once the
    // policy is in force; the admin's passes.
    let big1 = big("big1");
    let err = kiln_testkit::eventually("the policy to deny alice", || {
        let (c, alice, big1) = (&c, alice.clone(), big1.clone());
        async move {
            let (ok, _, err) = c.kubectl(&alice, &["create", "-f", &big1]).await;
            (!ok).then_some(err)
        }
    })
    .await;
    assert!(
        err.contains("ValidatingAdmissionPolicy 'big-configmaps' with binding 'big-configmaps' denied request: only those who may create secrets may create big configmaps"),
        "{err}"
    );
    c.kubectl_ok(&["create", "-f", &big("big2")]).await;
    // Small configmaps never read `mayCreateSecrets` nor `broken`.
    let small = write(
        "small.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: small, namespace: default}\ndata: {a: '1'}\n",
    );
    let (ok, _, err) = c.kubectl(&alice, &["create", "-f", &small]).await;
    assert!(ok, "{err}");
    // The broken variable fails the one validation that reads it (the admin passes the other).
    let (ok, _, err) = c
        .kubectl(&c.admin_kubeconfig, &["create", "-f", &big("broken1")])
        .await;
    assert!(!ok);
    assert!(
        err.contains("expression '!object.metadata.name.startsWith('broken') || variables.broken' resulted in error: no such key: nope"),
        "{err}"
    );
    // Once RBAC lets alice create secrets, the check allows her big configmap.
    c.kubectl_ok(&["apply", "-f", &write("secrets.yaml", SECRET_WRITER)])
        .await;
    let (ok, _, err) = c.kubectl(&alice, &["create", "-f", &big1]).await;
    assert!(ok, "{err}");
}

/// A webhook's matchConditions may ask the `authorizer`, as upstream's: the denying webhook is
/// called only for users RBAC does not let create secrets — alice, until a Role lets her; never
/// the admin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_match_conditions_ask_the_authorizer() {
    let c = Cluster::start().await;
    let (addr, ca) = webhook_server().await;
    let write = |name: &str, content: &str| {
        let p = c.dir.path().join(name);
        std::fs::write(&p, content).unwrap();
        p.to_string_lossy().into_owned()
    };
    c.kubectl_ok(&["apply", "-f", &write("cm.yaml", CONFIGMAP_WRITER)])
        .await;
    let validating: Api<ValidatingWebhookConfiguration> = Api::all(c.admin().await);
    let v: ValidatingWebhookConfiguration = serde_json::from_value(json!({
        "metadata": {"name": "deny-unprivileged"},
        "webhooks": [webhook("unprivileged.webhooks.kiln.test", format!("https://{addr}/deny"), &ca, "configmaps",
            json!({"matchConditions": [{"name": "cannot-create-secrets",
                "expression": "!authorizer.group('').resource('secrets').namespace(object.metadata.namespace).check('create').allowed()"}]}))],
    }))
    .unwrap();
    validating.create(&PostParams::default(), &v).await.unwrap();

    let alice = c.kubeconfig_for("alice", &[]);
    // alice creates a configmap with kubectl: (succeeded, stderr).
    let alice_creates = |name: String| {
        let (c, alice) = (&c, alice.clone());
        async move {
            let (ok, _, err) = c
                .kubectl(&alice, &["create", "configmap", &name, "-n", "default"])
                .await;
            (ok, err)
        }
    };
    let mut n = 0;
    let err = kiln_testkit::eventually("the webhook to deny alice", || {
        n += 1;
        let attempt = alice_creates(format!("forbidden-alice-{n}"));
        async move {
            let (ok, err) = attempt.await;
            (!ok).then_some(err)
        }
    })
    .await;
    assert!(
        err.contains("admission webhook \"unprivileged.webhooks.kiln.test\" denied the request: names starting with forbidden- are not allowed"),
        "{err}"
    );
    // The admin may create secrets: the condition is false, the webhook is not called.
    c.kubectl_ok(&["create", "configmap", "forbidden-admin", "-n", "default"])
        .await;
    // Once RBAC lets alice create secrets, the webhook is skipped for her too.
    c.kubectl_ok(&["apply", "-f", &write("secrets.yaml", SECRET_WRITER)])
        .await;
    let mut n = 0;
    kiln_testkit::eventually("the webhook to skip alice", || {
        n += 1;
        let attempt = alice_creates(format!("forbidden-alice-ok-{n}"));
        async move { attempt.await.0.then_some(()) }
    })
    .await;
}

/// upstream's e2e "should type check validation expressions" and "should type check a CRD": a
/// policy's status gets `typeChecking` (with `observedGeneration`) once its expressions are checked
/// against the kinds it matches — none for correct types, one per confused expression with
/// cel-go's text, for built-in kinds and for a CRD's schema; a spec change is checked again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_status_carries_the_type_check() {
    let c = Cluster::start().await;
    let client = c.admin().await;
    let pp = PostParams::default();
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(client.clone());
    let raw: Api<kube::core::DynamicObject> = Api::all_with(
        client.clone(),
        &kube::discovery::ApiResource::erase::<ValidatingAdmissionPolicy>(&()),
    );
    let policy = |name: &str, group: &str, resource: &str, validations: Value| {
        serde_json::from_value::<ValidatingAdmissionPolicy>(json!({
            "metadata": {"name": name},
            "spec": {
                "matchConstraints": {"resourceRules": [{"operations": ["CREATE"], "apiGroups": [group],
                    "apiVersions": ["v1"], "resources": [resource]}]},
                "validations": validations,
            },
        }))
        .unwrap()
    };
    // The status as JSON: an empty typeChecking must be told apart from none.
    let checked = |name: &'static str| {
        let raw = raw.clone();
        async move {
            eventually(&format!("{name}'s type check"), || {
                let raw = raw.clone();
                async move {
                    let o = raw.get(name).await.ok()?;
                    let status = o.data.get("status")?.clone();
                    status.get("typeChecking").is_some().then_some(status)
                }
            })
            .await
        }
    };

    policies
        .create(
            &pp,
            &policy(
                "correct",
                "apps",
                "deployments",
                json!([{"expression": "object.spec.replicas > 1"}]),
            ),
        )
        .await
        .unwrap();
    let status = checked("correct").await;
    assert_eq!(status["typeChecking"], json!({}), "{status:#}");
    assert_eq!(status["observedGeneration"], 1);

    policies
        .create(
            &pp,
            &policy(
                "confused",
                "apps",
                "deployments",
                json!([{"expression": "object.spec.replicas > '1'",
                        "messageExpression": "'wants replicas > 1, got ' + object.spec.replicas"}]),
            ),
        )
        .await
        .unwrap();
    let status = checked("confused").await;
    let w = &status["typeChecking"]["expressionWarnings"];
    assert_eq!(w.as_array().map(Vec::len), Some(2), "{status:#}");
    assert_eq!(w[0]["fieldRef"], "spec.validations[0].expression");
    let text = w[0]["warning"].as_str().unwrap();
    assert!(
        text.starts_with("apps/v1, Kind=Deployment: ERROR: "),
        "{text}"
    );
    assert!(
        text.contains("found no matching overload for '_>_' applied to '(int, string)'"),
        "{text}"
    );
    assert_eq!(w[1]["fieldRef"], "spec.validations[0].messageExpression");
    assert!(
        w[1]["warning"]
            .as_str()
            .unwrap()
            .contains("found no matching overload for '_+_' applied to '(string, int)'"),
        "{w:#}"
    );

    // A spec change is a new generation, checked again.
    let fix = json!({"spec": {"validations": [{"expression": "object.spec.replicas > 1"}]}});
    policies
        .patch("confused", &PatchParams::default(), &Patch::Merge(&fix))
        .await
        .unwrap();
    eventually("the fixed policy's type check", || {
        let raw = raw.clone();
        async move {
            let o = raw.get("confused").await.ok()?;
            let status = o.data.get("status")?;
            (status["observedGeneration"] == 2 && status["typeChecking"] == json!({})).then_some(())
        }
    })
    .await;

    // A custom resource is typed by its CRD's schema.
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "metadata": {"name": "crontabs.stable.example.com"},
        "spec": {"group": "stable.example.com", "scope": "Namespaced",
            "names": {"plural": "crontabs", "singular": "crontab", "kind": "CronTab"},
            "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {
                "type": "object", "properties": {"spec": {"type": "object", "properties": {
                    "cronSpec": {"type": "string"}, "image": {"type": "string"},
                    "replicas": {"type": "integer"}}}}}}}]},
    }))
    .unwrap();
    crds.create(&pp, &crd).await.unwrap();
    let crontab_policy = policy(
        "crontabs",
        "stable.example.com",
        "crontabs",
        json!([{"expression": "object.spec.replicas > '1'"},
               {"expression": "object.spec.maxRetries < 10"}]),
    );
    // Created once the CRD is served (upstream's e2e waits for its OpenAPI the same way).
    let w = eventually(
        "the CronTab policy's type check to name both expressions",
        || {
            let (policies, raw, p, pp) = (
                policies.clone(),
                raw.clone(),
                crontab_policy.clone(),
                pp.clone(),
            );
            async move {
                let o = match raw.get_opt("crontabs").await.ok()? {
                    Some(o) => o,
                    None => {
                        policies.create(&pp, &p).await.ok()?;
                        return None;
                    }
                };
                // Not checked yet: wait.
                let checked = o.data.get("status")?.get("typeChecking")?;
                let w = checked["expressionWarnings"].clone();
                if w.as_array().map(Vec::len) == Some(2) {
                    return Some(w);
                }
                // Checked before the CRD was served: deleted, to be made and checked again.
                let _ = policies.delete("crontabs", &Default::default()).await;
                None
            }
        },
    )
    .await;
    assert_eq!(w[0]["fieldRef"], "spec.validations[0].expression");
    let t0 = w[0]["warning"].as_str().unwrap();
    assert!(
        t0.starts_with("stable.example.com/v1, Kind=CronTab: "),
        "{t0}"
    );
    assert!(t0.contains("applied to '(int, string)'"), "{t0}");
    assert_eq!(w[1]["fieldRef"], "spec.validations[1].expression");
    assert!(
        w[1]["warning"]
            .as_str()
            .unwrap()
            .contains("undefined field 'maxRetries'"),
        "{w:#?}"
    );
}
