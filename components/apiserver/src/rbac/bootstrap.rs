//! The default cluster roles and bindings, created (and kept up to date unless annotated
//! `rbac.authorization.kubernetes.io/autoupdate: "false"`) at every start, like upstream's
//! bootstrap policy plus the bindings kubeadm adds for joining nodes.

use serde_json::{json, Value};

pub(super) const READ: &[&str] = &["get", "list", "watch"];
const ALL: &[&str] = &[
    "get",
    "list",
    "watch",
    "create",
    "update",
    "patch",
    "delete",
    "deletecollection",
];

pub(super) fn rule(groups: &[&str], resources: &[&str], verbs: &[&str]) -> Value {
    json!({"apiGroups": groups, "resources": resources, "verbs": verbs})
}

fn urls(urls: &[&str], verbs: &[&str]) -> Value {
    json!({"nonResourceURLs": urls, "verbs": verbs})
}

pub(super) fn role(name: &str, rules: Vec<Value>) -> Value {
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
            "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"},
        },
        "rules": rules,
    })
}

/// `subjects`: ("User" | "Group" | "ServiceAccount", name); service accounts are `ns:name`.
pub(super) fn binding(name: &str, role: &str, subjects: &[(&str, &str)]) -> Value {
    let subjects: Vec<Value> = subjects
        .iter()
        .map(|(kind, name)| match (*kind, name.split_once(':')) {
            ("ServiceAccount", Some((ns, n))) => {
                json!({"kind": "ServiceAccount", "name": n, "namespace": ns})
            }
            _ => json!({"kind": kind, "name": name, "apiGroup": "rbac.authorization.k8s.io"}),
        })
        .collect();
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
            "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"},
        },
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": subjects,
    })
}

/// metrics.k8s.io, as metrics-server's `system:aggregated-metrics-reader` grants it.
fn metrics_reader_rule() -> Value {
    rule(&["metrics.k8s.io"], &["pods", "nodes"], READ)
}

/// metrics-server's role, labelled to aggregate into view/edit/admin as upstream's manifests do;
/// kiln has no ClusterRole aggregation, so those roles carry [`metrics_reader_rule`] themselves.
fn aggregated_metrics_reader() -> Value {
    let mut r = role(
        "system:aggregated-metrics-reader",
        vec![metrics_reader_rule()],
    );
    for to in ["view", "edit", "admin"] {
        r["metadata"]["labels"][format!("rbac.authorization.k8s.io/aggregate-to-{to}")] =
            json!("true");
    }
    r
}

/// What a kubelet may do (the `system:node` role; the Node authorizer grants it to each node,
/// narrowed to its own objects).
pub fn node_rules() -> Vec<Value> {
    vec![
        rule(
            &[""],
            &["nodes"],
            &[
                "get", "list", "watch", "create", "update", "patch", "delete",
            ],
        ),
        rule(&[""], &["nodes/status"], &["get", "patch", "update"]),
        rule(
            &[""],
            &["pods"],
            &["get", "list", "watch", "create", "delete"],
        ),
        rule(&[""], &["pods/status"], &["get", "patch", "update"]),
        rule(&[""], &["pods/eviction"], &["create"]),
        rule(
            &["", "events.k8s.io"],
            &["events"],
            &["create", "patch", "update"],
        ),
        rule(&[""], &["services", "endpoints"], READ),
        rule(&["discovery.k8s.io"], &["endpointslices"], READ),
        rule(
            &[""],
            &[
                "configmaps",
                "secrets",
                "persistentvolumeclaims",
                "persistentvolumes",
            ],
            &["get", "list", "watch"],
        ),
        rule(&[""], &["serviceaccounts/token"], &["create"]),
        // Storage, as upstream's system:node: claim status for resizing, CSI objects.
        rule(
            &[""],
            &["persistentvolumeclaims/status"],
            &["update", "patch"],
        ),
        rule(&["storage.k8s.io"], &["volumeattachments"], &["get"]),
        rule(&["storage.k8s.io"], &["csidrivers"], READ),
        // The kubelet resolves a pod's runtimeClassName to its CRI handler.
        rule(&["node.k8s.io"], &["runtimeclasses"], READ),
        rule(
            &["storage.k8s.io"],
            &["csinodes"],
            &["get", "create", "update", "patch", "delete"],
        ),
        rule(
            &["coordination.k8s.io"],
            &["leases"],
            &["get", "create", "update", "patch", "delete"],
        ),
        rule(
            &["certificates.k8s.io"],
            &["certificatesigningrequests"],
            &["create", "get", "list", "watch"],
        ),
        rule(&["authentication.k8s.io"], &["tokenreviews"], &["create"]),
        rule(
            &["authorization.k8s.io"],
            &["subjectaccessreviews"],
            &["create"],
        ),
    ]
}

pub fn cluster_roles() -> Vec<Value> {
    let discovery_urls = [
        "/api",
        "/api/*",
        "/apis",
        "/apis/*",
        "/healthz",
        "/livez",
        "/readyz",
        "/openapi",
        "/openapi/*",
        "/version",
        "/version/",
    ];
    let workloads = [
        "pods",
        "pods/log",
        "pods/attach",
        "pods/exec",
        "pods/portforward",
        "pods/eviction",
        "pods/proxy",
        "services",
        "services/proxy",
        "endpoints",
        "configmaps",
        "secrets",
        "serviceaccounts",
        "persistentvolumeclaims",
        "events",
    ];
    let apps = [
        "deployments",
        "deployments/scale",
        "replicasets",
        "replicasets/scale",
        "daemonsets",
        "statefulsets",
        "statefulsets/scale",
        "controllerrevisions",
    ];
    vec![
        role(
            "cluster-admin",
            vec![rule(&["*"], &["*"], &["*"]), urls(&["*"], &["*"])],
        ),
        role("system:discovery", vec![urls(&discovery_urls, &["get"])]),
        role(
            "system:service-account-issuer-discovery",
            vec![urls(
                &[
                    "/.well-known/openid-configuration",
                    "/.well-known/openid-configuration/",
                    "/openid/v1/jwks",
                    "/openid/v1/jwks/",
                ],
                &["get"],
            )],
        ),
        role(
            "system:public-info-viewer",
            vec![urls(
                &["/healthz", "/livez", "/readyz", "/version", "/version/"],
                &["get"],
            )],
        ),
        role(
            "system:basic-user",
            vec![
                rule(
                    &["authorization.k8s.io"],
                    &["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
                    &["create"],
                ),
                rule(
                    &["authentication.k8s.io"],
                    &["selfsubjectreviews"],
                    &["create"],
                ),
            ],
        ),
        role(
            "admin",
            vec![
                rule(&[""], &workloads, ALL),
                rule(&["apps"], &apps, ALL),
                rule(&["policy"], &["poddisruptionbudgets"], ALL),
                rule(
                    &["networking.k8s.io"],
                    &["ingresses", "ingresses/status", "networkpolicies"],
                    ALL,
                ),
                rule(&["autoscaling"], &["horizontalpodautoscalers"], ALL),
                metrics_reader_rule(),
                rule(&["batch"], &["jobs"], ALL),
                rule(&["batch"], &["cronjobs"], ALL),
                rule(&["discovery.k8s.io"], &["endpointslices"], READ),
                rule(&["coordination.k8s.io"], &["leases"], ALL),
                rule(
                    &["rbac.authorization.k8s.io"],
                    &["roles", "rolebindings"],
                    ALL,
                ),
                rule(
                    &["authorization.k8s.io"],
                    &["localsubjectaccessreviews"],
                    &["create"],
                ),
                rule(&[""], &["namespaces"], READ),
            ],
        ),
        role(
            "edit",
            vec![
                rule(&[""], &workloads, ALL),
                rule(&["apps"], &apps, ALL),
                rule(&["policy"], &["poddisruptionbudgets"], ALL),
                rule(
                    &["networking.k8s.io"],
                    &["ingresses", "ingresses/status", "networkpolicies"],
                    ALL,
                ),
                rule(&["autoscaling"], &["horizontalpodautoscalers"], ALL),
                metrics_reader_rule(),
                rule(&["batch"], &["jobs"], ALL),
                rule(&["batch"], &["cronjobs"], ALL),
                rule(&["discovery.k8s.io"], &["endpointslices"], READ),
                rule(&["coordination.k8s.io"], &["leases"], ALL),
                rule(&[""], &["namespaces"], READ),
            ],
        ),
        role(
            "view",
            vec![
                rule(
                    &[""],
                    &[
                        "pods",
                        "pods/log",
                        "services",
                        "endpoints",
                        "configmaps",
                        "serviceaccounts",
                        "persistentvolumeclaims",
                        "events",
                        "namespaces",
                    ],
                    READ,
                ),
                rule(&["apps"], &apps, READ),
                rule(&["policy"], &["poddisruptionbudgets"], READ),
                rule(
                    &["networking.k8s.io"],
                    &["ingresses", "ingresses/status", "networkpolicies"],
                    READ,
                ),
                rule(
                    &["autoscaling"],
                    &[
                        "horizontalpodautoscalers",
                        "horizontalpodautoscalers/status",
                    ],
                    READ,
                ),
                rule(&["batch"], &["jobs"], READ),
                rule(&["batch"], &["cronjobs"], READ),
                rule(&["discovery.k8s.io"], &["endpointslices"], READ),
                metrics_reader_rule(),
            ],
        ),
        aggregated_metrics_reader(),
        role("system:node", node_rules()),
        role(
            "system:node-bootstrapper",
            vec![rule(
                &["certificates.k8s.io"],
                &["certificatesigningrequests"],
                &["create", "get", "list", "watch"],
            )],
        ),
        role(
            "system:certificates.k8s.io:certificatesigningrequests:nodeclient",
            vec![rule(
                &["certificates.k8s.io"],
                &["certificatesigningrequests/nodeclient"],
                &["create"],
            )],
        ),
        role(
            "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient",
            vec![rule(
                &["certificates.k8s.io"],
                &["certificatesigningrequests/selfnodeclient"],
                &["create"],
            )],
        ),
        role(
            "system:kube-scheduler",
            vec![
                rule(
                    &["", "events.k8s.io"],
                    &["events"],
                    &["create", "patch", "update"],
                ),
                rule(
                    &["coordination.k8s.io"],
                    &["leases"],
                    &["create", "get", "list", "watch", "update", "patch"],
                ),
                rule(&[""], &["endpoints"], &["create", "get", "update"]),
                rule(&[""], &["nodes"], READ),
                rule(&[""], &["pods"], &["get", "list", "watch", "delete"]),
                rule(&[""], &["bindings", "pods/binding"], &["create"]),
                rule(&[""], &["pods/status"], &["patch", "update"]),
                rule(
                    &[""],
                    &[
                        "replicationcontrollers",
                        "services",
                        "namespaces",
                        "persistentvolumeclaims",
                        "persistentvolumes",
                        "configmaps",
                    ],
                    READ,
                ),
                rule(
                    &["apps", "extensions"],
                    &["replicasets", "statefulsets"],
                    READ,
                ),
                rule(&["policy"], &["poddisruptionbudgets"], READ),
                rule(
                    &["storage.k8s.io"],
                    &[
                        "storageclasses",
                        "csinodes",
                        "csidrivers",
                        "csistoragecapacities",
                    ],
                    READ,
                ),
                rule(&["authentication.k8s.io"], &["tokenreviews"], &["create"]),
                rule(
                    &["authorization.k8s.io"],
                    &["subjectaccessreviews"],
                    &["create"],
                ),
            ],
        ),
        // The scheduler's VolumeBinding writes claimRefs of static PVs and selected-node annotations
        // of claims to provision (upstream's role, bound to the scheduler's user).
        role(
            "system:volume-scheduler",
            vec![
                rule(
                    &[""],
                    &["persistentvolumes", "persistentvolumeclaims"],
                    &["get", "list", "patch", "update", "watch"],
                ),
                rule(&["storage.k8s.io"], &["storageclasses"], READ),
            ],
        ),
        // kiln's controller-manager runs every controller under its own identity (no per-controller
        // service accounts yet), so its role is the union of what those controllers touch.
        role(
            "system:kube-controller-manager",
            vec![
                rule(
                    &["", "events.k8s.io"],
                    &["events"],
                    &["create", "patch", "update"],
                ),
                rule(&["coordination.k8s.io"], &["leases"], ALL),
                rule(
                    &[""],
                    &[
                        "pods",
                        "pods/status",
                        "pods/eviction",
                        "services",
                        "services/status",
                        "endpoints",
                        "configmaps",
                        "secrets",
                        "serviceaccounts",
                        "serviceaccounts/token",
                        "namespaces",
                        "namespaces/status",
                        "namespaces/finalize",
                        "nodes",
                        "nodes/status",
                        "persistentvolumeclaims",
                        "persistentvolumeclaims/status",
                        "persistentvolumes",
                        "persistentvolumes/status",
                        "pods/finalizers",
                        "replicationcontrollers",
                        "replicationcontrollers/status",
                        "replicationcontrollers/scale",
                        // The resourcequota controller keeps quota status.
                        "resourcequotas/status",
                    ],
                    ALL,
                ),
                rule(
                    &["apps"],
                    &[
                        "deployments",
                        "deployments/status",
                        "deployments/scale",
                        "replicasets",
                        "replicasets/status",
                        "replicasets/scale",
                        "daemonsets",
                        "daemonsets/status",
                        "controllerrevisions",
                        "statefulsets",
                        "statefulsets/status",
                        "statefulsets/scale",
                    ],
                    ALL,
                ),
                rule(&["batch"], &["jobs", "jobs/status", "jobs/finalizers"], ALL),
                // The horizontal-pod-autoscaler controller writes HPA status.
                rule(
                    &["autoscaling"],
                    &[
                        "horizontalpodautoscalers",
                        "horizontalpodautoscalers/status",
                    ],
                    ALL,
                ),
                rule(
                    &["batch"],
                    &["cronjobs", "cronjobs/status", "cronjobs/finalizers"],
                    ALL,
                ),
                rule(&["discovery.k8s.io"], &["endpointslices"], ALL),
                rule(
                    &["policy"],
                    &["poddisruptionbudgets", "poddisruptionbudgets/status"],
                    ALL,
                ),
                rule(
                    &["certificates.k8s.io"],
                    &[
                        "certificatesigningrequests",
                        "certificatesigningrequests/approval",
                        "certificatesigningrequests/status",
                    ],
                    ALL,
                ),
                rule(&["certificates.k8s.io"], &["signers"], &["approve", "sign"]),
                rule(&["authentication.k8s.io"], &["tokenreviews"], &["create"]),
                rule(
                    &["authorization.k8s.io"],
                    &["subjectaccessreviews"],
                    &["create"],
                ),
                rule(&["*"], &["*"], &["list", "watch", "get"]),
                // The namespace controller empties a Terminating namespace of every kind, as
                // upstream's namespace-controller role allows.
                rule(&["*"], &["*"], &["delete", "deletecollection"]),
            ],
        ),
        role(
            "system:node-proxier",
            vec![
                rule(&[""], &["endpoints", "services"], &["list", "watch"]),
                rule(&[""], &["nodes"], &["get", "list", "watch"]),
                rule(
                    &["", "events.k8s.io"],
                    &["events"],
                    &["create", "patch", "update"],
                ),
                rule(
                    &["discovery.k8s.io"],
                    &["endpointslices"],
                    &["list", "watch"],
                ),
            ],
        ),
        // Upstream's per-controller role (kiln's controller-manager runs under its own identity, so
        // nothing binds it but the service account upstream names).
        role(
            "system:controller:replication-controller",
            vec![
                rule(
                    &[""],
                    &["replicationcontrollers"],
                    &["get", "list", "watch", "update"],
                ),
                rule(&[""], &["replicationcontrollers/status"], &["update"]),
                rule(
                    &[""],
                    &["pods"],
                    &["list", "watch", "patch", "create", "delete"],
                ),
                rule(
                    &["", "events.k8s.io"],
                    &["events"],
                    &["create", "patch", "update"],
                ),
            ],
        ),
        // kiln-dns answers from Services and EndpointSlices only (upstream's system:coredns also
        // reads pods and namespaces, for options kiln-dns does not have).
        role(
            "system:kiln-dns",
            vec![
                rule(&[""], &["services"], &["list", "watch"]),
                rule(
                    &["discovery.k8s.io"],
                    &["endpointslices"],
                    &["list", "watch"],
                ),
            ],
        ),
    ]
}

pub fn cluster_role_bindings() -> Vec<Value> {
    vec![
        binding(
            "system:controller:replication-controller",
            "system:controller:replication-controller",
            &[("ServiceAccount", "kube-system:replication-controller")],
        ),
        binding(
            "cluster-admin",
            "cluster-admin",
            &[("Group", "system:masters")],
        ),
        binding(
            "system:discovery",
            "system:discovery",
            &[("Group", "system:authenticated")],
        ),
        binding(
            "system:service-account-issuer-discovery",
            "system:service-account-issuer-discovery",
            &[("Group", "system:serviceaccounts")],
        ),
        binding(
            "system:basic-user",
            "system:basic-user",
            &[("Group", "system:authenticated")],
        ),
        binding(
            "system:public-info-viewer",
            "system:public-info-viewer",
            &[
                ("Group", "system:authenticated"),
                ("Group", "system:unauthenticated"),
            ],
        ),
        binding(
            "system:kube-scheduler",
            "system:kube-scheduler",
            &[("User", "system:kube-scheduler")],
        ),
        binding(
            "system:volume-scheduler",
            "system:volume-scheduler",
            &[("User", "system:kube-scheduler")],
        ),
        binding(
            "system:kube-controller-manager",
            "system:kube-controller-manager",
            &[("User", "system:kube-controller-manager")],
        ),
        binding(
            "system:node-proxier",
            "system:node-proxier",
            &[
                ("User", "system:kube-proxy"),
                ("ServiceAccount", "kube-system:kube-proxy"),
            ],
        ),
        binding(
            "system:kiln-dns",
            "system:kiln-dns",
            &[("User", "system:kiln-dns")],
        ),
        // kubeadm's join bindings: bootstrap tokens may ask for (auto-approved) kubelet client
        // certificates; nodes may renew their own.
        binding(
            "kubeadm:kubelet-bootstrap",
            "system:node-bootstrapper",
            &[("Group", "system:bootstrappers")],
        ),
        binding(
            "kubeadm:node-autoapprove-bootstrap",
            "system:certificates.k8s.io:certificatesigningrequests:nodeclient",
            &[("Group", "system:bootstrappers")],
        ),
        binding(
            "kubeadm:node-autoapprove-certificate-rotation",
            "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient",
            &[("Group", "system:nodes")],
        ),
    ]
}
