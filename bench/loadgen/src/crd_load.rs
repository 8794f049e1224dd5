//! Custom resources against the built-in kind they are most like (ConfigMaps), in one run on one
//! kiln-apiserver process: COUNT creates one after another (p50/p99 of each request) and a LIST of
//! all COUNT objects (median of 3). A CR pays for schema pruning, defaulting and validation that a
//! ConfigMap does not; the goal (issue 24) is within 1.5x of the ConfigMap numbers.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kiln_testkit::client_from_kubeconfig;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, PostParams};
use kube::core::GroupVersionKind;
use serde_json::json;

use crate::harness::{ms, start_apiserver, RunDir, StartError};
use crate::stats::percentile;

#[derive(Debug, thiserror::Error)]
pub enum CrdBenchError {
    #[error(transparent)]
    Start(#[from] StartError),
    #[error("API: {0}")]
    Api(#[from] kube::Error),
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
    #[error("decoding: {0}")]
    Decode(#[from] serde_json::Error),
    #[error("the CRD was not Established within 30 s")]
    NotEstablished,
}

#[derive(Debug, serde::Serialize)]
pub struct CrdResult {
    pub count: usize,
    pub configmap_create_p50_ms: f64,
    pub configmap_create_p99_ms: f64,
    pub cr_create_p50_ms: f64,
    pub cr_create_p99_ms: f64,
    pub configmap_list_ms: f64,
    pub cr_list_ms: f64,
    /// ConfigMap creates through one allow-all validating webhook on 127.0.0.1.
    pub webhook_create_p50_ms: f64,
    pub webhook_create_p99_ms: f64,
    /// The webhook's own handling time (request read to answer), p50.
    pub webhook_own_p50_ms: f64,
}

/// A CRD with a schema of the usual shape: typed spec fields, a default, a pattern, an enum and a
/// CEL rule, so every write runs the whole custom-resource path.
fn crd() -> serde_json::Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "benchwidgets.bench.kiln.io"},
        "spec": {"group": "bench.kiln.io", "scope": "Namespaced",
                 "names": {"plural": "benchwidgets", "kind": "BenchWidget"},
                 "versions": [{"name": "v1", "served": true, "storage": true,
                    "subresources": {"status": {}},
                    "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                        "spec": {"type": "object",
                                 "x-kubernetes-validations": [{"rule": "self.replicas <= 100"}],
                                 "properties": {
                            "image": {"type": "string", "pattern": "^[a-z0-9./:-]+$"},
                            "replicas": {"type": "integer", "minimum": 0, "default": 1},
                            "mode": {"type": "string", "enum": ["fast", "slow"], "default": "fast"},
                            "data": {"type": "object", "additionalProperties": {"type": "string"}}}}}}}}]}
    })
}

fn data() -> serde_json::Value {
    json!({"a": "1", "b": "two", "c": "three"})
}

async fn timed<F, Fut>(count: usize, mut f: F) -> Result<Vec<Duration>, kube::Error>
where
    F: FnMut(usize) -> Fut,
    Fut: std::future::Future<Output = Result<(), kube::Error>>,
{
    let mut out = Vec::with_capacity(count);
    for i in 0..count {
        let t = Instant::now();
        f(i).await?;
        out.push(t.elapsed());
    }
    Ok(out)
}

async fn median_list<F, Fut>(mut f: F) -> Result<f64, kube::Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), kube::Error>>,
{
    let mut runs = Vec::new();
    for _ in 0..3 {
        let t = Instant::now();
        f().await?;
        runs.push(t.elapsed());
    }
    runs.sort();
    Ok(ms(runs[1]))
}

fn p(values: &[Duration], q: f64) -> f64 {
    let mut v = values.to_vec();
    v.sort();
    ms(percentile(&v, q))
}

pub async fn run(bin: &str, count: usize) -> Result<CrdResult, CrdBenchError> {
    let dir = RunDir::create("crds")?;
    let server = start_apiserver(bin, &dir.0).await?;
    let client = client_from_kubeconfig(&server.kubeconfig).await;
    let crds: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
            "customresourcedefinitions",
        ),
    );
    crds.create(&PostParams::default(), &serde_json::from_value(crd())?)
        .await?;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let c = crds.get("benchwidgets.bench.kiln.io").await?;
        let established = c.data["status"]["conditions"].as_array().is_some_and(|cs| {
            cs.iter()
                .any(|x| x["type"] == "Established" && x["status"] == "True")
        });
        if established {
            break;
        }
        if Instant::now() > deadline {
            return Err(CrdBenchError::NotEstablished);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The registry picks the CRD up from its watch; give the first CR request a served resource.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("bench.kiln.io", "v1", "BenchWidget"),
        "benchwidgets",
    );
    let crs: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &resource);
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    // Alternate warm-up so neither kind gets a cold first request in its numbers.
    for i in 0..20 {
        let cm: ConfigMap = serde_json::from_value(
            json!({"metadata": {"name": format!("warm-{i}")}, "data": data()}),
        )?;
        cms.create(&PostParams::default(), &cm).await?;
        let cr: DynamicObject = serde_json::from_value(
            json!({"apiVersion": "bench.kiln.io/v1", "kind": "BenchWidget",
            "metadata": {"name": format!("warm-{i}")}, "spec": {"image": "registry.local/app:1", "data": data()}}),
        )?;
        crs.create(&PostParams::default(), &cr).await?;
    }
    let cm_times = timed(count, |i| {
        let cms = cms.clone();
        async move {
            let cm: ConfigMap = serde_json::from_value(
                json!({"metadata": {"name": format!("cm-{i:05}")}, "data": data()}),
            )
            .expect("a ConfigMap");
            cms.create(&PostParams::default(), &cm).await.map(|_| ())
        }
    })
    .await?;
    let cr_times = timed(count, |i| {
        let crs = crs.clone();
        async move {
            let cr: DynamicObject = serde_json::from_value(
                json!({"apiVersion": "bench.kiln.io/v1", "kind": "BenchWidget",
                "metadata": {"name": format!("cr-{i:05}")},
                "spec": {"image": "registry.local/app:1", "replicas": 3, "data": data()}}),
            )
            .expect("a CR");
            crs.create(&PostParams::default(), &cr).await.map(|_| ())
        }
    })
    .await?;
    let configmap_list_ms = median_list(|| {
        let cms = cms.clone();
        async move { cms.list(&ListParams::default()).await.map(|_| ()) }
    })
    .await?;
    let cr_list_ms = median_list(|| {
        let crs = crs.clone();
        async move { crs.list(&ListParams::default()).await.map(|_| ()) }
    })
    .await?;
    let (webhook_times, webhook_own) = through_webhook(&client, &cms, count).await?;
    Ok(CrdResult {
        count,
        configmap_create_p50_ms: p(&cm_times, 50.0),
        configmap_create_p99_ms: p(&cm_times, 99.0),
        cr_create_p50_ms: p(&cr_times, 50.0),
        cr_create_p99_ms: p(&cr_times, 99.0),
        configmap_list_ms,
        cr_list_ms,
        webhook_create_p50_ms: p(&webhook_times, 50.0),
        webhook_create_p99_ms: p(&webhook_times, 99.0),
        webhook_own_p50_ms: p(&webhook_own, 50.0),
    })
}

/// Registers an allow-all ValidatingWebhookConfiguration for ConfigMaps labelled
/// `bench-webhook=true` and times COUNT such creates; returns them and the webhook's own times.
async fn through_webhook(
    client: &kube::Client,
    cms: &Api<ConfigMap>,
    count: usize,
) -> Result<(Vec<Duration>, Vec<Duration>), CrdBenchError> {
    use axum::routing::post;
    use axum::Json;
    use std::sync::{Arc, Mutex};
    let own: Arc<Mutex<Vec<Duration>>> = Arc::default();
    let recorded = own.clone();
    let app = axum::Router::new().route(
        "/allow",
        post(move |Json(review): Json<serde_json::Value>| {
            let recorded = recorded.clone();
            async move {
                let t = Instant::now();
                let answer = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                    "response": {"uid": review["request"]["uid"], "allowed": true}});
                recorded
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(t.elapsed());
                Json(answer)
            }
        }),
    );
    let pki = kiln_testkit::Pki::new();
    let pair = pki.serving_as("bench-webhook");
    let addr = kiln_testkit::serve_https(app, &pair.cert, &pair.key).await;
    let ca = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, &pki.ca.cert);
    let hooks: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(
                "admissionregistration.k8s.io",
                "v1",
                "ValidatingWebhookConfiguration",
            ),
            "validatingwebhookconfigurations",
        ),
    );
    let config = json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "bench"},
        "webhooks": [{"name": "allow.bench.kiln.io", "admissionReviewVersions": ["v1"], "sideEffects": "None",
            "clientConfig": {"url": format!("https://{addr}/allow"), "caBundle": ca},
            "objectSelector": {"matchLabels": {"bench-webhook": "true"}},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]}]}]});
    hooks
        .create(&PostParams::default(), &serde_json::from_value(config)?)
        .await?;
    // The webhook cache follows the store; wait until a labelled create reaches the webhook.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut i = 0;
    while own.lock().unwrap_or_else(|e| e.into_inner()).is_empty() {
        if Instant::now() > deadline {
            return Err(CrdBenchError::NotEstablished);
        }
        let cm: ConfigMap =
            serde_json::from_value(json!({"metadata": {"name": format!("hook-warm-{i}"),
            "labels": {"bench-webhook": "true"}}, "data": data()}))?;
        cms.create(&PostParams::default(), &cm).await?;
        i += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for j in 0..20 {
        let cm: ConfigMap =
            serde_json::from_value(json!({"metadata": {"name": format!("hook-warm2-{j}"),
            "labels": {"bench-webhook": "true"}}, "data": data()}))?;
        cms.create(&PostParams::default(), &cm).await?;
    }
    own.lock().unwrap_or_else(|e| e.into_inner()).clear();
    let times = timed(count, |k| {
        let cms = cms.clone();
        async move {
            let cm: ConfigMap =
                serde_json::from_value(json!({"metadata": {"name": format!("hook-{k:05}"),
                "labels": {"bench-webhook": "true"}}, "data": data()}))
                .expect("a ConfigMap");
            cms.create(&PostParams::default(), &cm).await.map(|_| ())
        }
    })
    .await?;
    let own = own.lock().unwrap_or_else(|e| e.into_inner()).clone();
    Ok((times, own))
}
