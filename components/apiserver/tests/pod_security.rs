//! PodSecurity admission with the real kubectl against kiln-store + kiln-apiserver: namespace
//! labels choose the level per mode; enforce refuses pods with upstream's 403, warn reaches
//! kubectl's stderr, workloads are only warned; label values are validated; tightening enforce
//! reports the existing pods; the admission configuration file sets defaults and exemptions.

use kiln_testkit::{eventually, Cluster};
use serde_json::Value;

const RESTRICTED_DETAIL: &str = "allowPrivilegeEscalation != false (container \"c\" must set securityContext.allowPrivilegeEscalation=false), unrestricted capabilities (container \"c\" must set securityContext.capabilities.drop=[\"ALL\"]), runAsNonRoot != true (pod or container \"c\" must set securityContext.runAsNonRoot=true), seccompProfile (pod or container \"c\" must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\")";

fn yaml(c: &Cluster, name: &str, content: &str) -> String {
    let p = c.dir.path().join(name);
    std::fs::write(&p, content).unwrap();
    p.to_string_lossy().into_owned()
}

fn pod(name: &str, ns: &str, extra_container: &str, extra_spec: &str) -> String {
    format!(
        "apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: {ns}
spec:
{extra_spec}  containers:
  - name: c
    image: registry.local/app:1
{extra_container}"
    )
}

const PRIVILEGED: &str = "    securityContext:\n      privileged: true\n";
const COMPLIANT: &str = "    securityContext:
      allowPrivilegeEscalation: false
      runAsNonRoot: true
      capabilities:
        drop: [ALL]
      seccompProfile:
        type: RuntimeDefault
";

async fn run(c: &Cluster, args: &[&str]) -> (bool, String, String) {
    c.kubectl(&c.admin_kubeconfig, args).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enforce_warn_and_workloads() {
    let c = Cluster::start().await;
    c.kubectl_ok(&["create", "namespace", "strict"]).await;
    c.kubectl_ok(&[
        "label",
        "namespace",
        "strict",
        "pod-security.kubernetes.io/enforce=restricted",
    ])
    .await;

    // A privileged pod: refused with every violation, baseline checks first.
    let f = yaml(&c, "priv.yaml", &pod("priv", "strict", PRIVILEGED, ""));
    let (ok, _, err) = run(&c, &["create", "-f", &f]).await;
    assert!(
        !ok,
        "a privileged pod in a restricted namespace was admitted"
    );
    let want = format!(
        "pods \"priv\" is forbidden: violates PodSecurity \"restricted:latest\": privileged (container \"c\" must not set securityContext.privileged=true), {RESTRICTED_DETAIL}"
    );
    assert!(err.contains("(Forbidden)"), "{err}");
    assert!(err.contains(&want), "want {want}\ngot {err}");
    assert!(!err.contains("Warning:"), "no warnings on a refusal: {err}");

    // A compliant pod: admitted, no warning.
    let f = yaml(&c, "ok.yaml", &pod("ok", "strict", COMPLIANT, ""));
    let (ok, _, err) = run(&c, &["create", "-f", &f]).await;
    assert!(ok, "{err}");
    assert!(!err.contains("Warning"), "{err}");

    // A Deployment whose template breaks the policy: admitted, with the warn level (defaulted to
    // the enforce level) on kubectl's stderr.
    let deploy = "apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: strict
spec:
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: c
        image: registry.local/app:1
";
    let f = yaml(&c, "deploy.yaml", deploy);
    let (ok, _, err) = run(&c, &["create", "-f", &f]).await;
    assert!(ok, "workloads are never refused: {err}");
    assert!(
        err.contains(&format!(
            "Warning: would violate PodSecurity \"restricted:latest\": {RESTRICTED_DETAIL}"
        )),
        "{err}"
    );

    // warn mode alone: admitted with kubectl's `Warning:` line.
    c.kubectl_ok(&["create", "namespace", "watched"]).await;
    c.kubectl_ok(&[
        "label",
        "namespace",
        "watched",
        "pod-security.kubernetes.io/warn=baseline",
        "pod-security.kubernetes.io/warn-version=v1.30",
    ])
    .await;
    let f = yaml(
        &c,
        "hostnet.yaml",
        &pod("hostnet", "watched", "", "  hostNetwork: true\n"),
    );
    let (ok, _, err) = run(&c, &["create", "-f", &f]).await;
    assert!(ok, "{err}");
    assert!(
        err.contains(
            "Warning: would violate PodSecurity \"baseline:v1.30\": host namespaces (hostNetwork=true)"
        ),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespace_labels_and_existing_pods() {
    let c = Cluster::start().await;
    // Invalid values are refused, naming the label.
    c.kubectl_ok(&["create", "namespace", "team"]).await;
    let (ok, _, err) = run(
        &c,
        &[
            "label",
            "namespace",
            "team",
            "pod-security.kubernetes.io/enforce=strict",
        ],
    )
    .await;
    assert!(!ok, "an invalid level was accepted");
    assert!(
        err.contains("The Namespace \"team\" is invalid: metadata.labels[pod-security.kubernetes.io/enforce]: Invalid value: \"strict\": must be one of privileged, baseline, restricted"),
        "{err}"
    );
    let bad = yaml(
        &c,
        "bad-ns.yaml",
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: bad\n  labels:\n    pod-security.kubernetes.io/audit-version: \"1.25\"\n",
    );
    let (ok, _, err) = run(&c, &["create", "-f", &bad]).await;
    assert!(!ok);
    assert!(
        err.contains("metadata.labels[pod-security.kubernetes.io/audit-version]: Invalid value: \"1.25\": must be \"latest\" or \"v1.x\""),
        "{err}"
    );

    // Pods made before the namespace tightens: listed in the warnings, grouped by reason.
    for (name, extra) in [("p1", PRIVILEGED), ("p2", PRIVILEGED), ("fine", "")] {
        let f = yaml(&c, &format!("{name}.yaml"), &pod(name, "team", extra, ""));
        c.kubectl_ok(&["create", "-f", &f]).await;
    }
    let (ok, _, err) = run(
        &c,
        &[
            "label",
            "namespace",
            "team",
            "pod-security.kubernetes.io/enforce=baseline",
        ],
    )
    .await;
    assert!(ok, "{err}");
    assert!(
        err.contains("Warning: existing pods in namespace \"team\" violate the new PodSecurity enforce level \"baseline:latest\""),
        "{err}"
    );
    assert!(
        err.contains("Warning: p1 (and 1 other pod): privileged"),
        "{err}"
    );

    // Updates re-check only what may change on a pod: a label goes through, a new image is
    // refused at the new level.
    c.kubectl_ok(&["label", "pod", "p1", "-n", "team", "touched=yes"])
        .await;
    let (ok, _, err) = run(
        &c,
        &[
            "set",
            "image",
            "pod/p1",
            "-n",
            "team",
            "c=registry.local/app:2",
        ],
    )
    .await;
    assert!(!ok, "an image change of a privileged pod was admitted");
    assert!(
        err.contains("pods \"p1\" is forbidden: violates PodSecurity \"baseline:latest\": privileged (container \"c\" must not set securityContext.privileged=true)"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configuration_defaults_and_exemptions() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("admission.yaml");
    std::fs::write(
        &config,
        "apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: PodSecurity
  configuration:
    apiVersion: pod-security.admission.config.k8s.io/v1
    kind: PodSecurityConfiguration
    defaults:
      enforce: baseline
      enforce-version: latest
    exemptions:
      namespaces: [exempt]
",
    )
    .unwrap();
    let flag = format!("--admission-control-config-file={}", config.display());
    let c = Cluster::start_with(&[&flag]).await;
    c.kubectl_ok(&["create", "namespace", "exempt"]).await;
    c.kubectl_ok(&["create", "namespace", "other"]).await;

    // The default enforce level applies to unlabelled namespaces...
    let f = yaml(&c, "other.yaml", &pod("priv", "other", PRIVILEGED, ""));
    let (ok, _, err) = run(&c, &["create", "-f", &f]).await;
    assert!(!ok, "the default baseline enforce level was not applied");
    assert!(
        err.contains("pods \"priv\" is forbidden: violates PodSecurity \"baseline:latest\": privileged (container \"c\" must not set securityContext.privileged=true)"),
        "{err}"
    );
    // ...but not to an exempt namespace, whatever it is labelled.
    let (ok, _, err) = run(
        &c,
        &[
            "label",
            "namespace",
            "exempt",
            "pod-security.kubernetes.io/enforce=restricted",
        ],
    )
    .await;
    assert!(ok, "{err}");
    assert!(
        err.contains("Warning: namespace \"exempt\" is exempt from Pod Security, and the policy (enforce=restricted:latest) will be ignored"),
        "{err}"
    );
    let f = yaml(&c, "exempt.yaml", &pod("priv", "exempt", PRIVILEGED, ""));
    let (ok, _, err) = run(&c, &["create", "-f", &f]).await;
    assert!(ok, "a pod in an exempt namespace was refused: {err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_configuration_file_stops_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("admission.yaml");
    std::fs::write(
        &config,
        "apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: PodSecurity
  configuration:
    apiVersion: pod-security.admission.config.k8s.io/v1
    kind: PodSecurityConfiguration
    defaults:
      warn: strict
",
    )
    .unwrap();
    // The start stops before the store is reached (none listens on port 1).
    let pki = kiln_testkit::Pki::new();
    let serving = pki.serving();
    let (cert, key) = (dir.path().join("s.crt"), dir.path().join("s.key"));
    std::fs::write(&cert, &serving.cert).unwrap();
    std::fs::write(&key, &serving.key).unwrap();
    let options = <kiln_apiserver::Options as clap::Parser>::parse_from([
        "kiln-apiserver".to_string(),
        "--etcd-servers=http://127.0.0.1:1".to_string(),
        "--secure-port=0".to_string(),
        "--bind-address=127.0.0.1".to_string(),
        format!("--tls-cert-file={}", cert.display()),
        format!("--tls-private-key-file={}", key.display()),
        format!("--admission-control-config-file={}", config.display()),
    ]);
    let err = match kiln_apiserver::start(options).await {
        Ok(_) => panic!("kiln-apiserver started with an invalid PodSecurity configuration"),
        Err(e) => e.to_string(),
    };
    assert_eq!(
        err,
        format!(
            "admission control config file {}: plugins[0].configuration.defaults.warn: Invalid value: \"strict\": must be one of privileged, baseline, restricted",
            config.display()
        )
    );
}

/// The audit level is reported on the request's audit event, as upstream's annotations.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_level_annotates_the_event() {
    let mut log = std::path::PathBuf::new();
    let c = Cluster::start_with_pki_flags(|_, dir| {
        let policy = dir.join("audit-policy.yaml");
        std::fs::write(
            &policy,
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n- level: Metadata\n",
        )
        .unwrap();
        log = dir.join("audit.log");
        vec![
            format!("--audit-policy-file={}", policy.display()),
            format!("--audit-log-path={}", log.display()),
        ]
    })
    .await;
    c.kubectl_ok(&["create", "namespace", "audited"]).await;
    c.kubectl_ok(&[
        "label",
        "namespace",
        "audited",
        "pod-security.kubernetes.io/audit=restricted",
    ])
    .await;
    let f = yaml(&c, "bare.yaml", &pod("bare", "audited", "", ""));
    let (ok, _, err) = run(&c, &["create", "-f", &f]).await;
    assert!(ok, "audit never refuses: {err}");
    assert!(!err.contains("Warning"), "audit does not warn: {err}");
    let event = eventually("the pod's audit event", || {
        let found = std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|e| {
                e["verb"] == "create"
                    && e["objectRef"]["resource"] == "pods"
                    && e["objectRef"]["name"] == "bare"
                    && e["stage"] == "ResponseComplete"
            });
        async move { found }
    })
    .await;
    let a = &event["annotations"];
    assert_eq!(
        a["pod-security.kubernetes.io/enforce-policy"], "privileged:latest",
        "{event}"
    );
    assert_eq!(
        a["pod-security.kubernetes.io/audit-violations"],
        format!("would violate PodSecurity \"restricted:latest\": {RESTRICTED_DETAIL}").as_str(),
        "{event}"
    );
}
