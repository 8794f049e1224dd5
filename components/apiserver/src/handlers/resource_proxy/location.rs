//! Where a proxy request goes, as upstream's ResourceLocation functions decide it: the
//! `[scheme:]name[:port]` id, the path after `…/proxy`, and the backend a pod, a service (through
//! its Endpoints) or a node resolves to. Pure: tested on strings and JSON objects.

use std::net::IpAddr;

use serde_json::Value;

use crate::kubelet_client::kubelet_address;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LocationError {
    /// The id is not `name`, `name:port` or `scheme:name:port` with scheme http or https.
    #[error("invalid {kind} request {id:?}")]
    InvalidId { kind: &'static str, id: String },
    /// The pod's (or node's) address is not one the API server may proxy to.
    #[error("address not allowed")]
    AddressNotAllowed,
    #[error("no service port {port} found for service {service:?}")]
    NoServicePort { port: String, service: String },
    #[error("no endpoints available for service {0:?}")]
    NoEndpoints(String),
    #[error("node {0} reports no address")]
    NoNodeAddress(String),
}

/// How the API server talks to the backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Http,
    /// HTTPS without verifying the backend's certificate: pods and services are reached by IP, so
    /// upstream's proxy transport cannot check a name either.
    Https,
    /// The node's kubelet: HTTPS with the apiserver-kubelet-client certificate.
    Kubelet,
}

impl Transport {
    /// `""` and `http` are plain HTTP, as upstream's normalizeLocation defaults the scheme.
    fn for_scheme(scheme: &str) -> Transport {
        if scheme == "https" {
            Transport::Https
        } else {
            Transport::Http
        }
    }
}

/// The backend a request is proxied to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backend {
    pub transport: Transport,
    pub host: String,
    /// As named in the request or found in the object; empty = the scheme's default port.
    pub port: String,
}

impl Backend {
    /// `host[:port]`, IPv6 in brackets, as Go's URL.Host holds it (what HTML links are compared to).
    pub fn authority(&self) -> String {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        if self.port.is_empty() {
            host
        } else {
            format!("{host}:{}", self.port)
        }
    }

    /// The port to dial: the given one, else the scheme's.
    pub fn dial_port(&self) -> Option<u16> {
        if self.port.is_empty() {
            return Some(match self.transport {
                Transport::Http => 80,
                Transport::Https | Transport::Kubelet => 443,
            });
        }
        self.port.parse().ok()
    }
}

/// The parts of a proxy id (upstream's SplitSchemeNamePort).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemeNamePort {
    pub scheme: String,
    pub name: String,
    pub port: String,
}

pub fn split_scheme_name_port(id: &str) -> Option<SchemeNamePort> {
    let parts: Vec<&str> = id.split(':').collect();
    let (scheme, name, port) = match parts.as_slice() {
        [name] => ("", *name, ""),
        [name, port] => ("", *name, *port),
        [scheme, name, port] => (*scheme, *name, *port),
        _ => return None,
    };
    if name.is_empty() || !matches!(scheme, "" | "http" | "https") {
        return None;
    }
    Some(SchemeNamePort {
        scheme: scheme.into(),
        name: name.into(),
        port: port.into(),
    })
}

/// Percent-decodes a request path (Go's URL.Path is the decoded form); invalid escapes stay as
/// they are.
pub fn decode_path(raw: &str) -> String {
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// What follows the first `before` segments of `path` (empty segments not counted, as the request
/// path parser skips them): `""`, or a string starting with `/`.
pub fn subpath(path: &str, before: usize) -> &str {
    let mut rest = path;
    let mut skipped = 0;
    while skipped < before {
        rest = rest.trim_start_matches('/');
        if rest.is_empty() {
            return "";
        }
        let end = rest.find('/').unwrap_or(rest.len());
        rest = &rest[end..];
        skipped += 1;
    }
    rest
}

/// Go's path.Clean: one slash between elements, `.` dropped, `..` removing the element before it.
pub fn clean(path: &str) -> String {
    if path.is_empty() {
        return ".".into();
    }
    let rooted = path.starts_with('/');
    let mut out: Vec<&str> = Vec::new();
    for seg in path.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                if out.last().is_some_and(|s| *s != "..") {
                    out.pop();
                } else if !rooted {
                    out.push("..");
                }
            }
            s => out.push(s),
        }
    }
    let joined = out.join("/");
    match (rooted, joined.is_empty()) {
        (true, _) => format!("/{joined}"),
        (false, true) => ".".into(),
        (false, false) => joined,
    }
}

/// Go's path.Join: the non-empty elements joined by `/` and cleaned; `""` when all are empty.
pub fn join(elems: &[&str]) -> String {
    let parts: Vec<&str> = elems.iter().copied().filter(|e| !e.is_empty()).collect();
    if parts.is_empty() {
        return String::new();
    }
    clean(&parts.join("/"))
}

/// The backend path the subpath names (upstream: `path.Join(location.Path, opts.Path)`, where the
/// subpath keeps a request's trailing slash): `""` for `…/proxy`, `/` for `…/proxy/`.
pub fn location_path(subpath: &str) -> String {
    if subpath.is_empty() {
        String::new()
    } else {
        clean(subpath)
    }
}

/// The path sent to the backend: the location path, with the request's trailing slash kept.
pub fn backend_path(location_path: &str, request_path: &str) -> String {
    if request_path.ends_with('/') && !location_path.ends_with('/') {
        format!("{location_path}/")
    } else {
        location_path.to_string()
    }
}

/// What the request path holds before the backend path (upstream's PathPrepend): links the
/// backend writes are put under it.
pub fn path_prepend(request_path: &str, location_path: &str) -> String {
    let mut suffix = location_path.to_string();
    if request_path.ends_with('/') && !suffix.ends_with('/') {
        suffix.push('/');
    }
    request_path
        .strip_suffix(suffix.as_str())
        .unwrap_or(request_path)
        .to_string()
}

/// Go's URL path escaping (`EscapedPath` of a path with no raw form): unreserved characters and
/// `$&+,/:;=@` stay, everything else is percent-encoded.
pub fn escape_path(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for b in path.bytes() {
        let keep = b.is_ascii_alphanumeric()
            || matches!(
                b,
                b'-' | b'_'
                    | b'.'
                    | b'~'
                    | b'$'
                    | b'&'
                    | b'+'
                    | b','
                    | b'/'
                    | b':'
                    | b';'
                    | b'='
                    | b'@'
            );
        if keep {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Go's IP.IsGlobalUnicast: what a pod address must be to be proxied to.
pub fn is_global_unicast(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            !(v4.is_unspecified()
                || v4.is_loopback()
                || v4.is_multicast()
                || v4.is_link_local()
                || v4.is_broadcast())
        }
        IpAddr::V6(v6) => {
            let link_local = (v6.segments()[0] & 0xffc0) == 0xfe80;
            !(v6.is_unspecified() || v6.is_loopback() || v6.is_multicast() || link_local)
        }
    }
}

/// Upstream's IsProxyableIP, for node addresses: no loopback, no link-local.
pub fn is_proxyable(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => !(v4.is_loopback() || v4.is_link_local() || v4.is_multicast()),
        IpAddr::V6(v6) => {
            let link_local = (v6.segments()[0] & 0xffc0) == 0xfe80;
            let local_multicast = v6.is_multicast() && matches!(v6.segments()[0] & 0x000f, 1 | 2);
            !(v6.is_loopback() || link_local || local_multicast)
        }
    }
}

fn pod_ip(pod: &Value) -> &str {
    pod["status"]["podIPs"][0]["ip"]
        .as_str()
        .or_else(|| pod["status"]["podIP"].as_str())
        .unwrap_or("")
}

/// A pod's backend: its first IP, on the asked port or else the first port its containers declare.
pub fn pod_backend(pod: &Value, id: &SchemeNamePort) -> Result<Backend, LocationError> {
    let port = if id.port.is_empty() {
        pod["spec"]["containers"]
            .as_array()
            .into_iter()
            .flatten()
            .find_map(|c| c["ports"][0]["containerPort"].as_i64())
            .map(|p| p.to_string())
            .unwrap_or_default()
    } else {
        id.port.clone()
    };
    let ip = pod_ip(pod);
    match ip.parse::<IpAddr>() {
        Ok(addr) if is_global_unicast(addr) => Ok(Backend {
            transport: Transport::for_scheme(&id.scheme),
            host: ip.to_string(),
            port,
        }),
        _ => Err(LocationError::AddressNotAllowed),
    }
}

/// For a port given by number, the name of the service port with that number (endpoints ports
/// are matched by name).
pub fn service_port_name(service: &Value, id: &SchemeNamePort) -> Result<String, LocationError> {
    let Ok(number) = id.port.parse::<i64>() else {
        return Ok(id.port.clone());
    };
    service["spec"]["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["port"].as_i64() == Some(number))
        .map(|p| p["name"].as_str().unwrap_or("").to_string())
        .ok_or_else(|| LocationError::NoServicePort {
            port: id.port.clone(),
            service: id.name.clone(),
        })
}

/// One endpoint address that may serve the request, still to be checked against its pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub ip: String,
    pub port: i64,
    /// The pod behind the address (targetRef), when it names one in the service's namespace.
    pub pod: Option<String>,
}

/// The addresses of the Endpoints' subsets that carry the named port, in the order upstream tries
/// them: from a random subset on, and within a subset from a random address on (`pick(n)` gives a
/// number below n). Errors when there is no subset at all.
pub fn endpoint_candidates(
    endpoints: &Value,
    namespace: &str,
    service: &str,
    port_name: &str,
    pick: &mut dyn FnMut(usize) -> usize,
) -> Result<Vec<Candidate>, LocationError> {
    let subsets = endpoints["subsets"].as_array().cloned().unwrap_or_default();
    if subsets.is_empty() {
        return Err(LocationError::NoEndpoints(service.to_string()));
    }
    let mut out = Vec::new();
    let start = pick(subsets.len());
    for n in 0..subsets.len() {
        let subset = &subsets[(start + n) % subsets.len()];
        let addresses = subset["addresses"].as_array().cloned().unwrap_or_default();
        if addresses.is_empty() {
            continue;
        }
        let ports = subset["ports"].as_array().cloned().unwrap_or_default();
        for port in ports
            .iter()
            .filter(|p| p["name"].as_str().unwrap_or("") == port_name)
        {
            let first = pick(addresses.len());
            for k in 0..addresses.len() {
                let a = &addresses[(first + k) % addresses.len()];
                let target = &a["targetRef"];
                let pod = (target.is_object()
                    && target["namespace"].as_str().unwrap_or("") == namespace)
                    .then(|| target["name"].as_str().unwrap_or("").to_string());
                out.push(Candidate {
                    ip: a["ip"].as_str().unwrap_or("").to_string(),
                    port: port["port"].as_i64().unwrap_or(0),
                    pod,
                });
            }
        }
    }
    Ok(out)
}

/// Whether the pod holds the endpoint's address (upstream proxies only to addresses of pods).
pub fn pod_has_ip(pod: &Value, ip: &str) -> bool {
    let listed = pod["status"]["podIPs"]
        .as_array()
        .is_some_and(|l| l.iter().any(|p| p["ip"].as_str() == Some(ip)));
    listed || pod["status"]["podIP"].as_str() == Some(ip)
}

/// A service endpoint's backend.
pub fn service_backend(candidate: &Candidate, id: &SchemeNamePort) -> Backend {
    Backend {
        transport: Transport::for_scheme(&id.scheme),
        host: candidate.ip.clone(),
        port: candidate.port.to_string(),
    }
}

/// A node's backend: its kubelet (preferred address, reported port) unless another port is asked
/// for, which is then reached with the asked scheme like a pod.
pub fn node_backend(node: &Value, id: &SchemeNamePort) -> Result<Backend, LocationError> {
    let (host, kubelet_port) =
        kubelet_address(node).ok_or_else(|| LocationError::NoNodeAddress(id.name.clone()))?;
    if let Ok(ip) = host.parse::<IpAddr>() {
        if !is_proxyable(ip) {
            return Err(LocationError::AddressNotAllowed);
        }
    }
    if id.port.is_empty() || id.port == kubelet_port.to_string() {
        return Ok(Backend {
            transport: Transport::Kubelet,
            host,
            port: kubelet_port.to_string(),
        });
    }
    Ok(Backend {
        transport: Transport::for_scheme(&id.scheme),
        host,
        port: id.port.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn id(s: &str) -> SchemeNamePort {
        split_scheme_name_port(s).unwrap()
    }

    #[test]
    fn ids_split_like_split_scheme_name_port() {
        assert_eq!(
            id("web"),
            SchemeNamePort {
                scheme: "".into(),
                name: "web".into(),
                port: "".into()
            }
        );
        assert_eq!(id("web:8080").port, "8080");
        let full = id("https:web:tls");
        assert_eq!(
            (full.scheme.as_str(), full.name.as_str(), full.port.as_str()),
            ("https", "web", "tls")
        );
        assert_eq!(id("web:").port, "");
        assert!(split_scheme_name_port("ftp:web:21").is_none());
        assert!(split_scheme_name_port(":80").is_none());
        assert!(split_scheme_name_port("a:b:c:d").is_none());
    }

    #[test]
    fn the_subpath_is_what_follows_proxy() {
        let p = "/api/v1/namespaces/ns/pods/p:80/proxy/some/path";
        assert_eq!(subpath(p, 7), "/some/path");
        assert_eq!(subpath("/api/v1/namespaces/ns/pods/p/proxy", 7), "");
        assert_eq!(subpath("/api/v1/namespaces/ns/pods/p/proxy/", 7), "/");
        assert_eq!(subpath("/api/v1/nodes/n1/proxy/logs/", 5), "/logs/");
    }

    #[test]
    fn location_paths_follow_path_join() {
        assert_eq!(location_path(""), "");
        assert_eq!(location_path("/"), "/");
        assert_eq!(location_path("//"), "/");
        assert_eq!(location_path("/a//b/../c/"), "/a/c");
        assert_eq!(backend_path("/a/c", "/x/proxy/a//b/../c/"), "/a/c/");
        assert_eq!(backend_path("", "/x/proxy"), "");
        assert_eq!(backend_path("/", "/x/proxy/"), "/");
    }

    #[test]
    fn clean_and_join_match_go() {
        assert_eq!(clean(""), ".");
        assert_eq!(clean("a/../.."), "..");
        assert_eq!(clean("/../a"), "/a");
        assert_eq!(clean("a/./b/"), "a/b");
        assert_eq!(join(&["", ""]), "");
        assert_eq!(
            join(&["/api/v1/x/proxy", "/rewriteme"]),
            "/api/v1/x/proxy/rewriteme"
        );
    }

    #[test]
    fn the_prepend_is_the_request_path_before_the_backend_path() {
        let base = "/api/v1/namespaces/ns/pods/p/proxy";
        assert_eq!(path_prepend(&format!("{base}/"), "/"), base);
        assert_eq!(path_prepend(base, ""), base);
        assert_eq!(path_prepend(&format!("{base}/a/b"), "/a/b"), base);
        assert_eq!(path_prepend(&format!("{base}/a/b/"), "/a/b"), base);
    }

    #[test]
    fn paths_are_escaped_like_go() {
        assert_eq!(escape_path("/a b/c?d#e"), "/a%20b/c%3Fd%23e");
        assert_eq!(escape_path("/x:y@z;w=1&2+3,$"), "/x:y@z;w=1&2+3,$");
        assert_eq!(decode_path("/a%20b/%3a%zz%"), "/a b/:%zz%");
    }

    #[test]
    fn pods_are_reached_on_their_first_ip_and_first_declared_port() {
        let pod = json!({
            "spec": {"containers": [{"name": "a"}, {"name": "b", "ports": [{"containerPort": 80}, {"containerPort": 81}]}]},
            "status": {"podIP": "10.244.1.5", "podIPs": [{"ip": "10.244.1.5"}]}
        });
        let b = pod_backend(&pod, &id("p")).unwrap();
        assert_eq!(
            (b.transport, b.authority()),
            (Transport::Http, "10.244.1.5:80".into())
        );
        let b = pod_backend(&pod, &id("https:p:443")).unwrap();
        assert_eq!(
            (b.transport, b.authority()),
            (Transport::Https, "10.244.1.5:443".into())
        );
        let bare = json!({"spec": {"containers": [{"name": "a"}]}, "status": {"podIPs": [{"ip": "fd00::5"}]}});
        let b = pod_backend(&bare, &id("p")).unwrap();
        assert_eq!(
            (b.authority(), b.dial_port()),
            ("[fd00::5]".into(), Some(80))
        );
    }

    #[test]
    fn pods_without_a_routable_ip_are_refused() {
        for ip in [
            None,
            Some("127.0.0.1"),
            Some("169.254.1.1"),
            Some("0.0.0.0"),
            Some("::1"),
        ] {
            let pod = json!({"spec": {"containers": []}, "status": {"podIP": ip}});
            assert_eq!(
                pod_backend(&pod, &id("p")),
                Err(LocationError::AddressNotAllowed),
                "{ip:?}"
            );
        }
    }

    #[test]
    fn service_port_numbers_become_port_names() {
        let svc = json!({"spec": {"ports": [{"name": "http", "port": 80}, {"name": "tls", "port": 443}]}});
        assert_eq!(service_port_name(&svc, &id("s:443")).unwrap(), "tls");
        assert_eq!(service_port_name(&svc, &id("s:http")).unwrap(), "http");
        assert_eq!(service_port_name(&svc, &id("s")).unwrap(), "");
        assert_eq!(
            service_port_name(&svc, &id("s:81")),
            Err(LocationError::NoServicePort {
                port: "81".into(),
                service: "s".into()
            })
        );
        let unnamed = json!({"spec": {"ports": [{"port": 80}]}});
        assert_eq!(service_port_name(&unnamed, &id("s:80")).unwrap(), "");
    }

    #[test]
    fn endpoint_candidates_carry_the_named_port_from_the_picked_start() {
        let eps = json!({"subsets": [
            {"addresses": [], "ports": [{"name": "http", "port": 8080}]},
            {"addresses": [
                {"ip": "10.0.0.1", "targetRef": {"kind": "Pod", "namespace": "ns", "name": "a"}},
                {"ip": "10.0.0.2", "targetRef": {"kind": "Pod", "namespace": "other", "name": "b"}},
                {"ip": "10.0.0.3"}
             ],
             "ports": [{"name": "http", "port": 8080}, {"name": "tls", "port": 8443}]}
        ]});
        let mut picks = vec![0usize, 1].into_iter();
        let mut pick = |_n: usize| picks.next().unwrap_or(0);
        let got = endpoint_candidates(&eps, "ns", "s", "http", &mut pick).unwrap();
        let ips: Vec<&str> = got.iter().map(|c| c.ip.as_str()).collect();
        assert_eq!(ips, ["10.0.0.2", "10.0.0.3", "10.0.0.1"]);
        assert!(got.iter().all(|c| c.port == 8080));
        assert_eq!(
            got[0].pod, None,
            "a pod of another namespace is not this service's"
        );
        assert_eq!(got[2].pod.as_deref(), Some("a"));
        let none = endpoint_candidates(&json!({}), "ns", "s", "", &mut |_| 0);
        assert_eq!(none, Err(LocationError::NoEndpoints("s".into())));
        let other = endpoint_candidates(&eps, "ns", "s", "metrics", &mut |_| 0).unwrap();
        assert!(other.is_empty());
    }

    #[test]
    fn endpoint_addresses_must_be_the_pods() {
        let pod = json!({"status": {"podIP": "10.0.0.1", "podIPs": [{"ip": "10.0.0.1"}, {"ip": "fd00::1"}]}});
        assert!(pod_has_ip(&pod, "fd00::1"));
        assert!(!pod_has_ip(&pod, "10.0.0.9"));
    }

    #[test]
    fn nodes_default_to_their_kubelet() {
        let node = json!({"status": {"addresses": [{"type": "InternalIP", "address": "10.250.0.12"}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}}}});
        let b = node_backend(&node, &id("host2")).unwrap();
        assert_eq!(
            (b.transport, b.authority()),
            (Transport::Kubelet, "10.250.0.12:10250".into())
        );
        let b = node_backend(&node, &id("host2:10250")).unwrap();
        assert_eq!(b.transport, Transport::Kubelet);
        let b = node_backend(&node, &id("host2:8080")).unwrap();
        assert_eq!(
            (b.transport, b.authority()),
            (Transport::Http, "10.250.0.12:8080".into())
        );
        let b = node_backend(&node, &id("https:host2:8443")).unwrap();
        assert_eq!(b.transport, Transport::Https);
        let local =
            json!({"status": {"addresses": [{"type": "InternalIP", "address": "127.0.0.1"}]}});
        assert_eq!(
            node_backend(&local, &id("n")),
            Err(LocationError::AddressNotAllowed)
        );
        assert_eq!(
            node_backend(&json!({}), &id("n")),
            Err(LocationError::NoNodeAddress("n".into()))
        );
    }
}
