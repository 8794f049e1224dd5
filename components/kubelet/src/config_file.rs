//! `--config FILE`: a KubeletConfiguration (apiVersion `kubelet.config.k8s.io/v1beta1`), YAML or JSON,
//! as kubeadm writes it. kiln-kubelet honours the fields that match one of its flags (see [`HONOURED`]);
//! other fields are accepted and named in a warning (upstream's loader falls back to lenient decoding
//! the same way), so a kubeadm-style file loads. Flags given on the command line win over the file
//! ([`crate::config::Flags::load_from`]). Errors name the file and the field. Pure over the file's
//! text ([`parse`]).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use serde_json::Value;

pub const API_VERSION: &str = "kubelet.config.k8s.io/v1beta1";
pub const KIND: &str = "KubeletConfiguration";
/// The top-level fields this kubelet acts on (besides apiVersion and kind), each the twin of a flag.
const HONOURED: &[&str] = &[
    "address",
    "allowedUnsafeSysctls",
    "authentication",
    "clusterDNS",
    "clusterDomain",
    "containerRuntimeEndpoint",
    "enableServer",
    "enforceNodeAllocatable",
    "evictionHard",
    "evictionMaxPodGracePeriod",
    "evictionPressureTransitionPeriod",
    "evictionSoft",
    "evictionSoftGracePeriod",
    "fileCheckFrequency",
    "kubeReserved",
    "maxPods",
    "nodeStatusUpdateFrequency",
    "podCIDR",
    "podLogsDir",
    "podPidsLimit",
    "port",
    "resolvConf",
    "rotateCertificates",
    "staticPodPath",
    "systemReserved",
    "tlsCertFile",
    "tlsPrivateKeyFile",
];

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FileError {
    #[error("--config {path}: {message}")]
    Read { path: String, message: String },
    #[error("--config {path}: {field}: {message}")]
    Field {
        path: String,
        field: String,
        message: String,
    },
}

/// What the file sets, in the flags' own terms (maps already in the flag syntax); None: not set (the
/// flag's default applies).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KubeletFile {
    pub cluster_dns: Option<Vec<IpAddr>>,
    pub cluster_domain: Option<String>,
    /// `""` is kept: it means "no host resolver file", as the flag's empty value.
    pub resolv_conf: Option<String>,
    /// `staticPodPath` (`--pod-manifest-path`).
    pub static_pod_path: Option<PathBuf>,
    /// `podLogsDir` (`--pod-log-dir`).
    pub pod_logs_dir: Option<PathBuf>,
    /// Whole seconds, as the flags count them.
    pub file_check_frequency: Option<u64>,
    pub node_status_update_frequency: Option<u64>,
    pub address: Option<IpAddr>,
    /// `port`, or 0 for `enableServer: false` (kiln's "no server").
    pub port: Option<u16>,
    pub tls_cert_file: Option<PathBuf>,
    pub tls_private_key_file: Option<PathBuf>,
    /// `authentication.x509.clientCAFile`.
    pub client_ca_file: Option<PathBuf>,
    pub rotate_certificates: Option<bool>,
    pub max_pods: Option<u32>,
    pub pod_cidr: Option<String>,
    /// `podPidsLimit` (`--pod-max-pids`).
    pub pod_pids_limit: Option<i64>,
    pub container_runtime_endpoint: Option<String>,
    /// `signal<quantity,…`, as `--eviction-hard` takes it.
    pub eviction_hard: Option<String>,
    pub eviction_soft: Option<String>,
    /// `signal=duration,…`.
    pub eviction_soft_grace_period: Option<String>,
    pub eviction_pressure_transition_period: Option<String>,
    pub eviction_max_pod_grace_period: Option<u32>,
    /// `resource=quantity,…`, as `--system-reserved` takes it.
    pub system_reserved: Option<String>,
    pub kube_reserved: Option<String>,
    pub enforce_node_allocatable: Option<Vec<String>>,
    pub allowed_unsafe_sysctls: Option<Vec<String>>,
    /// Fields present but not acted on (nested ones dotted: `authentication.webhook`).
    pub ignored: Vec<String>,
}

pub fn read(path: &Path) -> Result<KubeletFile, FileError> {
    let text = std::fs::read_to_string(path).map_err(|e| FileError::Read {
        path: path.display().to_string(),
        message: e.to_string(),
    })?;
    parse(&text, path)
}

/// The document's fields, read with errors that name the file and the field.
struct Doc<'a> {
    map: &'a serde_json::Map<String, Value>,
    path: String,
}

impl Doc<'_> {
    fn err(&self, field: &str, message: String) -> FileError {
        FileError::Field {
            path: self.path.clone(),
            field: field.into(),
            message,
        }
    }

    fn get(&self, name: &str) -> Option<&Value> {
        self.map.get(name).filter(|v| !v.is_null())
    }

    fn string(&self, name: &str) -> Result<Option<String>, FileError> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(self.err(name, format!("must be a string, not {other}"))),
        }
    }

    fn path_field(&self, name: &str) -> Result<Option<PathBuf>, FileError> {
        Ok(self.string(name)?.map(PathBuf::from))
    }

    fn bool(&self, name: &str) -> Result<Option<bool>, FileError> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(other) => Err(self.err(name, format!("must be true or false, not {other}"))),
        }
    }

    /// An integer within `min..=max`.
    fn int(&self, name: &str, min: i64, max: i64) -> Result<Option<i64>, FileError> {
        match self.get(name) {
            None => Ok(None),
            Some(v) => match v.as_i64() {
                Some(n) if (min..=max).contains(&n) => Ok(Some(n)),
                Some(n) => Err(self.err(name, format!("{n} is not between {min} and {max}"))),
                None => Err(self.err(name, format!("must be an integer, not {v}"))),
            },
        }
    }

    /// A Go duration ("20s"), checked and kept as written.
    fn duration(&self, name: &str) -> Result<Option<String>, FileError> {
        let Some(s) = self.string(name)? else {
            return Ok(None);
        };
        kiln_common::duration::parse_duration(&s).map_err(|e| self.err(name, e.to_string()))?;
        Ok(Some(s))
    }

    /// A Go duration of at least one whole second, in seconds (the flags that count seconds).
    fn whole_seconds(&self, name: &str) -> Result<Option<u64>, FileError> {
        let Some(s) = self.string(name)? else {
            return Ok(None);
        };
        let d =
            kiln_common::duration::parse_duration(&s).map_err(|e| self.err(name, e.to_string()))?;
        if d.subsec_nanos() != 0 || d.as_secs() == 0 {
            return Err(self.err(
                name,
                format!("{s:?}: kiln-kubelet takes a whole number of seconds, at least 1s"),
            ));
        }
        Ok(Some(d.as_secs()))
    }

    fn string_list(&self, name: &str) -> Result<Option<Vec<String>>, FileError> {
        let Some(v) = self.get(name) else {
            return Ok(None);
        };
        let Value::Array(items) = v else {
            return Err(self.err(name, format!("must be a list of strings, not {v}")));
        };
        items
            .iter()
            .enumerate()
            .map(|(i, item)| {
                item.as_str().map(String::from).ok_or_else(|| {
                    self.err(
                        &format!("{name}[{i}]"),
                        format!("must be a string, not {item}"),
                    )
                })
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some)
    }

    /// A map of strings, sorted by key.
    fn string_map(&self, name: &str) -> Result<Option<BTreeMap<String, String>>, FileError> {
        let Some(v) = self.get(name) else {
            return Ok(None);
        };
        let Value::Object(m) = v else {
            return Err(self.err(name, format!("must be a map of strings, not {v}")));
        };
        m.iter()
            .map(|(k, item)| match item {
                Value::String(s) => Ok((k.clone(), s.clone())),
                other => Err(self.err(
                    &format!("{name}.{k}"),
                    format!("must be a string, not {other}"),
                )),
            })
            .collect::<Result<BTreeMap<_, _>, _>>()
            .map(Some)
    }

    /// A map as a flag value: `k<sep>v` pairs joined by commas.
    fn map_flag(&self, name: &str, sep: &str) -> Result<Option<String>, FileError> {
        Ok(self.string_map(name)?.map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}{sep}{v}"))
                .collect::<Vec<_>>()
                .join(",")
        }))
    }
}

/// Parses the file's text; `path` only names it in errors.
pub fn parse(text: &str, path: &Path) -> Result<KubeletFile, FileError> {
    let path_s = path.display().to_string();
    let doc: Value = serde_norway::from_str(text).map_err(|e| FileError::Read {
        path: path_s.clone(),
        message: format!("not YAML or JSON: {e}"),
    })?;
    let Value::Object(map) = doc else {
        return Err(FileError::Read {
            path: path_s.clone(),
            message: "not a KubeletConfiguration object".into(),
        });
    };
    let d = Doc {
        map: &map,
        path: path_s,
    };
    match d.string("apiVersion")?.as_deref() {
        Some(API_VERSION) => {}
        Some(other) => {
            return Err(d.err(
                "apiVersion",
                format!("{other:?} is not supported (want {API_VERSION:?})"),
            ))
        }
        None => return Err(d.err("apiVersion", format!("missing (want {API_VERSION:?})"))),
    }
    match d.string("kind")?.as_deref() {
        Some(KIND) => {}
        Some(other) => return Err(d.err("kind", format!("{other:?} is not {KIND:?}"))),
        None => return Err(d.err("kind", format!("missing (want {KIND:?})"))),
    }
    let cluster_dns = match d.get("clusterDNS") {
        None => None,
        Some(Value::Array(items)) => {
            let mut ips = Vec::new();
            for (i, item) in items.iter().enumerate() {
                let name = format!("clusterDNS[{i}]");
                let s = item
                    .as_str()
                    .ok_or_else(|| d.err(&name, format!("must be a string, not {item}")))?;
                let ip = s
                    .trim()
                    .parse::<IpAddr>()
                    .map_err(|_| d.err(&name, format!("{s:?} is not an IP address")))?;
                ips.push(ip);
            }
            Some(ips)
        }
        Some(other) => {
            return Err(d.err(
                "clusterDNS",
                format!("must be a list of IP addresses, not {other}"),
            ))
        }
    };
    let address = match d.string("address")? {
        None => None,
        Some(s) => Some(
            s.parse::<IpAddr>()
                .map_err(|_| d.err("address", format!("{s:?} is not an IP address")))?,
        ),
    };
    // enableServer: false turns the server off, which kiln spells port 0.
    let port = match d.bool("enableServer")? {
        Some(false) => Some(0),
        _ => d.int("port", 1, 65535)?.map(|p| p as u16),
    };
    let mut ignored: Vec<String> = map
        .keys()
        .filter(|k| !HONOURED.contains(&k.as_str()) && *k != "apiVersion" && *k != "kind")
        .cloned()
        .collect();
    let (client_ca_file, authn_ignored) = client_ca_file(&d)?;
    ignored.extend(authn_ignored);
    ignored.sort();
    Ok(KubeletFile {
        cluster_dns,
        cluster_domain: d.string("clusterDomain")?,
        resolv_conf: d.string("resolvConf")?,
        static_pod_path: d.path_field("staticPodPath")?,
        pod_logs_dir: d.path_field("podLogsDir")?,
        file_check_frequency: d.whole_seconds("fileCheckFrequency")?,
        node_status_update_frequency: d.whole_seconds("nodeStatusUpdateFrequency")?,
        address,
        port,
        tls_cert_file: d.path_field("tlsCertFile")?,
        tls_private_key_file: d.path_field("tlsPrivateKeyFile")?,
        client_ca_file,
        rotate_certificates: d.bool("rotateCertificates")?,
        max_pods: d.int("maxPods", 0, i64::from(i32::MAX))?.map(|n| n as u32),
        pod_cidr: d.string("podCIDR")?,
        pod_pids_limit: d.int("podPidsLimit", -1, i64::MAX)?,
        container_runtime_endpoint: d.string("containerRuntimeEndpoint")?,
        eviction_hard: d.map_flag("evictionHard", "<")?,
        eviction_soft: d.map_flag("evictionSoft", "<")?,
        eviction_soft_grace_period: d.map_flag("evictionSoftGracePeriod", "=")?,
        eviction_pressure_transition_period: d.duration("evictionPressureTransitionPeriod")?,
        eviction_max_pod_grace_period: d
            .int("evictionMaxPodGracePeriod", 0, i64::from(i32::MAX))?
            .map(|n| n as u32),
        system_reserved: d.map_flag("systemReserved", "=")?,
        kube_reserved: d.map_flag("kubeReserved", "=")?,
        enforce_node_allocatable: d.string_list("enforceNodeAllocatable")?,
        allowed_unsafe_sysctls: d.string_list("allowedUnsafeSysctls")?,
        ignored,
    })
}

/// `authentication.x509.clientCAFile`, and the other authentication settings present (not acted on:
/// kiln's server authenticates client certificates and authorizes by SubjectAccessReview always).
fn client_ca_file(d: &Doc) -> Result<(Option<PathBuf>, Vec<String>), FileError> {
    let mut ignored = Vec::new();
    let Some(authn) = d.get("authentication") else {
        return Ok((None, ignored));
    };
    let Value::Object(authn) = authn else {
        return Err(d.err("authentication", format!("must be an object, not {authn}")));
    };
    ignored.extend(
        authn
            .keys()
            .filter(|k| *k != "x509")
            .map(|k| format!("authentication.{k}")),
    );
    let file = match authn.get("x509").filter(|v| !v.is_null()) {
        None => None,
        Some(Value::Object(x509)) => match x509.get("clientCAFile").filter(|v| !v.is_null()) {
            None => None,
            Some(Value::String(s)) => Some(PathBuf::from(s)),
            Some(other) => {
                return Err(d.err(
                    "authentication.x509.clientCAFile",
                    format!("must be a string, not {other}"),
                ))
            }
        },
        Some(other) => {
            return Err(d.err(
                "authentication.x509",
                format!("must be an object, not {other}"),
            ))
        }
    };
    Ok((file, ignored))
}

#[cfg(test)]
mod tests {
    use super::*;

    const PATH: &str = "/etc/kiln/kubelet-config.yaml";

    fn p(text: &str) -> Result<KubeletFile, FileError> {
        parse(text, Path::new(PATH))
    }

    #[test]
    fn kubeadm_style_file_loads_with_the_dns_fields() {
        let f = p("apiVersion: kubelet.config.k8s.io/v1beta1\n\
                   kind: KubeletConfiguration\n\
                   clusterDNS:\n- 10.96.0.10\n- fd00::a\n\
                   clusterDomain: cluster.local\n\
                   resolvConf: /run/systemd/resolve/resolv.conf\n\
                   cgroupDriver: systemd\n\
                   authentication:\n  anonymous:\n    enabled: false\n")
        .unwrap();
        assert_eq!(
            f.cluster_dns,
            Some(vec![
                "10.96.0.10".parse().unwrap(),
                "fd00::a".parse().unwrap()
            ])
        );
        assert_eq!(f.cluster_domain.as_deref(), Some("cluster.local"));
        assert_eq!(
            f.resolv_conf.as_deref(),
            Some("/run/systemd/resolve/resolv.conf")
        );
        assert_eq!(f.ignored, vec!["authentication.anonymous", "cgroupDriver"]);
        // JSON is YAML; unset fields stay unset; an empty resolvConf is kept.
        let f = p(r#"{"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration", "resolvConf": ""}"#)
            .unwrap();
        assert_eq!(
            f,
            KubeletFile {
                resolv_conf: Some(String::new()),
                ..Default::default()
            }
        );
    }

    #[test]
    fn the_fields_twinned_with_flags_are_read_in_the_flags_terms() {
        let f = p("apiVersion: kubelet.config.k8s.io/v1beta1\n\
                   kind: KubeletConfiguration\n\
                   staticPodPath: /etc/kiln/manifests\n\
                   podLogsDir: /var/log/kiln-pods\n\
                   fileCheckFrequency: 20s\n\
                   nodeStatusUpdateFrequency: 1m\n\
                   address: 10.250.0.11\n\
                   port: 10260\n\
                   tlsCertFile: /k.crt\n\
                   tlsPrivateKeyFile: /k.key\n\
                   authentication:\n  x509:\n    clientCAFile: /etc/kiln/pki/ca.crt\n  webhook:\n    enabled: true\n\
                   rotateCertificates: false\n\
                   maxPods: 30\n\
                   podCIDR: 10.244.1.0/24\n\
                   podPidsLimit: 4096\n\
                   containerRuntimeEndpoint: unix:///run/containerd/containerd.sock\n\
                   evictionHard:\n  nodefs.available: 10%\n  memory.available: 100Mi\n\
                   evictionSoft:\n  memory.available: 200Mi\n\
                   evictionSoftGracePeriod:\n  memory.available: 1m30s\n\
                   evictionPressureTransitionPeriod: 30s\n\
                   evictionMaxPodGracePeriod: 60\n\
                   systemReserved:\n  memory: 256Mi\n  cpu: 100m\n\
                   kubeReserved:\n  pid: \"1000\"\n\
                   enforceNodeAllocatable: [pods]\n\
                   allowedUnsafeSysctls: [\"kernel.msg*\", net.core.somaxconn]\n")
        .unwrap();
        let want = KubeletFile {
            static_pod_path: Some("/etc/kiln/manifests".into()),
            pod_logs_dir: Some("/var/log/kiln-pods".into()),
            file_check_frequency: Some(20),
            node_status_update_frequency: Some(60),
            address: Some("10.250.0.11".parse().unwrap()),
            port: Some(10260),
            tls_cert_file: Some("/k.crt".into()),
            tls_private_key_file: Some("/k.key".into()),
            client_ca_file: Some("/etc/kiln/pki/ca.crt".into()),
            rotate_certificates: Some(false),
            max_pods: Some(30),
            pod_cidr: Some("10.244.1.0/24".into()),
            pod_pids_limit: Some(4096),
            container_runtime_endpoint: Some("unix:///run/containerd/containerd.sock".into()),
            eviction_hard: Some("memory.available<100Mi,nodefs.available<10%".into()),
            eviction_soft: Some("memory.available<200Mi".into()),
            eviction_soft_grace_period: Some("memory.available=1m30s".into()),
            eviction_pressure_transition_period: Some("30s".into()),
            eviction_max_pod_grace_period: Some(60),
            system_reserved: Some("cpu=100m,memory=256Mi".into()),
            kube_reserved: Some("pid=1000".into()),
            enforce_node_allocatable: Some(vec!["pods".into()]),
            allowed_unsafe_sysctls: Some(vec!["kernel.msg*".into(), "net.core.somaxconn".into()]),
            ignored: vec!["authentication.webhook".into()],
            ..Default::default()
        };
        assert_eq!(f, want);
        // enableServer: false is kiln's port 0 (no server).
        let f = p("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nenableServer: false\nport: 10250\n")
            .unwrap();
        assert_eq!(f.port, Some(0));
    }

    #[test]
    fn errors_name_the_file_and_the_field() {
        let head = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";
        let cases = [
            (
                format!("{head}clusterDNS: [10.96.0.10, 10.96.0.x]\n"),
                format!("--config {PATH}: clusterDNS[1]: \"10.96.0.x\" is not an IP address"),
            ),
            (
                format!("{head}clusterDNS: 10.96.0.10\n"),
                format!("--config {PATH}: clusterDNS: must be a list of IP addresses, not \"10.96.0.10\""),
            ),
            (
                format!("{head}clusterDomain: [a]\n"),
                format!("--config {PATH}: clusterDomain: must be a string, not [\"a\"]"),
            ),
            (
                "apiVersion: kubelet.config.k8s.io/v1alpha1\nkind: KubeletConfiguration\n".into(),
                format!("--config {PATH}: apiVersion: \"kubelet.config.k8s.io/v1alpha1\" is not supported (want \"kubelet.config.k8s.io/v1beta1\")"),
            ),
            (
                "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeProxyConfiguration\n".into(),
                format!("--config {PATH}: kind: \"KubeProxyConfiguration\" is not \"KubeletConfiguration\""),
            ),
            (
                format!("{head}allowedUnsafeSysctls: kernel.msg*\n"),
                format!("--config {PATH}: allowedUnsafeSysctls: must be a list of strings, not \"kernel.msg*\""),
            ),
            (
                format!("{head}allowedUnsafeSysctls: [net.core.somaxconn, 7]\n"),
                format!("--config {PATH}: allowedUnsafeSysctls[1]: must be a string, not 7"),
            ),
            (
                format!("{head}systemReserved:\n  memory: 1\n"),
                format!("--config {PATH}: systemReserved.memory: must be a string, not 1"),
            ),
            (
                format!("{head}maxPods: many\n"),
                format!("--config {PATH}: maxPods: must be an integer, not \"many\""),
            ),
            (
                format!("{head}port: 70000\n"),
                format!("--config {PATH}: port: 70000 is not between 1 and 65535"),
            ),
            (
                format!("{head}fileCheckFrequency: 500ms\n"),
                format!("--config {PATH}: fileCheckFrequency: \"500ms\": kiln-kubelet takes a whole number of seconds, at least 1s"),
            ),
            (
                format!("{head}authentication:\n  x509:\n    clientCAFile: true\n"),
                format!("--config {PATH}: authentication.x509.clientCAFile: must be a string, not true"),
            ),
            (
                "kind: KubeletConfiguration\n".into(),
                format!("--config {PATH}: apiVersion: missing (want \"kubelet.config.k8s.io/v1beta1\")"),
            ),
        ];
        for (text, want) in cases {
            assert_eq!(p(&text).unwrap_err().to_string(), want, "{text}");
        }
        let e = p("clusterDNS: [").unwrap_err().to_string();
        assert!(
            e.starts_with(&format!("--config {PATH}: not YAML or JSON")),
            "{e}"
        );
        let e = read(Path::new("/nonexistent/kubelet.yaml"))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("--config /nonexistent/kubelet.yaml: "), "{e}");
    }
}
