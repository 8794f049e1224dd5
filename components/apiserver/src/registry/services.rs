//! core/v1 services and endpoints, discovery.k8s.io/v1 endpointslices: defaults and validation as
//! upstream's, kubectl's columns, and the keys a Service holds exclusively (its ClusterIP and
//! NodePorts; choosing free values is `crate::allocator`'s job).

use k8s_openapi::api::core::v1::{Endpoints, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use serde_json::{json, Value};

use super::columns::{self as c, col};
use super::strategy::{typed, Reservation, ResourceSpec, SelectableField};
use crate::status::Cause;

/// Key prefixes of the allocator's reservations: one key per allocated ClusterIP / NodePort whose
/// value is the owning Service's `namespace/name`. They live in the store, so a restart keeps them.
pub const SERVICE_IP_PREFIX: &str = "/registry/kiln/serviceips/";
pub const NODE_PORT_PREFIX: &str = "/registry/kiln/servicenodeports/";

fn str_at<'a>(obj: &'a Value, pointer: &str) -> &'a str {
    obj.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

fn svc_type(obj: &Value, _: i64) -> Value {
    json!(str_at(obj, "/spec/type"))
}

fn svc_cluster_ip(obj: &Value, _: i64) -> Value {
    let ip = str_at(obj, "/spec/clusterIP");
    json!(if ip.is_empty() { "<none>" } else { ip })
}

/// Upstream's getServiceExternalIP.
fn svc_external_ip(obj: &Value, _: i64) -> Value {
    let spec = &obj["spec"];
    let external: Vec<&str> = spec["externalIPs"]
        .as_array()
        .map(|l| l.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let text = match spec["type"].as_str().unwrap_or("") {
        "ExternalName" => spec["externalName"].as_str().unwrap_or("").to_string(),
        "LoadBalancer" => {
            let mut ips: Vec<String> = obj["status"]["loadBalancer"]["ingress"]
                .as_array()
                .map(|l| {
                    l.iter()
                        .filter_map(|i| i["ip"].as_str().or(i["hostname"].as_str()))
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default();
            ips.extend(external.iter().map(|s| s.to_string()));
            if ips.is_empty() {
                "<pending>".to_string()
            } else {
                ips.join(",")
            }
        }
        _ if !external.is_empty() => external.join(","),
        _ => "<none>".to_string(),
    };
    json!(text)
}

/// Upstream's makePortString: `80/TCP`, `80:30080/TCP`, comma separated.
fn svc_ports(obj: &Value, _: i64) -> Value {
    let ports: Vec<String> = obj["spec"]["ports"]
        .as_array()
        .map(|l| {
            l.iter()
                .map(|p| {
                    let port = p["port"].as_i64().unwrap_or(0);
                    let proto = p["protocol"].as_str().unwrap_or("TCP");
                    match p["nodePort"].as_i64() {
                        Some(np) if np > 0 => format!("{port}:{np}/{proto}"),
                        _ => format!("{port}/{proto}"),
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    json!(if ports.is_empty() {
        "<none>".to_string()
    } else {
        ports.join(",")
    })
}

fn svc_selector(obj: &Value, _: i64) -> Value {
    let mut pairs: Vec<String> = obj["spec"]["selector"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                .collect()
        })
        .unwrap_or_default();
    pairs.sort();
    json!(if pairs.is_empty() {
        "<none>".to_string()
    } else {
        pairs.join(",")
    })
}

/// Upstream's formatEndpoints: at most three `ip:port`, then `+ N more...`.
fn endpoints_list(obj: &Value, _: i64) -> Value {
    let mut all = Vec::new();
    for subset in obj["subsets"].as_array().into_iter().flatten() {
        let ports: Vec<i64> = subset["ports"]
            .as_array()
            .map(|l| l.iter().filter_map(|p| p["port"].as_i64()).collect())
            .unwrap_or_default();
        for addr in subset["addresses"].as_array().into_iter().flatten() {
            let ip = addr["ip"].as_str().unwrap_or("");
            if ports.is_empty() {
                all.push(ip.to_string());
            }
            for port in &ports {
                all.push(format!("{ip}:{port}"));
            }
        }
    }
    json!(match all.len() {
        0 => "<none>".to_string(),
        n if n <= 3 => all.join(","),
        n => format!("{} + {} more...", all[..3].join(","), n - 3),
    })
}

fn slice_address_type(obj: &Value, _: i64) -> Value {
    json!(str_at(obj, "/addressType"))
}

fn slice_ports(obj: &Value, _: i64) -> Value {
    let ports: Vec<String> = obj["ports"]
        .as_array()
        .map(|l| {
            l.iter()
                .filter_map(|p| p["port"].as_i64())
                .map(|p| p.to_string())
                .collect()
        })
        .unwrap_or_default();
    json!(if ports.is_empty() {
        "<unset>".to_string()
    } else {
        ports.join(",")
    })
}

fn slice_endpoints(obj: &Value, _: i64) -> Value {
    let addrs: Vec<&str> = obj["endpoints"]
        .as_array()
        .map(|l| {
            l.iter()
                .flat_map(|e| e["addresses"].as_array().into_iter().flatten())
                .filter_map(Value::as_str)
                .collect()
        })
        .unwrap_or_default();
    json!(match addrs.len() {
        0 => "<unset>".to_string(),
        n if n <= 3 => addrs.join(","),
        n => format!("{} + {} more...", addrs[..3].join(","), n - 3),
    })
}

pub fn is_headless(obj: &Value) -> bool {
    obj["spec"]["clusterIP"] == "None"
}

pub fn wants_node_ports(obj: &Value) -> bool {
    matches!(
        obj["spec"]["type"].as_str(),
        Some("NodePort" | "LoadBalancer")
    )
}

pub fn service_defaults(obj: &mut Value) {
    // ServiceStatus.LoadBalancer is a struct, not a pointer, upstream: always `loadBalancer: {}`.
    if obj["status"].is_object() && obj["status"]["loadBalancer"].is_null() {
        obj["status"]["loadBalancer"] = json!({});
    }
    let spec = &mut obj["spec"];
    if !spec.is_object() {
        return;
    }
    if spec["type"].is_null() {
        spec["type"] = json!("ClusterIP");
    }
    if spec["sessionAffinity"].is_null() {
        spec["sessionAffinity"] = json!("None");
    }
    let external_name = spec["type"] == "ExternalName";
    if let Some(ports) = spec["ports"].as_array_mut() {
        for p in ports {
            if p["protocol"].is_null() {
                p["protocol"] = json!("TCP");
            }
            if p["targetPort"].is_null() || p["targetPort"] == 0 || p["targetPort"] == "" {
                p["targetPort"] = p["port"].clone();
            }
        }
    }
    if !external_name {
        if spec["internalTrafficPolicy"].is_null() {
            spec["internalTrafficPolicy"] = json!("Cluster");
        }
        if spec["ipFamilyPolicy"].is_null() {
            spec["ipFamilyPolicy"] = json!("SingleStack");
        }
        if spec["ipFamilies"].is_null() {
            spec["ipFamilies"] = json!(["IPv4"]);
        }
        // clusterIPs mirrors clusterIP (the allocator fills both when empty).
        match (spec["clusterIP"].as_str(), spec["clusterIPs"].as_array()) {
            (Some(ip), None) if !ip.is_empty() => spec["clusterIPs"] = json!([ip]),
            (None | Some(""), Some(list)) if !list.is_empty() => {
                spec["clusterIP"] = list[0].clone()
            }
            _ => {}
        }
    }
    let node_ports = matches!(spec["type"].as_str(), Some("NodePort" | "LoadBalancer"));
    if node_ports && spec["externalTrafficPolicy"].is_null() {
        spec["externalTrafficPolicy"] = json!("Cluster");
    }
}

fn valid_port(v: &Value) -> bool {
    v.as_i64().is_some_and(|p| (1..=65535).contains(&p))
}

pub fn service_validation(obj: &Value) -> Vec<Cause> {
    let spec = &obj["spec"];
    let mut causes = Vec::new();
    let ty = spec["type"].as_str().unwrap_or("");
    if !matches!(
        ty,
        "ClusterIP" | "NodePort" | "LoadBalancer" | "ExternalName"
    ) {
        causes.push(Cause {
            reason: "FieldValueNotSupported",
            message: format!(
                "Unsupported value: {ty:?}: supported values: \"ClusterIP\", \"ExternalName\", \"LoadBalancer\", \"NodePort\""
            ),
            field: "spec.type".into(),
        });
    }
    if ty == "ExternalName" {
        if spec["externalName"].as_str().unwrap_or("").is_empty() {
            causes.push(Cause::required("spec.externalName", ""));
        }
        return causes;
    }
    let ports = spec["ports"].as_array().cloned().unwrap_or_default();
    if ports.is_empty() && !is_headless(obj) {
        causes.push(Cause::required("spec.ports", ""));
    }
    let mut names = Vec::new();
    for (i, p) in ports.iter().enumerate() {
        let name = p["name"].as_str().unwrap_or("");
        if ports.len() > 1 && name.is_empty() {
            causes.push(Cause::required(&format!("spec.ports[{i}].name"), ""));
        }
        if !name.is_empty() {
            if names.contains(&name) {
                causes.push(Cause::duplicate(
                    &format!("spec.ports[{i}].name"),
                    &json!(name),
                ));
            }
            names.push(name);
        }
        if !valid_port(&p["port"]) {
            causes.push(Cause::invalid(
                &format!("spec.ports[{i}].port"),
                &p["port"],
                "must be between 1 and 65535, inclusive",
            ));
        }
        if is_headless(obj) && ty != "ClusterIP" {
            causes.push(Cause::invalid(
                "spec.clusterIPs[0]",
                &json!("None"),
                "may not be set to 'None' for NodePort services",
            ));
        }
        if ty == "ClusterIP" && p["nodePort"].as_i64().is_some_and(|n| n != 0) {
            causes.push(Cause::forbidden(
                &format!("spec.ports[{i}].nodePort"),
                "may not be used when `type` is 'ClusterIP'",
            ));
        }
    }
    causes
}

/// The allocator keys a Service holds: its ClusterIP and each distinct NodePort.
pub fn service_reservations(obj: &Value) -> Vec<Reservation> {
    let mut out = Vec::new();
    let ip = obj["spec"]["clusterIP"].as_str().unwrap_or("");
    if !ip.is_empty() && ip != "None" {
        out.push(Reservation {
            key: format!("{SERVICE_IP_PREFIX}{ip}"),
            field: "spec.clusterIPs".into(),
            rendered: format!("[]string{{{ip:?}}}"),
            detail: format!("failed to allocate IP {ip}: provided IP is already allocated"),
        });
    }
    for (i, p) in obj["spec"]["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let Some(np) = p["nodePort"].as_i64().filter(|n| *n > 0) else {
            continue;
        };
        let key = format!("{NODE_PORT_PREFIX}{np}");
        if out.iter().any(|r: &Reservation| r.key == key) {
            continue; // the same port for TCP and UDP of one service
        }
        out.push(Reservation {
            key,
            field: format!("spec.ports[{i}].nodePort"),
            rendered: np.to_string(),
            detail: "provided port is already allocated".into(),
        });
    }
    out
}

/// The first ready address of an EndpointSlice with the port its `port_name` maps to, as the
/// apiserver's own clients (webhooks, APIServices) pick one. An unset ready condition counts as
/// ready, as upstream reads it.
pub fn ready_slice_endpoint(slice: &Value, port_name: &str) -> Option<(String, u16)> {
    let port = slice["ports"]
        .as_array()?
        .iter()
        .find(|p| p["name"].as_str().unwrap_or("") == port_name)?["port"]
        .as_u64()
        .and_then(|p| u16::try_from(p).ok())?;
    let host = slice["endpoints"].as_array()?.iter().find_map(|e| {
        (e["conditions"]["ready"] != false)
            .then(|| e["addresses"][0].as_str())
            .flatten()
    })?;
    Some((host.to_string(), port))
}

pub static SERVICES: ResourceSpec = ResourceSpec {
    plural: "services",
    singular: "service",
    kind: "Service",
    list_kind: "ServiceList",
    short_names: &["svc"],
    categories: &["all"],
    verbs: &[
        "create",
        "delete",
        "deletecollection",
        "get",
        "list",
        "patch",
        "update",
        "watch",
    ],
    status_subresource: true,
    // Upstream's service status strategy resets the spec only: labels and annotations sent with
    // a status update or patch are kept.
    status_takes_metadata: true,
    table: &[
        c::NAME_COL,
        col(
            "Type",
            "string",
            "",
            "The type of the service.",
            0,
            svc_type,
        ),
        col(
            "Cluster-IP",
            "string",
            "",
            "The cluster IP of the service.",
            0,
            svc_cluster_ip,
        ),
        col(
            "External-IP",
            "string",
            "",
            "The external IP of the service.",
            0,
            svc_external_ip,
        ),
        col(
            "Port(s)",
            "string",
            "",
            "The ports of the service.",
            0,
            svc_ports,
        ),
        c::AGE_COL,
        col(
            "Selector",
            "string",
            "",
            "Route service traffic to pods with label keys and values matching this selector.",
            1,
            svc_selector,
        ),
    ],
    fields: &[
        SelectableField {
            name: "spec.clusterIP",
            pointer: "/spec/clusterIP",
        },
        SelectableField {
            name: "spec.type",
            pointer: "/spec/type",
        },
    ],
    decode: typed::<Service>,
    defaults: service_defaults,
    validate: service_validation,
    reservations: Some(service_reservations),
    actions: &[super::strategy::Action {
        name: "proxy",
        group: "",
        version: "v1",
        kind: "ServiceProxyOptions",
        verbs: super::resources::PROXY_VERBS,
    }],
    ..ResourceSpec::BASE
};

pub static ENDPOINTS: ResourceSpec = ResourceSpec {
    plural: "endpoints",
    singular: "endpoints",
    kind: "Endpoints",
    list_kind: "EndpointsList",
    short_names: &["ep"],
    table: &[
        c::NAME_COL,
        col(
            "Endpoints",
            "string",
            "",
            "Endpoints of the service",
            0,
            endpoints_list,
        ),
        c::AGE_COL,
    ],
    decode: typed::<Endpoints>,
    ..ResourceSpec::BASE
};

pub static ENDPOINT_SLICES: ResourceSpec = ResourceSpec {
    group: "discovery.k8s.io",
    plural: "endpointslices",
    singular: "endpointslice",
    kind: "EndpointSlice",
    list_kind: "EndpointSliceList",
    table: &[
        c::NAME_COL,
        col(
            "AddressType",
            "string",
            "",
            "The IP protocol for this slice",
            0,
            slice_address_type,
        ),
        col(
            "Ports",
            "string",
            "",
            "The ports for this slice",
            0,
            slice_ports,
        ),
        col(
            "Endpoints",
            "string",
            "",
            "The endpoints for this slice",
            0,
            slice_endpoints,
        ),
        c::AGE_COL,
    ],
    decode: typed::<EndpointSlice>,
    ..ResourceSpec::BASE
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_defaults_and_reservations() {
        let mut s = json!({"spec": {"type": "NodePort", "clusterIP": "10.96.0.10",
            "ports": [{"port": 80, "nodePort": 30080}, {"port": 80, "protocol": "UDP", "nodePort": 30080, "name": "u"}]}});
        service_defaults(&mut s);
        assert_eq!(s["spec"]["ports"][0]["protocol"], "TCP");
        assert_eq!(s["spec"]["ports"][0]["targetPort"], 80);
        assert_eq!(s["spec"]["clusterIPs"], json!(["10.96.0.10"]));
        assert_eq!(s["spec"]["externalTrafficPolicy"], "Cluster");
        let keys: Vec<String> = service_reservations(&s)
            .into_iter()
            .map(|r| r.key)
            .collect();
        assert_eq!(
            keys,
            [
                "/registry/kiln/serviceips/10.96.0.10",
                "/registry/kiln/servicenodeports/30080"
            ]
        );
    }

    #[test]
    fn endpoints_column_abbreviates() {
        let ep = json!({"subsets": [{"addresses": [{"ip": "a"}, {"ip": "b"}, {"ip": "c"}, {"ip": "d"}],
                                      "ports": [{"port": 80}]}]});
        assert_eq!(endpoints_list(&ep, 0), "a:80,b:80,c:80 + 1 more...");
    }

    #[test]
    fn multi_port_services_need_names() {
        let s = json!({"spec": {"type": "ClusterIP", "ports": [{"port": 80}, {"port": 81}]}});
        let causes = service_validation(&s);
        assert!(causes.iter().any(|c| c.field == "spec.ports[0].name"));
    }
}
