//! `kiln upgrade plan`: from what each host runs (each kiln binary's checksum and stamp) and what this
//! kiln would push, the order an upgrade takes — the controllers one at a time (each keeps the store's
//! quorum and the API served by the others), then the workers in batches of `--max-unavailable` — what
//! changes on each host and what restarts, or the skew rule that refuses it. Pure: the command
//! gathers, this decides, tests check it without hosts.

use std::collections::BTreeMap;

use super::skew;
use super::stamp::Stamp;

/// What restarts when a binary changes (its static pod or node process), by binary.
pub const RESTARTS: &[(&str, &str)] = &[
    ("kiln-store", "store"),
    ("kiln-apiserver", "apiserver"),
    ("kiln-scheduler", "scheduler"),
    ("kiln-controller-manager", "controller-manager"),
    ("kiln-kubelet", "kubelet"),
    ("kiln-proxy", "proxy"),
    ("kiln-dns", "dns"),
];

/// One binary on a host: its checksum and stamp, None when it is not there (or says nothing).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Installed {
    pub sha256: Option<String>,
    pub stamp: Option<Stamp>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct HostState {
    pub name: String,
    pub controller: bool,
    /// By binary name, the binaries the host's role gets.
    pub binaries: BTreeMap<String, Installed>,
}

/// A binary this kiln would push.
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    pub sha256: String,
    pub stamp: Stamp,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    pub binary: String,
    pub from: Option<Stamp>,
    pub to: Stamp,
}

impl Change {
    /// The component that restarts for it.
    pub fn restarts(&self) -> &'static str {
        RESTARTS
            .iter()
            .find(|(b, _)| *b == self.binary)
            .map_or("?", |(_, r)| r)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub host: String,
    pub controller: bool,
    /// Workers in the same batch go together; controllers each have a batch of their own.
    pub batch: usize,
    pub changes: Vec<Change>,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Plan {
    pub steps: Vec<Step>,
    pub up_to_date: Vec<String>,
    /// The first skew rule broken (`host binary: rule: reason`); nothing may change then.
    pub refused: Option<String>,
}

/// The upgrade from `hosts` to `targets` (by binary), workers `max_unavailable` at a time.
pub fn plan(
    hosts: &[HostState],
    targets: &BTreeMap<String, Target>,
    max_unavailable: usize,
) -> Plan {
    let mut out = Plan::default();
    let mut batch = 0;
    let mut in_worker_batch = 0;
    let controllers = hosts.iter().filter(|h| h.controller);
    let workers = hosts.iter().filter(|h| !h.controller);
    for h in controllers.chain(workers) {
        let mut changes = Vec::new();
        for (binary, installed) in &h.binaries {
            let Some(t) = targets.get(binary) else {
                continue;
            };
            if installed.sha256.as_deref() == Some(t.sha256.as_str()) {
                continue;
            }
            if let Some(now) = &installed.stamp {
                if let Some(why) = skew::refusal(now, &t.stamp) {
                    out.refused
                        .get_or_insert_with(|| format!("{} {binary}: {why}", h.name));
                }
            }
            changes.push(Change {
                binary: binary.clone(),
                from: installed.stamp.clone(),
                to: t.stamp.clone(),
            });
        }
        if changes.is_empty() {
            out.up_to_date.push(h.name.clone());
            continue;
        }
        if h.controller || in_worker_batch == 0 || in_worker_batch >= max_unavailable.max(1) {
            batch += 1;
            in_worker_batch = 0;
        }
        if !h.controller {
            in_worker_batch += 1;
        }
        out.steps.push(Step {
            host: h.name.clone(),
            controller: h.controller,
            batch,
            changes,
        });
    }
    out
}

/// The plan as the command prints it.
pub fn render(plan: &Plan) -> String {
    let mut s = String::new();
    if let Some(why) = &plan.refused {
        s.push_str(&format!("REFUSED {why}\n"));
    }
    if plan.steps.is_empty() {
        s.push_str("nothing to upgrade: every host runs the binaries this kiln would push\n");
    } else {
        s.push_str("1. a snapshot bundle of the store (kept, named in the output)\n");
    }
    for st in &plan.steps {
        let role = if st.controller {
            "controller"
        } else {
            "worker"
        };
        let restarts: Vec<&str> = st.changes.iter().map(Change::restarts).collect();
        s.push_str(&format!(
            "{}. {} ({role}): restarts {}\n",
            st.batch + 1,
            st.host,
            restarts.join(", ")
        ));
        for c in &st.changes {
            let from = c
                .from
                .as_ref()
                .map_or("(none)".to_string(), |f| f.to_string());
            let same = c.from.as_ref() == Some(&c.to);
            let note = if same {
                "  (same stamp, other binary)"
            } else {
                ""
            };
            s.push_str(&format!("     {:<24} {from} → {}{note}\n", c.binary, c.to));
        }
    }
    if !plan.up_to_date.is_empty() {
        s.push_str(&format!("up to date: {}\n", plan.up_to_date.join(", ")));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::upgrade::stamp::Semver;

    fn stamp(build: &str, minor: u64) -> Stamp {
        Stamp {
            kiln: Semver(0, 1, 0),
            build: Some(build.into()),
            kube: Some(Semver(1, minor, 0)),
        }
    }

    fn host(name: &str, controller: bool, sha: &str, build: &str, minor: u64) -> HostState {
        let bins: &[&str] = if controller {
            &["kiln-apiserver", "kiln-kubelet"]
        } else {
            &["kiln-kubelet", "kiln-proxy"]
        };
        HostState {
            name: name.into(),
            controller,
            binaries: bins
                .iter()
                .map(|b| {
                    (
                        b.to_string(),
                        Installed {
                            sha256: Some(format!("{sha}-{b}")),
                            stamp: Some(stamp(build, minor)),
                        },
                    )
                })
                .collect(),
        }
    }

    fn targets(sha: &str, build: &str, minor: u64) -> BTreeMap<String, Target> {
        ["kiln-apiserver", "kiln-kubelet", "kiln-proxy"]
            .iter()
            .map(|b| {
                (
                    b.to_string(),
                    Target {
                        sha256: format!("{sha}-{b}"),
                        stamp: stamp(build, minor),
                    },
                )
            })
            .collect()
    }

    #[test]
    fn controllers_first_one_at_a_time_then_workers_in_batches() {
        let hosts = [
            host("w1", false, "a", "A", 33),
            host("c1", true, "a", "A", 33),
            host("w2", false, "a", "A", 33),
            host("c2", true, "a", "A", 33),
            host("w3", false, "a", "A", 33),
        ];
        let p = plan(&hosts, &targets("b", "B", 33), 2);
        let order: Vec<(&str, usize)> =
            p.steps.iter().map(|s| (s.host.as_str(), s.batch)).collect();
        assert_eq!(
            order,
            [("c1", 1), ("c2", 2), ("w1", 3), ("w2", 3), ("w3", 4)]
        );
        assert_eq!(p.refused, None);
        let c1: Vec<&str> = p.steps[0].changes.iter().map(Change::restarts).collect();
        assert_eq!(c1, ["apiserver", "kubelet"]);
        let text = render(&p);
        assert!(
            text.contains("2. c1 (controller): restarts apiserver, kubelet"),
            "{text}"
        );
        assert!(
            text.contains("kiln-kubelet             0.1.0+A → 0.1.0+B"),
            "{text}"
        );
    }

    #[test]
    fn hosts_already_on_the_target_are_left_alone() {
        let hosts = [
            host("c1", true, "b", "B", 33),
            host("w1", false, "a", "A", 33),
        ];
        let p = plan(&hosts, &targets("b", "B", 33), 1);
        assert_eq!(p.up_to_date, ["c1"]);
        assert_eq!(p.steps.len(), 1);
        let none = plan(&hosts[..1], &targets("b", "B", 33), 1);
        assert!(
            render(&none).starts_with("nothing to upgrade"),
            "{}",
            render(&none)
        );
    }

    #[test]
    fn a_skew_the_policy_forbids_refuses_the_plan() {
        let hosts = [host("c1", true, "a", "A", 32)];
        let p = plan(&hosts, &targets("b", "B", 34), 1);
        let why = p.refused.unwrap();
        assert!(
            why.starts_with("c1 kiln-apiserver: one-minor-at-a-time:"),
            "{why}"
        );
    }

    #[test]
    fn a_rebuilt_binary_with_the_same_stamp_is_still_replaced() {
        let hosts = [host("w1", false, "a", "B", 33)];
        let p = plan(&hosts, &targets("b", "B", 33), 1);
        assert_eq!(p.steps.len(), 1);
        assert!(render(&p).contains("(same stamp, other binary)"));
    }
}
