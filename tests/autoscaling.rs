//! Issue #25 on one 2-host lab (host1 the controller, host2 a worker), with real kubectl:
//! - the kubelet's `/stats/summary` and `/metrics/resource` (through `nodes/proxy`);
//! - metrics.k8s.io: `kubectl top nodes` and `kubectl top pods` (with `--containers`, and the
//!   control plane's static pods in kube-system) print usage;
//! - a CPU-burning Deployment (50m requested, capped at 75m so the 2-core machine is not
//!   swamped) under an HPA at 50 % scales up; once its command is patched to `sleep` it scales back
//!   down after the HPA's short down-scale window, with upstream's events.
//!
//! The lab's name is `t-autoscale` unless `KILN_TEST_LAB` names another. Timeouts are generous
//! (a busy machine), and no assertion is about timing.

use kiln_tests::{run, Cluster, TestLab};

const BUSYBOX: &str = "10.250.0.1:5000/kiln/busybox:1";

/// The burner Deployment (running `command`) and its HPA.
fn manifest(command: &str) -> String {
    format!(
        "apiVersion: apps/v1
kind: Deployment
metadata:
  name: burner
spec:
  replicas: 1
  selector:
    matchLabels: {{app: burner}}
  template:
    metadata:
      labels: {{app: burner}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: burn
        image: {BUSYBOX}
        command: [sh, -c, '{command}']
        resources:
          requests: {{cpu: 50m, memory: 16Mi}}
          limits: {{cpu: 75m, memory: 32Mi}}
---
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata:
  name: burner
spec:
  scaleTargetRef: {{apiVersion: apps/v1, kind: Deployment, name: burner}}
  minReplicas: 1
  maxReplicas: 3
  metrics:
  - type: Resource
    resource:
      name: cpu
      target: {{type: Utilization, averageUtilization: 50}}
  behavior:
    scaleDown:
      stabilizationWindowSeconds: 15
"
    )
}

fn apply(c: &Cluster, manifest: &str) {
    let file = c.lab.dir.join("autoscaling.yaml");
    std::fs::write(&file, manifest).unwrap();
    c.kubectl(&["apply", "-f", file.to_str().unwrap()]);
}

/// The numbers of a `kubectl top` table (CPU in millicores, memory in Mi), by first column.
fn top(c: &Cluster, args: &[&str]) -> Result<Vec<(String, u64, u64)>, String> {
    let mut v = vec!["top"];
    v.extend_from_slice(args);
    let out = c.try_kubectl(&v).ok_or("kubectl top failed")?;
    let rows: Vec<(String, u64, u64)> = out
        .lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            // NAME CPU [CPU%] MEMORY … / POD NAME CPU MEMORY (--containers).
            let (name, cpu, mem) = if args.contains(&"--containers") {
                (f.get(1)?, f.get(2)?, f.get(3)?)
            } else if args.contains(&"nodes") {
                (f.first()?, f.get(1)?, f.get(3)?)
            } else {
                (f.first()?, f.get(1)?, f.get(2)?)
            };
            let cpu: u64 = cpu.strip_suffix('m')?.parse().ok()?;
            let mem: u64 = mem.strip_suffix("Mi")?.parse().ok()?;
            Some((name.to_string(), cpu, mem))
        })
        .collect();
    if rows.is_empty() {
        return Err(format!("no rows yet: {out}"));
    }
    Ok(rows)
}

/// `<reason>: <message>` of every event about an HPA.
fn hpa_events(c: &Cluster) -> String {
    c.kubectl(&[
        "get",
        "events",
        "-o",
        "jsonpath={range .items[?(@.involvedObject.kind==\"HorizontalPodAutoscaler\")]}{.reason}: {.message}{\"\\n\"}{end}",
    ])
}

fn replicas(c: &Cluster) -> u32 {
    c.try_kubectl(&[
        "get",
        "hpa",
        "burner",
        "-o",
        "jsonpath={.status.currentReplicas}",
    ])
    .and_then(|s| s.parse().ok())
    .unwrap_or(0)
}

#[test]
#[ignore = "needs root: builds lab hosts (CI runs it with --include-ignored)"]
fn resource_metrics_and_horizontal_autoscaling() {
    let name = std::env::var("KILN_TEST_LAB").unwrap_or_else(|_| "t-autoscale".into());
    let lab = TestLab::up(&name, 2, true);
    let c = Cluster::on(lab, "");
    c.kiln(&["init", "--wait-timeout", "150"]);

    // The kubelet's own endpoints, as metrics-server and Prometheus read them.
    let summary = c.kubectl(&["get", "--raw", "/api/v1/nodes/host2/proxy/stats/summary"]);
    let summary: serde_json::Value = serde_json::from_str(&summary).unwrap();
    assert_eq!(summary["node"]["nodeName"], "host2");
    assert!(
        summary["node"]["cpu"]["usageCoreNanoSeconds"]
            .as_u64()
            .unwrap()
            > 0
    );
    assert!(
        summary["node"]["memory"]["workingSetBytes"]
            .as_u64()
            .unwrap()
            > 0
    );
    assert!(summary["node"]["fs"]["capacityBytes"].as_u64().unwrap() > 0);
    let resource = c.kubectl(&["get", "--raw", "/api/v1/nodes/host2/proxy/metrics/resource"]);
    for family in [
        "node_cpu_usage_seconds_total ",
        "node_memory_working_set_bytes ",
        "resource_scrape_error 0",
    ] {
        assert!(resource.contains(family), "{family} missing:\n{resource}");
    }

    // Discovery names the group, and every node gets numbers.
    let resources = c.kubectl(&["api-resources", "--api-group=metrics.k8s.io"]);
    assert!(
        resources.contains("NodeMetrics") && resources.contains("PodMetrics"),
        "{resources}"
    );
    let nodes = c.wait("kubectl top nodes", 120, || {
        let rows = top(&c, &["nodes"])?;
        if rows.len() == 2 && rows.iter().all(|(_, cpu, mem)| *cpu > 0 && *mem > 0) {
            Ok(rows)
        } else {
            Err(format!("{rows:?}"))
        }
    });
    eprintln!("top nodes: {nodes:?}");
    // The control plane's static pods are host processes; they are measured too.
    let system = c.wait("kubectl top pods -n kube-system", 120, || {
        let rows = top(&c, &["pods", "-n", "kube-system"])?;
        if rows
            .iter()
            .any(|(name, _, mem)| name.starts_with("kiln-apiserver-") && *mem > 0)
        {
            Ok(rows)
        } else {
            Err(format!("{rows:?}"))
        }
    });
    eprintln!("top pods -n kube-system: {system:?}");

    apply(&c, &manifest("while :; do :; done"));
    let pods = c.wait("kubectl top pods of the burner", 180, || {
        let rows = top(&c, &["pods", "-l", "app=burner"])?;
        if rows.iter().any(|(_, cpu, _)| *cpu > 0) {
            Ok(rows)
        } else {
            Err(format!("{rows:?}"))
        }
    });
    eprintln!("top pods: {pods:?}");
    let containers = c.wait("kubectl top pods --containers", 60, || {
        top(&c, &["pods", "-l", "app=burner", "--containers"])
    });
    assert!(
        containers.iter().all(|(name, _, _)| name == "burn"),
        "{containers:?}"
    );

    // 75m of a 50m request is 150 % against a 50 % target: the HPA scales up.
    c.wait("the HPA to scale up", 300, || match replicas(&c) {
        n if n > 1 => Ok(n),
        n => Err(format!("currentReplicas {n}")),
    });
    let events = hpa_events(&c);
    assert!(
        events.contains("SuccessfulRescale: New size: ")
            && events.contains(
                "; reason: cpu resource utilization (percentage of request) above target"
            ),
        "{events}"
    );
    let active = c.kubectl(&[
        "get",
        "hpa",
        "burner",
        "-o",
        "jsonpath={.status.conditions[?(@.type==\"ScalingActive\")].reason}",
    ]);
    assert_eq!(active, "ValidMetricFound");

    // The load stops: the new pods sleep, and the HPA comes back to its minimum. (A patch of the
    // command only: re-applying the manifest would reset spec.replicas itself.)
    c.kubectl(&[
        "patch",
        "deployment",
        "burner",
        "--type=json",
        "-p",
        r#"[{"op":"replace","path":"/spec/template/spec/containers/0/command","value":["sh","-c","sleep 100000"]}]"#,
    ]);
    c.wait("the HPA to scale down", 420, || {
        let events = hpa_events(&c);
        match replicas(&c) {
            1 if events
                .contains("SuccessfulRescale: New size: 1; reason: All metrics below target") =>
            {
                Ok(())
            }
            n => Err(format!("currentReplicas {n}, events:\n{events}")),
        }
    });
    let o = run(&mut c
        .lab
        .in_lab(&["kubectl", "--kubeconfig", &c.admin, "top", "pod", "nosuch"]));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains("podmetrics.metrics.k8s.io \"default/nosuch\" not found"),
        "{stderr}"
    );
    in_place_resize(&c);
}

/// The container's cgroup value of `v1` (cgroup v1 file) or `v2` (cgroup v2 file), read on its host.
fn cgroup_value(c: &Cluster, host: &str, container_id: &str, v1: &str, v2: &str) -> String {
    let id = container_id.trim_start_matches("containerd://");
    c.lab
        .ssh_ok(
            host,
            &format!(
                "for d in $(find /sys/fs/cgroup -type d -name {id}); do cat $d/{v1} $d/{v2} 2>/dev/null; done; true"
            ),
        )
        .trim()
        .to_string()
}

/// `pods/resize` end to end (issue #30): the real kubectl raises a running pod's cpu and memory
/// limits; the kubelet applies them through CRI UpdateContainerResources — the container's cgroup
/// on host2 changes, the container is not restarted (resizePolicy NotRequired) — and reports the
/// new resources in its status. A resize larger than the node stays PodResizePending/Infeasible.
fn in_place_resize(c: &Cluster) {
    apply(
        c,
        &format!(
            "apiVersion: v1
kind: Pod
metadata:
  name: resized
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: c
    image: {BUSYBOX}
    command: [sh, -c, 'sleep 100000']
    resizePolicy:
    - {{resourceName: cpu, restartPolicy: NotRequired}}
    - {{resourceName: memory, restartPolicy: NotRequired}}
    resources:
      requests: {{cpu: 20m, memory: 16Mi}}
      limits: {{cpu: 50m, memory: 32Mi}}
"
        ),
    );
    c.kubectl(&[
        "wait",
        "--for=condition=Ready",
        "pod/resized",
        "--timeout=120s",
    ]);
    let field =
        |path: &str| c.kubectl(&["get", "pod", "resized", "-o", &format!("jsonpath={path}")]);
    let host = field("{.spec.nodeName}");
    let id = field("{.status.containerStatuses[0].containerID}");
    let memory = || cgroup_value(c, &host, &id, "memory.limit_in_bytes", "memory.max");
    // cpu.max is "<quota> <period>" on cgroup v2.
    let quota = || {
        let v = cgroup_value(c, &host, &id, "cpu.cfs_quota_us", "cpu.max");
        v.split_whitespace().next().unwrap_or_default().to_string()
    };
    assert_eq!(memory(), "33554432");
    assert_eq!(quota(), "5000");
    assert_eq!(
        field("{.status.containerStatuses[0].resources.limits.memory}"),
        "32Mi"
    );

    c.kubectl(&[
        "patch",
        "pod",
        "resized",
        "--subresource",
        "resize",
        "--patch",
        r#"{"spec":{"containers":[{"name":"c","resources":{"limits":{"cpu":"100m","memory":"64Mi"}}}]}}"#,
    ]);
    c.wait(
        "the resize applied to the container's cgroup",
        90,
        || match (memory(), quota()) {
            (m, q) if m == "67108864" && q == "10000" => Ok(()),
            (m, q) => Err(format!("memory {m}, cpu quota {q}")),
        },
    );
    c.wait("the new resources in the pod's status", 60, || {
        let shown = field("{.status.containerStatuses[0].resources.limits}");
        if shown.contains("\"memory\":\"64Mi\"") && shown.contains("\"cpu\":\"100m\"") {
            Ok(())
        } else {
            Err(shown)
        }
    });
    assert_eq!(field("{.status.containerStatuses[0].restartCount}"), "0");
    assert_eq!(field("{.status.containerStatuses[0].containerID}"), id);
    assert_eq!(
        field("{.status.containerStatuses[0].allocatedResources.memory}"),
        "16Mi"
    );

    // More than the node has: not admitted, the container keeps what it has.
    c.kubectl(&[
        "patch",
        "pod",
        "resized",
        "--subresource",
        "resize",
        "--patch",
        r#"{"spec":{"containers":[{"name":"c","resources":{"requests":{"memory":"1000Gi"},"limits":{"memory":"2000Gi"}}}]}}"#,
    ]);
    let pending = c.wait("PodResizePending", 60, || {
        let reason = field("{.status.conditions[?(@.type==\"PodResizePending\")].reason}");
        if reason == "Infeasible" {
            Ok(field(
                "{.status.conditions[?(@.type==\"PodResizePending\")].message}",
            ))
        } else {
            Err(format!("reason {reason:?}"))
        }
    });
    assert!(
        pending.starts_with("Node didn't have enough capacity: memory, requested: "),
        "{pending}"
    );
    assert_eq!(memory(), "67108864");
    c.kubectl(&["delete", "pod", "resized", "--wait=false"]);
}
