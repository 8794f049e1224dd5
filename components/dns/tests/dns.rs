//! kiln-dns against the real kiln-apiserver on a real etcd (kiln-testkit), queried with the real `dig`
//! (Debian's bind9-dnsutils), everything on 127.0.0.1: Services and EndpointSlices made with kube-rs
//! appear in DNS through the watches; names outside the zone go to an upstream this test runs.

use std::net::SocketAddr;
use std::time::Duration;

use hickory_proto::op::{Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::rdata::A;
use hickory_proto::rr::{Name, RData, Record, RecordType};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kiln_dns::DnsConfig;
use kiln_testkit::{eventually, free_port, Cluster};
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UdpSocket;

async fn http_get(addr: SocketAddr, path: &str) -> Option<String> {
    let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").as_bytes())
        .await
        .ok()?;
    let mut out = String::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_string(&mut out))
        .await
        .ok()?
        .ok()?;
    Some(out)
}

/// Runs `dig @127.0.0.1 -p <port> <args>` (one try, 2 s) and returns its stdout.
async fn dig(server: SocketAddr, args: &[&str]) -> String {
    let out = tokio::time::timeout(
        Duration::from_secs(20),
        tokio::process::Command::new("dig")
            .arg(format!("@{}", server.ip()))
            .arg("-p")
            .arg(server.port().to_string())
            .args(["+tries=1", "+time=2"])
            .args(args)
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("dig finishes")
    .expect("dig runs (apt-get install bind9-dnsutils)");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `dig +short`, sorted.
async fn short(server: SocketAddr, args: &[&str]) -> Vec<String> {
    let mut all = vec!["+short"];
    all.extend_from_slice(args);
    let mut lines: Vec<String> = dig(server, &all)
        .await
        .lines()
        .filter(|l| !l.starts_with(";;"))
        .map(str::to_string)
        .collect();
    lines.sort();
    lines
}

/// (status, answers, authority records) from dig's header line, e.g. ("NXDOMAIN", 0, 1).
async fn status(server: SocketAddr, args: &[&str]) -> (String, u32, u32) {
    let out = dig(server, args).await;
    let field = |key: &str| {
        out.split(key)
            .nth(1)
            .and_then(|r| r.split([',', '\n']).next())
            .map(|v| v.trim().to_string())
            .unwrap_or_else(|| panic!("no {key} in dig output:\n{out}"))
    };
    let count = |key: &str| field(key).parse::<u32>().unwrap();
    (field("status: "), count("ANSWER: "), count("AUTHORITY: "))
}

/// One A question straight over UDP (no process per query, so the timing below is kiln-dns's):
/// the rcode and the answered addresses; None when nothing came back within 500 ms.
async fn ask_a(server: SocketAddr, qname: &str) -> Option<(ResponseCode, Vec<String>)> {
    let sock = UdpSocket::bind("127.0.0.1:0").await.ok()?;
    let mut q = Message::new(rand_id(), MessageType::Query, OpCode::Query);
    q.metadata.recursion_desired = true;
    q.add_query(Query::query(Name::from_ascii(qname).ok()?, RecordType::A));
    sock.send_to(&q.to_vec().ok()?, server).await.ok()?;
    let mut buf = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_millis(500), sock.recv(&mut buf))
        .await
        .ok()?
        .ok()?;
    let m = Message::from_vec(&buf[..n]).ok()?;
    let addrs = m.answers.iter().map(|r| r.data.to_string()).collect();
    Some((m.metadata.response_code, addrs))
}

fn rand_id() -> u16 {
    use std::sync::atomic::{AtomicU16, Ordering};
    static NEXT: AtomicU16 = AtomicU16::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// A one-zone authoritative responder for `example.test` on 127.0.0.1 (UDP), built on hickory-proto:
/// `outside.example.test` and `www.example.test` have A records, everything else is NXDOMAIN.
async fn upstream() -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = sock.local_addr().unwrap();
    let task = tokio::spawn(async move {
        let mut buf = vec![0u8; 4096];
        loop {
            let Ok((n, peer)) = sock.recv_from(&mut buf).await else {
                continue;
            };
            let Ok(req) = Message::from_vec(&buf[..n]) else {
                continue;
            };
            let Some(q) = req.queries.first() else {
                continue;
            };
            let mut resp = Message::response(req.metadata.id, req.metadata.op_code);
            resp.metadata.authoritative = true;
            resp.queries = req.queries.clone();
            let last = match q.name().to_lowercase().to_ascii().as_str() {
                "outside.example.test." => Some(53),
                "www.example.test." => Some(80),
                _ => None,
            };
            match (last, q.query_type()) {
                (Some(last), RecordType::A) => resp.answers.push(Record::from_rdata(
                    q.name().clone(),
                    60,
                    RData::A(A([192, 0, 2, last].into())),
                )),
                (Some(_), _) => {}
                (None, _) => resp.metadata.response_code = ResponseCode::NXDomain,
            }
            let _ = sock.send_to(&resp.to_vec().unwrap(), peer).await;
        }
    });
    (addr, task)
}

fn obj<T: k8s_openapi::serde::de::DeserializeOwned>(v: serde_json::Value) -> T {
    serde_json::from_value(v).unwrap()
}

fn pg_slice(ready_pg1: bool) -> EndpointSlice {
    obj(json!({
        "metadata": {"name": "pg-abc", "namespace": "default",
                     "labels": {"kubernetes.io/service-name": "pg"}},
        "addressType": "IPv4",
        "endpoints": [
            {"addresses": ["10.244.1.5"], "hostname": "pg-0", "conditions": {"ready": true}},
            {"addresses": ["10.244.1.6"], "hostname": "pg-1", "conditions": {"ready": ready_pg1}},
            {"addresses": ["10.244.1.7"], "conditions": {"ready": true}}
        ],
        "ports": [{"name": "pg", "port": 5432, "protocol": "TCP"}]
    }))
}

#[tokio::test]
async fn cluster_dns_from_watches_queried_with_dig() {
    let cluster = Cluster::start().await;
    let admin = cluster.admin().await;
    // kiln-dns runs as a user that may not list anything yet: /ready must stay 503
    let kubeconfig = cluster.kubeconfig_for("kiln-dns-test", &[]);
    let (upstream_addr, upstream_task) = upstream().await;

    let dns: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let health: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let cfg = DnsConfig {
        kubeconfig,
        listen: dns,
        cluster_domain: kiln_dns::config::parse_cluster_domain("cluster.local").unwrap(),
        ttl: 5,
        upstreams: vec![upstream_addr],
        cache_size: 100,
        health_bind_address: health,
        forward_timeout: Duration::from_secs(2),
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(kiln_dns::run(cfg, async {
        let _ = stopped.await;
    }));

    let alive = eventually("/health answers", || async {
        http_get(health, "/health")
            .await
            .filter(|r| r.starts_with("HTTP/1.0 200"))
    })
    .await;
    assert!(alive.ends_with("\r\n\r\nOK"), "{alive}");
    for path in ["/healthz", "/livez"] {
        let r = http_get(health, path).await.unwrap();
        assert!(r.starts_with("HTTP/1.0 200"), "{path}: {r}");
    }
    for path in ["/ready", "/readyz"] {
        let r = http_get(health, path).await.unwrap();
        assert!(
            r.starts_with("HTTP/1.0 503"),
            "{path} before the first list: {r}"
        );
        assert!(
            r.contains("waiting for the first list of services, endpointslices"),
            "{r}"
        );
    }
    let m = http_get(health, "/metrics").await.unwrap();
    assert!(m.contains("\nkiln_dns_ready 0\n"), "{m}");
    // Before the first lists, a name kiln-dns does not hold yet may exist: SERVFAIL (clients try
    // again, elsewhere), never an NXDOMAIN they would cache — as CoreDNS before its informers sync.
    assert_eq!(
        status(dns, &["kubernetes.default.svc.cluster.local", "A"])
            .await
            .0,
        "SERVFAIL"
    );

    // grant what kiln-dns needs (list + watch); the watches retry and sync
    let role: ClusterRole = obj(json!({
        "metadata": {"name": "kiln-dns-test"},
        "rules": [
            {"apiGroups": [""], "resources": ["services"], "verbs": ["list", "watch"]},
            {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]}
        ]
    }));
    Api::<ClusterRole>::all(admin.clone())
        .create(&PostParams::default(), &role)
        .await
        .unwrap();
    let binding: ClusterRoleBinding = obj(json!({
        "metadata": {"name": "kiln-dns-test"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "kiln-dns-test"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "kiln-dns-test"}]
    }));
    Api::<ClusterRoleBinding>::all(admin.clone())
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
    eventually("/ready 200 after the first lists", || async {
        http_get(health, "/ready")
            .await
            .filter(|r| r.starts_with("HTTP/1.0 200"))
    })
    .await;
    assert!(http_get(health, "/readyz")
        .await
        .unwrap()
        .starts_with("HTTP/1.0 200"));

    // Services and a slice, through the API
    let services: Api<Service> = Api::namespaced(admin.clone(), "default");
    let slices: Api<EndpointSlice> = Api::namespaced(admin.clone(), "default");
    let web = services
        .create(
            &PostParams::default(),
            &obj(json!({
                "metadata": {"name": "web", "namespace": "default"},
                "spec": {"ports": [{"name": "http", "port": 80, "targetPort": 8080}, {"name": "alt", "port": 81}]}
            })),
        )
        .await
        .unwrap();
    let web_ip = web.spec.unwrap().cluster_ip.expect("a ClusterIP");
    for svc in [
        json!({"metadata": {"name": "pg", "namespace": "default"},
               "spec": {"clusterIP": "None", "ports": [{"name": "pg", "port": 5432}]}}),
        json!({"metadata": {"name": "ext", "namespace": "default"},
               "spec": {"type": "ExternalName", "externalName": "www.example.test"}}),
    ] {
        services
            .create(&PostParams::default(), &obj(svc))
            .await
            .unwrap();
    }
    slices
        .create(&PostParams::default(), &pg_slice(false))
        .await
        .unwrap();

    // ClusterIP A, over UDP and TCP
    eventually("web A", || async {
        (short(dns, &["web.default.svc.cluster.local", "A"]).await == [web_ip.as_str()])
            .then_some(())
    })
    .await;
    assert_eq!(
        short(dns, &["+tcp", "web.default.svc.cluster.local", "A"]).await,
        [web_ip.as_str()]
    );
    assert_eq!(
        short(dns, &["WEB.Default.SVC.Cluster.Local", "A"]).await,
        [web_ip.as_str()],
        "names compare case-insensitively"
    );
    // NODATA: the name exists, no AAAA (NOERROR, no answer, the SOA in authority)
    assert_eq!(
        status(dns, &["web.default.svc.cluster.local", "AAAA"]).await,
        ("NOERROR".to_string(), 0, 1)
    );
    // NXDOMAIN for a missing Service, with the SOA
    assert_eq!(
        status(dns, &["missing.default.svc.cluster.local", "A"]).await,
        ("NXDOMAIN".to_string(), 0, 1)
    );
    // SRV of a ClusterIP Service
    assert_eq!(
        short(dns, &["_http._tcp.web.default.svc.cluster.local", "SRV"]).await,
        ["0 100 80 web.default.svc.cluster.local."]
    );
    // PTR of the ClusterIP
    assert_eq!(
        short(dns, &["-x", &web_ip]).await,
        ["web.default.svc.cluster.local."]
    );
    // the schema version
    assert_eq!(
        short(dns, &["dns-version.cluster.local", "TXT"]).await,
        ["\"1.1.0\""]
    );
    // SOA and NS of the apex
    let soa = short(dns, &["cluster.local", "SOA"]).await;
    assert!(
        soa.len() == 1 && soa[0].starts_with("ns.dns.cluster.local. hostmaster.cluster.local. "),
        "{soa:?}"
    );

    // headless: the ready endpoints, following slice changes
    eventually("pg A", || async {
        (short(dns, &["pg.default.svc.cluster.local", "A"]).await == ["10.244.1.5", "10.244.1.7"])
            .then_some(())
    })
    .await;
    assert_eq!(
        short(dns, &["pg-0.pg.default.svc.cluster.local", "A"]).await,
        ["10.244.1.5"],
        "the StatefulSet-style endpoint hostname"
    );
    assert_eq!(
        status(dns, &["pg-1.pg.default.svc.cluster.local", "A"])
            .await
            .0,
        "NXDOMAIN",
        "not ready yet"
    );
    let srv = dig(
        dns,
        &[
            "+noall",
            "+answer",
            "+additional",
            "_pg._tcp.pg.default.svc.cluster.local",
            "SRV",
        ],
    )
    .await;
    // dig aligns columns with tabs; compare with single spaces
    let srv: Vec<String> = srv
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();
    for want in [
        "_pg._tcp.pg.default.svc.cluster.local. 5 IN SRV 0 50 5432 10-244-1-7.pg.default.svc.cluster.local.",
        "_pg._tcp.pg.default.svc.cluster.local. 5 IN SRV 0 50 5432 pg-0.pg.default.svc.cluster.local.",
        "10-244-1-7.pg.default.svc.cluster.local. 5 IN A 10.244.1.7",
        "pg-0.pg.default.svc.cluster.local. 5 IN A 10.244.1.5",
    ] {
        assert!(srv.iter().any(|l| l == want), "{want:?} not in {srv:#?}");
    }
    assert_eq!(
        short(dns, &["-x", "10.244.1.5"]).await,
        ["pg-0.pg.default.svc.cluster.local."]
    );
    let mut slice = slices.get("pg-abc").await.unwrap();
    slice.endpoints = pg_slice(true).endpoints;
    slices
        .replace("pg-abc", &PostParams::default(), &slice)
        .await
        .unwrap();
    eventually("pg-1 ready", || async {
        (short(dns, &["pg.default.svc.cluster.local", "A"]).await
            == ["10.244.1.5", "10.244.1.6", "10.244.1.7"])
        .then_some(())
    })
    .await;
    assert_eq!(
        short(dns, &["pg-1.pg.default.svc.cluster.local", "A"]).await,
        ["10.244.1.6"]
    );

    // Watch-driven: a Service created through the API answers within 100 ms (the median of five,
    // asked every 2 ms from the moment the create returned; the bench measures the p99).
    let mut took = Vec::new();
    for i in 0..5 {
        let name = format!("fast-{i}");
        let created = services
            .create(
                &PostParams::default(),
                &obj(json!({"metadata": {"name": name, "namespace": "default"},
                            "spec": {"ports": [{"port": 80}]}})),
            )
            .await
            .unwrap();
        let start = std::time::Instant::now();
        let ip = created.spec.unwrap().cluster_ip.expect("a ClusterIP");
        let qname = format!("{name}.default.svc.cluster.local.");
        loop {
            if let Some((ResponseCode::NoError, addrs)) = ask_a(dns, &qname).await {
                assert_eq!(addrs, [ip.as_str()]);
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(5),
                "{qname} not answered within 5 s of its create"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        took.push(start.elapsed());
    }
    took.sort();
    assert!(
        took[2] <= Duration::from_millis(100),
        "create → answered, sorted: {took:?}"
    );

    // ExternalName: the CNAME, and its target resolved upstream
    assert_eq!(
        short(dns, &["ext.default.svc.cluster.local", "A"]).await,
        ["192.0.2.80", "www.example.test."]
    );
    // outside the zone: forwarded, over UDP and TCP; a missing name upstream stays NXDOMAIN
    assert_eq!(
        short(dns, &["outside.example.test", "A"]).await,
        ["192.0.2.53"]
    );
    assert_eq!(
        short(dns, &["+tcp", "outside.example.test", "A"]).await,
        ["192.0.2.53"]
    );
    assert_eq!(status(dns, &["nope.example.test", "A"]).await.0, "NXDOMAIN");

    // deletions: the slice (headless without endpoints is NXDOMAIN), then the Service
    slices
        .delete("pg-abc", &DeleteParams::default())
        .await
        .unwrap();
    eventually("pg without endpoints", || async {
        (status(dns, &["pg.default.svc.cluster.local", "A"]).await.0 == "NXDOMAIN").then_some(())
    })
    .await;
    services
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    eventually("web deleted", || async {
        (status(dns, &["web.default.svc.cluster.local", "A"]).await.0 == "NXDOMAIN").then_some(())
    })
    .await;

    // what is left: pg, ext and whatever the API server made itself (the `kubernetes` Service)
    let left = Api::<Service>::all(admin.clone())
        .list(&Default::default())
        .await
        .unwrap()
        .items;
    if let Some(k) = left
        .iter()
        .find(|s| s.metadata.name.as_deref() == Some("kubernetes"))
    {
        let ip = k.spec.as_ref().and_then(|s| s.cluster_ip.clone()).unwrap();
        assert_eq!(
            short(dns, &["kubernetes.default.svc.cluster.local"]).await,
            [ip]
        );
    }
    let services_left = format!("\nkiln_dns_services {}\n", left.len());
    let m = http_get(health, "/metrics").await.unwrap();
    for want in [
        services_left.as_str(),
        "\nkiln_dns_ready 1\n",
        "\nkiln_dns_requests_total{proto=\"udp\",type=\"A\",rcode=\"NOERROR\"} ",
        "\nkiln_dns_requests_total{proto=\"udp\",type=\"A\",rcode=\"NXDOMAIN\"} ",
        "\nkiln_dns_requests_total{proto=\"tcp\",type=\"A\",rcode=\"NOERROR\"} ",
        "\nkiln_dns_requests_total{proto=\"udp\",type=\"SRV\",rcode=\"NOERROR\"} ",
        "\nkiln_dns_request_duration_seconds_bucket{le=\"+Inf\"} ",
        "\nkiln_dns_cache_hits_total 1\n",
        "# TYPE kiln_dns_cache_misses_total counter\n",
        "# TYPE kiln_dns_forward_errors_total counter\n",
        "\nkiln_dns_forward_errors_total 0\n",
    ] {
        assert!(m.contains(want), "{want:?} not in /metrics:\n{m}");
    }

    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(10), server)
        .await
        .expect("kiln-dns stops")
        .unwrap()
        .expect("clean exit");
    upstream_task.abort();
    drop(cluster);
}
