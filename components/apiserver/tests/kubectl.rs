//! The real kubectl 1.32 against kiln-apiserver on a real etcd: discovery, apply, Table output,
//! status patches, yaml output, graceful pod deletion, raw health.

use kiln_testkit::{rows, Cluster};

const NODE: &str = "apiVersion: v1
kind: Node
metadata:
  name: n1
  labels:
    node-role.kubernetes.io/control-plane: \"\"
";

fn pod(name: &str, node: Option<&str>, tier: &str) -> String {
    let node = node
        .map(|n| format!("  nodeName: {n}\n"))
        .unwrap_or_default();
    format!(
        "apiVersion: v1
kind: Pod
metadata:
  name: {name}
  labels:
    tier: {tier}
spec:
{node}  containers:
  - name: app
    image: registry.local/app:1.0
"
    )
}

const NODE_READY: &str = r#"{"status":{"conditions":[{"type":"Ready","status":"True","reason":"KubeletReady","message":"ok","lastHeartbeatTime":"2026-01-01T00:00:00Z","lastTransitionTime":"2026-01-01T00:00:00Z"}],"addresses":[{"type":"InternalIP","address":"10.0.0.11"}],"nodeInfo":{"kubeletVersion":"v1.33.0-kiln","machineID":"","systemUUID":"","bootID":"","kernelVersion":"6.1.0","osImage":"Debian GNU/Linux 12","containerRuntimeVersion":"containerd://1.7","kubeProxyVersion":"","operatingSystem":"linux","architecture":"amd64"}}}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_walking_skeleton() {
    let c = Cluster::start().await;

    // Default namespaces exist and print with kubectl's namespace columns.
    let ns = rows(&c.kubectl_ok(&["get", "ns"]).await);
    assert_eq!(ns[0], ["NAME", "STATUS", "AGE"]);
    for want in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        assert!(
            ns.iter().any(|r| r[0] == want && r[1] == "Active"),
            "namespace {want} missing: {ns:?}"
        );
    }

    // kubectl apply: create a Node and two Pods.
    let dir = c.dir.path();
    std::fs::write(dir.join("node.yaml"), NODE).unwrap();
    std::fs::write(dir.join("web.yaml"), pod("web", Some("n1"), "frontend")).unwrap();
    std::fs::write(dir.join("solo.yaml"), pod("solo", None, "batch")).unwrap();
    let node_yaml = dir.join("node.yaml");
    let web_yaml = dir.join("web.yaml");
    let solo_yaml = dir.join("solo.yaml");
    let out = c
        .kubectl_ok(&[
            "apply",
            "-f",
            node_yaml.to_str().unwrap(),
            "-f",
            web_yaml.to_str().unwrap(),
            "-f",
            solo_yaml.to_str().unwrap(),
        ])
        .await;
    assert!(out.contains("node/n1 created"), "{out}");
    assert!(out.contains("pod/web created"), "{out}");
    assert!(out.contains("pod/solo created"), "{out}");

    // Status goes through the status subresource, as a kubelet would write it.
    c.kubectl_ok(&[
        "patch",
        "node",
        "n1",
        "--subresource=status",
        "--type=merge",
        "-p",
        NODE_READY,
    ])
    .await;
    let nodes = rows(&c.kubectl_ok(&["get", "nodes"]).await);
    assert_eq!(nodes[0], ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]);
    assert_eq!(nodes[1][0], "n1");
    assert_eq!(nodes[1][1], "Ready");
    assert_eq!(nodes[1][2], "control-plane");
    assert_eq!(nodes[1][4], "v1.33.0-kiln");

    let all = rows(&c.kubectl_ok(&["get", "pods", "-A"]).await);
    assert_eq!(
        all[0],
        ["NAMESPACE", "NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    );
    let web = all.iter().find(|r| r[1] == "web").expect("web listed");
    assert_eq!(&web[..5], ["default", "web", "0/1", "Pending", "0"]);

    let wide = c.kubectl_ok(&["get", "pods", "-o", "wide"]).await;
    let header = wide.lines().next().unwrap();
    assert!(header.contains("IP") && header.contains("NODE"), "{wide}");
    let web = rows(&wide).into_iter().find(|r| r[0] == "web").unwrap();
    assert_eq!(web[5], "<none>"); // IP
    assert_eq!(web[6], "n1"); // NODE

    // Label selectors reach the server.
    let sel = rows(
        &c.kubectl_ok(&["get", "pods", "-l", "tier in (batch)"])
            .await,
    );
    assert_eq!(sel.len(), 2, "{sel:?}");
    assert_eq!(sel[1][0], "solo");

    let yaml = c.kubectl_ok(&["get", "pod", "web", "-o", "yaml"]).await;
    for want in [
        "name: web",
        "namespace: default",
        "resourceVersion:",
        "uid:",
        "nodeName: n1",
        "phase: Pending",
    ] {
        assert!(yaml.contains(want), "missing {want:?} in:\n{yaml}");
    }

    // A second apply with a change goes through a strategic-merge PATCH.
    std::fs::write(&web_yaml, pod("web", Some("n1"), "edge")).unwrap();
    let out = c
        .kubectl_ok(&["apply", "-f", web_yaml.to_str().unwrap()])
        .await;
    assert!(out.contains("pod/web configured"), "{out}");
    let labels = c
        .kubectl_ok(&[
            "get",
            "pod",
            "web",
            "-o",
            "jsonpath={.metadata.labels.tier}",
        ])
        .await;
    assert_eq!(labels, "edge");

    // An unscheduled pod is deleted at once; kubectl waits for it through a watch.
    let out = c
        .kubectl_ok(&["delete", "pod", "solo", "--timeout=30s"])
        .await;
    assert!(out.contains("pod \"solo\" deleted"), "{out}");

    // A pod on a node is deleted gracefully: Terminating until its kubelet confirms.
    let out = c
        .kubectl_ok(&["delete", "pod", "web", "--wait=false"])
        .await;
    assert!(out.contains("pod \"web\" deleted"), "{out}");
    let pods = rows(&c.kubectl_ok(&["get", "pods"]).await);
    assert_eq!(pods[1][2], "Terminating", "{pods:?}");
    let (ok, _, _) = c
        .kubectl(
            &c.node_kubeconfig,
            &[
                "delete",
                "pod",
                "web",
                "--grace-period=0",
                "--force",
                "--wait=false",
            ],
        )
        .await;
    assert!(ok, "the node's kubelet may confirm the deletion");
    let (ok, _, err) = c.kubectl(&c.admin_kubeconfig, &["get", "pod", "web"]).await;
    assert!(!ok);
    assert!(
        err.contains("Error from server (NotFound): pods \"web\" not found"),
        "{err}"
    );

    assert_eq!(c.kubectl_ok(&["get", "--raw", "/readyz"]).await, "ok");

    // Discovery as kubectl reads it.
    let resources = c.kubectl_ok(&["api-resources"]).await;
    for want in ["pods", "nodes", "namespaces", "leases"] {
        assert!(resources.contains(want), "{resources}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_errors_are_upstream_shaped() {
    let c = Cluster::start().await;
    let (ok, _, err) = c
        .kubectl(&c.admin_kubeconfig, &["get", "pod", "nope"])
        .await;
    assert!(!ok);
    assert!(
        err.contains("Error from server (NotFound): pods \"nope\" not found"),
        "{err}"
    );

    let (ok, _, err) = c
        .kubectl(
            &c.node_kubeconfig,
            &["get", "--raw", "/api/v1/namespaces/default/secrets"],
        )
        .await;
    assert!(!ok);
    assert!(
        err.contains("secrets is forbidden: User \"system:node:n1\" cannot list resource \"secrets\" in API group \"\" in the namespace \"default\""),
        "{err}"
    );

    let p = c.dir.path().join("p.yaml");
    std::fs::write(&p, pod("x", None, "a")).unwrap();
    c.kubectl_ok(&["create", "-f", p.to_str().unwrap()]).await;
    let (ok, _, err) = c
        .kubectl(&c.admin_kubeconfig, &["create", "-f", p.to_str().unwrap()])
        .await;
    assert!(!ok);
    assert!(
        err.contains("(AlreadyExists)") && err.contains("pods \"x\" already exists"),
        "{err}"
    );

    let (ok, _, err) = c
        .kubectl(
            &c.admin_kubeconfig,
            &["create", "-f", p.to_str().unwrap(), "-n", "missing"],
        )
        .await;
    assert!(!ok);
    assert!(err.contains("namespaces \"missing\" not found"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_apply_rejects_unknown_fields() {
    let c = Cluster::start().await;
    let p = c.dir.path().join("typo.yaml");
    std::fs::write(
        &p,
        pod("typo", None, "a").replace("    image:", "    imagee: x\n    image:"),
    )
    .unwrap();
    let (ok, _, err) = c
        .kubectl(&c.admin_kubeconfig, &["apply", "-f", p.to_str().unwrap()])
        .await;
    assert!(!ok);
    assert!(
        err.contains("unknown field \"spec.containers[0].imagee\""),
        "{err}"
    );
    let (ok, _, _) = c
        .kubectl(&c.admin_kubeconfig, &["get", "pod", "typo"])
        .await;
    assert!(!ok, "nothing is stored from a rejected request");
}

const EVENT: &str = "apiVersion: v1
kind: Event
metadata:
  name: solo.started
  namespace: default
involvedObject:
  apiVersion: v1
  kind: Pod
  name: solo
  namespace: default
  uid: UID
reason: Started
message: Started container app
type: Normal
source:
  component: kubelet
  host: n1
firstTimestamp: \"2026-01-01T00:00:00Z\"
lastTimestamp: \"2026-01-01T00:00:00Z\"
count: 1
";

/// ConfigMaps, Secrets and Events are registry entries only; kubectl sees their columns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_more_kinds_are_data_entries() {
    let c = Cluster::start().await;
    let cm = c.dir.path().join("cm.yaml");
    std::fs::write(
        &cm,
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm1\ndata:\n  a: b\n",
    )
    .unwrap();
    c.kubectl_ok(&["apply", "-f", cm.to_str().unwrap()]).await;
    let cms = rows(&c.kubectl_ok(&["get", "cm"]).await);
    assert_eq!(cms[0], ["NAME", "DATA", "AGE"]);
    assert_eq!(&cms[1][..2], ["cm1", "1"]);

    let secret = c.dir.path().join("secret.yaml");
    std::fs::write(
        &secret,
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: s1\nstringData:\n  x: \"y\"\n",
    )
    .unwrap();
    c.kubectl_ok(&["apply", "-f", secret.to_str().unwrap()])
        .await;
    let secrets = rows(&c.kubectl_ok(&["get", "secrets"]).await);
    assert_eq!(secrets[0], ["NAME", "TYPE", "DATA", "AGE"]);
    assert_eq!(&secrets[1][..3], ["s1", "Opaque", "1"]);

    let p = c.dir.path().join("solo.yaml");
    std::fs::write(&p, pod("solo", None, "a")).unwrap();
    c.kubectl_ok(&["create", "-f", p.to_str().unwrap()]).await;
    let e = c.dir.path().join("event.yaml");
    let uid = c
        .kubectl_ok(&["get", "pod", "solo", "-o", "jsonpath={.metadata.uid}"])
        .await;
    std::fs::write(&e, EVENT.replace("UID", &uid)).unwrap();
    let (ok, _, err) = c
        .kubectl(&c.node_kubeconfig, &["create", "-f", e.to_str().unwrap()])
        .await;
    assert!(ok, "a kubelet may record events: {err}");
    let events = c.kubectl_ok(&["get", "events"]).await;
    let events = rows(&events);
    assert_eq!(
        events[0],
        ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
    );
    assert_eq!(&events[1][1..4], ["Normal", "Started", "pod/solo"]);
    // describe finds the pod's events through involvedObject field selectors.
    let described = c.kubectl_ok(&["describe", "pod", "solo"]).await;
    assert!(described.contains("Started container app"), "{described}");
}

/// client-go's typed clientsets (kubectl create namespace/configmap/secret) send protobuf.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_create_generators_send_protobuf() {
    let c = Cluster::start().await;
    let out = c.kubectl_ok(&["create", "namespace", "team-a"]).await;
    assert!(out.contains("namespace/team-a created"), "{out}");
    c.kubectl_ok(&[
        "create",
        "configmap",
        "settings",
        "-n",
        "team-a",
        "--from-literal=mode=fast",
    ])
    .await;
    c.kubectl_ok(&[
        "create",
        "secret",
        "generic",
        "token",
        "-n",
        "team-a",
        "--from-literal=t=s3cr3t",
    ])
    .await;
    let data = c
        .kubectl_ok(&[
            "get",
            "cm",
            "settings",
            "-n",
            "team-a",
            "-o",
            "jsonpath={.data.mode}",
        ])
        .await;
    assert_eq!(data, "fast");
    let secret = c
        .kubectl_ok(&[
            "get",
            "secret",
            "token",
            "-n",
            "team-a",
            "-o",
            "jsonpath={.data.t} {.type}",
        ])
        .await;
    assert_eq!(secret, "czNjcjN0 Opaque");
    let ns = rows(&c.kubectl_ok(&["get", "ns", "team-a"]).await);
    assert_eq!(&ns[1][..2], ["team-a", "Active"]);
}
