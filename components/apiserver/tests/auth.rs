//! Authentication and authorization: no certificate → 401 (but health and version stay open),
//! a node may not read secrets, an unknown user is denied, masters may do everything.

use k8s_openapi::api::core::v1::{Namespace, Pod, Secret};
use kiln_testkit::Cluster;
use kube::api::{Api, ListParams};

async fn raw_get(client: &kube::Client, path: &str) -> (u16, serde_json::Value, String) {
    let req = http::Request::get(path).body(Vec::new()).unwrap();
    let resp = client
        .send(req.map(Into::into))
        .await
        .expect("request sent");
    let code = resp.status().as_u16();
    let body = resp.into_body().collect_bytes().await.unwrap();
    let text = String::from_utf8_lossy(&body).into_owned();
    (
        code,
        serde_json::from_str(&text).unwrap_or(serde_json::Value::Null),
        text,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anonymous_is_unauthorized_except_health() {
    let c = Cluster::start().await;
    let anon = c.anonymous();
    let (code, status, _) = raw_get(&anon, "/api/v1/namespaces").await;
    assert_eq!(code, 401);
    assert_eq!(
        status,
        serde_json::json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                           "message": "Unauthorized", "reason": "Unauthorized", "code": 401})
    );
    assert_eq!(raw_get(&anon, "/api").await.0, 401);
    let (code, _, text) = raw_get(&anon, "/readyz").await;
    assert_eq!((code, text.as_str()), (200, "ok"));
    let (code, version, _) = raw_get(&anon, "/version").await;
    assert_eq!(code, 200);
    assert_eq!(version["major"], "1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_and_strangers_are_forbidden() {
    let c = Cluster::start().await;
    let node = c.client(&c.node_kubeconfig).await;
    let secrets: Api<Secret> = Api::namespaced(node.clone(), "default");
    let err = match secrets.list(&ListParams::default()).await.unwrap_err() {
        kube::Error::Api(s) => s,
        other => panic!("{other:?}"),
    };
    assert_eq!(err.code, 403);
    assert_eq!(err.reason, "Forbidden");
    assert_eq!(
        err.message,
        "secrets is forbidden: User \"system:node:n1\" cannot list resource \"secrets\" in API group \"\" in the namespace \"default\""
    );
    let namespaces: Api<Namespace> = Api::all(node.clone());
    let err = namespaces
        .delete("default", &Default::default())
        .await
        .unwrap_err();
    assert!(matches!(err, kube::Error::Api(s) if s.code == 403));
    // What a kubelet needs works.
    let pods: Api<Pod> = Api::all(node);
    pods.list(&ListParams::default().fields("spec.nodeName=n1"))
        .await
        .unwrap();

    let bob = c.client(&c.kubeconfig_for("bob", &["developers"])).await;
    let pods: Api<Pod> = Api::namespaced(bob.clone(), "default");
    assert!(
        matches!(pods.list(&ListParams::default()).await.unwrap_err(), kube::Error::Api(s) if s.code == 403)
    );
    // Discovery is open to every authenticated user; metrics are not.
    assert_eq!(raw_get(&bob, "/api/v1").await.0, 200);
    assert_eq!(raw_get(&bob, "/metrics").await.0, 403);

    let admin = c.admin().await;
    let (code, _, text) = raw_get(&admin, "/metrics").await;
    assert_eq!(code, 200);
    assert!(text.contains("apiserver_request_total"), "{text}");
}
