//! A pod's resolver configuration (the CRI sandbox's `dns_config`), as upstream's kubelet forms it
//! (pkg/kubelet/network/dns): the base is the host's resolv.conf (`--resolv-conf`), replaced per
//! `dnsPolicy` — ClusterFirst (default; also ClusterFirstWithHostNet) puts the cluster DNS servers first
//! with `<ns>.svc.<zone> svc.<zone> <zone>` before the host's search list and `ndots:5`; Default keeps the
//! host's; None starts empty — then `dnsConfig` is appended (duplicates dropped, options merged by name),
//! and the result is cut to the resolver's limits (3 nameservers, 32 search paths, 2048 characters).
//! containerd writes what comes out as the sandbox's resolv.conf and mounts it into every container.
//!
//! Pure: the host file's contents come in as text ([`parse_resolv_conf`]), the notices upstream records
//! as events come out as values ([`DnsNotice`]); only [`read_host_resolv_conf`] touches the disk.

use std::io::Read;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{Pod, PodDNSConfigOption};

/// Upstream's `MaxDNSNameservers`: what glibc's resolver reads.
pub const MAX_NAMESERVERS: usize = 3;
/// Upstream's `MaxDNSSearchPaths` (the expanded limits, the only ones since 1.28).
pub const MAX_SEARCH_PATHS: usize = 32;
/// Upstream's `MaxDNSSearchListChars`: the joined search line.
pub const MAX_SEARCH_LINE_CHARS: usize = 2048;
/// A search path longer than a DNS subdomain (253) makes some resolvers (glibc 2.28) abort.
const MAX_SEARCH_PATH_CHARS: usize = 253;
/// Upstream reads at most this much of the host's resolv.conf.
const MAX_RESOLV_CONF_BYTES: u64 = 10 << 20;
/// The options a ClusterFirst pod gets instead of the host's.
const CLUSTER_FIRST_OPTIONS: &[&str] = &["ndots:5"];

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DnsError {
    /// A `nameserver` line without an address (upstream's message, which fails the sandbox).
    #[error("nameserver list is empty")]
    EmptyNameserver,
    #[error("{path}: {message}")]
    Read { path: String, message: String },
}

/// The kubelet's DNS settings: `--cluster-dns`, `--cluster-domain`, `--resolv-conf` (or the
/// KubeletConfiguration's clusterDNS, clusterDomain, resolvConf).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DnsSettings {
    /// The cluster DNS servers ClusterFirst pods use; empty: ClusterFirst falls back to Default.
    pub cluster_dns: Vec<IpAddr>,
    /// The cluster's DNS zone, e.g. `cluster.local`; empty: no cluster search domains.
    pub cluster_domain: String,
    /// The host's resolver file pods' DNS derives from; None (`--resolv-conf=""`): none, and Default
    /// pods resolve through the node's loopback (upstream's behaviour).
    pub resolv_conf: Option<PathBuf>,
}

/// Upstream's default `--resolv-conf`.
pub const DEFAULT_RESOLV_CONF: &str = "/etc/resolv.conf";

impl Default for DnsSettings {
    fn default() -> Self {
        DnsSettings {
            cluster_dns: Vec::new(),
            cluster_domain: String::new(),
            resolv_conf: Some(PathBuf::from(DEFAULT_RESOLV_CONF)),
        }
    }
}

/// nameserver, search and options lines of a resolv.conf (or of the pod's result).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResolvConf {
    pub servers: Vec<String>,
    pub searches: Vec<String>,
    pub options: Vec<String>,
}

/// Something upstream reports as an event while forming a pod's DNS config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DnsNotice {
    /// Warning `DNSConfigForming` on the pod: the search line or nameservers were cut.
    Forming(String),
    /// Warning `MissingClusterDNS` on the node and the pod: ClusterFirst without `--cluster-dns`.
    MissingClusterDns(String),
}

impl DnsNotice {
    pub fn reason(&self) -> &'static str {
        match self {
            DnsNotice::Forming(_) => "DNSConfigForming",
            DnsNotice::MissingClusterDns(_) => "MissingClusterDNS",
        }
    }

    pub fn message(&self) -> &str {
        match self {
            DnsNotice::Forming(m) | DnsNotice::MissingClusterDns(m) => m,
        }
    }
}

/// The pod's resolver configuration and what to report about it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodDns {
    pub config: ResolvConf,
    pub notices: Vec<DnsNotice>,
}

/// A resolv.conf as upstream reads it: `nameserver` lines accumulate, the last `search` and the last
/// `options` line win, `#` lines are comments, a trailing dot on a search domain is dropped (so the same
/// domain counts once against the limits).
pub fn parse_resolv_conf(text: &str) -> Result<ResolvConf, DnsError> {
    let mut out = ResolvConf::default();
    let mut empty_nameserver = false;
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('#') {
            continue;
        }
        let mut fields = line.split_whitespace();
        match fields.next() {
            Some("nameserver") => match fields.next() {
                Some(server) => out.servers.push(server.to_string()),
                None => empty_nameserver = true,
            },
            Some("search") => {
                out.searches = fields
                    .map(|s| s.strip_suffix('.').unwrap_or(s).to_string())
                    .collect();
            }
            Some("options") => out.options = fields.map(String::from).collect(),
            _ => {}
        }
    }
    if empty_nameserver {
        return Err(DnsError::EmptyNameserver);
    }
    Ok(out)
}

/// The host's resolver file, parsed (None: `--resolv-conf` is empty).
pub fn read_host_resolv_conf(path: Option<&Path>) -> Result<Option<ResolvConf>, DnsError> {
    let Some(path) = path else { return Ok(None) };
    let read_err = |message: String| DnsError::Read {
        path: path.display().to_string(),
        message,
    };
    let file = std::fs::File::open(path).map_err(|e| read_err(e.to_string()))?;
    let mut bytes = Vec::new();
    file.take(MAX_RESOLV_CONF_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| read_err(e.to_string()))?;
    if bytes.len() as u64 > MAX_RESOLV_CONF_BYTES {
        return Err(read_err(format!(
            "longer than {MAX_RESOLV_CONF_BYTES} bytes"
        )));
    }
    parse_resolv_conf(&String::from_utf8_lossy(&bytes)).map(Some)
}

/// What a pod's `dnsPolicy` makes its base.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Base {
    Cluster,
    Host,
    None,
}

fn base_of(pod: &Pod) -> Base {
    let spec = pod.spec.as_ref();
    let host_network = spec.and_then(|s| s.host_network) == Some(true);
    match spec.and_then(|s| s.dns_policy.as_deref()) {
        Some("None") => Base::None,
        Some("ClusterFirstWithHostNet") => Base::Cluster,
        // A hostNetwork pod asking for ClusterFirst gets Default (upstream: it would otherwise lose
        // the node's resolver for the node's own names).
        None | Some("") | Some("ClusterFirst") if host_network => Base::Host,
        None | Some("") | Some("ClusterFirst") => Base::Cluster,
        Some("Default") => Base::Host,
        Some(other) => {
            // The API server rejects other values; upstream falls back to ClusterFirst.
            tracing::error!(pod = ?pod.metadata.name, policy = other, "invalid dnsPolicy; falling back to ClusterFirst");
            Base::Cluster
        }
    }
}

/// `items` without repeats, first occurrence kept.
fn dedup(items: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for i in items {
        if !out.contains(&i) {
            out.push(i);
        }
    }
    out
}

/// `existing` options with `extra` merged by name, as upstream's map does: one entry per name, the
/// last value winning, `extra` over `existing`. (Upstream's Go map makes the order random; this keeps
/// first appearance, which resolv.conf readers do not depend on.)
fn merge_options(existing: &[String], extra: &[PodDNSConfigOption]) -> Vec<String> {
    fn put(merged: &mut Vec<(String, String)>, name: String, value: String) {
        match merged.iter_mut().find(|(k, _)| *k == name) {
            Some(slot) => slot.1 = value,
            None => merged.push((name, value)),
        }
    }
    let mut merged: Vec<(String, String)> = Vec::new();
    for o in existing {
        let (k, v) = o.split_once(':').unwrap_or((o, ""));
        put(&mut merged, k.to_string(), v.to_string());
    }
    for o in extra {
        put(
            &mut merged,
            o.name.clone().unwrap_or_default(),
            o.value.clone().unwrap_or_default(),
        );
    }
    merged
        .into_iter()
        .map(|(k, v)| if v.is_empty() { k } else { format!("{k}:{v}") })
        .collect()
}

/// The search list cut to the limits (count, over-long paths, line length), and the notice if cut.
fn fit_searches(mut searches: Vec<String>) -> (Vec<String>, Option<DnsNotice>) {
    let mut cut = false;
    if searches.len() > MAX_SEARCH_PATHS {
        searches.truncate(MAX_SEARCH_PATHS);
        cut = true;
    }
    let before = searches.len();
    searches.retain(|s| s.len() <= MAX_SEARCH_PATH_CHARS);
    cut |= searches.len() != before;
    let mut line = searches.join(" ").len();
    while line > MAX_SEARCH_LINE_CHARS {
        let last = searches.pop().expect("a non-empty line has a domain");
        line = line.saturating_sub(last.len() + 1);
        cut = true;
    }
    let notice = cut.then(|| {
        DnsNotice::Forming(format!(
            "Search Line limits were exceeded, some search paths have been omitted, the applied search line is: {}",
            searches.join(" ")
        ))
    });
    (searches, notice)
}

fn fit_servers(mut servers: Vec<String>) -> (Vec<String>, Option<DnsNotice>) {
    if servers.len() <= MAX_NAMESERVERS {
        return (servers, None);
    }
    servers.truncate(MAX_NAMESERVERS);
    let notice = DnsNotice::Forming(format!(
        "Nameserver limits were exceeded, some nameservers have been omitted, the applied nameserver line is: {}",
        servers.join(" ")
    ));
    (servers, Some(notice))
}

/// `<pod>_<namespace>(<uid>)`, as upstream names a pod in messages.
fn pod_desc(pod: &Pod) -> String {
    let m = &pod.metadata;
    format!(
        "{}_{}({})",
        m.name.as_deref().unwrap_or_default(),
        m.namespace.as_deref().unwrap_or("default"),
        m.uid.as_deref().unwrap_or_default()
    )
}

/// The node-level message of a ClusterFirst pod on a kubelet without cluster DNS (upstream's text).
pub fn missing_cluster_dns_message() -> String {
    "kubelet does not have ClusterDNS IP configured and cannot create Pod using \"ClusterFirst\" policy. Falling back to \"Default\" policy.".into()
}

/// The pod's DNS config. `host`: the parsed `--resolv-conf` (None when it is empty); `node_ips`: for the
/// loopback nameservers a Default pod gets without a host file.
pub fn pod_dns(
    pod: &Pod,
    settings: &DnsSettings,
    host: Option<&ResolvConf>,
    node_ips: &[IpAddr],
) -> PodDns {
    let mut notices = Vec::new();
    let mut config = host.cloned().unwrap_or_default();
    let mut base = base_of(pod);
    if base == Base::Cluster && settings.cluster_dns.is_empty() {
        let node_message = missing_cluster_dns_message();
        tracing::warn!(pod = %pod_desc(pod), "{node_message}");
        notices.push(DnsNotice::MissingClusterDns(format!(
            "pod: {:?}. {node_message}",
            pod_desc(pod)
        )));
        base = Base::Host;
    }
    match base {
        Base::None => config = ResolvConf::default(),
        Base::Cluster => {
            config.servers = settings.cluster_dns.iter().map(IpAddr::to_string).collect();
            if !settings.cluster_domain.is_empty() {
                let zone = &settings.cluster_domain;
                let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
                let cluster = [
                    format!("{ns}.svc.{zone}"),
                    format!("svc.{zone}"),
                    zone.clone(),
                ];
                config.searches = dedup(cluster.into_iter().chain(config.searches));
            }
            config.options = CLUSTER_FIRST_OPTIONS
                .iter()
                .map(|o| o.to_string())
                .collect();
        }
        Base::Host if host.is_none() => {
            // No host file: resolve through the node itself, as a resolver with no nameserver line
            // would (one loopback entry per node address family), and search nothing.
            config.servers = node_ips
                .iter()
                .map(|ip| if ip.is_ipv6() { "::1" } else { "127.0.0.1" }.to_string())
                .collect();
            if config.servers.is_empty() {
                config.servers.push("127.0.0.1".into());
            }
            config.searches = vec![".".into()];
        }
        Base::Host => {}
    }
    if let Some(extra) = pod.spec.as_ref().and_then(|s| s.dns_config.as_ref()) {
        config.servers = dedup(
            config
                .servers
                .into_iter()
                .chain(extra.nameservers.iter().flatten().cloned()),
        );
        config.searches = dedup(
            config
                .searches
                .into_iter()
                .chain(extra.searches.iter().flatten().cloned()),
        );
        config.options = merge_options(
            &config.options,
            extra.options.as_deref().unwrap_or_default(),
        );
    }
    let (servers, n) = fit_servers(config.servers);
    notices.extend(n);
    let (searches, n) = fit_searches(config.searches);
    notices.extend(n);
    for n in &notices {
        if let DnsNotice::Forming(m) = n {
            tracing::error!(pod = %pod_desc(pod), "{m}");
        }
    }
    PodDns {
        config: ResolvConf {
            servers,
            searches,
            options: config.options,
        },
        notices,
    }
}

/// Upstream's start-up check of the host file (CheckLimitsForResolvConf): a search line that leaves no
/// room for the three cluster domains, or that a pod's resolver would cut, is worth a warning.
pub fn host_limits_warning(host: &ResolvConf, path: &Path, cluster_domain: &str) -> Option<String> {
    let mut limit = MAX_SEARCH_PATHS;
    if !cluster_domain.is_empty() {
        limit -= 3;
    }
    let path = path.display();
    if host.searches.len() > limit {
        return Some(format!(
            "Resolv.conf file '{path}' contains search line consisting of more than {limit} domains!"
        ));
    }
    if host
        .searches
        .iter()
        .any(|s| s.len() > MAX_SEARCH_PATH_CHARS)
    {
        return Some(format!(
            "Resolv.conf file {:?} contains a search path which length is more than allowed {MAX_SEARCH_PATH_CHARS} chars!",
            path.to_string()
        ));
    }
    if host.searches.join(" ").len() > MAX_SEARCH_LINE_CHARS {
        return Some(format!(
            "Resolv.conf file '{path}' contains search line which length is more than allowed {MAX_SEARCH_LINE_CHARS} chars!"
        ));
    }
    None
}

#[cfg(test)]
#[path = "dns_config_tests.rs"]
mod tests;
