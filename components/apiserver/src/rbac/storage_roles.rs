//! The bootstrap roles for storage: upstream's per-controller roles for the volume controllers
//! (controller_policy.go, bound to the service accounts upstream names — kiln's controller-manager
//! runs every controller as `system:kube-controller-manager`, whose role carries the same
//! permissions, so these bindings matter only to a controller-manager started with per-controller
//! credentials), `system:volume-scheduler` for the scheduler's VolumeBinding, and kiln's
//! `system:kiln:local-path-provisioner` for the provisioner inside every kubelet.
//!
//! The provisioner must list and watch claims in every namespace and create and delete volumes,
//! which the Node authorizer (narrowed to a node's own pods) does not grant; RBAC does, through the
//! binding to the `system:nodes` group, and NodeRestriction (`admission/node_volumes.rs`) narrows
//! the writes to local-path volumes pinned to the writing node.

use serde_json::Value;

use super::bootstrap::{binding, role, rule, READ};

pub const LOCAL_PATH_PROVISIONER: &str = "system:kiln:local-path-provisioner";
pub const VOLUME_SCHEDULER: &str = "system:volume-scheduler";

const READ_UPDATE: &[&str] = &["get", "list", "watch", "update", "patch"];

fn events() -> Value {
    rule(
        &["", "events.k8s.io"],
        &["events"],
        &["create", "update", "patch"],
    )
}

/// (controller name, its rules) as upstream's controller_policy.go has them.
fn controller_roles() -> Vec<(&'static str, Vec<Value>)> {
    vec![
        (
            "persistent-volume-binder",
            vec![
                rule(
                    &[""],
                    &["persistentvolumes"],
                    &["get", "list", "watch", "update", "create", "delete"],
                ),
                rule(&[""], &["persistentvolumes/status"], &["update"]),
                rule(
                    &[""],
                    &["persistentvolumeclaims"],
                    &["get", "list", "watch", "update"],
                ),
                rule(&[""], &["persistentvolumeclaims/status"], &["update"]),
                rule(
                    &[""],
                    &["pods"],
                    &["list", "watch", "get", "create", "delete"],
                ),
                rule(&["storage.k8s.io"], &["storageclasses"], READ),
                rule(
                    &[""],
                    &["endpoints"],
                    &["get", "create", "update", "delete"],
                ),
                rule(&[""], &["services"], &["get", "create", "delete"]),
                rule(&[""], &["secrets"], &["get"]),
                rule(&[""], &["nodes"], &["get", "list"]),
                rule(&[""], &["events"], &["watch"]),
                events(),
            ],
        ),
        (
            "pvc-protection-controller",
            vec![
                rule(
                    &[""],
                    &["persistentvolumeclaims"],
                    &["get", "list", "watch", "update"],
                ),
                rule(&[""], &["pods"], &["list", "watch", "get"]),
                events(),
            ],
        ),
        (
            "pv-protection-controller",
            vec![
                rule(
                    &[""],
                    &["persistentvolumes"],
                    &["get", "list", "watch", "update"],
                ),
                events(),
            ],
        ),
        (
            "ephemeral-volume-controller",
            vec![
                rule(&[""], &["pods"], READ),
                rule(&[""], &["pods/finalizers"], &["update"]),
                rule(
                    &[""],
                    &["persistentvolumeclaims"],
                    &["get", "list", "watch", "create"],
                ),
                events(),
            ],
        ),
    ]
}

pub fn cluster_roles() -> Vec<Value> {
    let mut roles: Vec<Value> = controller_roles()
        .into_iter()
        .map(|(name, rules)| role(&format!("system:controller:{name}"), rules))
        .collect();
    roles.push(role(
        VOLUME_SCHEDULER,
        vec![
            rule(&[""], &["persistentvolumes"], READ_UPDATE),
            rule(&["storage.k8s.io"], &["storageclasses"], READ),
            rule(&[""], &["persistentvolumeclaims"], READ_UPDATE),
        ],
    ));
    roles.push(role(
        LOCAL_PATH_PROVISIONER,
        vec![
            rule(
                &[""],
                &["persistentvolumeclaims", "persistentvolumes"],
                READ,
            ),
            rule(&["storage.k8s.io"], &["storageclasses"], READ),
            rule(&[""], &["persistentvolumes"], &["create", "delete"]),
            rule(&["", "events.k8s.io"], &["events"], &["create", "patch"]),
        ],
    ));
    roles
}

pub fn cluster_role_bindings() -> Vec<Value> {
    let mut bindings: Vec<Value> = controller_roles()
        .into_iter()
        .map(|(name, _)| {
            let role = format!("system:controller:{name}");
            binding(
                &role,
                &role,
                &[("ServiceAccount", &format!("kube-system:{name}"))],
            )
        })
        .collect();
    bindings.push(binding(
        VOLUME_SCHEDULER,
        VOLUME_SCHEDULER,
        &[("User", "system:kube-scheduler")],
    ));
    bindings.push(binding(
        LOCAL_PATH_PROVISIONER,
        LOCAL_PATH_PROVISIONER,
        &[("Group", "system:nodes")],
    ));
    bindings
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::Attributes;
    use crate::rbac::rules::rule_allows;

    fn allows(role: &Value, verb: &str, group: &str, resource: &str, ns: Option<&str>) -> bool {
        let attrs = Attributes::Resource {
            verb,
            group,
            resource,
            subresource: None,
            namespace: ns,
            name: None,
        };
        role["rules"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| rule_allows(r, &attrs))
    }

    fn named(name: &str) -> Value {
        cluster_roles()
            .into_iter()
            .find(|r| r["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("{name}"))
    }

    #[test]
    fn the_provisioner_reads_claims_everywhere_and_writes_only_volumes() {
        let p = named(LOCAL_PATH_PROVISIONER);
        assert!(allows(&p, "watch", "", "persistentvolumeclaims", None));
        assert!(allows(&p, "list", "storage.k8s.io", "storageclasses", None));
        assert!(allows(&p, "create", "", "persistentvolumes", None));
        assert!(allows(&p, "delete", "", "persistentvolumes", None));
        assert!(!allows(&p, "update", "", "persistentvolumes", None));
        assert!(!allows(
            &p,
            "delete",
            "",
            "persistentvolumeclaims",
            Some("default")
        ));
        let b = cluster_role_bindings()
            .into_iter()
            .find(|b| b["metadata"]["name"] == LOCAL_PATH_PROVISIONER)
            .unwrap();
        assert_eq!(b["subjects"][0]["kind"], "Group");
        assert_eq!(b["subjects"][0]["name"], "system:nodes");
    }

    #[test]
    fn controller_roles_follow_upstream() {
        let binder = named("system:controller:persistent-volume-binder");
        assert!(allows(&binder, "create", "", "persistentvolumes", None));
        assert!(allows(
            &binder,
            "update",
            "",
            "persistentvolumeclaims",
            Some("ns")
        ));
        assert!(!allows(
            &binder,
            "delete",
            "",
            "persistentvolumeclaims",
            Some("ns")
        ));
        let pvc = named("system:controller:pvc-protection-controller");
        assert!(allows(
            &pvc,
            "update",
            "",
            "persistentvolumeclaims",
            Some("ns")
        ));
        assert!(!allows(&pvc, "update", "", "persistentvolumes", None));
        let eph = named("system:controller:ephemeral-volume-controller");
        assert!(allows(
            &eph,
            "create",
            "",
            "persistentvolumeclaims",
            Some("ns")
        ));
        let sched = named(VOLUME_SCHEDULER);
        assert!(allows(
            &sched,
            "patch",
            "",
            "persistentvolumeclaims",
            Some("ns")
        ));
        let names: Vec<String> = cluster_role_bindings()
            .iter()
            .map(|b| b["subjects"][0]["name"].as_str().unwrap().to_string())
            .collect();
        assert!(names.contains(&"persistent-volume-binder".to_string()));
        assert!(names.contains(&"system:kube-scheduler".to_string()));
    }
}
