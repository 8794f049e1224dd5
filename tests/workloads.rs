//! Issue #23's workloads on one 3-host lab (host1 the tainted controller, host2 and host3 workers)
//! with real kubectl, in three sections that share the cluster:
//! - batch: a Job of 5 completions at parallelism 2, a failing Job stopped at its backoffLimit, an
//!   Indexed Job whose pods see their index and hostname, per-index retry limits, podgc collecting a
//!   pod whose node does not exist, a TTL'd Job deleted after it finished, suspend and resume, a Job
//!   that converges when the controller manager is killed mid-run (never more completions than
//!   asked), and bad input refused with upstream's field errors;
//! - storage: a StatefulSet of 3 on the default `local-path` class (ordered start, peers by DNS, data
//!   that outlives its pod, a partitioned rolling update and its undo, PVC immutability, the claim's
//!   deletion removing PV and directory) and the seeds' "volume node affinity conflict" case, fixed by
//!   labelling the node;
//! - drain: `kubectl drain` held by a PodDisruptionBudget until the budget allows the eviction.

use kiln_tests::{run, stdout, Cluster, TestLab};

const BUSYBOX: &str = "10.250.0.1:5000/kiln/busybox:1";

fn job(name: &str, spec: &str, script: &str) -> String {
    format!(
        "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: {name}\nspec:\n{spec}  template:\n    spec:\n      \
         restartPolicy: Never\n      containers:\n      - name: c\n        image: {BUSYBOX}\n        \
         command: [sh, -c, '{script}']\n"
    )
}

fn apply(c: &Cluster, manifest: &str) -> std::process::Output {
    let file = c.lab.dir.join("manifest.yaml");
    std::fs::write(&file, manifest).unwrap();
    run(&mut c.lab.in_lab(&[
        "kubectl",
        "--kubeconfig",
        &c.admin,
        "apply",
        "-f",
        file.to_str().unwrap(),
    ]))
}

fn jsonpath(c: &Cluster, what: &str, path: &str) -> String {
    c.try_kubectl(&["get", what, "-o", &format!("jsonpath={path}")])
        .unwrap_or_default()
}

fn wait_condition(c: &Cluster, job: &str, condition: &str) {
    c.kubectl(&[
        "wait",
        &format!("--for=condition={condition}"),
        &format!("job/{job}"),
        "--timeout=180s",
    ]);
}

fn pods_of(c: &Cluster, job: &str) -> Vec<String> {
    c.kubectl(&[
        "get",
        "pods",
        "-l",
        &format!("batch.kubernetes.io/job-name={job}"),
        "-o",
        "jsonpath={range .items[*]}{.metadata.name} {.status.phase}{\"\\n\"}{end}",
    ])
    .lines()
    .map(str::to_string)
    .collect()
}

#[test]
#[ignore = "needs root: builds lab hosts (CI runs it with --include-ignored)"]
fn batch_stateful_and_storage_workloads_run_on_one_cluster() {
    let lab = TestLab::up("t-workloads", 3, true);
    let c = Cluster::on(lab, "");
    c.kiln(&["init", "--wait-timeout", "150"]);
    storage(&c);
    drain(&c);
    jobs(&c);
}

/// Jobs, TTL, podgc and their bad input.
fn jobs(c: &Cluster) {
    // A pod bound to a node that does not exist: podgc collects it while the rest runs.
    let ghost = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: ghost\nspec:\n  nodeName: ghost-node\n  \
         containers:\n  - name: c\n    image: {BUSYBOX}\n"
    );
    let o = apply(c, &ghost);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));

    // 5 completions, 2 at a time: Complete with exactly 5 succeeded pods, as `kubectl get` shows.
    let o = apply(
        c,
        &job("five", "  completions: 5\n  parallelism: 2\n", "sleep 1"),
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    wait_condition(c, "five", "complete");
    let pods = pods_of(c, "five");
    assert_eq!(pods.len(), 5, "{pods:?}");
    assert!(pods.iter().all(|p| p.ends_with(" Succeeded")), "{pods:?}");
    let row = c.kubectl(&["get", "job", "five", "--no-headers"]);
    assert!(row.contains("Complete") && row.contains("5/5"), "{row}");
    assert_eq!(
        jsonpath(
            c,
            "job/five",
            "{.status.conditions[?(@.type==\"Complete\")].reason}"
        ),
        "CompletionsReached"
    );
    ended_pods_free_their_addresses(c, &pods);

    // backoffLimit 1: two failed pods, then Failed with BackoffLimitExceeded and its event.
    apply(c, &job("failing", "  backoffLimit: 1\n", "exit 3"));
    wait_condition(c, "failing", "failed");
    assert_eq!(
        jsonpath(
            c,
            "job/failing",
            "{.status.conditions[?(@.type==\"Failed\")].reason}"
        ),
        "BackoffLimitExceeded"
    );
    assert_eq!(jsonpath(c, "job/failing", "{.status.failed}"), "2");
    let events = c.kubectl(&[
        "get",
        "events",
        "--field-selector",
        "involvedObject.name=failing",
    ]);
    assert!(
        events.contains("Job has reached the specified backoff limit"),
        "{events}"
    );

    // Indexed: each pod sees its index in JOB_COMPLETION_INDEX and is named <job>-<index>.
    apply(
        c,
        &job(
            "indexed",
            "  completions: 3\n  parallelism: 3\n  completionMode: Indexed\n",
            "echo index=$JOB_COMPLETION_INDEX host=$(hostname)",
        ),
    );
    wait_condition(c, "indexed", "complete");
    assert_eq!(
        jsonpath(c, "job/indexed", "{.status.completedIndexes}"),
        "0-2"
    );
    let mut seen = Vec::new();
    for line in pods_of(c, "indexed") {
        let pod = line.split_whitespace().next().unwrap().to_string();
        let index = jsonpath(
            c,
            &format!("pod/{pod}"),
            "{.metadata.annotations.batch\\.kubernetes\\.io/job-completion-index}",
        );
        let log = c.kubectl(&["logs", &pod]);
        assert_eq!(
            log.trim(),
            format!("index={index} host=indexed-{index}"),
            "{pod}"
        );
        seen.push(index);
    }
    seen.sort();
    assert_eq!(seen, ["0", "1", "2"]);

    // backoffLimitPerIndex 1: odd indexes fail twice each and are marked failed, even ones
    // succeed; every index runs, and the Job fails with FailedIndexes.
    apply(
        c,
        &job(
            "per-index",
            "  completions: 4\n  parallelism: 2\n  completionMode: Indexed\n  backoffLimitPerIndex: 1\n",
            "exit $((JOB_COMPLETION_INDEX % 2))",
        ),
    );
    wait_condition(c, "per-index", "failed");
    assert_eq!(
        jsonpath(
            c,
            "job/per-index",
            "{.status.conditions[?(@.type==\"Failed\")].reason}"
        ),
        "FailedIndexes"
    );
    assert_eq!(
        jsonpath(c, "job/per-index", "{.status.failedIndexes}"),
        "1,3"
    );
    assert_eq!(
        jsonpath(c, "job/per-index", "{.status.completedIndexes}"),
        "0,2"
    );
    assert_eq!(jsonpath(c, "job/per-index", "{.status.failed}"), "4");
    assert_eq!(jsonpath(c, "job/per-index", "{.status.succeeded}"), "2");

    // ttlSecondsAfterFinished: the finished Job goes, its pod with it.
    apply(c, &job("ttl", "  ttlSecondsAfterFinished: 2\n", "true"));
    c.wait("the TTL'd job deleted", 120, || {
        match c.try_kubectl(&["get", "job", "ttl", "--ignore-not-found", "-o", "name"]) {
            Some(s) if s.trim().is_empty() => Ok(()),
            other => Err(format!("{other:?}")),
        }
    });
    c.wait("the TTL'd job's pod deleted", 120, || {
        let left = pods_of(c, "ttl");
        if left.is_empty() {
            Ok(())
        } else {
            Err(format!("{left:?}"))
        }
    });

    // Suspended: the Suspended condition and no pods; resumed: it runs to completion.
    apply(
        c,
        &job("paused", "  suspend: true\n  completions: 2\n", "true"),
    );
    wait_condition(c, "paused", "suspended");
    assert!(pods_of(c, "paused").is_empty());
    c.kubectl(&[
        "patch",
        "job",
        "paused",
        "--type=merge",
        "-p",
        "{\"spec\":{\"suspend\":false}}",
    ]);
    wait_condition(c, "paused", "complete");
    assert_eq!(
        jsonpath(
            c,
            "job/paused",
            "{.status.conditions[?(@.type==\"Suspended\")].reason}"
        ),
        "JobResumed"
    );

    // The controller manager killed while a Job runs: after its restart (the kubelet restarts the
    // static pod) the Job completes with exactly its 6 completions — nothing lost, nothing doubled.
    apply(
        c,
        &job("steady", "  completions: 6\n  parallelism: 2\n", "sleep 2"),
    );
    c.wait("the first pods of job steady", 120, || {
        let n = pods_of(c, "steady").len();
        if n >= 2 {
            Ok(())
        } else {
            Err(format!("{n} pods"))
        }
    });
    c.lab.ssh_ok("host1", "kill $(pgrep -x kiln-controller)");
    wait_condition(c, "steady", "complete");
    let pods = pods_of(c, "steady");
    assert_eq!(pods.len(), 6, "{pods:?}");
    assert_eq!(jsonpath(c, "job/steady", "{.status.succeeded}"), "6");

    // podgc: the pod of the node that does not exist is gone (after its quarantine).
    c.wait(
        "podgc to delete the pod bound to a missing node",
        180,
        || match c.try_kubectl(&["get", "pod", "ghost", "--ignore-not-found", "-o", "name"]) {
            Some(s) if s.trim().is_empty() => Ok(()),
            other => Err(format!("{other:?}")),
        },
    );

    // Bad input: upstream's field errors, nothing created.
    let o = apply(c, &job("negative", "  completions: -1\n", "true"));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        err.contains("spec.completions: Invalid value: -1: must be greater than or equal to 0"),
        "{err}"
    );
    let always = job("always", "", "true").replace("restartPolicy: Never", "restartPolicy: Always");
    let o = apply(c, &always);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(
            "spec.template.spec.restartPolicy: Required value: valid values: \"OnFailure\", \"Never\""
        ),
        "{err}"
    );
    let o = run(&mut c.lab.in_lab(&[
        "kubectl",
        "--kubeconfig",
        &c.admin,
        "patch",
        "job",
        "five",
        "--type=merge",
        "-p",
        "{\"spec\":{\"completions\":9}}",
    ]));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success()
            && err.contains("spec.completions: Invalid value: 9: field is immutable"),
        "{err}{}",
        stdout(&o)
    );
}

/// Succeeded pods (`"<name> Succeeded"` rows) gave their address back on their node at once — the kubelet
/// stopped their sandboxes, so host-local no longer reserves their IPs — while their status still shows
/// the podIP, as upstream's. (Before, a node's completed Job pods kept their IPs until deleted, and past
/// the 253 of its /24 no new pod started.)
fn ended_pods_free_their_addresses(c: &Cluster, rows: &[String]) {
    for row in rows {
        let name = row.split_whitespace().next().unwrap_or_default();
        let ip = pod_field(c, name, "{.status.podIP}");
        let node = pod_field(c, name, "{.spec.nodeName}");
        assert!(
            !ip.is_empty() && !node.is_empty(),
            "{name}: ip {ip:?} node {node:?}"
        );
        let reserved = || {
            c.lab
                .ssh_ok(&node, "ls /var/lib/cni/networks/kiln 2>/dev/null || true")
                .split_whitespace()
                .any(|f| f == ip)
        };
        // The stop follows the sync that saw the exit; give the status post a few seconds' lead.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while reserved() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_secs(1));
        }
        assert!(
            !reserved(),
            "{name} Succeeded but {node} still reserves its address {ip}"
        );
    }
    // Its logs stay while the pod exists (`kubectl logs`), and go with it when it is deleted, as
    // upstream's container GC removes a deleted pod's log directory.
    let name = rows[0].split_whitespace().next().unwrap_or_default();
    let uid = pod_field(c, name, "{.metadata.uid}");
    let node = pod_field(c, name, "{.spec.nodeName}");
    let log_dirs = || c.lab.ssh_ok(&node, "ls /var/log/pods");
    assert!(log_dirs().contains(&uid), "{name}'s logs: {}", log_dirs());
    c.kubectl(&["delete", "pod", name, "--wait=true"]);
    c.wait("a deleted pod's log directory removed", 60, || {
        let dirs = log_dirs();
        if dirs.contains(&uid) {
            Err(dirs)
        } else {
            Ok(())
        }
    });
}

/// A pod's field by jsonpath, empty while the pod does not exist.
fn pod_field(c: &Cluster, pod: &str, path: &str) -> String {
    jsonpath(c, &format!("pod/{pod}"), path)
}

/// The node-local directories of the `local-path` provisioner on `host`.
fn local_path_dirs(c: &Cluster, host: &str) -> Vec<String> {
    c.lab
        .ssh_ok(host, "ls /var/lib/kiln/local-path 2>/dev/null || true")
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

const STATEFUL_WEB: &str = r#"apiVersion: v1
kind: Service
metadata:
  name: web
spec:
  clusterIP: None
  selector:
    app: web
  ports:
  - name: web
    port: 80
---
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: web
spec:
  serviceName: web
  replicas: 3
  selector:
    matchLabels:
      app: web
  template:
    metadata:
      labels:
        app: web
    spec:
      terminationGracePeriodSeconds: 5
      containers:
      - name: c
        image: BUSYBOX
        env:
        - name: REV
          value: "1"
        command:
        - sh
        - -c
        - |
          trap 'exit 0' TERM
          hostname >> /data/starts
          while true; do sleep 1; done
        volumeMounts:
        - name: data
          mountPath: /data
  volumeClaimTemplates:
  - metadata:
      name: data
    spec:
      accessModes: [ReadWriteOnce]
      resources:
        requests:
          storage: 64Mi
"#;

/// StatefulSet storage on the default class, then the seeds' node-affinity case.
fn storage(c: &Cluster) {
    // kiln init made the default class.
    let classes = c.kubectl(&["get", "storageclass", "--no-headers"]);
    assert!(
        classes.contains("local-path (default)")
            && classes.contains("kiln.io/local-path")
            && classes.contains("WaitForFirstConsumer"),
        "{classes}"
    );

    let o = apply(c, &STATEFUL_WEB.replace("BUSYBOX", BUSYBOX));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    c.kubectl(&["rollout", "status", "statefulset/web", "--timeout=240s"]);

    // OrderedReady: each pod was created only after the one before it was Ready.
    for (before, after) in [("web-0", "web-1"), ("web-1", "web-2")] {
        let ready = pod_field(
            c,
            before,
            "{.status.conditions[?(@.type==\"Ready\")].lastTransitionTime}",
        );
        let created = pod_field(c, after, "{.metadata.creationTimestamp}");
        assert!(
            created >= ready,
            "{after} created {created}, {before} Ready at {ready}"
        );
    }

    // Each claim came from the template, on the default class, bound to a PV pinned to its pod's node.
    for i in 0..3 {
        let pod = format!("web-{i}");
        let claim = format!("pvc/data-web-{i}");
        assert_eq!(jsonpath(c, &claim, "{.status.phase}"), "Bound", "{claim}");
        assert_eq!(
            jsonpath(c, &claim, "{.spec.storageClassName}"),
            "local-path"
        );
        let pv = jsonpath(c, &claim, "{.spec.volumeName}");
        let pinned = jsonpath(
            c,
            &format!("pv/{pv}"),
            "{.spec.nodeAffinity.required.nodeSelectorTerms[0].matchExpressions[0].values[0]}",
        );
        assert_eq!(pinned, pod_field(c, &pod, "{.spec.nodeName}"), "{pv}");
    }

    // Peers resolve by <pod>.<service> through cluster DNS.
    let ip1 = pod_field(c, "web-1", "{.status.podIP}");
    // busybox's nslookup does not walk the search list: the full name.
    let fqdn = "web-1.web.default.svc.cluster.local";
    let answer = c.wait("web-0 to resolve web-1.web", 60, || {
        match c.try_kubectl(&["exec", "web-0", "--", "nslookup", fqdn]) {
            Some(out) if out.contains(&ip1) => Ok(out),
            other => Err(format!("{other:?}")),
        }
    });
    assert!(
        answer.contains("web-1.web.default.svc.cluster.local"),
        "{answer}"
    );

    // Data written by web-1 outlives the pod: its successor lands on the PV's node and reads it.
    c.kubectl(&["exec", "web-1", "--", "sh", "-c", "echo kept > /data/note"]);
    let node = pod_field(c, "web-1", "{.spec.nodeName}");
    let uid = pod_field(c, "web-1", "{.metadata.uid}");
    let claim_uid = jsonpath(c, "pvc/data-web-1", "{.metadata.uid}");
    let dir = format!("pvc-{claim_uid}_default_data-web-1");
    assert!(local_path_dirs(c, &node).contains(&dir), "{dir} on {node}");
    c.kubectl(&["delete", "pod", "web-1", "--wait=true"]);
    c.wait("web-1 recreated and Running", 180, || {
        let (u, phase) = (
            pod_field(c, "web-1", "{.metadata.uid}"),
            pod_field(c, "web-1", "{.status.phase}"),
        );
        if !u.is_empty() && u != uid && phase == "Running" {
            Ok(())
        } else {
            Err(format!("uid {u} phase {phase}"))
        }
    });
    assert_eq!(pod_field(c, "web-1", "{.spec.nodeName}"), node);
    let note = c.kubectl(&["exec", "web-1", "--", "cat", "/data/note", "/data/starts"]);
    assert_eq!(
        note.lines().collect::<Vec<_>>(),
        ["kept", "web-1", "web-1"],
        "{note}"
    );

    // A rolling update with partition 2 updates web-2 only; undo brings it back.
    c.kubectl(&[
        "patch",
        "statefulset",
        "web",
        "--type=strategic",
        "-p",
        r#"{"spec":{"updateStrategy":{"rollingUpdate":{"partition":2}},"template":{"spec":{"containers":[{"name":"c","env":[{"name":"REV","value":"2"}]}]}}}}"#,
    ]);
    let rev = |pod: &str| pod_field(c, pod, "{.spec.containers[0].env[0].value}");
    c.wait("web-2 updated to REV 2", 180, || {
        match rev("web-2").as_str() {
            "2" if pod_field(c, "web-2", "{.status.phase}") == "Running" => Ok(()),
            other => Err(other.to_string()),
        }
    });
    assert_eq!((rev("web-0"), rev("web-1")), ("1".into(), "1".into()));
    c.kubectl(&["rollout", "undo", "statefulset/web"]);
    c.wait("web-2 rolled back to REV 1", 180, || {
        match rev("web-2").as_str() {
            "1" if pod_field(c, "web-2", "{.status.phase}") == "Running" => Ok(()),
            other => Err(other.to_string()),
        }
    });

    // A claim's class is immutable, with upstream's message and field path.
    let o = run(&mut c.lab.in_lab(&[
        "kubectl",
        "--kubeconfig",
        &c.admin,
        "patch",
        "pvc",
        "data-web-0",
        "--type=merge",
        "-p",
        r#"{"spec":{"storageClassName":"other"}}"#,
    ]));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success()
            && err.contains("spec: Forbidden: spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims"),
        "{err}"
    );

    // The set goes, its claims stay (Retain); deleting a claim removes its PV and the directory.
    c.kubectl(&["delete", "statefulset", "web", "--wait=true"]);
    let pv = jsonpath(c, "pvc/data-web-1", "{.spec.volumeName}");
    c.kubectl(&["delete", "pvc", "data-web-0", "data-web-1", "data-web-2"]);
    c.wait("the provisioned PV deleted", 120, || {
        match c.try_kubectl(&["get", "pv", &pv, "--ignore-not-found", "-o", "name"]) {
            Some(s) if s.trim().is_empty() => Ok(()),
            other => Err(format!("{other:?}")),
        }
    });
    assert!(
        !local_path_dirs(c, &node).contains(&dir),
        "{dir} left on {node}"
    );

    seeds_volume_node_affinity(c);
}

/// The seeds' MySQL case: a PV that needs a zone label no node has keeps its pod Pending with
/// "volume node affinity conflict"; labelling a node (not deleting the PV) lets it run there.
fn seeds_volume_node_affinity(c: &Cluster) {
    let manifest = format!(
        r#"apiVersion: v1
kind: PersistentVolume
metadata:
  name: mysql-pv
spec:
  capacity:
    storage: 1Gi
  accessModes: [ReadWriteOnce]
  storageClassName: manual
  hostPath:
    path: /var/lib/kiln-test/mysql
    type: DirectoryOrCreate
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions:
        - key: topology.kubernetes.io/zone
          operator: In
          values: [us-east-1a]
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: mysql-data
spec:
  accessModes: [ReadWriteOnce]
  storageClassName: manual
  resources:
    requests:
      storage: 1Gi
---
apiVersion: v1
kind: Pod
metadata:
  name: mysql
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: c
    image: {BUSYBOX}
    command: [sh, -c, 'echo up > /var/lib/mysql/up; exec sleep 3600']
    volumeMounts:
    - name: data
      mountPath: /var/lib/mysql
  volumes:
  - name: data
    persistentVolumeClaim:
      claimName: mysql-data
"#
    );
    let o = apply(c, &manifest);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    c.wait("mysql-data bound to mysql-pv", 60, || {
        match jsonpath(c, "pvc/mysql-data", "{.status.phase}/{.spec.volumeName}").as_str() {
            "Bound/mysql-pv" => Ok(()),
            other => Err(other.to_string()),
        }
    });
    let want = "0/3 nodes are available: 1 node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }, \
                2 node(s) had volume node affinity conflict. preemption: 0/3 nodes are available: \
                3 Preemption is not helpful for scheduling.";
    c.wait("the FailedScheduling event", 60, || {
        let d = c.kubectl(&["describe", "pod", "mysql"]);
        if d.contains(want) {
            Ok(())
        } else {
            Err(d)
        }
    });
    assert_eq!(pod_field(c, "mysql", "{.status.phase}"), "Pending");

    // The fix the seeds give: label the node.
    c.kubectl(&[
        "label",
        "node",
        "host3",
        "topology.kubernetes.io/zone=us-east-1a",
    ]);
    c.kubectl(&[
        "wait",
        "--for=condition=Ready",
        "pod/mysql",
        "--timeout=120s",
    ]);
    assert_eq!(pod_field(c, "mysql", "{.spec.nodeName}"), "host3");
    assert_eq!(
        c.lab
            .ssh_ok("host3", "cat /var/lib/kiln-test/mysql/up")
            .trim(),
        "up"
    );
    c.kubectl(&["delete", "pod", "mysql", "--wait=true"]);
    c.kubectl(&["delete", "pvc", "mysql-data"]);
    c.kubectl(&[
        "wait",
        "--for=jsonpath={.status.phase}=Released",
        "pv/mysql-pv",
        "--timeout=60s",
    ]);
    c.kubectl(&["label", "node", "host3", "topology.kubernetes.io/zone-"]);
}

/// `kubectl drain` waits on a PodDisruptionBudget: refused while the budget allows no disruption
/// (upstream's eviction message), done once it does.
fn drain(c: &Cluster) {
    let manifest = format!(
        r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: guarded
spec:
  replicas: 2
  selector:
    matchLabels:
      app: guarded
  template:
    metadata:
      labels:
        app: guarded
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: c
        image: {BUSYBOX}
        command: [sh, -c, "trap 'exit 0' TERM; while true; do sleep 1; done"]
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: guarded
spec:
  minAvailable: 2
  selector:
    matchLabels:
      app: guarded
"#
    );
    let o = apply(c, &manifest);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    c.kubectl(&["rollout", "status", "deployment/guarded", "--timeout=120s"]);
    c.wait("the budget to count 2 healthy pods", 60, || match jsonpath(
        c,
        "pdb/guarded",
        "{.status.currentHealthy}/{.status.disruptionsAllowed}",
    )
    .as_str()
    {
        "2/0" => Ok(()),
        other => Err(other.to_string()),
    });
    let node = c
        .kubectl(&[
            "get",
            "pods",
            "-l",
            "app=guarded",
            "-o",
            "jsonpath={.items[0].spec.nodeName}",
        ])
        .trim()
        .to_string();
    let drain = |timeout: &str| {
        run(&mut c.lab.in_lab(&[
            "kubectl",
            "--kubeconfig",
            &c.admin,
            "drain",
            &node,
            "--ignore-daemonsets",
            "--delete-emptydir-data",
            timeout,
        ]))
    };
    let o = drain("--timeout=12s");
    let out = format!("{}{}", stdout(&o), String::from_utf8_lossy(&o.stderr));
    assert!(!o.status.success(), "{out}");
    assert!(
        out.contains("Cannot evict pod as it would violate the pod's disruption budget."),
        "{out}"
    );
    // Both pods still run.
    assert_eq!(jsonpath(c, "pdb/guarded", "{.status.currentHealthy}"), "2");

    c.kubectl(&[
        "patch",
        "pdb",
        "guarded",
        "--type=merge",
        "-p",
        r#"{"spec":{"minAvailable":1}}"#,
    ]);
    c.wait("the budget to allow one disruption", 60, || match jsonpath(
        c,
        "pdb/guarded",
        "{.status.disruptionsAllowed}",
    )
    .as_str()
    {
        "1" => Ok(()),
        other => Err(other.to_string()),
    });
    let o = drain("--timeout=120s");
    let out = format!("{}{}", stdout(&o), String::from_utf8_lossy(&o.stderr));
    assert!(o.status.success(), "{out}");
    assert!(out.contains(&format!("node/{node} drained")), "{out}");
    c.kubectl(&["uncordon", &node]);
    c.kubectl(&["delete", "deployment", "guarded"]);
    c.kubectl(&["delete", "pdb", "guarded"]);
}
