//! What the scheduler, controllers and kubelets need: deployments/replicasets/daemonsets with scale,
//! services with ClusterIP/NodePort allocation (kept in the store), endpoints, endpointslices,
//! pods/binding, pods/eviction, namespace deletion — driven by the real kubectl and kube-rs.

use clap::Parser;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kiln_testkit::{rows, Cluster};
use kube::api::{Api, EvictParams, PostParams};
use serde_json::{json, Value};

async fn get_json(c: &Cluster, args: &[&str]) -> Value {
    let mut full = args.to_vec();
    full.extend(["-o", "json"]);
    serde_json::from_str(&c.kubectl_ok(&full).await).expect("kubectl -o json")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_deployments_scale_and_expose() {
    let c = Cluster::start().await;

    // The kubernetes service exists with the first IP of the range and this apiserver as endpoint.
    let svc = rows(&c.kubectl_ok(&["get", "svc"]).await);
    assert_eq!(
        svc[0],
        [
            "NAME",
            "TYPE",
            "CLUSTER-IP",
            "EXTERNAL-IP",
            "PORT(S)",
            "AGE"
        ]
    );
    assert_eq!(
        &svc[1][..5],
        ["kubernetes", "ClusterIP", "10.96.0.1", "<none>", "443/TCP"]
    );
    let ep = rows(&c.kubectl_ok(&["get", "endpoints", "kubernetes"]).await);
    assert_eq!(ep[0], ["NAME", "ENDPOINTS", "AGE"]);
    let port = c.server.local_addr().port();
    assert_eq!(ep[1][1], format!("127.0.0.1:{port}"));

    // kubectl create deployment sends apps/v1 protobuf; defaults are upstream's.
    let out = c
        .kubectl_ok(&[
            "create",
            "deployment",
            "web",
            "--image=registry.local/web:1.0",
            "--replicas=2",
            "--port=8080",
        ])
        .await;
    assert!(out.contains("deployment.apps/web created"), "{out}");
    let d = get_json(&c, &["get", "deployment", "web"]).await;
    assert_eq!(d["metadata"]["generation"], 1);
    assert_eq!(d["spec"]["replicas"], 2);
    assert_eq!(d["spec"]["revisionHistoryLimit"], 10);
    assert_eq!(d["spec"]["progressDeadlineSeconds"], 600);
    assert_eq!(
        d["spec"]["strategy"],
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}})
    );
    let tpl = &d["spec"]["template"]["spec"];
    assert_eq!(tpl["restartPolicy"], "Always");
    assert_eq!(tpl["terminationGracePeriodSeconds"], 30);
    assert_eq!(tpl["dnsPolicy"], "ClusterFirst");
    assert_eq!(tpl["containers"][0]["imagePullPolicy"], "IfNotPresent");

    let deps = rows(&c.kubectl_ok(&["get", "deployments"]).await);
    assert_eq!(deps[0], ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"]);
    assert_eq!(&deps[1][..4], ["web", "0/2", "0", "0"]);

    // Status written through /status (as the deployment controller will) shows in the columns.
    c.kubectl_ok(&[
        "patch",
        "deployment",
        "web",
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status":{"replicas":2,"readyReplicas":2,"updatedReplicas":2,"availableReplicas":2,"observedGeneration":1}}"#,
    ])
    .await;
    let deps = rows(&c.kubectl_ok(&["get", "deploy", "web"]).await);
    assert_eq!(&deps[1][..4], ["web", "2/2", "2", "2"]);

    // kubectl scale goes through deployments/scale; generation follows the spec change.
    let out = c
        .kubectl_ok(&["scale", "deployment", "web", "--replicas=3"])
        .await;
    assert!(out.contains("deployment.apps/web scaled"), "{out}");
    let d = get_json(&c, &["get", "deployment", "web"]).await;
    assert_eq!(d["spec"]["replicas"], 3);
    assert_eq!(d["metadata"]["generation"], 2);
    assert_eq!(d["status"]["readyReplicas"], 2, "scale keeps status");

    // kube-rs reads the Scale view with its selector.
    let client = c.admin().await;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let scale = deployments.get_scale("web").await.unwrap();
    assert_eq!(scale.spec.unwrap().replicas, Some(3));
    assert_eq!(scale.status.unwrap().selector.as_deref(), Some("app=web"));

    // kubectl expose: a NodePort service gets a ClusterIP from the range and a NodePort.
    let out = c
        .kubectl_ok(&[
            "expose",
            "deployment",
            "web",
            "--port=80",
            "--target-port=8080",
            "--type=NodePort",
        ])
        .await;
    assert!(out.contains("service/web exposed"), "{out}");
    let s = get_json(&c, &["get", "svc", "web"]).await;
    let ip = s["spec"]["clusterIP"].as_str().unwrap().to_string();
    assert!(ip.starts_with("10.") && ip != "10.96.0.1", "{ip}");
    assert_eq!(s["spec"]["clusterIPs"], json!([ip]));
    let node_port = s["spec"]["ports"][0]["nodePort"].as_i64().unwrap();
    assert!((30000..=32767).contains(&node_port), "{node_port}");
    let svc = rows(&c.kubectl_ok(&["get", "svc", "web"]).await);
    assert_eq!(svc[1][1], "NodePort");
    assert_eq!(svc[1][4], format!("80:{node_port}/TCP"));

    // The allocation is a store key owned by the service.
    let mut etcd = c.etcd.client().await;
    let got = etcd
        .get(format!("/registry/kiln/serviceips/{ip}"), None)
        .await
        .unwrap();
    assert_eq!(got.kvs()[0].value(), b"default/web");

    // Taken IPs and ports are 422 with upstream's field errors.
    let dir = c.dir.path();
    let taken_ip = dir.join("taken-ip.yaml");
    std::fs::write(
        &taken_ip,
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: dup\nspec:\n  clusterIP: 10.96.0.1\n  ports:\n  - port: 80\n",
    )
    .unwrap();
    let (ok, _, err) = c
        .kubectl(
            &c.admin_kubeconfig,
            &["create", "-f", taken_ip.to_str().unwrap()],
        )
        .await;
    assert!(!ok);
    assert!(
        err.contains("spec.clusterIPs: Invalid value: []string{\"10.96.0.1\"}: failed to allocate IP 10.96.0.1: provided IP is already allocated"),
        "{err}"
    );
    let taken_port = dir.join("taken-port.yaml");
    std::fs::write(
        &taken_port,
        format!("apiVersion: v1\nkind: Service\nmetadata:\n  name: dup2\nspec:\n  type: NodePort\n  ports:\n  - port: 80\n    nodePort: {node_port}\n"),
    )
    .unwrap();
    let (ok, _, err) = c
        .kubectl(
            &c.admin_kubeconfig,
            &["create", "-f", taken_port.to_str().unwrap()],
        )
        .await;
    assert!(!ok);
    assert!(
        err.contains(&format!(
            "spec.ports[0].nodePort: Invalid value: {node_port}: provided port is already allocated"
        )),
        "{err}"
    );
    // Nothing partial: the failed service holds no IP.
    let (ok, _, _) = c
        .kubectl(&c.admin_kubeconfig, &["get", "svc", "dup2"])
        .await;
    assert!(!ok);
    let bad_range = dir.join("bad-range.yaml");
    std::fs::write(
        &bad_range,
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: far\nspec:\n  type: NodePort\n  ports:\n  - port: 80\n    nodePort: 80\n",
    )
    .unwrap();
    let (ok, _, err) = c
        .kubectl(
            &c.admin_kubeconfig,
            &["create", "-f", bad_range.to_str().unwrap()],
        )
        .await;
    assert!(!ok);
    assert!(
        err.contains(
            "provided port is not in the valid range. The range of valid ports is 30000-32767"
        ),
        "{err}"
    );

    // A second apiserver on the same store (or this one after a restart) sees the allocation.
    let args = vec![
        "kiln-apiserver".to_string(),
        format!("--etcd-servers={}", c.etcd.endpoint),
        "--bind-address=127.0.0.1".into(),
        "--secure-port=0".into(),
        format!("--tls-cert-file={}", dir.join("apiserver.crt").display()),
        format!(
            "--tls-private-key-file={}",
            dir.join("apiserver.key").display()
        ),
        format!("--client-ca-file={}", dir.join("ca.crt").display()),
    ];
    let second = kiln_apiserver::start(kiln_apiserver::Options::parse_from(args))
        .await
        .unwrap();
    let url2 = format!("https://{}", second.local_addr());
    let admin_pair = c.pki.client("kubernetes-admin", &["system:masters"]);
    let kc2 = dir.join("second.conf");
    std::fs::write(
        &kc2,
        kiln_testkit::kubeconfig(&url2, &c.pki.ca.cert, &admin_pair, "kubernetes-admin"),
    )
    .unwrap();
    let same_ip = dir.join("same-ip.yaml");
    std::fs::write(
        &same_ip,
        format!("apiVersion: v1\nkind: Service\nmetadata:\n  name: again\nspec:\n  clusterIP: {ip}\n  ports:\n  - port: 80\n"),
    )
    .unwrap();
    let (ok, _, err) = c
        .kubectl(&kc2, &["create", "-f", same_ip.to_str().unwrap()])
        .await;
    assert!(
        !ok && err.contains("provided IP is already allocated"),
        "{err}"
    );
    second.shutdown().await;

    // Deleting the service frees its IP and port.
    c.kubectl_ok(&["delete", "svc", "web"]).await;
    let got = etcd
        .get(format!("/registry/kiln/serviceips/{ip}"), None)
        .await
        .unwrap();
    assert!(got.kvs().is_empty());
    let out = c
        .kubectl_ok(&["create", "-f", same_ip.to_str().unwrap()])
        .await;
    assert!(out.contains("service/again created"), "{out}");
}

const MORE: &str = "apiVersion: apps/v1
kind: ReplicaSet
metadata:
  name: web-abc
  ownerReferences:
  - apiVersion: apps/v1
    kind: Deployment
    name: web
    uid: 2b1d2a7e-0000-4000-8000-000000000001
    controller: true
    blockOwnerDeletion: true
spec:
  replicas: 2
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: web
        image: registry.local/web:1.0
---
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: agent
spec:
  selector:
    matchLabels: {app: agent}
  template:
    metadata:
      labels: {app: agent}
    spec:
      containers:
      - name: agent
        image: registry.local/agent:latest
---
apiVersion: v1
kind: Endpoints
metadata:
  name: web
subsets:
- addresses:
  - ip: 10.244.0.5
  - ip: 10.244.1.7
  ports:
  - port: 8080
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-x1
  labels:
    kubernetes.io/service-name: web
addressType: IPv4
ports:
- port: 8080
  protocol: TCP
endpoints:
- addresses: [10.244.0.5]
  conditions: {ready: true}
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_replicasets_daemonsets_endpoints() {
    let c = Cluster::start().await;
    let file = c.dir.path().join("more.yaml");
    std::fs::write(&file, MORE).unwrap();
    let out = c.kubectl_ok(&["apply", "-f", file.to_str().unwrap()]).await;
    for want in [
        "replicaset.apps/web-abc created",
        "daemonset.apps/agent created",
        "endpoints/web created",
        "endpointslice.discovery.k8s.io/web-x1 created",
    ] {
        assert!(out.contains(want), "{want}: {out}");
    }
    let rs = rows(&c.kubectl_ok(&["get", "rs"]).await);
    assert_eq!(rs[0], ["NAME", "DESIRED", "CURRENT", "READY", "AGE"]);
    assert_eq!(&rs[1][..4], ["web-abc", "2", "0", "0"]);
    let rsj = get_json(&c, &["get", "rs", "web-abc"]).await;
    assert_eq!(rsj["metadata"]["ownerReferences"][0]["kind"], "Deployment");
    assert_eq!(rsj["metadata"]["ownerReferences"][0]["controller"], true);

    let out = c
        .kubectl_ok(&["scale", "rs", "web-abc", "--replicas=0"])
        .await;
    assert!(out.contains("replicaset.apps/web-abc scaled"), "{out}");

    let ds = rows(&c.kubectl_ok(&["get", "ds"]).await);
    assert_eq!(
        ds[0],
        [
            "NAME",
            "DESIRED",
            "CURRENT",
            "READY",
            "UP-TO-DATE",
            "AVAILABLE",
            "NODE",
            "SELECTOR",
            "AGE"
        ]
    );
    let dsj = get_json(&c, &["get", "ds", "agent"]).await;
    assert_eq!(
        dsj["spec"]["updateStrategy"],
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}})
    );
    assert_eq!(
        dsj["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"],
        "Always"
    );

    let ep = rows(&c.kubectl_ok(&["get", "ep", "web"]).await);
    assert_eq!(ep[1][1], "10.244.0.5:8080,10.244.1.7:8080");
    let slices = rows(
        &c.kubectl_ok(&[
            "get",
            "endpointslices",
            "-l",
            "kubernetes.io/service-name=web",
        ])
        .await,
    );
    assert_eq!(
        slices[0],
        ["NAME", "ADDRESSTYPE", "PORTS", "ENDPOINTS", "AGE"]
    );
    assert_eq!(&slices[1][..4], ["web-x1", "IPv4", "8080", "10.244.0.5"]);

    // A selector that does not match the template is 422.
    let bad = c.dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        MORE.split("---")
            .next()
            .unwrap()
            .replace("name: web-abc", "name: bad")
            .replace(
                "labels: {app: web}\n    spec",
                "labels: {app: other}\n    spec",
            ),
    )
    .unwrap();
    let (ok, _, err) = c
        .kubectl(
            &c.admin_kubeconfig,
            &["create", "-f", bad.to_str().unwrap()],
        )
        .await;
    assert!(!ok);
    assert!(
        err.contains("spec.template.metadata.labels: Invalid value: map[string]string{\"app\":\"other\"}: `selector` does not match template `labels`"),
        "{err}"
    );
}

fn pod(name: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "image": "registry.local/app:1"}]},
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binding_and_eviction() {
    let c = Cluster::start().await;
    let client = c.admin().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.create(&PostParams::default(), &pod("p1"))
        .await
        .unwrap();

    let binding = json!({"apiVersion": "v1", "kind": "Binding",
        "metadata": {"name": "p1"}, "target": {"apiVersion": "v1", "kind": "Node", "name": "n1"}});
    let status: Value = pods
        .create_subresource("binding", "p1", &PostParams::default(), &binding)
        .await
        .unwrap();
    assert_eq!(status["status"], "Success");
    let p = pods.get("p1").await.unwrap();
    assert_eq!(p.spec.as_ref().unwrap().node_name.as_deref(), Some("n1"));
    let conditions = p.status.unwrap().conditions.unwrap();
    assert!(conditions
        .iter()
        .any(|c| c.type_ == "PodScheduled" && c.status == "True"));

    // A second binding is a conflict.
    let err = pods
        .create_subresource::<_, Value>("binding", "p1", &PostParams::default(), &binding)
        .await
        .unwrap_err();
    match err {
        kube::Error::Api(s) => {
            assert_eq!(s.code, 409);
            assert!(
                s.message.contains("already assigned to node \"n1\""),
                "{}",
                s.message
            );
        }
        other => panic!("unexpected {other:?}"),
    }

    // Eviction of a bound pod is a graceful delete (the kubelet confirms it).
    pods.evict("p1", &EvictParams::default()).await.unwrap();
    let p = pods.get("p1").await.unwrap();
    assert!(p.metadata.deletion_timestamp.is_some());
    assert_eq!(p.metadata.deletion_grace_period_seconds, Some(30));

    // An unbound pod goes at once.
    pods.create(&PostParams::default(), &pod("p2"))
        .await
        .unwrap();
    pods.evict("p2", &EvictParams::default()).await.unwrap();
    assert!(pods.get_opt("p2").await.unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_delete_namespace_deletes_its_content() {
    let c = Cluster::start().await;
    c.kubectl_ok(&["create", "namespace", "x"]).await;
    c.kubectl_ok(&[
        "-n",
        "x",
        "create",
        "configmap",
        "cfg",
        "--from-literal=a=b",
    ])
    .await;
    c.kubectl_ok(&[
        "-n",
        "x",
        "create",
        "deployment",
        "d",
        "--image=registry.local/d:1",
    ])
    .await;
    c.kubectl_ok(&[
        "-n",
        "x",
        "create",
        "service",
        "clusterip",
        "s",
        "--tcp=80:80",
    ])
    .await;
    let s = get_json(&c, &["-n", "x", "get", "svc", "s"]).await;
    let ip = s["spec"]["clusterIP"].as_str().unwrap().to_string();

    // kubectl waits until the namespace is gone.
    let out = c.kubectl_ok(&["delete", "namespace", "x"]).await;
    assert!(out.contains("namespace \"x\" deleted"), "{out}");
    let (ok, _, err) = c.kubectl(&c.admin_kubeconfig, &["get", "ns", "x"]).await;
    assert!(!ok && err.contains("not found"), "{err}");
    let mut etcd = c.etcd.client().await;
    for prefix in [
        "/registry/configmaps/x/".to_string(),
        "/registry/deployments/x/".to_string(),
        "/registry/services/x/".to_string(),
        format!("/registry/kiln/serviceips/{ip}"),
    ] {
        let got = etcd
            .get(
                prefix.clone(),
                Some(etcd_client::GetOptions::new().with_prefix()),
            )
            .await
            .unwrap();
        assert!(got.kvs().is_empty(), "{prefix} left behind");
    }
}

/// `pods/resize` (InPlacePodVerticalScaling): the real kubectl's `patch --subresource resize`
/// changes a container's resources and nothing else, with upstream's validation texts; the main
/// resource still refuses the change, and RBAC names the subresource.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_patch_subresource_resize() {
    let c = Cluster::start().await;
    let client = c.admin().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let p: Pod = serde_json::from_value(json!({
        "metadata": {"name": "r"},
        "spec": {"containers": [{"name": "c", "image": "registry.local/app:1",
            "resources": {"requests": {"cpu": "100m", "memory": "32Mi"},
                          "limits": {"cpu": "200m", "memory": "64Mi"}}}]},
    }))
    .unwrap();
    pods.create(&PostParams::default(), &p).await.unwrap();

    // Discovery lists it with upstream's verbs.
    let v1: Value =
        serde_json::from_str(&c.kubectl_ok(&["get", "--raw", "/api/v1"]).await).unwrap();
    let resize = v1["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "pods/resize")
        .expect("pods/resize in discovery")
        .clone();
    assert_eq!(resize["kind"], "Pod");
    assert_eq!(resize["verbs"], json!(["get", "patch", "update"]));

    let patch = |body: &'static str| {
        let c = &c;
        async move {
            c.kubectl(
                &c.admin_kubeconfig,
                &[
                    "patch",
                    "pod",
                    "r",
                    "--subresource",
                    "resize",
                    "--patch",
                    body,
                ],
            )
            .await
        }
    };
    // A raise goes through; the image in the same patch is dropped, as upstream's strategy does.
    let (ok, out, err) = patch(
        r#"{"spec":{"containers":[{"name":"c","image":"other:2","resources":{"limits":{"cpu":"400m","memory":"128Mi"}}}]}}"#,
    )
    .await;
    assert!(ok, "{out}{err}");
    let got = get_json(&c, &["get", "pod", "r"]).await;
    let ctr = &got["spec"]["containers"][0];
    assert_eq!(
        ctr["resources"]["limits"],
        json!({"cpu": "400m", "memory": "128Mi"})
    );
    assert_eq!(
        ctr["resources"]["requests"],
        json!({"cpu": "100m", "memory": "32Mi"})
    );
    assert_eq!(ctr["image"], "registry.local/app:1");
    assert_eq!(got["status"]["qosClass"], "Burstable");
    let read = get_json(&c, &["get", "pod", "r", "--subresource", "resize"]).await;
    assert_eq!(
        read["spec"]["containers"][0]["resources"]["limits"]["memory"],
        "128Mi"
    );

    // Upstream's refusals.
    let (ok, _, err) =
        patch(r#"{"spec":{"containers":[{"name":"c","resources":{"limits":{"memory":"96Mi"}}}]}}"#)
            .await;
    assert!(!ok);
    assert!(
        err.contains("spec.containers[0].resources.limits[memory]: Forbidden: memory limits cannot be decreased unless resizePolicy is RestartContainer"),
        "{err}"
    );
    let (ok, _, err) = patch(
        r#"{"spec":{"containers":[{"name":"c","resources":{"requests":{"cpu":"400m","memory":"128Mi"}}}]}}"#,
    )
    .await;
    assert!(!ok);
    assert!(
        err.contains("Pod QOS Class may not change as a result of resizing"),
        "{err}"
    );
    let (ok, _, err) =
        patch(r#"{"spec":{"containers":[{"name":"c","resources":{"limits":{"cpu":null}}}]}}"#)
            .await;
    assert!(!ok);
    assert!(
        err.contains("spec.containers[0].resources.limits[cpu]: Forbidden: resource limits cannot be removed"),
        "{err}"
    );
    // With RestartContainer for memory, the limit may go down.
    let (ok, out, err) = patch(
        r#"{"spec":{"containers":[{"name":"c","resizePolicy":[{"resourceName":"memory","restartPolicy":"RestartContainer"}],"resources":{"limits":{"memory":"96Mi"}}}]}}"#,
    )
    .await;
    assert!(ok, "{out}{err}");

    // The main resource does not take resources.
    let (ok, _, err) = c
        .kubectl(
            &c.admin_kubeconfig,
            &[
                "patch",
                "pod",
                "r",
                "--patch",
                r#"{"spec":{"containers":[{"name":"c","resources":{"limits":{"cpu":"500m"}}}]}}"#,
            ],
        )
        .await;
    assert!(!ok);
    assert!(
        err.contains("pod updates may not change fields other than"),
        "{err}"
    );

    // RBAC: patching pods is not patching pods/resize.
    let eve = c.kubeconfig_for("eve", &[]);
    c.kubectl_ok(&[
        "create",
        "role",
        "pod-patch",
        "--verb=get,patch",
        "--resource=pods",
    ])
    .await;
    c.kubectl_ok(&[
        "create",
        "rolebinding",
        "eve-patch",
        "--role=pod-patch",
        "--user=eve",
    ])
    .await;
    let body = r#"{"spec":{"containers":[{"name":"c","resources":{"limits":{"cpu":"300m"}}}]}}"#;
    let args = [
        "patch",
        "pod",
        "r",
        "--subresource",
        "resize",
        "--patch",
        body,
    ];
    let (ok, _, err) = c.kubectl(&eve, &args).await;
    // (kubectl reads the subresource before it patches it.)
    assert!(
        !ok && err.contains("resource \"pods/resize\" in API group \"\""),
        "{err}"
    );
    c.kubectl_ok(&[
        "create",
        "role",
        "pod-resize",
        "--verb=get,patch",
        "--resource=pods/resize",
    ])
    .await;
    c.kubectl_ok(&[
        "create",
        "rolebinding",
        "eve-resize",
        "--role=pod-resize",
        "--user=eve",
    ])
    .await;
    let (ok, out, err) = c.kubectl(&eve, &args).await;
    assert!(ok, "{out}{err}");
    let got = pods.get("r").await.unwrap();
    let limits = got.spec.unwrap().containers[0]
        .resources
        .clone()
        .unwrap()
        .limits
        .unwrap();
    assert_eq!(limits["cpu"].0, "300m");
    assert_eq!(limits["memory"].0, "96Mi");
}
