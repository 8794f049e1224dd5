//! `--config FILE`: a KubeletConfiguration (apiVersion `kubelet.config.k8s.io/v1beta1`), YAML or JSON,
//! as kubeadm writes it. kiln-kubelet honours `clusterDNS`, `clusterDomain` and `resolvConf`; other fields
//! are accepted and named in a warning (upstream's loader falls back to lenient decoding the same way),
//! so a kubeadm-style file loads. Flags win over the file ([`crate::config`]). Errors name the file and
//! the field. Pure over the file's text ([`parse`]).

use std::net::IpAddr;
use std::path::Path;

pub const API_VERSION: &str = "kubelet.config.k8s.io/v1beta1";
pub const KIND: &str = "KubeletConfiguration";
/// The fields this kubelet acts on (besides apiVersion and kind).
const HONOURED: &[&str] = &["clusterDNS", "clusterDomain", "resolvConf"];

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

/// What the file sets; None: not set (the flag's default applies).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KubeletFile {
    pub cluster_dns: Option<Vec<IpAddr>>,
    pub cluster_domain: Option<String>,
    /// `""` is kept: it means "no host resolver file", as the flag's empty value.
    pub resolv_conf: Option<String>,
    /// Top-level fields present but not acted on.
    pub ignored: Vec<String>,
}

pub fn read(path: &Path) -> Result<KubeletFile, FileError> {
    let text = std::fs::read_to_string(path).map_err(|e| FileError::Read {
        path: path.display().to_string(),
        message: e.to_string(),
    })?;
    parse(&text, path)
}

/// Parses the file's text; `path` only names it in errors.
pub fn parse(text: &str, path: &Path) -> Result<KubeletFile, FileError> {
    let path_s = path.display().to_string();
    let field = |field: &str, message: String| FileError::Field {
        path: path_s.clone(),
        field: field.into(),
        message,
    };
    let doc: serde_json::Value = serde_norway::from_str(text).map_err(|e| FileError::Read {
        path: path_s.clone(),
        message: format!("not YAML or JSON: {e}"),
    })?;
    let serde_json::Value::Object(map) = doc else {
        return Err(FileError::Read {
            path: path_s.clone(),
            message: "not a KubeletConfiguration object".into(),
        });
    };
    let string = |name: &str| -> Result<Option<String>, FileError> {
        match map.get(name) {
            None | Some(serde_json::Value::Null) => Ok(None),
            Some(serde_json::Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(field(name, format!("must be a string, not {other}"))),
        }
    };
    match string("apiVersion")?.as_deref() {
        Some(API_VERSION) => {}
        Some(other) => {
            return Err(field(
                "apiVersion",
                format!("{other:?} is not supported (want {API_VERSION:?})"),
            ))
        }
        None => {
            return Err(field(
                "apiVersion",
                format!("missing (want {API_VERSION:?})"),
            ))
        }
    }
    match string("kind")?.as_deref() {
        Some(KIND) => {}
        Some(other) => return Err(field("kind", format!("{other:?} is not {KIND:?}"))),
        None => return Err(field("kind", format!("missing (want {KIND:?})"))),
    }
    let cluster_dns = match map.get("clusterDNS") {
        None | Some(serde_json::Value::Null) => None,
        Some(serde_json::Value::Array(items)) => {
            let mut ips = Vec::new();
            for (i, item) in items.iter().enumerate() {
                let name = format!("clusterDNS[{i}]");
                let s = item
                    .as_str()
                    .ok_or_else(|| field(&name, format!("must be a string, not {item}")))?;
                let ip = s
                    .trim()
                    .parse::<IpAddr>()
                    .map_err(|_| field(&name, format!("{s:?} is not an IP address")))?;
                ips.push(ip);
            }
            Some(ips)
        }
        Some(other) => {
            return Err(field(
                "clusterDNS",
                format!("must be a list of IP addresses, not {other}"),
            ))
        }
    };
    let mut ignored: Vec<String> = map
        .keys()
        .filter(|k| !HONOURED.contains(&k.as_str()) && *k != "apiVersion" && *k != "kind")
        .cloned()
        .collect();
    ignored.sort();
    Ok(KubeletFile {
        cluster_dns,
        cluster_domain: string("clusterDomain")?,
        resolv_conf: string("resolvConf")?,
        ignored,
    })
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
        assert_eq!(f.ignored, vec!["authentication", "cgroupDriver"]);
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
