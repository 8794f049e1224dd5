//! A pod's host name and domain as upstream's kubelet makes them (GeneratePodHostNameAndDomain,
//! GetNodenameForKernel): the host name is `spec.hostname` or the pod's name, cut to 63 characters; with
//! `spec.subdomain` the domain is `<subdomain>.<namespace>.svc.<cluster domain>`; with
//! `setHostnameAsFQDN` the kernel's host name (the sandbox's UTS name) is the FQDN, which must fit the
//! kernel's 64 characters. Pure, tested on values.

use k8s_openapi::api::core::v1::Pod;

/// The kernel's nodename holds 64 characters and a NUL; upstream caps the short name one lower.
const HOSTNAME_MAX: usize = 63;
const FQDN_MAX: usize = 64;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostnameError {
    #[error("pod Hostname {0:?} is not a valid DNS label: {1}")]
    Hostname(String, String),
    #[error("pod Subdomain {0:?} is not a valid DNS label: {1}")]
    Subdomain(String, String),
    #[error("hostname for pod {0:?} was invalid: {1:?}")]
    Empty(String, String),
    #[error("failed to construct FQDN from pod hostname and cluster domain, FQDN {fqdn} is too long ({FQDN_MAX} characters is the max, {} characters requested)", fqdn.len())]
    FqdnTooLong { fqdn: String },
}

/// The names `/etc/hosts` and the sandbox use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodNames {
    /// The short host name.
    pub hostname: String,
    /// `<subdomain>.<ns>.svc.<zone>`, when the pod has a subdomain.
    pub domain: Option<String>,
}

/// Upstream's IsDNS1123Label, with its messages joined by ";".
fn dns1123_label_errors(v: &str) -> Option<String> {
    let mut errs = Vec::new();
    if v.len() > HOSTNAME_MAX {
        errs.push(format!("must be no more than {HOSTNAME_MAX} characters"));
    }
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    let ok = !v.is_empty()
        && v.starts_with(alnum)
        && v.ends_with(alnum)
        && v.chars().all(|c| alnum(c) || c == '-');
    if !ok {
        errs.push(
            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')".into(),
        );
    }
    (!errs.is_empty()).then(|| errs.join(";"))
}

/// At most 63 characters, then no trailing `-` or `.` (upstream's truncatePodHostnameIfNeeded).
fn truncate(pod_name: &str, hostname: &str) -> Result<String, HostnameError> {
    if hostname.len() <= HOSTNAME_MAX {
        return Ok(hostname.to_string());
    }
    // Names are ASCII (the API validates them); cut on a char boundary anyway.
    let mut end = HOSTNAME_MAX;
    while !hostname.is_char_boundary(end) {
        end -= 1;
    }
    let cut = hostname[..end].trim_end_matches(['-', '.']);
    tracing::error!(
        pod = pod_name,
        hostname_max_len = HOSTNAME_MAX,
        truncated = cut,
        "hostname for pod was too long, truncated it"
    );
    if cut.is_empty() {
        return Err(HostnameError::Empty(pod_name.into(), hostname.into()));
    }
    Ok(cut.to_string())
}

/// The pod's host name and domain (`cluster_domain` may be empty, as with upstream's kubelet).
pub fn pod_names(pod: &Pod, cluster_domain: &str) -> Result<PodNames, HostnameError> {
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    let spec = pod.spec.as_ref();
    let mut hostname = name;
    if let Some(h) = spec
        .and_then(|s| s.hostname.as_deref())
        .filter(|h| !h.is_empty())
    {
        if let Some(e) = dns1123_label_errors(h) {
            return Err(HostnameError::Hostname(h.into(), e));
        }
        hostname = h;
    }
    let hostname = truncate(name, hostname)?;
    let domain = match spec
        .and_then(|s| s.subdomain.as_deref())
        .filter(|s| !s.is_empty())
    {
        None => None,
        Some(sub) => {
            if let Some(e) = dns1123_label_errors(sub) {
                return Err(HostnameError::Subdomain(sub.into(), e));
            }
            let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
            Some(format!("{sub}.{ns}.svc.{cluster_domain}"))
        }
    };
    Ok(PodNames { hostname, domain })
}

/// The sandbox's UTS host name: the short name, or the FQDN with `setHostnameAsFQDN` and a subdomain.
pub fn kernel_hostname(
    names: &PodNames,
    set_hostname_as_fqdn: bool,
) -> Result<String, HostnameError> {
    match &names.domain {
        Some(domain) if set_hostname_as_fqdn => {
            let fqdn = format!("{}.{domain}", names.hostname);
            if fqdn.len() > FQDN_MAX {
                return Err(HostnameError::FqdnTooLong { fqdn });
            }
            Ok(fqdn)
        }
        _ => Ok(names.hostname.clone()),
    }
}

/// The sandbox host name of `pod`: empty for hostNetwork pods (they keep the node's UTS name, and
/// containerd then uses the node's name), else [`kernel_hostname`].
pub fn sandbox_hostname(pod: &Pod, cluster_domain: &str) -> Result<String, HostnameError> {
    let spec = pod.spec.as_ref();
    if spec.and_then(|s| s.host_network) == Some(true) {
        return Ok(String::new());
    }
    let names = pod_names(pod, cluster_domain)?;
    kernel_hostname(
        &names,
        spec.and_then(|s| s.set_hostname_as_fqdn) == Some(true),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, spec: serde_json::Value) -> Pod {
        let mut v = serde_json::json!({
            "metadata": {"name": name, "namespace": "apps", "uid": "u1"},
            "spec": {"containers": [{"name": "c", "image": "i"}]}
        });
        for (k, val) in spec.as_object().unwrap() {
            v["spec"][k] = val.clone();
        }
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn hostname_is_spec_hostname_or_pod_name() {
        let n = pod_names(&pod("web-0", serde_json::json!({})), "cluster.local").unwrap();
        assert_eq!((n.hostname.as_str(), n.domain), ("web-0", None));
        let n = pod_names(
            &pod("web-0", serde_json::json!({"hostname": "db"})),
            "cluster.local",
        )
        .unwrap();
        assert_eq!(n.hostname, "db");
        assert_eq!(
            pod_names(&pod("web-0", serde_json::json!({"hostname": "Bad_Name"})), "c").unwrap_err().to_string(),
            "pod Hostname \"Bad_Name\" is not a valid DNS label: a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
        );
    }

    #[test]
    fn long_names_are_cut_to_63_without_trailing_dash_or_dot() {
        // Upstream's TestTruncatePodHostname cases.
        let cases = [
            (
                "test.pod.namespace.svc.cluster.local",
                "test.pod.namespace.svc.cluster.local",
            ),
            (
                "1234567.1234567.1234567.1234567.1234567.1234567.1234567.1234567",
                "1234567.1234567.1234567.1234567.1234567.1234567.1234567.1234567",
            ),
            (
                "1234567.1234567.1234567.1234567.1234567.1234567.1234567.1234567.1234567.1234567",
                "1234567.1234567.1234567.1234567.1234567.1234567.1234567.1234567",
            ),
            (
                "1234567.1234567.1234567.1234567.1234567.1234567.1234567.123456.1234567",
                "1234567.1234567.1234567.1234567.1234567.1234567.1234567.123456",
            ),
            (
                "1234567.1234567.1234567.1234567.1234567.1234567.1234567.123456-1234567",
                "1234567.1234567.1234567.1234567.1234567.1234567.1234567.123456",
            ),
        ];
        for (name, want) in cases {
            let n = pod_names(&pod(name, serde_json::json!({})), "cluster.local").unwrap();
            assert_eq!(n.hostname, want, "{name}");
        }
    }

    #[test]
    fn subdomain_makes_the_domain_and_set_hostname_as_fqdn_the_kernel_name() {
        let p = pod("web-0", serde_json::json!({"subdomain": "web"}));
        let n = pod_names(&p, "cluster.local").unwrap();
        assert_eq!(n.domain.as_deref(), Some("web.apps.svc.cluster.local"));
        assert_eq!(sandbox_hostname(&p, "cluster.local").unwrap(), "web-0");
        let p = pod(
            "web-0",
            serde_json::json!({"subdomain": "web", "setHostnameAsFQDN": true}),
        );
        assert_eq!(
            sandbox_hostname(&p, "cluster.local").unwrap(),
            "web-0.web.apps.svc.cluster.local"
        );
        // Without a subdomain setHostnameAsFQDN changes nothing.
        let p = pod("web-0", serde_json::json!({"setHostnameAsFQDN": true}));
        assert_eq!(sandbox_hostname(&p, "cluster.local").unwrap(), "web-0");
        assert!(matches!(
            pod_names(&pod("w", serde_json::json!({"subdomain": "-x"})), "c"),
            Err(HostnameError::Subdomain(..))
        ));
    }

    #[test]
    fn an_fqdn_over_64_characters_is_upstreams_error() {
        let names = PodNames {
            hostname: "a".repeat(20),
            domain: Some(format!("{}.apps.svc.cluster.local", "b".repeat(20))),
        };
        let fqdn = format!(
            "{}.{}.apps.svc.cluster.local",
            "a".repeat(20),
            "b".repeat(20)
        );
        assert_eq!(fqdn.len(), 64);
        assert_eq!(kernel_hostname(&names, true).unwrap(), fqdn);
        let names = PodNames {
            hostname: "a".repeat(21),
            ..names
        };
        assert_eq!(
            kernel_hostname(&names, true).unwrap_err().to_string(),
            format!(
                "failed to construct FQDN from pod hostname and cluster domain, FQDN {}.{}.apps.svc.cluster.local is too long (64 characters is the max, 65 characters requested)",
                "a".repeat(21),
                "b".repeat(20)
            )
        );
        assert_eq!(kernel_hostname(&names, false).unwrap(), "a".repeat(21));
    }

    #[test]
    fn host_network_pods_keep_the_nodes_name() {
        let p = pod(
            "web-0",
            serde_json::json!({"hostNetwork": true, "hostname": "x"}),
        );
        assert_eq!(sandbox_hostname(&p, "cluster.local").unwrap(), "");
    }
}
