//! The version skew policy an upgrade is checked against before anything changes — upstream's
//! (https://kubernetes.io/releases/version-skew-policy/) as it applies to a kiln cluster, where one
//! build carries every component: the control plane moves first and at most one Kubernetes minor at a
//! time; nothing moves backwards (neither the Kubernetes release nor kiln's own version: a downgrade is a
//! restore, not an upgrade); and a kubelet is never newer than the API servers it talks to (the plan's
//! order guarantees that, controllers before workers, so it is checked against what runs now).

use super::stamp::{Semver, Stamp};

/// One rule: its name and a check of (what runs now, the target) that returns why it refuses.
pub struct Rule {
    pub name: &'static str,
    pub check: fn(&Stamp, &Stamp) -> Option<String>,
}

pub const RULES: &[Rule] = &[
    Rule {
        name: "no-kubernetes-downgrade",
        check: |now, target| {
            let (n, t) = (now.kube_or_default(), target.kube_or_default());
            ((t.0, t.1) < (n.0, n.1)).then(|| {
                format!("the target speaks Kubernetes v{t}, older than the v{n} running: downgrades are not supported (restore a snapshot instead)")
            })
        },
    },
    Rule {
        name: "one-minor-at-a-time",
        check: |now, target| {
            let (n, t) = (now.kube_or_default(), target.kube_or_default());
            let forward = (t.0, t.1) > (n.0, n.1);
            let skips = t.0 != n.0 || t.1 > n.1 + 1;
            (forward && skips).then(|| {
                format!("Kubernetes v{n} → v{t} skips a minor release: upgrade one minor at a time (v{}.{} first)", n.0, n.1 + 1)
            })
        },
    },
    Rule {
        name: "no-kiln-downgrade",
        check: |now, target| {
            (target.kiln < now.kiln).then(|| {
                format!(
                    "the target is kiln {}, older than the kiln {} running",
                    target.kiln, now.kiln
                )
            })
        },
    },
];

/// The first rule `now → target` breaks, as `rule: reason`.
pub fn refusal(now: &Stamp, target: &Stamp) -> Option<String> {
    RULES
        .iter()
        .find_map(|r| (r.check)(now, target).map(|why| format!("{}: {why}", r.name)))
}

/// The oldest Kubernetes release among `stamps` (what the cluster as a whole speaks).
pub fn oldest(stamps: &[&Stamp]) -> Option<Semver> {
    stamps.iter().map(|s| s.kube_or_default()).min()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stamp(kiln: (u64, u64, u64), kube: (u64, u64)) -> Stamp {
        Stamp {
            kiln: Semver(kiln.0, kiln.1, kiln.2),
            build: Some("b".into()),
            kube: Some(Semver(kube.0, kube.1, 0)),
        }
    }

    #[test]
    fn one_minor_forward_is_allowed() {
        assert_eq!(
            refusal(&stamp((0, 1, 0), (1, 33)), &stamp((0, 2, 0), (1, 34))),
            None
        );
        assert_eq!(
            refusal(&stamp((0, 1, 0), (1, 33)), &stamp((0, 1, 0), (1, 33))),
            None
        );
    }

    #[test]
    fn skipping_a_minor_or_going_back_is_refused_with_the_reason() {
        let r = refusal(&stamp((0, 1, 0), (1, 32)), &stamp((0, 2, 0), (1, 34))).unwrap();
        assert!(
            r.starts_with("one-minor-at-a-time: Kubernetes v1.32.0 → v1.34.0 skips"),
            "{r}"
        );
        assert!(r.contains("v1.33 first"), "{r}");
        let r = refusal(&stamp((0, 2, 0), (1, 34)), &stamp((0, 2, 0), (1, 33))).unwrap();
        assert!(r.starts_with("no-kubernetes-downgrade:"), "{r}");
        let r = refusal(&stamp((0, 2, 0), (1, 33)), &stamp((0, 1, 9), (1, 33))).unwrap();
        assert!(
            r.starts_with("no-kiln-downgrade: the target is kiln 0.1.9, older than the kiln 0.2.0"),
            "{r}"
        );
    }

    #[test]
    fn the_cluster_speaks_its_oldest_release() {
        let (a, b) = (stamp((0, 1, 0), (1, 33)), stamp((0, 1, 0), (1, 32)));
        assert_eq!(oldest(&[&a, &b]), Some(Semver(1, 32, 0)));
    }
}
