//! The `/etc/hosts` the kubelet gives every container of a CRI pod, as upstream's (makeHostsMount,
//! ensureHostsFile): a file per pod, `<root-dir>/pods/<uid>/etc-hosts`, mounted read-write at /etc/hosts
//! and rewritten before each container starts (so it carries the current sandbox's IP). A pod on the pod
//! network gets the kubelet's own file (localhost lines, its IPs under its host name — the FQDN first
//! when it has a subdomain — then hostAliases); a hostNetwork pod gets the node's /etc/hosts with the
//! hostAliases appended. Without the mount containerd would bind its copy of the node's /etc/hosts.
//!
//! The contents are pure ([`managed_contents`], [`host_network_contents`]); [`write`] does the I/O.

use std::path::{Path, PathBuf};

use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::{Container, HostAlias};

/// Where containers see the file.
pub const CONTAINER_PATH: &str = "/etc/hosts";
/// The node's own hosts file, which hostNetwork pods get.
pub const NODE_HOSTS: &str = "/etc/hosts";
const HEADER: &str = "# Kubernetes-managed hosts file.\n";
const HEADER_HOST_NETWORK: &str = "# Kubernetes-managed hosts file (host network).\n";

#[derive(Debug, thiserror::Error)]
pub enum HostsError {
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: String,
        #[source]
        source: std::io::Error,
    },
}

/// `<pods_root>/<uid>/etc-hosts`.
pub fn path(pods_root: &Path, uid: &str) -> PathBuf {
    crate::volumes::pod_dir(pods_root, uid).join("etc-hosts")
}

fn aliases_block(aliases: &[HostAlias]) -> String {
    if aliases.is_empty() {
        return String::new();
    }
    let mut out = String::from("\n# Entries added by HostAliases.\n");
    for a in aliases {
        // One line per IP, its names tab-separated.
        let names = a.hostnames.as_deref().unwrap_or_default().join("\t");
        out.push_str(&format!("{}\t{names}\n", a.ip));
    }
    out
}

/// The kubelet's hosts file for a pod on the pod network: upstream's localhost lines, each pod IP with
/// `<hostname>.<domain>\t<hostname>` (or just the host name without a domain), then the hostAliases.
pub fn managed_contents(
    pod_ips: &[String],
    hostname: &str,
    domain: Option<&str>,
    aliases: &[HostAlias],
) -> String {
    let mut out = String::from(HEADER);
    out.push_str("127.0.0.1\tlocalhost\n");
    out.push_str("::1\tlocalhost ip6-localhost ip6-loopback\n");
    out.push_str("fe00::0\tip6-localnet\n");
    out.push_str("fe00::0\tip6-mcastprefix\n");
    out.push_str("fe00::1\tip6-allnodes\n");
    out.push_str("fe00::2\tip6-allrouters\n");
    for ip in pod_ips {
        match domain.filter(|d| !d.is_empty()) {
            Some(d) => out.push_str(&format!("{ip}\t{hostname}.{d}\t{hostname}\n")),
            None => out.push_str(&format!("{ip}\t{hostname}\n")),
        }
    }
    out.push_str(&aliases_block(aliases));
    out
}

/// A hostNetwork pod's hosts file: the node's, under upstream's header, with the hostAliases after it.
pub fn host_network_contents(node_hosts: &[u8], aliases: &[HostAlias]) -> Vec<u8> {
    let mut out = HEADER_HOST_NETWORK.as_bytes().to_vec();
    out.extend_from_slice(node_hosts);
    out.extend_from_slice(aliases_block(aliases).as_bytes());
    out
}

/// Does the container get the kubelet's hosts file? Not when it mounts a volume at /etc/hosts itself,
/// nor while a pod-network pod has no IP yet (upstream's shouldMountHostsFile).
pub fn should_mount(c: &Container, pod_ips: &[String], host_network: bool) -> bool {
    let own = c
        .volume_mounts
        .iter()
        .flatten()
        .any(|m| m.mount_path == CONTAINER_PATH);
    !own && (host_network || !pod_ips.is_empty())
}

/// Writes `contents` to `file` in place (0644), creating the pod directory. In place, not by rename:
/// running containers bind-mount this inode and see the update (upstream's os.WriteFile).
pub fn write(file: &Path, contents: &[u8]) -> Result<(), HostsError> {
    use std::os::unix::fs::PermissionsExt;
    let io = |what, source| HostsError::Io {
        what,
        path: file.display().to_string(),
        source,
    };
    if let Some(dir) = file.parent() {
        std::fs::create_dir_all(dir).map_err(|e| io("creating the directory of", e))?;
    }
    std::fs::write(file, contents).map_err(|e| io("writing", e))?;
    std::fs::set_permissions(file, std::fs::Permissions::from_mode(0o644))
        .map_err(|e| io("setting the mode of", e))
}

/// The CRI mount of the pod's hosts file (read-write, relabelled, as upstream's).
pub fn mount(file: &Path) -> cri::Mount {
    cri::Mount {
        container_path: CONTAINER_PATH.into(),
        host_path: file.display().to_string(),
        readonly: false,
        selinux_relabel: true,
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alias(ip: &str, names: &[&str]) -> HostAlias {
        HostAlias {
            ip: ip.into(),
            hostnames: Some(names.iter().map(|n| n.to_string()).collect()),
        }
    }

    const LOCAL: &str = "# Kubernetes-managed hosts file.\n\
        127.0.0.1\tlocalhost\n\
        ::1\tlocalhost ip6-localhost ip6-loopback\n\
        fe00::0\tip6-localnet\n\
        fe00::0\tip6-mcastprefix\n\
        fe00::1\tip6-allnodes\n\
        fe00::2\tip6-allrouters\n";

    #[test]
    fn pod_ip_under_the_host_name() {
        // Upstream's TestManagedHostsFileContent cases.
        let got = managed_contents(&["123.45.67.89".into()], "podFoo", None, &[]);
        assert_eq!(got, format!("{LOCAL}123.45.67.89\tpodFoo\n"));
        let got = managed_contents(&["203.0.113.1".into()], "podFoo", Some("domainFoo"), &[]);
        assert_eq!(
            got,
            format!("{LOCAL}203.0.113.1\tpodFoo.domainFoo\tpodFoo\n")
        );
        // Dual stack: every IP gets a line.
        let got = managed_contents(
            &["203.0.113.1".into(), "fd00::6".into()],
            "podFoo",
            Some("domainFoo"),
            &[],
        );
        assert_eq!(
            got,
            format!(
                "{LOCAL}203.0.113.1\tpodFoo.domainFoo\tpodFoo\nfd00::6\tpodFoo.domainFoo\tpodFoo\n"
            )
        );
    }

    #[test]
    fn host_aliases_follow_with_upstreams_comment() {
        let got = managed_contents(
            &["203.0.113.1".into()],
            "podFoo",
            Some("domainFoo"),
            &[alias("123.45.67.89", &["foo", "bar", "baz"])],
        );
        assert_eq!(
            got,
            format!(
                "{LOCAL}203.0.113.1\tpodFoo.domainFoo\tpodFoo\n\n# Entries added by HostAliases.\n123.45.67.89\tfoo\tbar\tbaz\n"
            )
        );
        let got = managed_contents(
            &["203.0.113.1".into()],
            "podFoo",
            None,
            &[
                alias("123.45.67.89", &["foo", "bar", "baz"]),
                alias("456.78.90.123", &["park", "doo", "boo"]),
            ],
        );
        assert_eq!(
            got,
            format!(
                "{LOCAL}203.0.113.1\tpodFoo\n\n# Entries added by HostAliases.\n123.45.67.89\tfoo\tbar\tbaz\n456.78.90.123\tpark\tdoo\tboo\n"
            )
        );
    }

    #[test]
    fn host_network_pods_get_the_nodes_file() {
        let node = b"127.0.0.1\tlocalhost\n10.250.0.11\thost1\n";
        assert_eq!(
            String::from_utf8(host_network_contents(node, &[])).unwrap(),
            "# Kubernetes-managed hosts file (host network).\n127.0.0.1\tlocalhost\n10.250.0.11\thost1\n"
        );
        assert_eq!(
            String::from_utf8(host_network_contents(node, &[alias("1.2.3.4", &["a"])])).unwrap(),
            "# Kubernetes-managed hosts file (host network).\n127.0.0.1\tlocalhost\n10.250.0.11\thost1\n\n# Entries added by HostAliases.\n1.2.3.4\ta\n"
        );
    }

    #[test]
    fn mounted_unless_the_container_mounts_etc_hosts_or_there_is_no_ip() {
        let c: Container = serde_json::from_value(serde_json::json!({"name": "c"})).unwrap();
        let ip = vec!["10.244.1.2".to_string()];
        assert!(should_mount(&c, &ip, false));
        assert!(!should_mount(&c, &[], false), "no pod IP yet");
        assert!(should_mount(&c, &[], true), "hostNetwork");
        let own: Container = serde_json::from_value(serde_json::json!({
            "name": "c", "volumeMounts": [{"name": "h", "mountPath": "/etc/hosts"}]
        }))
        .unwrap();
        assert!(!should_mount(&own, &ip, false));
    }

    #[test]
    fn written_in_place_under_the_pod_dir() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let root = tempfile::tempdir().unwrap();
        let f = path(root.path(), "u1");
        assert_eq!(f, root.path().join("u1/etc-hosts"));
        write(&f, b"one\n").unwrap();
        let inode = std::fs::metadata(&f).unwrap().ino();
        write(&f, b"two\n").unwrap();
        let meta = std::fs::metadata(&f).unwrap();
        assert_eq!(meta.ino(), inode, "same inode: bind mounts see the update");
        assert_eq!(meta.permissions().mode() & 0o777, 0o644);
        assert_eq!(std::fs::read_to_string(&f).unwrap(), "two\n");
        let m = mount(&f);
        assert_eq!(
            (m.container_path.as_str(), m.readonly, m.selinux_relabel),
            ("/etc/hosts", false, true)
        );
    }
}
