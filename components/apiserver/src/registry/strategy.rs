//! Per-kind behaviour as data: everything that differs between resources is a field here, so serving a
//! new resource is one `ResourceSpec` entry in `resources.rs`, never a new handler.

use serde_json::Value;

use crate::status::Cause;

/// Verbs a resource's main endpoint supports, in discovery's spelling.
pub const ALL_VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

/// Renders one Table cell from the stored object; `now` is seconds since the epoch (for AGE).
pub type CellFn = fn(&Value, i64) -> Value;

/// One `columnDefinitions[]` entry plus how to fill it.
#[derive(Debug)]
pub struct Column {
    pub name: &'static str,
    pub type_: &'static str,
    pub format: &'static str,
    pub description: &'static str,
    /// 0 = always shown; 1 = only with `-o wide`.
    pub priority: u8,
    pub cell: CellFn,
}

/// A field selector key this kind supports, beyond metadata.name / metadata.namespace.
#[derive(Debug)]
pub struct SelectableField {
    pub name: &'static str,
    /// JSON pointer into the object; `a|b` falls back to `b` where `a` is empty or missing.
    pub pointer: &'static str,
}

/// Graceful deletion (pods on a node): the object gets a deletionTimestamp and stays until its owner
/// (the kubelet) confirms with a zero grace period.
#[derive(Debug)]
pub struct GracefulDelete {
    /// Returns the grace period to use when none was requested, or `None` to delete at once
    /// (e.g. a pod never scheduled to a node).
    pub default_grace: fn(&Value) -> Option<i64>,
}

#[derive(Debug)]
pub struct ResourceSpec {
    pub group: &'static str,
    pub version: &'static str,
    /// Plural resource name: the URL segment and the etcd key segment.
    pub plural: &'static str,
    pub singular: &'static str,
    pub kind: &'static str,
    pub list_kind: &'static str,
    pub namespaced: bool,
    pub short_names: &'static [&'static str],
    pub categories: &'static [&'static str],
    pub verbs: &'static [&'static str],
    /// Serves `<resource>/status`; then the main endpoint ignores status and /status ignores the rest.
    pub status_subresource: bool,
    /// `/status` also takes the request's metadata (labels, annotations, …), for kinds whose
    /// upstream status strategy resets only the spec (CronJob); otherwise it keeps the stored one.
    pub status_takes_metadata: bool,
    /// metadata.generation starts at 1 and increments on spec changes.
    pub generation: bool,
    /// The name must be a DNS-1123 label (namespaces), not just a subdomain.
    pub name_is_label: bool,
    /// Any name usable as a URL path segment (RBAC kinds: `system:node`), not a DNS subdomain.
    pub name_is_path_segment: bool,
    pub table: &'static [Column],
    pub fields: &'static [SelectableField],
    /// Typed decode with k8s-openapi: rejects wrongly typed fields (400) and normalises the JSON.
    pub decode: fn(Value) -> Result<Value, String>,
    /// Kind-specific defaults applied on create (after metadata defaults).
    pub defaults: fn(&mut Value),
    /// Kind-specific validation; empty = valid.
    pub validate: fn(&Value) -> Vec<Cause>,
    /// Kind-specific rules on an update, given (old, new): immutable fields; empty = valid.
    pub validate_update: fn(&Value, &Value) -> Vec<Cause>,
    /// Kind-specific rules only a create checks (after `validate`, in the same 422), as upstream's
    /// ValidatePodCreate adds to a pod's validation; empty = valid.
    pub validate_create: fn(&Value) -> Vec<Cause>,
    pub graceful_delete: Option<GracefulDelete>,
    /// Serves `<resource>/scale` as an autoscaling/v1 Scale.
    pub scale: Option<ScaleSpec>,
    /// Action subresources (binding, eviction, token, ...) served by `handlers/subresources.rs`.
    pub actions: &'static [Action],
    /// Store keys the object holds exclusively (a Service's ClusterIP and NodePorts); claimed and
    /// released in the same transaction as the object itself, so two objects never share one.
    pub reservations: Option<fn(&Value) -> Vec<Reservation>>,
    /// Deleting the object makes it Terminating and starts a pass that deletes its content
    /// (namespaces); the object goes once the content is gone.
    pub terminating: bool,
    /// Deleting the object first adds this finalizer, so it stays (with a deletionTimestamp) until
    /// a controller has done the clean-up and removed it (CRDs: their custom resources go first).
    pub delete_finalizer: Option<&'static str>,
    /// Create computes a response and stores nothing (access reviews, self reviews).
    pub ephemeral: bool,
    /// Create records the requesting user in spec.username/uid/groups/extra (CSRs).
    pub records_requester: bool,
    /// A custom resource: its schema, printer columns and scale paths come from its CRD.
    pub custom: Option<&'static crate::custom_resource::CustomResource>,
    /// The etcd key root when it is not `/registry/<plural>` (custom resources live under
    /// `/registry/<group>/<plural>`, as upstream, so two groups' plurals never share keys).
    pub key_root: Option<&'static str>,
    /// A built-in kind served in several versions over one set of stored objects (HPA:
    /// autoscaling/v2 and v1): converts an object of another version of the kind into this one
    /// (`version`: this spec's). Objects are stored as written, as custom resources are.
    pub convert: Option<fn(&mut Value, &str)>,
}

/// Where a scalable kind keeps its replica counts and selector.
#[derive(Debug)]
pub struct ScaleSpec {
    /// JSON pointer to the selector for `status.selector`: a LabelSelector object (built-in
    /// kinds) or an already serialised selector string (custom resources' labelSelectorPath);
    /// empty when the kind has none.
    pub selector: &'static str,
    /// JSON pointers to the desired and observed replica counts.
    pub spec_replicas: &'static str,
    pub status_replicas: &'static str,
}

impl ScaleSpec {
    /// Where built-in kinds keep their counts.
    pub const REPLICAS: ScaleSpec = ScaleSpec {
        selector: "",
        spec_replicas: "/spec/replicas",
        status_replicas: "/status/replicas",
    };
}

/// One action subresource as discovery shows it.
#[derive(Debug)]
pub struct Action {
    pub name: &'static str,
    pub group: &'static str,
    pub version: &'static str,
    pub kind: &'static str,
    pub verbs: &'static [&'static str],
}

/// One exclusively held key (e.g. `/registry/kiln/serviceips/10.96.0.10`) and the field that holds
/// it, for the 422 a taken value gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reservation {
    pub key: String,
    pub field: String,
    /// The value as Go's `%#v` prints it in the field error.
    pub rendered: String,
    pub detail: String,
}

impl ResourceSpec {
    /// The values every entry starts from: `ResourceSpec { plural: .., ..ResourceSpec::BASE }`.
    pub const BASE: ResourceSpec = ResourceSpec {
        group: "",
        version: "v1",
        plural: "",
        singular: "",
        kind: "",
        list_kind: "",
        namespaced: true,
        short_names: &[],
        categories: &[],
        verbs: ALL_VERBS,
        status_subresource: false,
        status_takes_metadata: false,
        generation: false,
        name_is_label: false,
        name_is_path_segment: false,
        table: &[],
        fields: &[],
        decode: passthrough,
        defaults: no_defaults,
        validate: no_validation,
        validate_update: no_update_validation,
        validate_create: no_validation,
        graceful_delete: None,
        scale: None,
        actions: &[],
        reservations: None,
        terminating: false,
        delete_finalizer: None,
        ephemeral: false,
        records_requester: false,
        custom: None,
        key_root: None,
        convert: None,
    };

    pub fn action(&self, name: &str) -> Option<&'static Action> {
        self.actions.iter().find(|a| a.name == name)
    }

    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// The etcd key prefix for one namespace, or for every object of this resource (`None`).
    pub fn key_prefix(&self, namespace: Option<&str>) -> String {
        let root = match self.key_root {
            Some(root) => root.to_string(),
            None => format!("/registry/{}", self.plural),
        };
        match (self.namespaced, namespace) {
            (true, Some(ns)) => format!("{root}/{ns}/"),
            _ => format!("{root}/"),
        }
    }

    pub fn key(&self, namespace: Option<&str>, name: &str) -> String {
        format!("{}{name}", self.key_prefix(namespace))
    }

    pub fn supports(&self, verb: &str) -> bool {
        self.verbs.contains(&verb)
    }

    /// JSON pointer for a field selector key, `None` when the kind does not support it.
    pub fn field_pointer(&self, field: &str) -> Option<&'static str> {
        match field {
            "metadata.name" => Some("/metadata/name"),
            "metadata.namespace" if self.namespaced => Some("/metadata/namespace"),
            _ => self
                .fields
                .iter()
                .find(|f| f.name == field)
                .map(|f| f.pointer),
        }
    }
}

/// Field selectors (`crate::selectors`) read a kind's selectable fields through this.
impl crate::selectors::SelectableFields for ResourceSpec {
    fn field_pointer(&self, field: &str) -> Option<&'static str> {
        ResourceSpec::field_pointer(self, field)
    }
}

/// `decode` for any k8s-openapi type: JSON → typed → JSON.
pub fn typed<T>(value: Value) -> Result<Value, String>
where
    T: serde::de::DeserializeOwned + serde::Serialize,
{
    let typed: T = serde_json::from_value(value).map_err(|e| e.to_string())?;
    serde_json::to_value(typed).map_err(|e| e.to_string())
}

pub fn no_defaults(_: &mut Value) {}

pub fn no_validation(_: &Value) -> Vec<Cause> {
    Vec::new()
}

pub fn no_update_validation(_: &Value, _: &Value) -> Vec<Cause> {
    Vec::new()
}

/// `decode` for kinds without a typed form.
pub fn passthrough(value: Value) -> Result<Value, String> {
    Ok(value)
}
