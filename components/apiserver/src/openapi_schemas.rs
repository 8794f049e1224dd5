//! The schema definitions the OpenAPI documents carry: built-in kinds from k8s-openapi's generated
//! schemas (upstream's own OpenAPI, so descriptions and `$ref` names match), and custom resources
//! from their CRD's openAPIV3Schema, completed as upstream's CRD OpenAPI builder does (apiVersion,
//! kind, metadata as ObjectMeta, a `<Kind>List`, `x-kubernetes-group-version-kind`).

use std::collections::{BTreeSet, HashMap};
use std::sync::OnceLock;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ListMeta, ObjectMeta};
use k8s_openapi::schemars::generate::{SchemaGenerator, SchemaSettings};
use k8s_openapi::schemars::JsonSchema;
use k8s_openapi::Resource;
use serde_json::{json, Map, Value};

use crate::registry::ResourceSpec;

/// OpenAPI v2 (`#/definitions/`) or v3 (`#/components/schemas/`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Flavor {
    V2,
    V3,
}

impl Flavor {
    fn ref_prefix(self) -> &'static str {
        match self {
            Flavor::V2 => "#/definitions/",
            Flavor::V3 => "#/components/schemas/",
        }
    }

    /// A reference with a description: v3 wraps it in `allOf` (siblings of `$ref` are ignored
    /// there), v2 puts them side by side — each as upstream writes it.
    fn described_ref(self, name: &str, description: &str) -> Value {
        let reference = format!("{}{name}", self.ref_prefix());
        match self {
            Flavor::V2 => json!({"$ref": reference, "description": description}),
            Flavor::V3 => json!({"allOf": [{"$ref": reference}], "description": description}),
        }
    }
}

const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";
const LIST_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta";
const API_VERSION_DOC: &str = "APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources";
const KIND_DOC: &str = "Kind is a string value representing the REST resource this object represents. Servers may infer this from the endpoint the client submits requests to. Cannot be updated. In CamelCase. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds";
const METADATA_DOC: &str = "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";
const LIST_METADATA_DOC: &str = "Standard list metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#lists-and-simple-lists";

/// Every built-in definition, and which one is each kind's.
struct Builtin {
    definitions: Map<String, Value>,
    kinds: HashMap<(&'static str, &'static str, &'static str), String>,
}

/// Registers each type's schema with the generator and returns (group, version, kind, name).
macro_rules! builtin_kinds {
    ($($t:ty),* $(,)?) => {
        fn generate_kinds(
            generator: &mut SchemaGenerator,
        ) -> Vec<(&'static str, &'static str, &'static str, String)> {
            vec![$({
                generator.subschema_for::<$t>();
                (
                    <$t as Resource>::GROUP,
                    <$t as Resource>::VERSION,
                    <$t as Resource>::KIND,
                    <$t as JsonSchema>::schema_name().into_owned(),
                )
            }),*]
        }
    };
}

builtin_kinds!(
    k8s_openapi::api::core::v1::ConfigMap,
    k8s_openapi::api::core::v1::Endpoints,
    k8s_openapi::api::core::v1::Event,
    k8s_openapi::api::core::v1::Namespace,
    k8s_openapi::api::core::v1::Node,
    k8s_openapi::api::core::v1::PersistentVolume,
    k8s_openapi::api::core::v1::PersistentVolumeClaim,
    k8s_openapi::api::core::v1::Pod,
    k8s_openapi::api::core::v1::PodTemplate,
    k8s_openapi::api::core::v1::ReplicationController,
    k8s_openapi::api::core::v1::Secret,
    k8s_openapi::api::core::v1::Service,
    k8s_openapi::api::core::v1::ServiceAccount,
    k8s_openapi::api::apps::v1::ControllerRevision,
    k8s_openapi::api::apps::v1::DaemonSet,
    k8s_openapi::api::apps::v1::Deployment,
    k8s_openapi::api::apps::v1::ReplicaSet,
    k8s_openapi::api::apps::v1::StatefulSet,
    k8s_openapi::api::batch::v1::CronJob,
    k8s_openapi::api::batch::v1::Job,
    k8s_openapi::api::coordination::v1::Lease,
    k8s_openapi::api::discovery::v1::EndpointSlice,
    k8s_openapi::api::events::v1::Event,
    k8s_openapi::api::policy::v1::PodDisruptionBudget,
    k8s_openapi::api::rbac::v1::ClusterRole,
    k8s_openapi::api::rbac::v1::ClusterRoleBinding,
    k8s_openapi::api::rbac::v1::Role,
    k8s_openapi::api::rbac::v1::RoleBinding,
    k8s_openapi::api::storage::v1::CSIDriver,
    k8s_openapi::api::storage::v1::CSINode,
    k8s_openapi::api::storage::v1::CSIStorageCapacity,
    k8s_openapi::api::storage::v1::StorageClass,
    k8s_openapi::api::storage::v1::VolumeAttachment,
    k8s_openapi::api::certificates::v1::CertificateSigningRequest,
    k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration,
    k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration,
    k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicy,
    k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicyBinding,
    k8s_openapi::api::admissionregistration::v1alpha1::MutatingAdmissionPolicy,
    k8s_openapi::api::admissionregistration::v1alpha1::MutatingAdmissionPolicyBinding,
    k8s_openapi::api::authorization::v1::SelfSubjectAccessReview,
    k8s_openapi::api::authorization::v1::SelfSubjectRulesReview,
    k8s_openapi::api::authorization::v1::SubjectAccessReview,
    k8s_openapi::api::authentication::v1::SelfSubjectReview,
    k8s_openapi::api::authentication::v1::TokenReview,
    k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
);

fn generate(flavor: Flavor) -> Builtin {
    let settings = match flavor {
        Flavor::V3 => SchemaSettings::openapi3(),
        // Draft 7 without transforms: `#/definitions/`, `$ref` with sibling descriptions and no
        // `nullable`, as upstream's v2 document has them.
        Flavor::V2 => {
            let mut settings = SchemaSettings::draft07();
            settings.transforms.clear();
            settings
        }
    };
    let mut generator = SchemaGenerator::new(settings);
    generator.subschema_for::<ObjectMeta>();
    generator.subschema_for::<ListMeta>();
    let kinds = generate_kinds(&mut generator);
    let mut definitions = generator.take_definitions(true);
    let mut by_gvk = HashMap::new();
    for (group, version, kind, name) in kinds {
        if let Some(def) = definitions.get_mut(&name) {
            def["x-kubernetes-group-version-kind"] = gvk_list(group, version, kind);
        }
        by_gvk.insert((group, version, kind), name);
    }
    Builtin {
        definitions,
        kinds: by_gvk,
    }
}

/// Generated once per flavor: the schemas are static, and generating them takes milliseconds.
fn builtin(flavor: Flavor) -> &'static Builtin {
    static V2: OnceLock<Builtin> = OnceLock::new();
    static V3: OnceLock<Builtin> = OnceLock::new();
    match flavor {
        Flavor::V2 => V2.get_or_init(|| generate(Flavor::V2)),
        Flavor::V3 => V3.get_or_init(|| generate(Flavor::V3)),
    }
}

fn gvk_list(group: &str, version: &str, kind: &str) -> Value {
    json!([{"group": group, "kind": kind, "version": version}])
}

/// upstream's ToRESTFriendlyName for a CR: the group reversed, then version and kind
/// (`stable.example.com`/v1/CronTab → `com.example.stable.v1.CronTab`).
pub fn custom_definition_name(group: &str, version: &str, kind: &str) -> String {
    let reversed: Vec<&str> = group.split('.').rev().collect();
    format!("{}.{version}.{kind}", reversed.join("."))
}

/// The CRD's schema made fit for OpenAPI v2: v2 has no `nullable`, `oneOf`, `anyOf` or `not`.
/// A nullable field loses its type, so v2 clients do not reject a null there.
fn to_v2(schema: &mut Value) {
    match schema {
        Value::Object(fields) => {
            if fields.remove("nullable") == Some(Value::Bool(true)) {
                fields.remove("type");
            }
            for key in ["oneOf", "anyOf", "not"] {
                fields.remove(key);
            }
            for (key, value) in fields.iter_mut() {
                // Literal data (defaults, enums, examples) is not a schema.
                if !matches!(key.as_str(), "default" | "enum" | "example") {
                    to_v2(value);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(to_v2),
        _ => {}
    }
}

/// The CR's definition and its list's, keyed by name.
pub fn custom_definitions(
    spec: &ResourceSpec,
    schema: Option<&Value>,
    flavor: Flavor,
) -> Map<String, Value> {
    let name = custom_definition_name(spec.group, spec.version, spec.kind);
    let mut object = schema
        .cloned()
        .unwrap_or_else(|| json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}));
    let keeps_unknown = object["x-kubernetes-preserve-unknown-fields"] == json!(true);
    if flavor == Flavor::V2 && keeps_unknown {
        // A root that keeps unknown fields says nothing useful in v2: upstream publishes a bare
        // object (buildKubeNative), so clients validate nothing against it.
        object = json!({"type": "object"});
    } else {
        if flavor == Flavor::V2 {
            to_v2(&mut object);
        }
        if !object["properties"].is_object() {
            object["properties"] = json!({});
        }
        let properties = &mut object["properties"];
        if properties.get("apiVersion").is_none() {
            properties["apiVersion"] = json!({"type": "string", "description": API_VERSION_DOC});
        }
        if properties.get("kind").is_none() {
            properties["kind"] = json!({"type": "string", "description": KIND_DOC});
        }
        properties["metadata"] = flavor.described_ref(OBJECT_META, METADATA_DOC);
        object["type"] = json!("object");
    }
    object["x-kubernetes-group-version-kind"] = gvk_list(spec.group, spec.version, spec.kind);

    let list_kind = if spec.list_kind.is_empty() {
        format!("{}List", spec.kind)
    } else {
        spec.list_kind.to_string()
    };
    let list = json!({
        "description": format!("{list_kind} is a list of {}", spec.kind),
        "type": "object",
        "required": ["items"],
        "properties": {
            "apiVersion": {"type": "string", "description": API_VERSION_DOC},
            "kind": {"type": "string", "description": KIND_DOC},
            "items": {
                "type": "array",
                "description": format!("List of {}. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md", spec.plural),
                "items": {"$ref": format!("{}{name}", flavor.ref_prefix())},
            },
            "metadata": flavor.described_ref(LIST_META, LIST_METADATA_DOC),
        },
        "x-kubernetes-group-version-kind": gvk_list(spec.group, spec.version, &list_kind),
    });
    let mut out = Map::new();
    out.insert(
        custom_definition_name(spec.group, spec.version, &list_kind),
        list,
    );
    out.insert(name, object);
    out
}

/// Every `$ref` target named inside `value`.
fn refs(value: &Value, prefix: &str, out: &mut Vec<String>) {
    match value {
        Value::Object(fields) => {
            if let Some(Value::String(r)) = fields.get("$ref") {
                if let Some(name) = r.strip_prefix(prefix) {
                    out.push(name.to_string());
                }
            }
            fields.values().for_each(|v| refs(v, prefix, out));
        }
        Value::Array(items) => items.iter().for_each(|v| refs(v, prefix, out)),
        _ => {}
    }
}

/// The definitions of `specs` (one group-version, or all) with every definition they reference.
pub fn definitions(specs: &[&ResourceSpec], flavor: Flavor) -> Map<String, Value> {
    let builtin = builtin(flavor);
    let mut out = Map::new();
    let mut pending: Vec<String> = Vec::new();
    for spec in specs {
        match spec.custom {
            Some(custom) => {
                let defs = custom_definitions(spec, custom.schema.as_ref(), flavor);
                for def in defs.values() {
                    refs(def, flavor.ref_prefix(), &mut pending);
                }
                out.extend(defs);
            }
            None => {
                if let Some(name) = builtin.kinds.get(&(spec.group, spec.version, spec.kind)) {
                    pending.push(name.clone());
                }
            }
        }
    }
    let mut seen: BTreeSet<String> = out.keys().cloned().collect();
    while let Some(name) = pending.pop() {
        if !seen.insert(name.clone()) {
            continue;
        }
        if let Some(def) = builtin.definitions.get(&name) {
            refs(def, flavor.ref_prefix(), &mut pending);
            out.insert(name, def.clone());
        }
    }
    out
}

/// A built-in kind's v3 schema with every `$ref` written out in place, for the CEL type checker
/// (a ValidatingAdmissionPolicy's typeChecking resolves the matched kinds' schemas as upstream's
/// does, from the OpenAPI). A definition met again inside itself stays an open `{}`; `None` for a
/// kind without a generated schema.
pub fn builtin_schema_inlined(group: &str, version: &str, kind: &str) -> Option<Value> {
    let builtin = builtin(Flavor::V3);
    let name = builtin
        .kinds
        .iter()
        .find(|((g, v, k), _)| *g == group && *v == version && *k == kind)
        .map(|(_, name)| name)?;
    Some(inline_definition(
        &builtin.definitions,
        name,
        &mut Vec::new(),
    ))
}

fn inline_definition(
    definitions: &Map<String, Value>,
    name: &str,
    path: &mut Vec<String>,
) -> Value {
    let Some(def) = definitions.get(name) else {
        return json!({});
    };
    if path.iter().any(|p| p == name) {
        return json!({});
    }
    path.push(name.to_string());
    let out = inline_refs(definitions, def, path);
    path.pop();
    out
}

fn inline_refs(definitions: &Map<String, Value>, value: &Value, path: &mut Vec<String>) -> Value {
    let prefix = Flavor::V3.ref_prefix();
    match value {
        Value::Object(fields) => {
            if let Some(Value::String(r)) = fields.get("$ref") {
                return inline_definition(definitions, r.strip_prefix(prefix).unwrap_or(r), path);
            }
            // v3's described reference: `allOf: [{$ref}]` beside a description.
            if let Some([only]) = fields
                .get("allOf")
                .and_then(Value::as_array)
                .map(Vec::as_slice)
            {
                if only.get("$ref").is_some() {
                    return inline_refs(definitions, only, path);
                }
            }
            let mut out = Map::new();
            for (key, v) in fields {
                // Literal data (defaults, enums, examples) is not a schema.
                let v = if matches!(key.as_str(), "default" | "enum" | "example") {
                    v.clone()
                } else {
                    inline_refs(definitions, v, path)
                };
                out.insert(key.clone(), v);
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(
            items
                .iter()
                .map(|v| inline_refs(definitions, v, path))
                .collect(),
        ),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::resources::PODS;

    const CRONTAB: ResourceSpec = ResourceSpec {
        group: "stable.example.com",
        version: "v1",
        plural: "crontabs",
        singular: "crontab",
        kind: "CronTab",
        list_kind: "CronTabList",
        ..ResourceSpec::BASE
    };

    fn crontab_schema() -> Value {
        json!({"type": "object", "properties": {"spec": {"type": "object",
            "properties": {"cronSpec": {"type": "string", "description": "when"},
                           "replicas": {"type": "integer", "nullable": true}}}}})
    }

    #[test]
    fn custom_resource_gets_type_meta_and_list() {
        let defs = custom_definitions(&CRONTAB, Some(&crontab_schema()), Flavor::V3);
        let obj = &defs["com.example.stable.v1.CronTab"];
        assert_eq!(
            obj["x-kubernetes-group-version-kind"],
            json!([{"group": "stable.example.com", "kind": "CronTab", "version": "v1"}])
        );
        assert_eq!(obj["properties"]["apiVersion"]["type"], "string");
        assert_eq!(
            obj["properties"]["metadata"]["allOf"][0]["$ref"],
            "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
        );
        assert_eq!(
            obj["properties"]["spec"]["properties"]["replicas"]["nullable"],
            true
        );
        let list = &defs["com.example.stable.v1.CronTabList"];
        assert_eq!(
            list["properties"]["items"]["items"]["$ref"],
            "#/components/schemas/com.example.stable.v1.CronTab"
        );
        assert_eq!(
            list["x-kubernetes-group-version-kind"][0]["kind"],
            "CronTabList"
        );
    }

    #[test]
    fn v2_custom_schema_drops_v3_only_keywords() {
        let defs = custom_definitions(&CRONTAB, Some(&crontab_schema()), Flavor::V2);
        let obj = &defs["com.example.stable.v1.CronTab"];
        let replicas = &obj["properties"]["spec"]["properties"]["replicas"];
        assert_eq!(replicas, &json!({}));
        assert_eq!(
            obj["properties"]["metadata"]["$ref"],
            "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
        );
    }

    #[test]
    fn schemaless_custom_resource_preserves_unknown_fields() {
        let defs = custom_definitions(&CRONTAB, None, Flavor::V3);
        assert_eq!(
            defs["com.example.stable.v1.CronTab"]["x-kubernetes-preserve-unknown-fields"],
            true
        );
    }

    #[test]
    fn an_inlined_builtin_schema_has_no_references_left() {
        let d = builtin_schema_inlined("apps", "v1", "Deployment").expect("Deployment schema");
        let mut left = Vec::new();
        refs(&d, Flavor::V3.ref_prefix(), &mut left);
        assert!(left.is_empty(), "{left:?}");
        assert_eq!(
            d["properties"]["spec"]["properties"]["replicas"]["type"],
            "integer"
        );
        assert_eq!(
            d["properties"]["metadata"]["properties"]["labels"]["type"],
            "object"
        );
        let containers = &d["properties"]["spec"]["properties"]["template"]["properties"]["spec"]
            ["properties"]["containers"];
        assert_eq!(containers["items"]["properties"]["name"]["type"], "string");
        assert!(builtin_schema_inlined("apps", "v1", "NoSuchKind").is_none());
    }

    #[test]
    fn builtin_pod_schema_comes_with_its_references() {
        for flavor in [Flavor::V2, Flavor::V3] {
            let defs = definitions(&[&PODS], flavor);
            let pod = &defs["io.k8s.api.core.v1.Pod"];
            assert_eq!(pod["x-kubernetes-group-version-kind"][0]["kind"], "Pod");
            assert!(pod["properties"]["spec"].is_object());
            for needed in [
                "io.k8s.api.core.v1.PodSpec",
                "io.k8s.api.core.v1.Container",
                OBJECT_META,
            ] {
                assert!(defs.contains_key(needed), "{flavor:?}: {needed} missing");
            }
            let mut dangling = Vec::new();
            for def in defs.values() {
                refs(def, flavor.ref_prefix(), &mut dangling);
            }
            dangling.retain(|r| !defs.contains_key(r));
            assert!(dangling.is_empty(), "{flavor:?}: unresolved {dangling:?}");
        }
    }
}
