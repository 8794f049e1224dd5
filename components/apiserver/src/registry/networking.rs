//! networking.k8s.io/v1: Ingress (with /status), IngressClass and NetworkPolicy, with upstream's
//! defaults (pkg/apis/networking/v1/defaults.go), the validation kubectl users meet
//! (pkg/apis/networking/validation) and kubectl's columns (printIngress, printIngressClass,
//! printNetworkPolicy). kiln serves these as the API server does; acting on them is an ingress
//! controller's or a network plugin's job, as upstream.

use k8s_openapi::api::networking::v1::{Ingress, IngressClass, NetworkPolicy};
use serde_json::{json, Value};

use super::columns::{self as c, col};
use super::dns_names::{is_dns1035, is_subdomain, DNS1035_MSG, SUBDOMAIN_MSG};
use super::policy::validation::label_selector;
use super::strategy::{typed, ResourceSpec};
use crate::status::Cause;

pub const GROUP: &str = "networking.k8s.io";
/// The annotation that makes an IngressClass the default for Ingresses that name none.
pub const DEFAULT_INGRESS_CLASS_ANNOTATION: &str = "ingressclass.kubernetes.io/is-default-class";

const PATH_TYPES: &[&str] = &["Exact", "ImplementationSpecific", "Prefix"];
const PROTOCOLS: &[&str] = &["SCTP", "TCP", "UDP"];
const POLICY_TYPES: &[&str] = &["Egress", "Ingress"];
const SCOPES: &[&str] = &["Cluster", "Namespace"];
const MAX_CONTROLLER_LEN: usize = 250;

fn subdomain(causes: &mut Vec<Cause>, field: &str, v: &str) {
    if !is_subdomain(v) {
        causes.push(Cause::invalid(field, &json!(v), SUBDOMAIN_MSG));
    }
}

/// A backend: exactly one of service or resource; a service names a DNS-1035 port name or a
/// number in 1..65535.
fn backend(causes: &mut Vec<Cause>, b: &Value, at: &str) {
    let (service, resource) = (&b["service"], &b["resource"]);
    match (service.is_object(), resource.is_object()) {
        (true, true) => causes.push(Cause::invalid(
            at,
            &json!(""),
            "cannot set both resource and service backends",
        )),
        (false, false) => causes.push(Cause::invalid(
            at,
            &json!(""),
            "resource or service backend is required",
        )),
        (true, false) => {
            let name = service["name"].as_str().unwrap_or("");
            if name.is_empty() {
                causes.push(Cause::required(&format!("{at}.service.name"), ""));
            } else if !is_dns1035(name) {
                causes.push(Cause::invalid(
                    &format!("{at}.service.name"),
                    &json!(name),
                    DNS1035_MSG,
                ));
            }
            let port = &service["port"];
            let port_name = port["name"].as_str().filter(|n| !n.is_empty());
            let number = port["number"].as_i64().filter(|n| *n != 0);
            match (port_name, number) {
                (Some(_), Some(_)) => causes.push(Cause::invalid(
                    &format!("{at}.service.port"),
                    &port.clone(),
                    "cannot set both port name & port number",
                )),
                (None, None) => causes.push(Cause::invalid(
                    &format!("{at}.service.port"),
                    &port.clone(),
                    "port name or number is required",
                )),
                (None, Some(n)) if !(1..=65535).contains(&n) => causes.push(Cause::invalid(
                    &format!("{at}.service.port.number"),
                    &json!(n),
                    "must be between 1 and 65535, inclusive",
                )),
                (Some(n), None) if !is_port_name(n) => causes.push(Cause::invalid(
                    &format!("{at}.service.port.name"),
                    &json!(n),
                    "must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)",
                )),
                _ => {}
            }
        }
        (false, true) => {
            for key in ["kind", "name"] {
                if resource[key].as_str().is_none_or(str::is_empty) {
                    causes.push(Cause::required(&format!("{at}.resource.{key}"), ""));
                }
            }
        }
    }
}

/// IANA_SVC_NAME: at most 15 lower-case alphanumerics and hyphens, with a letter, no "--".
fn is_port_name(n: &str) -> bool {
    n.len() <= 15
        && n.bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
        && n.bytes().any(|c| c.is_ascii_lowercase())
        && !n.starts_with('-')
        && !n.ends_with('-')
        && !n.contains("--")
}

/// A rule's host: a DNS subdomain, optionally with one leading `*.` wildcard; never an IP.
fn host(causes: &mut Vec<Cause>, h: &str, field: &str) {
    if h.parse::<std::net::IpAddr>().is_ok() {
        causes.push(Cause::invalid(
            field,
            &json!(h),
            "must be a DNS name, not an IP address",
        ));
        return;
    }
    match h.strip_prefix("*.") {
        Some(rest) if !rest.contains('*') => subdomain(causes, field, rest),
        _ if h.contains('*') => causes.push(Cause::invalid(
            field,
            &json!(h),
            "a wildcard DNS-1123 subdomain must start with '*.', followed by a valid DNS subdomain, which must consist of lower case alphanumeric characters, '-' or '.' and end with an alphanumeric character (e.g. '*.example.com', regex used for validation is '\\*\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
        )),
        _ => subdomain(causes, field, h),
    }
}

pub fn ingress_validation(obj: &Value) -> Vec<Cause> {
    let spec = &obj["spec"];
    let mut causes = Vec::new();
    let rules = spec["rules"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    if spec["defaultBackend"].is_object() {
        backend(&mut causes, &spec["defaultBackend"], "spec.defaultBackend");
    } else if rules.is_empty() {
        causes.push(Cause::invalid(
            "spec.rules",
            &json!([]),
            "either `defaultBackend` or `rules` must be specified",
        ));
    }
    if let Some(class) = spec["ingressClassName"].as_str() {
        subdomain(&mut causes, "spec.ingressClassName", class);
    }
    for (i, rule) in rules.iter().enumerate() {
        let at = format!("spec.rules[{i}]");
        if let Some(h) = rule["host"].as_str().filter(|h| !h.is_empty()) {
            host(&mut causes, h, &format!("{at}.host"));
        }
        let Some(http) = rule["http"].as_object() else {
            continue;
        };
        let paths = http
            .get("paths")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        if paths.is_empty() {
            causes.push(Cause::required(&format!("{at}.http.paths"), ""));
        }
        for (j, p) in paths.iter().enumerate() {
            let pat = format!("{at}.http.paths[{j}]");
            let path = p["path"].as_str().unwrap_or("");
            // An empty string counts as unset: typed clients (k8s-openapi's `path_type: String`)
            // send "" where Go's `*PathType` would be nil.
            match p["pathType"].as_str().filter(|t| !t.is_empty()) {
                None => causes.push(Cause::required(
                    &format!("{pat}.pathType"),
                    "pathType must be specified",
                )),
                Some(t) if !PATH_TYPES.contains(&t) => causes.push(Cause::not_supported(
                    &format!("{pat}.pathType"),
                    t,
                    PATH_TYPES,
                )),
                Some("Exact" | "Prefix") if !path.starts_with('/') => causes.push(Cause::invalid(
                    &format!("{pat}.path"),
                    &json!(path),
                    "must be an absolute path",
                )),
                Some(_) => {}
            }
            backend(&mut causes, &p["backend"], &format!("{pat}.backend"));
        }
    }
    for (i, tls) in spec["tls"].as_array().into_iter().flatten().enumerate() {
        for (j, h) in tls["hosts"].as_array().into_iter().flatten().enumerate() {
            if let Some(h) = h.as_str() {
                host(&mut causes, h, &format!("spec.tls[{i}].hosts[{j}]"));
            }
        }
    }
    causes
}

pub fn ingress_class_defaults(obj: &mut Value) {
    let params = &mut obj["spec"]["parameters"];
    if params.is_object() && params["scope"].is_null() {
        params["scope"] = json!("Cluster");
    }
}

pub fn ingress_class_validation(obj: &Value) -> Vec<Cause> {
    let spec = &obj["spec"];
    let mut causes = Vec::new();
    let controller = spec["controller"].as_str().unwrap_or("");
    if controller.is_empty() {
        causes.push(Cause::required("spec.controller", ""));
    } else if controller.len() > MAX_CONTROLLER_LEN {
        causes.push(Cause {
            reason: "FieldValueTooLong",
            message: format!("Too long: may not be more than {MAX_CONTROLLER_LEN} bytes"),
            field: "spec.controller".into(),
        });
    } else if !is_domain_prefixed_path(controller) {
        causes.push(Cause::invalid(
            "spec.controller",
            &json!(controller),
            "must be a domain-prefixed path (such as \"acme.io/foo\")",
        ));
    }
    let p = &spec["parameters"];
    if p.is_object() {
        for key in ["kind", "name"] {
            if p[key].as_str().is_none_or(str::is_empty) {
                causes.push(Cause::required(&format!("spec.parameters.{key}"), ""));
            }
        }
        if let Some(g) = p["apiGroup"].as_str().filter(|g| !g.is_empty()) {
            subdomain(&mut causes, "spec.parameters.apiGroup", g);
        }
        let scope = p["scope"].as_str().unwrap_or("");
        let namespace = p["namespace"].as_str().filter(|n| !n.is_empty());
        match scope {
            "" => causes.push(Cause::required(
                "spec.parameters.scope",
                "`parameters.scope` is required",
            )),
            "Namespace" if namespace.is_none() => causes.push(Cause::required(
                "spec.parameters.namespace",
                "`parameters.scope` is set to 'Namespace'",
            )),
            "Cluster" if namespace.is_some() => causes.push(Cause::forbidden(
                "spec.parameters.namespace",
                "`parameters.scope` is set to 'Cluster'",
            )),
            s if !SCOPES.contains(&s) => {
                causes.push(Cause::not_supported("spec.parameters.scope", s, SCOPES))
            }
            _ => {}
        }
    }
    causes
}

/// `validation.IsDomainPrefixedPath`: `<DNS subdomain>/<path of URL characters>`.
fn is_domain_prefixed_path(s: &str) -> bool {
    let Some((domain, path)) = s.split_once('/') else {
        return false;
    };
    is_subdomain(domain)
        && !path.is_empty()
        && path
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || b"/-._~%!$&'()*+,;=:".contains(&c))
}

pub fn ingress_class_update_validation(old: &Value, new: &Value) -> Vec<Cause> {
    if old["spec"]["controller"] != new["spec"]["controller"] {
        return vec![Cause::invalid(
            "spec.controller",
            &new["spec"]["controller"],
            "field is immutable",
        )];
    }
    Vec::new()
}

/// Ports without a protocol are TCP; without policyTypes a policy is Ingress, plus Egress when it
/// has egress rules.
pub fn network_policy_defaults(obj: &mut Value) {
    let spec = &mut obj["spec"];
    if !spec.is_object() {
        *spec = json!({});
    }
    for dir in ["ingress", "egress"] {
        if let Some(rules) = spec[dir].as_array_mut() {
            for rule in rules {
                if let Some(ports) = rule["ports"].as_array_mut() {
                    for p in ports {
                        if p.is_object() && p["protocol"].is_null() {
                            p["protocol"] = json!("TCP");
                        }
                    }
                }
            }
        }
    }
    if spec["policyTypes"].as_array().is_none_or(Vec::is_empty) {
        let mut types = vec![json!("Ingress")];
        if spec["egress"].as_array().is_some_and(|e| !e.is_empty()) {
            types.push(json!("Egress"));
        }
        spec["policyTypes"] = json!(types);
    }
}

fn network_port(causes: &mut Vec<Cause>, p: &Value, at: &str) {
    if let Some(proto) = p["protocol"].as_str() {
        if !PROTOCOLS.contains(&proto) {
            causes.push(Cause::not_supported(
                &format!("{at}.protocol"),
                proto,
                PROTOCOLS,
            ));
        }
    }
    let end = p["endPort"].as_i64();
    match &p["port"] {
        Value::Number(n) => {
            let n = n.as_i64().unwrap_or(0);
            if !(1..=65535).contains(&n) {
                causes.push(Cause::invalid(
                    &format!("{at}.port"),
                    &json!(n),
                    "must be between 1 and 65535, inclusive",
                ));
            }
            if let Some(e) = end {
                if e < n {
                    causes.push(Cause::invalid(
                        &format!("{at}.endPort"),
                        &json!(e),
                        "must be greater than or equal to `port`",
                    ));
                }
            }
        }
        Value::String(s) => {
            if !is_port_name(s) {
                causes.push(Cause::invalid(
                    &format!("{at}.port"),
                    &json!(s),
                    "must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)",
                ));
            }
            if end.is_some() {
                causes.push(Cause::invalid(
                    &format!("{at}.endPort"),
                    &json!(end),
                    "may not be specified when `port` is non-numeric",
                ));
            }
        }
        _ if end.is_some() => causes.push(Cause::required(
            &format!("{at}.port"),
            "must be specified when `endPort` is specified",
        )),
        _ => {}
    }
}

fn cidr_ok(s: &str) -> bool {
    let Some((ip, bits)) = s.split_once('/') else {
        return false;
    };
    let max = match ip.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(_)) => 32,
        Ok(std::net::IpAddr::V6(_)) => 128,
        Err(_) => return false,
    };
    bits.parse::<u8>().is_ok_and(|b| b <= max)
}

fn peer(causes: &mut Vec<Cause>, p: &Value, at: &str) {
    let (pods, nss, block) = (
        p["podSelector"].is_object(),
        p["namespaceSelector"].is_object(),
        &p["ipBlock"],
    );
    if block.is_object() {
        if pods || nss {
            causes.push(Cause::forbidden(
                at,
                "may not specify more than 1 peer type",
            ));
        }
        let cidr = block["cidr"].as_str().unwrap_or("");
        if cidr.is_empty() {
            causes.push(Cause::required(&format!("{at}.ipBlock.cidr"), ""));
        } else if !cidr_ok(cidr) {
            causes.push(Cause::invalid(
                &format!("{at}.ipBlock.cidr"),
                &json!(cidr),
                "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)",
            ));
        }
        for (i, e) in block["except"].as_array().into_iter().flatten().enumerate() {
            let e = e.as_str().unwrap_or("");
            if !cidr_ok(e) {
                causes.push(Cause::invalid(
                    &format!("{at}.ipBlock.except[{i}]"),
                    &json!(e),
                    "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)",
                ));
            }
        }
        return;
    }
    if !pods && !nss {
        causes.push(Cause::required(at, "must specify a peer"));
    }
    if pods {
        causes.extend(label_selector(
            &p["podSelector"],
            &format!("{at}.podSelector"),
        ));
    }
    if nss {
        causes.extend(label_selector(
            &p["namespaceSelector"],
            &format!("{at}.namespaceSelector"),
        ));
    }
}

pub fn network_policy_validation(obj: &Value) -> Vec<Cause> {
    let spec = &obj["spec"];
    let mut causes = label_selector(&spec["podSelector"], "spec.podSelector");
    for (dir, peers) in [("ingress", "from"), ("egress", "to")] {
        for (i, rule) in spec[dir].as_array().into_iter().flatten().enumerate() {
            let at = format!("spec.{dir}[{i}]");
            for (j, p) in rule["ports"].as_array().into_iter().flatten().enumerate() {
                network_port(&mut causes, p, &format!("{at}.ports[{j}]"));
            }
            for (j, p) in rule[peers].as_array().into_iter().flatten().enumerate() {
                peer(&mut causes, p, &format!("{at}.{peers}[{j}]"));
            }
        }
    }
    let types: Vec<&str> = spec["policyTypes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    for (i, t) in types.iter().enumerate() {
        if !POLICY_TYPES.contains(t) {
            causes.push(Cause::not_supported(
                &format!("spec.policyTypes[{i}]"),
                t,
                POLICY_TYPES,
            ));
        }
    }
    if types.len() > POLICY_TYPES.len() {
        causes.push(Cause::invalid(
            "spec.policyTypes",
            &json!(types),
            "may not specify more than two policyTypes",
        ));
    }
    causes
}

/// kubectl's HOSTS: the rules' hosts (`*` for a rule without one), at most three then "+ N more...".
fn ingress_hosts(obj: &Value, _: i64) -> Value {
    let hosts: Vec<&str> = obj["spec"]["rules"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| r["host"].as_str().filter(|h| !h.is_empty()).unwrap_or("*"))
        .collect();
    json!(match hosts.len() {
        0 => "*".to_string(),
        1..=3 => hosts.join(","),
        n => format!("{} + {} more...", hosts[..3].join(","), n - 3),
    })
}

fn ingress_class(obj: &Value, _: i64) -> Value {
    json!(obj["spec"]["ingressClassName"].as_str().unwrap_or("<none>"))
}

fn ingress_address(obj: &Value, _: i64) -> Value {
    let addrs: Vec<&str> = obj["status"]["loadBalancer"]["ingress"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|i| {
            i["ip"]
                .as_str()
                .filter(|s| !s.is_empty())
                .or(i["hostname"].as_str())
        })
        .collect();
    json!(addrs.join(","))
}

fn ingress_ports(obj: &Value, _: i64) -> Value {
    let tls = obj["spec"]["tls"].as_array().is_some_and(|t| !t.is_empty());
    json!(if tls { "80, 443" } else { "80" })
}

fn class_controller(obj: &Value, _: i64) -> Value {
    json!(obj["spec"]["controller"].as_str().unwrap_or(""))
}

fn class_parameters(obj: &Value, _: i64) -> Value {
    let p = &obj["spec"]["parameters"];
    if !p.is_object() {
        return json!("<none>");
    }
    let mut kind = p["kind"].as_str().unwrap_or("").to_string();
    if let Some(g) = p["apiGroup"].as_str() {
        kind = format!("{kind}.{g}");
    }
    json!(format!("{kind}/{}", p["name"].as_str().unwrap_or("")))
}

/// metav1.FormatLabelSelector: `<none>` for an empty selector, else `k=v,k in (a,b),...`.
fn policy_pod_selector(obj: &Value, _: i64) -> Value {
    let s = &obj["spec"]["podSelector"];
    let mut parts: Vec<String> = s["matchLabels"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
        .collect();
    for e in s["matchExpressions"].as_array().into_iter().flatten() {
        let key = e["key"].as_str().unwrap_or("");
        let values: Vec<&str> = e["values"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        parts.push(match e["operator"].as_str().unwrap_or("") {
            "In" => format!("{key} in ({})", values.join(",")),
            "NotIn" => format!("{key} notin ({})", values.join(",")),
            "Exists" => key.to_string(),
            "DoesNotExist" => format!("!{key}"),
            op => format!("{key} {op} ({})", values.join(",")),
        });
    }
    json!(if parts.is_empty() {
        "<none>".to_string()
    } else {
        parts.join(",")
    })
}

pub static INGRESSES: ResourceSpec = ResourceSpec {
    group: GROUP,
    plural: "ingresses",
    singular: "ingress",
    kind: "Ingress",
    list_kind: "IngressList",
    short_names: &["ing"],
    status_subresource: true,
    // Upstream's status strategy resets only the spec: /status may change labels and annotations.
    status_takes_metadata: true,
    generation: true,
    table: &[
        c::NAME_COL,
        col(
            "Class",
            "string",
            "",
            "The name of the IngressClass resource that should be used for this Ingress.",
            0,
            ingress_class,
        ),
        col(
            "Hosts",
            "string",
            "",
            "Hosts that incoming requests are matched against before the ingress rule",
            0,
            ingress_hosts,
        ),
        col(
            "Address",
            "string",
            "",
            "Address is a list containing ingress points for the load-balancer",
            0,
            ingress_address,
        ),
        col(
            "Ports",
            "string",
            "",
            "Ports of TLS configurations that open",
            0,
            ingress_ports,
        ),
        c::AGE_COL,
    ],
    decode: typed::<Ingress>,
    validate: ingress_validation,
    ..ResourceSpec::BASE
};

pub static INGRESS_CLASSES: ResourceSpec = ResourceSpec {
    group: GROUP,
    plural: "ingressclasses",
    singular: "ingressclass",
    kind: "IngressClass",
    list_kind: "IngressClassList",
    namespaced: false,
    table: &[
        c::NAME_COL,
        col(
            "Controller",
            "string",
            "",
            "Controller that is responsible for handling this class",
            0,
            class_controller,
        ),
        col(
            "Parameters",
            "string",
            "",
            "A reference to a resource with additional parameters",
            0,
            class_parameters,
        ),
        c::AGE_COL,
    ],
    decode: typed::<IngressClass>,
    defaults: ingress_class_defaults,
    validate: ingress_class_validation,
    validate_update: ingress_class_update_validation,
    ..ResourceSpec::BASE
};

pub static NETWORK_POLICIES: ResourceSpec = ResourceSpec {
    group: GROUP,
    plural: "networkpolicies",
    singular: "networkpolicy",
    kind: "NetworkPolicy",
    list_kind: "NetworkPolicyList",
    short_names: &["netpol"],
    generation: true,
    table: &[
        c::NAME_COL,
        col(
            "Pod-Selector",
            "string",
            "",
            "Select which pods this rule applies to",
            0,
            policy_pod_selector,
        ),
        c::AGE_COL,
    ],
    decode: typed::<NetworkPolicy>,
    defaults: network_policy_defaults,
    validate: network_policy_validation,
    ..ResourceSpec::BASE
};

#[cfg(test)]
#[path = "networking_tests.rs"]
mod tests;
