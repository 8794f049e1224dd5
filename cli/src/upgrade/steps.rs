//! `kiln upgrade apply` as data: what happens on each host ([`STEPS`]), how a host goes back when a
//! step after the binary swap fails ([`ROLLBACK`]), and the walker that takes the plan's batches
//! through them. The walker decides order and gating only; every side effect goes through
//! [`Actions`], so the ordering is unit-tested with a recording double and the real actions
//! ([`super::host_actions`]) stay plain.
//!
//! A controller is taken alone (its store member and API server leave while the others keep the
//! quorum and serve), then workers `--max-unavailable` at a time, the hosts of one batch in parallel.
//! After the swap the host's static pod manifests and kubelet unit are written as `kiln init` renders
//! them (each names its binary's sha256, `bootstrap::phases::binary_hash`), so a pod restarts exactly
//! when its binary changed, as on a re-run of `init`, and that re-run afterwards finds nothing to do.
//! kiln-host static pods are the kubelet's children and stop with it: when the kubelet's own binary
//! changes it is stopped before the files change and started after, so each component restarts once;
//! the gates then check them in the order they depend on each other: the store member
//! (healthy, quorum kept), the API server (/readyz), the control plane's pods, every component
//! reporting the target build, the node Ready.

use async_trait::async_trait;

use super::plan::Step;

/// Which hosts a step runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Controller,
    Worker,
    Any,
}

impl Role {
    fn applies(self, controller: bool) -> bool {
        match self {
            Role::Controller => controller,
            Role::Worker => !controller,
            Role::Any => true,
        }
    }
}

/// A check after the restart; its failure sends the host back to its previous binaries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// The host's store member answers a quorum read and knows a leader.
    StoreHealthy,
    /// The host's API server answers /readyz.
    ApiServerReady,
    /// The control plane's mirror pods on the host are Running and Ready.
    ControlPlanePods,
    /// The controller-manager's and the scheduler's leader leases are being renewed again. A
    /// restarted leader's lease is only taken over once it expires (15 s): draining a worker before
    /// that leaves an evicted pod in the EndpointSlices, and in every proxy's rules, until then.
    Leaders,
    /// Every kiln process on the host runs the installed binary (none a replaced one), the binaries
    /// say the target stamp, and the API reports it (apiserver /version, node kubeletVersion).
    Versions,
    /// The Node is Ready.
    NodeReady,
}

impl Gate {
    pub fn name(self) -> &'static str {
        match self {
            Gate::StoreHealthy => "store-healthy",
            Gate::ApiServerReady => "apiserver-ready",
            Gate::ControlPlanePods => "control-plane-pods",
            Gate::Leaders => "leaders",
            Gate::Versions => "versions",
            Gate::NodeReady => "node-ready",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Record on the host that an upgrade is under way there (a re-run resumes it even when its
    /// binaries are already the target's).
    Mark,
    /// `spec.unschedulable`, with kiln's annotation so a re-run knows whose cordon it is.
    Cordon,
    /// Evict the node's pods through the Eviction API (DaemonSet and mirror pods stay).
    Drain,
    /// Install the new binaries; each old one stays beside it as `<bin>.prev`, the host's manifests
    /// and kubelet unit as they were in a folder of their own.
    Push,
    /// Write the host's static pod manifests and kubelet unit as `init` renders them for the new
    /// binaries (the kubelet stopped around it when its own binary changed): each component whose
    /// binary changed restarts on it.
    Render,
    /// Restart the kubelet (and with it the host's static pods) on the binaries in place.
    RestartKubelet,
    Gate(Gate),
    Uncordon,
    /// The node's pods are Running again.
    PodsRunning,
    /// The upgrade of this host is over (the marker goes).
    Unmark,
    /// Put every `<bin>.prev` and the kept manifests and kubelet unit back in place (rollback).
    Restore,
    /// Remove the `<bin>.prev` files and the kept manifests once the whole upgrade succeeded.
    Cleanup,
}

pub struct StepSpec {
    pub name: &'static str,
    pub role: Role,
    pub action: Action,
    /// What the dry run says the step does.
    pub summary: &'static str,
}

const fn step(name: &'static str, role: Role, action: Action, summary: &'static str) -> StepSpec {
    StepSpec {
        name,
        role,
        action,
        summary,
    }
}

/// Each host's upgrade, in order. Steps before `push` change nothing that needs undoing beyond the
/// cordon; a failure from `push` on sends the host back ([`ROLLBACK`]).
pub const STEPS: &[StepSpec] = &[
    step("mark", Role::Any, Action::Mark, "mark the host as being upgraded (/var/lib/kiln/upgrade-in-progress)"),
    step("cordon", Role::Worker, Action::Cordon, "cordon the node"),
    step("drain", Role::Worker, Action::Drain, "drain: evict its pods through the Eviction API (PodDisruptionBudgets and grace periods honoured; DaemonSet and mirror pods stay)"),
    step("push", Role::Any, Action::Push, "install the new binaries, each old one kept as <bin>.prev"),
    step("restart", Role::Any, Action::Render, "write the static pod manifests and kubelet unit as `kiln init` renders them (each names its binary's sha256): the kubelet restarts each pod whose binary changed, and is itself stopped before and started after when its own binary changed"),
    step("gate store-healthy", Role::Controller, Action::Gate(Gate::StoreHealthy), "gate: the store member is healthy and the quorum kept"),
    step("gate apiserver-ready", Role::Controller, Action::Gate(Gate::ApiServerReady), "gate: the API server answers /readyz"),
    step("gate control-plane-pods", Role::Controller, Action::Gate(Gate::ControlPlanePods), "gate: the control plane's pods are Running and Ready"),
    step("gate leaders", Role::Controller, Action::Gate(Gate::Leaders), "gate: the controller-manager and scheduler leases are renewed again"),
    step("gate versions", Role::Any, Action::Gate(Gate::Versions), "gate: every component reports the target build"),
    step("gate node-ready", Role::Any, Action::Gate(Gate::NodeReady), "gate: the node is Ready"),
    step("uncordon", Role::Worker, Action::Uncordon, "uncordon the node"),
    step("pods-running", Role::Worker, Action::PodsRunning, "the node's pods are Running"),
    step("unmark", Role::Any, Action::Unmark, "the host is done (marker removed)"),
];

/// A host going back to its previous binaries after a failed step (from `push` on).
pub const ROLLBACK: &[StepSpec] = &[
    step(
        "restore",
        Role::Any,
        Action::Restore,
        "put every <bin>.prev and the kept manifests and kubelet unit back",
    ),
    step(
        "restart",
        Role::Any,
        Action::RestartKubelet,
        "restart the kubelet on the previous binaries",
    ),
    step(
        "gate node-ready",
        Role::Any,
        Action::Gate(Gate::NodeReady),
        "the node is Ready again",
    ),
    step(
        "uncordon",
        Role::Worker,
        Action::Uncordon,
        "uncordon the node",
    ),
    step("unmark", Role::Any, Action::Unmark, "marker removed"),
];

/// The side effects the walker asks for, on one host. `Ok` carries what was done, `Err` why not.
#[async_trait]
pub trait Actions: Send + Sync {
    async fn act(&self, host: &Step, action: Action) -> Result<String, String>;
}

/// How one host's upgrade ended.
#[derive(Debug, Clone, PartialEq)]
pub enum HostResult {
    Upgraded,
    /// `step` failed with `why`; `rollback` is how going back ended (None: nothing to undo beyond the
    /// cordon).
    Failed {
        step: &'static str,
        why: String,
        rollback: Option<Result<(), String>>,
    },
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Report {
    /// (host, step, detail) of every step done, in order.
    pub done: Vec<(String, &'static str, String)>,
    pub upgraded: Vec<String>,
    /// The first failure that stopped the upgrade: (host, result).
    pub stopped: Option<(String, HostResult)>,
}

impl Report {
    pub fn failure(&self) -> Option<String> {
        let (
            host,
            HostResult::Failed {
                step,
                why,
                rollback,
            },
        ) = self.stopped.as_ref()?
        else {
            return None;
        };
        let back = match rollback {
            None => "nothing was changed on it (uncordoned)".to_string(),
            Some(Ok(())) => "it is back on its previous binaries".to_string(),
            Some(Err(e)) => format!("going back to its previous binaries failed too: {e}"),
        };
        Some(format!(
            "upgrade stopped: {host}: {step} failed: {why}; {back}"
        ))
    }
}

/// Steps of `list` for this host, in order.
pub fn steps_for(
    list: &'static [StepSpec],
    controller: bool,
) -> impl Iterator<Item = &'static StepSpec> {
    list.iter().filter(move |s| s.role.applies(controller))
}

/// One host through [`STEPS`]; on a failure from `push` on, through [`ROLLBACK`].
async fn upgrade_host(
    acts: &dyn Actions,
    host: &Step,
    say: &(dyn Fn(&str, &str, &str) + Sync),
) -> (Vec<(String, &'static str, String)>, HostResult) {
    let mut done = vec![];
    let mut swapped = false;
    for s in steps_for(STEPS, host.controller) {
        swapped |= s.action == Action::Push;
        match acts.act(host, s.action).await {
            Ok(detail) => {
                say(&host.host, s.name, &detail);
                done.push((host.host.clone(), s.name, detail));
            }
            Err(why) => {
                say(&host.host, s.name, &format!("FAILED: {why}"));
                let rollback = if swapped {
                    Some(roll_back(acts, host, say, &mut done).await)
                } else {
                    // Nothing installed yet: only the cordon to undo (and the marker).
                    for a in [Action::Uncordon, Action::Unmark] {
                        if a == Action::Uncordon && host.controller {
                            continue;
                        }
                        if let Err(e) = acts.act(host, a).await {
                            say(&host.host, "undo", &format!("FAILED: {e}"));
                        }
                    }
                    None
                };
                return (
                    done,
                    HostResult::Failed {
                        step: s.name,
                        why,
                        rollback,
                    },
                );
            }
        }
    }
    (done, HostResult::Upgraded)
}

async fn roll_back(
    acts: &dyn Actions,
    host: &Step,
    say: &(dyn Fn(&str, &str, &str) + Sync),
    done: &mut Vec<(String, &'static str, String)>,
) -> Result<(), String> {
    for s in steps_for(ROLLBACK, host.controller) {
        let name = s.name;
        match acts.act(host, s.action).await {
            Ok(detail) => {
                say(&host.host, &format!("rollback {name}"), &detail);
                done.push((host.host.clone(), name, detail));
            }
            Err(why) => {
                say(
                    &host.host,
                    &format!("rollback {name}"),
                    &format!("FAILED: {why}"),
                );
                return Err(format!("rollback {name}: {why}"));
            }
        }
    }
    Ok(())
}

/// Walk the plan's batches in order, the hosts of a batch in parallel; stop after the batch where a
/// host failed. When every host is upgraded, the `.prev` binaries go (`cleanup` on every host in
/// `cleanup_hosts`, which includes hosts an interrupted run left them on).
pub async fn walk(
    acts: &dyn Actions,
    steps: &[Step],
    cleanup_hosts: &[Step],
    say: &(dyn Fn(&str, &str, &str) + Sync),
) -> Report {
    let mut report = Report::default();
    let mut batches: Vec<Vec<&Step>> = vec![];
    for s in steps {
        match batches.last_mut() {
            Some(b) if b[0].batch == s.batch => b.push(s),
            _ => batches.push(vec![s]),
        }
    }
    for batch in batches {
        let results =
            futures::future::join_all(batch.iter().map(|h| upgrade_host(acts, h, say))).await;
        for (h, (done, result)) in batch.iter().zip(results) {
            report.done.extend(done);
            match result {
                HostResult::Upgraded => report.upgraded.push(h.host.clone()),
                failed => {
                    report.stopped.get_or_insert((h.host.clone(), failed));
                }
            }
        }
        if report.stopped.is_some() {
            return report;
        }
    }
    for h in cleanup_hosts {
        match acts.act(h, Action::Cleanup).await {
            Ok(detail) => {
                say(&h.host, "cleanup", &detail);
                report.done.push((h.host.clone(), "cleanup", detail));
            }
            // The upgrade itself succeeded; a leftover .prev is only reported.
            Err(why) => say(&h.host, "cleanup", &format!("FAILED: {why}")),
        }
    }
    report
}

/// The dry run: every host's steps, in the style of `kiln init --dry-run`'s per-host changes.
pub fn render_dry_run(steps: &[Step]) -> String {
    let mut out = String::new();
    for st in steps {
        let role = if st.controller {
            "controller"
        } else {
            "worker"
        };
        out.push_str(&format!("{} ({role}, batch {}):\n", st.host, st.batch));
        for s in steps_for(STEPS, st.controller) {
            if s.action == Action::Push {
                for c in &st.changes {
                    let from = c
                        .from
                        .as_ref()
                        .map_or("(none)".to_string(), |f| f.to_string());
                    out.push_str(&format!(
                        "  - replace /usr/local/bin/{} ({from} → {}; old kept as {}.prev)\n",
                        c.binary, c.to, c.binary
                    ));
                }
                continue;
            }
            out.push_str(&format!("  - {}\n", s.summary));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::upgrade::plan::Change;
    use crate::upgrade::stamp::{Semver, Stamp};
    use std::sync::Mutex;

    /// Records every action; fails the (host, action) pairs it is told to.
    #[derive(Default)]
    struct Recorder {
        calls: Mutex<Vec<String>>,
        fail: Vec<(&'static str, Action)>,
    }

    #[async_trait]
    impl Actions for Recorder {
        async fn act(&self, host: &Step, action: Action) -> Result<String, String> {
            self.calls
                .lock()
                .unwrap()
                .push(format!("{} {action:?}", host.host));
            if self.fail.contains(&(host.host.as_str(), action)) {
                return Err(format!("{action:?} broke"));
            }
            Ok("ok".into())
        }
    }

    impl Recorder {
        fn calls(&self) -> Vec<String> {
            self.calls.lock().unwrap().clone()
        }
    }

    fn stamp(b: &str) -> Stamp {
        Stamp {
            kiln: Semver(0, 1, 0),
            build: Some(b.into()),
            kube: Some(Semver(1, 33, 0)),
        }
    }

    fn host(name: &str, controller: bool, batch: usize) -> Step {
        Step {
            host: name.into(),
            controller,
            batch,
            changes: vec![Change {
                binary: "kiln-kubelet".into(),
                from: Some(stamp("A")),
                to: stamp("B"),
            }],
        }
    }

    fn quiet(_: &str, _: &str, _: &str) {}

    #[tokio::test]
    async fn a_controller_restarts_then_passes_the_gates_in_dependency_order() {
        let r = Recorder::default();
        let c1 = host("c1", true, 1);
        let report = walk(
            &r,
            std::slice::from_ref(&c1),
            std::slice::from_ref(&c1),
            &quiet,
        )
        .await;
        assert_eq!(
            r.calls(),
            [
                "c1 Mark",
                "c1 Push",
                "c1 Render",
                "c1 Gate(StoreHealthy)",
                "c1 Gate(ApiServerReady)",
                "c1 Gate(ControlPlanePods)",
                "c1 Gate(Leaders)",
                "c1 Gate(Versions)",
                "c1 Gate(NodeReady)",
                "c1 Unmark",
                "c1 Cleanup",
            ]
        );
        assert_eq!(report.upgraded, ["c1"]);
        assert_eq!(report.failure(), None);
    }

    #[tokio::test]
    async fn workers_are_drained_before_the_swap_and_uncordoned_after_the_gates() {
        let r = Recorder::default();
        let steps = [
            host("c1", true, 1),
            host("w1", false, 2),
            host("w2", false, 3),
        ];
        let report = walk(&r, &steps, &steps, &quiet).await;
        let calls = r.calls();
        let w1: Vec<&str> = calls.iter().filter_map(|c| c.strip_prefix("w1 ")).collect();
        assert_eq!(
            w1,
            [
                "Mark",
                "Cordon",
                "Drain",
                "Push",
                "Render",
                "Gate(Versions)",
                "Gate(NodeReady)",
                "Uncordon",
                "PodsRunning",
                "Unmark",
                "Cleanup"
            ]
        );
        // Controllers first, one host at a time, cleanup only at the very end.
        let first = |p: &str| calls.iter().position(|c| c.starts_with(p)).unwrap();
        assert!(first("c1 Unmark") < first("w1 Mark"));
        assert!(first("w1 Unmark") < first("w2 Mark"));
        assert!(first("w2 Unmark") < first("c1 Cleanup"));
        assert_eq!(report.upgraded, ["c1", "w1", "w2"]);
    }

    #[tokio::test]
    async fn a_failed_gate_rolls_the_host_back_and_stops_the_upgrade() {
        let r = Recorder {
            fail: vec![("w1", Action::Gate(Gate::Versions))],
            ..Default::default()
        };
        let steps = [host("w1", false, 1), host("w2", false, 2)];
        let report = walk(&r, &steps, &steps, &quiet).await;
        let calls = r.calls();
        assert_eq!(
            calls,
            [
                "w1 Mark",
                "w1 Cordon",
                "w1 Drain",
                "w1 Push",
                "w1 Render",
                "w1 Gate(Versions)",
                "w1 Restore",
                "w1 RestartKubelet",
                "w1 Gate(NodeReady)",
                "w1 Uncordon",
                "w1 Unmark",
            ],
            "w2 is not touched and nothing is cleaned up"
        );
        assert!(report.upgraded.is_empty());
        let why = report.failure().unwrap();
        assert_eq!(
            why,
            "upgrade stopped: w1: gate versions failed: Gate(Versions) broke; it is back on its previous binaries"
        );
    }

    #[tokio::test]
    async fn a_failed_drain_changes_nothing_but_uncordons() {
        let r = Recorder {
            fail: vec![("w1", Action::Drain)],
            ..Default::default()
        };
        let report = walk(&r, &[host("w1", false, 1)], &[], &quiet).await;
        assert_eq!(
            r.calls(),
            [
                "w1 Mark",
                "w1 Cordon",
                "w1 Drain",
                "w1 Uncordon",
                "w1 Unmark"
            ]
        );
        assert!(report
            .failure()
            .unwrap()
            .contains("drain failed: Drain broke; nothing was changed"));
    }

    #[tokio::test]
    async fn a_failed_rollback_is_reported() {
        let r = Recorder {
            fail: vec![("c1", Action::Render), ("c1", Action::RestartKubelet)],
            ..Default::default()
        };
        let report = walk(&r, &[host("c1", true, 1)], &[], &quiet).await;
        let why = report.failure().unwrap();
        assert!(
            why.ends_with("going back to its previous binaries failed too: rollback restart: RestartKubelet broke"),
            "{why}"
        );
    }

    #[tokio::test]
    async fn a_batch_goes_together_and_the_failure_stops_after_it() {
        let r = Recorder {
            fail: vec![("w1", Action::Drain)],
            ..Default::default()
        };
        let steps = [
            host("w1", false, 1),
            host("w2", false, 1),
            host("w3", false, 2),
        ];
        let report = walk(&r, &steps, &steps, &quiet).await;
        assert_eq!(report.upgraded, ["w2"]);
        assert!(!r.calls().iter().any(|c| c.starts_with("w3")));
        assert!(!r.calls().iter().any(|c| c.ends_with("Cleanup")));
    }

    #[test]
    fn the_dry_run_lists_each_hosts_actions() {
        let text = render_dry_run(&[host("c1", true, 1), host("w1", false, 2)]);
        assert!(
            text.starts_with("c1 (controller, batch 1):\n  - mark"),
            "{text}"
        );
        assert!(
            text.contains("  - replace /usr/local/bin/kiln-kubelet (0.1.0+A → 0.1.0+B; old kept as kiln-kubelet.prev)"),
            "{text}"
        );
        let w1 = text.split("w1 (worker, batch 2):").nth(1).unwrap();
        assert!(w1.contains("  - cordon the node\n  - drain"), "{w1}");
        assert!(!w1.contains("store"), "{w1}");
    }
}
