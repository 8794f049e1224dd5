//! The cluster DNS benchmark's data, no I/O: which Services it creates, the records the Kubernetes DNS
//! spec gives them (rendered as unbound `local-data` for the anchor), the query mix both servers get,
//! what a right answer holds, and dnsperf's report.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use crate::dns_wire::{Rdata, Response, RCODE_NOERROR, TYPE_A, TYPE_CNAME, TYPE_SRV};

pub const DOMAIN: &str = "cluster.local";
/// The external names' zone: forwarded by kiln-dns to the anchor, served by the anchor itself.
pub const EXTERNAL_ZONE: &str = "example.test";
/// Endpoints per headless Service.
pub const HEADLESS_ENDPOINTS: usize = 3;
/// The Service port (named `http`) and the endpoints' port.
pub const SERVICE_PORT: u16 = 80;
pub const TARGET_PORT: u16 = 8080;
/// TTL of the external names' records (long: kiln-dns answers them from its cache).
pub const EXTERNAL_TTL: u32 = 3600;

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    ClusterIp,
    Headless,
    ExternalName,
}

/// One Service of the run; `cluster_ip` is the API server's allocation, filled in once created.
#[derive(Debug, Clone)]
pub struct Svc {
    pub index: usize,
    pub namespace: String,
    pub name: String,
    pub kind: Kind,
    pub cluster_ip: Option<Ipv4Addr>,
}

impl Svc {
    pub fn fqdn(&self) -> String {
        format!("{}.{}.svc.{DOMAIN}.", self.name, self.namespace)
    }

    pub fn endpoints(&self) -> Vec<Ipv4Addr> {
        (0..HEADLESS_ENDPOINTS)
            .map(|k| endpoint_ip(self.index, k))
            .collect()
    }

    /// The ExternalName's target: one of the external names.
    pub fn external_target(&self, externals: usize) -> String {
        external_name(self.index / 10 % externals.max(1))
    }
}

/// ~70% ClusterIP, ~20% headless, ~10% ExternalName, spread over `namespaces` namespaces.
pub fn plan(services: usize, namespaces: usize) -> Vec<Svc> {
    (0..services)
        .map(|i| Svc {
            index: i,
            namespace: namespace(i % namespaces.max(1)),
            name: format!("svc-{i:05}"),
            kind: match i % 10 {
                0..=6 => Kind::ClusterIp,
                7 | 8 => Kind::Headless,
                _ => Kind::ExternalName,
            },
            cluster_ip: None,
        })
        .collect()
}

pub fn namespace(i: usize) -> String {
    format!("dns-{i}")
}

/// How many external names a run has: one per ten Services, at least ten.
pub fn externals(services: usize) -> usize {
    (services / 10).max(10)
}

pub fn external_name(k: usize) -> String {
    format!("ext-{k}.{EXTERNAL_ZONE}.")
}

/// External name `k`'s address, in 198.18.0.0/15 (the benchmarking range).
pub fn external_ip(k: usize) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(Ipv4Addr::new(198, 18, 0, 1)) + k as u32)
}

/// Endpoint `k` of Service `i`: distinct pod IPs from 10.128.0.1 up.
pub fn endpoint_ip(i: usize, k: usize) -> Ipv4Addr {
    Ipv4Addr::from(
        u32::from(Ipv4Addr::new(10, 128, 0, 0)) + (i * HEADLESS_ENDPOINTS + k + 1) as u32,
    )
}

/// Endpoint `k`'s hostname (EndpointSlice `hostname`), so it has its own A record and SRV target.
pub fn endpoint_hostname(k: usize) -> String {
    format!("ep-{k}")
}

/// Every record the Kubernetes DNS spec (v1.1.0) gives these Services, plus the external names, as
/// unbound `local-data` RRs. SRV weights as CoreDNS writes them (100 / number of targets).
pub fn records(svcs: &[Svc], externals: usize, ttl: u32) -> Vec<String> {
    let mut out = Vec::new();
    for s in svcs {
        let fqdn = s.fqdn();
        match s.kind {
            Kind::ClusterIp => {
                if let Some(ip) = s.cluster_ip {
                    out.push(format!("{fqdn} {ttl} IN A {ip}"));
                    out.push(format!(
                        "_http._tcp.{fqdn} {ttl} IN SRV 0 100 {SERVICE_PORT} {fqdn}"
                    ));
                }
            }
            Kind::Headless => {
                let weight = 100 / HEADLESS_ENDPOINTS;
                for (k, ip) in s.endpoints().iter().enumerate() {
                    let host = format!("{}.{fqdn}", endpoint_hostname(k));
                    out.push(format!("{fqdn} {ttl} IN A {ip}"));
                    out.push(format!("{host} {ttl} IN A {ip}"));
                    out.push(format!(
                        "_http._tcp.{fqdn} {ttl} IN SRV 0 {weight} {TARGET_PORT} {host}"
                    ));
                }
            }
            Kind::ExternalName => {
                out.push(format!(
                    "{fqdn} {ttl} IN CNAME {}",
                    s.external_target(externals)
                ));
            }
        }
    }
    for k in 0..externals {
        out.push(format!(
            "{} {EXTERNAL_TTL} IN A {}",
            external_name(k),
            external_ip(k)
        ));
    }
    out
}

/// The anchor's whole configuration: both zones authoritative from local data, everything else
/// refused (no recursion), no DNSSEC (iterator module only), `threads` threads on one port.
pub fn unbound_conf(dir: &str, port: u16, threads: usize, records: &[String]) -> String {
    let mut c = format!(
        "server:\n  interface: 127.0.0.1\n  port: {port}\n  do-ip4: yes\n  do-ip6: no\n  do-udp: yes\n  do-tcp: yes\n  \
         num-threads: {threads}\n  so-reuseport: yes\n  username: \"\"\n  chroot: \"\"\n  directory: \"{dir}\"\n  \
         pidfile: \"\"\n  use-syslog: no\n  logfile: \"\"\n  verbosity: 0\n  module-config: \"iterator\"\n  \
         access-control: 127.0.0.0/8 allow\n  local-zone: \".\" refuse\n  local-zone: \"{DOMAIN}.\" static\n  \
         local-zone: \"{EXTERNAL_ZONE}.\" static\n"
    );
    for r in records {
        c.push_str("  local-data: \"");
        c.push_str(r);
        c.push_str("\"\n");
    }
    c.push_str("remote-control:\n  control-enable: no\n");
    c
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum QueryKind {
    ClusterIpA,
    HeadlessA,
    ClusterIpSrv,
    HeadlessSrv,
    ExternalA,
    ExternalNameCname,
}

impl QueryKind {
    /// Share of the query mix, percent.
    pub const MIX: [(QueryKind, u32); 6] = [
        (QueryKind::ClusterIpA, 45),
        (QueryKind::HeadlessA, 20),
        (QueryKind::ClusterIpSrv, 10),
        (QueryKind::HeadlessSrv, 5),
        (QueryKind::ExternalA, 15),
        (QueryKind::ExternalNameCname, 5),
    ];
}

/// What a right answer holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expect {
    A(Vec<Ipv4Addr>),
    Srv { port: u16, count: usize },
    Cname(String),
}

#[derive(Debug, Clone)]
pub struct Query {
    pub kind: QueryKind,
    pub name: String,
    pub qtype: u16,
    pub expect: Expect,
}

impl Query {
    /// The line of a dnsperf data file.
    pub fn dnsperf_line(&self) -> String {
        let t = match self.qtype {
            TYPE_A => "A",
            TYPE_SRV => "SRV",
            _ => "CNAME",
        };
        format!("{} {t}", self.name)
    }

    /// `Ok` when `r` is a right answer to this query.
    pub fn check(&self, r: &Response) -> Result<(), String> {
        if r.rcode != RCODE_NOERROR {
            return Err(format!("{} {}: rcode {}", self.name, self.qtype, r.rcode));
        }
        if r.truncated {
            return Err(format!("{}: truncated", self.name));
        }
        let ok = match &self.expect {
            Expect::A(ips) => {
                let mut want = ips.clone();
                want.sort();
                r.a_records() == want
            }
            Expect::Srv { port, count } => {
                let srv: Vec<u16> = r
                    .answers
                    .iter()
                    .filter_map(|a| match a.data {
                        Rdata::Srv { port, .. } => Some(port),
                        _ => None,
                    })
                    .collect();
                srv.len() == *count && srv.iter().all(|p| p == port)
            }
            Expect::Cname(target) => r
                .answers
                .iter()
                .any(|a| a.data == Rdata::Cname(target.clone())),
        };
        if ok {
            Ok(())
        } else {
            Err(format!(
                "{} (type {}): want {:?}, got {:?}",
                self.name, self.qtype, self.expect, r.answers
            ))
        }
    }
}

/// xorshift64: the same mix for both servers and from run to run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn pick<'a, T>(&mut self, v: &'a [T]) -> &'a T {
        &v[(self.next() % v.len() as u64) as usize]
    }
}

/// `count` queries in the proportions of [`QueryKind::MIX`], names drawn uniformly from the Services
/// of each kind and from the external names.
pub fn query_mix(svcs: &[Svc], externals: usize, count: usize, seed: u64) -> Vec<Query> {
    let of = |k: Kind| svcs.iter().filter(|s| s.kind == k).collect::<Vec<_>>();
    let (cip, headless, extname) = (
        of(Kind::ClusterIp),
        of(Kind::Headless),
        of(Kind::ExternalName),
    );
    let mut rng = Rng(seed | 1);
    let total: u32 = QueryKind::MIX.iter().map(|(_, w)| w).sum();
    let mut out = Vec::with_capacity(count);
    while out.len() < count {
        let mut roll = (rng.next() % total as u64) as u32;
        let kind = QueryKind::MIX
            .iter()
            .find(|(_, w)| {
                let hit = roll < *w;
                roll = roll.saturating_sub(*w);
                hit
            })
            .map_or(QueryKind::ClusterIpA, |(k, _)| *k);
        let q = match kind {
            QueryKind::ClusterIpA | QueryKind::ClusterIpSrv if cip.is_empty() => continue,
            QueryKind::HeadlessA | QueryKind::HeadlessSrv if headless.is_empty() => continue,
            QueryKind::ExternalNameCname if extname.is_empty() => continue,
            QueryKind::ClusterIpA => {
                let s = rng.pick(&cip);
                Query {
                    kind,
                    name: s.fqdn(),
                    qtype: TYPE_A,
                    expect: Expect::A(s.cluster_ip.into_iter().collect()),
                }
            }
            QueryKind::HeadlessA => {
                let s = rng.pick(&headless);
                Query {
                    kind,
                    name: s.fqdn(),
                    qtype: TYPE_A,
                    expect: Expect::A(s.endpoints()),
                }
            }
            QueryKind::ClusterIpSrv => Query {
                kind,
                name: format!("_http._tcp.{}", rng.pick(&cip).fqdn()),
                qtype: TYPE_SRV,
                expect: Expect::Srv {
                    port: SERVICE_PORT,
                    count: 1,
                },
            },
            QueryKind::HeadlessSrv => Query {
                kind,
                name: format!("_http._tcp.{}", rng.pick(&headless).fqdn()),
                qtype: TYPE_SRV,
                expect: Expect::Srv {
                    port: TARGET_PORT,
                    count: HEADLESS_ENDPOINTS,
                },
            },
            QueryKind::ExternalA => {
                let k = (rng.next() % externals.max(1) as u64) as usize;
                Query {
                    kind,
                    name: external_name(k),
                    qtype: TYPE_A,
                    expect: Expect::A(vec![external_ip(k)]),
                }
            }
            QueryKind::ExternalNameCname => {
                let s = rng.pick(&extname);
                Query {
                    kind,
                    name: s.fqdn(),
                    qtype: TYPE_CNAME,
                    expect: Expect::Cname(s.external_target(externals)),
                }
            }
        };
        out.push(q);
    }
    out
}

/// What dnsperf 2.x printed for one run.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct DnsperfRun {
    pub sent: u64,
    pub completed: u64,
    pub lost: u64,
    pub qps: f64,
    pub avg_latency_ms: f64,
    pub max_latency_ms: f64,
    pub rcodes: BTreeMap<String, u64>,
    /// Each answered query's latency (µs) from `-v`'s `> RCODE name type seconds` lines.
    #[serde(skip)]
    pub latencies_us: Vec<u32>,
}

/// dnsperf's statistics block (and `-v` lines); `None` when there is none (it failed).
pub fn parse_dnsperf(out: &str) -> Option<DnsperfRun> {
    let mut r = DnsperfRun::default();
    let mut seen = false;
    let first_num = |s: &str| -> Option<f64> { s.split_whitespace().next()?.parse().ok() };
    for line in out.lines() {
        if let Some(rest) = line.strip_prefix("> ") {
            if let Some(secs) = rest
                .rsplit_once(' ')
                .and_then(|(_, s)| s.parse::<f64>().ok())
            {
                r.latencies_us.push((secs * 1e6).round() as u32);
            }
            continue;
        }
        let Some((key, val)) = line.trim().split_once(':') else {
            continue;
        };
        let val = val.trim();
        match key {
            "Queries sent" => r.sent = first_num(val)? as u64,
            "Queries completed" => r.completed = first_num(val)? as u64,
            "Queries lost" => r.lost = first_num(val)? as u64,
            "Queries per second" => {
                r.qps = first_num(val)?;
                seen = true;
            }
            "Average Latency (s)" => {
                r.avg_latency_ms = first_num(val)? * 1000.0;
                if let Some(max) = val.split("max ").nth(1) {
                    r.max_latency_ms =
                        max.trim_end_matches(')').trim().parse::<f64>().ok()? * 1000.0;
                }
            }
            "Response codes" => {
                for part in val.split(',') {
                    let mut w = part.split_whitespace();
                    if let (Some(code), Some(n)) = (w.next(), w.next().and_then(|n| n.parse().ok()))
                    {
                        r.rcodes.insert(code.to_string(), n);
                    }
                }
            }
            _ => {}
        }
    }
    seen.then_some(r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dns_wire::Answer;

    fn created(n: usize) -> Vec<Svc> {
        let mut v = plan(n, 3);
        for (i, s) in v.iter_mut().enumerate() {
            if s.kind == Kind::ClusterIp {
                s.cluster_ip = Some(Ipv4Addr::new(10, 96, 1, i as u8));
            }
        }
        v
    }

    #[test]
    fn the_plan_has_the_kinds_in_proportion() {
        let p = plan(1000, 4);
        let count = |k| p.iter().filter(|s| s.kind == k).count();
        assert_eq!(count(Kind::ClusterIp), 700);
        assert_eq!(count(Kind::Headless), 200);
        assert_eq!(count(Kind::ExternalName), 100);
        assert_eq!(p[5].namespace, "dns-1");
        assert_eq!(p[5].fqdn(), "svc-00005.dns-1.svc.cluster.local.");
        assert_eq!(endpoint_ip(0, 0), Ipv4Addr::new(10, 128, 0, 1));
        assert_eq!(endpoint_ip(100, 2), Ipv4Addr::new(10, 128, 1, 47));
    }

    #[test]
    fn records_follow_the_dns_spec() {
        let r = records(&created(10), externals(10), 5);
        assert!(r.contains(&"svc-00000.dns-0.svc.cluster.local. 5 IN A 10.96.1.0".to_string()));
        assert!(r.contains(
            &"_http._tcp.svc-00000.dns-0.svc.cluster.local. 5 IN SRV 0 100 80 svc-00000.dns-0.svc.cluster.local."
                .to_string()
        ));
        // headless: one A per endpoint, a hostname record each, SRV to the hostnames
        let h = "svc-00007.dns-1.svc.cluster.local.";
        assert_eq!(
            r.iter()
                .filter(|l| l.starts_with(&format!("{h} 5 IN A ")))
                .count(),
            3
        );
        assert!(r.contains(&format!("ep-2.{h} 5 IN A 10.128.0.24")));
        assert!(r.contains(&format!("_http._tcp.{h} 5 IN SRV 0 33 8080 ep-0.{h}")));
        assert!(r.contains(
            &"svc-00009.dns-0.svc.cluster.local. 5 IN CNAME ext-0.example.test.".to_string()
        ));
        assert!(r.contains(&"ext-9.example.test. 3600 IN A 198.18.0.10".to_string()));
        let conf = unbound_conf("/tmp/x", 5300, 2, &r);
        assert!(conf.contains("num-threads: 2\n"));
        assert!(conf.contains("local-zone: \"cluster.local.\" static\n"));
        assert!(conf.contains("  local-data: \"ext-9.example.test. 3600 IN A 198.18.0.10\"\n"));
    }

    #[test]
    fn query_mix_proportions_and_checks() {
        let svcs = created(100);
        let q = query_mix(&svcs, externals(100), 10_000, 7);
        assert_eq!(q.len(), 10_000);
        let share = |k| q.iter().filter(|x| x.kind == k).count() as f64 / 100.0;
        for (k, w) in QueryKind::MIX {
            assert!((share(k) - w as f64).abs() < 2.0, "{k:?} {}", share(k));
        }
        // deterministic
        let again = query_mix(&svcs, externals(100), 10_000, 7);
        assert_eq!(q[123].name, again[123].name);
        let a = q.iter().find(|x| x.kind == QueryKind::ClusterIpA).unwrap();
        assert!(a.dnsperf_line().ends_with(". A"));
        let Expect::A(ip) = &a.expect else { panic!() };
        let answer = |data| Answer {
            name: a.name.clone(),
            rtype: TYPE_A,
            ttl: 5,
            data,
        };
        let mut resp = Response {
            id: 1,
            rcode: 0,
            authoritative: true,
            truncated: false,
            answers: vec![answer(Rdata::A(ip[0]))],
        };
        assert_eq!(a.check(&resp), Ok(()));
        resp.answers = vec![answer(Rdata::A(Ipv4Addr::new(1, 2, 3, 4)))];
        assert!(a.check(&resp).is_err());
        resp.rcode = 3;
        assert!(a.check(&resp).unwrap_err().contains("rcode 3"));
    }

    #[test]
    fn dnsperf_statistics_and_verbose_lines() {
        let out = "\
> NOERROR a.ns.svc.cluster.local A 0.001099
> NOERROR _http._tcp.a.ns.svc.cluster.local SRV 0.000074
[Status] Testing complete (time limit)

Statistics:

  Queries sent:         219117
  Queries completed:    219110 (100.00%)
  Queries lost:         7 (0.00%)

  Response codes:       NOERROR 219000 (99.95%), NXDOMAIN 110 (0.05%)
  Average packet size:  request 42, response 67
  Run time (s):         3.003077
  Queries per second:   72964.163090

  Average Latency (s):  0.000922 (min 0.000012, max 0.007532)
  Latency StdDev (s):   0.000694
";
        let r = parse_dnsperf(out).unwrap();
        assert_eq!((r.sent, r.completed, r.lost), (219_117, 219_110, 7));
        assert!((r.qps - 72_964.163_09).abs() < 1e-6);
        assert!((r.avg_latency_ms - 0.922).abs() < 1e-9);
        assert!((r.max_latency_ms - 7.532).abs() < 1e-9);
        assert_eq!(r.rcodes["NOERROR"], 219_000);
        assert_eq!(r.rcodes["NXDOMAIN"], 110);
        assert_eq!(r.latencies_us, vec![1099, 74]);
        assert_eq!(parse_dnsperf("Error: socket: nope\n"), None);
    }
}
