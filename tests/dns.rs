//! Service discovery inside the cluster, end to end on a 3-host lab: kiln-dns on every node behind
//! kube-system/kube-dns, queried from pods on two nodes with busybox `nslookup` and the real `dig`
//! (every record kind of the DNS spec, headless answers following the pods, names outside the zone
//! answered by an upstream resolver this test runs in the lab network); the pod's resolv.conf and
//! /etc/hosts; Service environment variables; real kubectl inside a pod with only its ServiceAccount
//! (client-go's in-cluster configuration); and lookups that keep answering while a node is powered off.

use std::process::{Child, Command, Stdio};

use kiln_tests::{ok, run, stdout, Cluster, TestLab};

const NS: &str = "dns-test";
const ZONE: &str = "cluster.local";
/// What the upstream resolver (unbound, in the lab network) answers for the one name it holds.
const UPSTREAM_NAME: &str = "upstream.test";
const UPSTREAM_ADDR: &str = "192.0.2.7";

/// unbound on the lab bridge's address (10.250.0.1:53) with one local name: the resolver that
/// cluster.yaml's `networking.dns.upstream` points kiln-dns at. Stopped (by its PID) on drop.
struct Upstream(Child);

impl Upstream {
    fn start(lab: &TestLab) -> Upstream {
        let conf = lab.dir.join("unbound.conf");
        std::fs::write(
            &conf,
            format!(
                "server:\n  interface: 10.250.0.1\n  port: 53\n  do-daemonize: no\n  chroot: \"\"\n  \
                 username: \"\"\n  pidfile: \"\"\n  use-syslog: no\n  logfile: \"\"\n  do-ip6: no\n  \
                 access-control: 10.0.0.0/8 allow\n  local-zone: \"test.\" static\n  \
                 local-data: \"{UPSTREAM_NAME}. 60 IN A {UPSTREAM_ADDR}\"\n"
            ),
        )
        .unwrap();
        let child = Command::new("ip")
            .args(["netns", "exec", &lab.netns(), "unbound", "-d", "-c"])
            .arg(&conf)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("unbound (apt-get install unbound)");
        Upstream(child)
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn fixture(name: &str) -> String {
    let dir =
        std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").into());
    format!("{dir}/fixtures/{name}")
}

fn lines(s: &str) -> Vec<String> {
    let mut v: Vec<String> = s.lines().map(|l| l.trim().to_string()).collect();
    v.retain(|l| !l.is_empty());
    v.sort();
    v
}

struct Dns<'a> {
    c: &'a Cluster,
}

impl Dns<'_> {
    fn exec(&self, pod: &str, cmd: &[&str]) -> Option<String> {
        let mut args = vec!["-n", NS, "exec", pod, "--"];
        args.extend_from_slice(cmd);
        self.c.try_kubectl(&args)
    }

    /// `dig +short` of `name` (record type `kind`) from `pod`, answers sorted.
    fn dig(&self, pod: &str, kind: &str, name: &str) -> Vec<String> {
        let out = self
            .exec(pod, &["dig", "+short", "+time=2", "+tries=2", kind, name])
            .unwrap_or_else(|| panic!("dig {kind} {name} in {pod} failed"));
        lines(&out)
    }

    /// Busybox `nslookup name` in `pod`, its output. Busybox asks every search domain at once and exits
    /// 1 when any of them is NXDOMAIN (web.svc.cluster.local is, as on upstream's CoreDNS), so the
    /// output is what counts, not the status.
    fn nslookup(&self, pod: &str, name: &str) -> String {
        self.exec(pod, &["sh", "-c", &format!("nslookup {name} 2>&1; true")])
            .unwrap_or_else(|| panic!("kubectl exec {pod} failed"))
    }

    /// The status line of a full dig answer (`NOERROR`, `NXDOMAIN`, …).
    fn status(&self, pod: &str, kind: &str, name: &str) -> String {
        let out = self
            .exec(pod, &["dig", "+time=2", "+tries=2", kind, name])
            .unwrap_or_default();
        out.split("status: ")
            .nth(1)
            .and_then(|r| r.split(',').next())
            .unwrap_or("no answer")
            .to_string()
    }

    fn pod_ip(&self, pod: &str) -> String {
        self.c.kubectl(&[
            "-n",
            NS,
            "get",
            "pod",
            pod,
            "-o",
            "jsonpath={.status.podIP}",
        ])
    }
}

#[test]
#[ignore = "needs root: builds lab hosts (CI runs it with --include-ignored)"]
fn cluster_dns_service_env_and_in_cluster_clients() {
    let lab = TestLab::up_with_images("t-dns", 3, true, &["dnsutils", "kubectl"]);
    let _upstream = Upstream::start(&lab);
    let c = Cluster::on(
        lab,
        "  controllerManager:\n    nodeMonitorGracePeriod: 8s\n    podEvictionTimeout: 5s\n  \
         networking:\n    dns:\n      upstream: [10.250.0.1]\n",
    );
    c.kiln(&["init", "--wait-timeout", "150"]);

    // What users know from kubeadm: kube-dns pods in kube-system, one per node, and the Service at the
    // 10th address of the service range.
    c.wait("a Ready kiln-dns pod on every node", 120, || {
        let out = c
            .try_kubectl(&[
                "-n",
                "kube-system",
                "get",
                "pods",
                "-l",
                "k8s-app=kube-dns",
                "-o",
                "jsonpath={range .items[*]}{.spec.nodeName} {.status.conditions[?(@.type==\"Ready\")].status}{\"\\n\"}{end}",
            ])
            .unwrap_or_default();
        let ready = lines(&out);
        if ready == ["host1 True", "host2 True", "host3 True"] {
            Ok(())
        } else {
            Err(format!("{ready:?}"))
        }
    });
    assert_eq!(
        c.kubectl(&[
            "-n",
            "kube-system",
            "get",
            "svc",
            "kube-dns",
            "-o",
            "jsonpath={.spec.clusterIP}"
        ]),
        "10.96.0.10"
    );
    // A re-run converges: the addon's phases skip what is done.
    let again = c.kiln(&["init", "--wait-timeout", "150"]);
    assert!(
        again.contains("dns-service") && again.contains("skipped"),
        "{again}"
    );

    c.kubectl(&["apply", "-f", &fixture("dns-workloads.yaml")]);
    c.kubectl(&[
        "-n",
        NS,
        "rollout",
        "status",
        "deployment/web",
        "--timeout=120s",
    ]);
    c.kubectl(&["apply", "-f", &fixture("dns-clients.yaml")]);
    for p in [
        "db-0", "db-1", "client-a", "client-b", "nolinks", "hostnet", "nodedns", "kubectl",
    ] {
        c.kubectl(&[
            "-n",
            NS,
            "wait",
            "--for=condition=Ready",
            &format!("pod/{p}"),
            "--timeout=120s",
        ]);
    }
    let d = Dns { c: &c };
    let web_ip = c.kubectl(&[
        "-n",
        NS,
        "get",
        "svc",
        "web",
        "-o",
        "jsonpath={.spec.clusterIP}",
    ]);
    let web = format!("web.{NS}.svc.{ZONE}");
    let db = format!("db.{NS}.svc.{ZONE}");
    let (db0, db1) = (d.pod_ip("db-0"), d.pod_ip("db-1"));

    // The pod's resolver: the cluster DNS, the namespace's search path, ndots:5.
    let resolv = d.exec("client-a", &["cat", "/etc/resolv.conf"]).unwrap();
    assert!(resolv.contains("nameserver 10.96.0.10"), "{resolv}");
    assert!(
        resolv.contains(&format!("search {NS}.svc.{ZONE} svc.{ZONE} {ZONE}")),
        "{resolv}"
    );
    assert!(resolv.contains("options ndots:5"), "{resolv}");
    // ClusterFirstWithHostNet: a host-network pod on the cluster DNS all the same, resolving the
    // namespace's short names; Default: the node's own resolver, no cluster search path.
    let resolv = d.exec("hostnet", &["cat", "/etc/resolv.conf"]).unwrap();
    assert!(resolv.contains("nameserver 10.96.0.10"), "{resolv}");
    assert!(
        resolv.contains(&format!("search {NS}.svc.{ZONE} svc.{ZONE} {ZONE}")),
        "{resolv}"
    );
    let searched = d
        .exec("hostnet", &["dig", "+short", "+search", "web"])
        .unwrap();
    assert_eq!(lines(&searched), [web_ip.as_str()]);
    let resolv = d.exec("nodedns", &["cat", "/etc/resolv.conf"]).unwrap();
    let node = c.lab.ssh_ok("host3", "cat /etc/resolv.conf");
    let servers = |t: &str| -> Vec<String> {
        t.lines()
            .filter(|l| l.trim_start().starts_with("nameserver"))
            .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
            .collect()
    };
    assert!(!servers(&node).is_empty(), "{node}");
    assert_eq!(servers(&resolv), servers(&node), "{resolv}");
    assert!(!resolv.contains(&format!("svc.{ZONE}")), "{resolv}");

    // Every record kind, from pods on two nodes.
    for pod in ["client-a", "client-b"] {
        assert_eq!(d.dig(pod, "A", &web), [web_ip.as_str()], "{pod}");
        // The search path resolves the short name (busybox nslookup and dig +search).
        let short = d.nslookup(pod, "web");
        assert!(
            short.contains(&format!("Name:\tweb.{NS}.svc.{ZONE}"))
                && short
                    .lines()
                    .any(|l| l.trim() == format!("Address: {web_ip}")),
            "{pod}: {short}"
        );
        let searched = d.exec(pod, &["dig", "+short", "+search", "web"]).unwrap();
        assert_eq!(lines(&searched), [web_ip.as_str()], "{pod}");
        // The API's own Service.
        assert_eq!(
            d.dig(pod, "A", &format!("kubernetes.default.svc.{ZONE}")),
            ["10.96.0.1"]
        );
        // Headless: the ready endpoints' addresses; a member's own name from hostname + subdomain.
        let mut both = vec![db0.clone(), db1.clone()];
        both.sort();
        assert_eq!(d.dig(pod, "A", &db), both, "{pod}");
        assert_eq!(d.dig(pod, "A", &format!("db-0.{db}")), [db0.as_str()]);
        // SRV for named ports: the Service name for a ClusterIP Service, each member for headless.
        let srv = d.dig(pod, "SRV", &format!("_http._tcp.{web}"));
        assert_eq!(srv.len(), 1, "{srv:?}");
        assert!(srv[0].ends_with(&format!(" 80 {web}.")), "{srv:?}");
        let srv = d.dig(pod, "SRV", &format!("_tcp-db._tcp.{db}"));
        let targets: Vec<&str> = srv.iter().filter_map(|r| r.split(' ').nth(3)).collect();
        assert_eq!(
            targets,
            [format!("db-0.{db}."), format!("db-1.{db}.")],
            "{srv:?}"
        );
        // A headless member's SRV port is its endpoint's (targetPort 80), as CoreDNS answers.
        assert!(
            srv.iter().all(|r| r.split(' ').nth(2) == Some("80")),
            "{srv:?}"
        );
        // ExternalName is a CNAME; the target comes from the upstream resolver.
        let ext = d.dig(pod, "A", &format!("ext.{NS}.svc.{ZONE}"));
        assert!(ext.contains(&format!("{UPSTREAM_NAME}.")), "{ext:?}");
        // PTR for a Service IP and an endpoint IP.
        assert_eq!(d.dig(pod, "-x", &web_ip), [format!("{web}.")]);
        assert_eq!(d.dig(pod, "-x", &db0), [format!("db-0.{db}.")]);
        // Spec rules: a missing Service is NXDOMAIN; an existing name without the asked type NODATA.
        assert_eq!(
            d.status(pod, "A", &format!("missing.{NS}.svc.{ZONE}")),
            "NXDOMAIN"
        );
        assert_eq!(d.status(pod, "AAAA", &web), "NOERROR");
        assert!(d.dig(pod, "AAAA", &web).is_empty());
        assert_eq!(
            d.dig(pod, "TXT", &format!("dns-version.{ZONE}")),
            ["\"1.1.0\""]
        );
        // TCP answers too.
        let tcp = d.exec(pod, &["dig", "+tcp", "+short", &web]).unwrap();
        assert_eq!(lines(&tcp), [web_ip.as_str()]);
        // A name outside the zone: forwarded to the upstream resolver.
        assert_eq!(d.dig(pod, "A", UPSTREAM_NAME), [UPSTREAM_ADDR]);
    }

    // Headless answers follow the pods.
    c.kubectl(&["-n", NS, "delete", "pod", "db-1", "--wait=true"]);
    c.wait("the headless answer without db-1", 30, || {
        let got = d.dig("client-a", "A", &db);
        if got == [db0.clone()] {
            Ok(())
        } else {
            Err(format!("{got:?}"))
        }
    });

    // The kubelet's /etc/hosts: the pod's own name (FQDN with a subdomain) and hostAliases.
    let hosts = d.exec("client-a", &["cat", "/etc/hosts"]).unwrap();
    assert!(
        hosts.contains("# Kubernetes-managed hosts file."),
        "{hosts}"
    );
    let a_ip = d.pod_ip("client-a");
    assert!(
        hosts
            .lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>() == [a_ip.as_str(), "client-a"]),
        "{hosts}"
    );
    let hosts = d.exec("db-0", &["cat", "/etc/hosts"]).unwrap();
    assert!(
        hosts
            .lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>()
                == [db0.as_str(), &format!("db-0.{db}"), "db-0"]),
        "{hosts}"
    );
    // setHostnameAsFQDN: the kernel's host name is the FQDN.
    let kernel = d
        .exec("db-0", &["cat", "/proc/sys/kernel/hostname"])
        .unwrap();
    assert_eq!(kernel.trim(), format!("db-0.{db}"));
    c.kubectl(&["apply", "-f", &fixture("dns-clients.yaml")]);
    c.kubectl(&[
        "-n",
        NS,
        "wait",
        "--for=condition=Ready",
        "pod/db-1",
        "--timeout=120s",
    ]);
    // ... and back when it is there again.
    let both = {
        let mut v = vec![db0.clone(), d.pod_ip("db-1")];
        v.sort();
        v
    };
    c.wait("the headless answer with db-1 again", 30, || {
        let got = d.dig("client-a", "A", &db);
        if got == both {
            Ok(())
        } else {
            Err(format!("{got:?}"))
        }
    });
    let hosts = d.exec("db-1", &["cat", "/etc/hosts"]).unwrap();
    assert!(hosts.contains("# Entries added by HostAliases."), "{hosts}");
    assert!(
        hosts
            .lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>() == ["192.0.2.10", "alias.example"]),
        "{hosts}"
    );

    // Service environment variables: the API's, and every Service of the namespace that existed
    // when the container started.
    let env = d.exec("client-a", &["env"]).unwrap();
    for want in [
        "KUBERNETES_SERVICE_HOST=10.96.0.1".to_string(),
        "KUBERNETES_SERVICE_PORT=443".to_string(),
        "KUBERNETES_SERVICE_PORT_HTTPS=443".to_string(),
        "KUBERNETES_PORT=tcp://10.96.0.1:443".to_string(),
        format!("WEB_SERVICE_HOST={web_ip}"),
        "WEB_SERVICE_PORT=80".to_string(),
        "WEB_SERVICE_PORT_HTTP=80".to_string(),
        format!("WEB_PORT=tcp://{web_ip}:80"),
        format!("WEB_PORT_80_TCP=tcp://{web_ip}:80"),
        "WEB_PORT_80_TCP_PROTO=tcp".to_string(),
        "WEB_PORT_80_TCP_PORT=80".to_string(),
        format!("WEB_PORT_80_TCP_ADDR={web_ip}"),
    ] {
        assert!(
            env.lines().any(|l| l == want),
            "{want} missing from:\n{env}"
        );
    }
    // A headless Service has no variables; enableServiceLinks: false drops the per-Service ones, and
    // dnsPolicy None uses the pod's dnsConfig only.
    assert!(!env.contains("DB_SERVICE_HOST"), "{env}");
    let env = d.exec("nolinks", &["env"]).unwrap();
    assert!(env.contains("KUBERNETES_SERVICE_HOST=10.96.0.1"), "{env}");
    assert!(!env.contains("WEB_SERVICE_HOST"), "{env}");
    let resolv = d.exec("nolinks", &["cat", "/etc/resolv.conf"]).unwrap();
    assert_eq!(
        lines(&resolv),
        lines("nameserver 10.96.0.10\nsearch custom.example\noptions ndots:2"),
        "{resolv}"
    );

    // Real kubectl in a pod, with only its ServiceAccount: client-go's in-cluster configuration
    // (KUBERNETES_SERVICE_HOST/PORT, the mounted token and CA), then the API by its DNS name.
    let listed = d
        .exec(
            "kubectl",
            &["kubectl", "-n", NS, "get", "pods", "-o", "name"],
        )
        .unwrap();
    assert!(
        listed.contains("pod/client-a") && listed.contains("pod/kubectl"),
        "{listed}"
    );
    let sa = "/var/run/secrets/kubernetes.io/serviceaccount";
    let by_name = d
        .exec(
            "kubectl",
            &[
                "sh",
                "-c",
                &format!(
                    "kubectl --server=https://kubernetes.default.svc --certificate-authority={sa}/ca.crt \
                     --token=$(cat {sa}/token) -n {NS} get pod kubectl -o name"
                ),
            ],
        )
        .unwrap();
    assert_eq!(by_name, "pod/kubectl");
    // RBAC still applies: the ServiceAccount may not read Secrets.
    assert!(d
        .exec("kubectl", &["kubectl", "-n", NS, "get", "secrets"])
        .is_none());

    // kiln status reports every node's DNS answering.
    let status = c.kiln(&["status"]);
    for h in ["host1", "host2", "host3"] {
        assert!(
            status
                .lines()
                .any(|l| l.starts_with(&format!("dns {h}")) && l.contains("answering")),
            "{status}"
        );
    }

    // Power off the node of one DNS instance: lookups from the other node's pods keep answering, at
    // once and after the node controller has marked it NotReady.
    ok(&mut c.lab.kiln(&["lab", "stop", "host3"]));
    for _ in 0..10 {
        assert_eq!(d.dig("client-a", "A", &web), [web_ip.as_str()]);
    }
    c.wait("host3 NotReady", 90, || {
        let s = c
            .try_kubectl(&[
                "get",
                "node",
                "host3",
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
            ])
            .unwrap_or_default();
        if s == "Unknown" || s == "False" {
            Ok(())
        } else {
            Err(s)
        }
    });
    for _ in 0..10 {
        assert_eq!(d.dig("client-a", "A", &web), [web_ip.as_str()]);
        // The seeds' `nslookup kubernetes.default`, with a resolver that honours ndots (busybox
        // searches only names without a dot), and busybox with the full name.
        let searched = d
            .exec(
                "client-a",
                &["dig", "+short", "+search", "kubernetes.default"],
            )
            .unwrap();
        assert_eq!(lines(&searched), ["10.96.0.1"]);
        let full = d.nslookup("client-a", &format!("kubernetes.default.svc.{ZONE}"));
        assert!(
            full.lines().any(|l| l.trim() == "Address: 10.96.0.1"),
            "{full}"
        );
    }
    // The node itself (host network) resolves through the Service as well.
    let o = run(&mut c
        .lab
        .ssh("host1", &format!("busybox nslookup {web} 10.96.0.10")));
    assert!(stdout(&o).contains(&web_ip), "{}", stdout(&o));
}
