//! `fieldValidation` with the real kubectl: unknown fields are warned about by default (`Warn`,
//! kubectl prints `Warning: unknown field ...`), dropped silently under `Ignore`, and refused under
//! `Strict` together with keys the body sets twice, in upstream's words.

use kiln_testkit::Cluster;

/// A Deployment as JSON text with `spec_extra` spliced in raw, so a key can appear twice.
fn deployment(name: &str, spec_extra: &str) -> String {
    format!(
        r#"{{"apiVersion": "apps/v1", "kind": "Deployment",
  "metadata": {{"name": "{name}"}},
  "spec": {{{spec_extra}
    "selector": {{"matchLabels": {{"app": "a"}}}},
    "template": {{"metadata": {{"labels": {{"app": "a"}}}},
      "spec": {{"containers": [{{"name": "c", "image": "registry.local/app:1.0"}}]}}}}}}}}"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_and_duplicate_fields_follow_field_validation() {
    let c = Cluster::start().await;
    let file = |name: &str, text: String| {
        let p = c.dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p.to_string_lossy().into_owned()
    };
    let deployments = "/apis/apps/v1/namespaces/default/deployments";

    // Strict (what `kubectl apply`/`create` ask by default): both problems in one refusal.
    let both = file(
        "both.json",
        deployment(
            "d1",
            r#""unknownField": "x", "replicas": 2, "replicas": 3,"#,
        ),
    );
    let uri = format!("{deployments}?fieldValidation=Strict");
    let (ok, out, err) = c
        .kubectl(&c.admin_kubeconfig, &["create", "--raw", &uri, "-f", &both])
        .await;
    assert!(!ok, "{out}");
    assert!(
        err.contains(r#"strict decoding error: unknown field \"spec.unknownField\", duplicate field \"spec.replicas\""#)
            || err.contains(r#"strict decoding error: unknown field "spec.unknownField", duplicate field "spec.replicas""#),
        "{err}"
    );
    let (found, _, _) = c
        .kubectl(&c.admin_kubeconfig, &["get", "deployment", "d1"])
        .await;
    assert!(!found, "a refused create must store nothing");

    // No fieldValidation: Warn. The object is created, the last duplicate wins, and kubectl
    // prints one warning per problem.
    let (ok, out, err) = c
        .kubectl(
            &c.admin_kubeconfig,
            &["create", "--raw", deployments, "-f", &both],
        )
        .await;
    assert!(ok, "{out}{err}");
    assert!(
        err.contains(r#"Warning: unknown field "spec.unknownField""#),
        "{err}"
    );
    assert!(
        err.contains(r#"Warning: duplicate field "spec.replicas""#),
        "{err}"
    );
    let replicas = c
        .kubectl_ok(&["get", "deployment", "d1", "-o", "jsonpath={.spec.replicas}"])
        .await;
    assert_eq!(replicas.trim(), "3");

    // kubectl's own --validate=warn sends Warn: the warning for a typo'd field, and the object.
    let typo = file("typo.json", deployment("d2", r#""replicass": 1,"#));
    let (ok, out, err) = c
        .kubectl(
            &c.admin_kubeconfig,
            &["apply", "--validate=warn", "-f", &typo],
        )
        .await;
    assert!(ok, "{out}{err}");
    assert!(out.contains("deployment.apps/d2 created"), "{out}");
    assert!(
        err.contains(r#"Warning: unknown field "spec.replicass""#),
        "{err}"
    );

    // Ignore: nothing said, the field dropped.
    let uri = format!("{deployments}?fieldValidation=Ignore");
    let quiet = file("quiet.json", deployment("d3", r#""bogus": 1,"#));
    let (ok, out, err) = c
        .kubectl(
            &c.admin_kubeconfig,
            &["create", "--raw", &uri, "-f", &quiet],
        )
        .await;
    assert!(ok, "{out}{err}");
    assert!(!err.contains("Warning"), "{err}");
    assert!(!out.contains("bogus"), "{out}");
}
