//! The attributes of one write as admission sees them, and the AdmissionReview (admission.k8s.io/v1)
//! sent for it, shaped as upstream's `CreateAdmissionObjects`.

use serde_json::{json, Value};

use crate::auth::User;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    Create,
    Update,
    Delete,
    /// exec, attach, port-forward and proxy requests: `object` is the options (PodExecOptions, …).
    Connect,
}

impl Operation {
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
            Operation::Connect => "CONNECT",
        }
    }
}

#[derive(Debug, Clone)]
pub struct Request {
    pub operation: Operation,
    pub group: String,
    pub version: String,
    pub kind: String,
    /// Plural resource name.
    pub resource: String,
    /// `status`, or empty.
    pub subresource: String,
    /// Every version the server serves this group/resource at (matchPolicy Equivalent).
    pub served_versions: Vec<String>,
    pub name: String,
    /// The object's namespace; a Namespace's own name for Namespace objects, as upstream.
    pub namespace: String,
    /// Cluster-scoped for rule scopes (Namespace objects included).
    pub cluster_scoped: bool,
    pub user: Option<User>,
    pub object: Option<Value>,
    pub old_object: Option<Value>,
    pub dry_run: bool,
    /// CreateOptions / UpdateOptions / DeleteOptions.
    pub options: Value,
}

impl Request {
    pub fn is_namespace_object(&self) -> bool {
        self.group.is_empty() && self.resource == "namespaces"
    }

    /// The review for one call; `version` is the one the matching rule named (Equivalent matching
    /// may pick another served version than the request's; the object is relabelled to it).
    pub fn review(&self, uid: &str, version: &str) -> Value {
        let gv = |v: &str| {
            if self.group.is_empty() {
                v.to_string()
            } else {
                format!("{}/{v}", self.group)
            }
        };
        let relabel = |o: &Option<Value>| match o {
            Some(o) if version != self.version => {
                let mut o = o.clone();
                o["apiVersion"] = json!(gv(version));
                o
            }
            Some(o) => o.clone(),
            None => Value::Null,
        };
        let user = match &self.user {
            Some(u) => json!({"username": u.name, "groups": u.groups}),
            None => json!({"username": "system:anonymous", "groups": ["system:unauthenticated"]}),
        };
        let mut request = json!({
            "uid": uid,
            "kind": {"group": self.group, "version": version, "kind": self.kind},
            "resource": {"group": self.group, "version": version, "resource": self.resource},
            "requestKind": {"group": self.group, "version": self.version, "kind": self.kind},
            "requestResource": {"group": self.group, "version": self.version, "resource": self.resource},
            "name": self.name,
            "operation": self.operation.as_str(),
            "userInfo": user,
            "object": relabel(&self.object),
            "oldObject": relabel(&self.old_object),
            "dryRun": self.dry_run,
            "options": self.options,
        });
        if !self.subresource.is_empty() {
            request["subResource"] = json!(self.subresource);
            request["requestSubResource"] = json!(self.subresource);
        }
        if !self.namespace.is_empty() {
            request["namespace"] = json!(self.namespace);
        }
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request})
    }
}

/// The options object upstream puts in `request.options`.
pub fn options(operation: Operation, dry_run: bool, field_manager: Option<&str>) -> Value {
    let kind = match operation {
        Operation::Create => "CreateOptions",
        Operation::Update => "UpdateOptions",
        Operation::Delete => "DeleteOptions",
        // Upstream passes no options object on a connect.
        Operation::Connect => return Value::Null,
    };
    let mut o = json!({"kind": kind, "apiVersion": "meta.k8s.io/v1"});
    if dry_run {
        o["dryRun"] = json!(["All"]);
    }
    if let Some(m) = field_manager.filter(|_| operation != Operation::Delete) {
        o["fieldManager"] = json!(m);
    }
    o
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub fn configmap_create() -> Request {
        Request {
            operation: Operation::Create,
            group: String::new(),
            version: "v1".into(),
            kind: "ConfigMap".into(),
            resource: "configmaps".into(),
            subresource: String::new(),
            served_versions: vec!["v1".into()],
            name: "cm".into(),
            namespace: "default".into(),
            cluster_scoped: false,
            user: Some(User {
                name: "alice".into(),
                groups: vec!["dev".into()],
            }),
            object: Some(json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "cm", "namespace": "default", "labels": {"app": "web"}}})),
            old_object: None,
            dry_run: false,
            options: options(Operation::Create, false, Some("kubectl")),
        }
    }

    #[test]
    fn review_has_upstreams_fields() {
        let r = configmap_create().review("u1", "v1");
        assert_eq!(r["apiVersion"], "admission.k8s.io/v1");
        let q = &r["request"];
        assert_eq!(q["uid"], "u1");
        assert_eq!(
            q["kind"],
            json!({"group": "", "version": "v1", "kind": "ConfigMap"})
        );
        assert_eq!(q["resource"]["resource"], "configmaps");
        assert_eq!(q["requestResource"], q["resource"]);
        assert_eq!(q["operation"], "CREATE");
        assert_eq!(q["namespace"], "default");
        assert_eq!(q["userInfo"]["username"], "alice");
        assert_eq!(q["oldObject"], Value::Null);
        assert_eq!(q["dryRun"], false);
        assert_eq!(
            q["options"],
            json!({"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1", "fieldManager": "kubectl"})
        );
        assert!(q.get("subResource").is_none());
    }

    #[test]
    fn equivalent_version_relabels_the_object() {
        let mut req = configmap_create();
        req.group = "apps".into();
        req.object = Some(json!({"apiVersion": "apps/v1"}));
        let q = &req.review("u", "v1beta1")["request"];
        assert_eq!(q["kind"]["version"], "v1beta1");
        assert_eq!(q["requestKind"]["version"], "v1");
        assert_eq!(q["object"]["apiVersion"], "apps/v1beta1");
    }
}
