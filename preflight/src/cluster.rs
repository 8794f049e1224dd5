//! Checks over every host's facts at once: what no single host can see wrong about itself — cloned VMs
//! with the same identity, two hosts claiming one address, clocks that disagree.

use std::collections::BTreeMap;

use crate::checks::{findings, Finding, Outcome, Severity};
use crate::facts::{Facts, Role};

/// One host as the cross-host checks see it.
#[derive(Debug, Clone)]
pub struct HostFacts<'a> {
    /// The host's name in cluster.yaml (its node name).
    pub name: &'a str,
    pub role: Role,
    pub facts: &'a Facts,
    /// The host's clock against the operator's, when it could be read.
    pub clock: Option<ClockSample>,
}

/// The host's clock minus the operator's, in seconds, and how far off that estimate may be (half the
/// round trip it was read in).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClockSample {
    pub offset: f64,
    pub uncertainty: f64,
}

impl ClockSample {
    /// From the operator's clock just before and after reading the host's (all in Unix seconds): the
    /// host's reading is compared with the midpoint.
    pub fn from_reading(before: f64, host: f64, after: f64) -> ClockSample {
        ClockSample {
            offset: host - (before + after) / 2.0,
            uncertainty: ((after - before) / 2.0).max(0.0),
        }
    }

    /// The smallest skew the reading proves.
    fn least(&self) -> f64 {
        (self.offset.abs() - self.uncertainty).max(0.0)
    }
}

/// Above this, clocks disagree enough to mislead (log timelines, lease renew times, `kubectl get` ages):
/// a warning to run NTP.
pub const CLOCK_SKEW_WARNING_SECS: f64 = 1.0;
/// Above this, it breaks things: certificates kiln issues on the operator's machine are backdated only
/// 5 minutes, tokens and leases are judged by another host's clock, and a skew this large usually means
/// no time sync at all, so it only grows. An error.
pub const CLOCK_SKEW_ERROR_SECS: f64 = 60.0;

pub struct ClusterCheck {
    pub name: &'static str,
    pub run: fn(&[HostFacts]) -> Outcome,
}

pub const CLUSTER_CHECKS: &[ClusterCheck] = &[
    // Cloned VMs keep the image's machine-id: systemd, DHCP client ids and journald take it as the
    // machine's identity, so two nodes get one DHCP lease, mixed logs, the same product_uuid... (kubeadm
    // checks product_uuid on one host; kiln sees all of them).
    ClusterCheck {
        name: "UniqueMachineID",
        run: |hosts| duplicates(hosts, Severity::Error, "/etc/machine-id", |f| &f.machine_id),
    },
    // Node names come from cluster.yaml, so equal OS hostnames do not break the cluster; they do confuse
    // logs and SSH prompts, and usually mean cloned VMs: a warning.
    ClusterCheck {
        name: "UniqueHostname",
        run: |hosts| duplicates(hosts, Severity::Warning, "hostname", |f| &f.hostname),
    },
    // Two nodes advertising one address (e.g. hosts behind one NAT address without nodeIP): the apiserver
    // would reach the wrong kubelet and kiln-proxy would route both pod CIDRs to one host.
    ClusterCheck {
        name: "UniqueNodeIP",
        run: |hosts| duplicates(hosts, Severity::Error, "node address", |f| &f.node_address),
    },
    ClusterCheck {
        name: "ClockSkew",
        run: clock_skew,
    },
];

fn duplicates(
    hosts: &[HostFacts],
    severity: Severity,
    what: &str,
    key: fn(&Facts) -> &String,
) -> Outcome {
    let mut by: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for h in hosts {
        let k = key(h.facts).trim();
        if !k.is_empty() {
            by.entry(k).or_default().push(h.name);
        }
    }
    let dups: Vec<String> = by
        .iter()
        .filter(|(_, names)| names.len() > 1)
        .map(|(k, names)| format!("{} share {what} {k}", names.join(", ")))
        .collect();
    (!dups.is_empty()).then(|| (severity, dups.join("; ")))
}

fn clock_skew(hosts: &[HostFacts]) -> Outcome {
    let sampled: Vec<(&str, ClockSample)> = hosts
        .iter()
        .filter_map(|h| Some((h.name, h.clock?)))
        .collect();
    let mut worst = 0.0_f64;
    let mut notes = vec![];
    for (name, c) in &sampled {
        if c.least() > CLOCK_SKEW_WARNING_SECS {
            worst = worst.max(c.least());
            notes.push(format!(
                "{name} is {:+.1}s off the operator's clock",
                c.offset
            ));
        }
    }
    // Hosts may each be close to the operator yet apart from each other.
    if let (Some(lo), Some(hi)) = (
        sampled
            .iter()
            .min_by(|a, b| a.1.offset.total_cmp(&b.1.offset)),
        sampled
            .iter()
            .max_by(|a, b| a.1.offset.total_cmp(&b.1.offset)),
    ) {
        let apart = (hi.1.offset - lo.1.offset) - hi.1.uncertainty - lo.1.uncertainty;
        if apart > CLOCK_SKEW_WARNING_SECS && notes.is_empty() {
            worst = worst.max(apart);
            notes.push(format!("{} and {} are {apart:.1}s apart", hi.0, lo.0));
        }
    }
    if notes.is_empty() {
        return None;
    }
    let severity = if worst > CLOCK_SKEW_ERROR_SECS {
        Severity::Error
    } else {
        Severity::Warning
    };
    Some((
        severity,
        format!(
            "{} (warning above {CLOCK_SKEW_WARNING_SECS}s, error above {CLOCK_SKEW_ERROR_SECS}s); sync the clocks with NTP",
            notes.join("; ")
        ),
    ))
}

/// Every cross-host check, minus the ignored ones (names, or "all"); findings sorted errors first.
pub fn run_cluster_checks(hosts: &[HostFacts], ignore: &[String]) -> Vec<Finding> {
    findings(
        CLUSTER_CHECKS
            .iter()
            .filter_map(|c| (c.run)(hosts).map(|(s, m)| (c.name, s, m))),
        ignore,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checks::good_facts;

    fn three() -> Vec<Facts> {
        (1..=3)
            .map(|i| Facts {
                hostname: format!("host{i}"),
                machine_id: format!("{i:032x}"),
                node_address: format!("10.250.0.1{i}"),
                ..good_facts()
            })
            .collect()
    }

    fn view<'a>(facts: &'a [Facts], offsets: &[f64]) -> Vec<HostFacts<'a>> {
        const NAMES: &[&str] = &["host1", "host2", "host3"];
        facts
            .iter()
            .enumerate()
            .map(|(i, f)| HostFacts {
                name: NAMES[i],
                role: Role::Worker,
                facts: f,
                clock: offsets.get(i).map(|o| ClockSample {
                    offset: *o,
                    uncertainty: 0.01,
                }),
            })
            .collect()
    }

    fn checks(hosts: &[HostFacts]) -> Vec<(&'static str, Severity)> {
        run_cluster_checks(hosts, &[])
            .into_iter()
            .map(|f| (f.check, f.severity))
            .collect()
    }

    #[test]
    fn distinct_hosts_pass() {
        assert_eq!(checks(&view(&three(), &[0.0, 0.2, -0.3])), vec![]);
    }

    #[test]
    fn a_duplicate_machine_id_is_an_error_naming_both_hosts() {
        let mut f = three();
        f[2].machine_id = f[0].machine_id.clone();
        let r = run_cluster_checks(&view(&f, &[]), &[]);
        assert_eq!(r.len(), 1);
        assert_eq!(
            (r[0].check, r[0].severity),
            ("UniqueMachineID", Severity::Error)
        );
        assert!(r[0].message.contains("host1, host3"), "{}", r[0].message);
        // Ignored by name, it is only a warning.
        let r = run_cluster_checks(&view(&f, &[]), &["UniqueMachineID".into()]);
        assert_eq!(r[0].severity, Severity::Warning);
    }

    #[test]
    fn duplicate_hostnames_warn_and_duplicate_node_addresses_fail() {
        let mut f = three();
        f[1].hostname = "host1".into();
        f[2].node_address = f[1].node_address.clone();
        assert_eq!(
            checks(&view(&f, &[])),
            vec![
                ("UniqueNodeIP", Severity::Error),
                ("UniqueHostname", Severity::Warning)
            ]
        );
    }

    #[test]
    fn clock_skew_warns_above_a_second_and_fails_above_a_minute() {
        let f = three();
        assert_eq!(
            checks(&view(&f, &[0.0, 2.5, 0.0])),
            vec![("ClockSkew", Severity::Warning)]
        );
        assert_eq!(
            checks(&view(&f, &[0.0, 0.0, -120.0])),
            vec![("ClockSkew", Severity::Error)]
        );
        // Each within a second of the operator, but 1.8 s apart from each other.
        let r = run_cluster_checks(&view(&f, &[0.9, 0.0, -0.9]), &[]);
        assert_eq!(r.len(), 1);
        assert!(r[0].message.contains("host1 and host3"), "{}", r[0].message);
        // A slow round trip does not count as skew.
        let mut v = view(&f, &[]);
        v[0].clock = Some(ClockSample::from_reading(100.0, 101.5, 103.0));
        assert_eq!(checks(&v), vec![]);
        let c = ClockSample::from_reading(100.0, 110.0, 100.2);
        assert!((c.offset - 9.9).abs() < 1e-9 && (c.uncertainty - 0.1).abs() < 1e-9);
    }
}
