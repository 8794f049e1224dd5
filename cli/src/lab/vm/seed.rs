//! A VM's seed: the few files that make one copy of the shared image into this host (hostname, machine-id,
//! SSH host key, address, the lab's login key), packed as a plain tar archive that the VM sees as its
//! second disk (/dev/vdb). The image's `lab-seed.service` unpacks it over / early in every boot, before
//! the network and sshd start — the role cloud-init's NoCloud seed plays for cloud images, without cloud-init.
//!
//! Pure: builds bytes from data, so the exact seed is unit-tested.

use crate::lab::layout::{host_ip, host_name, LAB_GATEWAY, LAB_PREFIX};
use crate::lab::net::host_mac;

/// What differs between two VMs of a lab.
#[derive(Debug, Clone)]
pub struct Seed {
    pub n: u32,
    /// Hosts in the lab, for /etc/hosts.
    pub count: u32,
    /// 32 lowercase hex digits (machine-id(5)).
    pub machine_id: String,
    /// OpenSSH private and public host key files (ed25519).
    pub host_key: Vec<u8>,
    pub host_key_pub: Vec<u8>,
    /// The lab's client public key: root's authorized_keys.
    pub authorized_key: Vec<u8>,
}

/// A machine-id derived from the lab and host, so a re-made lab's hosts keep theirs; never all zeros.
pub fn machine_id(lab: &str, n: u32) -> String {
    use sha2::{Digest, Sha256};
    let d = Sha256::digest(format!("kiln-lab/{lab}/{}", host_name(n)));
    hex::encode(&d[..16])
}

/// systemd-networkd's file for the lab NIC, matched by the MAC the lab gives it.
pub fn network_file(n: u32) -> String {
    format!(
        "[Match]\nMACAddress={mac}\n\n[Network]\nAddress={ip}/{LAB_PREFIX}\nGateway={LAB_GATEWAY}\n\
         # The lab has no uplink and no DNS: don't wait for either.\nLinkLocalAddressing=no\nIPv6AcceptRA=no\n",
        mac = host_mac(n),
        ip = host_ip(n),
    )
}

pub fn etc_hosts(n: u32, count: u32) -> String {
    let mut s = format!(
        "127.0.0.1 localhost\n127.0.1.1 {}\n{LAB_GATEWAY} controller registry\n",
        host_name(n)
    );
    for m in 1..=count {
        s.push_str(&format!("{} {}\n", host_ip(m), host_name(m)));
    }
    s
}

impl Seed {
    /// (path without leading '/', mode, contents); directories are listed with their modes so unpacking
    /// never leaves /root or /root/.ssh group- or world-readable.
    pub fn files(&self) -> Vec<(String, u32, Option<Vec<u8>>)> {
        let dir = |p: &str, m| (p.to_string(), m, None);
        let file = |p: &str, m, c: Vec<u8>| (p.to_string(), m, Some(c));
        vec![
            dir("etc", 0o755),
            file(
                "etc/hostname",
                0o644,
                format!("{}\n", host_name(self.n)).into(),
            ),
            file(
                "etc/machine-id",
                0o444,
                format!("{}\n", self.machine_id).into(),
            ),
            file("etc/hosts", 0o644, etc_hosts(self.n, self.count).into()),
            // Nothing answers DNS in the lab: a refused query fails at once instead of timing out.
            file(
                "etc/resolv.conf",
                0o644,
                format!("nameserver {LAB_GATEWAY}\n").into(),
            ),
            dir("etc/ssh", 0o755),
            file("etc/ssh/ssh_host_ed25519_key", 0o600, self.host_key.clone()),
            file(
                "etc/ssh/ssh_host_ed25519_key.pub",
                0o644,
                self.host_key_pub.clone(),
            ),
            dir("etc/systemd", 0o755),
            dir("etc/systemd/network", 0o755),
            file(
                "etc/systemd/network/10-lab.network",
                0o644,
                network_file(self.n).into(),
            ),
            dir("root", 0o700),
            dir("root/.ssh", 0o700),
            file(
                "root/.ssh/authorized_keys",
                0o600,
                self.authorized_key.clone(),
            ),
        ]
    }

    /// The seed disk's bytes: a ustar archive, root-owned entries, fixed mtimes (the same inputs give the
    /// same disk).
    pub fn tar(&self) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for (path, mode, contents) in self.files() {
            let mut h = tar::Header::new_ustar();
            h.set_uid(0);
            h.set_gid(0);
            h.set_mtime(0);
            h.set_mode(mode);
            match contents {
                None => {
                    h.set_entry_type(tar::EntryType::Directory);
                    h.set_size(0);
                    b.append_data(&mut h, format!("{path}/"), std::io::empty())
                }
                Some(c) => {
                    h.set_entry_type(tar::EntryType::Regular);
                    h.set_size(c.len() as u64);
                    b.append_data(&mut h, &path, c.as_slice())
                }
            }
            .expect("appending to an in-memory tar cannot fail");
        }
        b.into_inner()
            .expect("finishing an in-memory tar cannot fail")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seed() -> Seed {
        Seed {
            n: 2,
            count: 3,
            machine_id: machine_id("t", 2),
            host_key: b"PRIVATE".to_vec(),
            host_key_pub: b"ssh-ed25519 AAAA root@host2\n".to_vec(),
            authorized_key: b"ssh-ed25519 BBBB kiln-lab-t\n".to_vec(),
        }
    }

    #[test]
    fn machine_ids_are_stable_distinct_and_well_formed() {
        let a = machine_id("t", 1);
        assert_eq!(a, machine_id("t", 1));
        assert_ne!(a, machine_id("t", 2));
        assert_ne!(a, machine_id("u", 1));
        assert_eq!(a.len(), 32);
        assert!(a
            .chars()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
    }

    #[test]
    fn seed_unpacks_to_the_hosts_identity_with_safe_modes() {
        let bytes = seed().tar();
        assert_eq!(bytes.len() % 512, 0, "a disk is whole sectors");
        assert_eq!(bytes, seed().tar(), "same inputs, same disk");
        let mut a = tar::Archive::new(bytes.as_slice());
        let mut seen = std::collections::BTreeMap::new();
        for e in a.entries().unwrap() {
            let mut e = e.unwrap();
            let path = e.path().unwrap().to_string_lossy().into_owned();
            let mode = e.header().mode().unwrap();
            assert_eq!(e.header().uid().unwrap(), 0);
            let mut s = String::new();
            std::io::Read::read_to_string(&mut e, &mut s).unwrap();
            seen.insert(path, (mode, s));
        }
        assert_eq!(seen["etc/hostname"].1, "host2\n");
        assert_eq!(
            seen["etc/ssh/ssh_host_ed25519_key"],
            (0o600, "PRIVATE".into())
        );
        assert_eq!(seen["root/"].0, 0o700);
        assert_eq!(seen["root/.ssh/authorized_keys"].0, 0o600);
        let net = &seen["etc/systemd/network/10-lab.network"].1;
        assert!(net.contains("MACAddress=02:6b:6c:00:00:02"), "{net}");
        assert!(net.contains("Address=10.250.0.12/24"), "{net}");
        assert!(net.contains("Gateway=10.250.0.1"), "{net}");
        assert!(seen["etc/hosts"].1.contains("10.250.0.13 host3"));
    }
}
