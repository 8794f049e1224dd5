//! `spec.store.external`: kiln-apiserver on an existing etcd v3 cluster instead of kiln-store
//! (kubeadm's external-etcd topology, its `etcd.external` with the same field names).
//!
//! kiln does not own the members then: it starts no store, joins or removes no member, and never
//! restores one; it only reaches the cluster as a client with the CA and client certificate given
//! here (paths on the operator's machine, relative ones against cluster.yaml's folder). Whether the
//! files exist and the endpoints answer is checked by the `external-etcd` phase, not here: a
//! cluster.yaml copied to a controller (scheduled snapshots) is loaded where those paths do not exist.

use std::collections::HashSet;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::validate::{split_host_port, Problem};
use super::ClusterConfig;

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExternalEtcd {
    /// Client URLs of the members, `https://host:port`.
    pub endpoints: Vec<String>,
    /// The CA that signed the members' serving certificates.
    pub ca_file: PathBuf,
    /// The client certificate kiln-apiserver (and kiln's snapshots) present to etcd.
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
}

impl ExternalEtcd {
    /// The files as (field, path), in the order errors name them.
    pub fn files(&self) -> [(&'static str, &PathBuf); 3] {
        [
            ("caFile", &self.ca_file),
            ("certFile", &self.cert_file),
            ("keyFile", &self.key_file),
        ]
    }
}

const AT: &str = "spec.store.external";

/// `host:port` of an endpoint URL, or why it is not `https://host:port`.
pub fn endpoint_host_port(url: &str) -> Result<(&str, u16), String> {
    let rest = url.strip_prefix("https://").ok_or(
        "expected https://host:port (kiln reaches etcd over TLS with the client certificate)",
    )?;
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    if rest.contains('/') {
        return Err("expected https://host:port without a path".into());
    }
    split_host_port(rest)
}

/// The store options that make no sense with an etcd kiln does not run, and why.
const KILN_STORE_ONLY: &[(&str, &str)] = &[
    (
        "quotaBackendBytes",
        "kiln-store's quota; an external etcd has its own --quota-backend-bytes",
    ),
    (
        "keepAwake",
        "a kiln-store setting; there is no kiln-store with spec.store.external",
    ),
];

pub(super) fn validate(c: &ClusterConfig, out: &mut Vec<Problem>) {
    let store = &c.spec.store;
    let Some(ext) = &store.external else {
        return;
    };
    let mut push = |path: String, message: String| out.push(Problem { path, message });
    if ext.endpoints.is_empty() {
        push(
            format!("{AT}.endpoints"),
            "at least one endpoint is required".into(),
        );
    }
    let mut seen = HashSet::new();
    for (i, e) in ext.endpoints.iter().enumerate() {
        let path = format!("{AT}.endpoints[{i}]");
        match endpoint_host_port(e) {
            Err(why) => push(path, format!("invalid endpoint '{e}': {why}")),
            Ok(hp) if !seen.insert(hp) => push(path, format!("duplicate endpoint '{e}'")),
            Ok(_) => {}
        }
    }
    for (field, p) in ext.files() {
        if p.as_os_str().is_empty() {
            push(format!("{AT}.{field}"), "must name a file".into());
        }
    }
    let set = [
        store.quota_backend_bytes.is_some(),
        store.keep_awake.is_some(),
    ];
    for ((field, why), set) in KILN_STORE_ONLY.iter().zip(set) {
        if set {
            push(
                format!("spec.store.{field}"),
                format!("cannot be set with spec.store.external: {why}"),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(store: &str) -> Result<ClusterConfig, String> {
        let text = format!(
            "apiVersion: kiln.dev/v1alpha1\nkind: Cluster\nmetadata: {{name: ext}}\nspec:\n  \
             hosts:\n    - {{name: host1, address: 10.250.0.11, role: controller}}\n  store:\n{store}"
        );
        crate::config::parse(&text, "cluster.yaml").map_err(|e| e.to_string())
    }

    #[test]
    fn a_complete_external_store_is_accepted() {
        let c = config(
            "    external:\n      endpoints: [https://10.250.0.11:2379, 'https://etcd-2.example:2379/']\n      \
             caFile: etcd/ca.crt\n      certFile: etcd/client.crt\n      keyFile: etcd/client.key\n",
        )
        .unwrap();
        let ext = c.spec.store.external.unwrap();
        assert_eq!(ext.endpoints.len(), 2);
        assert_eq!(ext.ca_file, PathBuf::from("etcd/ca.crt"));
    }

    #[test]
    fn endpoints_and_files_are_checked_with_their_lines() {
        let e = config(
            "    external:\n      endpoints: [http://10.250.0.11:2379, https://10.250.0.12, \
             https://10.250.0.13:2379, https://10.250.0.13:2379, https://a:1/x]\n      \
             caFile: ''\n      certFile: c\n      keyFile: k\n",
        )
        .unwrap_err();
        let want = [
            "cluster.yaml:9: store.external.endpoints[0]: invalid endpoint 'http://10.250.0.11:2379': expected https://host:port",
            "cluster.yaml:9: store.external.endpoints[1]: invalid endpoint 'https://10.250.0.12': expected host:port",
            "cluster.yaml:9: store.external.endpoints[3]: duplicate endpoint 'https://10.250.0.13:2379'",
            "cluster.yaml:9: store.external.endpoints[4]: invalid endpoint 'https://a:1/x': expected https://host:port without a path",
            "cluster.yaml:10: store.external.caFile: must name a file",
        ];
        for w in want {
            assert!(e.contains(w), "missing {w:?} in:\n{e}");
        }
        assert_eq!(e.lines().count(), want.len(), "{e}");
    }

    #[test]
    fn an_empty_endpoint_list_and_missing_fields_are_refused() {
        let e = config("    external: {endpoints: [], caFile: a, certFile: b, keyFile: c}\n")
            .unwrap_err();
        assert!(
            e.contains("store.external.endpoints: at least one endpoint is required"),
            "{e}"
        );
        let e = config("    external: {endpoints: ['https://a:2379'], caFile: a, certFile: b}\n")
            .unwrap_err();
        assert!(e.contains("missing field `keyFile`"), "{e}");
    }

    #[test]
    fn kiln_store_options_are_refused_with_an_external_store() {
        let e = config(
            "    quotaBackendBytes: 1000000\n    keepAwake: false\n    external: \
             {endpoints: ['https://a:2379'], caFile: a, certFile: b, keyFile: c}\n",
        )
        .unwrap_err();
        assert!(e.contains("cluster.yaml:8: store.quotaBackendBytes: cannot be set with spec.store.external: kiln-store's quota"), "{e}");
        assert!(
            e.contains("cluster.yaml:9: store.keepAwake: cannot be set with spec.store.external"),
            "{e}"
        );
        // Without external both stay kiln-store's options.
        config("    quotaBackendBytes: 1000000\n    keepAwake: false\n").unwrap();
    }
}
