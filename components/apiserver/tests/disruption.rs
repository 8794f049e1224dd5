//! policy/v1 PodDisruptionBudgets and the eviction API against an in-process kiln-apiserver, with
//! the real kubectl and kube-rs: columns and validation as upstream's, and evictions refused (429
//! with the DisruptionBudget cause), allowed (the budget's disruption spent and the pod recorded),
//! raced (two evictions for the last disruption: exactly one wins), dry-run, unhealthy and
//! finished pods, several budgets (500). No disruption controller runs here: the tests write the
//! budget's status themselves, as that controller would.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kiln_testkit::{rows, Cluster};
use kube::api::{Api, EvictParams, Patch, PatchParams, PostParams};
use serde_json::{json, Value};

const VIOLATION: &str = "Cannot evict pod as it would violate the pod's disruption budget.";

async fn pod(pods: &Api<Pod>, name: &str, phase: &str, ready: bool) {
    let p: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "c", "image": "registry.local/app:1"}]}
    }))
    .unwrap();
    pods.create(&PostParams::default(), &p).await.unwrap();
    let status = json!({"status": {"phase": phase, "conditions": [
        {"type": "Ready", "status": if ready {"True"} else {"False"}}]}});
    pods.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
}

async fn budget(pdbs: &Api<PodDisruptionBudget>, name: &str, spec: Value, status: Value) {
    let b: PodDisruptionBudget = serde_json::from_value(json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": name}, "spec": spec
    }))
    .unwrap();
    pdbs.create(&PostParams::default(), &b).await.unwrap();
    set_status(pdbs, name, status).await;
}

/// What the disruption controller would write.
async fn set_status(pdbs: &Api<PodDisruptionBudget>, name: &str, status: Value) {
    pdbs.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(&json!({ "status": status })),
    )
    .await
    .unwrap();
}

fn healthy(allowed: i64, generation: i64) -> Value {
    json!({"observedGeneration": generation, "disruptionsAllowed": allowed,
           "currentHealthy": 2, "desiredHealthy": 1, "expectedPods": 2})
}

/// An admin client that, like client-go, does not retry a 429 itself: kube-rs's default retry
/// policy would resend a refused eviction for minutes before the test saw the refusal.
async fn admin(c: &Cluster) -> kube::Client {
    let kc = kube::config::Kubeconfig::read_from(&c.admin_kubeconfig).unwrap();
    let mut config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    config.default_retry = false;
    kube::Client::try_from(config).unwrap()
}

/// The Status of a refused eviction.
fn refused(result: Result<kube::core::Status, kube::Error>) -> Box<kube::core::Status> {
    match result {
        Err(kube::Error::Api(s)) => s,
        other => panic!("expected an API error, got {other:?}"),
    }
}

fn cause(s: &kube::core::Status) -> (String, String) {
    let c = &s.details.as_ref().expect("details").causes[0];
    (c.reason.clone(), c.message.clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_columns_and_validation() {
    let c = Cluster::start().await;
    let manifest = c.dir.path().join("pdb.yaml");
    std::fs::write(
        &manifest,
        "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata:\n  name: web\nspec:\n  minAvailable: 50%\n  selector:\n    matchLabels:\n      app: web\n",
    )
    .unwrap();
    let manifest = manifest.to_string_lossy().into_owned();
    c.kubectl_ok(&["apply", "-f", &manifest]).await;
    let table = rows(&c.kubectl_ok(&["get", "pdb"]).await);
    assert_eq!(
        table[0],
        [
            "NAME",
            "MIN",
            "AVAILABLE",
            "MAX",
            "UNAVAILABLE",
            "ALLOWED",
            "DISRUPTIONS",
            "AGE"
        ]
    );
    assert_eq!(&table[1][..4], ["web", "50%", "N/A", "0"]);
    let got: Value = serde_json::from_str(
        &c.kubectl_ok(&["get", "poddisruptionbudget.policy/web", "-o", "json"])
            .await,
    )
    .unwrap();
    assert_eq!(got["metadata"]["generation"], 1);
    assert_eq!(got["status"]["disruptionsAllowed"], 0);

    let (ok, _, err) = c
        .kubectl(
            &c.admin_kubeconfig,
            &[
                "create",
                "poddisruptionbudget",
                "both",
                "--selector=app=web",
                "--min-available=1",
                "--max-unavailable=1",
            ],
        )
        .await;
    // kubectl itself refuses both flags; the API must refuse both fields.
    assert!(!ok, "{err}");
    let client = admin(&c).await;
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client, "default");
    let both: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": "both"},
        "spec": {"minAvailable": 1, "maxUnavailable": "101%",
                 "unhealthyPodEvictionPolicy": "Sometimes"}
    }))
    .unwrap();
    let e = match pdbs.create(&PostParams::default(), &both).await {
        Err(kube::Error::Api(e)) => e,
        other => panic!("{other:?}"),
    };
    assert_eq!(e.code, 422);
    let fields: Vec<&str> = e
        .details
        .as_ref()
        .unwrap()
        .causes
        .iter()
        .map(|c| c.field.as_str())
        .collect();
    assert_eq!(
        fields,
        [
            "spec",
            "spec.maxUnavailable",
            "spec.unhealthyPodEvictionPolicy"
        ]
    );
    assert!(e
        .message
        .contains("minAvailable and maxUnavailable cannot be both set"));
    assert!(e.message.contains("must not be greater than 100%"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evictions_spend_the_budget_once() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()))
        .with_test_writer()
        .try_init();
    let c = Cluster::start().await;
    let client = admin(&c).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), "default");
    pod(&pods, "a", "Running", true).await;
    pod(&pods, "b", "Running", true).await;
    budget(
        &pdbs,
        "web",
        json!({"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}}),
        healthy(1, 1),
    )
    .await;

    // Two evictions race for the one disruption: exactly one may win.
    let ep = EvictParams::default();
    let (ra, rb) = tokio::join!(pods.evict("a", &ep), pods.evict("b", &ep));
    let (won, lost) = match (ra, rb) {
        (Ok(_), Err(e)) => ("a", Err(e)),
        (Err(e), Ok(_)) => ("b", Err(e)),
        other => panic!("exactly one eviction must win: {other:?}"),
    };
    let lost = refused(lost);
    assert_eq!((lost.code, lost.reason.as_str()), (429, "TooManyRequests"));
    assert_eq!(lost.message, VIOLATION);
    assert_eq!(
        cause(&lost),
        (
            "DisruptionBudget".into(),
            "The disruption budget web needs 1 healthy pods and has 2 currently".into()
        )
    );
    let pdb = pdbs.get("web").await.unwrap();
    let status = pdb.status.unwrap();
    assert_eq!(status.disruptions_allowed, 0);
    let disrupted = status.disrupted_pods.unwrap();
    assert_eq!(disrupted.keys().collect::<Vec<_>>(), [won]);
    let cond = &status.conditions.unwrap()[0];
    assert_eq!(
        (
            cond.type_.as_str(),
            cond.status.as_str(),
            cond.reason.as_str()
        ),
        ("DisruptionAllowed", "False", "InsufficientPods")
    );
    // The winner is gone (never scheduled, so at once); the other stays.
    assert!(pods.get_opt(won).await.unwrap().is_none());
    let other = if won == "a" { "b" } else { "a" };
    assert!(pods.get_opt(other).await.unwrap().is_some());

    // A budget whose spec changed since the controller saw it refuses everything, with Retry-After.
    set_status(&pdbs, "web", healthy(1, 1)).await;
    pdbs.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(&json!({"spec": {"minAvailable": 0}})),
    )
    .await
    .unwrap();
    let req = http::Request::post(format!("/api/v1/namespaces/default/pods/{other}/eviction"))
        .header("content-type", "application/json")
        .body(
            serde_json::to_vec(&json!({"apiVersion": "policy/v1", "kind": "Eviction",
                                      "metadata": {"name": other}}))
            .unwrap(),
        )
        .unwrap();
    let resp = client.send(req.map(Into::into)).await.unwrap();
    assert_eq!(resp.status(), 429);
    assert_eq!(resp.headers()["retry-after"], "10");

    // Dry run: allowed, but neither the budget nor the pod changes.
    set_status(&pdbs, "web", healthy(1, 2)).await;
    let dry_req = http::Request::post(format!(
        "/api/v1/namespaces/default/pods/{other}/eviction?dryRun=All"
    ))
    .header("content-type", "application/json")
    .body(serde_json::to_vec(&json!({"metadata": {"name": other}})).unwrap())
    .unwrap();
    let resp = client.send(dry_req.map(Into::into)).await.unwrap();
    assert_eq!(resp.status(), 201);
    assert!(pods.get_opt(other).await.unwrap().is_some());
    let status = pdbs.get("web").await.unwrap().status.unwrap();
    assert_eq!(status.disruptions_allowed, 1);
    assert!(!status
        .disrupted_pods
        .unwrap_or_default()
        .contains_key(other));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unhealthy_finished_and_doubly_guarded_pods() {
    let c = Cluster::start().await;
    let client = admin(&c).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), "default");
    let no_disruptions = json!({"observedGeneration": 1, "disruptionsAllowed": 0,
                                "currentHealthy": 2, "desiredHealthy": 2, "expectedPods": 3});
    budget(
        &pdbs,
        "web",
        json!({"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}}),
        no_disruptions.clone(),
    )
    .await;
    pod(&pods, "ready", "Running", true).await;
    pod(&pods, "unready", "Running", false).await;
    pod(&pods, "done", "Succeeded", false).await;
    let ep = EvictParams::default();

    let e = refused(pods.evict("ready", &ep).await);
    assert_eq!(e.code, 429);
    // An unready pod of a healthy application goes without spending a disruption.
    pods.evict("unready", &ep).await.unwrap();
    assert!(pods.get_opt("unready").await.unwrap().is_none());
    // A finished pod already caused its disruption.
    pods.evict("done", &ep).await.unwrap();
    assert!(pods.get_opt("done").await.unwrap().is_none());
    let status = pdbs.get("web").await.unwrap().status.unwrap();
    assert_eq!(status.disruptions_allowed, 0);
    assert!(status.disrupted_pods.is_none());

    // Disrupted application: IfHealthyBudget keeps an unready pod, AlwaysAllow lets it go.
    set_status(&pdbs, "web", json!({"currentHealthy": 1})).await;
    pod(&pods, "sick", "Running", false).await;
    let e = refused(pods.evict("sick", &ep).await);
    assert_eq!(
        cause(&e).1,
        "The disruption budget web needs 2 healthy pods and has 1 currently"
    );
    pdbs.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(&json!({"spec": {"unhealthyPodEvictionPolicy": "AlwaysAllow"}})),
    )
    .await
    .unwrap();
    pods.evict("sick", &ep).await.unwrap();

    // Two budgets for one pod: 500 with upstream's message.
    budget(
        &pdbs,
        "web2",
        json!({"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}}),
        no_disruptions,
    )
    .await;
    let e = refused(pods.evict("ready", &ep).await);
    assert_eq!(e.code, 500);
    assert_eq!(
        e.message,
        "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
    );
    assert!(pods.get_opt("ready").await.unwrap().is_some());
}
