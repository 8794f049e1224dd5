//! What is known about a host, as plain data (filled by the CLI from what [`crate::GATHER_SCRIPT`] prints
//! on the host, plus what cluster.yaml says about it).

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Controller,
    Worker,
    /// Both: every check of either role applies.
    ControllerWorker,
}

impl Role {
    /// Whether a check written for `r` applies to a host of this role.
    pub fn covers(self, r: Role) -> bool {
        self == r || self == Role::ControllerWorker
    }

    pub fn is_controller(self) -> bool {
        self.covers(Role::Controller)
    }

    /// Hosts that run workload pods (over CRI, in containerd).
    pub fn runs_workloads(self) -> bool {
        self.covers(Role::Worker)
    }
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Facts {
    pub hostname: String,
    /// `getent ahosts $(hostname)` answered on the host within 3 s.
    pub hostname_resolves: bool,
    pub is_root: bool,
    /// Contents of /proc/swaps.
    pub swaps: String,
    /// Contents of /etc/fstab (swap entries there turn swap back on at boot).
    pub fstab: String,
    /// /etc/sysctl.d/99-kiln.conf and /etc/modules-load.d/kiln.conf (written by `--fix`), empty if absent.
    pub sysctl_conf: String,
    pub modules_conf: String,
    /// /proc/sys/net/ipv4/ip_forward, trimmed; None when the file is missing.
    pub ip_forward: Option<String>,
    /// /proc/sys/net/bridge/bridge-nf-call-iptables; None when br_netfilter is not loaded.
    pub bridge_nf_call_iptables: Option<String>,
    /// Kernel modules of the ones kiln needs that are loaded or built in (/sys/module) or that `modprobe -n`
    /// can load.
    pub loadable_modules: BTreeSet<String>,
    pub num_cpu: u32,
    pub mem_total_kib: u64,
    /// /proc/sys/kernel/osrelease, e.g. `6.1.0-18-amd64`.
    pub kernel_release: String,
    /// Contents of /proc/filesystems.
    pub proc_filesystems: String,
    /// /sys/fs/cgroup/cgroup.controllers when the unified hierarchy (cgroup v2) is mounted there.
    pub cgroup2_controllers: Option<String>,
    /// Contents of /proc/cgroups (the v1 controllers and whether each is enabled).
    pub proc_cgroups: String,
    /// /etc/machine-id, trimmed.
    pub machine_id: String,
    /// Every IP address configured on the host (any interface, any scope).
    pub addresses: BTreeSet<String>,
    /// The address kiln gives the kubelet as --node-ip (cluster.yaml `nodeIP`, else `address`).
    pub node_address: String,
    /// Programs found on the PATH, of the ones kiln looks for (see `checks::files`).
    pub executables: BTreeSet<String>,
    /// /run/containerd/containerd.sock exists and is a socket.
    pub cri_socket: bool,
    /// `containerd --version`'s version word (e.g. `1.6.20~ds1`), when containerd is installed.
    pub containerd_version: Option<String>,
    /// TCP ports something listens on.
    pub listening: BTreeSet<u16>,
    /// TCP listeners by address: a port taken on one address only may still be free on another.
    pub tcp_listeners: BTreeSet<(IpAddr, u16)>,
    /// UDP sockets bound and not connected (servers), by address.
    pub udp_bound: BTreeSet<(IpAddr, u16)>,
    /// Components whose static pod manifest kiln rendered into /etc/kiln/manifests, and kiln binaries
    /// running from /usr/local/bin: their ports are theirs.
    pub kiln_components: BTreeSet<String>,
    /// Files in /etc/kiln/manifests that kiln did not render (no "Rendered by `kiln" header).
    pub foreign_manifests: BTreeSet<String>,
    /// Directories that exist and are not empty.
    pub non_empty_dirs: BTreeSet<String>,
    /// `firewall-cmd --state` said `running`.
    pub firewalld_running: bool,
    /// `firewall-cmd --list-ports` (default zone) while firewalld runs.
    pub firewalld_ports: String,
    /// `ufw status verbose`, when ufw is installed.
    pub ufw_status: Option<String>,
    /// `nft list ruleset`.
    pub nft_ruleset: String,
    /// `iptables -S INPUT`.
    pub iptables_input: String,
}

/// /proc/net/tcp's state of a listening socket.
pub const TCP_LISTEN: &str = "0A";
/// /proc/net/udp's state of a bound, unconnected socket (TCP_CLOSE): how a UDP server looks.
pub const UDP_UNCONNECTED: &str = "07";

/// (local address, port) of the sockets in `state` from /proc/net/{tcp,udp}[6]. The kernel prints an
/// address as 32-bit words in host byte order (little-endian on every host kiln supports).
pub fn parse_sockets(proc_net: &str, state: &str) -> BTreeSet<(IpAddr, u16)> {
    proc_net
        .lines()
        .filter_map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            if cols.get(3) != Some(&state) {
                return None;
            }
            let (addr, port) = cols.get(1)?.split_once(':')?;
            let port = u16::from_str_radix(port, 16).ok()?;
            let words: Vec<u32> = (0..addr.len() / 8)
                .map(|i| u32::from_str_radix(&addr[i * 8..i * 8 + 8], 16).map(u32::swap_bytes))
                .collect::<Result<_, _>>()
                .ok()?;
            let ip = match words[..] {
                [a] => IpAddr::V4(Ipv4Addr::from(a)),
                [a, b, c, d] => IpAddr::V6(Ipv6Addr::from(
                    (u128::from(a) << 96)
                        | (u128::from(b) << 64)
                        | (u128::from(c) << 32)
                        | u128::from(d),
                )),
                _ => return None,
            };
            Some((ip, port))
        })
        .collect()
}

/// Listening ports from /proc/net/tcp or /proc/net/tcp6 (state 0A = LISTEN).
pub fn parse_listening_ports(proc_net_tcp: &str) -> BTreeSet<u16> {
    proc_net_tcp
        .lines()
        .skip(1)
        .filter_map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            if cols.get(3) != Some(&"0A") {
                return None;
            }
            let port = cols.get(1)?.rsplit(':').next()?;
            u16::from_str_radix(port, 16).ok()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sockets_carry_their_addresses_v4_and_v6() {
        let tcp = "  sl  local_address rem_address   st\n\
                   0: 3500007F:0035 00000000:0000 0A 0\n\
                   1: 0B00FA0A:0016 0100FA0A:D2B2 01 0\n\
                   0: 00000000000000000000000000000000:0035 00000000000000000000000000000000:0000 0A 0\n";
        assert_eq!(
            parse_sockets(tcp, TCP_LISTEN),
            BTreeSet::from([
                ("127.0.0.53".parse().unwrap(), 53),
                ("::".parse().unwrap(), 53),
            ])
        );
        let udp = "  sl  local_address rem_address   st\n\
                   0: 0B00FA0A:0035 00000000:0000 07 0\n\
                   1: 0B00FA0A:A000 0100FA0A:0035 01 0\n\
                   2: 000080FE00000000FF005450B6AF4BFE:0035 00000000000000000000000000000000:0000 07 0\n";
        assert_eq!(
            parse_sockets(udp, UDP_UNCONNECTED),
            BTreeSet::from([
                ("10.250.0.11".parse().unwrap(), 53),
                ("fe80::5054:ff:fe4b:afb6".parse().unwrap(), 53),
            ])
        );
    }

    #[test]
    fn listening_ports_come_from_listen_state_only() {
        let t = "  sl  local_address rem_address   st tx_queue rx_queue\n\
                 0: 0100007F:0959 00000000:0000 0A 00000000:00000000\n\
                 1: 0B00FA0A:0016 00000000:0000 0A 00000000:00000000\n\
                 2: 0B00FA0A:0016 0100FA0A:D2B2 01 00000000:00000000\n";
        assert_eq!(parse_listening_ports(t), BTreeSet::from([2393, 22]));
    }

    #[test]
    fn a_controller_worker_gets_the_checks_of_both_roles() {
        assert!(Role::ControllerWorker.covers(Role::Controller));
        assert!(Role::ControllerWorker.covers(Role::Worker));
        assert!(!Role::Worker.covers(Role::Controller));
        assert!(Role::Worker.runs_workloads() && !Role::Controller.runs_workloads());
    }
}
