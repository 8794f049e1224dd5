//! `kubectl apply --server-side` (real kubectl 1.32) against kiln-apiserver: create with
//! managedFields, re-apply, a second manager's conflict and `--force-conflicts`, fields dropped from
//! the configuration removed, `--dry-run=server` changing nothing, other writes recorded as Update.

use kiln_testkit::Cluster;
use serde_json::Value;

fn deployment(replicas: Option<u32>, image: &str, tier: bool, env: bool) -> String {
    let replicas = replicas
        .map(|r| format!("  replicas: {r}\n"))
        .unwrap_or_default();
    let tier = if tier { "    tier: front\n" } else { "" };
    let env = if env {
        "        env:\n        - name: MODE\n          value: fast\n"
    } else {
        ""
    };
    format!(
        "apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels:
    app: web
{tier}spec:
{replicas}  selector:
    matchLabels:
      app: web
  template:
    metadata:
      labels:
        app: web
    spec:
      containers:
      - name: app
        image: {image}
{env}        ports:
        - containerPort: 80
"
    )
}

async fn get(c: &Cluster) -> Value {
    let out = c
        .kubectl_ok(&[
            "get",
            "deployment",
            "web",
            "-o",
            "json",
            "--show-managed-fields",
        ])
        .await;
    serde_json::from_str(&out).unwrap()
}

fn entry<'a>(d: &'a Value, manager: &str) -> Option<&'a Value> {
    d["metadata"]["managedFields"]
        .as_array()?
        .iter()
        .find(|e| e["manager"] == manager)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_server_side_apply() {
    let c = Cluster::start().await;
    let file = c.dir.path().join("web.yaml");
    let f = file.to_str().unwrap();
    let write = |yaml: String| std::fs::write(&file, yaml).unwrap();

    // Create: the object exists with an Apply entry for "kubectl" owning what the file sets.
    write(deployment(Some(2), "registry.local/web:1", true, true));
    let out = c.kubectl_ok(&["apply", "--server-side", "-f", f]).await;
    assert!(
        out.contains("deployment.apps/web serverside-applied"),
        "{out}"
    );
    let d = get(&c).await;
    assert_eq!(d["spec"]["replicas"], 2);
    let mine = entry(&d, "kubectl").expect("an entry for kubectl");
    assert_eq!(mine["operation"], "Apply");
    assert_eq!(mine["apiVersion"], "apps/v1");
    assert_eq!(mine["fieldsType"], "FieldsV1");
    let fields = &mine["fieldsV1"];
    assert_eq!(fields["f:spec"]["f:replicas"], serde_json::json!({}));
    assert_eq!(
        fields["f:metadata"]["f:labels"]["f:tier"],
        serde_json::json!({})
    );
    let container =
        &fields["f:spec"]["f:template"]["f:spec"]["f:containers"]["k:{\"name\":\"app\"}"];
    assert!(container["f:image"].is_object(), "{fields}");
    assert!(
        container["f:ports"]["k:{\"containerPort\":80,\"protocol\":\"TCP\"}"].is_object(),
        "{fields}"
    );

    // Re-apply with a changed field.
    write(deployment(Some(2), "registry.local/web:2", true, true));
    c.kubectl_ok(&["apply", "--server-side", "-f", f]).await;
    let d = get(&c).await;
    assert_eq!(
        d["spec"]["template"]["spec"]["containers"][0]["image"],
        "registry.local/web:2"
    );
    assert_eq!(d["metadata"]["generation"], 2);

    // A second manager setting the same field to another value conflicts...
    let other = c.dir.path().join("other.yaml");
    std::fs::write(
        &other,
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 5\n",
    )
    .unwrap();
    let o = other.to_str().unwrap();
    let (ok, out, err) = c
        .kubectl(
            &c.admin_kubeconfig,
            &[
                "apply",
                "--server-side",
                "--field-manager",
                "other",
                "-f",
                o,
            ],
        )
        .await;
    assert!(!ok, "a conflict must fail: {out}");
    assert!(
        err.contains("conflict with \"kubectl\": .spec.replicas"),
        "{err}"
    );
    assert_eq!(get(&c).await["spec"]["replicas"], 2);

    // ... and wins with --force-conflicts, taking the field from kubectl.
    let args = [
        "apply",
        "--server-side",
        "--field-manager",
        "other",
        "--force-conflicts",
        "-f",
        o,
    ];
    c.kubectl_ok(&args).await;
    let d = get(&c).await;
    assert_eq!(d["spec"]["replicas"], 5);
    let theirs = entry(&d, "other").expect("an entry for other");
    assert_eq!(
        theirs["fieldsV1"]["f:spec"]["f:replicas"],
        serde_json::json!({})
    );
    assert!(entry(&d, "kubectl").unwrap()["fieldsV1"]["f:spec"]
        .get("f:replicas")
        .is_none());

    // Fields dropped from kubectl's file go (the tier label, the env); replicas, now other's, stays.
    write(deployment(None, "registry.local/web:2", false, false));
    c.kubectl_ok(&["apply", "--server-side", "-f", f]).await;
    let d = get(&c).await;
    assert!(d["metadata"]["labels"].get("tier").is_none(), "{d}");
    assert_eq!(d["metadata"]["labels"]["app"], "web");
    assert!(
        d["spec"]["template"]["spec"]["containers"][0]
            .get("env")
            .is_none(),
        "{d}"
    );
    assert_eq!(d["spec"]["replicas"], 5);

    // --dry-run=server answers but changes nothing.
    write(deployment(None, "registry.local/web:3", false, false));
    let out = c
        .kubectl_ok(&["apply", "--server-side", "--dry-run=server", "-f", f])
        .await;
    assert!(out.contains("serverside-applied (server dry run)"), "{out}");
    let after = get(&c).await;
    assert_eq!(
        after["spec"]["template"]["spec"]["containers"][0]["image"],
        "registry.local/web:2"
    );
    assert_eq!(
        after["metadata"]["resourceVersion"],
        d["metadata"]["resourceVersion"]
    );

    // Other writes are recorded as Update entries of their manager.
    c.kubectl_ok(&["label", "deployment", "web", "team=blue"])
        .await;
    let d = get(&c).await;
    let label = entry(&d, "kubectl-label").expect("an entry for kubectl label");
    assert_eq!(label["operation"], "Update");
    assert_eq!(
        label["fieldsV1"]["f:metadata"]["f:labels"]["f:team"],
        serde_json::json!({})
    );

    // A ConfigMap applied by two managers keeps both managers' keys.
    let cm = c.dir.path().join("cm.yaml");
    std::fs::write(
        &cm,
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg\ndata:\n  a: \"1\"\n",
    )
    .unwrap();
    c.kubectl_ok(&["apply", "--server-side", "-f", cm.to_str().unwrap()])
        .await;
    std::fs::write(
        &cm,
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg\ndata:\n  b: \"2\"\n",
    )
    .unwrap();
    c.kubectl_ok(&[
        "apply",
        "--server-side",
        "--field-manager",
        "second",
        "-f",
        cm.to_str().unwrap(),
    ])
    .await;
    let data = c
        .kubectl_ok(&["get", "configmap", "cfg", "-o", "jsonpath={.data}"])
        .await;
    let data: Value = serde_json::from_str(&data).unwrap();
    assert_eq!(data, serde_json::json!({"a": "1", "b": "2"}));

    // An object made by client-side apply moves to server-side apply: kubectl rewrites the
    // kubectl-client-side-apply entry into its own (a JSON patch of managedFields), so no conflict.
    let csa = c.dir.path().join("csa.yaml");
    let csa_file = csa.to_str().unwrap();
    std::fs::write(
        &csa,
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: legacy\ndata:\n  k: old\n",
    )
    .unwrap();
    c.kubectl_ok(&["apply", "-f", csa_file]).await;
    std::fs::write(
        &csa,
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: legacy\ndata:\n  k: new\n",
    )
    .unwrap();
    c.kubectl_ok(&["apply", "--server-side", "-f", csa_file])
        .await;
    let k = c
        .kubectl_ok(&["get", "configmap", "legacy", "-o", "jsonpath={.data.k}"])
        .await;
    assert_eq!(k, "new");
}
