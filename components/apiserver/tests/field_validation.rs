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

/// Issue #25's bad input: a negative or malformed resource quantity and a seccomp profile path that
/// leaves the kubelet's directory are refused as upstream refuses them — 422 naming the field (400
/// from the decoder for a quantity that does not parse) — and nothing is stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_pod_resources_and_seccomp_paths_are_refused_naming_the_field() {
    let c = Cluster::start().await;
    let refused = |name: &'static str, container_extra: &'static str| {
        let c = &c;
        async move {
            let p = c.dir.path().join(format!("{name}.yaml"));
            std::fs::write(
                &p,
                format!(
                    "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  containers:\n  \
                     - name: c\n    image: registry.local/app:1.0\n{container_extra}"
                ),
            )
            .unwrap();
            let (ok, out, err) = c
                .kubectl(&c.admin_kubeconfig, &["create", "-f", &p.to_string_lossy()])
                .await;
            assert!(!ok, "{name} was created: {out}");
            let (found, _, _) = c.kubectl(&c.admin_kubeconfig, &["get", "pod", name]).await;
            assert!(!found, "a refused create must store nothing ({name})");
            err
        }
    };
    let err = refused(
        "negative",
        "    resources:\n      limits: {memory: -32Mi}\n",
    )
    .await;
    assert!(
        err.contains("The Pod \"negative\" is invalid")
            && err.contains("spec.containers[0].resources.limits[memory]: Invalid value: \"-32Mi\": must be greater than or equal to 0"),
        "{err}"
    );
    let err = refused("malformed", "    resources:\n      requests: {cpu: lots}\n").await;
    assert!(
        err.contains("Error from server (BadRequest)")
            && err.contains("Pod in version \"v1\" cannot be handled as a Pod: quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"),
        "{err}"
    );
    let err = refused(
        "escaping",
        "    securityContext:\n      seccompProfile: {type: Localhost, localhostProfile: ../../etc/evil.json}\n",
    )
    .await;
    assert!(
        err.contains("spec.containers[0].securityContext.seccompProfile.localhostProfile: Invalid value: \"../../etc/evil.json\": must not contain '..'"),
        "{err}"
    );
    let err = refused(
        "unknown-type",
        "    securityContext:\n      seccompProfile: {type: Strict}\n",
    )
    .await;
    assert!(
        err.contains("spec.containers[0].securityContext.seccompProfile.type: Unsupported value: \"Strict\": supported values: \"Localhost\", \"RuntimeDefault\", \"Unconfined\""),
        "{err}"
    );
}
