//! Webhook conversion between the versions of a CRD: kiln-apiserver (on a real store) sends the
//! objects stored in another version to a real HTTPS conversion webhook on 127.0.0.1 (serving
//! certificate from a test CA, given as caBundle) — one object for a get, every stale object of a
//! mixed list in one ConversionReview — keeps metadata but labels/annotations as stored, and fails
//! with upstream's message when the webhook is gone.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use axum::routing::post;
use axum::{Json, Router};
use base64::Engine;
use kiln_testkit::{serve_https, Cluster, Pki};
use serde_json::{json, Value};

/// upstream's sample converter: v1 `spec.hostPort: "h:p"` <-> v2 `spec.host` + `spec.port`.
fn convert_one(obj: &Value, desired: &str) -> Value {
    let mut out = obj.clone();
    let from = obj["apiVersion"].as_str().unwrap_or("");
    if from.ends_with("/v1") && desired.ends_with("/v2") {
        let (host, port) = obj["spec"]["hostPort"]
            .as_str()
            .unwrap_or(":")
            .split_once(':')
            .unwrap_or(("", ""));
        out["spec"] = json!({"host": host, "port": port});
    } else if from.ends_with("/v2") && desired.ends_with("/v1") {
        let hp = format!(
            "{}:{}",
            obj["spec"]["host"].as_str().unwrap_or(""),
            obj["spec"]["port"].as_str().unwrap_or("")
        );
        out["spec"] = json!({"hostPort": hp});
    }
    out["apiVersion"] = json!(desired);
    // A webhook may set labels; a changed name is ignored by the server.
    out["metadata"]["labels"]["converted"] = json!("yes");
    out["metadata"]["name"] = json!("renamed-by-webhook");
    out
}

async fn run_server(calls: Arc<AtomicUsize>) -> (std::net::SocketAddr, String) {
    let pki = Pki::new();
    let pair = pki.serving_as("converter");
    let app = Router::new().route(
        "/convert",
        post(move |Json(review): Json<Value>| {
            let calls = calls.clone();
            async move {
                calls.fetch_add(1, Ordering::SeqCst);
                let req = &review["request"];
                let desired = req["desiredAPIVersion"].as_str().unwrap_or("");
                let converted: Vec<Value> = req["objects"].as_array().unwrap().iter().map(|o| convert_one(o, desired)).collect();
                Json(json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
                            "response": {"uid": req["uid"], "convertedObjects": converted, "result": {"status": "Success"}}}))
            }
        }),
    );
    (
        serve_https(app, &pair.cert, &pair.key).await,
        pki.ca.cert.clone(),
    )
}

fn crd(url: &str, ca: &str) -> String {
    let ca = base64::engine::general_purpose::STANDARD.encode(ca);
    format!(
        r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {{name: endpoints.stable.example.com}}
spec:
  group: stable.example.com
  scope: Namespaced
  names: {{plural: endpoints, kind: Endpoint}}
  conversion:
    strategy: Webhook
    webhook:
      conversionReviewVersions: [v1]
      clientConfig: {{url: "{url}", caBundle: {ca}}}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {{type: object, properties: {{hostPort: {{type: string}}}}}}
  - name: v2
    served: true
    storage: false
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {{type: object, properties: {{host: {{type: string}}, port: {{type: string}}}}}}
"#
    )
}

fn file(c: &Cluster, name: &str, content: &str) -> String {
    let p = c.dir.path().join(name);
    std::fs::write(&p, content).unwrap();
    p.to_string_lossy().into_owned()
}

async fn raw(c: &Cluster, path: &str) -> Value {
    serde_json::from_str(&c.kubectl_ok(&["get", "--raw", path]).await).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conversion_webhook_converts_reads_between_versions() {
    let calls = Arc::new(AtomicUsize::new(0));
    let (addr, ca) = run_server(calls.clone()).await;
    let c = Cluster::start().await;
    // A CRD whose webhook speaks only v1beta1 reviews, or none, is refused.
    let bad = crd(&format!("https://{addr}/convert"), &ca).replace(
        "conversionReviewVersions: [v1]",
        "conversionReviewVersions: [v9]",
    );
    let (ok, _, err) = c
        .kubectl(
            &c.admin_kubeconfig,
            &["create", "-f", &file(&c, "bad.yaml", &bad)],
        )
        .await;
    assert!(
        !ok && err.contains("spec.conversion.webhook.conversionReviewVersions"),
        "ok={ok} {err}"
    );

    c.kubectl_ok(&[
        "create",
        "-f",
        &file(
            &c,
            "crd.yaml",
            &crd(&format!("https://{addr}/convert"), &ca),
        ),
    ])
    .await;
    c.kubectl_ok(&[
        "wait",
        "--for=condition=Established",
        "crd/endpoints.stable.example.com",
        "--timeout=30s",
    ])
    .await;

    let v1 = "apiVersion: stable.example.com/v1\nkind: Endpoint\nmetadata: {name: a, labels: {app: x}}\nspec: {hostPort: \"localhost:8080\"}\n";
    c.kubectl_ok(&["create", "-f", &file(&c, "a.yaml", v1)])
        .await;
    let same = raw(
        &c,
        "/apis/stable.example.com/v1/namespaces/default/endpoints/a",
    )
    .await;
    assert_eq!(same["spec"]["hostPort"], "localhost:8080");
    assert_eq!(
        calls.load(Ordering::SeqCst),
        0,
        "a read in the stored version needs no conversion"
    );

    // v1 -> v2 through the webhook; metadata kept but for labels.
    let a = raw(
        &c,
        "/apis/stable.example.com/v2/namespaces/default/endpoints/a",
    )
    .await;
    assert_eq!(a["apiVersion"], "stable.example.com/v2");
    assert_eq!(a["spec"], json!({"host": "localhost", "port": "8080"}));
    assert_eq!(a["metadata"]["name"], "a", "the webhook may not rename");
    assert_eq!(
        a["metadata"]["labels"],
        json!({"app": "x", "converted": "yes"})
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1);

    // A mixed list: one v1 and one v2 object, read as v1 and as v2.
    let v2 = "apiVersion: stable.example.com/v2\nkind: Endpoint\nmetadata: {name: b}\nspec: {host: example.com, port: \"443\"}\n";
    c.kubectl_ok(&["create", "-f", &file(&c, "b.yaml", v2)])
        .await;
    let before = calls.load(Ordering::SeqCst);
    let list = raw(
        &c,
        "/apis/stable.example.com/v1/namespaces/default/endpoints",
    )
    .await;
    let items = list["items"].as_array().unwrap();
    assert_eq!(items.len(), 2);
    for item in items {
        assert_eq!(item["apiVersion"], "stable.example.com/v1");
    }
    let b = items.iter().find(|i| i["metadata"]["name"] == "b").unwrap();
    assert_eq!(b["spec"]["hostPort"], "example.com:443");
    assert_eq!(
        calls.load(Ordering::SeqCst),
        before + 1,
        "the stale objects of a list go in one review"
    );
    let list = raw(
        &c,
        "/apis/stable.example.com/v2/namespaces/default/endpoints",
    )
    .await;
    let a = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["metadata"]["name"] == "a")
        .unwrap()
        .clone();
    assert_eq!(a["spec"]["host"], "localhost");

    // The webhook gone: reads that need it fail with upstream's message; others still work.
    let crd_gone = crd("https://127.0.0.1:1/convert", &ca);
    let mut obj: Value = serde_json::from_str(
        &c.kubectl_ok(&["get", "crd", "endpoints.stable.example.com", "-o", "json"])
            .await,
    )
    .unwrap();
    let want: Value = serde_norway::from_str(&crd_gone).unwrap();
    obj["spec"]["conversion"] = want["spec"]["conversion"].clone();
    c.kubectl_ok(&["replace", "-f", &file(&c, "crd2.json", &obj.to_string())])
        .await;
    kiln_testkit::eventually("reads to use the unreachable webhook", || async {
        let (ok, _, err) = c
            .kubectl(
                &c.admin_kubeconfig,
                &[
                    "get",
                    "--raw",
                    "/apis/stable.example.com/v2/namespaces/default/endpoints/a",
                ],
            )
            .await;
        (!ok && err.contains("conversion webhook for stable.example.com/v2, Kind=Endpoint failed"))
            .then_some(())
    })
    .await;
    let still = raw(
        &c,
        "/apis/stable.example.com/v1/namespaces/default/endpoints/a",
    )
    .await;
    assert_eq!(still["spec"]["hostPort"], "localhost:8080");
}
