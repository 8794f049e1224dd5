//! The namespace, serviceaccount and root-ca-cert-publisher controllers against an in-process
//! kiln-apiserver whose own namespace cleanup is off (`--namespace-cleanup=false`), so everything
//! seen here is the controller-manager's work. The controller-manager runs as
//! system:kube-controller-manager, so the bootstrap RBAC policy is exercised too.

use clap::Parser;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, ServiceAccount};
use kiln_testkit::{eventually, rows, Cluster};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;

fn start_options(c: &Cluster) -> kiln_controller_manager::Options {
    let kubeconfig = c.kubeconfig_for("system:kube-controller-manager", &[]);
    kiln_controller_manager::Options::parse_from([
        "kiln-controller-manager".to_string(),
        format!("--kubeconfig={}", kubeconfig.display()),
        format!("--root-ca-file={}", c.dir.path().join("ca.crt").display()),
        "--secure-port=0".into(),
        "--leader-elect=false".into(),
    ])
}

async fn create<K>(api: &Api<K>, value: serde_json::Value)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let obj: K = serde_json::from_value(value).unwrap();
    api.create(&PostParams::default(), &obj).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespaces_get_defaults_and_are_emptied_on_delete() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter("kiln_controller_manager=debug")
        .with_test_writer()
        .try_init();
    let c = Cluster::start_with(&["--namespace-cleanup=false"]).await;
    let client = c.admin().await;
    let namespaces: Api<Namespace> = Api::all(client.clone());

    // Before the controller-manager runs, a deleted namespace stays Terminating with its content.
    c.kubectl_ok(&["create", "namespace", "early"]).await;
    let early_maps: Api<ConfigMap> = Api::namespaced(client.clone(), "early");
    create(
        &early_maps,
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "left"}}),
    )
    .await;
    c.kubectl_ok(&["delete", "namespace", "early", "--wait=false"])
        .await;
    let listed = rows(&c.kubectl_ok(&["get", "namespace", "early"]).await);
    assert_eq!(listed[1][1], "Terminating", "{listed:?}");
    assert!(early_maps.get_opt("left").await.unwrap().is_some());

    let _cm = kiln_controller_manager::start(start_options(&c))
        .await
        .unwrap();
    eventually("the Terminating namespace emptied and gone", || async {
        namespaces
            .get_opt("early")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;

    // A new namespace gets its default service account and the root CA bundle.
    c.kubectl_ok(&["create", "namespace", "x"]).await;
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), "x");
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), "x");
    let first = eventually("default service account in x", || async {
        accounts.get_opt("default").await.ok()?
    })
    .await;
    let root = eventually("kube-root-ca.crt in x", || async {
        maps.get_opt("kube-root-ca.crt").await.ok()?
    })
    .await;
    assert_eq!(root.data.unwrap()["ca.crt"], c.pki.ca.cert);
    for ns in ["default", "kube-system"] {
        let sa: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
        eventually(
            "default service account in an existing namespace",
            || async { sa.get_opt("default").await.ok()? },
        )
        .await;
    }

    // Deleted or edited, they come back as they were.
    accounts
        .delete("default", &DeleteParams::default())
        .await
        .unwrap();
    eventually("default service account recreated", || async {
        let sa = accounts.get_opt("default").await.ok()??;
        (sa.metadata.uid != first.metadata.uid).then_some(())
    })
    .await;
    c.kubectl_ok(&[
        "-n",
        "x",
        "patch",
        "configmap",
        "kube-root-ca.crt",
        "--type=merge",
        "-p",
        r#"{"data":{"ca.crt":"tampered"}}"#,
    ])
    .await;
    eventually("kube-root-ca.crt corrected", || async {
        let m = maps.get_opt("kube-root-ca.crt").await.ok()??;
        (m.data?.get("ca.crt")? == &c.pki.ca.cert).then_some(())
    })
    .await;

    // Content of several kinds; the deployment controller adds a ReplicaSet and pods.
    create(
        &maps,
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"},
            "data": {"k": "v"}}),
    )
    .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "x");
    create(
        &pods,
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "solo"},
            "spec": {"containers": [{"name": "c", "image": "registry.local/app:1"}]}}),
    )
    .await;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "x");
    create(
        &deployments,
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "c", "image": "registry.local/app:1"}]}}}}),
    )
    .await;
    let sets: Api<ReplicaSet> = Api::namespaced(client.clone(), "x");
    eventually("the deployment's pods", || async {
        let n = pods
            .list(&ListParams::default().labels("app=web"))
            .await
            .ok()?
            .items
            .len();
        (n == 2).then_some(())
    })
    .await;

    // kubectl waits until the namespace is gone.
    let out = c.kubectl_ok(&["delete", "namespace", "x"]).await;
    assert!(out.contains("namespace \"x\" deleted"), "{out}");
    assert!(namespaces.get_opt("x").await.unwrap().is_none());
    let lp = ListParams::default();
    assert!(maps.list(&lp).await.unwrap().items.is_empty());
    assert!(pods.list(&lp).await.unwrap().items.is_empty());
    assert!(deployments.list(&lp).await.unwrap().items.is_empty());
    assert!(sets.list(&lp).await.unwrap().items.is_empty());
    assert!(accounts.list(&lp).await.unwrap().items.is_empty());
    let (ok, _, err) = c
        .kubectl(&c.admin_kubeconfig, &["get", "namespace", "x"])
        .await;
    assert!(!ok && err.contains("NotFound"), "{err}");
}
