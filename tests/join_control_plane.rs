//! Growing the control plane of a running cluster (issue 8, "Day 2"): `kiln init` with one controller and
//! one worker; then cluster.yaml lists two more controllers and `kiln join --control-plane` adds them
//! (store learners promoted once caught up, their API servers, every node's balancer updated). The real
//! etcdctl sees three voting members; the first controller's host then loses power and the cluster
//! carries on through the new ones: writes succeed, the worker stays Ready. A second join is a no-op.

use std::time::{Duration, Instant};

use kiln_tests::{bin, ok, run, stdout, TestLab};

const LAB: &str = "t-cpjoin";
const IPS: [&str; 4] = ["10.250.0.11", "10.250.0.12", "10.250.0.13", "10.250.0.14"];

/// The lab's cluster.yaml with `host` turned into a controller.
fn make_controller(yaml: &str, host: &str) -> String {
    let at = yaml
        .find(&format!("    - name: {host}\n"))
        .expect("host in cluster.yaml");
    let role = at + yaml[at..].find("role: worker").expect("a worker");
    format!(
        "{}role: controller{}",
        &yaml[..role],
        &yaml[role + "role: worker".len()..]
    )
}

/// The lab's cluster.yaml without `host`'s block (it runs until the next `- name:` or the end).
fn without_host(yaml: &str, host: &str) -> String {
    let start = yaml
        .find(&format!("    - name: {host}\n"))
        .expect("host in cluster.yaml");
    let rest = &yaml[start + 1..];
    let end = [
        rest.find("    - name: "),
        rest.find("\n  controllerManager:"),
    ]
    .into_iter()
    .flatten()
    .min()
    .map(|i| start + 1 + i + usize::from(rest[i..].starts_with('\n')))
    .unwrap_or(yaml.len());
    format!("{}{}", &yaml[..start], &yaml[end..])
}

struct Cluster {
    lab: TestLab,
    file: String,
    admin: String,
    pki: std::path::PathBuf,
}

impl Cluster {
    fn kiln(&self, args: &[&str]) -> std::process::Output {
        let kiln = bin("kiln");
        let mut v = vec![kiln.to_str().unwrap()];
        v.extend_from_slice(args);
        run(&mut self.lab.in_lab(&v))
    }

    /// kubectl against one controller's API server (admin.conf names host1).
    fn kubectl_at(&self, ip: &str, args: &[&str]) -> Option<String> {
        let server = format!("--server=https://{ip}:6443");
        let mut v = vec![
            "kubectl",
            "--kubeconfig",
            &self.admin,
            &server,
            "--request-timeout=5s",
        ];
        v.extend_from_slice(args);
        let o = run(&mut self.lab.in_lab(&v));
        o.status.success().then(|| stdout(&o))
    }

    /// The real etcdctl with the cluster's store client certificate.
    fn etcdctl(&self, ips: &[&str], args: &[&str]) -> Option<serde_json::Value> {
        let p = |f: &str| self.pki.join(f).to_string_lossy().into_owned();
        let endpoints: Vec<String> = ips.iter().map(|ip| format!("https://{ip}:2379")).collect();
        let endpoints = endpoints.join(",");
        let (ca, cert, key) = (
            p("store/ca.crt"),
            p("apiserver-store-client.crt"),
            p("apiserver-store-client.key"),
        );
        let mut v = vec![
            "etcdctl",
            "--endpoints",
            &endpoints,
            "--cacert",
            &ca,
            "--cert",
            &cert,
            "--key",
            &key,
            "--command-timeout=5s",
            "-w",
            "json",
        ];
        v.extend_from_slice(args);
        let o = run(self.lab.in_lab(&v).env("ETCDCTL_API", "3"));
        if !o.status.success() {
            return None;
        }
        serde_json::from_slice(&o.stdout).ok()
    }

    fn ready(&self, ip: &str, node: &str) -> Option<String> {
        self.kubectl_at(
            ip,
            &[
                "get",
                "node",
                node,
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
            ],
        )
    }
}

fn wait<T>(what: &str, secs: u64, mut f: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            start.elapsed() < Duration::from_secs(secs),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn out(o: &std::process::Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
#[ignore = "needs root: builds lab hosts (CI runs it with --include-ignored)"]
fn join_two_controllers_to_a_running_cluster_then_lose_the_first() {
    let lab = TestLab::up(LAB, 4, false);
    let file = lab.dir.join("cluster.yaml");
    let lab_yaml = std::fs::read_to_string(&file).unwrap()
        + "  controllerManager:\n    nodeMonitorGracePeriod: 8s\n    podEvictionTimeout: 5s\n";
    // Day 1: host1 controls, host2 works. Day 2: host3 and host4 (appended, so every host keeps its
    // position in the file and with it its pod CIDR) become controllers.
    let day1 = without_host(&without_host(&lab_yaml, "host4"), "host3");
    let day2 = make_controller(&make_controller(&lab_yaml, "host3"), "host4");
    std::fs::write(&file, &day1).unwrap();
    let c = Cluster {
        file: file.to_string_lossy().into_owned(),
        admin: lab
            .dir
            .join(format!("{LAB}.kiln/admin.conf"))
            .to_string_lossy()
            .into_owned(),
        pki: lab.dir.join(format!("{LAB}.kiln/pki/host1")),
        lab,
    };
    let f = c.file.clone();
    let o = c.kiln(&["init", "-f", &f, "--wait-timeout", "180"]);
    assert!(o.status.success(), "init failed:\n{}", out(&o));
    std::fs::write(&file, &day2).unwrap();

    // `kiln init` refuses to start the new controllers as founders of a second store cluster.
    let o = c.kiln(&["init", "-f", &f]);
    let text = out(&o);
    assert!(!o.status.success(), "{text}");
    assert!(
        text.contains("host3, host4") && text.contains("kiln join --control-plane"),
        "{text}"
    );
    // --host must name a controller of the file.
    let o = c.kiln(&["join", "--control-plane", "-f", &f, "--host", "host2"]);
    let text = out(&o);
    assert!(!o.status.success(), "{text}");
    assert!(
        text.contains("--host host2 is not a controller")
            && text.contains("cluster.yaml")
            && text.contains("host1, host3, host4"),
        "{text}"
    );
    // A worker join leaves the new controllers alone and says how to join them.
    let o = c.kiln(&["join", "-f", &f, "--wait-timeout", "120"]);
    let text = out(&o);
    assert!(o.status.success(), "{text}");
    assert!(
        text.contains("host3, host4: controller(s)") && text.contains("kiln join --control-plane"),
        "{text}"
    );
    assert!(c.kubectl_at(IPS[0], &["get", "node", "host3"]).is_none());
    let cmd = c.lab.ssh_ok("host2", "cat /etc/kiln/kubelet-supervisor.sh");
    assert!(
        !cmd.contains("--apiserver-lb"),
        "no balancer for API servers that do not run yet: {cmd}"
    );

    // A join cut short once host3's member is added (its store never started) ...
    let o = c.kiln(&[
        "join",
        "--control-plane",
        "-f",
        &f,
        "--host",
        "host3",
        "--skip-phases",
        "kubelet-start,store-promote,control-plane,wait-static-pods,wait-node-ready,\
         mark-control-plane,apiserver-lb",
    ]);
    let text = out(&o);
    assert!(o.status.success(), "{text}");
    assert!(
        text.contains("learner") && text.contains("added via host1"),
        "{text}"
    );
    let list = c
        .etcdctl(&IPS[..1], &["member", "list"])
        .expect("member list");
    let learners = list["members"]
        .as_array()
        .expect("members")
        .iter()
        .filter(|m| m["isLearner"].as_bool() == Some(true))
        .count();
    assert_eq!(learners, 1, "{list}");

    // ... converges when re-run: the learner is reused, promoted once caught up; host4 joins after it.
    let o = c.kiln(&["join", "--control-plane", "-f", &f, "--wait-timeout", "180"]);
    let text = out(&o);
    eprintln!("{text}");
    assert!(o.status.success(), "join --control-plane failed:\n{text}");
    assert!(
        text.contains("already added; reused") && text.contains("promoted"),
        "{text}"
    );

    // Three voting members, as the real etcdctl sees them.
    let list = c
        .etcdctl(&IPS[..1], &["member", "list"])
        .expect("member list");
    let members = list["members"].as_array().expect("members");
    let mut names: Vec<&str> = members.iter().filter_map(|m| m["name"].as_str()).collect();
    names.sort();
    assert_eq!(names, ["host1", "host3", "host4"], "{list}");
    assert!(
        members
            .iter()
            .all(|m| m["isLearner"].as_bool() != Some(true)),
        "a learner is left: {list}"
    );
    // Every node Ready; kubectl works through each controller's API server.
    for ip in [IPS[0], IPS[2], IPS[3]] {
        for node in ["host1", "host2", "host3", "host4"] {
            let r = wait("every node Ready", 120, || {
                c.ready(ip, node).filter(|s| s == "True")
            });
            assert_eq!(r, "True");
        }
    }
    let labels = c
        .kubectl_at(IPS[0], &["get", "node", "host3", "--show-labels"])
        .unwrap();
    assert!(
        labels.contains("node-role.kubernetes.io/control-plane"),
        "{labels}"
    );
    // The worker's kubelet balances over all three API servers.
    let kubelet = c.lab.ssh_ok("host2", "cat /etc/kiln/kubelet.conf");
    assert!(
        kubelet.contains("server: https://127.0.0.1:6444"),
        "{kubelet}"
    );
    let cmd = c.lab.ssh_ok("host2", "cat /etc/kiln/kubelet-supervisor.sh");
    assert!(
        cmd.contains("--apiserver-lb-backend=10.250.0.11:6443,10.250.0.13:6443,10.250.0.14:6443"),
        "{cmd}"
    );

    // The first controller's host loses power: the others carry on.
    ok(&mut c.lab.kiln(&["lab", "stop", "host1"]));
    for (i, ip) in [IPS[2], IPS[3]].iter().enumerate() {
        let name = format!("after-{i}");
        wait("a write without host1", 90, || {
            c.kubectl_at(ip, &["create", "configmap", &name, "--from-literal=k=v"])
        });
    }
    // The controller-manager (on a survivor) sees host1 gone; host2, balanced onto host3/host4, is not.
    wait("host1 NotReady", 120, || {
        c.ready(IPS[2], "host1").filter(|s| s != "True")
    });
    assert_eq!(c.ready(IPS[3], "host2").as_deref(), Some("True"));

    // Nothing left to join: a second run changes nothing (and needs no host1).
    let o = c.kiln(&["join", "--control-plane", "-f", &f]);
    let text = out(&o);
    assert!(o.status.success(), "{text}");
    assert!(text.contains("nothing to do"), "{text}");
    assert!(!text.contains("store-learner"), "{text}");

    // Two of three controllers down: no quorum, and kiln says so instead of touching anything.
    ok(&mut c.lab.kiln(&["lab", "stop", "host3"]));
    let text = wait("join to refuse a store without quorum", 120, || {
        let o = c.kiln(&["join", "--control-plane", "-f", &f]);
        let text = out(&o);
        (!o.status.success() && text.contains("no leader")).then_some(text)
    });
    assert!(
        text.contains("host4") && text.contains("cluster.yaml"),
        "{text}"
    );
}

#[test]
fn cluster_yaml_edits_change_one_host() {
    let y = "  hosts:\n    - name: host1\n      role: controller\n    - name: host2\n      role: worker\n    - name: host3\n      role: worker\n  controllerManager:\n    x: y\n";
    assert_eq!(
        without_host(y, "host3"),
        "  hosts:\n    - name: host1\n      role: controller\n    - name: host2\n      role: worker\n  controllerManager:\n    x: y\n"
    );
    assert_eq!(
        make_controller(y, "host3"),
        y.replace("host3\n      role: worker", "host3\n      role: controller")
    );
}
