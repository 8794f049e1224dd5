//! The ports other hosts must reach, and conservative readers of firewall state: firewalld's open ports,
//! ufw's rules, `nft list ruleset` and `iptables -S INPUT`. "Conservative" means a rule is reported only
//! when it plainly drops or rejects a needed TCP port for everyone (a rule limited to some source
//! addresses is the operator's intent, not an accident), and a drop policy only when no rule anywhere in
//! the same table accepts the port.

use crate::facts::Role;

/// A TCP port range (inclusive) that must be reachable from the other hosts, and who needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Needed {
    pub first: u16,
    pub last: u16,
    pub why: &'static str,
}

impl Needed {
    /// As firewalld writes it: `6443/tcp`, `2379-2380/tcp`.
    pub fn spec(&self) -> String {
        if self.first == self.last {
            format!("{}/tcp", self.first)
        } else {
            format!("{}-{}/tcp", self.first, self.last)
        }
    }

    /// As ufw writes it: `6443/tcp`, `2379:2380/tcp`.
    pub fn ufw_spec(&self) -> String {
        self.spec().replace('-', ":")
    }

    fn within(&self, (a, b): (u16, u16)) -> bool {
        a <= self.first && self.last <= b
    }

    fn overlaps(&self, (a, b): (u16, u16)) -> bool {
        a <= self.last && self.first <= b
    }
}

const fn n(first: u16, last: u16, why: &'static str) -> Needed {
    Needed { first, last, why }
}

/// Every node: the kubelet's API (logs, exec from the apiserver) and Service NodePorts (kiln-proxy).
const NODE_PORTS: &[Needed] = &[
    n(10250, 10250, "kiln-kubelet"),
    n(30000, 32767, "NodePort Services"),
];
/// Controllers also serve the API and the store (clients and Raft peers). The scheduler's and
/// controller-manager's ports are health endpoints for the host itself, so they need no opening.
const CONTROLLER_PORTS: &[Needed] = &[n(6443, 6443, "kiln-apiserver"), n(2379, 2380, "kiln-store")];

pub fn needed_ports(role: Role) -> Vec<Needed> {
    let mut v = vec![];
    if role.is_controller() {
        v.extend_from_slice(CONTROLLER_PORTS);
    }
    v.extend_from_slice(NODE_PORTS);
    v
}

/// Port ranges from a port list such as `6443`, `2379-2380`, `{ 22, 6443, 30000-32767 }`, `10250,30000:32767`.
fn port_ranges(spec: &str) -> Vec<(u16, u16)> {
    spec.split([',', '{', '}', ' '])
        .filter(|s| !s.is_empty())
        .filter_map(|s| {
            let (a, b) = s.split_once(['-', ':']).unwrap_or((s, s));
            Some((a.parse().ok()?, b.parse().ok()?))
        })
        .collect()
}

/// Needed ports firewalld's `--list-ports` output does not open.
pub fn firewalld_missing(list_ports: &str, needed: &[Needed]) -> Vec<Needed> {
    let open: Vec<(u16, u16)> = list_ports
        .split_whitespace()
        .filter_map(|p| p.strip_suffix("/tcp"))
        .flat_map(port_ranges)
        .collect();
    needed
        .iter()
        .filter(|n| !open.iter().any(|r| n.within(*r)))
        .copied()
        .collect()
}

/// Whether `ufw status verbose` says ufw is active and denies incoming connections by default.
pub fn ufw_active_deny(status: &str) -> bool {
    let active = status.lines().any(|l| l.trim() == "Status: active");
    let default_allow = status
        .lines()
        .any(|l| l.starts_with("Default:") && l.contains("allow (incoming)"));
    active && !default_allow
}

/// Needed ports no ufw ALLOW rule covers.
pub fn ufw_missing(status: &str, needed: &[Needed]) -> Vec<Needed> {
    let allowed: Vec<(u16, u16)> = status
        .lines()
        .filter(|l| l.contains("ALLOW"))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|to| !to.ends_with("/udp"))
        .flat_map(|to| port_ranges(to.trim_end_matches("/tcp")))
        .collect();
    needed
        .iter()
        .filter(|n| !allowed.iter().any(|r| n.within(*r)))
        .copied()
        .collect()
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blocked {
    pub port: Needed,
    /// The rule (or policy) that blocks it, as the ruleset shows it.
    pub by: String,
}

#[derive(Debug, Default)]
struct Chain {
    input_hook: bool,
    policy_drop: bool,
    rules: Vec<String>,
}

/// What a rule does with TCP ports: the ranges it matches on destination port, and its verdict.
fn nft_rule(rule: &str) -> Option<(Vec<(u16, u16)>, &'static str)> {
    let words: Vec<&str> = rule.split_whitespace().collect();
    let i = words
        .windows(2)
        .position(|w| (w[0] == "tcp" || w[0] == "th") && w[1] == "dport")?;
    let rest = words[i + 2..].join(" ");
    let spec = if rest.starts_with('{') {
        rest.split_once('}')?.0.to_string()
    } else {
        rest.split_whitespace().next()?.to_string()
    };
    let verdict = if words.contains(&"accept") {
        "accept"
    } else if words.contains(&"drop") || words.contains(&"reject") {
        "block"
    } else {
        return None;
    };
    Some((port_ranges(&spec), verdict))
}

/// Needed ports that `nft list ruleset` drops or rejects on the input hook.
pub fn nft_blocked(ruleset: &str, needed: &[Needed]) -> Vec<Blocked> {
    // (table, chains) in order of appearance
    let mut tables: Vec<(String, Vec<Chain>)> = vec![];
    let mut in_chain = false;
    for line in ruleset.lines().map(str::trim) {
        if let Some(t) = line.strip_prefix("table ") {
            tables.push((t.trim_end_matches('{').trim().to_string(), vec![]));
            in_chain = false;
        } else if line.starts_with("chain ") {
            if let Some((_, chains)) = tables.last_mut() {
                chains.push(Chain::default());
                in_chain = true;
            }
        } else if line == "}" {
            in_chain = false;
        } else if in_chain {
            let chain = tables
                .last_mut()
                .and_then(|(_, c)| c.last_mut())
                .expect("in_chain implies a chain");
            if line.starts_with("type ") && line.contains("hook input") {
                chain.input_hook = true;
                chain.policy_drop = line.contains("policy drop");
            } else if !line.is_empty() {
                chain.rules.push(line.to_string());
            }
        }
    }
    let mut out = vec![];
    // kiln-proxy's own table rejects NodePorts of Services without endpoints, on purpose.
    for (table, chains) in tables.iter().filter(|(t, _)| t != "ip kiln") {
        let accepted = |n: &Needed| {
            chains.iter().flat_map(|c| &c.rules).any(|r| {
                nft_rule(r)
                    .is_some_and(|(ranges, v)| v == "accept" && ranges.iter().any(|x| n.within(*x)))
            })
        };
        for chain in chains.iter().filter(|c| c.input_hook) {
            for n in needed {
                let rule = chain.rules.iter().find(|r| {
                    !r.contains("saddr")
                        && nft_rule(r).is_some_and(|(ranges, v)| {
                            v == "block" && ranges.iter().any(|x| n.overlaps(*x))
                        })
                });
                if let Some(r) = rule {
                    out.push(Blocked {
                        port: *n,
                        by: format!("nft table {table}: `{r}`"),
                    });
                } else if chain.policy_drop && !accepted(n) {
                    out.push(Blocked {
                        port: *n,
                        by: format!("nft table {table}: input policy drop, no rule accepts it"),
                    });
                }
            }
        }
    }
    out
}

/// One `-A INPUT` rule: its text, the TCP port ranges it matches, its target, whether it is limited to
/// some source addresses.
struct IptRule<'a> {
    text: &'a str,
    ranges: Vec<(u16, u16)>,
    target: &'a str,
    source_limited: bool,
}

/// Needed ports that `iptables -S INPUT` drops or rejects.
pub fn iptables_blocked(rules: &str, needed: &[Needed]) -> Vec<Blocked> {
    let parsed: Vec<IptRule> = rules
        .lines()
        .filter(|l| l.starts_with("-A INPUT "))
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            let after = |flag: &str| w.iter().position(|x| *x == flag).and_then(|i| w.get(i + 1));
            if after("-p").copied() != Some("tcp") {
                return None;
            }
            let ports = after("--dport").or(after("--dports"))?;
            Some(IptRule {
                text: l,
                ranges: port_ranges(ports),
                target: after("-j")?,
                source_limited: after("-s").is_some(),
            })
        })
        .collect();
    let policy_drop = rules
        .lines()
        .any(|l| l.trim() == "-P INPUT DROP" || l.trim() == "-P INPUT REJECT");
    let mut out = vec![];
    for n in needed {
        let rule = parsed.iter().find(|r| {
            !r.source_limited
                && (r.target == "DROP" || r.target == "REJECT")
                && r.ranges.iter().any(|x| n.overlaps(*x))
        });
        let accepted = parsed
            .iter()
            .any(|r| r.target == "ACCEPT" && r.ranges.iter().any(|x| n.within(*x)));
        if let Some(r) = rule {
            out.push(Blocked {
                port: *n,
                by: format!("iptables: `{}`", r.text),
            });
        } else if policy_drop && !accepted {
            out.push(Blocked {
                port: *n,
                by: "iptables: INPUT policy DROP, no rule accepts it".into(),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api() -> Vec<Needed> {
        vec![n(6443, 6443, "api"), n(30000, 32767, "np")]
    }

    #[test]
    fn firewalld_and_ufw_report_ports_they_do_not_open() {
        assert_eq!(firewalld_missing("22/tcp 6443/tcp", &api()), vec![api()[1]]);
        assert!(firewalld_missing("6443/tcp 30000-32767/tcp", &api()).is_empty());
        let ufw = "Status: active\nDefault: deny (incoming), allow (outgoing)\n\nTo Action From\n\
                   22/tcp                     ALLOW IN    Anywhere\n\
                   30000:32767/tcp            ALLOW IN    Anywhere\n";
        assert!(ufw_active_deny(ufw));
        assert_eq!(ufw_missing(ufw, &api()), vec![api()[0]]);
        assert!(!ufw_active_deny("Status: inactive\n"));
    }

    #[test]
    fn nft_drop_and_reject_rules_on_input_are_found_and_others_are_not() {
        let rs = "table inet filter {\n\tchain input {\n\t\ttype filter hook input priority filter; policy accept;\n\
                  \t\tip saddr 192.0.2.0/24 tcp dport 30080 drop\n\
                  \t\ttcp dport { 22, 6443 } reject with tcp reset\n\t}\n\
                  \tchain output {\n\t\ttype filter hook output priority filter; policy accept;\n\
                  \t\ttcp dport 30000-32767 drop\n\t}\n}\n";
        let b = nft_blocked(rs, &api());
        assert_eq!(b.len(), 1, "{b:?}");
        assert_eq!(b[0].port.first, 6443);
        assert!(b[0].by.contains("reject with tcp reset"), "{}", b[0].by);
        // A drop policy blocks what no rule accepts.
        let rs = "table ip filter {\n chain INPUT {\n  type filter hook input priority filter; policy drop;\n\
                  ct state established,related accept\n  meta l4proto tcp tcp dport 6443 counter packets 0 bytes 0 accept\n }\n}\n";
        let b = nft_blocked(rs, &api());
        assert_eq!(b.len(), 1, "{b:?}");
        assert_eq!(b[0].port.first, 30000);
        let kiln = "table ip kiln {\n\tchain filter-input {\n\t\ttype filter hook input priority -110; policy accept;\n\
                    \t\ttcp dport 30080 reject\n\t}\n}\n";
        assert!(nft_blocked(kiln, &api()).is_empty());
    }

    #[test]
    fn iptables_rules_and_policy() {
        let r = "-P INPUT ACCEPT\n-A INPUT -p tcp -m tcp --dport 6443 -j DROP\n\
                 -A INPUT -s 192.0.2.1/32 -p tcp -m tcp --dport 30080 -j DROP\n";
        let b = iptables_blocked(r, &api());
        assert_eq!(b.len(), 1);
        assert_eq!(b[0].port.first, 6443);
        let r = "-P INPUT DROP\n-A INPUT -p tcp -m multiport --dports 6443,30000:32767 -j ACCEPT\n";
        assert!(iptables_blocked(r, &api()).is_empty());
        let r = "-P INPUT DROP\n-A INPUT -p tcp -m tcp --dport 22 -j ACCEPT\n";
        assert_eq!(iptables_blocked(r, &api()).len(), 2);
    }
}
