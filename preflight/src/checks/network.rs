//! Checks of the host's identity on the network and of what may keep other hosts out: hostname, node
//! address, ports in use, firewalls.

use std::net::IpAddr;

use super::{Outcome, Severity};
use crate::facts::{Facts, Role};
use crate::firewall::{self, Needed};

/// A port in use is an error unless kiln's own component holds it (a re-run of init converges).
pub(super) fn port_check(f: &Facts, port: u16, owner: &str) -> Outcome {
    if !f.listening.contains(&port) || f.kiln_components.contains(owner) {
        return None;
    }
    Some((Severity::Error, format!("port {port} is in use")))
}

/// A port kiln binds on the node address only (not on every address): taken only by a socket on that
/// address or on the wildcard, so systemd-resolved's 127.0.0.53:53 leaves kiln-dns's port free.
pub(super) fn address_port_check(f: &Facts, port: u16, udp_too: bool, owner: &str) -> Outcome {
    if f.kiln_components.contains(owner) {
        return None;
    }
    let node: Option<IpAddr> = f.node_address.parse().ok();
    let clashes =
        |(ip, p): &(IpAddr, u16)| *p == port && (ip.is_unspecified() || Some(*ip) == node);
    let mut taken = vec![];
    if let Some((ip, _)) = f.tcp_listeners.iter().find(|s| clashes(s)) {
        taken.push(format!("TCP on {ip}"));
    }
    if udp_too {
        if let Some((ip, _)) = f.udp_bound.iter().find(|s| clashes(s)) {
            taken.push(format!("UDP on {ip}"));
        }
    }
    if taken.is_empty() {
        return None;
    }
    Some((
        Severity::Error,
        format!(
            "port {port} is in use ({}); {owner} listens on {}:{port}",
            taken.join(", "),
            f.node_address
        ),
    ))
}

/// A lowercase RFC 1123 subdomain, as Kubernetes requires of node names.
pub(crate) fn is_dns1123_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        })
}

/// Warnings only: kiln registers every node under its cluster.yaml name (`--hostname-override`, the
/// store member name and the certificates' SANs use it too), so the OS hostname never becomes the node's
/// identity and a hostname that differs from the cluster.yaml name is not reported. What still matters:
/// a hostname that does not resolve on the host itself (kubeadm warns; sudo, which kiln uses for non-root
/// SSH users, prints "unable to resolve host" and waits on DNS), and one that is not a DNS name (tools
/// that fall back to the hostname would fail on it).
pub(super) fn hostname(f: &Facts, _: Role) -> Outcome {
    let mut problems = vec![];
    if !is_dns1123_subdomain(&f.hostname) {
        problems.push(format!(
            "hostname {:?} is not a lowercase RFC 1123 DNS name",
            f.hostname
        ));
    }
    if !f.hostname_resolves {
        problems.push(format!(
            "hostname {:?} does not resolve on the host (add it to /etc/hosts)",
            f.hostname
        ));
    }
    (!problems.is_empty()).then(|| (Severity::Warning, problems.join("; ")))
}

/// The address the kubelet advertises (and kiln-store binds on a controller) must be one of the host's
/// own: the upstream kubelet refuses to start otherwise ("node IP not found in the host's network
/// interfaces"). A DNS name in cluster.yaml cannot be compared here, so it is not checked.
pub(super) fn node_ip(f: &Facts, _: Role) -> Outcome {
    let ip: IpAddr = f.node_address.parse().ok()?;
    let on_host = f
        .addresses
        .iter()
        .filter_map(|a| a.parse::<IpAddr>().ok())
        .any(|a| a == ip);
    (!on_host).then(|| {
        (
            Severity::Error,
            format!(
                "the node address {ip} (cluster.yaml nodeIP or address) is not configured on this host (it has {}); set hosts[].nodeIP",
                f.addresses.iter().cloned().collect::<Vec<_>>().join(", ")
            ),
        )
    })
}

fn specs(ports: &[Needed]) -> String {
    ports
        .iter()
        .map(|n| format!("{} ({})", n.spec(), n.why))
        .collect::<Vec<_>>()
        .join(", ")
}

/// kubeadm warns while firewalld runs; kiln names the needed ports it does not open yet, and is quiet once
/// they are open.
pub(super) fn firewalld(f: &Facts, role: Role) -> Outcome {
    if !f.firewalld_running {
        return None;
    }
    let missing = firewall::firewalld_missing(&f.firewalld_ports, &firewall::needed_ports(role));
    (!missing.is_empty()).then(|| {
        (
            Severity::Warning,
            format!(
                "firewalld is active and does not open {}; open them or your cluster may not function correctly (`kiln preflight --fix` does)",
                specs(&missing)
            ),
        )
    })
}

pub(super) fn ufw(f: &Facts, role: Role) -> Outcome {
    let status = f.ufw_status.as_deref()?;
    if !firewall::ufw_active_deny(status) {
        return None;
    }
    let missing = firewall::ufw_missing(status, &firewall::needed_ports(role));
    (!missing.is_empty()).then(|| {
        (
            Severity::Warning,
            format!(
                "ufw is active and does not allow {}; allow them or your cluster may not function correctly (`kiln preflight --fix` does)",
                specs(&missing)
            ),
        )
    })
}

/// Rules the operator wrote are not kiln's to change, so this is a warning naming each port and rule,
/// and `--fix` leaves them alone.
pub(super) fn firewall_rules(f: &Facts, role: Role) -> Outcome {
    let needed = firewall::needed_ports(role);
    let mut blocked = firewall::nft_blocked(&f.nft_ruleset, &needed);
    // iptables-nft shows the same rules in both listings: report a port once.
    for b in firewall::iptables_blocked(&f.iptables_input, &needed) {
        if !blocked.iter().any(|x| x.port == b.port) {
            blocked.push(b);
        }
    }
    blocked.dedup_by(|a, b| a.port == b.port);
    (!blocked.is_empty()).then(|| {
        (
            Severity::Warning,
            blocked
                .iter()
                .map(|b| {
                    format!(
                        "port {} ({}) is blocked on INPUT by {}",
                        b.port.spec(),
                        b.port.why,
                        b.by
                    )
                })
                .collect::<Vec<_>>()
                .join("; "),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::super::good_facts;
    use super::*;

    const R: Role = Role::Controller;

    #[test]
    fn dns_port_is_taken_only_on_the_node_address_or_the_wildcard() {
        let mut f = good_facts();
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        // systemd-resolved's stub listener is on loopback: no clash with kiln-dns on the node address.
        f.udp_bound.insert((ip("127.0.0.53"), 53));
        f.tcp_listeners.insert((ip("127.0.0.53"), 53));
        assert_eq!(address_port_check(&f, 53, true, "kiln-dns"), None);
        f.udp_bound.insert((ip(&f.node_address.clone()), 53));
        let (s, m) = address_port_check(&f, 53, true, "kiln-dns").unwrap();
        assert_eq!(s, Severity::Error);
        assert!(
            m.contains("UDP on 10.250.0.11") && !m.contains("TCP"),
            "{m}"
        );
        // TCP-only ports ignore UDP sockets; a wildcard TCP listener clashes.
        f.udp_bound.insert((ip("0.0.0.0"), 9153));
        assert_eq!(address_port_check(&f, 9153, false, "kiln-dns"), None);
        f.tcp_listeners.insert((ip("::"), 9153));
        assert!(address_port_check(&f, 9153, false, "kiln-dns")
            .unwrap()
            .1
            .contains("TCP on ::"));
        // kiln's own kiln-dns holds its ports.
        f.kiln_components.insert("kiln-dns".into());
        assert_eq!(address_port_check(&f, 53, true, "kiln-dns"), None);
    }

    #[test]
    fn hostname_must_be_a_dns_name_that_resolves() {
        let mut f = good_facts();
        assert_eq!(hostname(&f, R), None);
        f.hostname = "Web_01".into();
        let (s, m) = hostname(&f, R).unwrap();
        assert_eq!(s, Severity::Warning);
        assert!(m.contains("RFC 1123"), "{m}");
        f.hostname = "web-01.example.com".into();
        assert_eq!(hostname(&f, R), None);
        f.hostname_resolves = false;
        assert!(hostname(&f, R).unwrap().1.contains("does not resolve"));
    }

    #[test]
    fn node_ip_must_be_on_the_host() {
        let mut f = good_facts();
        assert_eq!(node_ip(&f, R), None);
        f.node_address = "10.250.0.99".into();
        assert_eq!(node_ip(&f, R).unwrap().0, Severity::Error);
        f.node_address = "node1.example.com".into();
        assert_eq!(node_ip(&f, R), None, "DNS names are not compared");
    }

    #[test]
    fn a_port_held_by_another_program_is_an_error() {
        let mut f = good_facts();
        f.listening.insert(10250);
        assert_eq!(
            port_check(&f, 10250, "kiln-kubelet").unwrap().0,
            Severity::Error
        );
        f.kiln_components.insert("kiln-kubelet".into());
        assert_eq!(port_check(&f, 10250, "kiln-kubelet"), None);
    }

    #[test]
    fn firewalld_warns_until_the_needed_ports_are_open() {
        let mut f = good_facts();
        assert_eq!(firewalld(&f, R), None);
        f.firewalld_running = true;
        f.firewalld_ports = "22/tcp 6443/tcp".into();
        let (s, m) = firewalld(&f, R).unwrap();
        assert_eq!(s, Severity::Warning);
        assert!(m.contains("2379-2380/tcp") && !m.contains("6443"), "{m}");
        f.firewalld_ports = "6443/tcp 2379-2380/tcp 10250/tcp 30000-32767/tcp".into();
        assert_eq!(firewalld(&f, R), None);
        // A worker needs fewer.
        f.firewalld_ports = "10250/tcp 30000-32767/tcp".into();
        assert_eq!(firewalld(&f, Role::Worker), None);
    }

    #[test]
    fn ufw_warns_while_active_with_ports_not_allowed() {
        let mut f = good_facts();
        f.ufw_status = Some("Status: inactive\n".into());
        assert_eq!(ufw(&f, R), None);
        f.ufw_status = Some(
            "Status: active\nDefault: deny (incoming), allow (outgoing), disabled (routed)\n\n\
             To                         Action      From\n--                         ------      ----\n\
             22/tcp                     ALLOW IN    Anywhere\n10250/tcp                  ALLOW IN    Anywhere\n"
                .into(),
        );
        let (s, m) = ufw(&f, Role::Worker).unwrap();
        assert_eq!(s, Severity::Warning);
        assert!(m.contains("30000-32767/tcp"), "{m}");
    }

    #[test]
    fn firewall_rules_name_the_blocked_port_once() {
        let mut f = good_facts();
        assert_eq!(firewall_rules(&f, R), None);
        f.nft_ruleset = "table ip filter {\n\tchain INPUT {\n\t\ttype filter hook input priority filter; policy accept;\n\
                         \t\tmeta l4proto tcp tcp dport 6443 counter packets 0 bytes 0 drop\n\t}\n}\n"
            .into();
        f.iptables_input = "-P INPUT ACCEPT\n-A INPUT -p tcp -m tcp --dport 6443 -j DROP\n".into();
        let (s, m) = firewall_rules(&f, R).unwrap();
        assert_eq!(s, Severity::Warning);
        assert_eq!(m.matches("6443/tcp").count(), 1, "{m}");
        // A worker does not serve 6443.
        assert_eq!(firewall_rules(&f, Role::Worker), None);
    }
}
