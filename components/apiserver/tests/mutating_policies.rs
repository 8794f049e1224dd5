//! MutatingAdmissionPolicy end to end with the real kubectl: policies and bindings written as
//! admissionregistration.k8s.io/v1alpha1 (kubectl 1.32's) are served, listed with upstream's
//! columns and validated (422 naming the field); an ApplyConfiguration adds a label taken from a
//! ConfigMap param, a matchCondition skips objects, a JSONPatch adds an init container and an
//! env var to a pod, an IfNeeded policy is reinvoked after a later policy changed the object, and
//! a CEL runtime error fails the request with upstream's message under failurePolicy Fail and is
//! skipped under Ignore; a mutation reads the `authorizer` (RBAC for the requesting user) and lazy
//! `variables` (a broken one that no expression reads is no error).

use kiln_testkit::{eventually, Cluster};
use serde_json::Value;

fn file(c: &Cluster, name: &str, content: &str) -> String {
    let p = c.dir.path().join(name);
    std::fs::write(&p, content).unwrap();
    p.to_string_lossy().into_owned()
}

async fn get_json(c: &Cluster, args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    serde_json::from_str(&c.kubectl_ok(&all).await).unwrap()
}

/// Creates `path` until admission lets it through (policies reach the apiserver's cache by a
/// watch, a moment after they are written).
async fn create_eventually(c: &Cluster, path: &str, what: &str) {
    eventually(what, || async {
        let (ok, _, _) = c
            .kubectl(&c.admin_kubeconfig, &["create", "-f", path])
            .await;
        ok.then_some(())
    })
    .await;
}

const OWNER_POLICY: &str = r#"
apiVersion: admissionregistration.k8s.io/v1alpha1
kind: MutatingAdmissionPolicy
metadata:
  name: owner-label
spec:
  paramKind: {apiVersion: v1, kind: ConfigMap}
  matchConstraints:
    resourceRules:
    - {operations: [CREATE], apiGroups: [""], apiVersions: [v1], resources: [configmaps]}
  matchConditions:
  - name: not-skipped
    expression: "!has(object.metadata.labels) || !('skip' in object.metadata.labels)"
  reinvocationPolicy: Never
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: "Object{metadata: Object.metadata{labels: {'owner': params.data.owner}}}"
---
apiVersion: admissionregistration.k8s.io/v1alpha1
kind: MutatingAdmissionPolicyBinding
metadata:
  name: owner-label
spec:
  policyName: owner-label
  paramRef: {name: owner, namespace: default}
"#;

const INJECT_POLICY: &str = r#"
apiVersion: admissionregistration.k8s.io/v1alpha1
kind: MutatingAdmissionPolicy
metadata:
  name: inject
spec:
  matchConstraints:
    resourceRules:
    - {operations: [CREATE], apiGroups: [""], apiVersions: [v1], resources: [pods]}
  reinvocationPolicy: Never
  mutations:
  - patchType: JSONPatch
    jsonPatch:
      expression: >-
        [JSONPatch{op: "add", path: "/spec/initContainers",
                   value: [Object.spec.initContainers{name: "setup", image: "registry.local/setup:1"}]},
         JSONPatch{op: "add", path: "/spec/containers/0/env",
                   value: [Object.spec.containers.env{name: "INJECTED", value: object.metadata.name}]}]
---
apiVersion: admissionregistration.k8s.io/v1alpha1
kind: MutatingAdmissionPolicyBinding
metadata:
  name: inject
spec:
  policyName: inject
"#;

/// Binding `a-copy` runs before `b-source` (bindings go in name order): the copy only sees the
/// source label when it is reinvoked.
const REINVOKE_POLICIES: &str = r#"
apiVersion: admissionregistration.k8s.io/v1alpha1
kind: MutatingAdmissionPolicy
metadata:
  name: copy
spec:
  matchConstraints:
    resourceRules:
    - {operations: [CREATE], apiGroups: [""], apiVersions: [v1], resources: [services]}
  reinvocationPolicy: IfNeeded
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: >-
        Object{metadata: Object.metadata{labels: {"copy":
          has(object.metadata.labels) && "source" in object.metadata.labels ? object.metadata.labels["source"] : "none"}}}
---
apiVersion: admissionregistration.k8s.io/v1alpha1
kind: MutatingAdmissionPolicyBinding
metadata:
  name: a-copy
spec:
  policyName: copy
---
apiVersion: admissionregistration.k8s.io/v1alpha1
kind: MutatingAdmissionPolicy
metadata:
  name: source
spec:
  matchConstraints:
    resourceRules:
    - {operations: [CREATE], apiGroups: [""], apiVersions: [v1], resources: [services]}
  reinvocationPolicy: Never
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: 'Object{metadata: Object.metadata{labels: {"source": "set"}}}'
---
apiVersion: admissionregistration.k8s.io/v1alpha1
kind: MutatingAdmissionPolicyBinding
metadata:
  name: b-source
spec:
  policyName: source
"#;

const BROKEN_POLICY: &str = r#"
apiVersion: admissionregistration.k8s.io/v1alpha1
kind: MutatingAdmissionPolicy
metadata:
  name: broken
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - {operations: [CREATE], apiGroups: [""], apiVersions: [v1], resources: [secrets]}
  reinvocationPolicy: Never
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: "Object{metadata: Object.metadata{labels: {'x': object.data.missing}}}"
---
apiVersion: admissionregistration.k8s.io/v1alpha1
kind: MutatingAdmissionPolicyBinding
metadata:
  name: broken
spec:
  policyName: broken
"#;

const INVALID_POLICY: &str = r#"
apiVersion: admissionregistration.k8s.io/v1alpha1
kind: MutatingAdmissionPolicy
metadata:
  name: invalid
spec:
  matchConstraints:
    resourceRules:
    - {operations: [DELETE], apiGroups: [""], apiVersions: [v1], resources: [pods]}
  reinvocationPolicy: Never
  mutations:
  - patchType: JSONPatch
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutating_admission_policies_with_kubectl() {
    let c = Cluster::start().await;

    // Served, in discovery, with upstream's columns.
    let resources = c
        .kubectl_ok(&[
            "api-resources",
            "--api-group=admissionregistration.k8s.io",
            "-o",
            "name",
        ])
        .await;
    assert!(
        resources.contains("mutatingadmissionpolicies.admissionregistration.k8s.io")
            && resources.contains("mutatingadmissionpolicybindings.admissionregistration.k8s.io"),
        "{resources}"
    );
    let invalid = file(&c, "invalid.yaml", INVALID_POLICY);
    let (ok, _, err) = c
        .kubectl(&c.admin_kubeconfig, &["create", "-f", &invalid])
        .await;
    assert!(!ok);
    assert!(
        err.contains("The MutatingAdmissionPolicy \"invalid\" is invalid: ")
            && err.contains("spec.matchConstraints.resourceRules.operations: Unsupported value: \"DELETE\": supported values: \"*\", \"CONNECT\", \"CREATE\", \"UPDATE\"")
            && err.contains("spec.mutations[0].jsonPatch: Required value: must be specified when patchType is JSONPatch"),
        "{err}"
    );

    // An ApplyConfiguration with a ConfigMap param; a matchCondition skips labelled objects.
    let param = file(
        &c,
        "param.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: owner\n  namespace: default\ndata:\n  owner: team-a\n",
    );
    c.kubectl_ok(&["create", "-f", &param]).await;
    let owner = file(&c, "owner.yaml", OWNER_POLICY);
    c.kubectl_ok(&["create", "-f", &owner]).await;
    let table = c
        .kubectl_ok(&["get", "mutatingadmissionpolicies", "owner-label"])
        .await;
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["NAME", "MUTATIONS", "PARAMKIND", "AGE"], "{table}");
    assert!(table.contains("v1/ConfigMap"), "{table}");
    let stored = get_json(&c, &["get", "mutatingadmissionpolicy", "owner-label"]).await;
    assert_eq!(stored["spec"]["failurePolicy"], "Fail", "defaulted");

    eventually("the owner label", || async {
        let name = format!("cm-{}", rand_suffix());
        c.kubectl_ok(&["create", "configmap", &name]).await;
        let cm = get_json(&c, &["get", "configmap", &name]).await;
        (cm["metadata"]["labels"]["owner"] == "team-a").then_some(())
    })
    .await;
    let skipped = file(
        &c,
        "skipped.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: skipped\n  labels: {skip: \"yes\"}\n",
    );
    c.kubectl_ok(&["create", "-f", &skipped]).await;
    let cm = get_json(&c, &["get", "configmap", "skipped"]).await;
    assert_eq!(cm["metadata"]["labels"], serde_json::json!({"skip": "yes"}));

    // A JSONPatch adds an init container and an env var to a pod.
    let inject = file(&c, "inject.yaml", INJECT_POLICY);
    c.kubectl_ok(&["create", "-f", &inject]).await;
    eventually("the injected init container", || async {
        let name = format!("pod-{}", rand_suffix());
        c.kubectl_ok(&["run", &name, "--image=registry.local/app:1"])
            .await;
        let pod = get_json(&c, &["get", "pod", &name]).await;
        let init = &pod["spec"]["initContainers"][0];
        (init["name"] == "setup").then(|| {
            assert_eq!(init["image"], "registry.local/setup:1");
            // Defaulted like any container the request had.
            assert_eq!(init["terminationMessagePolicy"], "File");
            assert_eq!(
                pod["spec"]["containers"][0]["env"],
                serde_json::json!([{"name": "INJECTED", "value": name}])
            );
        })
    })
    .await;

    // reinvocationPolicy IfNeeded: the copy runs again after the source label appeared.
    let reinvoke = file(&c, "reinvoke.yaml", REINVOKE_POLICIES);
    c.kubectl_ok(&["create", "-f", &reinvoke]).await;
    eventually("the reinvoked copy", || async {
        let name = format!("svc-{}", rand_suffix());
        c.kubectl_ok(&["create", "service", "clusterip", &name, "--tcp=80:80"])
            .await;
        let svc = get_json(&c, &["get", "service", &name]).await;
        let labels = &svc["metadata"]["labels"];
        (labels["source"] == "set" && labels["copy"] == "set").then_some(())
    })
    .await;

    // failurePolicy Fail: a runtime error refuses the request with upstream's message.
    let broken = file(&c, "broken.yaml", BROKEN_POLICY);
    c.kubectl_ok(&["create", "-f", &broken]).await;
    let secret = file(
        &c,
        "secret.yaml",
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: s1\nstringData:\n  a: b\n",
    );
    let err = eventually("the broken policy", || async {
        let (ok, _, err) = c
            .kubectl(&c.admin_kubeconfig, &["create", "-f", &secret])
            .await;
        if ok {
            c.kubectl_ok(&["delete", "secret", "s1"]).await;
            return None;
        }
        Some(err)
    })
    .await;
    assert!(
        // kubectl renders a status of reason Invalid from its causes, which have no field here.
        err.contains("The secrets \"s1\" is invalid: : ")
            && err.contains("policy 'broken' with binding 'broken' denied request: expression 'Object{metadata: Object.metadata{labels: {'x': object.data.missing}}}' resulted in error: no such key: missing"),
        "{err}"
    );
    // failurePolicy Ignore: the same error lets the request through unchanged.
    c.kubectl_ok(&[
        "patch",
        "mutatingadmissionpolicy",
        "broken",
        "--type=merge",
        "-p",
        r#"{"spec":{"failurePolicy":"Ignore"}}"#,
    ])
    .await;
    create_eventually(&c, &secret, "failurePolicy Ignore").await;
    let s = get_json(&c, &["get", "secret", "s1"]).await;
    assert!(s["metadata"]["labels"].get("x").is_none(), "{s}");
}

fn rand_suffix() -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    N.fetch_add(1, Ordering::Relaxed).to_string()
}

const AUTHORIZED_POLICY: &str = r#"
apiVersion: admissionregistration.k8s.io/v1alpha1
kind: MutatingAdmissionPolicy
metadata:
  name: may-write-secrets
spec:
  matchConstraints:
    resourceRules:
    - {operations: [CREATE], apiGroups: [""], apiVersions: [v1], resources: [configmaps]}
  variables:
  - name: mayCreateSecrets
    expression: "authorizer.group('').resource('secrets').namespace('default').check('create').allowed()"
  - name: broken
    expression: "object.data.nope == 'x'"
  reinvocationPolicy: Never
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: "Object{metadata: Object.metadata{labels: {'secrets': variables.mayCreateSecrets ? 'yes' : 'no'}}}"
---
apiVersion: admissionregistration.k8s.io/v1alpha1
kind: MutatingAdmissionPolicyBinding
metadata:
  name: may-write-secrets
spec:
  policyName: may-write-secrets
"#;

const ALICE_WRITES: &str = r#"apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: writer, namespace: default}
rules:
- {apiGroups: [""], resources: [configmaps], verbs: [create, get]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: alice-writes, namespace: default}
subjects: [{kind: User, name: alice, apiGroup: rbac.authorization.k8s.io}]
roleRef: {kind: Role, name: writer, apiGroup: rbac.authorization.k8s.io}
"#;

const ALICE_SECRETS: &str = r#"apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: secret-writer, namespace: default}
rules:
- {apiGroups: [""], resources: [secrets], verbs: [create]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: alice-secrets, namespace: default}
subjects: [{kind: User, name: alice, apiGroup: rbac.authorization.k8s.io}]
roleRef: {kind: Role, name: secret-writer, apiGroup: rbac.authorization.k8s.io}
"#;

/// A MutatingAdmissionPolicy's mutation asks the `authorizer` through a variable: the label says
/// whether the requesting user may create secrets — RBAC's answer for alice before and after a
/// Role lets her, and for the admin; the broken variable nothing reads fails nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mutation_asks_the_authorizer_and_reads_variables_lazily() {
    let c = Cluster::start().await;
    c.kubectl_ok(&["apply", "-f", &file(&c, "writes.yaml", ALICE_WRITES)])
        .await;
    c.kubectl_ok(&["create", "-f", &file(&c, "policy.yaml", AUTHORIZED_POLICY)])
        .await;
    let alice = c.kubeconfig_for("alice", &[]);
    let label = |who: &'static str| {
        let c = &c;
        let alice = alice.clone();
        async move {
            let name = format!("cm-{}", rand_suffix());
            let kubeconfig = if who == "alice" {
                alice
            } else {
                c.admin_kubeconfig.clone()
            };
            let (ok, _, err) = c
                .kubectl(
                    &kubeconfig,
                    &["create", "configmap", &name, "-n", "default"],
                )
                .await;
            assert!(ok, "{who} creating {name}: {err}");
            let cm = get_json(c, &["get", "configmap", &name, "-n", "default"]).await;
            cm["metadata"]["labels"]["secrets"]
                .as_str()
                .map(str::to_string)
        }
    };
    // The policy reaches the cache by a watch: the admin's configmap is labelled once it has.
    eventually("the admin's label", || async {
        (label("admin").await.as_deref() == Some("yes")).then_some(())
    })
    .await;
    assert_eq!(label("alice").await.as_deref(), Some("no"));
    c.kubectl_ok(&["apply", "-f", &file(&c, "secrets.yaml", ALICE_SECRETS)])
        .await;
    eventually("alice's label once she may create secrets", || async {
        (label("alice").await.as_deref() == Some("yes")).then_some(())
    })
    .await;
}
