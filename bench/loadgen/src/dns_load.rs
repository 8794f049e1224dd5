//! kiln-dns against an authoritative anchor (bench/dns.sh). The store and a release kiln-apiserver run
//! as their own processes (harness.rs) and hold N Services (~70% ClusterIP with a named port, ~20%
//! headless with 3 ready endpoints in an EndpointSlice, ~10% ExternalName) in a few namespaces; then
//! - the anchor, Debian's unbound, serves the same records from `local-data` (dns_zone.rs), and the
//!   external names (`ext-<k>.example.test`) too;
//! - the release kiln-dns watches them through the API and forwards out-of-zone names to the anchor
//!   (`--upstream`), answering them from its cache after the first query.
//!
//! Both get `server_threads` threads (unbound `num-threads`, kiln-dns `TOKIO_WORKER_THREADS`) on the
//! same cores. Measured, interleaved kiln, unbound, kiln, unbound with the same dnsperf command and
//! query file: throughput (dnsperf at full speed) with each server's CPU time per query, then latency
//! at a fixed rate (dnsperf `-v`: every answer's latency, so p50/p99 are dnsperf's own timings). Then a
//! Service created through the API → kiln-dns answering its ClusterIP (queried every 2 ms), and the
//! servers' RSS. Every query kind is first checked for a right answer on both servers.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kiln_testkit::{client_from_kubeconfig, free_port};
use kube::api::{Api, PostParams};
use serde_json::json;
use tokio::net::UdpSocket;

use crate::dns_wire::{self, Response, TYPE_A};
use crate::dns_zone::{self, DnsperfRun, Expect, Kind, Query, QueryKind, Svc};
use crate::harness::{
    cpu_time, http_get, memory_mib, metrics, ms, spawn_tied, start_apiserver, status_field, RunDir,
    StartError,
};
use crate::stats::{percentile, summarize, Summary};

#[derive(Debug, thiserror::Error)]
pub enum DnsBenchError {
    #[error(transparent)]
    Start(#[from] StartError),
    #[error("API: {0}")]
    Api(#[from] kube::Error),
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
    #[error("starting {bin}: {source}")]
    Spawn { bin: String, source: std::io::Error },
    #[error("{what}; its log ends:\n{log}")]
    Timeout { what: String, log: String },
    #[error("dnsperf: {0}")]
    Dnsperf(String),
}

/// What `kiln-bench dns` is asked for (its flags).
#[derive(Debug, Clone, clap::Args)]
pub struct DnsOpts {
    /// The kiln-apiserver binary to start.
    #[arg(long)]
    pub apiserver_bin: String,
    /// The kiln-dns binary to start.
    #[arg(long)]
    pub dns_bin: String,
    #[arg(long, default_value = "/usr/sbin/unbound")]
    pub unbound_bin: String,
    #[arg(long, default_value = "/usr/bin/dnsperf")]
    pub dnsperf_bin: String,
    #[arg(long, default_value_t = 1000)]
    pub services: usize,
    #[arg(long, default_value_t = 4)]
    pub namespaces: usize,
    /// Lines of the query file (dnsperf loops over it).
    #[arg(long, default_value_t = 20_000)]
    pub queries: usize,
    /// Seconds of each dnsperf run (4 throughput + 4 latency runs).
    #[arg(long, default_value_t = 10)]
    pub seconds: u64,
    /// dnsperf -c: UDP sockets.
    #[arg(long, default_value_t = 8)]
    pub clients: usize,
    /// dnsperf -T: its threads.
    #[arg(long, default_value_t = 1)]
    pub dnsperf_threads: usize,
    /// dnsperf -Q in the throughput runs (default: unlimited).
    #[arg(long)]
    pub max_qps: Option<u64>,
    /// dnsperf -Q in the latency runs.
    #[arg(long, default_value_t = 5000)]
    pub latency_qps: u64,
    /// Services created one at a time for create → resolvable.
    #[arg(long, default_value_t = 50)]
    pub updates: usize,
    /// Threads of each server (unbound num-threads, kiln-dns TOKIO_WORKER_THREADS).
    #[arg(long, default_value_t = 2)]
    pub server_threads: usize,
}

#[derive(Debug, Default, serde::Serialize)]
pub struct ServerReport {
    /// dnsperf queries/s, mean of the throughput runs, and each run.
    pub qps: f64,
    pub qps_runs: Vec<f64>,
    /// dnsperf's average latency in the throughput runs (at full load), ms.
    pub loaded_avg_latency_ms: Vec<f64>,
    /// The server's own CPU time (user + system, all threads) per answered query, µs, in the
    /// throughput runs.
    pub cpu_us_per_query: Vec<f64>,
    /// Queries dnsperf gave up on (throughput + latency runs).
    pub lost: u64,
    /// Response codes over every measured run.
    pub rcodes: BTreeMap<String, u64>,
    /// Latency at `latency_qps`, every answer of both latency runs, ms.
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub latency_runs_p99_ms: Vec<f64>,
    /// RSS once serving (before any load), after the load, and the peak, MiB.
    pub rss_ready_mib: f64,
    pub rss_loaded_mib: f64,
    pub rss_peak_mib: f64,
    /// The process's threads while serving.
    pub threads: f64,
}

#[derive(Debug, serde::Serialize)]
pub struct KindCheck {
    pub checked: usize,
    pub kiln_ok: usize,
    pub unbound_ok: usize,
    /// The first wrong answer of each, if any.
    pub kiln_error: Option<String>,
    pub unbound_error: Option<String>,
}

#[derive(Debug, serde::Serialize)]
pub struct DnsReport {
    pub services: usize,
    pub namespaces: usize,
    pub externals: usize,
    pub queries_in_file: usize,
    pub mix_percent: BTreeMap<String, u32>,
    pub seconds: u64,
    pub clients: usize,
    pub dnsperf_threads: usize,
    pub server_threads: usize,
    pub latency_qps: u64,
    /// Creating every Service and EndpointSlice, 32 requests in flight.
    pub create_all_seconds: f64,
    /// kiln-dns started → /ready answering 200 (its first full sync of N Services).
    pub kiln_ready_ms: f64,
    pub checks: BTreeMap<String, KindCheck>,
    pub kiln: ServerReport,
    pub unbound: ServerReport,
    /// Service create sent → kiln-dns answers its ClusterIP.
    pub update: Summary,
    /// Of that, the API create itself (request sent → response), p50 and p99.
    pub update_write_p50_ms: f64,
    pub update_write_p99_ms: f64,
    /// The rest: the create's response → kiln-dns answers (the watch event and kiln-dns's update).
    pub update_after_write: Summary,
    pub update_timeouts: usize,
    /// kiln-dns's own metrics at the end (samples named kiln*, no histogram buckets).
    pub kiln_metrics: BTreeMap<String, f64>,
}

/// A server process the run started; stopped on drop.
struct Proc {
    child: Child,
    log: std::path::PathBuf,
}

impl Proc {
    fn spawn(cmd: &mut Command, bin: &str, log: std::path::PathBuf) -> Result<Proc, DnsBenchError> {
        let file = std::fs::File::create(&log)?;
        let child = spawn_tied(cmd.stdout(Stdio::null()).stderr(file)).map_err(|source| {
            DnsBenchError::Spawn {
                bin: bin.to_string(),
                source,
            }
        })?;
        Ok(Proc { child, log })
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A port free for both UDP and TCP on 127.0.0.1.
fn free_dns_port() -> u16 {
    loop {
        let p = free_port();
        if std::net::UdpSocket::bind(("127.0.0.1", p)).is_ok() {
            return p;
        }
    }
}

/// A UDP client of one server: one query at a time, ids in sequence.
struct Asker {
    sock: UdpSocket,
    id: u16,
}

impl Asker {
    async fn new(server: SocketAddr) -> std::io::Result<Asker> {
        let sock = UdpSocket::bind("127.0.0.1:0").await?;
        sock.connect(server).await?;
        Ok(Asker { sock, id: 0 })
    }

    /// Sends the query and waits up to `wait` for its answer (stale answers are skipped).
    async fn ask(&mut self, name: &str, qtype: u16, wait: Duration) -> Result<Response, String> {
        self.id = self.id.wrapping_add(1);
        let id = self.id;
        self.sock
            .send(&dns_wire::query(id, name, qtype))
            .await
            .map_err(|e| e.to_string())?;
        let deadline = tokio::time::Instant::now() + wait;
        let mut buf = [0u8; 4096];
        loop {
            let n = tokio::time::timeout_at(deadline, self.sock.recv(&mut buf))
                .await
                .map_err(|_| format!("{name}: no answer within {wait:?}"))?
                .map_err(|e| e.to_string())?;
            match dns_wire::parse(&buf[..n]) {
                Ok(r) if r.id == id => return Ok(r),
                Ok(_) => continue,
                Err(e) => return Err(format!("{name}: {e}")),
            }
        }
    }

    /// `ask`, retried once after a lost datagram.
    async fn ask_twice(&mut self, q: &Query) -> Result<Response, String> {
        match self.ask(&q.name, q.qtype, Duration::from_secs(1)).await {
            Ok(r) => Ok(r),
            Err(_) => self.ask(&q.name, q.qtype, Duration::from_secs(2)).await,
        }
    }
}

fn service_object(s: &Svc, externals: usize) -> Service {
    let port = json!([{"name": "http", "port": dns_zone::SERVICE_PORT,
                       "targetPort": dns_zone::TARGET_PORT, "protocol": "TCP"}]);
    let spec = match s.kind {
        Kind::ClusterIp => json!({"ports": port}),
        Kind::Headless => json!({"clusterIP": "None", "ports": port}),
        Kind::ExternalName => json!({"type": "ExternalName",
            "externalName": s.external_target(externals).trim_end_matches('.')}),
    };
    serde_json::from_value(json!({
        "metadata": {"name": s.name, "namespace": s.namespace},
        "spec": spec,
    }))
    .expect("service JSON")
}

fn slice_object(s: &Svc) -> EndpointSlice {
    serde_json::from_value(json!({
        "metadata": {"name": format!("{}-1", s.name), "namespace": s.namespace,
                     "labels": {"kubernetes.io/service-name": s.name}},
        "addressType": "IPv4",
        "endpoints": s.endpoints().iter().enumerate()
            .map(|(k, a)| json!({"addresses": [a.to_string()],
                                 "hostname": dns_zone::endpoint_hostname(k),
                                 "conditions": {"ready": true}}))
            .collect::<Vec<_>>(),
        "ports": [{"name": "http", "port": dns_zone::TARGET_PORT, "protocol": "TCP"}]
    }))
    .expect("slice JSON")
}

fn cluster_ip(s: &Service) -> Option<Ipv4Addr> {
    s.spec.as_ref()?.cluster_ip.as_deref()?.parse().ok()
}

/// Creates the namespaces, the Services and the headless Services' EndpointSlices; fills in the
/// ClusterIPs the API server allocated.
async fn create_all(
    client: &kube::Client,
    svcs: &mut [Svc],
    namespaces: usize,
    externals: usize,
) -> Result<(), DnsBenchError> {
    let ns_api: Api<Namespace> = Api::all(client.clone());
    for i in 0..namespaces {
        let ns: Namespace =
            serde_json::from_value(json!({"metadata": {"name": dns_zone::namespace(i)}}))
                .expect("namespace JSON");
        ns_api.create(&PostParams::default(), &ns).await?;
    }
    let created: Vec<Result<Option<Ipv4Addr>, kube::Error>> = futures::stream::iter(svcs.iter())
        .map(|s| {
            let svc_api: Api<Service> = Api::namespaced(client.clone(), &s.namespace);
            let slice_api: Api<EndpointSlice> = Api::namespaced(client.clone(), &s.namespace);
            async move {
                let made = svc_api
                    .create(&PostParams::default(), &service_object(s, externals))
                    .await?;
                if s.kind == Kind::Headless {
                    slice_api
                        .create(&PostParams::default(), &slice_object(s))
                        .await?;
                }
                Ok(cluster_ip(&made))
            }
        })
        .buffered(32)
        .collect()
        .await;
    for (s, ip) in svcs.iter_mut().zip(created) {
        let ip = ip?;
        if s.kind == Kind::ClusterIp {
            s.cluster_ip = ip;
        }
    }
    Ok(())
}

/// Every query kind, up to 20 names each, asked of both servers.
async fn check_answers(
    queries: &[Query],
    kiln: SocketAddr,
    unbound: SocketAddr,
) -> Result<BTreeMap<String, KindCheck>, DnsBenchError> {
    let (mut k, mut u) = (Asker::new(kiln).await?, Asker::new(unbound).await?);
    let mut out = BTreeMap::new();
    for (kind, _) in QueryKind::MIX {
        let mut c = KindCheck {
            checked: 0,
            kiln_ok: 0,
            unbound_ok: 0,
            kiln_error: None,
            unbound_error: None,
        };
        for q in queries.iter().filter(|q| q.kind == kind).take(20) {
            c.checked += 1;
            for (asker, ok, err) in [
                (&mut k, &mut c.kiln_ok, &mut c.kiln_error),
                (&mut u, &mut c.unbound_ok, &mut c.unbound_error),
            ] {
                match asker.ask_twice(q).await.and_then(|r| q.check(&r)) {
                    Ok(()) => *ok += 1,
                    Err(e) => {
                        err.get_or_insert(e);
                    }
                }
            }
        }
        let name = serde_json::to_value(kind).expect("kind name");
        out.insert(name.as_str().unwrap_or_default().to_string(), c);
    }
    Ok(out)
}

/// One dnsperf run against `port` with the run's parameters plus `extra`.
async fn dnsperf(
    o: &DnsOpts,
    file: &Path,
    port: u16,
    extra: &[String],
) -> Result<DnsperfRun, DnsBenchError> {
    let out = tokio::process::Command::new(&o.dnsperf_bin)
        .args(["-s", "127.0.0.1", "-p", &port.to_string()])
        .arg("-d")
        .arg(file)
        .args([
            "-c",
            &o.clients.to_string(),
            "-T",
            &o.dnsperf_threads.to_string(),
        ])
        .args(extra)
        .stdin(Stdio::null())
        .output()
        .await
        .map_err(|e| DnsBenchError::Dnsperf(format!("{}: {e}", o.dnsperf_bin)))?;
    let text = String::from_utf8_lossy(&out.stdout);
    dns_zone::parse_dnsperf(&text).ok_or_else(|| {
        DnsBenchError::Dnsperf(format!(
            "no statistics ({}); stderr: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ))
    })
}

fn add_rcodes(into: &mut BTreeMap<String, u64>, run: &DnsperfRun) {
    for (code, n) in &run.rcodes {
        *into.entry(code.clone()).or_default() += n;
    }
}

struct UpdateTimes {
    seen: Summary,
    after_write: Summary,
    write_p50_ms: f64,
    write_p99_ms: f64,
    timeouts: usize,
}

/// Service created through the API → kiln-dns answers its ClusterIP, queried every 2 ms.
async fn update_latency(
    client: &kube::Client,
    kiln: SocketAddr,
    rounds: usize,
) -> Result<UpdateTimes, DnsBenchError> {
    let ns = dns_zone::namespace(0);
    let api: Api<Service> = Api::namespaced(client.clone(), &ns);
    let mut asker = Asker::new(kiln).await?;
    let (mut seen, mut after, mut writes, mut timeouts) = (Vec::new(), Vec::new(), Vec::new(), 0);
    let wall = Instant::now();
    for r in 0..rounds {
        let svc = Svc {
            index: r,
            namespace: ns.clone(),
            name: format!("upd-{r:04}"),
            kind: Kind::ClusterIp,
            cluster_ip: None,
        };
        let t0 = Instant::now();
        let made = api
            .create(&PostParams::default(), &service_object(&svc, 1))
            .await?;
        let written = Instant::now();
        writes.push(written - t0);
        let q = Query {
            kind: QueryKind::ClusterIpA,
            name: svc.fqdn(),
            qtype: TYPE_A,
            expect: Expect::A(cluster_ip(&made).into_iter().collect()),
        };
        let deadline = t0 + Duration::from_secs(10);
        let mut tick = tokio::time::interval(Duration::from_millis(2));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let answered = asker
                .ask(&q.name, q.qtype, Duration::from_millis(2))
                .await
                .is_ok_and(|resp| q.check(&resp).is_ok());
            if answered {
                seen.push(t0.elapsed());
                after.push(written.elapsed());
                break;
            }
            if Instant::now() > deadline {
                timeouts += 1;
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    writes.sort();
    Ok(UpdateTimes {
        seen: summarize(seen, timeouts, wall.elapsed()),
        after_write: summarize(after, timeouts, wall.elapsed()),
        write_p50_ms: ms(percentile(&writes, 50.0)),
        write_p99_ms: ms(percentile(&writes, 99.0)),
        timeouts,
    })
}

pub async fn run(o: &DnsOpts) -> Result<DnsReport, DnsBenchError> {
    let dir = RunDir::create("dns")?;
    measure(o, &dir.0).await
}

async fn measure(o: &DnsOpts, dir: &Path) -> Result<DnsReport, DnsBenchError> {
    let api = start_apiserver(&o.apiserver_bin, dir).await?;
    let client = client_from_kubeconfig(&api.kubeconfig).await;
    let externals = dns_zone::externals(o.services);
    let mut svcs = dns_zone::plan(o.services, o.namespaces);
    let t = Instant::now();
    create_all(&client, &mut svcs, o.namespaces, externals).await?;
    let create_all_seconds = t.elapsed().as_secs_f64();
    eprintln!(
        "kiln-bench dns: {} Services created in {create_all_seconds:.1} s",
        o.services
    );

    // the anchor
    let records = dns_zone::records(&svcs, externals, 5);
    let conf = dir.join("unbound.conf");
    let unbound_port = free_dns_port();
    std::fs::write(
        &conf,
        dns_zone::unbound_conf(
            &dir.to_string_lossy(),
            unbound_port,
            o.server_threads,
            &records,
        ),
    )?;
    let unbound = Proc::spawn(
        Command::new(&o.unbound_bin).arg("-d").arg("-c").arg(&conf),
        &o.unbound_bin,
        dir.join("unbound.log"),
    )?;
    let unbound_addr: SocketAddr = ([127, 0, 0, 1], unbound_port).into();
    let probe = Query {
        kind: QueryKind::ExternalA,
        name: dns_zone::external_name(0),
        qtype: TYPE_A,
        expect: Expect::A(vec![dns_zone::external_ip(0)]),
    };
    wait_answering(&unbound, unbound_addr, &probe, Duration::from_secs(60)).await?;

    // kiln-dns, over the objects already there: /ready is its first full sync of them
    let (dns_port, health_port) = (free_dns_port(), free_port());
    let kiln_addr: SocketAddr = ([127, 0, 0, 1], dns_port).into();
    let health: SocketAddr = ([127, 0, 0, 1], health_port).into();
    let started = Instant::now();
    let kiln = Proc::spawn(
        Command::new(&o.dns_bin)
            .arg("--kubeconfig")
            .arg(&api.kubeconfig)
            .args(["--listen", &kiln_addr.to_string()])
            .args(["--upstream", &unbound_addr.to_string()])
            .args(["--health-bind-address", &health.to_string()])
            .env("TOKIO_WORKER_THREADS", o.server_threads.to_string()),
        &o.dns_bin,
        dir.join("kiln-dns.log"),
    )?;
    let deadline = started + Duration::from_secs(300);
    loop {
        if let Some((200, _)) = http_get(health, "/ready").await {
            break;
        }
        if Instant::now() > deadline {
            return Err(DnsBenchError::Timeout {
                what: format!("kiln-dns not ready on {health} within 300 s"),
                log: kiln.log_tail(),
            });
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let kiln_ready_ms = ms(started.elapsed());
    eprintln!("kiln-bench dns: kiln-dns ready in {kiln_ready_ms:.0} ms");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut kr = ServerReport {
        rss_ready_mib: memory_mib(kiln.pid(), "VmRSS:"),
        ..Default::default()
    };
    let mut ur = ServerReport {
        rss_ready_mib: memory_mib(unbound.pid(), "VmRSS:"),
        ..Default::default()
    };

    // the queries, and every kind of them checked on both servers
    let queries = dns_zone::query_mix(&svcs, externals, o.queries, 0x5EED_D115);
    let file = dir.join("queries.txt");
    let mut text = String::with_capacity(queries.len() * 48);
    for q in &queries {
        text.push_str(&q.dnsperf_line());
        text.push('\n');
    }
    std::fs::write(&file, text)?;
    let checks = check_answers(&queries, kiln_addr, unbound_addr).await?;
    for (kind, c) in &checks {
        if let Some(e) = &c.kiln_error {
            eprintln!("kiln-bench dns: WRONG ANSWER from kiln-dns ({kind}): {e}");
        }
        if let Some(e) = &c.unbound_error {
            eprintln!("kiln-bench dns: WRONG ANSWER from unbound ({kind}): {e}");
        }
    }

    // warm-up: once through the file each (kiln-dns caches the external names)
    let servers = [(&kiln, dns_port), (&unbound, unbound_port)];
    for (_, port) in servers {
        dnsperf(o, &file, port, &["-n".into(), "1".into()]).await?;
    }

    // throughput, interleaved
    let mut full = vec!["-l".to_string(), o.seconds.to_string()];
    if let Some(q) = o.max_qps {
        full.extend(["-Q".to_string(), q.to_string()]);
    }
    for round in 0..2 {
        for ((p, port), r) in servers.iter().zip([&mut kr, &mut ur]) {
            let cpu = cpu_time(p.pid());
            let run = dnsperf(o, &file, *port, &full).await?;
            let used = cpu_time(p.pid()).saturating_sub(cpu);
            r.threads = status_field(p.pid(), "Threads:").unwrap_or(0.0);
            r.qps_runs.push(run.qps);
            r.loaded_avg_latency_ms.push(run.avg_latency_ms);
            r.cpu_us_per_query
                .push(used.as_secs_f64() * 1e6 / run.completed.max(1) as f64);
            r.lost += run.lost;
            add_rcodes(&mut r.rcodes, &run);
            eprintln!(
                "kiln-bench dns: throughput round {round} port {port}: {:.0} q/s, lost {}",
                run.qps, run.lost
            );
        }
    }

    // latency at a fixed rate, interleaved; every answer's latency from dnsperf -v
    let paced = vec![
        "-l".to_string(),
        o.seconds.to_string(),
        "-Q".to_string(),
        o.latency_qps.to_string(),
        "-v".to_string(),
    ];
    let mut lat: [Vec<u32>; 2] = [Vec::new(), Vec::new()];
    for _ in 0..2 {
        for (((_, port), r), l) in servers.iter().zip([&mut kr, &mut ur]).zip(lat.iter_mut()) {
            let mut run = dnsperf(o, &file, *port, &paced).await?;
            run.latencies_us.sort_unstable();
            r.latency_runs_p99_ms.push(pct_ms(&run.latencies_us, 99.0));
            r.lost += run.lost;
            add_rcodes(&mut r.rcodes, &run);
            l.append(&mut run.latencies_us);
        }
    }
    for (r, l) in [&mut kr, &mut ur].into_iter().zip(lat.iter_mut()) {
        l.sort_unstable();
        r.p50_ms = pct_ms(l, 50.0);
        r.p90_ms = pct_ms(l, 90.0);
        r.p99_ms = pct_ms(l, 99.0);
        r.p999_ms = pct_ms(l, 99.9);
        r.qps = r.qps_runs.iter().sum::<f64>() / r.qps_runs.len().max(1) as f64;
    }
    kr.rss_loaded_mib = memory_mib(kiln.pid(), "VmRSS:");
    ur.rss_loaded_mib = memory_mib(unbound.pid(), "VmRSS:");

    // a new Service → resolvable
    let upd = update_latency(&client, kiln_addr, o.updates).await?;
    kr.rss_peak_mib = memory_mib(kiln.pid(), "VmHWM:");
    ur.rss_peak_mib = memory_mib(unbound.pid(), "VmHWM:");
    let kiln_metrics = metrics(health)
        .await
        .unwrap_or_default()
        .into_iter()
        .filter(|(k, _)| k.starts_with("kiln") && !k.contains("_bucket"))
        .collect();
    drop(kiln);
    drop(unbound);
    drop(api);

    Ok(DnsReport {
        services: o.services,
        namespaces: o.namespaces,
        externals,
        queries_in_file: queries.len(),
        mix_percent: QueryKind::MIX
            .iter()
            .map(|(k, w)| {
                let name = serde_json::to_value(k).expect("kind name");
                (name.as_str().unwrap_or_default().to_string(), *w)
            })
            .collect(),
        seconds: o.seconds,
        clients: o.clients,
        dnsperf_threads: o.dnsperf_threads,
        server_threads: o.server_threads,
        latency_qps: o.latency_qps,
        create_all_seconds,
        kiln_ready_ms,
        checks,
        kiln: kr,
        unbound: ur,
        update: upd.seen,
        update_write_p50_ms: upd.write_p50_ms,
        update_write_p99_ms: upd.write_p99_ms,
        update_after_write: upd.after_write,
        update_timeouts: upd.timeouts,
        kiln_metrics,
    })
}

/// Nearest-rank percentile of sorted µs latencies, in ms.
fn pct_ms(sorted: &[u32], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    // (the epsilon: 99.9% of 1000 is 999.000…01 in floating point)
    let rank = ((p / 100.0) * sorted.len() as f64 - 1e-9).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1] as f64 / 1000.0
}

/// Polls until `server` answers `probe` right (or its process has exited).
async fn wait_answering(
    p: &Proc,
    server: SocketAddr,
    probe: &Query,
    limit: Duration,
) -> Result<(), DnsBenchError> {
    let mut asker = Asker::new(server).await?;
    let deadline = Instant::now() + limit;
    loop {
        let r = asker
            .ask(&probe.name, probe.qtype, Duration::from_millis(200))
            .await;
        if r.is_ok_and(|r| probe.check(&r).is_ok()) {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(DnsBenchError::Timeout {
                what: format!("{server} did not answer {} right", probe.name),
                log: p.log_tail(),
            });
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_of_microseconds() {
        let v: Vec<u32> = (1..=1000).collect();
        assert_eq!(pct_ms(&v, 50.0), 0.5);
        assert_eq!(pct_ms(&v, 99.0), 0.99);
        assert_eq!(pct_ms(&v, 99.9), 0.999);
        assert_eq!(pct_ms(&[], 99.0), 0.0);
    }

    #[test]
    fn objects_as_the_api_takes_them() {
        let p = dns_zone::plan(10, 2);
        let headless = service_object(&p[7], 10);
        let spec = headless.spec.unwrap();
        assert_eq!(spec.cluster_ip.as_deref(), Some("None"));
        assert_eq!(spec.ports.unwrap()[0].name.as_deref(), Some("http"));
        let ext = service_object(&p[9], 10).spec.unwrap();
        assert_eq!(ext.type_.as_deref(), Some("ExternalName"));
        assert_eq!(ext.external_name.as_deref(), Some("ext-0.example.test"));
        let slice = slice_object(&p[7]);
        assert_eq!(slice.endpoints.len(), 3);
        assert_eq!(slice.endpoints[1].hostname.as_deref(), Some("ep-1"));
        assert_eq!(
            slice.metadata.labels.unwrap()["kubernetes.io/service-name"],
            "svc-00007"
        );
    }
}
