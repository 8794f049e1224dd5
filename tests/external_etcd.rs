//! `spec.store.external` (kubeadm's external etcd) end to end: a 3-member etcd 3.4 (Debian's
//! /usr/bin/etcd) with TLS on the lab hosts, a 1+2 kiln cluster on it, then the acceptance checks that
//! apply: nodes Ready, a Deployment runs, the API's keys are in the external etcd, a snapshot saved
//! through it reads as etcdctl reads it, `status` shows the endpoints, `restore` prints the etcd
//! operator's steps, and `reset` leaves etcd's data while removing kiln's copies of the certificates.

use std::path::Path;
use std::process::Command;

use kiln_tests::{ok, run, Cluster, TestLab};

/// The lab's name: `t-ext`, or `KILN_TEST_LAB` (a developer running it beside other labs).
fn lab_name() -> String {
    std::env::var("KILN_TEST_LAB").unwrap_or_else(|_| "t-ext".into())
}
const HOSTS: [(&str, &str); 3] = [
    ("host1", "10.250.0.11"),
    ("host2", "10.250.0.12"),
    ("host3", "10.250.0.13"),
];
/// Where each host keeps its etcd (nothing `kiln reset` removes).
const ETCD_DIR: &str = "/var/lib/etcd-ext";

/// A CA, one serving/peer certificate for every member (each host's IP), and a client certificate,
/// made with openssl in `dir`.
fn make_pki(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    let sh = |script: &str| ok(Command::new("sh").args(["-ec", script]).current_dir(dir));
    let ips: Vec<String> = HOSTS.iter().map(|(_, ip)| format!("IP:{ip}")).collect();
    sh(&format!(
        "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
           -subj /CN=etcd-ca -keyout ca.key -out ca.crt 2>/dev/null
         printf 'subjectAltName={sans},IP:127.0.0.1\\nextendedKeyUsage=serverAuth,clientAuth\\n' > server.ext
         openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=etcd \
           -keyout server.key -out server.csr 2>/dev/null
         openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
           -extfile server.ext -out server.crt 2>/dev/null
         printf 'extendedKeyUsage=clientAuth\\n' > client.ext
         openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=kiln-apiserver \
           -keyout client.key -out client.csr 2>/dev/null
         openssl x509 -req -in client.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
           -extfile client.ext -out client.crt 2>/dev/null",
        sans = ips.join(",")
    ));
}

/// Starts the three members, detached; returns each host's etcd PID.
fn start_etcd(lab: &TestLab, pki: &Path) -> Vec<(String, String)> {
    let b64 = |f: &str| {
        use std::io::Write;
        let data = std::fs::read(pki.join(f)).unwrap();
        let mut child = Command::new("base64")
            .arg("-w0")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(&data).unwrap();
        String::from_utf8(child.wait_with_output().unwrap().stdout).unwrap()
    };
    let files: Vec<(&str, String)> = ["ca.crt", "server.crt", "server.key"]
        .iter()
        .map(|f| (*f, b64(f)))
        .collect();
    let initial: Vec<String> = HOSTS
        .iter()
        .map(|(h, ip)| format!("{h}=https://{ip}:2380"))
        .collect();
    let mut pids = vec![];
    for (host, ip) in HOSTS {
        let mut script = format!("mkdir -p {ETCD_DIR}/pki && cd {ETCD_DIR}/pki && ");
        for (f, data) in &files {
            script.push_str(&format!("echo {data} | base64 -d > {f} && "));
        }
        script.push_str(&format!(
            "chmod 600 server.key && cd / && {{ setsid /usr/bin/etcd --name {host} \
             --data-dir {ETCD_DIR}/data \
             --listen-client-urls https://{ip}:2379 --advertise-client-urls https://{ip}:2379 \
             --listen-peer-urls https://{ip}:2380 --initial-advertise-peer-urls https://{ip}:2380 \
             --initial-cluster {} --initial-cluster-token kiln-ext-etcd \
             --client-cert-auth --trusted-ca-file {ETCD_DIR}/pki/ca.crt \
             --cert-file {ETCD_DIR}/pki/server.crt --key-file {ETCD_DIR}/pki/server.key \
             --peer-client-cert-auth --peer-trusted-ca-file {ETCD_DIR}/pki/ca.crt \
             --peer-cert-file {ETCD_DIR}/pki/server.crt --peer-key-file {ETCD_DIR}/pki/server.key \
             </dev/null >{ETCD_DIR}/etcd.log 2>&1 & echo $!; }}",
            initial.join(",")
        ));
        let pid = lab.ssh_ok(host, &script);
        pids.push((host.to_string(), pid.trim().to_string()));
    }
    pids
}

/// etcdctl against the external cluster with the client certificate, from inside the lab network.
fn etcdctl(lab: &TestLab, pki: &Path, args: &[&str]) -> String {
    let endpoints: Vec<String> = HOSTS
        .iter()
        .map(|(_, ip)| format!("https://{ip}:2379"))
        .collect();
    let p = |f: &str| pki.join(f).to_string_lossy().into_owned();
    let (ca, cert, key) = (p("ca.crt"), p("client.crt"), p("client.key"));
    let eps = format!("--endpoints={}", endpoints.join(","));
    let mut v = vec![
        "env",
        "ETCDCTL_API=3",
        "etcdctl",
        &eps,
        "--cacert",
        &ca,
        "--cert",
        &cert,
        "--key",
        &key,
    ];
    v.extend_from_slice(args);
    ok(&mut lab.in_lab(&v))
}

#[test]
#[ignore = "needs root: a lab host (CI runs it with --include-ignored)"]
fn a_cluster_on_an_external_etcd_runs_saves_and_resets_without_touching_it() {
    let lab = TestLab::up(&lab_name(), 3, true);
    let pki = lab.dir.join("etcd-pki");
    make_pki(&pki);
    let pids = start_etcd(&lab, &pki);
    let c = Cluster::on(
        lab,
        "  store:\n    external:\n      endpoints: [https://10.250.0.11:2379, \
         https://10.250.0.12:2379, https://10.250.0.13:2379]\n      caFile: etcd-pki/ca.crt\n      \
         certFile: etcd-pki/client.crt\n      keyFile: etcd-pki/client.key\n",
    );
    let lab = &c.lab;
    c.wait("the etcd cluster to answer", 30, || {
        let o = run(&mut lab.in_lab(&[
            "env",
            "ETCDCTL_API=3",
            "etcdctl",
            "--endpoints=https://10.250.0.11:2379",
            "--cacert",
            &pki.join("ca.crt").to_string_lossy(),
            "--cert",
            &pki.join("client.crt").to_string_lossy(),
            "--key",
            &pki.join("client.key").to_string_lossy(),
            "endpoint",
            "health",
        ]));
        o.status
            .success()
            .then_some(())
            .ok_or_else(|| String::from_utf8_lossy(&o.stderr).into_owned())
    });

    // init: the endpoints are checked first, no kiln-store is started, the API server uses etcd.
    let init = c.kiln(&["init", "--wait-timeout", "150"]);
    assert!(init.contains("external-etcd"), "{init}");
    let m = lab.ssh_ok(
        "host1",
        "ls /etc/kiln/manifests; stat -c %a /etc/kiln/pki/apiserver-etcd-client.key",
    );
    assert!(!m.contains("kiln-store.yaml"), "{m}");
    assert!(
        m.contains("kiln-apiserver.yaml") && m.ends_with("600"),
        "{m}"
    );
    let api = lab.ssh_ok(
        "host1",
        "grep -e --etcd- /etc/kiln/manifests/kiln-apiserver.yaml",
    );
    assert!(
        api.contains("--etcd-servers=https://10.250.0.11:2379,https://10.250.0.12:2379,https://10.250.0.13:2379")
            && api.contains("--etcd-keyfile=/etc/kiln/pki/apiserver-etcd-client.key"),
        "{api}"
    );
    assert!(
        lab.ssh_ok("host1", "pgrep -x kiln-store || echo none") == "none",
        "a kiln-store runs"
    );

    // Nodes Ready (init waited for them) and a Deployment runs.
    let nodes = c.kubectl(&["get", "nodes", "--no-headers"]);
    assert_eq!(nodes.matches(" Ready").count(), 3, "{nodes}");
    let pause = "10.250.0.1:5000/kiln/pause:1";
    c.kubectl(&[
        "create",
        "deployment",
        "web",
        "--image",
        pause,
        "--replicas",
        "2",
    ]);
    c.wait("the Deployment's replicas ready", 90, || {
        let r = c
            .try_kubectl(&[
                "get",
                "deployment",
                "web",
                "-o",
                "jsonpath={.status.readyReplicas}",
            ])
            .unwrap_or_default();
        (r == "2").then_some(()).ok_or(r)
    });

    // The API's keys are in the external etcd.
    let keys = etcdctl(
        lab,
        &pki,
        &["get", "/registry/deployments/", "--prefix", "--keys-only"],
    );
    assert!(keys.contains("/registry/deployments/default/web"), "{keys}");

    // kiln status: each endpoint's health.
    let status = c.kiln(&["status"]);
    for (_, ip) in HOSTS {
        assert!(
            status.contains(&format!("etcd  {ip}:2379 healthy: revision")),
            "{status}"
        );
    }

    // A snapshot through the external etcd; its status is etcdctl's.
    let out = lab.dir.join("backups");
    std::fs::create_dir_all(&out).unwrap();
    let saved = c.kiln(&["snapshot", "save", "-o", &out.to_string_lossy()]);
    assert!(
        saved.starts_with("saved ") && saved.contains("from 10.250.0.11:2379"),
        "{saved}"
    );
    let bundle = std::fs::read_dir(&out)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.to_string_lossy().ends_with(".kiln-bundle.tar"))
        .unwrap();
    let bundle_s = bundle.to_string_lossy().into_owned();
    let ours = ok(Command::new(&c.kiln).args(["snapshot", "status", &bundle_s, "-o", "json"]));
    let db = lab.dir.join("snapshot.db");
    ok(Command::new("sh").args([
        "-c",
        &format!("tar -xOf '{bundle_s}' snapshot.db > '{}'", db.display()),
    ]));
    let theirs = ok(Command::new("etcdctl").env("ETCDCTL_API", "3").args([
        "snapshot",
        "status",
        &db.to_string_lossy(),
        "-w",
        "json",
    ]));
    let ours: serde_json::Value = serde_json::from_str(&ours).unwrap();
    let theirs: serde_json::Value = serde_json::from_str(&theirs).unwrap();
    for f in ["hash", "revision", "totalKey", "totalSize"] {
        assert_eq!(ours[f], theirs[f], "{f}: kiln {ours} etcdctl {theirs}");
    }
    assert!(ours["revision"].as_i64().unwrap() > 1);

    // restore: the etcd operator's steps, nothing touched.
    let steps = c.kiln(&["snapshot", "restore", &bundle_s]);
    assert!(steps.starts_with("kiln restored nothing"), "{steps}");
    assert_eq!(
        steps.matches("etcdctl snapshot restore").count(),
        3,
        "{steps}"
    );
    assert!(steps.contains("--name host2 "), "{steps}");
    assert!(Path::new(&format!("{bundle_s}.snapshot.db")).exists());
    c.kubectl(&["get", "deployment", "web"]);

    // reset: kiln's copies of the certificates go, etcd and its data stay.
    let reset = c.kiln(&["reset"]);
    assert!(reset.contains("external-etcd-data"), "{reset}");
    assert_eq!(
        lab.ssh_ok(
            "host1",
            "test -e /etc/kiln/pki/apiserver-etcd-client.key && echo left || echo gone"
        ),
        "gone"
    );
    let after = etcdctl(
        lab,
        &pki,
        &["get", "/registry/deployments/default/web", "--keys-only"],
    );
    assert!(
        after.contains("/registry/deployments/default/web"),
        "{after}"
    );

    for (host, pid) in pids {
        let _ = run(&mut lab.ssh(&host, &format!("kill {pid}")));
    }
    let _ = std::fs::remove_file(&db);
}
