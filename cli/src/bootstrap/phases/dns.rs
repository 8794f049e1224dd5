//! Phases dns and dns-service: the cluster DNS addon. kiln-dns runs as a static pod on every node
//! (host network, the kiln-host runtime: its binary is pushed like kiln-proxy's, so no image is
//! pulled), and the Service `kube-system/kube-dns` at the cluster DNS address selects those pods by
//! `k8s-app=kube-dns`, as kubeadm's CoreDNS does. The Service prefers the querying node's own
//! instance (`trafficDistribution: PreferSameNode`), so a node's pods keep resolving while another
//! node is down.

use k8s_openapi::api::core::v1::Service;
use serde_json::json;

use super::push::{install_manifest, version};
use super::wait::admin_client;
use super::Outcome;
use crate::bootstrap::{BootstrapError, Context};

pub const SERVICE_NAME: &str = "kube-dns";
pub const NAMESPACE: &str = "kube-system";
/// kiln-dns's `/health`, `/ready` and `/metrics` port (CoreDNS's metrics port).
pub const METRICS_PORT: u16 = 9153;

/// The kiln-dns static pod, on every node.
pub(super) async fn dns(ctx: &Context, host: &str) -> Result<Outcome, BootstrapError> {
    install_manifest(ctx, host, "kiln-dns.yaml", &dns_context(ctx, host)).await
}

pub(crate) fn dns_context(ctx: &Context, host: &str) -> tera::Context {
    let h = ctx.host(host);
    let net = &ctx.cluster.config.spec.networking;
    let mut c = tera::Context::new();
    c.insert("version", version());
    c.insert("node_ip", &h.node_address());
    c.insert("cluster_dns", &net.cluster_dns_ip().to_string());
    c.insert("cluster_domain", &net.cluster_domain);
    c.insert("upstream", &net.dns.upstream);
    if let Some(ttl) = net.dns.ttl {
        c.insert("ttl", &ttl);
    }
    crate::bootstrap::pki_hash::insert_pod_hashes(&mut c, &ctx.state_dir, host);
    super::binary_hash::insert_binary_hashes(ctx, &mut c);
    c
}

/// The kube-dns Service as kiln wants it (kubeadm's labels and ports, kiln's traffic distribution).
pub fn desired_service(ctx: &Context) -> Service {
    let ip = ctx
        .cluster
        .config
        .spec
        .networking
        .cluster_dns_ip()
        .to_string();
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": SERVICE_NAME,
            "namespace": NAMESPACE,
            "labels": {
                "k8s-app": "kube-dns",
                "kubernetes.io/cluster-service": "true",
                "kubernetes.io/name": "kiln-dns",
            },
            "annotations": {
                "prometheus.io/port": METRICS_PORT.to_string(),
                "prometheus.io/scrape": "true",
            },
        },
        "spec": {
            "selector": {"k8s-app": "kube-dns"},
            "clusterIP": ip,
            "clusterIPs": [ip],
            "trafficDistribution": "PreferSameNode",
            "ports": [
                {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53},
                {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 53},
                {"name": "metrics", "port": METRICS_PORT, "protocol": "TCP", "targetPort": METRICS_PORT},
            ],
        },
    }))
    .expect("a valid Service")
}

/// What differs between the Service found and the one wanted, in the fields kiln owns; `Err` when
/// the difference cannot be mended in place (the cluster IP is immutable).
pub fn service_drift(current: &Service, want: &Service) -> Result<Vec<&'static str>, String> {
    let (Some(c), Some(w)) = (&current.spec, &want.spec) else {
        return Ok(vec!["spec"]);
    };
    if c.cluster_ip != w.cluster_ip {
        return Err(format!(
            "Service {NAMESPACE}/{SERVICE_NAME} has clusterIP {}, cluster.yaml wants {} \
             (spec.networking.clusterDNS); a cluster IP cannot change: delete the Service to move it",
            c.cluster_ip.as_deref().unwrap_or("none"),
            w.cluster_ip.as_deref().unwrap_or("none"),
        ));
    }
    let mut drift = vec![];
    if c.selector != w.selector {
        drift.push("selector");
    }
    if c.traffic_distribution != w.traffic_distribution {
        drift.push("trafficDistribution");
    }
    let ports = |s: &k8s_openapi::api::core::v1::ServiceSpec| {
        s.ports
            .iter()
            .flatten()
            .map(|p| {
                (
                    p.name.clone(),
                    p.port,
                    p.protocol.clone().unwrap_or_else(|| "TCP".into()),
                    p.target_port.clone(),
                )
            })
            .collect::<Vec<_>>()
    };
    if ports(c) != ports(w) {
        drift.push("ports");
    }
    Ok(drift)
}

/// Create (or mend) the Service kube-system/kube-dns.
pub(super) async fn dns_service(ctx: &Context) -> Result<Outcome, BootstrapError> {
    let fail = |e: String| BootstrapError::phase("dns-service", "local", e);
    let client = admin_client(ctx).await?;
    let api: kube::Api<Service> = kube::Api::namespaced(client, NAMESPACE);
    let want = desired_service(ctx);
    let ip = ctx.cluster.config.spec.networking.cluster_dns_ip();
    match api
        .get_opt(SERVICE_NAME)
        .await
        .map_err(|e| fail(e.to_string()))?
    {
        None => {
            api.create(&Default::default(), &want)
                .await
                .map_err(|e| fail(e.to_string()))?;
            Ok(Outcome::Done(format!(
                "{NAMESPACE}/{SERVICE_NAME} created at {ip}"
            )))
        }
        Some(current) => {
            let drift = service_drift(&current, &want).map_err(fail)?;
            if drift.is_empty() {
                return Ok(Outcome::Skipped(format!(
                    "{NAMESPACE}/{SERVICE_NAME} up to date at {ip}"
                )));
            }
            let mut mended = current.clone();
            let (spec, w) = (
                mended.spec.as_mut().expect("checked by service_drift"),
                want.spec.expect("desired has a spec"),
            );
            spec.selector = w.selector;
            spec.traffic_distribution = w.traffic_distribution;
            spec.ports = w.ports;
            api.replace(SERVICE_NAME, &Default::default(), &mended)
                .await
                .map_err(|e| fail(e.to_string()))?;
            Ok(Outcome::Done(format!(
                "{NAMESPACE}/{SERVICE_NAME} mended ({})",
                drift.join(", ")
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx() -> (tempfile::TempDir, Context) {
        crate::bootstrap::golden_tests::golden_context()
    }

    #[test]
    fn the_service_sits_at_the_cluster_dns_address_and_selects_kube_dns() {
        let (_d, c) = ctx();
        let s = desired_service(&c);
        let spec = s.spec.as_ref().unwrap();
        assert_eq!(spec.cluster_ip.as_deref(), Some("10.96.0.10"));
        assert_eq!(
            spec.selector
                .as_ref()
                .unwrap()
                .get("k8s-app")
                .map(String::as_str),
            Some("kube-dns")
        );
        let ports: Vec<(String, i32, String)> = spec
            .ports
            .iter()
            .flatten()
            .map(|p| (p.name.clone().unwrap(), p.port, p.protocol.clone().unwrap()))
            .collect();
        assert_eq!(
            ports,
            [
                ("dns".to_string(), 53, "UDP".to_string()),
                ("dns-tcp".to_string(), 53, "TCP".to_string()),
                ("metrics".to_string(), 9153, "TCP".to_string()),
            ]
        );
        assert_eq!(spec.traffic_distribution.as_deref(), Some("PreferSameNode"));
    }

    #[test]
    fn drift_names_what_changed_and_refuses_a_new_cluster_ip() {
        let (_d, c) = ctx();
        let want = desired_service(&c);
        assert!(service_drift(&want, &want).unwrap().is_empty());
        let mut other = want.clone();
        other.spec.as_mut().unwrap().traffic_distribution = None;
        other.spec.as_mut().unwrap().ports.as_mut().unwrap().pop();
        assert_eq!(
            service_drift(&other, &want).unwrap(),
            ["trafficDistribution", "ports"]
        );
        let mut moved = want.clone();
        moved.spec.as_mut().unwrap().cluster_ip = Some("10.96.0.53".into());
        let e = service_drift(&moved, &want).unwrap_err();
        assert!(
            e.contains("10.96.0.53") && e.contains("spec.networking.clusterDNS"),
            "{e}"
        );
    }

    #[test]
    fn the_static_pod_listens_on_the_node_address_and_carries_the_zone() {
        let (_d, c) = ctx();
        let text =
            crate::bootstrap::render::render("kiln-dns.yaml", &dns_context(&c, "host2")).unwrap();
        let pod: k8s_openapi::api::core::v1::Pod = serde_norway::from_str(&text).unwrap();
        assert_eq!(
            pod.metadata
                .labels
                .as_ref()
                .unwrap()
                .get("k8s-app")
                .map(String::as_str),
            Some("kube-dns")
        );
        let spec = pod.spec.unwrap();
        assert_eq!(spec.host_network, Some(true));
        assert_eq!(spec.runtime_class_name.as_deref(), Some("kiln-host"));
        let cmd = spec.containers[0].command.clone().unwrap();
        let ip = c.host("host2").node_address();
        assert!(cmd.contains(&format!("--listen={ip}:53")), "{cmd:?}");
        assert!(
            cmd.contains(&"--cluster-domain=cluster.local".to_string()),
            "{cmd:?}"
        );
        assert!(
            cmd.contains(&"--kubeconfig=/etc/kiln/dns.conf".to_string()),
            "{cmd:?}"
        );
        assert!(!cmd.iter().any(|a| a.starts_with("--upstream")), "{cmd:?}");
        assert!(!cmd.iter().any(|a| a.starts_with("--ttl")), "{cmd:?}");
        // Ready only after kiln-dns's first lists (/ready), as kubeadm's CoreDNS; alive by /health.
        let c0 = &spec.containers[0];
        let ready = c0
            .readiness_probe
            .as_ref()
            .and_then(|p| p.http_get.as_ref());
        let ready = ready.expect("a readiness probe");
        assert_eq!(
            (ready.host.as_deref(), ready.path.as_deref(), &ready.port),
            (
                Some(ip.as_str()),
                Some("/ready"),
                &k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(9153)
            )
        );
        let live = c0.liveness_probe.as_ref().and_then(|p| p.http_get.as_ref());
        assert_eq!(live.and_then(|h| h.path.as_deref()), Some("/health"));
    }

    #[test]
    fn pods_get_systemd_resolveds_real_resolvers_as_kubeadm_sets_them() {
        use crate::bootstrap::phases::push::resolv_conf_flag;
        assert_eq!(
            resolv_conf_flag(true),
            " --resolv-conf=/run/systemd/resolve/resolv.conf"
        );
        assert_eq!(resolv_conf_flag(false), "");
    }

    #[test]
    fn the_zone_ttl_comes_from_cluster_yaml() {
        let (_d, mut c) = ctx();
        c.cluster.config.spec.networking.dns.ttl = Some(30);
        let text =
            crate::bootstrap::render::render("kiln-dns.yaml", &dns_context(&c, "host2")).unwrap();
        let pod: k8s_openapi::api::core::v1::Pod = serde_norway::from_str(&text).unwrap();
        let cmd = pod.spec.unwrap().containers[0].command.clone().unwrap();
        assert!(cmd.contains(&"--ttl=30".to_string()), "{cmd:?}");
    }
}
