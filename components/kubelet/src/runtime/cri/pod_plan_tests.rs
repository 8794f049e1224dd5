//! The planning step on data alone: no CRI, no clock.

use super::*;

fn seen(sandbox: SandboxSeen, volumes_set_up: bool, volume_refresh_due: bool) -> PodSeen {
    PodSeen {
        sandbox,
        volumes_set_up,
        volume_refresh_due,
    }
}

fn actions(
    kill_sandbox: Option<&'static str>,
    volumes: VolumeStep,
    create_sandbox: bool,
) -> PodActions {
    PodActions {
        wait: false,
        kill_sandbox,
        volumes,
        create_sandbox,
    }
}

#[test]
fn a_new_pod_sets_its_volumes_up_beside_its_first_sandbox() {
    assert_eq!(
        compute_pod_actions(&seen(SandboxSeen::Absent, false, false)),
        actions(None, VolumeStep::SetUpBesideSandbox, true)
    );
}

#[test]
fn a_running_pod_keeps_its_sandbox_and_refreshes_volumes_when_due() {
    assert_eq!(
        compute_pod_actions(&seen(SandboxSeen::Ready, true, false)),
        actions(None, VolumeStep::Keep, false)
    );
    assert_eq!(
        compute_pod_actions(&seen(SandboxSeen::Ready, true, true)),
        actions(None, VolumeStep::Refresh, false)
    );
}

#[test]
fn volumes_that_failed_are_set_up_before_anything_else() {
    // The sandbox came up in an earlier sync, the volumes did not.
    assert_eq!(
        compute_pod_actions(&seen(SandboxSeen::Ready, false, true)),
        actions(None, VolumeStep::SetUp, false)
    );
}

#[test]
fn a_sandbox_not_ready_or_gone_is_killed_and_made_again() {
    assert_eq!(
        compute_pod_actions(&seen(SandboxSeen::NotReady, true, false)),
        actions(Some("not ready"), VolumeStep::Keep, true)
    );
    assert_eq!(
        compute_pod_actions(&seen(SandboxSeen::Gone, true, true)),
        actions(Some("gone"), VolumeStep::Refresh, true)
    );
    // A sandbox that failed to come up is made again after the volumes.
    assert_eq!(
        compute_pod_actions(&seen(SandboxSeen::Absent, true, false)),
        actions(None, VolumeStep::Keep, true)
    );
}

#[test]
fn an_unknown_sandbox_waits_for_the_next_sync() {
    let a = compute_pod_actions(&seen(SandboxSeen::Unknown, true, true));
    assert!(a.wait);
    assert_eq!(a.kill_sandbox, None);
    assert!(!a.create_sandbox);
}

const BACKOFF: Backoff = Backoff {
    base: Duration::from_secs(10),
    max: Duration::from_secs(300),
};

fn exited(code: i32) -> ContainerSeen {
    ContainerSeen::Exited(Terminated {
        exit_code: code,
        signal: None,
        reason: if code == 0 { "Completed" } else { "Error" }.into(),
        message: None,
        started_at: None,
        finished_at: SystemTime::UNIX_EPOCH,
    })
}

fn plan(
    track: RestartTrack,
    seen: &ContainerSeen,
    policy: RestartPolicy,
    now: Instant,
) -> ContainerPlan {
    plan_container(&track, seen, policy, BACKOFF, now)
}

#[test]
fn a_container_not_created_is_started_and_a_running_one_probed() {
    let now = Instant::now();
    let t = RestartTrack::default();
    assert_eq!(
        plan(t, &ContainerSeen::NotCreated, RestartPolicy::Always, now).step,
        ContainerStep::Start
    );
    let started_at = SystemTime::UNIX_EPOCH + Duration::from_secs(7);
    assert_eq!(
        plan(
            t,
            &ContainerSeen::Running { started_at },
            RestartPolicy::Always,
            now
        ),
        ContainerPlan {
            exit: None,
            exit_shown_over: false,
            step: ContainerStep::Probe { started_at },
        }
    );
    assert_eq!(
        plan(t, &ContainerSeen::Unknown, RestartPolicy::Always, now).step,
        ContainerStep::Nothing
    );
}

#[test]
fn a_done_container_is_left_alone() {
    let t = RestartTrack {
        done: true,
        ..Default::default()
    };
    let p = plan(t, &exited(1), RestartPolicy::Always, Instant::now());
    assert_eq!(p.exit, None);
    assert_eq!(p.step, ContainerStep::Nothing);
}

#[test]
fn restart_policy_decides_whether_an_exit_is_final() {
    let now = Instant::now();
    let t = RestartTrack::default();
    for (policy, code, restarted) in [
        (RestartPolicy::Never, 0, false),
        (RestartPolicy::Never, 1, false),
        (RestartPolicy::OnFailure, 0, false),
        (RestartPolicy::OnFailure, 2, true),
        (RestartPolicy::Always, 0, true),
    ] {
        let p = plan(t, &exited(code), policy, now);
        if restarted {
            assert_eq!(
                p.exit,
                Some(ExitPlan::Restart {
                    delay: Duration::ZERO,
                    at: now,
                    show_until: None
                }),
                "{policy:?} {code}"
            );
            assert_eq!(p.step, ContainerStep::Start, "{policy:?} {code}");
        } else {
            assert_eq!(p.exit, Some(ExitPlan::Final), "{policy:?} {code}");
            assert_eq!(p.step, ContainerStep::Nothing, "{policy:?} {code}");
        }
    }
}

#[test]
fn later_exits_back_off_doubling_and_show_the_exit_first() {
    let now = Instant::now();
    for (restart_count, delay) in [(1, 10), (2, 20), (3, 40), (6, 300)] {
        let t = RestartTrack {
            restart_count,
            ..Default::default()
        };
        let delay = Duration::from_secs(delay);
        assert_eq!(
            plan(t, &exited(1), RestartPolicy::Always, now),
            ContainerPlan {
                exit: Some(ExitPlan::Restart {
                    delay,
                    at: now + delay,
                    show_until: Some(now + (delay / 2).min(EXIT_SHOWN_FOR)),
                }),
                exit_shown_over: false,
                step: ContainerStep::Nothing,
            },
            "restart {restart_count}"
        );
    }
}

#[test]
fn a_handled_exit_is_shown_then_backs_off_then_restarts() {
    let now = Instant::now();
    let t = RestartTrack {
        exit_handled: true,
        restart_count: 1,
        restart_at: Some(now + Duration::from_secs(10)),
        exit_shown_until: Some(now + Duration::from_secs(5)),
        ..Default::default()
    };
    let step = |t: RestartTrack, at: Instant| plan(t, &exited(1), RestartPolicy::Always, at);
    assert_eq!(
        step(t, now + Duration::from_secs(1)),
        ContainerPlan {
            exit: None,
            exit_shown_over: false,
            step: ContainerStep::ShowExit,
        }
    );
    // Shown long enough: it becomes the last termination, and the back-off shows.
    assert_eq!(
        step(t, now + Duration::from_secs(6)),
        ContainerPlan {
            exit: None,
            exit_shown_over: true,
            step: ContainerStep::BackOff,
        }
    );
    let t = RestartTrack {
        exit_shown_until: None,
        ..t
    };
    assert_eq!(
        step(t, now + Duration::from_secs(8)).step,
        ContainerStep::BackOff
    );
    assert_eq!(
        step(t, now + Duration::from_secs(10)).step,
        ContainerStep::Start
    );
}
