//! networking.k8s.io and node.k8s.io with the real kubectl: Ingress (columns, /status,
//! validation), IngressClass defaulting through DefaultIngressClass, NetworkPolicy defaults,
//! RuntimeClass admission (missing class refused, overhead and scheduling applied, a dry run
//! refused too), and TokenReview / LocalSubjectAccessReview.

use kiln_testkit::{rows, Cluster};
use serde_json::{json, Value};

fn yaml(c: &Cluster, name: &str, content: &str) -> String {
    let p = c.dir.path().join(name);
    std::fs::write(&p, content).unwrap();
    p.to_string_lossy().into_owned()
}

async fn get_json(c: &Cluster, args: &[&str]) -> Value {
    let mut all = vec!["get"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["-o", "json"]);
    serde_json::from_str(&c.kubectl_ok(&all).await).unwrap()
}

const INGRESS: &str = "apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata:
  name: nginx
  annotations:
    ingressclass.kubernetes.io/is-default-class: \"true\"
spec:
  controller: example.com/ingress-nginx
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: web
spec:
  rules:
  - host: web.example.com
    http:
      paths:
      - path: /
        pathType: Prefix
        backend:
          service:
            name: web
            port:
              number: 80
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ingresses_classes_and_network_policies() {
    let c = Cluster::start().await;
    let f = yaml(&c, "ingress.yaml", INGRESS);
    c.kubectl_ok(&["apply", "-f", &f]).await;
    // DefaultIngressClass named the default class.
    let ing = get_json(&c, &["ingress", "web"]).await;
    assert_eq!(ing["spec"]["ingressClassName"], "nginx");
    let table = rows(&c.kubectl_ok(&["get", "ingress"]).await);
    assert_eq!(
        table[0],
        ["NAME", "CLASS", "HOSTS", "ADDRESS", "PORTS", "AGE"]
    );
    assert_eq!(table[1][..3], ["web", "nginx", "web.example.com"]);

    // /status takes the load balancer, and a spec change through /status is ignored.
    c.kubectl_ok(&[
        "patch",
        "ingress",
        "web",
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status":{"loadBalancer":{"ingress":[{"ip":"10.250.0.9"}]}},"spec":{"ingressClassName":"other"}}"#,
    ])
    .await;
    let ing = get_json(&c, &["ingress", "web"]).await;
    assert_eq!(
        ing["status"]["loadBalancer"]["ingress"][0]["ip"],
        "10.250.0.9"
    );
    assert_eq!(ing["spec"]["ingressClassName"], "nginx");
    let table = rows(&c.kubectl_ok(&["get", "ingress"]).await);
    assert_eq!(table[1][3], "10.250.0.9");

    // Validation names the field.
    let bad = yaml(
        &c,
        "bad.yaml",
        "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata:\n  name: bad\nspec:\n  rules:\n  - host: 10.0.0.1\n    http:\n      paths:\n      - path: /\n        backend:\n          service:\n            name: web\n            port:\n              number: 80\n",
    );
    let (ok, _, err) = c
        .kubectl(&c.admin_kubeconfig, &["create", "-f", &bad])
        .await;
    assert!(!ok);
    assert!(
        err.contains("spec.rules[0].host: Invalid value: \"10.0.0.1\": must be a DNS name, not an IP address"),
        "{err}"
    );
    assert!(
        err.contains(
            "spec.rules[0].http.paths[0].pathType: Required value: pathType must be specified"
        ),
        "{err}"
    );
    // The controller of a class is immutable.
    let (ok, _, err) = c
        .kubectl(
            &c.admin_kubeconfig,
            &[
                "patch",
                "ingressclass",
                "nginx",
                "--type=merge",
                "-p",
                r#"{"spec":{"controller":"example.com/other"}}"#,
            ],
        )
        .await;
    assert!(!ok);
    assert!(
        err.contains("spec.controller: Invalid value: \"example.com/other\": field is immutable"),
        "{err}"
    );

    // NetworkPolicy defaults: policyTypes from the rules, TCP ports.
    let np = yaml(
        &c,
        "np.yaml",
        "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata:\n  name: db\nspec:\n  podSelector:\n    matchLabels:\n      app: db\n  egress:\n  - ports:\n    - port: 53\n",
    );
    c.kubectl_ok(&["create", "-f", &np]).await;
    let pol = get_json(&c, &["networkpolicy", "db"]).await;
    assert_eq!(pol["spec"]["policyTypes"], json!(["Ingress", "Egress"]));
    assert_eq!(pol["spec"]["egress"][0]["ports"][0]["protocol"], "TCP");
    let table = rows(&c.kubectl_ok(&["get", "netpol"]).await);
    assert_eq!(table[1][..2], ["db", "app=db"]);
}

const CLASSES: &str = "apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata:
  name: sandboxed
handler: gvisor
overhead:
  podFixed:
    cpu: 10m
    memory: 1Mi
scheduling:
  nodeSelector:
    sandbox: \"true\"
  tolerations:
  - key: sandbox
    operator: Exists
    effect: NoSchedule
";

fn pod(name: &str, class: &str, extra: &str) -> String {
    format!("apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  runtimeClassName: {class}\n  containers:\n  - name: app\n    image: registry.local/app:1\n{extra}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtime_class_admission() {
    let c = Cluster::start().await;
    let f = yaml(&c, "classes.yaml", CLASSES);
    c.kubectl_ok(&["create", "-f", &f]).await;
    let table = rows(&c.kubectl_ok(&["get", "runtimeclass"]).await);
    // The built-in class for static pods is there from the start, next to the created ones.
    assert_eq!(table[1][..2], ["kiln-host", "kiln-host"]);
    assert_eq!(table[2][..2], ["sandboxed", "gvisor"]);

    let missing = yaml(&c, "missing.yaml", &pod("lost", "nowhere", ""));
    for dry in [true, false] {
        let mut args = vec!["create", "-f", &missing];
        if dry {
            args.push("--dry-run=server");
        }
        let (ok, _, err) = c.kubectl(&c.admin_kubeconfig, &args).await;
        assert!(!ok, "dry run {dry}");
        assert!(
            err.contains(
                "pods \"lost\" is forbidden: pod rejected: RuntimeClass \"nowhere\" not found"
            ),
            "{err}"
        );
    }

    let ok_pod = yaml(&c, "ok.yaml", &pod("boxed", "sandboxed", ""));
    c.kubectl_ok(&["create", "-f", &ok_pod]).await;
    let p = get_json(&c, &["pod", "boxed"]).await;
    assert_eq!(
        p["spec"]["overhead"],
        json!({"cpu": "10m", "memory": "1Mi"})
    );
    assert_eq!(p["spec"]["nodeSelector"], json!({"sandbox": "true"}));
    assert!(
        p["spec"]["tolerations"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["key"] == "sandbox"),
        "{}",
        p["spec"]["tolerations"]
    );

    let clash = yaml(
        &c,
        "clash.yaml",
        &pod(
            "clash",
            "sandboxed",
            "  nodeSelector:\n    sandbox: \"false\"\n",
        ),
    );
    let (ok, _, err) = c
        .kubectl(&c.admin_kubeconfig, &["create", "-f", &clash])
        .await;
    assert!(!ok);
    assert!(
        err.contains("conflict: runtimeClass.scheduling.nodeSelector[sandbox] = true; pod.spec.nodeSelector[sandbox] = false"),
        "{err}"
    );
    // The handler cannot change.
    let (ok, _, err) = c
        .kubectl(
            &c.admin_kubeconfig,
            &[
                "patch",
                "runtimeclass",
                "sandboxed",
                "--type=merge",
                "-p",
                r#"{"handler":"runc"}"#,
            ],
        )
        .await;
    assert!(!ok);
    assert!(
        err.contains("handler: Invalid value: \"runc\": field is immutable"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_and_local_access_reviews() {
    let keys = tempfile::tempdir().unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let (sa_key, sa_pub) = (keys.path().join("sa.key"), keys.path().join("sa.pub"));
    std::fs::write(&sa_key, key.serialize_pem()).unwrap();
    std::fs::write(&sa_pub, key.public_key_pem()).unwrap();
    let c = Cluster::start_with(&[
        &format!("--service-account-signing-key-file={}", sa_key.display()),
        &format!("--service-account-key-file={}", sa_pub.display()),
    ])
    .await;
    c.kubectl_ok(&["create", "serviceaccount", "robot"]).await;
    let token = c
        .kubectl_ok(&["create", "token", "robot"])
        .await
        .trim()
        .to_string();
    let vault = c
        .kubectl_ok(&["create", "token", "robot", "--audience=vault"])
        .await
        .trim()
        .to_string();

    let review = |token: &str, audiences: Value| {
        json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
               "spec": {"token": token, "audiences": audiences}})
    };
    let cr = &c;
    let create = |name: &str, body: Value| {
        let path = yaml(cr, name, &body.to_string());
        async move {
            let out = cr.kubectl_ok(&["create", "-f", &path, "-o", "json"]).await;
            serde_json::from_str::<Value>(&out).unwrap()
        }
    };
    let r = create("r1.json", review(&token, json!([]))).await;
    assert_eq!(r["status"]["authenticated"], true, "{r}");
    assert_eq!(
        r["status"]["user"]["username"],
        "system:serviceaccount:default:robot"
    );
    assert_eq!(
        r["status"]["audiences"],
        json!(["https://kubernetes.default.svc.cluster.local"])
    );
    // A token for another audience is valid only when that audience is asked for.
    let r = create("r2.json", review(&vault, json!([]))).await;
    assert!(r["status"]["authenticated"].is_null(), "{r}");
    let r = create("r3.json", review(&vault, json!(["vault", "other"]))).await;
    assert_eq!(r["status"]["authenticated"], true, "{r}");
    assert_eq!(r["status"]["audiences"], json!(["vault"]));
    let r = create("r4.json", review("not-a-token", json!([]))).await;
    assert!(r["status"]["authenticated"].is_null(), "{r}");

    let lsar = |ns: &str| {
        json!({"apiVersion": "authorization.k8s.io/v1", "kind": "LocalSubjectAccessReview",
               "metadata": {"namespace": "default"},
               "spec": {"user": "system:serviceaccount:default:robot",
                        "resourceAttributes": {"namespace": ns, "verb": "list", "resource": "pods"}}})
    };
    let r = create("l1.json", lsar("default")).await;
    assert_eq!(r["status"]["allowed"], false, "{r}");
    let path = yaml(&c, "l2.json", &lsar("kube-system").to_string());
    let (ok, _, err) = c
        .kubectl(&c.admin_kubeconfig, &["create", "-f", &path])
        .await;
    assert!(!ok);
    assert!(err.contains("spec.resourceAttributes.namespace: Invalid value: \"kube-system\": must match metadata.namespace"), "{err}");
}
