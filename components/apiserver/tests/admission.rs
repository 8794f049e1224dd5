//! Admission with the real kubectl: NodeRestriction (a kubelet's identity may touch only its own
//! Node, Lease, mirror pods and bound pods) and ServiceAccount (default account, refusal while it
//! does not exist, the projected token volume and mounts).

use kiln_testkit::Cluster;
use serde_json::Value;

const NODES: &str = "apiVersion: v1
kind: Node
metadata:
  name: n2
---
apiVersion: v1
kind: Pod
metadata:
  name: mine
spec:
  nodeName: n1
  containers:
  - name: app
    image: registry.local/app:1
---
apiVersion: v1
kind: Pod
metadata:
  name: theirs
spec:
  nodeName: n2
  containers:
  - name: app
    image: registry.local/app:1
";

fn yaml(c: &Cluster, name: &str, content: &str) -> String {
    let p = c.dir.path().join(name);
    std::fs::write(&p, content).unwrap();
    p.to_string_lossy().into_owned()
}

/// kubectl as node n1; returns (ok, stderr).
async fn as_node(c: &Cluster, args: &[&str]) -> (bool, String) {
    let (ok, _, err) = c.kubectl(&c.node_kubeconfig, args).await;
    (ok, err)
}

async fn refused(c: &Cluster, args: &[&str], message: &str) {
    let (ok, err) = as_node(c, args).await;
    assert!(!ok, "kubectl {args:?} as n1 should be refused");
    assert!(
        err.contains("Forbidden") || err.contains("forbidden"),
        "{err}"
    );
    assert!(
        err.contains(message),
        "kubectl {args:?}: want {message:?} in {err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_restriction() {
    let c = Cluster::start().await;
    let n1 = yaml(
        &c,
        "n1.yaml",
        "apiVersion: v1\nkind: Node\nmetadata:\n  name: n1\n",
    );
    let (ok, err) = as_node(&c, &["create", "-f", &n1]).await;
    assert!(ok, "a node registers itself: {err}");
    let objects = yaml(&c, "objects.yaml", NODES);
    c.kubectl_ok(&["create", "-f", &objects]).await;

    // Its own Node: yes; another's: no, whether creating or changing it.
    let (ok, err) = as_node(&c, &["label", "node", "n1", "zone=a"]).await;
    assert!(ok, "{err}");
    let n3 = yaml(
        &c,
        "n3.yaml",
        "apiVersion: v1\nkind: Node\nmetadata:\n  name: n3\n",
    );
    refused(
        &c,
        &["create", "-f", &n3],
        "nodes \"n3\" is forbidden: node \"n1\" is not allowed to modify node \"n3\"",
    )
    .await;
    // (The Node authorizer already refuses writes to another node by name.)
    let (ok, _) = as_node(&c, &["label", "node", "n2", "zone=a"]).await;
    assert!(!ok);
    refused(
        &c,
        &[
            "label",
            "node",
            "n1",
            "node-restriction.kubernetes.io/trusted=yes",
        ],
        "node \"n1\" is not allowed to modify labels: node-restriction.kubernetes.io/trusted",
    )
    .await;
    refused(
        &c,
        &["taint", "node", "n1", "k=v:NoSchedule"],
        "node \"n1\" is not allowed to modify taints",
    )
    .await;

    // Pods: status and deletion of its own pods only; only mirror pods for itself.
    let status = r#"{"status":{"phase":"Running"}}"#;
    let (ok, err) = as_node(
        &c,
        &[
            "patch",
            "pod",
            "mine",
            "--subresource=status",
            "--type=merge",
            "-p",
            status,
        ],
    )
    .await;
    assert!(ok, "{err}");
    refused(
        &c,
        &[
            "patch",
            "pod",
            "theirs",
            "--subresource=status",
            "--type=merge",
            "-p",
            status,
        ],
        "node \"n1\" can only update pod status for pods with spec.nodeName set to itself",
    )
    .await;
    refused(
        &c,
        &["delete", "pod", "theirs", "--grace-period=0", "--force"],
        "node \"n1\" can only delete pods with spec.nodeName set to itself",
    )
    .await;
    let plain = yaml(
        &c,
        "plain.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: plain\nspec:\n  nodeName: n1\n  containers:\n  - name: app\n    image: registry.local/app:1\n",
    );
    refused(
        &c,
        &["create", "-f", &plain],
        "pods \"plain\" is forbidden: pod does not have \"kubernetes.io/config.mirror\" annotation, node \"n1\" can only create mirror pods",
    )
    .await;
    let mirror = |node: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: static-{node}\n  namespace: kube-system\n  annotations:\n    kubernetes.io/config.mirror: abc\nspec:\n  nodeName: {node}\n  containers:\n  - name: app\n    image: registry.local/app:1\n"
        )
    };
    let other_mirror = yaml(&c, "m2.yaml", &mirror("n2"));
    refused(
        &c,
        &["create", "-f", &other_mirror],
        "node \"n1\" can only create pods with spec.nodeName set to itself",
    )
    .await;
    let own_mirror = yaml(&c, "m1.yaml", &mirror("n1"));
    let (ok, err) = as_node(&c, &["create", "-f", &own_mirror]).await;
    assert!(ok, "{err}");
    let (ok, err) = as_node(
        &c,
        &["delete", "pod", "mine", "--grace-period=0", "--force"],
    )
    .await;
    assert!(ok, "{err}");

    // Leases: its own, in kube-node-lease.
    let lease = |name: &str| {
        format!("apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata:\n  name: {name}\n  namespace: kube-node-lease\nspec:\n  holderIdentity: {name}\n")
    };
    let own = yaml(&c, "l1.yaml", &lease("n1"));
    let (ok, err) = as_node(&c, &["create", "-f", &own]).await;
    assert!(ok, "{err}");
    let other = yaml(&c, "l2.yaml", &lease("n2"));
    refused(
        &c,
        &["create", "-f", &other],
        "can only access node lease with the same name as the requesting node",
    )
    .await;
    // The admin is not a node: nothing of this applies.
    c.kubectl_ok(&[
        "label",
        "node",
        "n1",
        "node-restriction.kubernetes.io/trusted=yes",
    ])
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_account_admission() {
    let keys = tempfile::tempdir().unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let sa_key = keys.path().join("sa.key");
    std::fs::write(&sa_key, key.serialize_pem()).unwrap();
    let c = Cluster::start_with(&[
        &format!("--service-account-signing-key-file={}", sa_key.display()),
        "--enable-admission-plugins=NodeRestriction,ServiceAccount",
    ])
    .await;
    c.kubectl_ok(&["create", "namespace", "apps"]).await;
    let pod = |name: &str, extra: &str| {
        format!("apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: apps\nspec:\n{extra}  containers:\n  - name: app\n    image: registry.local/app:1\n  - name: side\n    image: registry.local/app:1\n")
    };
    // No ServiceAccount yet: refused the upstream way (403, so controllers retry).
    let p = yaml(&c, "p.yaml", &pod("p", ""));
    let (ok, _, err) = c.kubectl(&c.admin_kubeconfig, &["create", "-f", &p]).await;
    assert!(!ok);
    assert!(
        err.contains("pods \"p\" is forbidden: error looking up service account apps/default: serviceaccount \"default\" not found"),
        "{err}"
    );

    // Once it exists: defaulted, with the projected token volume mounted in every container.
    c.kubectl_ok(&["create", "serviceaccount", "default", "-n", "apps"])
        .await;
    c.kubectl_ok(&["create", "-f", &p]).await;
    let got: Value = serde_json::from_str(
        &c.kubectl_ok(&["get", "pod", "p", "-n", "apps", "-o", "json"])
            .await,
    )
    .unwrap();
    assert_eq!(got["spec"]["serviceAccountName"], "default");
    let vol = got["spec"]["volumes"]
        .as_array()
        .and_then(|v| v.first())
        .cloned()
        .unwrap_or_default();
    let vol_name = vol["name"].as_str().unwrap_or_default().to_string();
    assert!(vol_name.starts_with("kube-api-access-"), "{got}");
    assert_eq!(vol_name.len(), "kube-api-access-".len() + 5);
    let sources = vol["projected"]["sources"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(sources[0]["serviceAccountToken"]["path"], "token");
    assert_eq!(sources[1]["configMap"]["name"], "kube-root-ca.crt");
    assert_eq!(sources[2]["downwardAPI"]["items"][0]["path"], "namespace");
    for ctr in got["spec"]["containers"].as_array().unwrap() {
        let m = &ctr["volumeMounts"][0];
        assert_eq!(m["name"], vol_name.as_str());
        assert_eq!(
            m["mountPath"],
            "/var/run/secrets/kubernetes.io/serviceaccount"
        );
        assert_eq!(m["readOnly"], true);
    }

    // Opting out mounts nothing; a named account must exist too.
    let q = yaml(
        &c,
        "q.yaml",
        &pod("q", "  automountServiceAccountToken: false\n"),
    );
    c.kubectl_ok(&["create", "-f", &q]).await;
    let vols = c
        .kubectl_ok(&[
            "get",
            "pod",
            "q",
            "-n",
            "apps",
            "-o",
            "jsonpath={.spec.volumes}",
        ])
        .await;
    assert!(vols.trim().is_empty(), "{vols}");
    let r = yaml(&c, "r.yaml", &pod("r", "  serviceAccountName: builder\n"));
    let (ok, _, err) = c.kubectl(&c.admin_kubeconfig, &["create", "-f", &r]).await;
    assert!(!ok);
    assert!(
        err.contains("serviceaccount \"builder\" not found"),
        "{err}"
    );
}
