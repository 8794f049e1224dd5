//! The seeds' walkthrough on a 3-host lab, end to end: preflight, init (one controller, two workers
//! joined), the sample app (Deployment of 2 with probes behind a NodePort), self-healing, scaling, a
//! rolling update, the troubleshooting cases (Pending with the scheduler's message, CrashLoopBackOff with
//! `kubectl logs --previous`, `kubectl exec`, a ConfigMap volume following an update, backup → lose a
//! namespace → restore, a Service without endpoints, a NotReady node whose pods move), and reset back to
//! clean hosts. The same walk runs on hosts without systemd and on hosts that boot systemd (`kiln lab up
//! --init systemd`), where it also checks what only systemd does: units, restarts, the snapshot timer,
//! boot through enabled units, and reset's unit cleanup.

use kiln_tests::{ok, run, stdout, Cluster, TestLab};

const HOSTS: [&str; 3] = ["host1", "host2", "host3"];

#[test]
#[ignore = "needs root: builds lab hosts (CI runs it with --include-ignored)"]
fn the_seeds_walkthrough_on_three_hosts() {
    walkthrough("t-accept", "plain");
}

#[test]
#[ignore = "needs root: builds lab hosts (CI runs it with --include-ignored)"]
fn the_seeds_walkthrough_on_systemd_hosts() {
    walkthrough("t-accept-sd", "systemd");
}

/// The kubelet unit's restart count on `host`, from systemd.
fn kubelet_restarts(c: &Cluster, host: &str) -> u32 {
    let n = c
        .lab
        .ssh_ok(host, "systemctl show -p NRestarts --value kiln-kubelet");
    n.trim()
        .parse()
        .unwrap_or_else(|_| panic!("NRestarts on {host}: {n:?}"))
}

/// What only a systemd host has: the kubelet is an active unit on every host, and systemd restarts it
/// when it is killed.
fn check_systemd_kubelet(c: &Cluster) {
    for h in HOSTS {
        assert_eq!(
            c.lab.ssh_ok(h, "systemctl is-active kiln-kubelet").trim(),
            "active",
            "kiln-kubelet on {h}"
        );
    }
    let before = kubelet_restarts(c, "host2");
    let pid = c
        .lab
        .ssh_ok("host2", "systemctl show -p MainPID --value kiln-kubelet");
    assert!(pid.trim().parse::<u32>().is_ok_and(|p| p > 0), "{pid}");
    c.lab.ssh_ok("host2", &format!("kill -9 {}", pid.trim()));
    c.wait("systemd to restart the killed kubelet", 60, || {
        let now = kubelet_restarts(c, "host2");
        let active = c
            .lab
            .ssh_ok("host2", "systemctl is-active kiln-kubelet; true");
        if now > before && active.trim() == "active" {
            Ok(())
        } else {
            Err(format!("NRestarts {before} -> {now}, {active}"))
        }
    });
}

fn walkthrough(name: &str, init: &str) {
    let systemd = init == "systemd";
    let lab = TestLab::up_with_init(name, 3, true, &[], init);
    // Short node-failure timings, as a DR drill or CI would configure them.
    let c = Cluster::on(
        lab,
        "  controllerManager:\n    nodeMonitorGracePeriod: 8s\n    podEvictionTimeout: 5s\n",
    );

    let pre = c.kiln(&["preflight"]);
    assert_eq!(pre.matches("preflight            done").count(), 3, "{pre}");
    c.kiln(&["init", "--wait-timeout", "150"]);
    let nodes = c.kubectl(&["get", "nodes", "--no-headers"]);
    assert_eq!(
        nodes.lines().filter(|l| l.contains(" Ready ")).count(),
        3,
        "{nodes}"
    );
    if systemd {
        check_systemd_kubelet(&c);
        c.kiln(&["snapshot", "schedule", "--every", "6h"]);
        assert_eq!(
            c.lab
                .ssh_ok("host1", "systemctl is-active kiln-snapshot.timer")
                .trim(),
            "active"
        );
    }

    // The sample app: 2 replicas, probes, NodePort 30080.
    // The directory cargo gives at run time: a binary from a warm target dir may have been built elsewhere.
    let dir =
        std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").into());
    let app = format!("{dir}/../examples/sample-app.yaml");
    c.kubectl(&["apply", "-f", &app]);
    c.kubectl(&["rollout", "status", "deployment/web", "--timeout=120s"]);
    let eps = c.wait("2 endpoints for web", 60, || {
        let e = c.endpoints("web");
        if e.len() == 2 {
            Ok(e)
        } else {
            Err(format!("{e:?}"))
        }
    });
    // Workloads land on the workers only (the controller is tainted).
    let wide = c.kubectl(&["get", "pods", "-l", "app=web", "-o", "wide", "--no-headers"]);
    assert!(!wide.contains("host1"), "{wide}");
    // The NodePort answers from another host, and both pods serve it.
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..20 {
        if let Some(body) = c.http("host1", "http://10.250.0.12:30080/") {
            seen.insert(body);
        }
    }
    assert_eq!(
        seen.len(),
        2,
        "NodePort did not balance over both pods: {seen:?} (endpoints {eps:?})"
    );

    // Self-healing: a deleted pod is replaced.
    let victim = c.kubectl(&[
        "get",
        "pods",
        "-l",
        "app=web",
        "-o",
        "jsonpath={.items[0].metadata.name}",
    ]);
    c.kubectl(&["delete", "pod", &victim, "--wait=false"]);
    c.wait("a replacement pod", 90, || {
        let names = c.kubectl(&[
            "get",
            "pods",
            "-l",
            "app=web",
            "--field-selector=status.phase=Running",
            "-o",
            "jsonpath={.items[*].metadata.name}",
        ]);
        let running: Vec<&str> = names.split_whitespace().filter(|n| *n != victim).collect();
        if running.len() >= 2 {
            Ok(())
        } else {
            Err(names.clone())
        }
    });

    // Scale to 3, then a rolling update that `kubectl rollout status` sees through.
    c.kubectl(&["scale", "deployment/web", "--replicas=3"]);
    c.wait("3 endpoints", 90, || {
        let e = c.endpoints("web");
        if e.len() == 3 {
            Ok(())
        } else {
            Err(format!("{e:?}"))
        }
    });
    c.kubectl(&["set", "env", "deployment/web", "VERSION=2"]);
    c.kubectl(&["rollout", "status", "deployment/web", "--timeout=150s"]);
    let history = c.kubectl(&["rollout", "history", "deployment/web"]);
    assert!(history.contains('2'), "{history}");

    // Pending: impossible requests get the scheduler's upstream message.
    let big = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"big"},"spec":{"containers":[{"name":"c","image":"10.250.0.1:5000/kiln/busybox:1","resources":{"requests":{"cpu":"64"}}}]}}"#;
    let path = c.lab.dir.join("big.json");
    std::fs::write(&path, big).unwrap();
    c.kubectl(&["apply", "-f", &path.to_string_lossy()]);
    let why = c.wait("FailedScheduling for big", 60, || {
        let d = c.kubectl(&["describe", "pod", "big"]);
        if d.contains("FailedScheduling") {
            Ok(d)
        } else {
            Err(d)
        }
    });
    assert!(
        why.contains("0/3 nodes are available: 1 node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }, 2 Insufficient cpu."),
        "{why}"
    );
    assert_eq!(
        c.kubectl(&["get", "pod", "big", "-o", "jsonpath={.status.phase}"]),
        "Pending"
    );

    // CrashLoopBackOff: a container that keeps exiting.
    c.kubectl(&[
        "run",
        "crash",
        "--image=10.250.0.1:5000/kiln/busybox:1",
        "--",
        "/bin/sh",
        "-c",
        "echo dying; exit 3",
    ]);
    c.wait("CrashLoopBackOff", 120, || {
        let r = c.kubectl(&["get", "pod", "crash", "-o", "jsonpath={.status.containerStatuses[0].state.waiting.reason}:{.status.containerStatuses[0].restartCount}"]);
        if r.starts_with("CrashLoopBackOff:") { Ok(()) } else { Err(r) }
    });

    // Its last run's output, through the apiserver and the kubelet's :10250 server.
    let previous = c.wait("logs --previous", 60, || {
        c.try_kubectl(&["logs", "crash", "--previous"])
            .filter(|o| o.contains("dying"))
            .ok_or_else(|| "no previous logs yet".to_string())
    });
    assert_eq!(previous.trim(), "dying");

    // A ConfigMap volume follows an update of the ConfigMap inside the running pod.
    c.kubectl(&[
        "create",
        "configmap",
        "greeting",
        "--from-literal=text=hello",
    ]);
    let pod = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"reader"},"spec":{"containers":[{"name":"c","image":"10.250.0.1:5000/kiln/busybox:1","command":["/bin/sh","-c","sleep 3600"],"volumeMounts":[{"name":"g","mountPath":"/etc/greeting"}]}],"volumes":[{"name":"g","configMap":{"name":"greeting"}}]}}"#;
    let mut create = c
        .lab
        .in_lab(&["kubectl", "--kubeconfig", &c.admin, "create", "-f", "-"]);
    create
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null());
    let mut child = create.spawn().unwrap();
    {
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(pod.as_bytes())
            .unwrap();
    }
    assert!(child.wait().unwrap().success());
    c.wait("the configMap file in the pod", 120, || {
        c.try_kubectl(&["exec", "reader", "--", "cat", "/etc/greeting/text"])
            .filter(|t| t == "hello")
            .ok_or_else(|| "not yet".to_string())
    });
    // kubectl exec (CRI streaming through the kubelet's :10250 server) sees the pod's own hostname.
    assert_eq!(
        c.kubectl(&["exec", "reader", "--", "cat", "/etc/hostname"]),
        "reader"
    );
    c.kubectl(&[
        "patch",
        "configmap",
        "greeting",
        "-p",
        r#"{"data":{"text":"bonjour"}}"#,
    ]);
    c.wait("the configMap update inside the pod", 90, || {
        c.try_kubectl(&["exec", "reader", "--", "cat", "/etc/greeting/text"])
            .filter(|t| t == "bonjour")
            .ok_or_else(|| "not yet".to_string())
    });

    // A Service without matching pods has no endpoints, and connections are refused, not hung.
    c.kubectl(&["create", "service", "clusterip", "nobody", "--tcp=80:80"]);
    let ip = c.kubectl(&["get", "svc", "nobody", "-o", "jsonpath={.spec.clusterIP}"]);
    assert!(c.endpoints("nobody").is_empty());
    let refused = c.wait("connection refused on the empty service", 30, || {
        let o = run(&mut c.lab.ssh(
            "host2",
            &format!("timeout 3 busybox wget -qO- http://{ip}/ 2>&1; echo rc=$?"),
        ));
        let out = stdout(&o);
        if out.contains("refused") {
            Ok(out)
        } else {
            Err(out)
        }
    });
    assert!(!refused.contains("rc=0"), "{refused}");

    // A worker loses power: it goes NotReady after the grace period and its pods move to the other worker.
    ok(&mut c.lab.kiln(&["lab", "stop", "host3"]));
    c.wait("host3 NotReady", 90, || {
        let s = c.kubectl(&[
            "get",
            "node",
            "host3",
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
        ]);
        if s == "Unknown" || s == "False" {
            Ok(())
        } else {
            Err(s)
        }
    });
    c.wait("web pods rescheduled onto host2", 150, || {
        let wide = c.kubectl(&[
            "get",
            "pods",
            "-l",
            "app=web",
            "--field-selector=status.phase=Running",
            "-o",
            "jsonpath={.items[*].spec.nodeName}",
        ]);
        let on2 = wide.split_whitespace().filter(|n| *n == "host2").count();
        if on2 >= 3 {
            Ok(())
        } else {
            Err(wide)
        }
    });
    // Power back: the host boots, kiln's services come back (rc.local on hosts without systemd, the enabled
    // units with systemd), Ready again.
    ok(&mut c.lab.kiln(&["lab", "start", "host3"]));
    c.wait("host3 Ready again", 90, || {
        let s = c.kubectl(&[
            "get",
            "node",
            "host3",
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
        ]);
        if s == "True" {
            Ok(())
        } else {
            Err(s)
        }
    });

    // Backup and restore (the seeds: "if only one thing may survive, it is etcd"): save, lose a
    // namespace, restore, and it is back with the same UID.
    c.kubectl(&["create", "namespace", "precious"]);
    c.kubectl(&[
        "-n",
        "precious",
        "create",
        "configmap",
        "data",
        "--from-literal=k=v",
    ]);
    let uid = c.kubectl(&[
        "-n",
        "precious",
        "get",
        "configmap",
        "data",
        "-o",
        "jsonpath={.metadata.uid}",
    ]);
    let bundle = c.lab.dir.join("accept.bundle");
    c.kiln(&["snapshot", "save", "-o", &bundle.to_string_lossy()]);
    c.kubectl(&[
        "delete",
        "namespace",
        "precious",
        "--wait=true",
        "--timeout=90s",
    ]);
    assert!(c.try_kubectl(&["get", "namespace", "precious"]).is_none());
    c.kiln(&["snapshot", "restore", &bundle.to_string_lossy()]);
    let back = c.wait("the namespace restored", 120, || {
        c.try_kubectl(&[
            "-n",
            "precious",
            "get",
            "configmap",
            "data",
            "-o",
            "jsonpath={.metadata.uid}",
        ])
        .ok_or_else(|| "not yet".to_string())
    });
    assert_eq!(back, uid, "the same object, not a new one");

    // Reset every host: kiln's own residue scan and an independent look agree that nothing is left.
    let out = c.kiln(&["reset"]);
    assert_eq!(out.matches("verify-clean         done").count(), 3, "{out}");
    for h in HOSTS {
        let left = c.lab.ssh_ok(
            h,
            "ls -A /etc/kiln /var/log/pods 2>/dev/null; ls -A /var/lib/kiln; ls /usr/local/bin; ip link show cni0 2>/dev/null; \
             nft list table ip kiln 2>/dev/null; ip route show proto 252; true",
        );
        assert_eq!(left, "", "left on {h}");
        if systemd {
            let units = c.lab.ssh_ok(
                h,
                "ls /etc/systemd/system /etc/systemd/system/*.wants | grep kiln; \
                 systemctl list-units --all --no-legend 'kiln*'; true",
            );
            assert_eq!(units, "", "kiln units left on {h}");
        }
    }
    c.lab.down();
}
