//! Growing and shrinking a cluster on real lab hosts: `kiln join --host` adds a worker that obtains its
//! own client certificate (TLS bootstrap with a just-in-time token, approved and signed by the
//! controller-manager) and brings cluster DNS with it, a re-run changes nothing, and `kiln reset --host` drains the worker, deletes its
//! Node and cleans the host while the rest of the cluster keeps running.

use kiln_tests::{bin, ok, run, TestLab};

/// The lab's cluster.yaml without `host`'s entry (a host block runs until the next `- name:` or the end of
/// the hosts list).
fn without_host(yaml: &str, host: &str) -> String {
    let start = yaml
        .find(&format!("    - name: {host}\n"))
        .expect("host in cluster.yaml");
    let rest = &yaml[start + 1..];
    let end = [rest.find("    - name: "), rest.find("\n  registry:")]
        .into_iter()
        .flatten()
        .min()
        .map(|i| start + 1 + i + usize::from(rest[i..].starts_with('\n')))
        .unwrap_or(yaml.len());
    format!("{}{}", &yaml[..start], &yaml[end..])
}

#[test]
fn without_host_drops_one_block() {
    let y = "  hosts:\n    - name: host1\n      role: controller\n    - name: host2\n      role: worker\n    - name: host3\n      role: worker\n  registry:\n    mirror: x\n";
    assert_eq!(
        without_host(y, "host2"),
        "  hosts:\n    - name: host1\n      role: controller\n    - name: host3\n      role: worker\n  registry:\n    mirror: x\n"
    );
    assert_eq!(
        without_host(y, "host3"),
        "  hosts:\n    - name: host1\n      role: controller\n    - name: host2\n      role: worker\n  registry:\n    mirror: x\n"
    );
}

#[test]
#[ignore = "needs root: builds lab hosts (CI runs it with --include-ignored)"]
fn join_one_worker_by_tls_bootstrap_then_remove_it() {
    let lab = TestLab::up("t-join", 3, false);
    let full = lab.dir.join("cluster.yaml");
    let partial = lab.dir.join("cluster-2.yaml");
    let yaml = std::fs::read_to_string(&full).unwrap();
    std::fs::write(&partial, without_host(&yaml, "host3")).unwrap();
    let (full, partial) = (full.to_string_lossy(), partial.to_string_lossy());
    let kiln = bin("kiln");
    let kiln = kiln.to_string_lossy();
    let admin = lab.dir.join("t-join.kiln/admin.conf");
    let admin = admin.to_string_lossy();
    let kubectl = |args: &[&str]| {
        let mut v = vec!["kubectl", "--kubeconfig", &admin, "--request-timeout=10s"];
        v.extend_from_slice(args);
        ok(&mut lab.in_lab(&v))
    };

    let out = ok(&mut lab.in_lab(&[&kiln, "init", "-f", &partial, "--wait-timeout", "120"]));
    assert!(out.contains("bootstrap-token"), "{out}");
    // The operator issued no kubelet certificate for the worker.
    assert!(!lab
        .dir
        .join("t-join.kiln/kubeconfigs/host2/kubelet.conf")
        .exists());

    // An unknown --host is refused, naming the file and the hosts it has.
    let bad = run(&mut lab.in_lab(&[&kiln, "join", "-f", &full, "--host", "host9"]));
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(!bad.status.success());
    assert!(
        err.contains("--host host9")
            && err.contains("cluster.yaml")
            && err.contains("host1, host2, host3"),
        "{err}"
    );

    let out = ok(&mut lab.in_lab(&[
        &kiln,
        "join",
        "-f",
        &full,
        "--host",
        "host3",
        "--wait-timeout",
        "120",
    ]));
    assert!(
        out.contains("token") && out.contains("CA pinned at sha256:"),
        "{out}"
    );
    assert!(!out.contains("host2"), "only host3 is touched: {out}");

    // host3 is Ready with a certificate its kubelet asked for: CSR by the bootstrap token, auto-approved.
    let csrs: serde_json::Value =
        serde_json::from_str(&kubectl(&["get", "csr", "-o", "json"])).unwrap();
    let mine = csrs["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| {
            c["metadata"]["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("node-csr-host3-"))
        })
        .unwrap_or_else(|| panic!("no CSR of host3: {csrs}"));
    assert!(
        mine["spec"]["username"]
            .as_str()
            .unwrap()
            .starts_with("system:bootstrap:"),
        "{mine}"
    );
    assert!(
        !mine["status"]["certificate"]
            .as_str()
            .unwrap_or("")
            .is_empty(),
        "{mine}"
    );
    let conds = mine["status"]["conditions"].to_string();
    assert!(conds.contains("AutoApproved"), "{conds}");
    let ready = kubectl(&[
        "get",
        "node",
        "host3",
        "-o",
        "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
    ]);
    assert_eq!(ready, "True");
    // Cluster DNS came with the join (issue #22): host3's kiln-dns is Ready, so an endpoint of kube-dns.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(90);
    loop {
        let dns = kubectl(&[
            "get",
            "pods",
            "-n",
            "kube-system",
            "-l",
            "k8s-app=kube-dns",
            "--field-selector",
            "spec.nodeName=host3",
            "-o",
            "jsonpath={.items[*].status.conditions[?(@.type==\"Ready\")].status}",
        ]);
        if dns == "True" {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no Ready kube-dns pod on the joined host3: {dns:?}"
        );
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
    assert_eq!(
        lab.ssh_ok(
            "host3",
            "stat -c %a /etc/kiln/kubelet.conf /etc/kiln/bootstrap-kubelet.conf"
        ),
        "600\n600"
    );

    // A second join changes nothing and mints no token.
    let again = ok(&mut lab.in_lab(&[&kiln, "join", "-f", &full]));
    assert!(again.contains("every worker has joined"), "{again}");

    // A pod on host3; then host3 leaves: drained, Node deleted, host clean; host2 unaffected.
    let pod = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"pinned"},"spec":{"nodeName":"host3","containers":[{"name":"c","image":"kiln/pause:1"}]}}"#;
    let mut create = lab.in_lab(&["kubectl", "--kubeconfig", &admin, "create", "-f", "-"]);
    create
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped());
    let mut child = create.spawn().unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(pod.as_bytes())
        .unwrap();
    assert!(child.wait().unwrap().success());

    let out = ok(&mut lab.in_lab(&[&kiln, "reset", "-f", &full, "--host", "host3"]));
    assert!(out.contains("deleted node host3"), "{out}");
    let nodes = kubectl(&["get", "nodes", "-o", "name"]);
    assert_eq!(nodes.trim(), "node/host1\nnode/host2", "{nodes}");
    let pods = kubectl(&["get", "pods", "-o", "name"]);
    assert!(!pods.contains("pinned"), "evicted: {pods}");
    assert_eq!(
        lab.ssh_ok(
            "host3",
            "find /etc/kiln /var/lib/kiln -mindepth 1 2>/dev/null; true"
        ),
        ""
    );
    let ready = kubectl(&[
        "get",
        "node",
        "host2",
        "-o",
        "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
    ]);
    assert_eq!(ready, "True");
}
