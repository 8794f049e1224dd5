//! Templates (from `templates/`, embedded in the binary) rendered with tera.

use super::BootstrapError;

const TEMPLATES: &[(&str, &str)] = &[
    (
        "kiln-store.yaml",
        include_str!("../../../templates/kiln-store.yaml"),
    ),
    (
        "kiln-apiserver.yaml",
        include_str!("../../../templates/kiln-apiserver.yaml"),
    ),
    (
        "containerd.toml",
        include_str!("../../../templates/containerd.toml"),
    ),
    (
        "registry-hosts.toml",
        include_str!("../../../templates/registry-hosts.toml"),
    ),
    (
        "registry-mirror-hosts.toml",
        include_str!("../../../templates/registry-mirror-hosts.toml"),
    ),
    (
        "kiln-scheduler.yaml",
        include_str!("../../../templates/kiln-scheduler.yaml"),
    ),
    (
        "kiln-controller-manager.yaml",
        include_str!("../../../templates/kiln-controller-manager.yaml"),
    ),
    ("boot.sh", include_str!("../../../templates/boot.sh")),
    ("rc.local", include_str!("../../../templates/rc.local")),
    (
        "kiln-proxy.yaml",
        include_str!("../../../templates/kiln-proxy.yaml"),
    ),
    (
        "kiln-dns.yaml",
        include_str!("../../../templates/kiln-dns.yaml"),
    ),
    (
        "kubelet-supervisor.sh",
        include_str!("../../../templates/kubelet-supervisor.sh"),
    ),
    (
        "kiln-kubelet.service",
        include_str!("../../../templates/kiln-kubelet.service"),
    ),
    (
        "snapshot-schedule.sh",
        include_str!("../../../templates/snapshot-schedule.sh"),
    ),
    (
        "kiln-snapshot.service",
        include_str!("../../../templates/kiln-snapshot.service"),
    ),
    (
        "kiln-snapshot.timer",
        include_str!("../../../templates/kiln-snapshot.timer"),
    ),
    (
        "kiln-snapshot-loop.service",
        include_str!("../../../templates/kiln-snapshot-loop.service"),
    ),
];

pub fn render(name: &str, ctx: &tera::Context) -> Result<String, BootstrapError> {
    let (_, text) =
        TEMPLATES
            .iter()
            .find(|(n, _)| *n == name)
            .ok_or_else(|| BootstrapError::Template {
                template: name.into(),
                message: "no such template".into(),
            })?;
    let mut t = tera::Tera::default();
    // Manifests and scripts are not HTML: never escape.
    t.autoescape_on(vec![]);
    t.add_raw_template(name, text)
        .map_err(|e| BootstrapError::Template {
            template: name.into(),
            message: format!("{e:?}"),
        })?;
    t.render(name, ctx).map_err(|e| BootstrapError::Template {
        template: name.into(),
        message: format!("{e:?}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_manifest_renders_a_pod_with_the_node_flags() {
        let mut c = tera::Context::new();
        c.insert("version", "0.1.0");
        c.insert("node_name", "host1");
        c.insert("node_ip", "10.250.0.11");
        c.insert("initial_cluster", "host1=https://10.250.0.11:2380");
        c.insert("initial_cluster_state", "new");
        c.insert("quota_backend_bytes", &0);
        c.insert("keep_awake", &true);
        c.insert("cluster_token", "kiln-t");
        let command = |c: &tera::Context| -> Vec<String> {
            let y = render("kiln-store.yaml", c).unwrap();
            let v: serde_json::Value = serde_norway::from_str(&y).unwrap();
            assert_eq!(v["kind"], "Pod");
            assert_eq!(v["spec"]["runtimeClassName"], "kiln-host");
            serde_json::from_value(v["spec"]["containers"][0]["command"].clone()).unwrap()
        };
        let cmd = command(&c);
        assert!(cmd.contains(&"--name=host1".to_string()));
        assert!(cmd.contains(&"--initial-cluster=host1=https://10.250.0.11:2380".to_string()));
        assert!(!cmd.iter().any(|a| a.starts_with("--quota")));
        assert!(!cmd.iter().any(|a| a.starts_with("--keep-awake")));
        c.insert("keep_awake", &false);
        assert!(command(&c).contains(&"--keep-awake=false".to_string()));
    }

    #[test]
    fn every_template_renders_with_its_variables() {
        let mut c = tera::Context::new();
        for k in [
            "version",
            "node_name",
            "node_ip",
            "initial_cluster",
            "initial_cluster_state",
            "service_cidr",
            "kubelet_command",
            "pod_cidr",
            "pause_image",
            "node_cidr_mask_size",
            "node_monitor_grace_period",
            "pod_eviction_timeout",
            "cluster_token",
            "cni_bin_dir",
            "systemd_cgroup",
            "registry",
            "scheme",
            // the scheduled snapshot job's templates
            "save_command",
            "every",
            "every_secs",
            // kiln-dns
            "cluster_dns",
            "cluster_domain",
            // containerd's certs.d hosts.toml of a registry mirror
            "server",
            // kiln-apiserver's store endpoints and client credentials (kiln-store or external etcd)
            "etcd_servers",
            "etcd_cafile",
            "etcd_certfile",
            "etcd_keyfile",
        ] {
            c.insert(k, "x");
        }
        c.insert("quota_backend_bytes", &1024);
        c.insert("keep_awake", &true);
        c.insert("upstream", &["10.250.0.1"]);
        for (name, _) in TEMPLATES {
            render(name, &c).unwrap();
        }
    }
}
