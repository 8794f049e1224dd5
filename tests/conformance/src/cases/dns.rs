//! sig-network DNS entries: a prober pod whose querier containers loop over `dig` (and `getent hosts`)
//! lookups, writing an OK file (or the answer) per lookup into a shared `/results` emptyDir, as
//! upstream's dns.go / dns_common.go. Upstream reads those files through the apiserver's pods/proxy
//! subresource from the pod's webserver container; here they are read with `kubectl exec` in that
//! same container — same probes, same file names, same expectations. kiln's agnhost image names
//! /agnhost as its command, not its entrypoint, so its containers here give `command: [/agnhost]`.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::{json, Value};

use super::{case, Case};
use crate::ctx::{from_json, Ctx, POD_START};
use crate::error::CaseResult;
use crate::must;

pub const CASES: &[Case] = &[
    case!(
        "[sig-network] DNS should provide DNS for the cluster [Conformance]",
        "dns",
        for_the_cluster
    ),
    case!(
        "[sig-network] DNS should provide /etc/hosts entries for the cluster [Conformance]",
        "dns",
        etc_hosts_entries
    ),
    case!(
        "[sig-network] DNS should provide DNS for services [Conformance]",
        "dns",
        for_services
    ),
    case!(
        "[sig-network] DNS should resolve DNS of partial qualified names for services [LinuxOnly] [Conformance]",
        "dns",
        partial_names_for_services
    ),
    case!(
        "[sig-network] DNS should provide DNS for pods for Hostname [Conformance]",
        "dns",
        pod_hostname
    ),
    case!(
        "[sig-network] DNS should provide DNS for pods for Subdomain [Conformance]",
        "dns",
        pod_subdomain
    ),
    case!(
        "[sig-network] DNS should provide DNS for ExternalName services [Conformance]",
        "dns",
        external_name
    ),
    case!(
        "[sig-network] DNS should support configurable pod DNS nameservers [Conformance]",
        "dns",
        pod_dns_nameservers
    ),
];

/// The cluster's DNS domain (upstream's --dns-domain default, kiln's default cluster domain).
const ZONE: &str = "cluster.local";
/// The prober pod's hostname and subdomain (upstream's dnsTestPodHostName, dnsTestServiceName).
const POD_HOSTNAME: &str = "dns-querier-1";
const SERVICE: &str = "dns-test-service";
/// The Hostname/Subdomain entries' pod and headless Service.
const POD_HOSTNAME_2: &str = "dns-querier-2";
const SERVICE_2: &str = "dns-test-service-2";
/// How long the probers get to write every expected result (upstream polls up to 600 s; the case's
/// own timeout is 600 s, so less here).
const RESULTS_TIMEOUT: Duration = POD_START;
/// Upstream's two probers, by their file-name prefix: agnhost (Alpine, musl) and jessie-dnsutils
/// (Debian, glibc). kiln's agnhost image carries no `dig`, so both run kiln's dnsutils image (busybox
/// and the real dig); the containers and result files keep upstream's names.
const PROBERS: &[&str] = &["agnhost", "jessie"];

/// kiln's images have no `getent` (busybox lacks it): this shell function answers `getent hosts NAME`
/// as a libc with `hosts: files dns` does — the first /etc/hosts line naming it, else the resolver
/// (the pod's resolv.conf, search path included) — so the probes read exactly as upstream's.
const GETENT: &str = r#"getent() { [ "$1" = hosts ] || return 2; awk -v n="$2" '$1 !~ /^#/ { for (i = 2; i <= NF; i++) if ($i == n) { print; exit } }' /etc/hosts | grep . || { dig +short +search "$2" A; dig +short +search "$2" AAAA; } | grep .; }; "#;

/// What one prober pod looks up (upstream's createProbeCommand arguments).
#[derive(Default)]
struct Lookups {
    /// Resolved over UDP and TCP with `dig +search`: an A (AAAA) record, or SRV for `_`-names.
    names: Vec<String>,
    /// Resolved with `getent hosts` (files, then DNS).
    hosts: Vec<String>,
    /// An address whose PTR record is resolved over UDP and TCP.
    ptr: Option<String>,
}

/// The prober pod's identity: its hostname, subdomain and labels.
struct PodShape<'a> {
    hostname: &'a str,
    subdomain: &'a str,
    labels: Value,
}

impl Default for PodShape<'_> {
    fn default() -> Self {
        PodShape {
            hostname: POD_HOSTNAME,
            subdomain: SERVICE,
            labels: json!({}),
        }
    }
}

fn fqdn(ctx: &Ctx, name: &str) -> String {
    format!("{name}.{}.svc.{ZONE}", ctx.ns)
}

/// Upstream's ClusterIsIPv6: the family of the API's own Service address.
async fn cluster_is_ipv6(ctx: &Ctx) -> CaseResult<bool> {
    let svc = Api::<Service>::namespaced(ctx.client.clone(), "default")
        .get("kubernetes")
        .await?;
    let ip = svc.spec.and_then(|s| s.cluster_ip).unwrap_or_default();
    Ok(ip.parse::<IpAddr>().is_ok_and(|a| a.is_ipv6()))
}

/// The reverse-lookup name of an address (`d.c.b.a.in-addr.arpa.`, nibbles under `ip6.arpa.`).
fn reverse_addr(ip: &str) -> Option<String> {
    Some(match ip.parse::<IpAddr>().ok()? {
        IpAddr::V4(a) => {
            let o = a.octets();
            format!("{}.{}.{}.{}.in-addr.arpa.", o[3], o[2], o[1], o[0])
        }
        IpAddr::V6(a) => {
            let mut s = String::new();
            for b in a.octets().iter().rev() {
                s.push_str(&format!("{:x}.{:x}.", b & 0xf, b >> 4));
            }
            s + "ip6.arpa."
        }
    })
}

/// Upstream's createProbeCommand: a 600-round loop writing `/results/<prefix>_{udp,tcp}@<name>`,
/// `<prefix>_hosts@<name>` and `<ip>_{udp,tcp}@PTR` when the lookup answered. `$$` is the container
/// command's escape of `$` (the kubelet turns it back). Returns the command and the file names.
fn probe_command(l: &Lookups, prefix: &str, ipv6: bool) -> CaseResult<(String, Vec<String>)> {
    let record = if ipv6 { "AAAA" } else { "A" };
    let mut files = Vec::new();
    let mut cmd = String::new();
    if !l.hosts.is_empty() {
        cmd.push_str(GETENT);
    }
    cmd.push_str("for i in `seq 1 600`; do ");
    for name in &l.names {
        let lookup = if name.starts_with('_') {
            format!("{name} SRV")
        } else {
            format!("{name} {record}")
        };
        push_dig(&mut cmd, &mut files, &lookup, |proto| {
            format!("{prefix}_{proto}@{name}")
        });
    }
    for name in &l.hosts {
        let file = format!("{prefix}_hosts@{name}");
        cmd.push_str(&format!(
            r#"test -n "$$(getent hosts {name})" && echo OK > /results/{file};"#
        ));
        files.push(file);
    }
    if let Some(ip) = &l.ptr {
        let rev = reverse_addr(ip).ok_or_else(|| {
            crate::error::CaseError::Failed(format!("no reverse name for address {ip:?}"))
        })?;
        push_dig(&mut cmd, &mut files, &format!("{rev} PTR"), |proto| {
            format!("{ip}_{proto}@PTR")
        });
    }
    cmd.push_str("sleep 1; done");
    Ok((cmd, files))
}

/// One lookup by `dig +search` over UDP and over TCP, each writing OK to its file (`file_of(proto)`)
/// when it answered.
fn push_dig(
    cmd: &mut String,
    files: &mut Vec<String>,
    lookup: &str,
    file_of: impl Fn(&str) -> String,
) {
    for (proto, flag) in [("udp", "+notcp"), ("tcp", "+tcp")] {
        let file = file_of(proto);
        cmd.push_str(&format!(
            r#"check="$$(dig {flag} +noall +answer +search {lookup})" && test -n "$$check" && echo OK > /results/{file};"#
        ));
        files.push(file);
    }
}

/// Upstream's createTargetedProbeCommand: `dig +short <name> <type>` into `<prefix>_udp@<name>` every
/// second for 30 s.
fn targeted_probe_command(name: &str, record: &str, prefix: &str) -> (String, String) {
    let file = format!("{prefix}_udp@{name}");
    let cmd = format!(
        "for i in `seq 1 30`; do dig +short {name} {record} > /results/{file}; sleep 1; done"
    );
    (cmd, file)
}

/// Upstream's createDNSPod: agnhost's test-webserver (`webserver`) over the shared /results emptyDir
/// and one `<prefix>-querier` container per prober running `sh -c <cmd>`.
fn dns_pod(
    ctx: &Ctx,
    name: &str,
    queriers: &[(&str, String)],
    shape: &PodShape,
) -> CaseResult<Pod> {
    let mounts = json!([{"name": "results", "mountPath": "/results"}]);
    let mut containers = vec![json!({
        "name": "webserver",
        "image": ctx.images().agnhost(),
        "command": ["/agnhost"],
        "args": ["test-webserver"],
        "volumeMounts": mounts,
    })];
    for (prefix, cmd) in queriers {
        containers.push(json!({
            "name": format!("{prefix}-querier"),
            "image": ctx.images().dnsutils(),
            "command": ["sh", "-c", cmd],
            "volumeMounts": mounts,
        }));
    }
    from_json(json!({
        "metadata": {"name": name, "labels": shape.labels},
        "spec": {
            "volumes": [{"name": "results", "emptyDir": {}}],
            "containers": containers,
            "hostname": shape.hostname,
            "subdomain": shape.subdomain,
            "terminationGracePeriodSeconds": 0,
        },
    }))
}

/// The result files present in the pod, each with its content (newlines as spaces), read in the
/// webserver container (upstream GETs them through pods/proxy from that container's server).
async fn read_results(
    ctx: &Ctx,
    pod: &str,
    files: &[String],
) -> CaseResult<BTreeMap<String, String>> {
    let script = r#"cd /results && for f; do [ -f "$f" ] && printf '%s=%s\n' "$f" "$(tr '\n' ' ' < "$f")"; done; true"#;
    let mut cmd = vec!["sh", "-c", script, "sh"];
    cmd.extend(files.iter().map(String::as_str));
    let out = ctx.exec(pod, "webserver", &cmd).await?;
    Ok(out
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(f, c)| (f.to_string(), c.trim().to_string()))
        .collect())
}

/// Upstream's validateDNSResults / validateTargetedProbeOutput: create the pod, wait for it to run,
/// then every file MUST appear (and, with `expected`, hold exactly that answer) within the timeout.
/// The pod is deleted afterwards.
async fn validate(ctx: &Ctx, pod: &Pod, files: &[String], expected: Option<&str>) -> CaseResult {
    let name = pod.metadata.name.clone().unwrap_or_default();
    ctx.create_pod(pod).await?;
    let result = async {
        ctx.wait_running(&name).await?;
        let what = format!(
            "the DNS probes of pod {name} to succeed{}",
            expected.map(|e| format!(" with {e:?}")).unwrap_or_default()
        );
        ctx.wait(&what, RESULTS_TIMEOUT, || async {
            let got = match read_results(ctx, &name, files).await {
                Ok(g) => g,
                Err(e) => return Ok(Err(format!("reading the results: {e}"))),
            };
            let failed: Vec<String> = files
                .iter()
                .filter_map(|f| match (got.get(f), expected) {
                    (None, _) => Some(f.clone()),
                    (Some(c), Some(want)) if c != want => Some(format!("{f} (holds {c:?})")),
                    _ => None,
                })
                .collect();
            if failed.is_empty() {
                return Ok(Ok(()));
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
            Ok(Err(format!("lookups failed for {failed:?}")))
        })
        .await
    }
    .await;
    let _ = ctx
        .api::<Pod>()
        .delete(&name, &DeleteParams::default().grace_period(0))
        .await;
    result
}

/// Every prober's lookups in one pod, validated (upstream's pattern for all but ExternalName).
async fn probe(ctx: &Ctx, lookups: &Lookups, shape: &PodShape<'_>) -> CaseResult {
    let ipv6 = cluster_is_ipv6(ctx).await?;
    let mut queriers = Vec::new();
    let mut files = Vec::new();
    for prefix in PROBERS {
        let (cmd, f) = probe_command(lookups, prefix, ipv6)?;
        queriers.push((*prefix, cmd));
        files.extend(f);
    }
    let pod = dns_pod(ctx, "dns-test", &queriers, shape)?;
    validate(ctx, &pod, &files, None).await
}

/// Every prober's targeted lookup of `name`'s `record` in a pod named `pod`, whose answer MUST be
/// `expected`.
async fn probe_targeted(
    ctx: &Ctx,
    pod: &str,
    name: &str,
    record: &str,
    expected: &str,
) -> CaseResult {
    let mut queriers = Vec::new();
    let mut files = Vec::new();
    for prefix in PROBERS {
        let (cmd, f) = targeted_probe_command(name, record, prefix);
        queriers.push((*prefix, cmd));
        files.push(f);
    }
    let pod = dns_pod(ctx, pod, &queriers, &PodShape::default())?;
    validate(ctx, &pod, &files, Some(expected)).await
}

/// Upstream's CreateServiceSpec: port 80 `http`/TCP (none for an ExternalName), `clusterIP: None` when
/// headless; created in the namespace.
async fn create_service(
    ctx: &Ctx,
    name: &str,
    external_name: Option<&str>,
    headless: bool,
    selector: Value,
) -> CaseResult<Service> {
    let mut spec = json!({"selector": selector});
    match external_name {
        Some(ext) => {
            spec["type"] = json!("ExternalName");
            spec["externalName"] = json!(ext);
        }
        None => spec["ports"] = json!([{"port": 80, "name": "http", "protocol": "TCP"}]),
    }
    if headless {
        spec["clusterIP"] = json!("None");
    }
    let svc: Service = from_json(json!({"metadata": {"name": name}, "spec": spec}))?;
    Ok(ctx
        .api::<Service>()
        .create(&PostParams::default(), &svc)
        .await?)
}

/// The headless `dns-test-service` and the regular `test-service-2` over the prober pod (label
/// dns-test=true), as the services entries make them; returns the regular one's ClusterIP.
async fn test_services(ctx: &Ctx) -> CaseResult<String> {
    let selector = json!({"dns-test": "true"});
    create_service(ctx, SERVICE, None, true, selector.clone()).await?;
    let regular = create_service(ctx, "test-service-2", None, false, selector).await?;
    let ip = regular.spec.and_then(|s| s.cluster_ip).unwrap_or_default();
    must!(!ip.is_empty(), "test-service-2 got no clusterIP");
    Ok(ip)
}

/// DNS, cluster: a pod MUST resolve `kubernetes.default.svc.<zone>` through the cluster DNS (A
/// record, over UDP and TCP, from both probers).
async fn for_the_cluster(ctx: &Ctx) -> CaseResult {
    let lookups = Lookups {
        names: vec![format!("kubernetes.default.svc.{ZONE}")],
        ..Default::default()
    };
    probe(ctx, &lookups, &PodShape::default()).await
}

/// DNS, cluster (/etc/hosts): a pod with hostname dns-querier-1 and subdomain dns-test-service MUST
/// resolve its FQDN (`dns-querier-1.dns-test-service.<ns>.svc.<zone>`) and its hostname through
/// `getent hosts`, i.e. from the kubelet's /etc/hosts (no Service makes them DNS names here).
async fn etc_hosts_entries(ctx: &Ctx) -> CaseResult {
    let lookups = Lookups {
        hosts: vec![
            fqdn(ctx, &format!("{POD_HOSTNAME}.{SERVICE}")),
            POD_HOSTNAME.to_string(),
        ],
        ..Default::default()
    };
    probe(ctx, &lookups, &PodShape::default()).await
}

/// DNS, services: with a headless Service and a regular one selecting the prober pod, the pod MUST
/// resolve the headless Service's name (A), the `_http._tcp` SRV names of both, and the regular
/// Service's ClusterIP back to a name (PTR), over UDP and TCP.
async fn for_services(ctx: &Ctx) -> CaseResult {
    let ip = test_services(ctx).await?;
    let lookups = Lookups {
        names: vec![
            fqdn(ctx, SERVICE),
            format!("_http._tcp.{}", fqdn(ctx, SERVICE)),
            format!("_http._tcp.{}", fqdn(ctx, "test-service-2")),
        ],
        ptr: Some(ip),
        ..Default::default()
    };
    let shape = PodShape {
        labels: json!({"dns-test": "true"}),
        ..Default::default()
    };
    probe(ctx, &lookups, &shape).await
}

/// DNS, PQDN for services: the same two Services MUST resolve by partial names through the search
/// path — `<svc>`, `<svc>.<ns>`, `<svc>.<ns>.svc` (A) and `_http._tcp.<svc>.<ns>.svc` of both (SRV) —
/// and the regular Service's ClusterIP by PTR.
async fn partial_names_for_services(ctx: &Ctx) -> CaseResult {
    let ip = test_services(ctx).await?;
    let ns = &ctx.ns;
    let lookups = Lookups {
        names: vec![
            SERVICE.to_string(),
            format!("{SERVICE}.{ns}"),
            format!("{SERVICE}.{ns}.svc"),
            format!("_http._tcp.{SERVICE}.{ns}.svc"),
            format!("_http._tcp.test-service-2.{ns}.svc"),
        ],
        ptr: Some(ip),
        ..Default::default()
    };
    let shape = PodShape {
        labels: json!({"dns-test": "true"}),
        ..Default::default()
    };
    probe(ctx, &lookups, &shape).await
}

/// The Hostname and Subdomain entries' setup: headless `dns-test-service-2` selecting label
/// dns-test-hostname-attribute=true, and the prober pod with that label, hostname dns-querier-2 and
/// the Service as its subdomain.
async fn hostname_setup(ctx: &Ctx) -> CaseResult<PodShape<'static>> {
    let selector = json!({"dns-test-hostname-attribute": "true"});
    create_service(ctx, SERVICE_2, None, true, selector.clone()).await?;
    Ok(PodShape {
        hostname: POD_HOSTNAME_2,
        subdomain: SERVICE_2,
        labels: selector,
    })
}

/// DNS, resolve the hostname: the pod MUST resolve its FQDN
/// (`dns-querier-2.dns-test-service-2.<ns>.svc.<zone>`) and its hostname (`getent hosts`).
async fn pod_hostname(ctx: &Ctx) -> CaseResult {
    let shape = hostname_setup(ctx).await?;
    let lookups = Lookups {
        hosts: vec![
            fqdn(ctx, &format!("{POD_HOSTNAME_2}.{SERVICE_2}")),
            POD_HOSTNAME_2.to_string(),
        ],
        ..Default::default()
    };
    probe(ctx, &lookups, &shape).await
}

/// DNS, resolve the subdomain: the pod MUST resolve its FQDN and the subdomain
/// (`dns-test-service-2.<ns>.svc.<zone>`) by A records, over UDP and TCP.
async fn pod_subdomain(ctx: &Ctx) -> CaseResult {
    let shape = hostname_setup(ctx).await?;
    let lookups = Lookups {
        names: vec![
            fqdn(ctx, &format!("{POD_HOSTNAME_2}.{SERVICE_2}")),
            fqdn(ctx, SERVICE_2),
        ],
        ..Default::default()
    };
    probe(ctx, &lookups, &shape).await
}

/// Get, change and replace Service `name` (upstream's UpdateService, retried on a conflict).
async fn update_service(ctx: &Ctx, name: &str, change: impl Fn(&mut Value)) -> CaseResult {
    let api = ctx.api::<Service>();
    for _ in 0..5 {
        let mut v = serde_json::to_value(api.get(name).await?).unwrap_or_default();
        change(&mut v);
        let svc: Service = from_json(v)?;
        match api.replace(name, &PostParams::default(), &svc).await {
            Err(kube::Error::Api(e)) if e.code == 409 => continue,
            r => {
                r?;
                return Ok(());
            }
        }
    }
    Err(crate::error::CaseError::Failed(format!(
        "updating Service {name}: conflicts five times"
    )))
}

/// DNS, for ExternalName Services: Service `dns-test-service-3` with externalName foo.example.com
/// MUST resolve to it by CNAME (`foo.example.com.`); after the externalName changes to
/// bar.example.com, a new pod MUST resolve the new CNAME; after the type changes to ClusterIP (port
/// 80 http), a new pod MUST resolve the name to the Service's ClusterIP by an A (AAAA) record.
async fn external_name(ctx: &Ctx) -> CaseResult {
    let name = "dns-test-service-3";
    create_service(ctx, name, Some("foo.example.com"), false, Value::Null).await?;
    let host = fqdn(ctx, name);
    probe_targeted(ctx, "dns-test-1", &host, "CNAME", "foo.example.com.").await?;

    update_service(ctx, name, |v| {
        v["spec"]["externalName"] = json!("bar.example.com")
    })
    .await?;
    probe_targeted(ctx, "dns-test-2", &host, "CNAME", "bar.example.com.").await?;

    update_service(ctx, name, |v| {
        v["spec"]["type"] = json!("ClusterIP");
        v["spec"]["ports"] = json!([{"port": 80, "name": "http", "protocol": "TCP"}]);
    })
    .await?;
    let record = if cluster_is_ipv6(ctx).await? {
        "AAAA"
    } else {
        "A"
    };
    let ip = ctx
        .api::<Service>()
        .get(name)
        .await?
        .spec
        .and_then(|s| s.cluster_ip)
        .unwrap_or_default();
    must!(
        ip.parse::<IpAddr>().is_ok(),
        "{name} got no clusterIP after becoming type ClusterIP (has {ip:?})"
    );
    probe_targeted(ctx, "dns-test-3", &host, record, &ip).await
}

/// DNS, custom dnsConfig: an agnhost pod with dnsPolicy None, nameserver 1.1.1.1 and search path
/// resolv.conf.local MUST be created and become Ready, and its resolver configuration MUST carry both
/// (`agnhost dns-suffix` lists the search path, `agnhost dns-server-list` the nameserver).
async fn pod_dns_nameservers(ctx: &Ctx) -> CaseResult {
    let (server, search) = ("1.1.1.1", "resolv.conf.local");
    let name = "test-dns-nameservers";
    let pod: Pod = from_json(json!({
        "metadata": {"name": name},
        "spec": {
            "containers": [{
                "name": "agnhost-container",
                "image": ctx.images().agnhost(),
        "command": ["/agnhost"],
                "args": ["pause"],
            }],
            "dnsPolicy": "None",
            "dnsConfig": {"nameservers": [server], "searches": [search]},
            "terminationGracePeriodSeconds": 0,
        },
    }))?;
    ctx.create_pod(&pod).await?;
    ctx.wait_ready(name).await?;
    for (arg, want, what) in [
        ("dns-suffix", search, "DNS suffix list"),
        ("dns-server-list", server, "DNS server list"),
    ] {
        let out = ctx
            .exec(name, "agnhost-container", &["/agnhost", arg])
            .await?;
        must!(
            out.contains(want),
            "customized {what} not configured in the pod: want {want:?}, `agnhost {arg}` printed {out:?}"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reverse_names() {
        assert_eq!(
            reverse_addr("10.96.0.10").as_deref(),
            Some("10.0.96.10.in-addr.arpa.")
        );
        assert_eq!(
            reverse_addr("fd00::1").as_deref(),
            Some("1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.d.f.ip6.arpa.")
        );
        assert_eq!(reverse_addr("nope"), None);
    }

    #[test]
    fn probe_commands_read_as_upstreams() {
        let l = Lookups {
            names: vec!["kubernetes.default".into(), "_http._tcp.s.ns.svc".into()],
            hosts: vec!["h".into()],
            ptr: Some("10.96.0.5".into()),
        };
        let (cmd, files) = probe_command(&l, "jessie", false).unwrap();
        assert!(cmd.starts_with(GETENT));
        assert!(cmd.contains(
            r#"check="$$(dig +notcp +noall +answer +search kubernetes.default A)" && test -n "$$check" && echo OK > /results/jessie_udp@kubernetes.default;"#
        ));
        assert!(cmd.contains("dig +tcp +noall +answer +search _http._tcp.s.ns.svc SRV)"));
        assert!(
            cmd.contains(r#"test -n "$$(getent hosts h)" && echo OK > /results/jessie_hosts@h;"#)
        );
        assert!(cmd.contains("+search 5.0.96.10.in-addr.arpa. PTR)"));
        assert!(cmd.ends_with("sleep 1; done"));
        assert_eq!(
            files,
            [
                "jessie_udp@kubernetes.default",
                "jessie_tcp@kubernetes.default",
                "jessie_udp@_http._tcp.s.ns.svc",
                "jessie_tcp@_http._tcp.s.ns.svc",
                "jessie_hosts@h",
                "10.96.0.5_udp@PTR",
                "10.96.0.5_tcp@PTR",
            ]
        );
        let (cmd, file) = targeted_probe_command("x.ns.svc.cluster.local", "CNAME", "agnhost");
        assert_eq!(file, "agnhost_udp@x.ns.svc.cluster.local");
        assert_eq!(
            cmd,
            "for i in `seq 1 30`; do dig +short x.ns.svc.cluster.local CNAME > /results/agnhost_udp@x.ns.svc.cluster.local; sleep 1; done"
        );
    }
}
