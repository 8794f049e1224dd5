//! The files a lab hands to its user: a ready `cluster.yaml` (host1 controller, the rest workers) and an
//! OpenSSH client config so `ssh -F <lab>/ssh_config host1` works with strict host-key checking.

use super::layout::{host_ip, host_name, write_file, LabLayout, REGISTRY_ADDR};
use super::LabError;

pub fn cluster_yaml(l: &LabLayout, hosts: u32, registry: bool) -> String {
    let mut s = format!(
        "# Written by `kiln lab up --name {name}`: the lab's hosts, ready for `kiln init -f` this file.\n\
         apiVersion: kiln.dev/v1alpha1\nkind: Cluster\nmetadata:\n  name: {name}\nspec:\n  \
         knownHostsFile: {kh}\n  controlPlaneEndpoint: {cp}:6443\n  hosts:\n",
        name = l.name,
        kh = l.known_hosts().display(),
        cp = host_ip(1),
    );
    for n in 1..=hosts {
        let role = if n == 1 { "controller" } else { "worker" };
        s.push_str(&format!(
            "    - name: {}\n      address: {}\n      role: {role}\n      ssh:\n        user: root\n        \
             port: 22\n        keyFile: {}\n",
            host_name(n),
            host_ip(n),
            l.ssh_key().display()
        ));
    }
    // A lab host's disk is this machine's, filled by whatever else runs here (a build cache): upstream's
    // percentages would mark every node DiskPressure and reject its pods on a machine over 90% full.
    s.push_str(
        "  kubelet:\n    evictionHard:\n      nodefs.available: 1Gi\n      imagefs.available: 1Gi\n",
    );
    if registry {
        s.push_str(&format!(
            "  registry:\n    mirror: {REGISTRY_ADDR}\n    insecure: true\n  images:\n    \
             pause: {REGISTRY_ADDR}/kiln/pause:1\n"
        ));
    }
    s
}

pub fn ssh_config(l: &LabLayout, hosts: u32) -> String {
    let mut s = format!(
        "# Use inside the lab network: kiln lab run --name {} -- ssh -F {} host1\n",
        l.name,
        l.ssh_config().display()
    );
    for n in 1..=hosts {
        s.push_str(&format!(
            "Host {name} {ip}\n  HostName {ip}\n  User root\n  IdentityFile {key}\n  IdentitiesOnly yes\n  \
             UserKnownHostsFile {kh}\n  StrictHostKeyChecking yes\n  BatchMode yes\n  \
             KexAlgorithms curve25519-sha256\n  LogLevel ERROR\n",
            name = host_name(n),
            ip = host_ip(n),
            key = l.ssh_key().display(),
            kh = l.known_hosts().display(),
        ));
    }
    s
}

pub fn write_all(l: &LabLayout, hosts: u32, registry: bool) -> Result<(), LabError> {
    write_file(
        &l.cluster_yaml(),
        cluster_yaml(l, hosts, registry).as_bytes(),
        0o600,
    )?;
    write_file(&l.ssh_config(), ssh_config(l, hosts).as_bytes(), 0o600)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_yaml_names_every_host_with_one_controller() {
        let l = LabLayout::new("t").unwrap();
        let y = cluster_yaml(&l, 3, true);
        assert_eq!(y.matches("role: controller").count(), 1);
        assert_eq!(y.matches("role: worker").count(), 2);
        assert!(y.contains("address: 10.250.0.13"));
        assert!(y.contains("mirror: 10.250.0.1:5000"));
        let v: serde_json::Value = serde_norway::from_str(&y).unwrap();
        assert_eq!(v["spec"]["hosts"].as_array().unwrap().len(), 3);
    }
}
