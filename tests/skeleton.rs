//! The walking skeleton, end to end on a real lab host: `kiln init` over SSH gives a Ready node whose
//! control plane (kiln-store, kiln-apiserver as static pods of kiln-kubelet) real kubectl can see, and
//! `kiln reset` leaves nothing of kiln behind.

use kiln_tests::{bin, ok, run, TestLab};

#[test]
#[ignore = "needs root: builds lab hosts (CI runs it with --include-ignored)"]
fn init_gives_a_ready_node_and_reset_leaves_nothing() {
    let lab = TestLab::up("t-skel", 1, false);
    let cluster = lab.dir.join("cluster.yaml");
    let cluster = cluster.to_string_lossy();
    let kiln = bin("kiln");
    let kiln = kiln.to_string_lossy();
    let admin = lab.dir.join("t-skel.kiln/admin.conf");
    let admin = admin.to_string_lossy();
    let kubectl = |args: &[&str]| {
        let mut v = vec!["kubectl", "--kubeconfig", &admin, "--request-timeout=10s"];
        v.extend_from_slice(args);
        ok(&mut lab.in_lab(&v))
    };

    // Preflight: a port the store needs is taken, so init stops before touching the host, naming both.
    lab.ssh_ok("host1", "busybox httpd -p 127.0.0.1:2379 -h /tmp");
    let refused = run(&mut lab.in_lab(&[&kiln, "init", "-f", &cluster]));
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success());
    assert!(
        err.contains("preflight on host1") && err.contains("Port-2379"),
        "{err}"
    );
    assert_eq!(
        lab.ssh_ok(
            "host1",
            "find /etc/kiln /usr/local/bin -mindepth 1 2>/dev/null; true"
        ),
        ""
    );
    lab.ssh_ok("host1", "pkill -f 'httpd -p 127.0.0.1:2379'");

    let out = ok(&mut lab.in_lab(&[&kiln, "init", "-f", &cluster, "--wait-timeout", "120"]));
    assert!(out.contains("wait-node-ready"), "{out}");

    // Real kubectl sees the node Ready and the control plane's mirror pods Running.
    let nodes: serde_json::Value =
        serde_json::from_str(&kubectl(&["get", "nodes", "-o", "json"])).unwrap();
    let items = nodes["items"].as_array().unwrap();
    assert_eq!(items.len(), 1);
    assert_eq!(items[0]["metadata"]["name"], "host1");
    let ready = items[0]["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["type"] == "Ready" && c["status"] == "True");
    assert!(ready, "{}", items[0]["status"]);
    let table = kubectl(&["get", "nodes"]);
    assert!(
        table.lines().nth(1).unwrap().split_whitespace().nth(1) == Some("Ready"),
        "{table}"
    );

    let pods = kubectl(&["get", "pods", "-A"]);
    for name in [
        "kiln-store-host1",
        "kiln-apiserver-host1",
        "kiln-proxy-host1",
    ] {
        let line = pods
            .lines()
            .find(|l| l.contains(name))
            .unwrap_or_else(|| panic!("{name} missing:\n{pods}"));
        assert!(line.contains("Running") && line.contains("1/1"), "{pods}");
        assert!(line.starts_with("kube-system"), "{pods}");
    }

    // Bootstrap tokens: a created token authenticates as system:bootstrap:<id>; deleted, it no longer does.
    let token = ok(&mut lab.in_lab(&[&kiln, "token", "create", "-f", &cluster, "--ttl", "1h"]));
    let listed = ok(&mut lab.in_lab(&[&kiln, "token", "list", "-f", &cluster]));
    assert!(listed.contains(&token), "{listed}");
    let ca = lab.dir.join("t-skel.kiln/pki/host1/ca.crt");
    let ca = ca.to_string_lossy();
    let whoami = |t: &str| {
        run(&mut lab.in_lab(&[
            "kubectl",
            "--server",
            "https://10.250.0.11:6443",
            "--certificate-authority",
            &ca,
            "--token",
            t,
            "auth",
            "whoami",
        ]))
    };
    let me = whoami(&token);
    let id = token.split('.').next().unwrap();
    assert!(
        String::from_utf8_lossy(&me.stdout).contains(&format!("system:bootstrap:{id}")),
        "{me:?}"
    );
    ok(&mut lab.in_lab(&[&kiln, "token", "delete", "-f", &cluster, &token]));
    assert!(!whoami(&token).status.success());

    // `kiln status`: the node Ready, the control plane's pods Ready, the store healthy.
    let status = ok(&mut lab.in_lab(&[&kiln, "status", "-f", &cluster]));
    assert!(status.contains("host1      Ready"), "{status}");
    assert!(status.contains("store host1      healthy"), "{status}");
    assert!(!status.contains(" no "), "{status}");
    // One build everywhere: the server's gitVersion is this checkout's kiln, and the node runs it too.
    let server = format!("server  {}", kiln_common::version::GIT_VERSION);
    assert!(status.contains(&server), "{status}");
    assert!(!status.contains("not the server's build"), "{status}");

    // `kiln kubeconfig` prints the same admin kubeconfig.
    let kc = ok(&mut lab.in_lab(&[&kiln, "kubeconfig", "-f", &cluster]));
    assert!(kc.contains("client-certificate-data"), "{kc}");

    // A second init converges: nothing to redo, the node stays Ready.
    let again = ok(&mut lab.in_lab(&[&kiln, "init", "-f", &cluster, "--wait-timeout", "60"]));
    assert!(again.contains("certs                skipped"), "{again}");
    assert!(again.contains("control-plane        skipped"), "{again}");

    // Reset: kiln's residue scan passes, and an independent look over SSH agrees.
    let out = ok(&mut lab.in_lab(&[&kiln, "reset", "-f", &cluster]));
    assert!(out.contains("verify-clean         done"), "{out}");
    let left = lab.ssh_ok(
        "host1",
        "ls -A /etc/kiln /run/kiln /var/log/pods /var/log/kiln 2>/dev/null; ls -A /var/lib/kiln; ls /usr/local/bin; \
         for p in /proc/[0-9]*; do readlink $p/exe; done 2>/dev/null | grep '^/usr/local/bin/kiln-'; true",
    );
    assert_eq!(left, "", "left on host1 after reset");
    // The API is gone too.
    let gone = run(&mut lab.in_lab(&[
        "kubectl",
        "--kubeconfig",
        &admin,
        "--request-timeout=3s",
        "get",
        "nodes",
    ]));
    assert!(!gone.status.success());
    lab.down();
}

#[test]
#[ignore = "needs root: builds lab hosts (CI runs it with --include-ignored)"]
fn init_joins_the_workers_and_join_converges() {
    // Not join.rs's "t-join": test.sh runs two lab test executables at once.
    let lab = TestLab::up("t-skel-join", 3, false);
    let cluster = lab.dir.join("cluster.yaml");
    let cluster = cluster.to_string_lossy();
    let kiln = bin("kiln");
    let kiln = kiln.to_string_lossy();
    let admin = lab.dir.join("t-skel-join.kiln/admin.conf");
    let admin = admin.to_string_lossy();

    ok(&mut lab.in_lab(&[&kiln, "init", "-f", &cluster, "--wait-timeout", "120"]));
    let nodes = ok(&mut lab.in_lab(&[
        "kubectl",
        "--kubeconfig",
        &admin,
        "get",
        "nodes",
        "--no-headers",
    ]));
    let ready: Vec<&str> = nodes
        .lines()
        .filter(|l| l.split_whitespace().nth(1) == Some("Ready"))
        .map(|l| l.split_whitespace().next().unwrap())
        .collect();
    assert_eq!(ready, vec!["host1", "host2", "host3"], "{nodes}");
    // The controller is labelled and tainted like kubeadm's; workers are not.
    let roles: Vec<&str> = nodes
        .lines()
        .map(|l| l.split_whitespace().nth(2).unwrap())
        .collect();
    assert_eq!(roles, vec!["control-plane", "<none>", "<none>"], "{nodes}");
    let taints = ok(&mut lab.in_lab(&[
        "kubectl",
        "--kubeconfig",
        &admin,
        "get",
        "node",
        "host1",
        "-o",
        "jsonpath={.spec.taints[*].key}:{.spec.taints[*].effect}",
    ]));
    assert_eq!(taints, "node-role.kubernetes.io/control-plane:NoSchedule");
    let cfg = ok(&mut lab.in_lab(&[
        "kubectl",
        "--kubeconfig",
        &admin,
        "-n",
        "kube-system",
        "get",
        "configmap",
        "kiln-config",
        "-o",
        "jsonpath={.data.cluster\\.yaml}",
    ]));
    assert_eq!(
        cfg,
        std::fs::read_to_string(lab.dir.join("cluster.yaml"))
            .unwrap()
            .trim_end()
    );
    // Workers run only the node components (the kubelet, the proxy and the node's cluster DNS, a static pod
    // on every host): no control-plane binary or key was pushed to them.
    let worker = lab.ssh_ok("host2", "ls /usr/local/bin; ls /etc/kiln/pki");
    assert_eq!(
        worker.split_whitespace().collect::<Vec<_>>(),
        vec!["kiln-dns", "kiln-kubelet", "kiln-proxy", "ca.crt"]
    );

    // Joining again changes nothing.
    let again = ok(&mut lab.in_lab(&[&kiln, "join", "-f", &cluster]));
    for phase in ["push", "kubelet-start"] {
        let done: Vec<&str> = again
            .lines()
            .filter(|l| l.contains(phase) && !l.contains("skipped"))
            .collect();
        assert!(done.is_empty(), "{phase} redone on a joined host:\n{again}");
    }

    // `kiln upgrade plan`: every host already runs the binaries this kiln would push.
    let plan = ok(&mut lab.in_lab(&[&kiln, "upgrade", "plan", "-f", &cluster]));
    assert!(plan.contains("nothing to upgrade"), "{plan}");
    assert!(plan.contains("up to date: host1, host2, host3"), "{plan}");
    // A worker whose kiln-proxy is another binary of the same stamp (a rebuild) is the one step: after
    // the snapshot, that worker, its proxy restarting.
    lab.ssh_ok(
        "host3",
        "cp /usr/local/bin/kiln-proxy /tmp/p && printf x >> /tmp/p && mv /tmp/p /usr/local/bin/kiln-proxy",
    );
    let plan = ok(&mut lab.in_lab(&[&kiln, "upgrade", "plan", "-f", &cluster]));
    assert!(plan.contains("1. a snapshot bundle"), "{plan}");
    assert!(plan.contains("2. host3 (worker): restarts proxy"), "{plan}");
    assert!(plan.contains("(same stamp, other binary)"), "{plan}");
    assert!(plan.contains("up to date: host1, host2"), "{plan}");

    let out = ok(&mut lab.in_lab(&[&kiln, "reset", "-f", &cluster]));
    assert_eq!(out.matches("verify-clean         done").count(), 3, "{out}");
    lab.down();
}
