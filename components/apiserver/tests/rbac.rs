//! RBAC, deny by default: roles and bindings created with kubectl take effect, `kubectl auth can-i`
//! (SelfSubjectAccessReview / SelfSubjectRulesReview), `kubectl auth whoami`, SubjectAccessReview
//! through kube-rs, the bootstrap roles of the control-plane identities, and the Node authorizer.

use k8s_openapi::api::authorization::v1::SubjectAccessReview;
use k8s_openapi::api::core::v1::{Node, Secret};
use kiln_testkit::{rows, Cluster};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

async fn can_i(c: &Cluster, kubeconfig: &std::path::Path, args: &[&str]) -> String {
    let mut full = vec!["auth", "can-i"];
    full.extend(args);
    let (_, out, err) = c.kubectl(kubeconfig, &full).await;
    assert!(err.is_empty() || err.contains("Warning"), "{args:?}: {err}");
    out.trim().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_rbac_roles_bindings_and_can_i() {
    let c = Cluster::start().await;
    let admin = c.admin_kubeconfig.clone();
    let bob = c.kubeconfig_for("bob", &["developers"]);

    assert_eq!(can_i(&c, &admin, &["create", "deployments"]).await, "yes");
    assert_eq!(can_i(&c, &admin, &["*", "*"]).await, "yes");
    // Deny by default.
    assert_eq!(can_i(&c, &bob, &["list", "pods"]).await, "no");
    let (ok, _, err) = c.kubectl(&bob, &["get", "pods"]).await;
    assert!(!ok);
    assert!(
        err.contains("pods is forbidden: User \"bob\" cannot list resource \"pods\" in API group \"\" in the namespace \"default\""),
        "{err}"
    );

    // A Role + RoleBinding in one namespace.
    c.kubectl_ok(&[
        "create",
        "role",
        "pod-reader",
        "--verb=get,list,watch",
        "--resource=pods",
    ])
    .await;
    c.kubectl_ok(&[
        "create",
        "rolebinding",
        "bob-reads",
        "--role=pod-reader",
        "--user=bob",
    ])
    .await;
    assert_eq!(can_i(&c, &bob, &["list", "pods"]).await, "yes");
    assert_eq!(can_i(&c, &bob, &["delete", "pods"]).await, "no");
    assert_eq!(
        can_i(&c, &bob, &["list", "pods", "-n", "kube-system"]).await,
        "no"
    );
    c.kubectl_ok(&["run", "p", "--image=registry.local/p:1"])
        .await;
    let (ok, out, err) = c.kubectl(&bob, &["get", "pods"]).await;
    assert!(ok, "{err}");
    assert!(out.contains("p "), "{out}");

    // resourceNames narrow a rule to named objects.
    c.kubectl_ok(&[
        "create",
        "role",
        "one-cm",
        "--verb=get",
        "--resource=configmaps",
        "--resource-name=allowed",
    ])
    .await;
    c.kubectl_ok(&[
        "create",
        "rolebinding",
        "bob-one-cm",
        "--role=one-cm",
        "--group=developers",
    ])
    .await;
    assert_eq!(can_i(&c, &bob, &["get", "configmap/allowed"]).await, "yes");
    assert_eq!(can_i(&c, &bob, &["get", "configmap/other"]).await, "no");

    // A ClusterRoleBinding to a group, with a bootstrap cluster role.
    c.kubectl_ok(&[
        "create",
        "clusterrolebinding",
        "devs-view",
        "--clusterrole=view",
        "--group=developers",
    ])
    .await;
    assert_eq!(can_i(&c, &bob, &["list", "deployments", "-A"]).await, "yes");
    assert_eq!(can_i(&c, &bob, &["create", "deployments"]).await, "no");
    let (ok, _, err) = c.kubectl(&bob, &["get", "deployments", "-A"]).await;
    assert!(ok, "{err}");

    // can-i --list (SelfSubjectRulesReview) and whoami (SelfSubjectReview).
    let (ok, out, err) = c.kubectl(&bob, &["auth", "can-i", "--list"]).await;
    assert!(ok, "{err}");
    assert!(
        out.contains("pods") && out.contains("[get list watch]"),
        "{out}"
    );
    let (ok, out, err) = c.kubectl(&bob, &["auth", "whoami"]).await;
    assert!(ok, "{err}");
    assert!(out.contains("bob") && out.contains("developers"), "{out}");
    // kubectl 1.27 asks authentication.k8s.io/v1beta1 (served upstream through 1.29).
    let (ok, out, err) = c
        .kubectl_bin("kubectl.1.27", &bob, &["auth", "whoami"])
        .await;
    assert!(ok, "{err}");
    assert!(out.contains("bob") && out.contains("developers"), "{out}");

    // Tables of the RBAC kinds.
    let crb = rows(
        &c.kubectl_ok(&["get", "clusterrolebindings", "cluster-admin", "-o", "wide"])
            .await,
    );
    assert_eq!(&crb[0][..3], ["NAME", "ROLE", "AGE"]);
    assert_eq!(crb[1][1], "ClusterRole/cluster-admin");
    assert!(crb[1].contains(&"system:masters".to_string()), "{crb:?}");
    let roles = c.kubectl_ok(&["get", "clusterroles"]).await;
    for want in [
        "cluster-admin",
        "system:kube-scheduler",
        "system:kube-controller-manager",
        "system:node-proxier",
        "system:node-bootstrapper",
    ] {
        assert!(roles.contains(want), "{want}: {roles}");
    }

    // Removing the bindings removes the access.
    c.kubectl_ok(&["delete", "rolebinding", "bob-reads"]).await;
    assert_eq!(
        can_i(&c, &bob, &["list", "pods"]).await,
        "yes",
        "view still applies"
    );
    c.kubectl_ok(&["delete", "clusterrolebinding", "devs-view"])
        .await;
    // The authorizer reads a watch-fed copy of the policy (as upstream's informers): a revoked
    // binding stops working once its delete event arrives, not necessarily at the next request.
    let mut answer = String::new();
    for _ in 0..50 {
        answer = can_i(&c, &bob, &["list", "pods"]).await;
        if answer == "no" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(answer, "no", "the revoked binding still applies after 5 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_plane_identities_and_subject_access_reviews() {
    let c = Cluster::start().await;
    let sched = c.kubeconfig_for("system:kube-scheduler", &[]);
    assert_eq!(
        can_i(&c, &sched, &["create", "pods", "--subresource=binding"]).await,
        "yes"
    );
    assert_eq!(can_i(&c, &sched, &["watch", "nodes"]).await, "yes");
    assert_eq!(can_i(&c, &sched, &["get", "secrets", "-A"]).await, "no");
    let kcm = c.kubeconfig_for("system:kube-controller-manager", &[]);
    assert_eq!(
        can_i(&c, &kcm, &["create", "replicasets.apps"]).await,
        "yes"
    );
    assert_eq!(
        can_i(
            &c,
            &kcm,
            &["update", "deployments.apps", "--subresource=status"]
        )
        .await,
        "yes"
    );
    assert_eq!(
        can_i(&c, &kcm, &["create", "clusterrolebindings"]).await,
        "no"
    );
    let proxy = c.kubeconfig_for("system:kube-proxy", &[]);
    assert_eq!(
        can_i(
            &c,
            &proxy,
            &["watch", "endpointslices.discovery.k8s.io", "-A"]
        )
        .await,
        "yes"
    );
    assert_eq!(can_i(&c, &proxy, &["create", "services"]).await, "no");
    let joiner = c.kubeconfig_for("system:bootstrap:abcdef", &["system:bootstrappers"]);
    assert_eq!(
        can_i(
            &c,
            &joiner,
            &["create", "certificatesigningrequests.certificates.k8s.io"]
        )
        .await,
        "yes"
    );
    assert_eq!(can_i(&c, &joiner, &["list", "pods"]).await, "no");
    let anyone = c.kubeconfig_for("carol", &[]);
    let (ok, out, _) = c.kubectl(&anyone, &["get", "--raw", "/version"]).await;
    assert!(ok && out.contains("gitVersion"));
    let (ok, _, err) = c.kubectl(&anyone, &["get", "--raw", "/metrics"]).await;
    assert!(!ok && err.contains("Forbidden"), "{err}");

    // SubjectAccessReview, as the controller-manager's CSR approver and webhooks ask.
    let admin = c.admin().await;
    let sars: Api<SubjectAccessReview> = Api::all(admin.clone());
    let review = |user: &str, groups: Vec<&str>, verb: &str, resource: &str, sub: &str| {
        serde_json::from_value::<SubjectAccessReview>(json!({
            "spec": {"user": user, "groups": groups, "resourceAttributes": {
                "group": "certificates.k8s.io", "resource": resource, "subresource": sub, "verb": verb}}
        }))
        .unwrap()
    };
    let got = sars
        .create(
            &PostParams::default(),
            &review(
                "system:bootstrap:abcdef",
                vec!["system:bootstrappers", "system:authenticated"],
                "create",
                "certificatesigningrequests",
                "nodeclient",
            ),
        )
        .await
        .unwrap();
    assert!(got.status.unwrap().allowed);
    let got = sars
        .create(
            &PostParams::default(),
            &review(
                "system:node:n1",
                vec!["system:nodes"],
                "create",
                "certificatesigningrequests",
                "selfnodeclient",
            ),
        )
        .await
        .unwrap();
    assert!(got.status.unwrap().allowed);
    let got = sars
        .create(
            &PostParams::default(),
            &review(
                "mallory",
                vec![],
                "create",
                "certificatesigningrequests",
                "nodeclient",
            ),
        )
        .await
        .unwrap();
    assert!(!got.status.unwrap().allowed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_authorizer_limits_kubelets_to_their_own_objects() {
    let c = Cluster::start().await;
    let admin = c.admin().await;
    let n1 = c.client(&c.node_kubeconfig).await;
    let nodes: Api<Node> = Api::all(n1.clone());
    for name in ["n1", "n2"] {
        Api::<Node>::all(admin.clone())
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": name}})).unwrap(),
            )
            .await
            .unwrap();
    }
    let label = Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}}));
    nodes
        .patch("n1", &PatchParams::default(), &label)
        .await
        .unwrap();
    let err = nodes
        .patch("n2", &PatchParams::default(), &label)
        .await
        .unwrap_err();
    assert!(matches!(err, kube::Error::Api(s) if s.code == 403));

    // Secrets only where a pod of this node runs.
    c.kubectl_ok(&["create", "namespace", "app"]).await;
    c.kubectl_ok(&[
        "-n",
        "app",
        "create",
        "secret",
        "generic",
        "s",
        "--from-literal=k=v",
    ])
    .await;
    let secrets: Api<Secret> = Api::namespaced(n1.clone(), "app");
    let err = secrets.get("s").await.unwrap_err();
    assert!(matches!(err, kube::Error::Api(s) if s.code == 403));
    let pod = c.dir.path().join("pod.yaml");
    std::fs::write(
        &pod,
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  namespace: app\nspec:\n  nodeName: n1\n  containers:\n  - name: c\n    image: registry.local/c:1\n",
    )
    .unwrap();
    c.kubectl_ok(&["apply", "-f", pod.to_str().unwrap()]).await;
    assert_eq!(secrets.get("s").await.unwrap().data.unwrap().len(), 1);
    // ... and never cluster-wide.
    let all: Api<Secret> = Api::all(n1);
    assert!(all.list(&Default::default()).await.is_err());
}
