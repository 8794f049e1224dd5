//! What is known about a host, as plain data (filled by the CLI from files it reads on the host).

use std::collections::BTreeSet;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Controller,
    Worker,
}

#[derive(Debug, Clone, Default)]
pub struct Facts {
    pub hostname: String,
    pub is_root: bool,
    /// Contents of /proc/swaps.
    pub swaps: String,
    /// /proc/sys/net/ipv4/ip_forward, trimmed; None when the file is missing.
    pub ip_forward: Option<String>,
    /// /proc/sys/net/bridge/bridge-nf-call-iptables; None when br_netfilter is not loaded.
    pub bridge_nf_call_iptables: Option<String>,
    pub num_cpu: u32,
    pub mem_total_kib: u64,
    /// TCP ports something listens on.
    pub listening: BTreeSet<u16>,
    /// Components kiln already runs on this host (from /etc/kiln/manifests): their ports are theirs.
    pub kiln_components: BTreeSet<String>,
    /// Directories that exist and are not empty.
    pub non_empty_dirs: BTreeSet<String>,
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
    fn listening_ports_come_from_listen_state_only() {
        let t = "  sl  local_address rem_address   st tx_queue rx_queue\n\
                 0: 0100007F:0959 00000000:0000 0A 00000000:00000000\n\
                 1: 0B00FA0A:0016 00000000:0000 0A 00000000:00000000\n\
                 2: 0B00FA0A:0016 0100FA0A:D2B2 01 00000000:00000000\n";
        assert_eq!(parse_listening_ports(t), BTreeSet::from([2393, 22]));
    }
}
