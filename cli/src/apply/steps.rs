//! `kiln apply`'s actions as steps, as data ([`steps_of`]), and the walker that runs them in order
//! through an [`Executor`]. The walker decides order and gating only; the command's executor does the
//! work (playbooks, `upgrade`'s drain and gates), a recording double checks the order here.
//!
//! A roll re-renders a host's files the way `kiln init` does; what changed restarts (a static pod
//! whose manifest changed, the kubelet when its unit or binary did), then the same gates as
//! `kiln upgrade apply` check the host before the next one: a controller's store member and quorum,
//! its API server, its control-plane pods, the leader leases, every process on the installed binaries,
//! the node Ready. A worker whose binaries change is cordoned and drained first, as an upgrade does.
//! The walker stops at the first failure: a re-run plans again from the cluster and goes on.

use super::plan::Action;
use crate::upgrade::steps::Gate;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// `kiln init` (no cluster yet).
    Init,
    Cordon,
    Drain,
    /// The host's files as init renders them (push, manifests, runtime config, kubelet), on this host
    /// only.
    Render,
    /// Each static pod whose manifest the render changed runs again from the new manifest (its
    /// mirror pod's config hash moved) and is Ready: the gates after it then see the new pods.
    Restarted,
    Gate(Gate),
    Uncordon,
    JoinControllers,
    JoinWorkers,
    /// The reset playbook on a host deleted from the file: drain, Node deleted, store member removed
    /// (phase leave-cluster), then everything kiln put there removed and checked.
    Leave,
    /// The host's Node is gone from the API.
    NodeGone,
    /// kube-dns Service, StorageClass, kube-system/kiln-config.
    Record,
}

impl Step {
    pub fn name(self) -> String {
        match self {
            Step::Gate(g) => format!("gate {}", g.name()),
            other => format!("{other:?}").to_lowercase(),
        }
    }
}

/// A step, and whether it only runs when the roll changes binaries (the drain around a swap).
type Row = (Step, bool);

const ROLL_CONTROLLER: &[Row] = &[
    (Step::Render, false),
    (Step::Restarted, false),
    (Step::Gate(Gate::StoreHealthy), false),
    (Step::Gate(Gate::ApiServerReady), false),
    (Step::Gate(Gate::ControlPlanePods), false),
    (Step::Gate(Gate::Leaders), false),
    (Step::Gate(Gate::Versions), false),
    (Step::Gate(Gate::NodeReady), false),
];

const ROLL_WORKER: &[Row] = &[
    (Step::Cordon, true),
    (Step::Drain, true),
    (Step::Render, false),
    (Step::Restarted, false),
    (Step::Gate(Gate::Versions), false),
    (Step::Gate(Gate::NodeReady), false),
    (Step::Uncordon, true),
];

const REMOVE: &[Row] = &[(Step::Leave, false), (Step::NodeGone, false)];

/// The steps of one action, in order.
pub fn steps_of(action: &Action) -> Vec<Step> {
    let rows: &[Row] = match action {
        Action::Init => &[(Step::Init, false)],
        Action::Roll {
            controller: true, ..
        } => ROLL_CONTROLLER,
        Action::Roll { .. } => ROLL_WORKER,
        Action::JoinControllers(_) => &[(Step::JoinControllers, false)],
        Action::JoinWorkers(_) => &[(Step::JoinWorkers, false)],
        Action::Remove { .. } => REMOVE,
        Action::Record => &[(Step::Record, false)],
    };
    let binaries = matches!(action, Action::Roll { binaries: true, .. });
    rows.iter()
        .filter(|(_, only_binaries)| binaries || !only_binaries)
        .map(|(s, _)| *s)
        .collect()
}

/// The side effects, one step of one action at a time. `Ok` says what was done, `Err` why not.
pub trait Executor {
    fn run(&self, action: &Action, step: Step) -> Result<String, String>;
}

#[derive(Debug, Default, PartialEq)]
pub struct Report {
    /// (action number from 1, step, detail) of each step done.
    pub done: Vec<(usize, String, String)>,
    /// The step that stopped the apply: (action number, step, why).
    pub failed: Option<(usize, String, String)>,
}

/// Every action's steps in order; at the first failure, a cordon this action made is undone and the
/// walk stops.
pub fn walk(exec: &dyn Executor, actions: &[Action], say: &dyn Fn(&str)) -> Report {
    let mut report = Report::default();
    for (i, a) in actions.iter().enumerate() {
        let n = i + 1;
        say(&format!("{n}. {}", a.describe()));
        let mut cordoned = false;
        for step in steps_of(a) {
            match exec.run(a, step) {
                Ok(detail) => {
                    say(&format!("   {}: {detail}", step.name()));
                    cordoned |= step == Step::Cordon;
                    cordoned &= step != Step::Uncordon;
                    report.done.push((n, step.name(), detail));
                }
                Err(why) => {
                    say(&format!("   {}: FAILED: {why}", step.name()));
                    if cordoned {
                        if let Err(e) = exec.run(a, Step::Uncordon) {
                            say(&format!("   uncordon: FAILED: {e}"));
                        }
                    }
                    report.failed = Some((n, step.name(), why));
                    return report;
                }
            }
        }
    }
    report
}

/// The dry run: each action with its steps.
pub fn render_dry_run(actions: &[Action]) -> String {
    let mut s = String::new();
    for (i, a) in actions.iter().enumerate() {
        s.push_str(&format!("{}. {}\n", i + 1, a.describe()));
        if let Action::Roll { changes, .. } = a {
            for c in changes {
                for (j, line) in c.lines().enumerate() {
                    let lead = if j == 0 { "     - " } else { "         " };
                    s.push_str(&format!("{lead}{line}\n"));
                }
            }
        }
        let names: Vec<String> = steps_of(a).into_iter().map(Step::name).collect();
        s.push_str(&format!("     steps: {}\n", names.join(", ")));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// Records every step; fails the steps it is told to.
    #[derive(Default)]
    struct Recorder {
        calls: Mutex<Vec<String>>,
        fail: Vec<Step>,
    }

    impl Executor for Recorder {
        fn run(&self, action: &Action, step: Step) -> Result<String, String> {
            let who = match action {
                Action::Roll { host, .. } | Action::Remove { host, .. } => host.clone(),
                Action::JoinWorkers(h) | Action::JoinControllers(h) => h.join(","),
                _ => "cluster".into(),
            };
            self.calls
                .lock()
                .unwrap()
                .push(format!("{who} {}", step.name()));
            if self.fail.contains(&step) {
                return Err(format!("{} broke", step.name()));
            }
            Ok("ok".into())
        }
    }

    fn roll(host: &str, controller: bool, binaries: bool) -> Action {
        Action::Roll {
            host: host.into(),
            controller,
            changes: vec!["x".into()],
            binaries,
        }
    }

    #[test]
    fn the_actions_run_in_order_each_gated() {
        let r = Recorder::default();
        let actions = [
            roll("host1", true, false),
            roll("host2", false, false),
            Action::JoinWorkers(vec!["host3".into()]),
            Action::Remove {
                host: "host4".into(),
                controller: false,
            },
            Action::Record,
        ];
        let report = walk(&r, &actions, &|_| {});
        assert_eq!(report.failed, None);
        assert_eq!(
            *r.calls.lock().unwrap(),
            [
                "host1 render",
                "host1 restarted",
                "host1 gate store-healthy",
                "host1 gate apiserver-ready",
                "host1 gate control-plane-pods",
                "host1 gate leaders",
                "host1 gate versions",
                "host1 gate node-ready",
                "host2 render",
                "host2 restarted",
                "host2 gate versions",
                "host2 gate node-ready",
                "host3 joinworkers",
                "host4 leave",
                "host4 nodegone",
                "cluster record",
            ]
        );
    }

    #[test]
    fn a_worker_whose_binaries_change_is_drained_around_the_render() {
        let steps: Vec<String> = steps_of(&roll("w", false, true))
            .into_iter()
            .map(Step::name)
            .collect();
        assert_eq!(
            steps,
            [
                "cordon",
                "drain",
                "render",
                "restarted",
                "gate versions",
                "gate node-ready",
                "uncordon"
            ]
        );
    }

    #[test]
    fn a_failure_stops_the_walk_and_undoes_the_cordon() {
        let r = Recorder {
            fail: vec![Step::Render],
            ..Default::default()
        };
        let actions = [roll("w", false, true), Action::Record];
        let report = walk(&r, &actions, &|_| {});
        assert_eq!(
            *r.calls.lock().unwrap(),
            ["w cordon", "w drain", "w render", "w uncordon"]
        );
        assert_eq!(
            report.failed,
            Some((1, "render".into(), "render broke".into()))
        );
    }

    #[test]
    fn the_dry_run_names_each_actions_steps() {
        let text = render_dry_run(&[roll("host1", true, false), Action::Record]);
        assert!(text.starts_with("1. roll out to host1 (controller): 1 file(s) differ\n     - x\n     steps: render, restarted, gate store-healthy"), "{text}");
        assert!(text.ends_with("     steps: record\n"), "{text}");
    }
}
