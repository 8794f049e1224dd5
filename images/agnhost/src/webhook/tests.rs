//! The webhook as the apiserver sees it: reviews in, reviews out, through the router and over HTTPS.

use base64::Engine as _;
use serde_json::{json, Value};

use super::*;
use crate::testutil::{call, https_post, test_cert};

const JSON: &[(&str, &str)] = &[("content-type", "application/json")];

fn review(api_version: &str, request: Value) -> String {
    json!({"apiVersion": api_version, "kind": "AdmissionReview", "request": request}).to_string()
}

fn configmap_create(data: Value) -> Value {
    json!({
        "uid": "3f1c",
        "operation": "CREATE",
        "resource": {"group": "", "version": "v1", "resource": "configmaps"},
        "object": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}, "data": data}
    })
}

async fn post(path: &str, body: &str) -> (u16, Value) {
    let (status, headers, body, dropped) = call(router(Config::default()), path, JSON, body).await;
    assert!(!dropped, "{path}: connection dropped");
    assert_eq!(headers[header::CONTENT_TYPE], "application/json");
    (status, serde_json::from_str(&body).unwrap())
}

#[tokio::test]
async fn answers_in_the_version_asked_with_the_uid() {
    for version in ["admission.k8s.io/v1", "admission.k8s.io/v1beta1"] {
        let body = review(
            version,
            configmap_create(json!({"webhook-e2e-test": "webhook-disallow"})),
        );
        let (status, out) = post("/configmaps", &body).await;
        assert_eq!(status, 200);
        assert_eq!(
            out,
            json!({
                "kind": "AdmissionReview",
                "apiVersion": version,
                "response": {
                    "uid": "3f1c",
                    "allowed": false,
                    "status": {"metadata": {}, "reason": "the configmap contains unwanted key and value"}
                }
            })
        );
    }
}

#[tokio::test]
async fn mutating_configmaps_sends_a_base64_json_patch() {
    let body = review(
        "admission.k8s.io/v1",
        configmap_create(json!({"mutation-start": "yes"})),
    );
    let (_, out) = post("/mutating-configmaps", &body).await;
    let r = &out["response"];
    assert_eq!(r["patchType"], "JSONPatch");
    let patch = base64::engine::general_purpose::STANDARD
        .decode(r["patch"].as_str().unwrap())
        .unwrap();
    assert_eq!(patch, configmaps::CONFIG_MAP_PATCH_1.as_bytes());
}

#[tokio::test]
async fn add_label_patches_an_unlabelled_object() {
    let body = review("admission.k8s.io/v1", configmap_create(json!({})));
    let (_, out) = post("/add-label", &body).await;
    let patch = base64::engine::general_purpose::STANDARD
        .decode(out["response"]["patch"].as_str().unwrap())
        .unwrap();
    let patch: Value = serde_json::from_slice(&patch).unwrap();
    assert_eq!(
        patch,
        json!([{"op": "add", "path": "/metadata/labels", "value": {"added-label": "yes"}}])
    );
}

#[tokio::test]
async fn every_upstream_path_is_served() {
    let app = router(Config::default());
    for &(path, admit) in ROUTES {
        if admit == Admit::AlwaysAllowDelay5s {
            continue;
        }
        let body = review(
            "admission.k8s.io/v1",
            json!({"uid": "u", "operation": "CREATE", "resource": {"version": "v1", "resource": "pods"}, "object": {}}),
        );
        let (status, _, _, _) = call(app.clone(), path, JSON, &body).await;
        assert_ne!(status, 404, "{path}");
    }
    let (status, _, body, _) = call(app.clone(), "/readyz", &[], "").await;
    assert_eq!((status, body.as_str()), (200, "ok"));
    let (status, _, body, _) = call(app, "/nope", &[], "").await;
    assert_eq!((status, body.as_str()), (404, "404 page not found\n"));
}

#[tokio::test]
async fn always_allow_waits_before_it_answers() {
    assert_eq!(
        Config::default().allow_delay,
        std::time::Duration::from_secs(5)
    );
    let delay = std::time::Duration::from_millis(300);
    let app = router(Config {
        allow_delay: delay,
        ..Config::default()
    });
    let started = std::time::Instant::now();
    let body = review("admission.k8s.io/v1", configmap_create(json!({})));
    let (_, _, out, _) = call(app, "/always-allow-delay-5s", JSON, &body).await;
    assert!(started.elapsed() >= delay);
    let out: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        out["response"],
        json!({"uid": "3f1c", "allowed": true, "status": {"metadata": {}, "message": "this webhook allows all requests"}})
    );
}

#[tokio::test]
async fn a_wrong_content_type_gets_an_empty_200() {
    let body = review("admission.k8s.io/v1", configmap_create(json!({})));
    let (status, _, out, _) = call(
        router(Config::default()),
        "/always-deny",
        &[("content-type", "text/plain")],
        &body,
    )
    .await;
    assert_eq!((status, out.as_str()), (200, ""));
}

#[tokio::test]
async fn undecodable_reviews_are_400s() {
    let app = router(Config::default());
    let (status, _, out, _) = call(
        app.clone(),
        "/always-deny",
        JSON,
        r#"{"apiVersion":"v1","kind":"Pod"}"#,
    )
    .await;
    assert_eq!(
        (status, out.as_str()),
        (400, "Unsupported group version kind: /v1, Kind=Pod\n")
    );
    let (status, _, out, _) = call(app, "/always-deny", JSON, "{").await;
    assert_eq!(status, 400);
    assert!(out.starts_with("Request could not be decoded: "), "{out}");
}

#[tokio::test]
async fn a_nil_response_drops_the_connection() {
    // /configmaps answers a pod request with nil, which upstream dereferences.
    let body = review(
        "admission.k8s.io/v1",
        json!({"uid": "u", "operation": "CREATE", "resource": {"version": "v1", "resource": "pods"}, "object": {}}),
    );
    let (_, _, _, dropped) = call(router(Config::default()), "/configmaps", JSON, &body).await;
    assert!(dropped);
    let (_, _, _, dropped) = call(
        router(Config::default()),
        "/always-deny",
        JSON,
        r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#,
    )
    .await;
    assert!(dropped);
}

#[tokio::test]
async fn sidecar_image_flag_reaches_the_patch() {
    let app = router(Config {
        sidecar_image: "registry.k8s.io/pause:3.10".into(),
        ..Config::default()
    });
    let body = review(
        "admission.k8s.io/v1",
        json!({"uid": "u", "operation": "CREATE", "resource": {"version": "v1", "resource": "pods"},
               "object": {"apiVersion": "v1", "kind": "Pod", "spec": {"containers": [{"name": "c"}]}}}),
    );
    let (_, _, out, _) = call(app, "/mutating-pods-sidecar", JSON, &body).await;
    let out: Value = serde_json::from_str(&out).unwrap();
    let patch = base64::engine::general_purpose::STANDARD
        .decode(out["response"]["patch"].as_str().unwrap())
        .unwrap();
    assert_eq!(
        patch,
        pods::pods_sidecar_patch("registry.k8s.io/pause:3.10").as_bytes()
    );
}

#[tokio::test]
async fn serves_reviews_over_https() {
    let cert = test_cert();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let args = WebhookArgs {
        tls_cert_file: cert.cert_file.clone(),
        tls_private_key_file: cert.key_file.clone(),
        port: 0,
        sidecar_image: String::new(),
    };
    let task = start(listener, &args).unwrap();
    let body = review(
        "admission.k8s.io/v1beta1",
        json!({"uid": "abc", "operation": "CREATE", "resource": {"version": "v1", "resource": "pods"},
               "object": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                          "spec": {"containers": [{"name": "webhook-disallow"}]}}}),
    );
    let (status, headers, out) = https_post(addr, &cert, "/pods", "application/json", &body).await;
    assert_eq!(status, 200);
    assert_eq!(headers[header::CONTENT_TYPE], "application/json");
    assert_eq!(
        out,
        r#"{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1beta1","response":{"uid":"abc","allowed":false,"status":{"metadata":{},"message":"the pod contains unwanted container name;"}}}"#
    );
    task.abort();
}

#[tokio::test]
async fn a_missing_key_pair_fails_to_start() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let args = WebhookArgs {
        tls_cert_file: "/nonexistent/tls.crt".into(),
        tls_private_key_file: "/nonexistent/tls.key".into(),
        port: 0,
        sidecar_image: String::new(),
    };
    assert!(start(listener, &args).is_err());
}
