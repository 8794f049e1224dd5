//! Upstream's delete, list and Table semantics that clients rely on, driven by the real kubectl
//! and kube-rs: DeleteOptions' propagationPolicy (kubectl's `--cascade`) and each kind's default
//! (core v1 ReplicationControllers orphan, apps/v1 kinds do not) as the garbage collector's
//! finalizers; a second delete with another policy; remainingItemCount on list pages; 406 for a
//! Table of a kind that has none. No controller-manager runs here: a stand-in removes the
//! finalizer as the garbage collector would once it has done its part.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, ReplicationController};
use kiln_testkit::{eventually, Cluster};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::{json, Value};

const RC: &str = "replicationcontroller";

async fn create_rc(rcs: &Api<ReplicationController>, name: &str) {
    let labels = json!({"app": name});
    let rc = json!({
        "metadata": {"name": name},
        "spec": {"replicas": 0, "selector": labels, "template": {
            "metadata": {"labels": labels},
            "spec": {"containers": [{"name": "c", "image": "kiln/pause:1"}]},
        }},
    });
    rcs.create(&PostParams::default(), &serde_json::from_value(rc).unwrap())
        .await
        .unwrap();
}

/// The RC's (deletionTimestamp set, finalizers), or None once it is gone.
async fn deletion_state(
    rcs: &Api<ReplicationController>,
    name: &str,
) -> Option<(bool, Vec<String>)> {
    let rc = rcs.get_opt(name).await.unwrap()?;
    Some((
        rc.metadata.deletion_timestamp.is_some(),
        rc.metadata.finalizers.unwrap_or_default(),
    ))
}

/// The garbage collector's part, played by hand: once `name` is being deleted and holds
/// `finalizer`, the finalizer goes (and with it the object).
fn collect_when_held(rcs: Api<ReplicationController>, name: &'static str, finalizer: &'static str) {
    tokio::spawn(async move {
        let what = format!("{name} held by {finalizer}");
        eventually(&what, || async {
            match deletion_state(&rcs, name).await {
                Some((true, f)) if f.iter().any(|x| x == finalizer) => Some(()),
                _ => None,
            }
        })
        .await;
        let patch = json!({"metadata": {"finalizers": null}});
        rcs.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_cascade_sets_the_garbage_collectors_finalizers() {
    let c = Cluster::start().await;
    let client = c.admin().await;
    let rcs: Api<ReplicationController> = Api::namespaced(client.clone(), "default");

    // --cascade=orphan: the RC stays, Terminating, with the orphan finalizer until the collector
    // has orphaned its pods; kubectl waits for it to go.
    create_rc(&rcs, "orphaned").await;
    collect_when_held(rcs.clone(), "orphaned", "orphan");
    let out = c
        .kubectl_ok(&[
            "delete",
            RC,
            "orphaned",
            "--cascade=orphan",
            "--timeout=30s",
        ])
        .await;
    assert!(out.contains("\"orphaned\" deleted"), "{out}");
    assert_eq!(deletion_state(&rcs, "orphaned").await, None);

    // --cascade=foreground: held by foregroundDeletion (here without waiting).
    create_rc(&rcs, "fg").await;
    c.kubectl_ok(&["delete", RC, "fg", "--cascade=foreground", "--wait=false"])
        .await;
    assert_eq!(
        deletion_state(&rcs, "fg").await,
        Some((true, vec!["foregroundDeletion".to_string()]))
    );
    // A second delete with another policy swaps the finalizer (upstream's
    // deletionFinalizersForGarbageCollection runs again on an object already being deleted)...
    c.kubectl_ok(&["delete", RC, "fg", "--cascade=orphan", "--wait=false"])
        .await;
    assert_eq!(
        deletion_state(&rcs, "fg").await,
        Some((true, vec!["orphan".to_string()]))
    );
    // ... and Background drops it: nothing holds the RC any more, so it goes at once.
    c.kubectl_ok(&["delete", RC, "fg", "--cascade=background", "--timeout=30s"])
        .await;
    assert_eq!(deletion_state(&rcs, "fg").await, None);

    // --cascade=background (kubectl's default): gone at once.
    create_rc(&rcs, "bg").await;
    c.kubectl_ok(&["delete", RC, "bg", "--timeout=30s"]).await;
    assert_eq!(deletion_state(&rcs, "bg").await, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_kind_has_upstreams_default_policy() {
    let c = Cluster::start().await;
    let client = c.admin().await;
    let rcs: Api<ReplicationController> = Api::namespaced(client.clone(), "default");

    // No policy: a core v1 ReplicationController orphans its dependents by default.
    create_rc(&rcs, "legacy").await;
    rcs.delete("legacy", &DeleteParams::default())
        .await
        .unwrap();
    assert_eq!(
        deletion_state(&rcs, "legacy").await,
        Some((true, vec!["orphan".to_string()]))
    );
    // The deprecated orphanDependents: false is Background.
    let raw = http::Request::delete("/api/v1/namespaces/default/replicationcontrollers/legacy")
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(json!({"orphanDependents": false}).to_string().into_bytes())
        .unwrap();
    client.request_text(raw).await.unwrap();
    assert_eq!(deletion_state(&rcs, "legacy").await, None);

    // Both fields at once, or an unknown policy: 422 as upstream's ValidateDeleteOptions.
    create_rc(&rcs, "strict").await;
    for body in [
        json!({"orphanDependents": true, "propagationPolicy": "Orphan"}),
        json!({"propagationPolicy": "Sideways"}),
    ] {
        let raw = http::Request::delete("/api/v1/namespaces/default/replicationcontrollers/strict")
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(body.to_string().into_bytes())
            .unwrap();
        match client.request_text(raw).await {
            Err(kube::Error::Api(s)) => assert_eq!(s.code, 422, "{body}: {s:?}"),
            other => panic!("{body}: {other:?}"),
        }
    }
    // The query's propagationPolicy counts when the body is empty.
    let raw = http::Request::delete(
        "/api/v1/namespaces/default/replicationcontrollers/strict?propagationPolicy=Foreground",
    )
    .body(Vec::new())
    .unwrap();
    client.request_text(raw).await.unwrap();
    assert_eq!(
        deletion_state(&rcs, "strict").await,
        Some((true, vec!["foregroundDeletion".to_string()]))
    );

    // apps/v1 kinds delete in the background by default: gone at once.
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let d = json!({
        "metadata": {"name": "web"},
        "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": {
            "metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "c", "image": "kiln/pause:1"}]},
        }},
    });
    deployments
        .create(&PostParams::default(), &serde_json::from_value(d).unwrap())
        .await
        .unwrap();
    deployments
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    assert!(deployments.get_opt("web").await.unwrap().is_none());
}

async fn list_json(client: &kube::Client, uri: &str) -> Value {
    let req = http::Request::get(uri).body(Vec::new()).unwrap();
    serde_json::from_str(&client.request_text(req).await.unwrap()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_pages_count_the_items_left() {
    let c = Cluster::start().await;
    let client = c.admin().await;
    let ns: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    ns.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "paged"}})).unwrap(),
    )
    .await
    .unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "paged");
    for i in 0..5 {
        let cm = json!({"metadata": {"name": format!("cm-{i}"), "labels": {"i": i.to_string()}}});
        cms.create(&PostParams::default(), &serde_json::from_value(cm).unwrap())
            .await
            .unwrap();
    }
    let base = "/api/v1/namespaces/paged/configmaps";
    let first = list_json(&client, &format!("{base}?limit=2")).await;
    assert_eq!(first["items"].as_array().unwrap().len(), 2);
    assert_eq!(
        first["metadata"]["remainingItemCount"], 3,
        "{}",
        first["metadata"]
    );
    let token = first["metadata"]["continue"].as_str().unwrap();
    let second = list_json(&client, &format!("{base}?limit=2&continue={token}")).await;
    assert_eq!(
        second["metadata"]["remainingItemCount"], 1,
        "{}",
        second["metadata"]
    );
    let token = second["metadata"]["continue"].as_str().unwrap();
    let last = list_json(&client, &format!("{base}?limit=2&continue={token}")).await;
    assert_eq!(last["items"].as_array().unwrap().len(), 1);
    assert!(
        last["metadata"].get("remainingItemCount").is_none(),
        "{}",
        last["metadata"]
    );
    assert!(
        last["metadata"].get("continue").is_none(),
        "{}",
        last["metadata"]
    );
    // With a selector the store's count is not the selection's: no count, as upstream.
    let selected = list_json(&client, &format!("{base}?limit=1&labelSelector=i")).await;
    assert!(selected["metadata"]["continue"].is_string(), "{selected}");
    assert!(
        selected["metadata"].get("remainingItemCount").is_none(),
        "{}",
        selected["metadata"]
    );
    // kube-rs reads it too.
    let page = cms.list(&ListParams::default().limit(4)).await.unwrap();
    assert_eq!(page.metadata.remaining_item_count, Some(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_of_a_review_is_not_acceptable() {
    let c = Cluster::start().await;
    let client = c.admin().await;
    let sar = json!({
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {"nonResourceAttributes": {"path": "/", "verb": "get"}},
    });
    let post = |accept: &'static str| {
        http::Request::post("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews")
            .header(http::header::ACCEPT, accept)
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(sar.to_string().into_bytes())
            .unwrap()
    };
    match client
        .request_text(post("application/json;as=Table;v=v1;g=meta.k8s.io"))
        .await
    {
        Err(kube::Error::Api(s)) => {
            assert_eq!((s.code, s.reason.as_str()), (406, "NotAcceptable"), "{s:?}");
            assert!(
                s.message
                    .starts_with("only the following media types are accepted"),
                "{s:?}"
            );
        }
        other => panic!("{other:?}"),
    }
    // The plain JSON review still answers.
    let ok = client.request_text(post("application/json")).await.unwrap();
    assert!(ok.contains("\"allowed\":true"), "{ok}");
}
