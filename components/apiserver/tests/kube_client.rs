//! kube-rs against kiln-apiserver on a real etcd: create / get / list / watch / status / conflicts,
//! leases as a node, and 410 Expired after compaction.

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use kiln_testkit::{Cluster, WAIT};
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use serde_json::json;

fn pod(name: &str, labels: serde_json::Value) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "c", "image": "registry.local/app:1"}]}
    }))
    .unwrap()
}

fn api_error(e: kube::Error) -> Box<kube::core::Status> {
    match e {
        kube::Error::Api(s) => s,
        other => panic!("expected an API error, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crud_status_and_conflicts() {
    let c = Cluster::start().await;
    let pods: Api<Pod> = Api::namespaced(c.admin().await, "default");
    let pp = PostParams::default();

    let created = pods
        .create(&pp, &pod("a", json!({"app": "x"})))
        .await
        .unwrap();
    let rv = created.metadata.resource_version.clone().unwrap();
    assert!(created.metadata.uid.is_some());
    assert_eq!(created.metadata.generation, Some(1));
    pods.create(&pp, &pod("b", json!({"app": "y"})))
        .await
        .unwrap();

    let got = pods.get("a").await.unwrap();
    assert_eq!(got.metadata.resource_version.as_deref(), Some(rv.as_str()));

    let listed = pods
        .list(&ListParams::default().labels("app=x"))
        .await
        .unwrap();
    assert_eq!(listed.items.len(), 1);
    assert_eq!(listed.items[0].metadata.name.as_deref(), Some("a"));
    assert!(listed.metadata.resource_version.is_some());

    // Status through /status; the main endpoint cannot change it.
    let mut st = got.clone();
    st.status.as_mut().unwrap().phase = Some("Running".into());
    st.status.as_mut().unwrap().pod_ip = Some("10.244.0.7".into());
    let updated = pods.replace_status("a", &pp, &st).await.unwrap();
    assert_eq!(
        updated.status.as_ref().unwrap().phase.as_deref(),
        Some("Running")
    );
    let mut main = updated.clone();
    main.status.as_mut().unwrap().phase = Some("Failed".into());
    let after = pods.replace("a", &pp, &main).await.unwrap();
    assert_eq!(after.status.unwrap().phase.as_deref(), Some("Running"));

    // A stale resourceVersion is a 409 Conflict.
    let err = api_error(pods.replace("a", &pp, &got).await.unwrap_err());
    assert_eq!(err.code, 409);
    assert_eq!(err.reason, "Conflict");
    assert!(err
        .message
        .starts_with("Operation cannot be fulfilled on pods \"a\""));

    let err = api_error(pods.create(&pp, &pod("a", json!({}))).await.unwrap_err());
    assert_eq!((err.code, err.reason.as_str()), (409, "AlreadyExists"));
    let err = api_error(pods.get("zzz").await.unwrap_err());
    assert_eq!((err.code, err.reason.as_str()), (404, "NotFound"));
    let invalid: Pod =
        serde_json::from_value(json!({"metadata": {"name": "bad"}, "spec": {"containers": []}}))
            .unwrap();
    let err = api_error(pods.create(&pp, &invalid).await.unwrap_err());
    assert_eq!((err.code, err.reason.as_str()), (422, "Invalid"));
    let other: Api<Pod> = Api::namespaced(c.admin().await, "nowhere");
    let err = api_error(other.create(&pp, &pod("a", json!({}))).await.unwrap_err());
    assert_eq!(
        (err.code, err.message.as_str()),
        (404, "namespaces \"nowhere\" not found")
    );

    // Merge patch with labels; spec changes bump generation.
    let patched = pods
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"extra": "1"}}})),
        )
        .await
        .unwrap();
    assert_eq!(patched.metadata.labels.unwrap()["extra"], "1");
    assert_eq!(patched.metadata.generation, Some(1));
    let patched = pods
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Strategic(
                json!({"spec": {"containers": [{"name": "c", "image": "registry.local/app:2"}]}}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(patched.metadata.generation, Some(2));

    // Unscheduled pods are deleted at once.
    pods.delete("b", &DeleteParams::default()).await.unwrap();
    assert_eq!(api_error(pods.get("b").await.unwrap_err()).code, 404);
}

/// Patches that name no resourceVersion never fail with 409: a lost compare-and-swap is re-read
/// and re-applied (a controller patching a node while its kubelet posts status must not fail),
/// while a patch that names a stale resourceVersion still gets its 409.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_patches_without_resource_version_all_apply() {
    let c = Cluster::start().await;
    let pods: Api<Pod> = Api::namespaced(c.admin().await, "default");
    let created = pods
        .create(&PostParams::default(), &pod("p", json!({})))
        .await
        .unwrap();
    let patches = (0..16).map(|i| {
        let pods = pods.clone();
        async move {
            pods.patch(
                "p",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": {format!("l{i}"): "x"}}})),
            )
            .await
        }
    });
    for result in futures::future::join_all(patches).await {
        result.expect("a patch without resourceVersion is not a conflict");
    }
    let labels = pods.get("p").await.unwrap().metadata.labels.unwrap();
    assert_eq!(labels.len(), 16);

    let stale = json!({"metadata": {"resourceVersion": created.metadata.resource_version,
        "labels": {"late": "x"}}});
    let err = api_error(
        pods.patch("p", &PatchParams::default(), &Patch::Merge(stale))
            .await
            .unwrap_err(),
    );
    assert_eq!((err.code, err.reason.as_str()), (409, "Conflict"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_reports_changes_with_field_selector() {
    let c = Cluster::start().await;
    let pods: Api<Pod> = Api::namespaced(c.admin().await, "default");
    let pp = PostParams::default();
    let list = pods.list(&ListParams::default()).await.unwrap();
    let rv = list.metadata.resource_version.unwrap();

    // The kubelet's view: only pods bound to its node.
    let node_pods: Api<Pod> = Api::all(c.client(&c.node_kubeconfig).await);
    let wp = WatchParams::default()
        .fields("spec.nodeName=n1")
        .timeout(60);
    let mut stream = node_pods.watch(&wp, &rv).await.unwrap().boxed();

    pods.create(&pp, &pod("elsewhere", json!({})))
        .await
        .unwrap();
    let mut bound = pod("mine", json!({}));
    bound.spec.as_mut().unwrap().node_name = Some("n1".into());
    pods.create(&pp, &bound).await.unwrap();
    pods.patch(
        "mine",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"v": "2"}}})),
    )
    .await
    .unwrap();
    pods.delete("mine", &DeleteParams::default().grace_period(0))
        .await
        .unwrap();

    let mut seen = Vec::new();
    while seen.len() < 3 {
        let ev = tokio::time::timeout(WAIT, stream.try_next())
            .await
            .expect("watch event in time")
            .unwrap()
            .unwrap();
        match ev {
            WatchEvent::Added(p) => seen.push(("ADDED", p.metadata.name.unwrap())),
            WatchEvent::Modified(p) => seen.push(("MODIFIED", p.metadata.name.unwrap())),
            WatchEvent::Deleted(p) => seen.push(("DELETED", p.metadata.name.unwrap())),
            WatchEvent::Bookmark(_) => {}
            WatchEvent::Error(e) => panic!("watch error {e:?}"),
        }
    }
    assert_eq!(
        seen,
        [
            ("ADDED", "mine".to_string()),
            ("MODIFIED", "mine".into()),
            ("DELETED", "mine".into())
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_sends_bookmarks_and_410_after_compaction() {
    let c = Cluster::start_with(&["--watch-bookmark-interval-seconds=1"]).await;
    let pods: Api<Pod> = Api::namespaced(c.admin().await, "default");
    let first = pods
        .create(&PostParams::default(), &pod("p1", json!({})))
        .await
        .unwrap();
    let old_rv = first.metadata.resource_version.unwrap();

    let mut stream = pods
        .watch(&WatchParams::default().timeout(60), &old_rv)
        .await
        .unwrap()
        .boxed();
    let bookmark = loop {
        let ev = tokio::time::timeout(WAIT, stream.try_next())
            .await
            .expect("event in time")
            .unwrap()
            .unwrap();
        if let WatchEvent::Bookmark(b) = ev {
            break b;
        }
    };
    assert!(!bookmark.metadata.resource_version.is_empty());
    drop(stream);

    for i in 0..3 {
        pods.patch(
            "p1",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"i": i.to_string()}}})),
        )
        .await
        .unwrap();
    }
    let mut etcd = c.etcd.client().await;
    let rev = etcd
        .get("/registry/pods/default/p1", None)
        .await
        .unwrap()
        .header()
        .unwrap()
        .revision();
    etcd.compact(rev, None).await.unwrap();

    let mut stream = pods
        .watch(&WatchParams::default().timeout(60), &old_rv)
        .await
        .unwrap()
        .boxed();
    let ev = tokio::time::timeout(WAIT, stream.try_next())
        .await
        .expect("event in time")
        .unwrap()
        .unwrap();
    match ev {
        WatchEvent::Error(e) => {
            assert_eq!(e.code, 410);
            assert_eq!(e.reason, "Expired");
        }
        other => panic!("expected 410 Expired, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_registers_and_keeps_its_lease() {
    let c = Cluster::start().await;
    let client = c.client(&c.node_kubeconfig).await;
    let nodes: Api<Node> = Api::all(client.clone());
    let node: Node = serde_json::from_value(json!({"metadata": {"name": "n1"}})).unwrap();
    nodes.create(&PostParams::default(), &node).await.unwrap();
    let status = json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}});
    let patched = nodes
        .patch_status("n1", &PatchParams::default(), &Patch::Strategic(status))
        .await
        .unwrap();
    assert_eq!(
        patched.status.unwrap().conditions.unwrap()[0].status,
        "True"
    );

    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let lease: Lease = serde_json::from_value(json!({
        "metadata": {"name": "n1"},
        "spec": {"holderIdentity": "n1", "leaseDurationSeconds": 40,
                 "renewTime": "2026-01-01T00:00:00.000000Z"}
    }))
    .unwrap();
    let created = leases.create(&PostParams::default(), &lease).await.unwrap();
    let mut renewed = created.clone();
    renewed.spec.as_mut().unwrap().lease_duration_seconds = Some(41);
    let renewed = leases
        .replace("n1", &PostParams::default(), &renewed)
        .await
        .unwrap();
    assert_ne!(
        renewed.metadata.resource_version,
        created.metadata.resource_version
    );
    assert_eq!(renewed.spec.unwrap().lease_duration_seconds, Some(41));

    // Leases elsewhere are not the node's business.
    let other: Api<Lease> = Api::namespaced(client, "default");
    let err = api_error(
        other
            .create(&PostParams::default(), &lease)
            .await
            .unwrap_err(),
    );
    assert_eq!(err.code, 403);
    tokio::time::sleep(Duration::from_millis(0)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_pages_with_limit_and_continue() {
    let c = Cluster::start().await;
    let pods: Api<Pod> = Api::namespaced(c.admin().await, "default");
    for i in 0..5 {
        let tier = if i % 2 == 0 { "even" } else { "odd" };
        pods.create(
            &PostParams::default(),
            &pod(&format!("p{i}"), json!({"tier": tier})),
        )
        .await
        .unwrap();
    }
    let mut names = Vec::new();
    let mut lp = ListParams::default().limit(2);
    let mut pages = 0;
    let mut revision = None;
    loop {
        let page = pods.list(&lp).await.unwrap();
        pages += 1;
        assert!(page.items.len() <= 2);
        // Every page is read at the first page's revision.
        let rv = page.metadata.resource_version.clone();
        assert_eq!(*revision.get_or_insert(rv.clone()), rv);
        names.extend(page.items.into_iter().map(|p| p.metadata.name.unwrap()));
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => {
                lp = ListParams::default().limit(2).continue_token(&token)
            }
            _ => break,
        }
    }
    assert_eq!(names, ["p0", "p1", "p2", "p3", "p4"]);
    assert_eq!(pages, 3);

    let even = pods
        .list(&ListParams::default().labels("tier=even").limit(2))
        .await
        .unwrap();
    assert_eq!(even.items.len(), 2);
    assert!(even.metadata.continue_.is_some());

    let out = c
        .kubectl_ok(&["get", "pods", "--chunk-size=2", "-o", "name"])
        .await;
    assert_eq!(out.lines().count(), 5, "{out}");

    // deletecollection honours the selector.
    pods.delete_collection(
        &DeleteParams::default(),
        &ListParams::default().labels("tier=even"),
    )
    .await
    .unwrap();
    let left: Vec<String> = pods
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|p| p.metadata.name.unwrap())
        .collect();
    assert_eq!(left, ["p1", "p3"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_over_mutual_tls() {
    let c = Cluster::start_opts(&[], true).await;
    assert!(c.etcd.endpoint.starts_with("https://"));
    let pods: Api<Pod> = Api::namespaced(c.admin().await, "kube-system");
    pods.create(&PostParams::default(), &pod("over-tls", json!({})))
        .await
        .unwrap();
    let mut etcd = c.etcd.client().await;
    let stored = etcd
        .get("/registry/pods/kube-system/over-tls", None)
        .await
        .unwrap();
    let value: serde_json::Value = serde_json::from_slice(stored.kvs()[0].value()).unwrap();
    assert_eq!(value["metadata"]["name"], "over-tls");
    assert!(
        value["metadata"].get("resourceVersion").is_none(),
        "resourceVersion is the key's revision, not stored"
    );
    assert_eq!(c.kubectl_ok(&["get", "--raw", "/readyz"]).await, "ok");
}

/// Read back right after create, a Service and a Deployment carry `status` as upstream serializes its
/// zero value (`{loadBalancer: {}}`, `{}`): clients read `resp.status` without a None check.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn created_objects_carry_their_zero_status() {
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::Service;
    let c = Cluster::start().await;
    let client = c.admin().await;
    let pp = PostParams::default();
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let svc: Service = serde_json::from_value(json!({
        "metadata": {"name": "web"}, "spec": {"ports": [{"port": 80}]}
    }))
    .unwrap();
    let created = services.create(&pp, &svc).await.unwrap();
    let lb = created.status.and_then(|s| s.load_balancer);
    assert!(lb.is_some(), "create's answer has no status.loadBalancer");
    let raw: serde_json::Value = client
        .request(
            http::Request::get("/api/v1/namespaces/default/services/web")
                .body(Vec::new())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(raw["status"], json!({"loadBalancer": {}}));

    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "c", "image": "registry.local/app:1"}]}}}
    }))
    .unwrap();
    deployments.create(&pp, &d).await.unwrap();
    let raw: serde_json::Value = client
        .request(
            http::Request::get("/apis/apps/v1/namespaces/default/deployments/web")
                .body(Vec::new())
                .unwrap(),
        )
        .await
        .unwrap();
    assert!(
        raw["status"].is_object(),
        "deployment read back without status: {raw}"
    );
}

/// kube-runtime's streaming-list watcher (watch-list: `sendInitialEvents=true`,
/// `resourceVersionMatch=NotOlderThan`) ends its initial events at the `k8s.io/initial-events-end`
/// bookmark, and its `finalizer()` helper (JSON Patch `test /metadata/finalizers null` on an object
/// without finalizers) adds and removes its finalizer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streaming_list_watcher_and_the_finalizer_helper() {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::runtime::controller::Action;
    use kube::runtime::finalizer::{finalizer, Event as Finalizer};
    use kube::runtime::watcher::{self, Event};
    use std::sync::Arc;

    let c = Cluster::start().await;
    let cms: Api<ConfigMap> = Api::namespaced(c.admin().await, "default");
    let cm = |name: &str| -> ConfigMap {
        serde_json::from_value(json!({"metadata": {"name": name}, "data": {"k": "v"}})).unwrap()
    };
    for name in ["a", "b"] {
        cms.create(&PostParams::default(), &cm(name)).await.unwrap();
    }

    let cfg = watcher::Config::default().streaming_lists();
    let mut events = watcher::watcher(cms.clone(), cfg).boxed();
    macro_rules! next {
        () => {
            tokio::time::timeout(WAIT, events.try_next())
                .await
                .expect("a watcher event in time")
                .expect("no watcher error")
                .expect("the stream goes on")
        };
    }
    let mut initial = Vec::new();
    loop {
        match next!() {
            Event::Init => {}
            Event::InitApply(o) => initial.push(o.metadata.name.unwrap()),
            Event::InitDone => break,
            other => panic!("before InitDone: {other:?}"),
        }
    }
    initial.sort();
    assert_eq!(initial, ["a", "b"], "the initial events hold every object");
    cms.create(&PostParams::default(), &cm("c")).await.unwrap();
    match next!() {
        Event::Apply(o) => assert_eq!(o.metadata.name.as_deref(), Some("c")),
        other => panic!("expected c applied, got {other:?}"),
    }

    // The raw watch-list stream: ADDED events, then the end bookmark; a bare sendInitialEvents is 422.
    let mut raw = cms
        .watch(&WatchParams::default().initial_events(), "")
        .await
        .unwrap()
        .boxed();
    let mut added = 0;
    loop {
        let ev = tokio::time::timeout(WAIT, raw.try_next())
            .await
            .expect("event in time")
            .unwrap()
            .unwrap();
        match ev {
            WatchEvent::Added(_) => added += 1,
            WatchEvent::Bookmark(b) => {
                assert_eq!(
                    b.metadata
                        .annotations
                        .get("k8s.io/initial-events-end")
                        .map(String::as_str),
                    Some("true")
                );
                break;
            }
            other => panic!("expected ADDED or the end bookmark, got {other:?}"),
        }
    }
    assert_eq!(added, 3);
    let bare = http::Request::get(
        "/api/v1/namespaces/default/configmaps?watch=true&sendInitialEvents=true",
    )
    .body(Vec::new())
    .unwrap();
    let err = api_error(
        cms.clone()
            .into_client()
            .request_text(bare)
            .await
            .unwrap_err(),
    );
    assert_eq!(err.code, 422, "sendInitialEvents without NotOlderThan");
    assert!(
        err.message
            .contains("sendInitialEvents requires setting resourceVersionMatch to NotOlderThan"),
        "{}",
        err.message
    );

    const NAME: &str = "kiln.test/cleanup";
    let reconcile = |ev: Finalizer<ConfigMap>| async move {
        match ev {
            Finalizer::Apply(_) | Finalizer::Cleanup(_) => {
                Ok::<_, std::convert::Infallible>(Action::await_change())
            }
        }
    };
    let obj = Arc::new(cms.get("a").await.unwrap());
    finalizer(&cms, NAME, obj, reconcile)
        .await
        .expect("the finalizer is added");
    let added = cms.get("a").await.unwrap();
    assert_eq!(
        added.metadata.finalizers.as_deref(),
        Some(&[NAME.to_string()][..])
    );
    cms.delete("a", &DeleteParams::default()).await.unwrap();
    let deleting = Arc::new(cms.get("a").await.unwrap());
    assert!(deleting.metadata.deletion_timestamp.is_some());
    finalizer(&cms, NAME, deleting, reconcile)
        .await
        .expect("cleanup removes the finalizer");
    assert!(
        cms.get_opt("a").await.unwrap().is_none(),
        "gone once its finalizer is"
    );
}

/// kube-rs's metadata calls (`Accept: …;as=PartialObjectMetadata[List];g=meta.k8s.io;v=v1`) get only
/// metadata back, typed as upstream types it; and a node without spec.unschedulable matches
/// `spec.unschedulable==false` (kube-rs's own cluster tests `can_operate_on_pod_metadata` and
/// `node_cordon_and_uncordon_works`, tests/kube-rs-e2e).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_responses_and_the_unschedulable_selector() {
    use kube::core::PartialObjectMetaExt;
    let c = Cluster::start().await;
    let client = c.admin().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.create(&PostParams::default(), &pod("m", json!({"app": "meta"})))
        .await
        .unwrap();

    let got = pods.get_metadata("m").await.unwrap();
    let types = got.types.as_ref().unwrap();
    assert_eq!(
        (types.kind.as_str(), types.api_version.as_str()),
        ("PartialObjectMetadata", "meta.k8s.io/v1")
    );
    assert_eq!(got.metadata.labels.as_ref().unwrap()["app"], "meta");

    let listed = pods.list_metadata(&ListParams::default()).await.unwrap();
    assert_eq!(listed.items.len(), 1);
    assert_eq!(listed.items[0].metadata.name.as_deref(), Some("m"));
    assert!(listed.items[0].metadata.resource_version.is_some());
    // The raw list: no spec anywhere, the list and its items typed as upstream.
    let raw: serde_json::Value = {
        let req = http::Request::get("/api/v1/namespaces/default/pods")
            .header(
                "Accept",
                "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1",
            )
            .body(Vec::new())
            .unwrap();
        client.request(req).await.unwrap()
    };
    assert_eq!(raw["kind"], "PartialObjectMetadataList");
    assert_eq!(raw["items"][0]["kind"], "PartialObjectMetadata");
    assert!(raw["items"][0].get("spec").is_none(), "{raw}");

    let patch = kube::api::ObjectMeta {
        annotations: Some([("test".to_string(), "123".to_string())].into()),
        ..Default::default()
    }
    .into_request_partial::<Pod>();
    let patched = pods
        .patch_metadata("m", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    assert_eq!(patched.types.unwrap().kind, "PartialObjectMetadata");
    assert_eq!(
        patched.metadata.annotations.unwrap()["test"],
        "123",
        "the patch applied"
    );
    // The object itself is whole: only the response was cut down.
    assert!(!pods
        .get("m")
        .await
        .unwrap()
        .spec
        .unwrap()
        .containers
        .is_empty());

    let nodes: Api<Node> = Api::all(client);
    let node: Node = serde_json::from_value(
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}),
    )
    .unwrap();
    nodes.create(&PostParams::default(), &node).await.unwrap();
    let schedulable = ListParams::default().fields("spec.unschedulable==false");
    assert_eq!(nodes.list(&schedulable).await.unwrap().items.len(), 1);
    nodes.cordon("n1").await.unwrap();
    assert!(nodes.list(&schedulable).await.unwrap().items.is_empty());
    nodes.uncordon("n1").await.unwrap();
    assert_eq!(nodes.list(&schedulable).await.unwrap().items.len(), 1);
}
