//! The served resources, as data. Adding services, configmaps or deployments is one more entry here
//! (plus column cells in `columns.rs` when kubectl shows extra columns).

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Event, Namespace, Node, Secret, ServiceAccount};

use super::columns::{self as c, col};
use super::config_keys::{
    configmap_update_validation, configmap_validation, secret_update_validation, secret_validation,
};
use super::defaults::{
    namespace_defaults, pod_defaults, pod_grace, pod_validation, secret_defaults,
};
use super::strategy::{
    no_defaults, no_validation, typed, Action, GracefulDelete, ResourceSpec, SelectableField,
    ALL_VERBS,
};

pub static NAMESPACES: ResourceSpec = ResourceSpec {
    group: "",
    version: "v1",
    plural: "namespaces",
    singular: "namespace",
    kind: "Namespace",
    list_kind: "NamespaceList",
    namespaced: false,
    short_names: &["ns"],
    categories: &[],
    verbs: &[
        "create", "delete", "get", "list", "patch", "update", "watch",
    ],
    status_subresource: true,
    generation: false,
    name_is_label: true,
    table: &[
        c::NAME_COL,
        col(
            "Status",
            "string",
            "",
            "The status of the namespace",
            0,
            c::phase,
        ),
        c::AGE_COL,
    ],
    fields: &[SelectableField {
        name: "status.phase",
        pointer: "/status/phase",
    }],
    decode: typed::<Namespace>,
    defaults: namespace_defaults,
    validate: no_validation,
    graceful_delete: None,
    terminating: true,
    // The namespace controller drops its `kubernetes` finalizer from spec.finalizers here.
    actions: &[Action {
        name: "finalize",
        group: "",
        version: "v1",
        kind: "Namespace",
        verbs: &["update"],
    }],
    ..ResourceSpec::BASE
};

pub static NODES: ResourceSpec = ResourceSpec {
    group: "",
    version: "v1",
    plural: "nodes",
    singular: "node",
    kind: "Node",
    list_kind: "NodeList",
    namespaced: false,
    short_names: &["no"],
    categories: &[],
    verbs: ALL_VERBS,
    status_subresource: true,
    generation: false,
    name_is_label: false,
    table: &[
        c::NAME_COL,
        col(
            "Status",
            "string",
            "",
            "The status of the node",
            0,
            c::node_status,
        ),
        col(
            "Roles",
            "string",
            "",
            "The roles of the node",
            0,
            c::node_roles,
        ),
        c::AGE_COL,
        col(
            "Version",
            "string",
            "",
            "Kubelet Version reported by the node.",
            0,
            c::node_version,
        ),
        col(
            "Internal-IP",
            "string",
            "",
            "List of internal IPs in the node.",
            1,
            c::node_internal_ip,
        ),
        col(
            "External-IP",
            "string",
            "",
            "List of external IPs in the node.",
            1,
            c::node_external_ip,
        ),
        col(
            "OS-Image",
            "string",
            "",
            "OS Image reported by the node from /etc/os-release.",
            1,
            c::node_os_image,
        ),
        col(
            "Kernel-Version",
            "string",
            "",
            "Kernel Version reported by the node from 'uname -r'.",
            1,
            c::node_kernel,
        ),
        col(
            "Container-Runtime",
            "string",
            "",
            "Container Runtime Version reported by the node through runtime remote API.",
            1,
            c::node_runtime,
        ),
    ],
    fields: &[SelectableField {
        name: "spec.unschedulable",
        // A Go bool: unset reads `false` (NodeToSelectableFields' strconv.FormatBool).
        pointer: "/spec/unschedulable|=false",
    }],
    decode: typed::<Node>,
    defaults: no_defaults,
    validate: no_validation,
    graceful_delete: None,
    actions: &[Action {
        name: "proxy",
        group: "",
        version: "v1",
        kind: "NodeProxyOptions",
        verbs: PROXY_VERBS,
    }],
    ..ResourceSpec::BASE
};

/// The verbs discovery lists for a proxy subresource (served by `handlers/resource_proxy`).
pub const PROXY_VERBS: &[&str] = &["create", "delete", "get", "patch", "update"];

const PODS_SPEC: ResourceSpec = ResourceSpec {
    group: "",
    version: "v1",
    plural: "pods",
    singular: "pod",
    kind: "Pod",
    list_kind: "PodList",
    namespaced: true,
    short_names: &["po"],
    categories: &["all"],
    verbs: ALL_VERBS,
    status_subresource: true,
    // Upstream's pod status strategy resets the spec only: labels and annotations sent with a
    // status update or patch are kept.
    status_takes_metadata: true,
    generation: true,
    name_is_label: false,
    table: &[
        c::NAME_COL,
        col("Ready", "string", "", "The aggregate readiness state of this pod for accepting traffic.", 0, c::pod_ready),
        col("Status", "string", "", "The aggregate status of the containers in this pod.", 0, c::pod_status),
        col("Restarts", "string", "", "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted.", 0, c::pod_restarts),
        c::AGE_COL,
        col("IP", "string", "", "IP address allocated to the pod. Routable at least within the cluster. Empty if not yet allocated.", 1, c::pod_ip),
        col("Node", "string", "", "NodeName is a request to schedule this pod onto a specific node.", 1, c::pod_node),
        col("Nominated Node", "string", "", "nominatedNodeName is set only when this pod preempts other pods on the node.", 1, c::pod_nominated_node),
        col("Readiness Gates", "string", "", "If specified, all readiness gates will be evaluated for pod readiness.", 1, c::pod_readiness_gates),
    ],
    fields: &[
        SelectableField { name: "spec.nodeName", pointer: "/spec/nodeName" },
        SelectableField { name: "spec.restartPolicy", pointer: "/spec/restartPolicy" },
        SelectableField { name: "spec.schedulerName", pointer: "/spec/schedulerName" },
        SelectableField { name: "spec.serviceAccountName", pointer: "/spec/serviceAccountName" },
        SelectableField { name: "spec.hostNetwork", pointer: "/spec/hostNetwork" },
        SelectableField { name: "status.phase", pointer: "/status/phase" },
        SelectableField { name: "status.podIP", pointer: "/status/podIP" },
        SelectableField { name: "status.nominatedNodeName", pointer: "/status/nominatedNodeName" },
    ],
    decode: super::pod_resources::decode_pod,
    defaults: pod_defaults,
    validate: pod_validation,
    validate_update: super::defaults::pod_update_validation,
    validate_create: super::apparmor_annotations::pod_create,
    graceful_delete: Some(GracefulDelete {
        default_grace: pod_grace,
    }),
    actions: &[
        Action { name: "binding", group: "", version: "v1", kind: "Binding", verbs: &["create"] },
        Action { name: "eviction", group: "policy", version: "v1", kind: "Eviction", verbs: &["create"] },
        Action { name: "log", group: "", version: "v1", kind: "Pod", verbs: &["get"] },
        Action { name: "exec", group: "", version: "v1", kind: "PodExecOptions", verbs: &["create", "get"] },
        Action { name: "attach", group: "", version: "v1", kind: "PodAttachOptions", verbs: &["create", "get"] },
        Action { name: "portforward", group: "", version: "v1", kind: "PodPortForwardOptions", verbs: &["create", "get"] },
        Action { name: "ephemeralcontainers", group: "", version: "v1", kind: "Pod", verbs: &["get", "patch", "update"] },
        Action { name: "resize", group: "", version: "v1", kind: "Pod", verbs: &["get", "patch", "update"] },
        Action { name: "proxy", group: "", version: "v1", kind: "PodProxyOptions", verbs: PROXY_VERBS },
    ],
    ..ResourceSpec::BASE
};

pub static PODS: ResourceSpec = PODS_SPEC;

/// Pods as `pods/<name>/ephemeralcontainers` writes them: the update rule lets ephemeral containers
/// be added there, and only there (a main update may not change them, as upstream).
pub static PODS_EPHEMERAL_CONTAINERS: ResourceSpec = ResourceSpec {
    validate_update: super::ephemeral_containers::pod_update_validation,
    ..PODS_SPEC
};

/// Pods as `pods/<name>/resize` writes them: the update rule lets container resources change
/// there, and only there (a main update may not change them, as upstream).
pub static PODS_RESIZE: ResourceSpec = ResourceSpec {
    validate_update: super::pod_resize::pod_update_validation,
    ..PODS_SPEC
};

pub static LEASES: ResourceSpec = ResourceSpec {
    group: "coordination.k8s.io",
    version: "v1",
    plural: "leases",
    singular: "lease",
    kind: "Lease",
    list_kind: "LeaseList",
    namespaced: true,
    short_names: &[],
    categories: &[],
    verbs: ALL_VERBS,
    status_subresource: false,
    generation: false,
    name_is_label: false,
    table: &[
        c::NAME_COL,
        col(
            "Holder",
            "string",
            "",
            "The holder of the lease",
            0,
            c::lease_holder,
        ),
        c::AGE_COL,
    ],
    fields: &[],
    decode: typed::<Lease>,
    defaults: no_defaults,
    validate: no_validation,
    graceful_delete: None,
    ..ResourceSpec::BASE
};

pub static CONFIGMAPS: ResourceSpec = ResourceSpec {
    group: "",
    version: "v1",
    plural: "configmaps",
    singular: "configmap",
    kind: "ConfigMap",
    list_kind: "ConfigMapList",
    namespaced: true,
    short_names: &["cm"],
    categories: &[],
    verbs: ALL_VERBS,
    status_subresource: false,
    generation: false,
    name_is_label: false,
    table: &[
        c::NAME_COL,
        col(
            "Data",
            "string",
            "",
            "Number of keys in the config map",
            0,
            c::data_count,
        ),
        c::AGE_COL,
    ],
    fields: &[],
    decode: typed::<ConfigMap>,
    defaults: no_defaults,
    validate: configmap_validation,
    validate_update: configmap_update_validation,
    graceful_delete: None,
    ..ResourceSpec::BASE
};

pub static SECRETS: ResourceSpec = ResourceSpec {
    group: "",
    version: "v1",
    plural: "secrets",
    singular: "secret",
    kind: "Secret",
    list_kind: "SecretList",
    namespaced: true,
    short_names: &[],
    categories: &[],
    verbs: ALL_VERBS,
    status_subresource: false,
    generation: false,
    name_is_label: false,
    table: &[
        c::NAME_COL,
        col(
            "Type",
            "string",
            "",
            "The type of the secret",
            0,
            c::secret_type,
        ),
        col(
            "Data",
            "string",
            "",
            "The number of entries in the secret",
            0,
            c::secret_data_count,
        ),
        c::AGE_COL,
    ],
    fields: &[SelectableField {
        name: "type",
        pointer: "/type",
    }],
    decode: typed::<Secret>,
    defaults: secret_defaults,
    validate: secret_validation,
    validate_update: secret_update_validation,
    graceful_delete: None,
    ..ResourceSpec::BASE
};

pub static SERVICE_ACCOUNTS: ResourceSpec = ResourceSpec {
    group: "",
    version: "v1",
    plural: "serviceaccounts",
    singular: "serviceaccount",
    kind: "ServiceAccount",
    list_kind: "ServiceAccountList",
    namespaced: true,
    short_names: &["sa"],
    categories: &[],
    verbs: ALL_VERBS,
    status_subresource: false,
    generation: false,
    name_is_label: false,
    table: &[
        c::NAME_COL,
        col("Secrets", "string", "", "Secrets is the list of secrets allowed to be used by pods running using this ServiceAccount.", 0, c::sa_secrets),
        c::AGE_COL,
    ],
    fields: &[],
    decode: typed::<ServiceAccount>,
    defaults: no_defaults,
    validate: no_validation,
    graceful_delete: None,
    actions: &[Action {
        name: "token",
        group: "authentication.k8s.io",
        version: "v1",
        kind: "TokenRequest",
        verbs: &["create"],
    }],
    ..ResourceSpec::BASE
};

/// What core v1 and events.k8s.io/v1 Events share (`events.rs`).
pub const EVENT_BASE: ResourceSpec = ResourceSpec {
    group: "",
    version: "v1",
    plural: "events",
    singular: "event",
    kind: "Event",
    list_kind: "EventList",
    namespaced: true,
    short_names: &["ev"],
    categories: &[],
    verbs: ALL_VERBS,
    status_subresource: false,
    generation: false,
    name_is_label: false,
    table: &[
        col(
            "Last Seen",
            "string",
            "",
            "Time when last occurrence of the event was seen",
            0,
            c::event_last_seen,
        ),
        col("Type", "string", "", "Type of this event", 0, c::event_type),
        col(
            "Reason",
            "string",
            "",
            "Why the action was taken",
            0,
            c::event_reason,
        ),
        col(
            "Object",
            "string",
            "",
            "The object this Event is about",
            0,
            c::event_object,
        ),
        col(
            "Subobject",
            "string",
            "",
            "The subobject this Event is about",
            1,
            c::event_subobject,
        ),
        col(
            "Source",
            "string",
            "",
            "The component reporting this event",
            1,
            c::event_source,
        ),
        col(
            "Message",
            "string",
            "",
            "A human-readable description of the status of this operation",
            0,
            c::event_message,
        ),
        col(
            "First Seen",
            "string",
            "",
            "Time when first occurrence of the event was seen",
            1,
            c::event_first_seen,
        ),
        col(
            "Count",
            "string",
            "",
            "The number of times this event has occurred",
            1,
            c::event_count,
        ),
        col(
            "Name",
            "string",
            "name",
            "Name must be unique within a namespace.",
            1,
            c::name,
        ),
    ],
    fields: &[
        SelectableField {
            name: "involvedObject.kind",
            pointer: "/involvedObject/kind",
        },
        SelectableField {
            name: "involvedObject.namespace",
            pointer: "/involvedObject/namespace",
        },
        SelectableField {
            name: "involvedObject.name",
            pointer: "/involvedObject/name",
        },
        SelectableField {
            name: "involvedObject.uid",
            pointer: "/involvedObject/uid",
        },
        SelectableField {
            name: "involvedObject.apiVersion",
            pointer: "/involvedObject/apiVersion",
        },
        SelectableField {
            name: "involvedObject.resourceVersion",
            pointer: "/involvedObject/resourceVersion",
        },
        SelectableField {
            name: "involvedObject.fieldPath",
            pointer: "/involvedObject/fieldPath",
        },
        SelectableField {
            name: "reason",
            pointer: "/reason",
        },
        SelectableField {
            name: "reportingComponent",
            pointer: "/reportingComponent",
        },
        SelectableField {
            name: "source",
            pointer: "/source/component|/reportingComponent",
        },
        SelectableField {
            name: "type",
            pointer: "/type",
        },
    ],
    decode: typed::<Event>,
    defaults: no_defaults,
    validate: no_validation,
    graceful_delete: None,
    ..ResourceSpec::BASE
};

/// Core v1 Events; those written through events.k8s.io/v1 are read in core's shape.
pub static EVENTS: ResourceSpec = ResourceSpec {
    convert: Some(super::events::to_core),
    ..EVENT_BASE
};

/// Every served resource; discovery lists them in this order.
pub static ALL: &[&ResourceSpec] = &[
    &NAMESPACES,
    &NODES,
    &PODS,
    &CONFIGMAPS,
    &SECRETS,
    &SERVICE_ACCOUNTS,
    &EVENTS,
    &super::events::EVENTS_V1,
    &super::quotas::RESOURCE_QUOTAS,
    &super::quotas::LIMIT_RANGES,
    &super::services::SERVICES,
    &super::services::ENDPOINTS,
    &LEASES,
    &super::apps::DEPLOYMENTS,
    &super::apps::REPLICASETS,
    &super::apps::DAEMONSETS,
    &super::services::ENDPOINT_SLICES,
    &super::rbac::CLUSTER_ROLES,
    &super::rbac::CLUSTER_ROLE_BINDINGS,
    &super::rbac::ROLES,
    &super::rbac::ROLE_BINDINGS,
    &super::certificates::CERTIFICATE_SIGNING_REQUESTS,
    &super::rbac::SELF_SUBJECT_ACCESS_REVIEWS,
    &super::rbac::SELF_SUBJECT_RULES_REVIEWS,
    &super::rbac::SUBJECT_ACCESS_REVIEWS,
    &super::rbac::SELF_SUBJECT_REVIEWS,
    &super::rbac::SELF_SUBJECT_REVIEWS_V1BETA1,
    &super::rbac::LOCAL_SUBJECT_ACCESS_REVIEWS,
    &super::rbac::TOKEN_REVIEWS,
    &super::jobs::JOBS,
    &super::cronjobs::CRONJOBS,
    &super::policy::PODDISRUPTIONBUDGETS,
    &super::statefulsets::STATEFULSETS,
    &super::statefulsets::CONTROLLERREVISIONS,
    &super::replication::REPLICATIONCONTROLLERS,
    &super::replication::PODTEMPLATES,
    &super::storage::PERSISTENT_VOLUMES,
    &super::storage::PERSISTENT_VOLUME_CLAIMS,
    &super::storage_classes::STORAGE_CLASSES,
    &super::storage_classes::CSI_DRIVERS,
    &super::storage_classes::CSI_NODES,
    &super::storage_classes::VOLUME_ATTACHMENTS,
    &super::storage_classes::CSI_STORAGE_CAPACITIES,
    &super::apiextensions::CUSTOM_RESOURCE_DEFINITIONS,
    &super::flowcontrol::FLOW_SCHEMAS,
    &super::flowcontrol::PRIORITY_LEVEL_CONFIGURATIONS,
    &super::admission_registration::MUTATING_WEBHOOK_CONFIGURATIONS,
    &super::admission_registration::VALIDATING_WEBHOOK_CONFIGURATIONS,
    &super::admission_registration::VALIDATING_ADMISSION_POLICIES,
    &super::admission_registration::VALIDATING_ADMISSION_POLICY_BINDINGS,
    &super::admission_registration::MUTATING_ADMISSION_POLICIES,
    &super::admission_registration::MUTATING_ADMISSION_POLICIES_V1ALPHA1,
    &super::admission_registration::MUTATING_ADMISSION_POLICY_BINDINGS,
    &super::admission_registration::MUTATING_ADMISSION_POLICY_BINDINGS_V1ALPHA1,
    &super::apiregistration::APISERVICES,
    &super::networking::INGRESSES,
    &super::networking::INGRESS_CLASSES,
    &super::networking::NETWORK_POLICIES,
    &super::runtime_classes::RUNTIME_CLASSES,
    &super::priority_classes::PRIORITY_CLASSES,
    &super::autoscaling::HORIZONTAL_POD_AUTOSCALERS_V2,
    &super::autoscaling::HORIZONTAL_POD_AUTOSCALERS_V1,
    &super::metrics_api::NODE_METRICS,
    &super::metrics_api::POD_METRICS,
];

/// Namespaces every cluster has, created at start like upstream's system namespaces controller.
pub const DEFAULT_NAMESPACES: &[&str] =
    &["default", "kube-system", "kube-public", "kube-node-lease"];

/// RuntimeClasses every kiln cluster has: `kiln-host` is the kubelet's built-in runtime for the
/// control plane's static pods (host processes). Their manifests name it in `runtimeClassName`,
/// and the RuntimeClass admission plugin rejects a pod whose class does not exist, so without
/// this object no mirror pod could be created. (name, handler)
pub const BUILTIN_RUNTIME_CLASSES: &[(&str, &str)] = &[("kiln-host", "kiln-host")];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_follow_the_registry_convention() {
        assert_eq!(
            PODS.key(Some("default"), "web"),
            "/registry/pods/default/web"
        );
        assert_eq!(NODES.key(None, "n1"), "/registry/nodes/n1");
        assert_eq!(LEASES.key_prefix(None), "/registry/leases/");
    }
}
