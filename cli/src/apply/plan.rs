//! `kiln apply`'s decision, pure: from the file and the live cluster, the actions in the order they
//! run, or the fields it refuses to change. The command gathers [`Live`]; tests check this without
//! hosts.
//!
//! Order: settings roll out to the hosts already in the cluster first (controllers one at a time, then
//! workers), so hosts that join next get the same settings and binaries; then controllers join (one
//! store learner at a time), then workers; then hosts deleted from the file leave (workers before
//! controllers, so the store keeps its quorum as long as possible); last the file is recorded as the
//! applied one (kube-system/kiln-config) with the cluster-wide objects it configures.

use std::collections::{BTreeMap, BTreeSet};

use crate::config::ClusterConfig;

/// What the command found in the running cluster.
#[derive(Debug, Clone, Default)]
pub struct Live {
    /// The cluster.yaml last applied (ConfigMap kube-system/kiln-config); None: no cluster answers.
    pub applied: Option<ClusterConfig>,
    /// The Nodes registered.
    pub nodes: BTreeSet<String>,
    /// The controllers whose store member the state directory records (the running control plane).
    pub members: BTreeSet<String>,
    /// For each host already in the cluster, what `kiln init` would change on it now (files whose
    /// content differs: manifests, units, configs, binaries), from a dry run; absent or empty: none.
    pub drift: BTreeMap<String, Vec<String>>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// No cluster answers: `kiln init` with the file.
    Init,
    /// Re-render the host's files as init would and let what changed restart (see `binary_hash`);
    /// `binaries`: a component binary changes too (a worker is drained first).
    Roll {
        host: String,
        controller: bool,
        changes: Vec<String>,
        binaries: bool,
    },
    /// Controllers of the file not in the store yet (`kiln join --control-plane`).
    JoinControllers(Vec<String>),
    /// Workers of the file without a Node (`kiln join --host …`).
    JoinWorkers(Vec<String>),
    /// A host deleted from the file: drained, its Node deleted, its store member removed, reset.
    Remove { host: String, controller: bool },
    /// The cluster-wide objects (kube-dns Service, StorageClass) and kube-system/kiln-config.
    Record,
}

impl Action {
    /// One line for the operator.
    pub fn describe(&self) -> String {
        match self {
            Action::Init => "init: no cluster answers; bring it up from the file".into(),
            Action::Roll {
                host,
                controller,
                binaries,
                changes,
            } => format!(
                "roll out to {host} ({}): {} file(s) differ{}",
                if *controller { "controller" } else { "worker" },
                changes.len(),
                if *binaries {
                    ", binaries among them"
                } else {
                    ""
                }
            ),
            Action::JoinControllers(h) => format!("join controller(s) {}", h.join(", ")),
            Action::JoinWorkers(h) => format!("join worker(s) {}", h.join(", ")),
            Action::Remove { host, controller } => format!(
                "remove {host} ({}): it is no longer in the file",
                if *controller { "controller" } else { "worker" }
            ),
            Action::Record => {
                "record the file as applied (kube-system/kiln-config) and its cluster-wide objects"
                    .into()
            }
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    pub actions: Vec<Action>,
    /// Why the file cannot be applied (each names the field); nothing may change then.
    pub refused: Vec<String>,
}

/// A file change that means a component binary (pushed to /usr/local/bin).
pub fn is_binary_change(line: &str) -> bool {
    line.contains("/usr/local/bin/")
}

/// The kubelet's manifest folder (a changed file there restarts its static pod).
const MANIFESTS: &str = "/etc/kiln/manifests/";

/// The static pods a roll's file changes restart, by mirror pod name (`<manifest stem>-<host>`).
pub fn restarted_pods(host: &str, changes: &[String]) -> Vec<String> {
    changes
        .iter()
        .filter_map(|c| {
            let first = c.lines().next()?;
            let (_, rest) = first.split_once(' ')?;
            let path = rest.split([':', ' ']).next()?;
            let stem = path.strip_prefix(MANIFESTS)?.strip_suffix(".yaml")?;
            Some(format!("{stem}-{host}"))
        })
        .collect()
}

/// Fields a running cluster cannot change: what each is for, read from a config.
type Immutable = (&'static str, fn(&ClusterConfig) -> String);

/// The settings baked into what already exists (certificates, node pod CIDRs, Service IPs, the state
/// directory's name): `apply` refuses a change to them with the field's name.
const IMMUTABLE: &[Immutable] = &[
    ("metadata.name", |c| c.metadata.name.clone()),
    ("spec.networking.podCIDR", |c| {
        c.spec.networking.pod_cidr.to_string()
    }),
    ("spec.networking.serviceCIDR", |c| {
        c.spec.networking.service_cidr.to_string()
    }),
    ("spec.networking.nodeCIDRMaskSize", |c| {
        c.spec.networking.node_cidr_mask_size.to_string()
    }),
    ("spec.networking.clusterDNS", |c| {
        c.spec.networking.cluster_dns_ip().to_string()
    }),
    ("spec.networking.clusterDomain", |c| {
        c.spec.networking.cluster_domain.clone()
    }),
    ("spec.controlPlaneEndpoint", |c| c.control_plane_endpoint()),
    ("spec.stateDir", |c| format!("{:?}", c.spec.state_dir)),
];

/// Why `desired` cannot be applied over `applied`, field by field.
pub fn refusals(desired: &ClusterConfig, applied: &ClusterConfig) -> Vec<String> {
    let mut out = vec![];
    for (field, read) in IMMUTABLE {
        let (was, now) = (read(applied), read(desired));
        if was != now {
            out.push(format!(
                "{field}: {was} → {now}: `kiln apply` cannot change it on a running cluster \
                 (it is baked into certificates, node pod CIDRs or Service addresses)"
            ));
        }
    }
    let position = |c: &ClusterConfig, name: &str| c.spec.hosts.iter().position(|h| h.name == name);
    for (i, h) in desired.spec.hosts.iter().enumerate() {
        let Some(old) = applied.host(&h.name) else {
            continue;
        };
        if old.is_controller() != h.is_controller() || old.is_worker() != h.is_worker() {
            out.push(format!(
                "spec.hosts[{i}].role: {} cannot change role in place; remove it from the file, \
                 apply, then add it back",
                h.name
            ));
        }
        if old.node_address() != h.node_address() {
            out.push(format!(
                "spec.hosts[{i}].address: {} {} → {}: a node's address cannot change in place; \
                 remove it from the file, apply, then add it back",
                h.name,
                old.node_address(),
                h.node_address()
            ));
        }
        if position(applied, &h.name) != Some(i) {
            // The i-th host gets the i-th pod subnet (see node_pod_cidr).
            out.push(format!(
                "spec.hosts[{i}]: {} moved from position {} to {i}, which would change its pod CIDR \
                 (the i-th host gets the i-th subnet of spec.networking.podCIDR); keep the order, \
                 add hosts at the end and remove hosts from the end",
                h.name,
                position(applied, &h.name).unwrap_or_default()
            ));
        }
    }
    out
}

/// Quorum rule for controllers leaving: never the last member; more than one at a time only while
/// the members that stay are a quorum of the members now.
fn quorum_refusal(members: usize, leaving: &[String]) -> Option<String> {
    let n = leaving.len();
    if n == 0 {
        return None;
    }
    let stay = members.saturating_sub(n);
    if stay == 0 {
        return Some(format!(
            "spec.hosts: removing {} would remove the last store member; a cluster keeps at least \
             one controller",
            leaving.join(", ")
        ));
    }
    let quorum = members / 2 + 1;
    if n > 1 && stay < quorum {
        return Some(format!(
            "spec.hosts: removing {} at once leaves {stay} of {members} store members, below the \
             quorum of {quorum}; remove one controller per apply",
            leaving.join(", ")
        ));
    }
    None
}

/// The actions that make the cluster match `desired`.
pub fn plan(desired: &ClusterConfig, live: &Live) -> Plan {
    let Some(applied) = &live.applied else {
        return Plan {
            actions: vec![Action::Init],
            refused: vec![],
        };
    };
    let mut p = Plan {
        actions: vec![],
        refused: refusals(desired, applied),
    };
    // In the cluster: a controller with a recorded store member, a worker with a Node.
    let joined = |h: &crate::config::Host| {
        if h.is_controller() {
            live.members.contains(&h.name)
        } else {
            live.nodes.contains(&h.name)
        }
    };
    let (controllers, workers): (Vec<_>, Vec<_>) =
        desired.spec.hosts.iter().partition(|h| h.is_controller());
    for h in controllers.iter().chain(workers.iter()) {
        if !joined(h) {
            continue;
        }
        let changes = live.drift.get(&h.name).cloned().unwrap_or_default();
        if changes.is_empty() {
            continue;
        }
        p.actions.push(Action::Roll {
            host: h.name.clone(),
            controller: h.is_controller(),
            binaries: changes.iter().any(|c| is_binary_change(c)),
            changes,
        });
    }
    let new_controllers: Vec<String> = controllers
        .iter()
        .filter(|h| !joined(h))
        .map(|h| h.name.clone())
        .collect();
    if !new_controllers.is_empty() {
        p.actions.push(Action::JoinControllers(new_controllers));
    }
    let new_workers: Vec<String> = workers
        .iter()
        .filter(|h| !joined(h))
        .map(|h| h.name.clone())
        .collect();
    if !new_workers.is_empty() {
        p.actions.push(Action::JoinWorkers(new_workers));
    }
    let gone: Vec<&crate::config::Host> = applied
        .spec
        .hosts
        .iter()
        .filter(|h| desired.host(&h.name).is_none())
        .collect();
    let leaving: Vec<String> = gone
        .iter()
        .filter(|h| h.is_controller())
        .map(|h| h.name.clone())
        .collect();
    let members = applied
        .controllers()
        .filter(|c| live.members.contains(&c.name))
        .count();
    p.refused.extend(quorum_refusal(members, &leaving));
    for h in gone.iter().filter(|h| !h.is_controller()) {
        p.actions.push(Action::Remove {
            host: h.name.clone(),
            controller: false,
        });
    }
    for h in gone.iter().filter(|h| h.is_controller()) {
        p.actions.push(Action::Remove {
            host: h.name.clone(),
            controller: true,
        });
    }
    if applied != desired || !p.actions.is_empty() {
        p.actions.push(Action::Record);
    }
    if !p.refused.is_empty() {
        p.actions.clear();
    }
    p
}

/// The plan as the command prints it (and `--dry-run` shows, with each roll's file changes).
pub fn render(plan: &Plan) -> String {
    let mut s = String::new();
    for r in &plan.refused {
        s.push_str(&format!("REFUSED {r}\n"));
    }
    if !plan.refused.is_empty() {
        s.push_str("nothing was changed\n");
        return s;
    }
    if plan.actions.is_empty() {
        s.push_str("nothing to do: the cluster matches the file\n");
        return s;
    }
    for (i, a) in plan.actions.iter().enumerate() {
        s.push_str(&format!("{}. {}\n", i + 1, a.describe()));
        if let Action::Roll { changes, .. } = a {
            for c in changes {
                for (j, line) in c.lines().enumerate() {
                    let lead = if j == 0 { "     - " } else { "         " };
                    s.push_str(&format!("{lead}{line}\n"));
                }
            }
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(hosts: &[(&str, &str)], grace: &str) -> ClusterConfig {
        let mut text = String::from(
            "apiVersion: kiln.dev/v1alpha1\nkind: Cluster\nmetadata:\n  name: t\nspec:\n  hosts:\n",
        );
        for (i, (name, role)) in hosts.iter().enumerate() {
            text.push_str(&format!(
                "    - name: {name}\n      address: 10.250.0.{}\n      role: {role}\n",
                11 + i
            ));
        }
        text.push_str(&format!(
            "  controllerManager:\n    nodeMonitorGracePeriod: {grace}\n"
        ));
        crate::config::parse(&text, "cluster.yaml").unwrap()
    }

    fn live(applied: &ClusterConfig) -> Live {
        Live {
            applied: Some(applied.clone()),
            nodes: applied.spec.hosts.iter().map(|h| h.name.clone()).collect(),
            members: applied.controllers().map(|h| h.name.clone()).collect(),
            drift: BTreeMap::new(),
        }
    }

    const TWO: &[(&str, &str)] = &[("host1", "controller"), ("host2", "worker")];
    const THREE: &[(&str, &str)] = &[
        ("host1", "controller"),
        ("host2", "worker"),
        ("host3", "worker"),
    ];

    #[test]
    fn the_pods_a_roll_restarts_are_those_whose_manifest_changed() {
        let changes = [
            "change /etc/kiln/manifests/kiln-controller-manager.yaml:\n--- a\n+++ b".to_string(),
            "install /etc/kiln/manifests/kiln-dns.yaml (new, mode 600)".to_string(),
            "replace /usr/local/bin/kiln-proxy (binary, sha256 a… → b…)".to_string(),
            "change /etc/kiln/kiln-kubelet.service:".to_string(),
        ];
        assert_eq!(
            restarted_pods("host1", &changes),
            ["kiln-controller-manager-host1", "kiln-dns-host1"]
        );
    }

    #[test]
    fn no_cluster_means_init() {
        let p = plan(&config(TWO, "40s"), &Live::default());
        assert_eq!(p.actions, [Action::Init]);
    }

    #[test]
    fn a_converged_cluster_plans_nothing() {
        let c = config(TWO, "40s");
        let p = plan(&c, &live(&c));
        assert_eq!(p, Plan::default());
        assert_eq!(render(&p), "nothing to do: the cluster matches the file\n");
    }

    #[test]
    fn a_host_added_to_the_file_joins_and_the_file_is_recorded() {
        let was = config(TWO, "40s");
        let p = plan(&config(THREE, "40s"), &live(&was));
        assert_eq!(
            p.actions,
            [Action::JoinWorkers(vec!["host3".into()]), Action::Record]
        );
    }

    #[test]
    fn a_changed_setting_rolls_out_controllers_first_with_what_differs() {
        let was = config(THREE, "40s");
        let now = config(THREE, "20s");
        let mut l = live(&was);
        l.drift.insert(
            "host1".into(),
            vec!["change /etc/kiln/manifests/kiln-controller-manager.yaml".into()],
        );
        l.drift.insert(
            "host3".into(),
            vec!["replace /usr/local/bin/kiln-proxy (binary)".into()],
        );
        let p = plan(&now, &l);
        assert_eq!(
            p.actions,
            [
                Action::Roll {
                    host: "host1".into(),
                    controller: true,
                    changes: vec!["change /etc/kiln/manifests/kiln-controller-manager.yaml".into()],
                    binaries: false,
                },
                Action::Roll {
                    host: "host3".into(),
                    controller: false,
                    changes: vec!["replace /usr/local/bin/kiln-proxy (binary)".into()],
                    binaries: true,
                },
                Action::Record,
            ]
        );
        let text = render(&p);
        assert!(text.starts_with("1. roll out to host1 (controller): 1 file(s) differ\n     - change /etc/kiln/manifests/kiln-controller-manager.yaml\n"), "{text}");
        assert!(
            text.contains("2. roll out to host3 (worker): 1 file(s) differ, binaries among them"),
            "{text}"
        );
    }

    #[test]
    fn a_host_deleted_from_the_file_is_removed_workers_before_controllers() {
        let was = config(
            &[
                ("host1", "controller"),
                ("host2", "controller"),
                ("host3", "controller"),
                ("host4", "worker"),
            ],
            "40s",
        );
        let now = config(&[("host1", "controller"), ("host2", "controller")], "40s");
        let p = plan(&now, &live(&was));
        assert_eq!(
            p.actions,
            [
                Action::Remove {
                    host: "host4".into(),
                    controller: false
                },
                Action::Remove {
                    host: "host3".into(),
                    controller: true
                },
                Action::Record,
            ]
        );
    }

    #[test]
    fn removals_keep_the_store_quorum() {
        let three = config(
            &[
                ("host1", "controller"),
                ("host2", "controller"),
                ("host3", "controller"),
            ],
            "40s",
        );
        let one = config(&[("host1", "controller")], "40s");
        let p = plan(&one, &live(&three));
        assert!(p.actions.is_empty());
        assert_eq!(
            p.refused,
            ["spec.hosts: removing host2, host3 at once leaves 1 of 3 store members, below the quorum of 2; remove one controller per apply"]
        );
        // One at a time is fine, down to one member.
        let two = config(&[("host1", "controller"), ("host2", "controller")], "40s");
        assert!(plan(&two, &live(&three)).refused.is_empty());
        assert!(plan(&one, &live(&two)).refused.is_empty());
        assert_eq!(
            quorum_refusal(1, &["host1".into()]).unwrap(),
            "spec.hosts: removing host1 would remove the last store member; a cluster keeps at least one controller"
        );
    }

    #[test]
    fn what_apply_cannot_change_is_refused_by_field_and_nothing_runs() {
        let was = config(TWO, "40s");
        let mut now = config(TWO, "20s");
        now.spec.networking.pod_cidr = "10.200.0.0/16".parse().unwrap();
        let p = plan(&now, &live(&was));
        assert!(p.actions.is_empty());
        assert_eq!(p.refused.len(), 1, "{:?}", p.refused);
        assert!(
            p.refused[0].starts_with("spec.networking.podCIDR: 10.244.0.0/16 → 10.200.0.0/16:"),
            "{}",
            p.refused[0]
        );
        assert!(render(&p).ends_with("nothing was changed\n"));
    }

    #[test]
    fn a_role_change_or_a_reorder_is_refused() {
        let was = config(THREE, "40s");
        let role = config(
            &[
                ("host1", "controller"),
                ("host2", "worker"),
                ("host3", "controller"),
            ],
            "40s",
        );
        let r = refusals(&role, &was);
        assert!(
            r.iter().any(|r| r.starts_with("spec.hosts[2].role: host3")),
            "{r:?}"
        );
        // Removing host2 from the middle moves host3 (and its pod CIDR).
        let middle = config(&[("host1", "controller"), ("host3", "worker")], "40s");
        let r = refusals(&middle, &was);
        assert!(
            r.iter()
                .any(|r| r.starts_with("spec.hosts[1]: host3 moved from position 2 to 1")),
            "{r:?}"
        );
    }
}
