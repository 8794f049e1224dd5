//! Audit logging end to end: real kubectl against kiln-apiserver with `--audit-policy-file` and
//! `--audit-log-path`; the JSON-lines log is read back and checked field by field.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Parser;
use kiln_testkit::{eventually, Cluster};
use serde_json::Value;

const POLICY: &str = r#"apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: RequestResponse
  resources: [{group: "", resources: ["configmaps"]}]
  omitManagedFields: true
- level: Metadata
  resources: [{group: "", resources: ["secrets"]}]
- level: None
  nonResourceURLs: ["/healthz*", "/readyz*", "/livez*", "/openapi*"]
- level: Metadata
"#;

fn events(log: &Path) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

async fn wait_for(log: &Path, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
    eventually(what, || {
        let found = events(log).into_iter().find(|e| pred(e));
        async move { found }
    })
    .await
}

async fn audited_cluster() -> (Cluster, PathBuf) {
    let mut log = PathBuf::new();
    let c = Cluster::start_with_pki_flags(|_, dir| {
        std::fs::write(dir.join("audit-policy.yaml"), POLICY).unwrap();
        log = dir.join("audit").join("audit.log");
        vec![
            format!(
                "--audit-policy-file={}",
                dir.join("audit-policy.yaml").display()
            ),
            format!("--audit-log-path={}", log.display()),
            "--audit-log-maxsize=1".into(),
            "--audit-log-maxbackup=2".into(),
        ]
    })
    .await;
    (c, log)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_requests_are_audited_with_upstreams_fields() {
    let (c, log) = audited_cluster().await;

    // RequestResponse: kubectl create → one ResponseComplete event with the user, verb, object
    // reference, both objects and the authorization decision.
    c.kubectl_ok(&["create", "configmap", "cm1", "--from-literal=colour=blue"])
        .await;
    let ev = wait_for(&log, "the configmap create event", |e| {
        e["verb"] == "create" && e["objectRef"]["name"] == "cm1"
    })
    .await;
    assert_eq!(ev["kind"], "Event");
    assert_eq!(ev["apiVersion"], "audit.k8s.io/v1");
    assert_eq!(ev["level"], "RequestResponse");
    assert_eq!(ev["stage"], "ResponseComplete");
    assert_eq!(ev["user"]["username"], "kubernetes-admin");
    assert!(ev["user"]["groups"]
        .as_array()
        .unwrap()
        .iter()
        .any(|g| g == "system:masters"));
    assert_eq!(ev["objectRef"]["resource"], "configmaps");
    assert_eq!(ev["objectRef"]["namespace"], "default");
    assert_eq!(ev["objectRef"]["apiVersion"], "v1");
    assert_eq!(ev["responseStatus"]["code"], 201);
    assert_eq!(ev["requestObject"]["data"]["colour"], "blue");
    assert!(ev["responseObject"]["metadata"]["uid"].is_string(), "{ev}");
    assert!(
        ev["responseObject"]["metadata"]
            .get("managedFields")
            .is_none(),
        "omitManagedFields: {ev}"
    );
    assert_eq!(ev["annotations"]["authorization.k8s.io/decision"], "allow");
    assert!(ev["requestURI"]
        .as_str()
        .unwrap()
        .starts_with("/api/v1/namespaces/default/configmaps"));
    assert!(ev["userAgent"].as_str().unwrap().starts_with("kubectl"));
    assert_eq!(ev["sourceIPs"][0], "127.0.0.1");
    let micro = |f: &str| {
        let t = ev[f].as_str().unwrap();
        assert!(
            t.len() == 27 && t.ends_with('Z') && t.as_bytes()[19] == b'.',
            "{f}: {t}"
        );
    };
    micro("requestReceivedTimestamp");
    micro("stageTimestamp");
    // omitStages: RequestReceived at the policy level.
    assert!(events(&log).iter().all(|e| e["stage"] != "RequestReceived"));

    // Metadata for secrets: no objects in the log, so no secret material.
    c.kubectl_ok(&[
        "create",
        "secret",
        "generic",
        "s1",
        "--from-literal=password=hunter2",
    ])
    .await;
    let ev = wait_for(&log, "the secret create event", |e| {
        e["verb"] == "create" && e["objectRef"]["resource"] == "secrets"
    })
    .await;
    assert_eq!(ev["level"], "Metadata");
    assert_eq!(
        ev["objectRef"]["name"], "s1",
        "a create's name comes from its body: {ev}"
    );
    assert!(ev.get("requestObject").is_none() && ev.get("responseObject").is_none());
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(!text.contains("hunter2") && !text.contains("aHVudGVyMg=="));

    // A denied request: the decision is forbid and the Status is recorded.
    let mallory = c.kubeconfig_for("mallory", &[]);
    let (ok, _, _) = c.kubectl(&mallory, &["get", "pods"]).await;
    assert!(!ok);
    let ev = wait_for(&log, "mallory's denied list", |e| {
        e["user"]["username"] == "mallory" && e["objectRef"]["resource"] == "pods"
    })
    .await;
    assert_eq!(ev["verb"], "list");
    assert_eq!(ev["responseStatus"]["code"], 403);
    assert_eq!(ev["responseStatus"]["reason"], "Forbidden");
    assert_eq!(ev["annotations"]["authorization.k8s.io/decision"], "forbid");

    // The Audit-Id response header names the request's event.
    let (ok, _, stderr) = c
        .kubectl(
            &c.admin_kubeconfig,
            &["get", "namespace", "default", "-v=8"],
        )
        .await;
    assert!(ok, "{stderr}");
    let id = stderr
        .lines()
        .find_map(|l| l.split("Audit-Id: ").nth(1))
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|| panic!("no Audit-Id header in:\n{stderr}"));
    let ev = wait_for(&log, "the event of the Audit-Id", |e| {
        e["auditID"] == id.as_str()
    })
    .await;
    assert_eq!(ev["verb"], "get");
    assert_eq!(ev["objectRef"]["resource"], "namespaces");

    // Long-running: a watch has ResponseStarted, then ResponseComplete when it ends.
    let _ = c
        .kubectl(
            &c.admin_kubeconfig,
            &["get", "pods", "--watch", "--request-timeout=2s"],
        )
        .await;
    let started = wait_for(&log, "the watch's ResponseStarted", |e| {
        e["verb"] == "watch" && e["stage"] == "ResponseStarted"
    })
    .await;
    let id = started["auditID"].as_str().unwrap().to_string();
    wait_for(&log, "the watch's ResponseComplete", |e| {
        e["auditID"] == id.as_str() && e["stage"] == "ResponseComplete"
    })
    .await;

    // Level None (health checks) is not logged.
    c.kubectl_ok(&["get", "--raw", "/readyz"]).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(events(&log).iter().all(|e| !e["requestURI"]
        .as_str()
        .unwrap_or("")
        .starts_with("/readyz")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_policy_stops_the_server_naming_file_and_field() {
    let c = Cluster::start().await;
    let dir = c.dir.path();
    let policy = dir.join("bad-policy.yaml");
    std::fs::write(
        &policy,
        "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n- level: Loud\n",
    )
    .unwrap();
    let args = [
        "kiln-apiserver".to_string(),
        format!("--etcd-servers={}", c.etcd.endpoint),
        "--bind-address=127.0.0.1".into(),
        "--secure-port=0".into(),
        format!("--tls-cert-file={}", dir.join("apiserver.crt").display()),
        format!(
            "--tls-private-key-file={}",
            dir.join("apiserver.key").display()
        ),
        format!("--audit-policy-file={}", policy.display()),
        format!("--audit-log-path={}", dir.join("x.log").display()),
    ];
    let err = match kiln_apiserver::start(kiln_apiserver::Options::parse_from(args)).await {
        Ok(_) => panic!("a bad audit policy must stop the server"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("bad-policy.yaml"), "{err}");
    assert!(
        err.contains("rules[1].level: Unsupported value: \"Loud\""),
        "{err}"
    );
}
