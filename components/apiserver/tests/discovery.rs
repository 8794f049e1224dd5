//! Real kubectl of every supported minor (1.27 … 1.33) against kiln-apiserver: aggregated
//! discovery (`api-resources` in one round trip, no per-group-version requests) and OpenAPI
//! schemas (`kubectl explain` for built-in kinds and custom resources, over v3 and over v2 in
//! protobuf).

use std::path::PathBuf;
use std::time::Duration;

use kiln_testkit::{rows, Cluster};

/// The kubectl minors kiln supports, newest first (all installed side by side).
const MINORS: [&str; 7] = ["1.33", "1.32", "1.31", "1.30", "1.29", "1.28", "1.27"];

/// `kubectl.<minor>` beside the real kubectl binary (the versions installed side by side).
fn kubectl_binary(minor: &str) -> PathBuf {
    let path = std::env::var_os("PATH").expect("PATH");
    let kubectl = std::env::split_paths(&path)
        .map(|d| d.join("kubectl"))
        .find(|p| p.is_file())
        .expect("kubectl on PATH");
    let real = std::fs::canonicalize(kubectl).expect("resolve kubectl");
    let versioned = real.with_file_name(format!("kubectl.{minor}"));
    assert!(versioned.is_file(), "{} missing", versioned.display());
    versioned
}

/// Runs one kubectl version as admin with its own discovery cache; returns (ok, stdout, stderr).
async fn kubectl(c: &Cluster, minor: &str, args: &[&str]) -> (bool, String, String) {
    let cache = c.dir.path().join(format!("cache-{minor}"));
    let mut cmd = tokio::process::Command::new(kubectl_binary(minor));
    cmd.arg("--kubeconfig")
        .arg(&c.admin_kubeconfig)
        .arg("--cache-dir")
        .arg(&cache)
        .arg("--request-timeout=20s")
        .args(args)
        .kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(60), cmd.output())
        .await
        .unwrap_or_else(|_| panic!("kubectl {minor} {args:?} timed out"))
        .expect("run kubectl");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

async fn kubectl_ok(c: &Cluster, minor: &str, args: &[&str]) -> (String, String) {
    let (ok, out, err) = kubectl(c, minor, args).await;
    assert!(
        ok,
        "kubectl {minor} {args:?} failed:\nstdout: {out}\nstderr: {err}"
    );
    (out, err)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_resources_use_aggregated_discovery() {
    let c = Cluster::start().await;
    for minor in MINORS {
        // -v=6 logs each request: aggregated discovery needs only /api and /apis.
        let (out, err) = kubectl_ok(&c, minor, &["api-resources", "-v=6"]).await;
        let table = rows(&out);
        assert_eq!(table[0][0], "NAME", "{minor}: {out}");
        let pods = table
            .iter()
            .find(|r| r[0] == "pods")
            .unwrap_or_else(|| panic!("{minor}: {out}"));
        assert_eq!(pods[1], "po", "{minor}: {pods:?}");
        assert!(pods.contains(&"true".to_string()) && pods.contains(&"Pod".to_string()));
        let deploy = table
            .iter()
            .find(|r| r[0] == "deployments")
            .expect("deployments");
        assert!(
            deploy.contains(&"apps/v1".to_string()),
            "{minor}: {deploy:?}"
        );
        assert!(
            !err.contains("/apis/apps/v1") && !err.contains("/api/v1?"),
            "{minor} fell back to per-group-version discovery:\n{err}"
        );
        assert!(!err.contains("unable to retrieve"), "{minor}: {err}");
        assert!(
            !err.contains("couldn't get resource list"),
            "{minor}: {err}"
        );

        // Short names and categories resolve through the aggregated document too.
        let (out, _) = kubectl_ok(&c, minor, &["get", "ns", "-o", "name"]).await;
        assert!(out.contains("namespace/default"), "{minor}: {out}");

        // apply validates (server-side, found through OpenAPI v3's fieldValidation parameter)
        // without tripping over /openapi/v2, which these clients ask for in protobuf.
        let file = c.dir.path().join(format!("cm-{minor}.yaml"));
        let name = format!("cm-{}", minor.replace('.', "-"));
        std::fs::write(
            &file,
            format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  a: b\n"),
        )
        .unwrap();
        let (out, _) = kubectl_ok(&c, minor, &["apply", "-f", file.to_str().unwrap()]).await;
        assert!(
            out.contains(&format!("configmap/{name} created")),
            "{minor}: {out}"
        );
    }
}

const CRD: &str = r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: crontabs.stable.example.com
spec:
  group: stable.example.com
  scope: Namespaced
  names:
    plural: crontabs
    singular: crontab
    kind: CronTab
    shortNames: [ct]
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        description: A CronTab runs a command on a schedule.
        properties:
          spec:
            type: object
            description: What to run and when.
            properties:
              cronSpec:
                type: string
                description: The schedule, in cron format.
              replicas:
                type: integer
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_reads_openapi_schemas() {
    // 1.29+ explain from OpenAPI v3; 1.27 and 1.28 load v2 in protobuf first.
    let c = Cluster::start().await;
    for minor in MINORS {
        let (out, _) = kubectl_ok(&c, minor, &["explain", "pods.spec.containers"]).await;
        assert!(
            out.contains("KIND:") && out.contains("Pod"),
            "{minor}: {out}"
        );
        assert!(out.contains("image"), "{minor}: {out}");
    }

    let crd = c.dir.path().join("crd.yaml");
    std::fs::write(&crd, CRD).unwrap();
    kubectl_ok(&c, "1.33", &["apply", "-f", crd.to_str().unwrap()]).await;
    kubectl_ok(
        &c,
        "1.33",
        &[
            "wait",
            "--for=condition=Established",
            "crd/crontabs.stable.example.com",
            "--timeout=30s",
        ],
    )
    .await;
    for minor in MINORS {
        // A fresh cache each version; retry while discovery catches up with the new group.
        let mut last = String::new();
        for _ in 0..20 {
            let (ok, out, err) = kubectl(&c, minor, &["explain", "crontabs.spec"]).await;
            if ok {
                last = out;
                break;
            }
            last = format!("{out}{err}");
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        assert!(last.contains("What to run and when."), "{minor}: {last}");
        assert!(last.contains("cronSpec"), "{minor}: {last}");
        let (out, _) = kubectl_ok(&c, minor, &["explain", "crontabs.metadata.name"]).await;
        assert!(out.contains("name"), "{minor}: {out}");
    }
}
