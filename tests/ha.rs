//! A highly available control plane on real lab hosts: three controllers (stacked kiln-store members, an
//! API server, scheduler and controller-manager on each) and one worker whose kubelet reaches the API
//! through its node-local load balancer. The host of the store's leader loses power: a new leader is
//! elected, writes go on through the other controllers, the controller-manager (on another controller)
//! marks the dead node NotReady while the worker stays Ready; powered on again, the host catches up.

use std::time::{Duration, Instant};

use kiln_tests::{bin, run, stdout, TestLab};

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

struct Ha {
    lab: TestLab,
    admin: String,
    pki: std::path::PathBuf,
}

impl Ha {
    /// kubectl against one controller's API server (the operator's admin.conf names host1).
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

    /// (member name of the store leader, endpoints answering) via the real etcdctl.
    fn store_leader(&self, ips: &[&str]) -> Option<String> {
        let p = |f: &str| self.pki.join(f).to_string_lossy().into_owned();
        let endpoints: Vec<String> = ips.iter().map(|ip| format!("https://{ip}:2379")).collect();
        let o = run(self
            .lab
            .in_lab(&[
                "etcdctl",
                "--endpoints",
                &endpoints.join(","),
                "--cacert",
                &p("store/ca.crt"),
                "--cert",
                &p("apiserver-store-client.crt"),
                "--key",
                &p("apiserver-store-client.key"),
                "--command-timeout=3s",
                "endpoint",
                "status",
                "-w",
                "json",
            ])
            .env("ETCDCTL_API", "3"));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).ok()?;
        let list = v.as_array()?;
        let leader = list.first()?["Status"]["leader"].as_u64()?;
        let at = list
            .iter()
            .find(|e| e["Status"]["header"]["member_id"].as_u64() == Some(leader))?;
        let ep = at["Endpoint"].as_str()?;
        let ip = ep.trim_start_matches("https://").trim_end_matches(":2379");
        let n: u32 = ip.rsplit('.').next()?.parse().ok()?;
        Some(format!("host{}", n - 10))
    }

    fn wait<T>(&self, what: &str, secs: u64, mut f: impl FnMut() -> Option<T>) -> T {
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

const IPS: [&str; 3] = ["10.250.0.11", "10.250.0.12", "10.250.0.13"];

fn ip_of(host: &str) -> &'static str {
    IPS[host.trim_start_matches("host").parse::<usize>().unwrap() - 1]
}

#[test]
#[ignore = "needs root: builds lab hosts (CI runs it with --include-ignored)"]
fn three_controllers_survive_losing_the_store_leader() {
    let lab = TestLab::up("t-ha", 4, true);
    let file = lab.dir.join("cluster.yaml");
    let mut yaml = std::fs::read_to_string(&file).unwrap();
    yaml = make_controller(&make_controller(&yaml, "host2"), "host3");
    yaml.push_str(
        "  controllerManager:\n    nodeMonitorGracePeriod: 8s\n    podEvictionTimeout: 5s\n",
    );
    std::fs::write(&file, &yaml).unwrap();
    let kiln = bin("kiln");
    let out = run(&mut lab.in_lab(&[
        &kiln.to_string_lossy(),
        "init",
        "-f",
        &file.to_string_lossy(),
        "--wait-timeout",
        "180",
    ]));
    assert!(
        out.status.success(),
        "init failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let ha = Ha {
        admin: lab
            .dir
            .join("t-ha.kiln/admin.conf")
            .to_string_lossy()
            .into_owned(),
        pki: lab.dir.join("t-ha.kiln/pki/host1"),
        lab,
    };
    // Every controller runs its own control plane; the worker's kubelet uses the node-local balancer.
    let pods = ha
        .kubectl_at(IPS[0], &["get", "pods", "-n", "kube-system", "-o", "name"])
        .unwrap();
    for h in ["host1", "host2", "host3"] {
        for c in [
            "kiln-store",
            "kiln-apiserver",
            "kiln-scheduler",
            "kiln-controller-manager",
        ] {
            assert!(
                pods.contains(&format!("pod/{c}-{h}")),
                "{c}-{h} missing: {pods}"
            );
        }
    }
    let kubelet = ha.lab.ssh_ok("host4", "cat /etc/kiln/kubelet.conf");
    assert!(
        kubelet.contains("server: https://127.0.0.1:6444"),
        "{kubelet}"
    );

    let leader = ha.wait("a store leader", 30, || ha.store_leader(&IPS));
    let survivors: Vec<&str> = IPS
        .iter()
        .copied()
        .filter(|ip| *ip != ip_of(&leader))
        .collect();
    ha.kubectl_at(
        survivors[0],
        &["create", "configmap", "before", "--from-literal=k=v"],
    )
    .expect("a write before the failure");

    // The leader's host loses power.
    kiln_tests::ok(&mut ha.lab.kiln(&["lab", "stop", &leader]));
    let new_leader = ha.wait("a new store leader", 30, || {
        ha.store_leader(&survivors).filter(|l| *l != leader)
    });
    assert_ne!(new_leader, leader);
    // Writes continue through either surviving API server.
    for (i, ip) in survivors.iter().enumerate() {
        let name = format!("during-{i}");
        ha.wait("a write with one controller down", 60, || {
            ha.kubectl_at(ip, &["create", "configmap", &name, "--from-literal=k=v"])
        });
    }
    // The controller-manager that leads now (on a survivor) sees the dead node; the worker, whose
    // kubelet fails over to a live API server, stays Ready.
    ha.wait("the stopped controller NotReady", 90, || {
        ha.ready(survivors[0], &leader).filter(|s| s != "True")
    });
    assert_eq!(ha.ready(survivors[1], "host4").as_deref(), Some("True"));

    // Power back: the host's store catches up and its API server serves what was written meanwhile.
    kiln_tests::ok(&mut ha.lab.kiln(&["lab", "start", &leader]));
    let back = ip_of(&leader);
    ha.wait(
        "the restarted controller to serve the writes it missed",
        120,
        || ha.kubectl_at(back, &["get", "configmap", "during-1", "-o", "name"]),
    );
    ha.wait("the restarted controller Ready", 90, || {
        ha.ready(back, &leader).filter(|s| s == "True")
    });
}

#[test]
fn make_controller_changes_one_role() {
    let y = "    - name: host1\n      role: controller\n    - name: host2\n      role: worker\n    - name: host3\n      role: worker\n";
    assert_eq!(
        make_controller(y, "host2"),
        "    - name: host1\n      role: controller\n    - name: host2\n      role: controller\n    - name: host3\n      role: worker\n"
    );
}
