//! CustomResourceDefinitions with the real kubectl: a CRD using the schema features operators rely
//! on (types, formats, enum, pattern, bounds, required, nullable, defaults, int-or-string,
//! preserve-unknown-fields, embedded resources, list types, CEL rules), its custom resources served
//! at once with printer columns, defaults and pruning, 422s naming each field, the status and scale
//! subresources (`kubectl scale`), watch, multiple versions, and deletion of the CRD taking its
//! objects along. Runs on real etcd (or kiln-store with KILN_TEST_STORE_BIN).

use std::time::Duration;

use kiln_testkit::{eventually, Cluster};
use serde_json::Value;

const CRD: &str = r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names:
    plural: widgets
    singular: widget
    kind: Widget
    shortNames: [wd]
    categories: [all]
  versions:
  - name: v1
    served: true
    storage: true
    subresources:
      status: {}
      scale:
        specReplicasPath: .spec.replicas
        statusReplicasPath: .status.replicas
        labelSelectorPath: .status.selector
    additionalPrinterColumns:
    - name: Replicas
      type: integer
      jsonPath: .spec.replicas
    - name: Mode
      type: string
      jsonPath: .spec.mode
    - name: Ready
      type: string
      jsonPath: .status.conditions[?(@.type=="Ready")].status
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [image]
            x-kubernetes-validations:
            - rule: self.replicas <= self.maxReplicas
              message: replicas must not exceed maxReplicas
            - rule: self.image == oldSelf.image
              message: image is immutable
            properties:
              image: {type: string, pattern: '^[a-z0-9./:-]+$'}
              replicas: {type: integer, minimum: 0, default: 1}
              maxReplicas: {type: integer, maximum: 10, default: 5}
              mode: {type: string, enum: [fast, slow], default: fast}
              port: {x-kubernetes-int-or-string: true}
              since: {type: string, format: date-time}
              note: {type: string, nullable: true}
              tags: {type: array, x-kubernetes-list-type: set, maxItems: 3, items: {type: string}}
              extra: {type: object, x-kubernetes-preserve-unknown-fields: true}
              template: {type: object, x-kubernetes-embedded-resource: true, x-kubernetes-preserve-unknown-fields: true}
          status:
            type: object
            properties:
              replicas: {type: integer}
              selector: {type: string}
              conditions:
                type: array
                x-kubernetes-list-type: map
                x-kubernetes-list-map-keys: [type]
                items:
                  type: object
                  required: [type]
                  properties:
                    type: {type: string}
                    status: {type: string}
  - name: v1beta1
    served: true
    storage: false
    deprecated: true
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
"#;

const WIDGET: &str = r#"apiVersion: example.com/v1
kind: Widget
metadata:
  name: w1
  labels: {app: demo}
spec:
  image: registry.local/app:1
  replicas: 2
  port: http
  unknownField: dropped
  extra: {anything: [1, 2], goes: true}
  template:
    apiVersion: v1
    kind: Pod
    metadata: {name: p}
    spec: {}
"#;

fn file(c: &Cluster, name: &str, content: &str) -> String {
    let p = c.dir.path().join(name);
    std::fs::write(&p, content).unwrap();
    p.to_string_lossy().into_owned()
}

async fn json(c: &Cluster, args: &[&str]) -> Value {
    let mut full = args.to_vec();
    full.extend(["-o", "json"]);
    serde_json::from_str(&c.kubectl_ok(&full).await).expect("kubectl -o json")
}

async fn fails(c: &Cluster, args: &[&str]) -> String {
    let (ok, out, err) = c.kubectl(&c.admin_kubeconfig, args).await;
    assert!(!ok, "kubectl {args:?} should fail: {out}");
    err
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_resources_with_kubectl() {
    let c = Cluster::start().await;
    c.kubectl_ok(&["apply", "-f", &file(&c, "crd.yaml", CRD)])
        .await;
    c.kubectl_ok(&[
        "wait",
        "--for=condition=Established",
        "crd/widgets.example.com",
        "--timeout=30s",
    ])
    .await;
    let crd = json(&c, &["get", "crd", "widgets.example.com"]).await;
    let conditions = crd["status"]["conditions"].as_array().unwrap();
    let names = conditions
        .iter()
        .find(|c| c["type"] == "NamesAccepted")
        .unwrap();
    assert_eq!(
        (names["status"].as_str(), names["reason"].as_str()),
        (Some("True"), Some("NoConflicts"))
    );
    assert_eq!(crd["status"]["acceptedNames"]["kind"], "Widget");
    assert_eq!(crd["status"]["storedVersions"], serde_json::json!(["v1"]));

    // Discovery: the group, both versions (v1 preferred), short names and subresources.
    let resources = c
        .kubectl_ok(&["api-resources", "--api-group=example.com"])
        .await;
    assert!(
        resources.contains("widgets") && resources.contains("wd") && resources.contains("Widget"),
        "{resources}"
    );
    let versions = c.kubectl_ok(&["api-versions"]).await;
    assert!(
        versions.contains("example.com/v1\n") && versions.contains("example.com/v1beta1"),
        "{versions}"
    );

    // Create: unknown fields pruned (kubectl's default --validate=strict refuses them first).
    let err = fails(&c, &["apply", "-f", &file(&c, "w1.yaml", WIDGET)]).await;
    assert!(err.contains("unknown field \"spec.unknownField\""), "{err}");
    c.kubectl_ok(&[
        "apply",
        "--validate=false",
        "-f",
        &file(&c, "w1.yaml", WIDGET),
    ])
    .await;
    let w = json(&c, &["get", "widget", "w1"]).await;
    assert!(w["spec"].get("unknownField").is_none(), "pruned: {w}");
    assert_eq!(w["spec"]["mode"], "fast", "defaulted");
    assert_eq!(w["spec"]["maxReplicas"], 5, "defaulted");
    assert_eq!(w["spec"]["replicas"], 2, "kept");
    assert_eq!(
        w["spec"]["extra"]["anything"],
        serde_json::json!([1, 2]),
        "preserved"
    );
    assert_eq!(
        w["spec"]["template"]["metadata"]["name"], "p",
        "embedded metadata kept"
    );
    assert_eq!(w["metadata"]["generation"], 1);

    // Printer columns, short name and the `all` category.
    let table = c.kubectl_ok(&["get", "wd"]).await;
    let rows = kiln_testkit::rows(&table);
    assert_eq!(
        rows[0],
        vec!["NAME", "REPLICAS", "MODE", "READY"],
        "{table}"
    );
    assert_eq!(rows[1][..3], ["w1", "2", "fast"], "{table}");
    assert!(c
        .kubectl_ok(&["get", "all"])
        .await
        .contains("widget.example.com/w1"));

    // A default added to the CRD later shows on objects stored before it (defaulting from storage),
    // in a get and in a list.
    c.kubectl_ok(&[
        "patch", "crd", "widgets.example.com", "--type=json", "-p",
        r#"[{"op":"add","path":"/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/color","value":{"type":"string","default":"blue"}}]"#,
    ])
    .await;
    eventually("the new default to show on a stored widget", || async {
        let w = json(&c, &["get", "widget", "w1"]).await;
        (w["spec"]["color"] == "blue").then_some(())
    })
    .await;
    let list = json(&c, &["get", "widgets"]).await;
    assert_eq!(list["items"][0]["spec"]["color"], "blue", "{list}");

    // Invalid objects: 422 naming every field, schema and CEL.
    let bad = r#"apiVersion: example.com/v1
kind: Widget
metadata: {name: bad}
spec:
  image: "UPPER CASE"
  replicas: 20
  maxReplicas: 11
  mode: medium
  since: yesterday
  tags: [a, a]
"#;
    let err = fails(&c, &["create", "-f", &file(&c, "bad.yaml", bad)]).await;
    for want in [
        "The Widget \"bad\" is invalid",
        "spec.image: Invalid value: \"UPPER CASE\": spec.image in body should match '^[a-z0-9./:-]+$'",
        "spec.maxReplicas: Invalid value: 11: spec.maxReplicas in body should be less than or equal to 10",
        "spec.mode: Unsupported value: \"medium\": supported values: \"fast\", \"slow\"",
        "spec.since: Invalid value: \"yesterday\": spec.since in body must be of type date-time: \"yesterday\"",
        "spec.tags[1]: Duplicate value: \"a\"",
        "replicas must not exceed maxReplicas",
    ] {
        assert!(err.contains(want), "missing {want:?} in:\n{err}");
    }
    let missing = "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: bare}\nspec: {replicas: \"two\"}\n";
    let err = fails(&c, &["create", "-f", &file(&c, "bare.yaml", missing)]).await;
    assert!(err.contains("spec.image: Required value"), "{err}");
    assert!(err.contains("spec.replicas: Invalid value: \"string\": spec.replicas in body must be of type integer: \"string\""), "{err}");
    assert!(fails(&c, &["get", "widget", "bare"])
        .await
        .contains("NotFound"));

    // A transition rule: the image may not change.
    let err = fails(
        &c,
        &[
            "patch",
            "widget",
            "w1",
            "--type=merge",
            "-p",
            r#"{"spec":{"image":"other:2"}}"#,
        ],
    )
    .await;
    assert!(err.contains("image is immutable"), "{err}");
    // A spec change bumps generation; a metadata change does not.
    c.kubectl_ok(&[
        "patch",
        "widget",
        "w1",
        "--type=merge",
        "-p",
        r#"{"spec":{"mode":"slow"}}"#,
    ])
    .await;
    c.kubectl_ok(&["label", "widget", "w1", "tier=web"]).await;
    assert_eq!(
        json(&c, &["get", "widget", "w1"]).await["metadata"]["generation"],
        2
    );

    // Status subresource: the main endpoint ignores status, /status ignores spec.
    c.kubectl_ok(&[
        "patch",
        "widget",
        "w1",
        "--type=merge",
        "-p",
        r#"{"status":{"replicas":9}}"#,
    ])
    .await;
    assert!(json(&c, &["get", "widget", "w1"]).await["status"]
        .get("replicas")
        .is_none());
    c.kubectl_ok(&[
        "patch", "widget", "w1", "--subresource=status", "--type=merge", "-p",
        r#"{"status":{"replicas":2,"selector":"app=demo","conditions":[{"type":"Ready","status":"True"}]},"spec":{"replicas":7}}"#,
    ])
    .await;
    let w = json(&c, &["get", "widget", "w1"]).await;
    assert_eq!(
        (
            w["status"]["replicas"].as_i64(),
            w["spec"]["replicas"].as_i64()
        ),
        (Some(2), Some(2))
    );
    let table = c.kubectl_ok(&["get", "widget", "w1"]).await;
    assert_eq!(kiln_testkit::rows(&table)[1][3], "True", "{table}");

    // Scale subresource: kubectl scale and the Scale view.
    c.kubectl_ok(&["scale", "widget", "w1", "--replicas=4"])
        .await;
    assert_eq!(
        json(&c, &["get", "widget", "w1"]).await["spec"]["replicas"],
        4
    );
    let scale: Value = serde_json::from_str(
        &c.kubectl_ok(&[
            "get",
            "--raw",
            "/apis/example.com/v1/namespaces/default/widgets/w1/scale",
        ])
        .await,
    )
    .unwrap();
    assert_eq!(scale["spec"]["replicas"], 4);
    assert_eq!(scale["status"]["replicas"], 2);
    assert_eq!(scale["status"]["selector"], "app=demo");
    let err = fails(&c, &["scale", "widget", "w1", "--replicas=11"]).await;
    assert!(
        err.contains("replicas must not exceed maxReplicas"),
        "{err}"
    );

    // The other served version reads the same object.
    let (ok, out, err) = c
        .kubectl(
            &c.admin_kubeconfig,
            &[
                "get",
                "--raw",
                "/apis/example.com/v1beta1/namespaces/default/widgets/w1",
            ],
        )
        .await;
    assert!(ok, "{err}");
    assert!(
        err.contains("example.com/v1beta1 Widget is deprecated"),
        "a deprecated version warns: {err}"
    );
    let beta: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(beta["apiVersion"], "example.com/v1beta1");
    assert_eq!(beta["spec"]["replicas"], 4);

    // Watch sees a create.
    let mut watch = tokio::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&c.admin_kubeconfig)
        .args(["get", "widgets", "--watch", "-o", "name"])
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let w2 = WIDGET
        .replace("name: w1", "name: w2")
        .replace("  unknownField: dropped\n", "");
    c.kubectl_ok(&["create", "-f", &file(&c, "w2.yaml", &w2)])
        .await;
    let mut stdout = watch.stdout.take().unwrap();
    let seen = tokio::time::timeout(Duration::from_secs(20), async {
        use tokio::io::AsyncReadExt;
        let mut buf = Vec::new();
        let mut chunk = [0u8; 1024];
        while !String::from_utf8_lossy(&buf).contains("widget.example.com/w2") {
            let n = stdout.read(&mut chunk).await.unwrap();
            if n == 0 {
                break;
            }
            buf.extend_from_slice(&chunk[..n]);
        }
        String::from_utf8_lossy(&buf).into_owned()
    })
    .await
    .expect("watch shows w2");
    assert!(seen.contains("widget.example.com/w2"), "{seen}");
    let _ = watch.kill().await;

    // Field selectors on metadata.name; label selectors.
    let names = c
        .kubectl_ok(&[
            "get",
            "widgets",
            "--field-selector=metadata.name=w2",
            "-o",
            "name",
        ])
        .await;
    assert_eq!(names.trim(), "widget.example.com/w2");
    let names = c
        .kubectl_ok(&["get", "widgets", "-l", "tier=web", "-o", "name"])
        .await;
    assert_eq!(names.trim(), "widget.example.com/w1");

    // A second CRD may not take names this group already serves.
    let clash = CRD
        .replace("name: widgets.example.com", "name: gizmos.example.com")
        .replace("plural: widgets", "plural: gizmos")
        .replace("singular: widget", "singular: gizmo")
        .replace("shortNames: [wd]", "shortNames: [gz]");
    c.kubectl_ok(&["create", "-f", &file(&c, "clash.yaml", &clash)])
        .await;
    let cond = eventually("the naming pass to refuse Kind Widget", || async {
        let crd = json(&c, &["get", "crd", "gizmos.example.com"]).await;
        crd["status"]["conditions"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["type"] == "NamesAccepted").cloned())
    })
    .await;
    assert_eq!(
        (cond["status"].as_str(), cond["reason"].as_str()),
        (Some("False"), Some("KindConflict"))
    );

    // A second apiserver on the same store (a restart, or another control-plane member) serves the
    // CRs from its first request on.
    let dir = c.dir.path();
    let path = |f: &str| dir.join(f).to_string_lossy().into_owned();
    let second = kiln_apiserver::start(<kiln_apiserver::Options as clap::Parser>::parse_from([
        "kiln-apiserver".to_string(),
        format!("--etcd-servers={}", c.etcd.endpoint),
        "--bind-address=127.0.0.1".into(),
        "--secure-port=0".into(),
        format!("--tls-cert-file={}", path("apiserver.crt")),
        format!("--tls-private-key-file={}", path("apiserver.key")),
        format!("--client-ca-file={}", path("ca.crt")),
    ]))
    .await
    .expect("second apiserver starts");
    let admin = c.pki.client("kubernetes-admin", &["system:masters"]);
    let second_conf = dir.join("second.conf");
    std::fs::write(
        &second_conf,
        kiln_testkit::kubeconfig(
            &format!("https://{}", second.local_addr()),
            &c.pki.ca.cert,
            &admin,
            "kubernetes-admin",
        ),
    )
    .unwrap();
    let (ok, out, err) = c
        .kubectl(&second_conf, &["get", "widgets", "-o", "name"])
        .await;
    assert!(ok && out.contains("widget.example.com/w1"), "{out}{err}");
    second.shutdown().await;

    // Deleting the CRD removes its objects, then the CRD; the API is gone.
    c.kubectl_ok(&["delete", "crd", "widgets.example.com", "--timeout=60s"])
        .await;
    eventually("the widgets API to go away", || async {
        let (ok, _, _) = c
            .kubectl(
                &c.admin_kubeconfig,
                &["get", "--raw", "/apis/example.com/v1/widgets"],
            )
            .await;
        (!ok).then_some(())
    })
    .await;
    let etcd = c.etcd.client().await;
    let left = etcd
        .kv_client()
        .get(
            "/registry/example.com/widgets/",
            Some(
                etcd_client::GetOptions::new()
                    .with_prefix()
                    .with_keys_only(),
            ),
        )
        .await
        .unwrap();
    assert_eq!(left.kvs().len(), 0, "the CRD's objects are deleted with it");
}

/// A rule that reads a field the schema lacks, one that is not a bool and a messageExpression
/// that does not compile are refused when the CRD is written, with upstream's paths and texts;
/// the corrected CRD is accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cel_rules_are_checked_when_the_crd_is_written() {
    let c = Cluster::start().await;
    let bad = r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gadgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: gadgets, kind: Gadget}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            x-kubernetes-validations:
            - rule: self.replicaz <= 5
            - rule: self.replicas + 1
            - rule: self.replicas <= 5
              messageExpression: "'too many: ' +"
            properties:
              replicas: {type: integer}
"#;
    let err = fails(&c, &["apply", "-f", &file(&c, "bad.yaml", bad)]).await;
    for want in [
        "The CustomResourceDefinition \"gadgets.example.com\" is invalid",
        "spec.validation.openAPIV3Schema.properties[spec].x-kubernetes-validations[0].rule: Invalid value: apiextensions.ValidationRule{Rule:\"self.replicaz <= 5\", Message:\"\", MessageExpression:\"\", Reason:(*apiextensions.FieldValueErrorReason)(nil), FieldPath:\"\", OptionalOldSelf:(*bool)(nil)}: compilation failed: ERROR: <input>:1:5: undefined field 'replicaz'",
        "spec.validation.openAPIV3Schema.properties[spec].x-kubernetes-validations[1].rule: Invalid value: apiextensions.ValidationRule{Rule:\"self.replicas + 1\"",
        ": cel expression must evaluate to a bool",
        "spec.validation.openAPIV3Schema.properties[spec].x-kubernetes-validations[2].messageExpression: Invalid value: ",
        ": messageExpression compilation failed: ERROR: <input>:1:",
    ] {
        assert!(err.contains(want), "missing {want:?} in:\n{err}");
    }
    let good = bad
        .replace("self.replicaz <= 5", "self.replicas >= 0")
        .replace("self.replicas + 1", "self.replicas + 1 > 0")
        .replace("'too many: ' +", "'too many: ' + string(self.replicas)");
    c.kubectl_ok(&["apply", "-f", &file(&c, "good.yaml", &good)])
        .await;
}
