//! The node-level cgroups the kubelet keeps: `kubepods` bounded by what pods may use of the node
//! (made once at start), the `besteffort` tier at the minimum cpu weight, and the `burstable` tier
//! weighted by its pods' cpu requests — kept in step with the pods every [`PERIOD`], as upstream's
//! qosContainerManager does — plus the sweep of pod cgroups whose pod is gone (a cgroup the pod's
//! own teardown could not remove while a process was still exiting).

use std::collections::BTreeMap;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use tokio::sync::watch;

use crate::cgroupfs::{CgroupError, Cgroups};
use crate::config::KubeletConfig;
use crate::qos_cgroups::{self, CgroupResources, BEST_EFFORT, BURSTABLE, KUBEPODS, MIN_SHARES};

/// How often the tiers are re-weighted and gone pods' cgroups swept.
pub const PERIOD: Duration = Duration::from_secs(10);

/// What `kubepods` is limited to: capacity minus the reservations with `--enforce-node-allocatable=pods`
/// (upstream's default), else the capacity.
pub fn kubepods_limits(cfg: &KubeletConfig) -> CgroupResources {
    let capacity: BTreeMap<String, String> = [
        ("cpu".to_string(), cfg.capacity_cpu.clone()),
        ("memory".to_string(), cfg.capacity_memory.clone()),
    ]
    .into_iter()
    .collect();
    let share = if cfg.enforce_pods_allocatable {
        let reserved: Vec<&crate::allocatable::Reserved> = cfg.reserved.iter().collect();
        crate::allocatable::pods_share(&capacity, &reserved)
    } else {
        capacity
    };
    // A pid reservation bounds kubepods below the kernel's pid_max, as upstream's internal capacity.
    let reserved_pids: i128 = cfg
        .reserved
        .iter()
        .filter_map(|r| r.get("pid"))
        .map(|m| m.0 / 1000)
        .sum();
    let pids = (cfg.enforce_pods_allocatable && reserved_pids > 0)
        .then(pid_max)
        .flatten()
        .map(|max| (max - reserved_pids as i64).max(1));
    qos_cgroups::node_resources(&share["cpu"], &share["memory"], pids)
}

fn pid_max() -> Option<i64> {
    std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .ok()
        .and_then(|s| s.trim().parse().ok())
}

/// Makes `kubepods` and its tiers (at start, before any pod).
pub fn set_up(cgroups: &dyn Cgroups, kubepods: &CgroupResources) -> Result<(), CgroupError> {
    cgroups.ensure(KUBEPODS, kubepods)?;
    let tier = CgroupResources {
        cpu_shares: Some(MIN_SHARES),
        ..Default::default()
    };
    cgroups.ensure(BEST_EFFORT, &tier)?;
    cgroups.ensure(BURSTABLE, &tier)
}

/// One pass: the burstable tier's weight from `pods`, and the removal of pod cgroups of no pod in
/// `pods`. `children` must be read before `pods`: a pod cgroup listed then was made by a worker that
/// already counted among the pods, so a pod starting meanwhile is never swept.
pub fn sync(cgroups: &dyn Cgroups, children: &[(&str, Vec<String>)], pods: &[Pod]) {
    let burstable = CgroupResources {
        cpu_shares: Some(qos_cgroups::burstable_shares(pods)),
        ..Default::default()
    };
    if let Err(e) = cgroups.ensure(BURSTABLE, &burstable) {
        tracing::warn!(error = %e, "weighting the burstable tier");
    }
    let live: HashSet<&str> = pods
        .iter()
        .filter_map(|p| p.metadata.uid.as_deref())
        .collect();
    for (tier, names) in children {
        for name in names {
            let Some(uid) = qos_cgroups::uid_of(name) else {
                continue;
            };
            if live.contains(uid) {
                continue;
            }
            let path = format!("{tier}/{name}");
            match cgroups.remove(&path) {
                Ok(()) => {
                    tracing::info!(cgroup = %path, "removed the cgroup of a pod that is gone")
                }
                Err(e) => {
                    tracing::debug!(cgroup = %path, error = %e, "gone pod's cgroup still busy")
                }
            }
        }
    }
}

/// Every [`PERIOD`] until `shutdown`: [`sync`] with the runtime's pods.
pub async fn run(
    cgroups: Arc<dyn Cgroups>,
    pods: impl Fn() -> Vec<Pod> + Send + 'static,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(PERIOD);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.wait_for(|s| *s) => return,
        }
        let children: Vec<(&str, Vec<String>)> = [KUBEPODS, BURSTABLE, BEST_EFFORT]
            .into_iter()
            .map(|t| (t, cgroups.children(t)))
            .collect();
        sync(cgroups.as_ref(), &children, &pods());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroupfs::{Op, Recording};

    fn pod(uid: &str, cpu: &str) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": uid, "namespace": "ns", "uid": uid},
            "spec": {"containers": [{"name": "c", "image": "i",
                "resources": {"requests": {"cpu": cpu}}}]}
        }))
        .unwrap()
    }

    #[test]
    fn kubepods_and_tiers_are_made_at_start() {
        let r = Recording::default();
        let mut cfg = KubeletConfig::new("n", "10.0.0.1".parse().unwrap());
        cfg.capacity_cpu = "2".into();
        cfg.capacity_memory = "2Gi".into();
        cfg.reserved =
            vec![
                crate::allocatable::parse_reserved("kube-reserved", "cpu=500m,memory=512Mi")
                    .unwrap(),
            ];
        set_up(&r, &kubepods_limits(&cfg)).unwrap();
        let ops = r.ops();
        assert_eq!(
            ops[0],
            Op::Ensure(
                KUBEPODS.into(),
                CgroupResources {
                    cpu_shares: Some(1536),
                    memory_limit: Some(1536 << 20),
                    ..Default::default()
                }
            )
        );
        assert!(matches!(&ops[1], Op::Ensure(p, r) if p == BEST_EFFORT && r.cpu_shares == Some(2)));
        cfg.enforce_pods_allocatable = false;
        assert_eq!(kubepods_limits(&cfg).memory_limit, Some(2 << 30));
    }

    #[test]
    fn burstable_weight_follows_pods_and_gone_pods_are_swept() {
        let r = Recording::default();
        let a = pod("a", "300m");
        let b = pod("b", "200m");
        let children = vec![
            (BURSTABLE, vec!["poda".to_string(), "podgone".to_string()]),
            (
                KUBEPODS,
                vec!["burstable".to_string(), "besteffort".to_string()],
            ),
        ];
        sync(&r, &children, &[a, b]);
        assert_eq!(
            r.ops(),
            vec![
                Op::Ensure(
                    BURSTABLE.into(),
                    CgroupResources {
                        cpu_shares: Some(512),
                        ..Default::default()
                    }
                ),
                Op::Remove("/kubepods/burstable/podgone".into()),
            ],
            "the tiers themselves are never swept"
        );
    }
}
