//! Semantic checks serde cannot express: cross-field rules, uniqueness, network layout.
//!
//! Each problem carries the full field path (`spec.hosts[2].address`); `mod.rs` turns the path into a
//! line number with `location.rs`.

use std::collections::HashMap;
use std::net::IpAddr;

use super::types::{ClusterConfig, API_VERSION, KIND};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub path: String,
    pub message: String,
}

/// What the kubelet would refuse at start in an `--allowed-unsafe-sysctls` entry (its characters,
/// or a sysctl not known to be namespaced), None when it takes it.
fn unsafe_sysctl_problem(s: &str) -> Option<&'static str> {
    const NAMESPACED: &[&str] = &["kernel.shm", "kernel.msg", "fs.mqueue.", "net."];
    let name = s.strip_suffix('*').unwrap_or(s);
    let chars_ok = !name.is_empty()
        && name
            .bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || b"-_./".contains(&c));
    if !chars_ok {
        return Some("expected a sysctl name, or a prefix ending in *");
    }
    let dotted = if name
        .find(['.', '/'])
        .is_some_and(|i| name.as_bytes()[i] == b'/')
    {
        name.replace('/', ".")
    } else {
        name.to_string()
    };
    let namespaced = dotted == "kernel.sem" || NAMESPACED.iter().any(|p| dotted.starts_with(p));
    (!namespaced).then_some(
        "not known to be namespaced (kernel.shm*, kernel.msg*, kernel.sem, fs.mqueue.*, net.*)",
    )
}

fn problem(path: impl Into<String>, message: impl Into<String>) -> Problem {
    Problem {
        path: path.into(),
        message: message.into(),
    }
}

/// All problems found, in document order (roughly); empty when the config is usable.
pub fn validate(c: &ClusterConfig) -> Vec<Problem> {
    let mut out = Vec::new();
    if c.api_version != API_VERSION {
        out.push(problem(
            "apiVersion",
            format!(
                "unsupported apiVersion '{}', expected {API_VERSION}",
                c.api_version
            ),
        ));
    }
    if c.kind != KIND {
        out.push(problem(
            "kind",
            format!("unsupported kind '{}', expected {KIND}", c.kind),
        ));
    }
    if let Err(why) = check_dns_label(&c.metadata.name) {
        out.push(problem(
            "metadata.name",
            format!("invalid cluster name '{}': {why}", c.metadata.name),
        ));
    }
    hosts(c, &mut out);
    networking(c, &mut out);
    super::apiserver::validate(c, &mut out);
    storage(c, &mut out);
    if let Some(ep) = &c.spec.control_plane_endpoint {
        if let Err(why) = split_host_port(ep) {
            out.push(problem(
                "spec.controlPlaneEndpoint",
                format!("invalid endpoint '{ep}': {why}"),
            ));
        }
    }
    let cm = &c.spec.controller_manager;
    for (field, v) in [
        (
            "spec.controllerManager.nodeMonitorGracePeriod",
            &cm.node_monitor_grace_period,
        ),
        (
            "spec.controllerManager.podEvictionTimeout",
            &cm.pod_eviction_timeout,
        ),
    ] {
        if let Err(why) = check_duration(v) {
            out.push(problem(field, format!("invalid duration '{v}': {why}")));
        }
    }
    kubelet(c, &mut out);
    let pki = &c.spec.pki;
    if pki.ca_validity_days == 0 {
        out.push(problem("spec.pki.caValidityDays", "must be at least 1"));
    }
    if pki.cert_validity_days == 0 {
        out.push(problem("spec.pki.certValidityDays", "must be at least 1"));
    } else if pki.cert_validity_days > pki.ca_validity_days {
        out.push(problem(
            "spec.pki.certValidityDays",
            format!(
                "{} days outlives the CA ({} days); certificates cannot be valid longer than their CA",
                pki.cert_validity_days, pki.ca_validity_days
            ),
        ));
    }
    super::backup::validate(c, &mut out);
    super::external_etcd::validate(c, &mut out);
    if let Some(r) = &c.spec.registry {
        if let Err(why) = split_host_port(&r.mirror).and_then(|(h, _)| check_address(h)) {
            out.push(problem(
                "spec.registry.mirror",
                format!("invalid mirror '{}': {why}", r.mirror),
            ));
        }
        // Each names a certs.d directory on every host: a registry host name, optionally with a port.
        for (i, up) in r.mirror_of.iter().enumerate() {
            let host = split_host_port(up).map_or(up.as_str(), |(h, _)| h);
            if let Err(why) = check_address(host) {
                out.push(problem(
                    format!("spec.registry.mirrorOf[{i}]"),
                    format!("invalid registry '{up}': {why}"),
                ));
            }
        }
    }
    if c.spec.images.pause.trim().is_empty() {
        out.push(problem("spec.images.pause", "must name an image"));
    }
    out
}

fn hosts(c: &ClusterConfig, out: &mut Vec<Problem>) {
    let hosts = &c.spec.hosts;
    if hosts.is_empty() {
        out.push(problem("spec.hosts", "at least one host is required"));
        return;
    }
    if !hosts.iter().any(|h| h.is_controller()) {
        out.push(problem(
            "spec.hosts",
            "no controller: at least one host needs role controller or controller+worker",
        ));
    }
    let mut names: HashMap<&str, usize> = HashMap::new();
    let mut addresses: HashMap<String, usize> = HashMap::new();
    let net = &c.spec.networking;
    for (i, h) in hosts.iter().enumerate() {
        let at = |f: &str| format!("spec.hosts[{i}].{f}");
        if let Err(why) = check_dns_subdomain(&h.name) {
            out.push(problem(
                at("name"),
                format!("invalid host name '{}': {why}", h.name),
            ));
        } else if let Some(first) = names.insert(&h.name, i) {
            out.push(problem(
                at("name"),
                format!("duplicate host name '{}' (also hosts[{first}])", h.name),
            ));
            names.insert(&h.name, first);
        }
        if let Err(why) = check_address(&h.address) {
            out.push(problem(
                at("address"),
                format!("invalid address '{}': {why}", h.address),
            ));
        } else {
            // The same machine reached by the same address and port is a duplicate; a NAT/bastion setup may
            // legitimately share an address with different ports.
            let key = format!("{}:{}", h.address.to_ascii_lowercase(), h.ssh.port);
            if let Some(first) = addresses.get(&key) {
                out.push(problem(
                    at("address"),
                    format!("duplicate address '{}' (also hosts[{first}])", h.address),
                ));
            } else {
                addresses.insert(key, i);
            }
        }
        if let Some(ip) = h.node_ip {
            if ip.0.is_unspecified() {
                out.push(problem(
                    at("nodeIP"),
                    format!("{ip} is not a usable node address"),
                ));
            }
        }
        // The address the node announces must not fall into a cluster-internal range, or routing breaks.
        let node_ip = h
            .node_ip
            .map(|ip| (ip.0, "nodeIP"))
            .or_else(|| h.address.parse::<IpAddr>().ok().map(|ip| (ip, "address")));
        if let Some((ip, field)) = node_ip {
            for (cidr, name) in [(net.pod_cidr, "podCIDR"), (net.service_cidr, "serviceCIDR")] {
                if cidr.contains(ip) {
                    out.push(problem(
                        at(field),
                        format!("{ip} lies inside the {name} {cidr}"),
                    ));
                }
            }
        }
        if h.ssh.port == 0 {
            out.push(problem(at("ssh.port"), "port 0 is not a valid SSH port"));
        }
        if h.ssh.user.trim().is_empty() {
            out.push(problem(at("ssh.user"), "must not be empty"));
        }
        if let Some(b) = &h.ssh.bastion {
            if let Err(why) = check_address(&b.address) {
                out.push(problem(
                    at("ssh.bastion.address"),
                    format!("invalid address '{}': {why}", b.address),
                ));
            }
            if b.port == 0 {
                out.push(problem(
                    at("ssh.bastion.port"),
                    "port 0 is not a valid SSH port",
                ));
            }
        }
        for key in h.labels.keys() {
            if key.is_empty() || key.len() > 316 || key.contains(char::is_whitespace) {
                out.push(problem(
                    at(&format!("labels.{key}")),
                    format!("invalid label key '{key}'"),
                ));
            }
        }
    }
}

fn networking(c: &ClusterConfig, out: &mut Vec<Problem>) {
    let net = &c.spec.networking;
    if net.pod_cidr.overlaps(&net.service_cidr) {
        out.push(problem(
            "spec.networking.serviceCIDR",
            format!("{} overlaps podCIDR {}", net.service_cidr, net.pod_cidr),
        ));
    }
    let width = if net.pod_cidr.is_ipv4() { 32 } else { 128 };
    let m = net.node_cidr_mask_size;
    if m < net.pod_cidr.prefix || m > width {
        out.push(problem(
            "spec.networking.nodeCIDRMaskSize",
            format!(
                "/{m} must lie between the podCIDR prefix /{} and /{width}",
                net.pod_cidr.prefix
            ),
        ));
    } else if (m - net.pod_cidr.prefix) < 16
        && (1u64 << (m - net.pod_cidr.prefix)) < c.spec.hosts.len() as u64
    {
        out.push(problem(
            "spec.networking.nodeCIDRMaskSize",
            format!(
                "podCIDR {} holds only {} /{m} node ranges for {} hosts",
                net.pod_cidr,
                1u64 << (m - net.pod_cidr.prefix),
                c.spec.hosts.len()
            ),
        ));
    }
    if width == 32 && m > 30 {
        out.push(problem(
            "spec.networking.nodeCIDRMaskSize",
            format!("/{m} leaves no room for pods on a node"),
        ));
    }
    cluster_dns(c, out);
}

/// The DNS Service's address must be a service address the `kubernetes` Service does not hold, and
/// the zone a DNS name.
/// The eviction signals kiln-kubelet enforces; others would be accepted by it and silently not watched.
const EVICTION_SIGNALS: &[&str] = &[
    "memory.available",
    "nodefs.available",
    "imagefs.available",
    "pid.available",
];

/// What `systemReserved`/`kubeReserved` may name (upstream's reservable resources).
const RESERVABLE: &[&str] = &["cpu", "memory", "ephemeral-storage", "pid"];

fn kubelet(c: &ClusterConfig, out: &mut Vec<Problem>) {
    let k = &c.spec.kubelet;
    for (key, map) in [
        ("systemReserved", &k.system_reserved),
        ("kubeReserved", &k.kube_reserved),
    ] {
        for (resource, value) in map {
            let field = format!("spec.kubelet.{key}.{resource}");
            if !RESERVABLE.contains(&resource.as_str()) {
                out.push(problem(
                    field,
                    format!(
                        "cannot reserve '{resource}': expected one of {}",
                        RESERVABLE.join(", ")
                    ),
                ));
                continue;
            }
            // Parsed as the kubelet will (a value it refuses would stop it at start on every node);
            // the characters a shell would read never reach its command line.
            let parsed = kiln_common::quantity::parse(value);
            let plain = value
                .trim_start_matches(['-', '+'])
                .chars()
                .all(|ch| ch.is_ascii_alphanumeric() || ch == '.');
            match parsed {
                Ok(q) if q.0 >= 0 && plain => {}
                Ok(_) if plain => out.push(problem(field, format!("'{value}' is negative"))),
                _ => out.push(problem(
                    field,
                    format!("invalid quantity '{value}': expected e.g. 500m, 1Gi or 1000"),
                )),
            }
        }
    }
    if let Some(n) = k.pod_pids_limit {
        if n == 0 || n < -1 {
            out.push(problem(
                "spec.kubelet.podPidsLimit",
                format!("{n}: expected a positive number, or -1 for unlimited"),
            ));
        }
    }
    for (i, s) in c.spec.kubelet.allowed_unsafe_sysctls.iter().enumerate() {
        if let Some(why) = unsafe_sysctl_problem(s) {
            out.push(problem(
                format!("spec.kubelet.allowedUnsafeSysctls[{i}]"),
                format!("'{s}': {why}"),
            ));
        }
    }
    for (signal, value) in &c.spec.kubelet.eviction_hard {
        let field = format!("spec.kubelet.evictionHard.{signal}");
        if !EVICTION_SIGNALS.contains(&signal.as_str()) {
            out.push(problem(
                field,
                format!(
                    "unsupported eviction signal '{signal}': expected one of {}",
                    EVICTION_SIGNALS.join(", ")
                ),
            ));
        } else if let Err(why) = check_threshold(value) {
            out.push(problem(
                field,
                format!("invalid threshold '{value}': {why}"),
            ));
        }
    }
}

/// The local-path directory goes onto the kubelet's command line and is what `kiln reset` cleans:
/// an absolute, plain path (no `.`/`..`, no characters a shell or a unit file would read), never `/`.
fn storage(c: &ClusterConfig, out: &mut Vec<Problem>) {
    let dir = &c.spec.storage.local_path.dir;
    let text = dir.display().to_string();
    let plain = text
        .chars()
        .all(|ch| ch.is_ascii_alphanumeric() || "/._-".contains(ch));
    let why = if !dir.is_absolute() {
        Some("must be an absolute path")
    } else if !plain {
        Some("may contain only letters, digits, '/', '.', '_' and '-'")
    } else if dir.components().any(|p| {
        matches!(
            p,
            std::path::Component::ParentDir | std::path::Component::CurDir
        )
    }) || text.contains("/./")
        || text.ends_with("/.")
    {
        Some("must not contain '.' or '..' components")
    } else if dir.parent().is_none() {
        Some("must not be the root directory")
    } else {
        None
    };
    if let Some(why) = why {
        out.push(problem(
            "spec.storage.localPath.dir",
            format!("invalid local-path directory '{text}': {why}"),
        ));
    }
}

/// A threshold as the kubelet reads it: a percentage of capacity (`10%`) or a byte quantity (`1Gi`, `500M`).
fn check_threshold(v: &str) -> Result<(), String> {
    if let Some(pct) = v.strip_suffix('%') {
        return match pct.parse::<f64>() {
            Ok(p) if (0.0..=100.0).contains(&p) => Ok(()),
            _ => Err("a percentage must be a number from 0 to 100".into()),
        };
    }
    let digits = v.trim_end_matches(|ch: char| ch.is_ascii_alphabetic());
    let suffix = &v[digits.len()..];
    const SUFFIXES: &[&str] = &[
        "", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei",
    ];
    if digits.is_empty() || digits.parse::<f64>().map_or(true, |n| n < 0.0) {
        return Err("expected a quantity such as 1Gi or a percentage such as 10%".into());
    }
    if !SUFFIXES.contains(&suffix) {
        return Err(format!("unknown quantity suffix '{suffix}'"));
    }
    Ok(())
}

fn cluster_dns(c: &ClusterConfig, out: &mut Vec<Problem>) {
    let net = &c.spec.networking;
    if let Some(ip) = net.cluster_dns {
        let field = "spec.networking.clusterDNS";
        if !net.service_cidr.contains(ip) {
            out.push(problem(
                field,
                format!("{ip} is outside serviceCIDR {}", net.service_cidr),
            ));
        } else if ip == net.service_cidr.addr {
            out.push(problem(
                field,
                format!("{ip} is serviceCIDR's network address"),
            ));
        } else if ip == net.kubernetes_service_ip() {
            out.push(problem(
                field,
                format!("{ip} is the kubernetes Service's address"),
            ));
        }
    } else if !net.service_cidr.contains(net.cluster_dns_ip()) {
        out.push(problem(
            "spec.networking.serviceCIDR",
            format!(
                "{} is too small for the cluster DNS address (its 10th); set spec.networking.clusterDNS",
                net.service_cidr
            ),
        ));
    }
    if let Err(why) = check_dns_subdomain(&net.cluster_domain) {
        out.push(problem(
            "spec.networking.clusterDomain",
            format!("invalid cluster domain '{}': {why}", net.cluster_domain),
        ));
    }
    for (i, u) in net.dns.upstream.iter().enumerate() {
        let ok = u.parse::<IpAddr>().is_ok() || u.parse::<std::net::SocketAddr>().is_ok();
        if !ok {
            out.push(problem(
                format!("spec.networking.dns.upstream[{i}]"),
                format!("invalid resolver '{u}': expected an IP address or IP:port"),
            ));
        }
    }
    // CoreDNS's bounds for its kubernetes plugin's ttl: a longer one keeps clients on deleted Services
    if let Some(ttl) = net.dns.ttl.filter(|t| *t > MAX_DNS_TTL) {
        out.push(problem(
            "spec.networking.dns.ttl",
            format!("{ttl} is more than {MAX_DNS_TTL} seconds"),
        ));
    }
}

/// The longest TTL kiln-dns takes (its `--ttl` limit).
const MAX_DNS_TTL: u32 = 3600;

/// Splits `host:port` (or `[v6]:port`); the port is required.
pub fn split_host_port(s: &str) -> Result<(&str, u16), String> {
    let (host, port) = if let Some(rest) = s.strip_prefix('[') {
        let (h, p) = rest.split_once("]:").ok_or("expected [address]:port")?;
        (h, p)
    } else {
        let (h, p) = s.rsplit_once(':').ok_or("expected host:port")?;
        if h.contains(':') {
            return Err("an IPv6 address must be written [address]:port".into());
        }
        (h, p)
    };
    let port: u16 = port.parse().map_err(|_| format!("invalid port '{port}'"))?;
    if port == 0 {
        return Err("port 0".into());
    }
    check_address(host)?;
    Ok((host, port))
}

/// An IP address (not unspecified) or a DNS name.
pub fn check_address(s: &str) -> Result<(), String> {
    if let Ok(ip) = s.parse::<IpAddr>() {
        if ip.is_unspecified() {
            return Err(format!("{ip} is not a reachable address"));
        }
        return Ok(());
    }
    if s.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return Err("not a valid IP address".into());
    }
    check_dns_subdomain(s).map_err(|why| format!("neither an IP address nor a DNS name ({why})"))
}

fn check_dns_label(s: &str) -> Result<(), String> {
    if s.is_empty() || s.len() > 63 {
        return Err("must be 1 to 63 characters".into());
    }
    if !s
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    {
        return Err("only lowercase letters, digits and '-' are allowed".into());
    }
    if s.starts_with('-') || s.ends_with('-') {
        return Err("must start and end with a letter or digit".into());
    }
    Ok(())
}

fn check_dns_subdomain(s: &str) -> Result<(), String> {
    if s.is_empty() || s.len() > 253 {
        return Err("must be 1 to 253 characters".into());
    }
    s.split('.').try_for_each(check_dns_label)
}

/// A Go-style duration as the components take it: a number and a unit (ms, s, m, h), e.g. `40s`, `5m`.
fn check_duration(s: &str) -> Result<(), String> {
    let unit_at = s
        .find(|c: char| !c.is_ascii_digit())
        .ok_or("missing unit (ms, s, m or h)")?;
    let (n, unit) = s.split_at(unit_at);
    if n.is_empty() || n.parse::<u64>().is_err() {
        return Err("expected a whole number before the unit".into());
    }
    match unit {
        "ms" | "s" | "m" | "h" => Ok(()),
        _ => Err(format!("unknown unit '{unit}', expected ms, s, m or h")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_port() {
        assert_eq!(
            split_host_port("10.0.0.1:6443").unwrap(),
            ("10.0.0.1", 6443)
        );
        assert_eq!(
            split_host_port("[fd00::1]:6443").unwrap(),
            ("fd00::1", 6443)
        );
        assert_eq!(
            split_host_port("api.example.com:443").unwrap(),
            ("api.example.com", 443)
        );
        assert!(split_host_port("10.0.0.1").is_err());
        assert!(split_host_port("0.0.0.0:6443").is_err());
        assert!(split_host_port("fd00::1:6443").is_err());
    }

    #[test]
    fn addresses() {
        assert!(check_address("192.168.1.10").is_ok());
        assert!(check_address("node-1.lab").is_ok());
        assert!(check_address("0.0.0.0")
            .unwrap_err()
            .contains("not a reachable"));
        assert!(check_address("::").is_err());
        assert!(check_address("10.0.0.300")
            .unwrap_err()
            .contains("not a valid IP"));
        assert!(check_address("bad_name").is_err());
    }

    #[test]
    fn durations() {
        assert!(check_duration("40s").is_ok());
        assert!(check_duration("5m").is_ok());
        assert!(check_duration("500ms").is_ok());
        assert!(check_duration("5").is_err());
        assert!(check_duration("s").is_err());
        assert!(check_duration("5d").is_err());
    }
}
