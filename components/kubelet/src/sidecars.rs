//! Sidecar containers (KEP-753): init containers with `restartPolicy: Always`. They start in order with
//! the other init containers, but the next init container starts once a sidecar has *started* (running,
//! and its startupProbe passed, if it has one) rather than completed; they then keep running beside the
//! app containers, are restarted whenever they exit (whatever the pod's restartPolicy), count in the
//! pod's readiness, and on termination are stopped after the app containers, the last one first. The
//! rules are here, pure; the CRI worker drives the containers (`runtime/cri/init_sync.rs`).

use std::collections::HashMap;

use k8s_openapi::api::core::v1::Container;

use crate::container_status::RestartPolicy;
use crate::init_containers;

/// An init container with `restartPolicy: Always` (the only value the API accepts there).
pub fn is_restartable(c: &Container) -> bool {
    c.restart_policy.as_deref() == Some("Always")
}

/// How an init container is restarted: a sidecar always, a regular one per the pod's policy
/// ([`init_containers::restart_policy`]).
pub fn init_policy(c: &Container, pod: RestartPolicy) -> RestartPolicy {
    if is_restartable(c) {
        RestartPolicy::Always
    } else {
        init_containers::restart_policy(pod)
    }
}

/// What planning needs of one init container.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct InitView {
    pub restartable: bool,
    /// Exited 0 and not to be run again (a completed regular init container).
    pub succeeded: bool,
    /// Exited non-zero and not to be run again (restartPolicy Never): the pod has failed.
    pub failed: bool,
    /// Running, and its startupProbe (if any) has succeeded.
    pub started: bool,
}

/// One step of the init sequence, upstream's `computeInitContainerActions`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InitPlan {
    /// The init containers to sync (start, restart, probe), in order.
    pub sync: Vec<usize>,
    /// The pod is initialized: the app containers may run.
    pub initialized: bool,
    /// A regular init container failed for good: the pod has failed and its sidecars are stopped.
    pub failed: bool,
}

/// The init containers to sync now. Before the pod is initialized: every one in order up to the first
/// that is not done — a regular one until it has succeeded, a sidecar until it has started — and the
/// sidecars before it (they keep running). Once initialized (`initialized`, set by the worker the first
/// time this says so), only the sidecars: completed init containers never run again, and a sidecar that
/// restarts does not hold up the app containers.
pub fn plan(inits: &[InitView], initialized: bool) -> InitPlan {
    let sidecars = || {
        inits
            .iter()
            .enumerate()
            .filter(|(_, c)| c.restartable)
            .map(|(i, _)| i)
    };
    if initialized {
        return InitPlan {
            sync: sidecars().collect(),
            initialized: true,
            failed: false,
        };
    }
    let mut sync = Vec::new();
    for (i, c) in inits.iter().enumerate() {
        if c.restartable {
            sync.push(i);
            if !c.started {
                return InitPlan {
                    sync,
                    ..Default::default()
                };
            }
        } else if c.failed {
            return InitPlan {
                sync: Vec::new(),
                initialized: false,
                failed: true,
            };
        } else if !c.succeeded {
            sync.push(i);
            return InitPlan {
                sync,
                ..Default::default()
            };
        }
    }
    InitPlan {
        sync,
        initialized: true,
        failed: false,
    }
}

/// Upstream's termination ordering: for each running container (by index, init containers first, `n_init`
/// of them, `restartable[i]` for each), the running containers it must outlive. App containers wait for
/// nobody; a sidecar waits for every running app container and for the running sidecar after it (which
/// waits for the next, and so on), so sidecars stop after the app containers, in reverse order.
pub fn termination_prerequisites(
    running: &[usize],
    n_init: usize,
    restartable: &[bool],
) -> HashMap<usize, Vec<usize>> {
    let apps: Vec<usize> = running.iter().copied().filter(|&i| i >= n_init).collect();
    let mut sidecars: Vec<usize> = running
        .iter()
        .copied()
        .filter(|&i| i < n_init && restartable.get(i).copied().unwrap_or(false))
        .collect();
    sidecars.sort_unstable();
    let mut out = HashMap::new();
    for (k, &i) in sidecars.iter().enumerate() {
        let mut deps = apps.clone();
        deps.extend(sidecars.get(k + 1).copied());
        out.insert(i, deps);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn regular() -> InitView {
        InitView::default()
    }
    fn done() -> InitView {
        InitView {
            succeeded: true,
            ..Default::default()
        }
    }
    fn sidecar(started: bool) -> InitView {
        InitView {
            restartable: true,
            started,
            ..Default::default()
        }
    }

    #[test]
    fn restart_policy_of_init_containers() {
        let c = |p: Option<&str>| Container {
            name: "c".into(),
            restart_policy: p.map(String::from),
            ..Default::default()
        };
        assert!(is_restartable(&c(Some("Always"))));
        assert!(!is_restartable(&c(None)));
        assert_eq!(
            init_policy(&c(Some("Always")), RestartPolicy::Never),
            RestartPolicy::Always,
            "a sidecar restarts whatever the pod's policy"
        );
        assert_eq!(
            init_policy(&c(None), RestartPolicy::Always),
            RestartPolicy::OnFailure
        );
        assert_eq!(
            init_policy(&c(None), RestartPolicy::Never),
            RestartPolicy::Never
        );
    }

    #[test]
    fn a_sidecar_that_has_not_started_holds_up_what_follows() {
        let p = plan(&[sidecar(false), regular()], false);
        assert_eq!(p.sync, vec![0]);
        assert!(!p.initialized);
    }

    #[test]
    fn a_started_sidecar_lets_the_next_init_container_run_and_keeps_being_synced() {
        let p = plan(&[sidecar(true), regular()], false);
        assert_eq!(p.sync, vec![0, 1]);
        assert!(!p.initialized);
        let p = plan(&[sidecar(true), done(), sidecar(false)], false);
        assert_eq!(p.sync, vec![0, 2], "completed ones are not synced");
        let p = plan(&[sidecar(true), done(), sidecar(true)], false);
        assert_eq!(p.sync, vec![0, 2]);
        assert!(
            p.initialized,
            "every sidecar started, every regular one done"
        );
    }

    #[test]
    fn a_regular_init_container_must_complete() {
        let p = plan(&[regular(), sidecar(false)], false);
        assert_eq!(p.sync, vec![0], "the sidecar after it waits");
        let p = plan(&[done(), done()], false);
        assert_eq!(
            p,
            InitPlan {
                sync: vec![],
                initialized: true,
                failed: false
            }
        );
        assert!(plan(&[], false).initialized);
    }

    #[test]
    fn a_failed_init_container_fails_the_pod() {
        let failed = InitView {
            failed: true,
            ..Default::default()
        };
        let p = plan(&[sidecar(true), failed, regular()], false);
        assert!(p.failed && !p.initialized);
        assert!(p.sync.is_empty());
    }

    #[test]
    fn once_initialized_only_sidecars_are_synced_even_while_restarting() {
        let p = plan(&[sidecar(false), done(), regular(), sidecar(true)], true);
        assert_eq!(p.sync, vec![0, 3]);
        assert!(p.initialized);
    }

    #[test]
    fn sidecars_outlive_the_app_containers_in_reverse_order() {
        // init: 0 sidecar, 1 regular (exited), 2 sidecar, 3 sidecar (not running); apps 4, 5.
        let restartable = [true, false, true, true];
        let deps = termination_prerequisites(&[0, 2, 4, 5], 4, &restartable);
        assert_eq!(deps.get(&2), Some(&vec![4, 5]), "the last running sidecar");
        assert_eq!(deps.get(&0), Some(&vec![4, 5, 2]));
        assert!(
            !deps.contains_key(&4) && !deps.contains_key(&5),
            "apps wait for nobody"
        );
        assert_eq!(deps.len(), 2);
        // No app container running (they completed): sidecars still go last first.
        let deps = termination_prerequisites(&[0, 2], 4, &restartable);
        assert_eq!(deps[&0], vec![2]);
        assert!(deps[&2].is_empty());
    }
}
