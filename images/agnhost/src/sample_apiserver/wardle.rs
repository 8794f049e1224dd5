//! The wardle.example.com/v1alpha1 API of k8s.io/sample-apiserver: Flunder (namespaced) and Fischer
//! (cluster-scoped), their defaulting (a Flunder's `referenceType` is `Flunder` when a reference is
//! set), the round trip through the internal type (a `referenceType` other than Flunder or Fischer
//! is dropped with its reference), validation, and the BanFlunder admission plugin (no Flunder may
//! be created under a name some Fischer disallows).

use serde_json::{json, Value};

use super::status::{ApiError, Cause};

pub const GROUP: &str = "wardle.example.com";
pub const VERSION: &str = "v1alpha1";

/// One served resource, as discovery lists it.
#[derive(Debug, PartialEq, Eq)]
pub struct Resource {
    pub plural: &'static str,
    pub singular: &'static str,
    pub kind: &'static str,
    pub namespaced: bool,
}

pub const RESOURCES: &[Resource] = &[
    Resource {
        plural: "fischers",
        singular: "fischer",
        kind: "Fischer",
        namespaced: false,
    },
    Resource {
        plural: "flunders",
        singular: "flunder",
        kind: "Flunder",
        namespaced: true,
    },
];

/// The verbs every wardle resource serves (the generic registry's, without watch: this server
/// keeps no event history).
pub const VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
];

pub fn resource(plural: &str) -> Option<&'static Resource> {
    RESOURCES.iter().find(|r| r.plural == plural)
}

pub fn api_version() -> String {
    format!("{GROUP}/{VERSION}")
}

/// Defaulting, then the round trip through the internal Flunder spec.
fn normalize_flunder_spec(spec: &mut Value) {
    let Some(obj) = spec.as_object_mut() else {
        *spec = json!({});
        return;
    };
    let reference = obj
        .get("reference")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let kind = obj
        .get("referenceType")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let kind = if kind.is_empty() && !reference.is_empty() {
        "Flunder".to_string()
    } else {
        kind
    };
    obj.remove("reference");
    obj.remove("referenceType");
    if kind == "Flunder" || kind == "Fischer" {
        obj.insert("referenceType".into(), json!(kind));
        if !reference.is_empty() {
            obj.insert("reference".into(), json!(reference));
        }
    }
}

/// Defaults and normalizes an object of `res` as the server stores it.
pub fn normalize(res: &Resource, obj: &mut Value) {
    match res.kind {
        "Flunder" => {
            if obj.get("spec").is_none() {
                obj["spec"] = json!({});
            }
            normalize_flunder_spec(&mut obj["spec"]);
            if obj.get("status").is_none() {
                obj["status"] = json!({});
            }
        }
        _ => {
            let empty = obj
                .get("disallowedFlunders")
                .is_some_and(|l| l.is_null() || l.as_array().is_some_and(Vec::is_empty));
            if let (true, Some(o)) = (empty, obj.as_object_mut()) {
                o.remove("disallowedFlunders");
            }
        }
    }
}

/// ValidateFlunderSpec over the internal form (a reference of the type the spec names).
pub fn validate(res: &Resource, obj: &Value) -> Result<(), ApiError> {
    let name = obj["metadata"]["name"].as_str().unwrap_or("");
    let mut causes = super::meta::validate_name(name);
    if res.kind == "Flunder" {
        let spec = &obj["spec"];
        let kind = spec["referenceType"].as_str().unwrap_or("");
        let reference = spec["reference"].as_str().unwrap_or("");
        if reference.is_empty() && kind == "Fischer" {
            causes.push(Cause::required(
                "spec.fischerReference",
                "cannot be empty if referenceType is Fischer",
            ));
        } else if reference.is_empty() && kind == "Flunder" {
            causes.push(Cause::required(
                "spec.flunderReference",
                "cannot be empty if referenceType is Flunder",
            ));
        }
    } else if let Some(list) = obj.get("disallowedFlunders") {
        if !list.is_array()
            || list
                .as_array()
                .is_some_and(|l| l.iter().any(|v| !v.is_string()))
        {
            causes.push(Cause::invalid(
                "disallowedFlunders",
                &list.to_string(),
                "must be a list of names",
            ));
        }
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(GROUP, res.kind, name, &causes))
    }
}

/// BanFlunder: creating a Flunder whose name a Fischer lists is forbidden.
pub fn ban_flunder<'a>(
    name: &str,
    mut fischers: impl Iterator<Item = &'a Value>,
) -> Result<(), ApiError> {
    let banned = fischers.any(|f| {
        f["disallowedFlunders"]
            .as_array()
            .is_some_and(|l| l.iter().any(|n| n.as_str() == Some(name)))
    });
    if banned {
        return Err(ApiError::forbidden(
            GROUP,
            "flunders",
            name,
            "this name may not be used, please change the resource name",
        ));
    }
    Ok(())
}

/// The `/apis/wardle.example.com/v1alpha1` APIResourceList.
pub fn resource_list() -> Value {
    let resources: Vec<Value> = RESOURCES
        .iter()
        .map(|r| {
            json!({"name": r.plural, "singularName": r.singular, "namespaced": r.namespaced,
                "kind": r.kind, "verbs": VERBS})
        })
        .collect();
    json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": api_version(),
        "resources": resources})
}

/// The APIGroup document (`/apis/wardle.example.com`, and its entry in `/apis`).
pub fn api_group() -> Value {
    let v = json!({"groupVersion": api_version(), "version": VERSION});
    json!({"kind": "APIGroup", "apiVersion": "v1", "name": GROUP, "versions": [v.clone()],
        "preferredVersion": v})
}

pub fn api_group_list() -> Value {
    let mut group = api_group();
    if let Some(g) = group.as_object_mut() {
        g.remove("kind");
        g.remove("apiVersion");
    }
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": [group]})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flunder(spec: Value) -> Value {
        let mut f = json!({"metadata": {"name": "f1"}, "spec": spec});
        normalize(resource("flunders").unwrap(), &mut f);
        f
    }

    #[test]
    fn a_reference_defaults_its_type_and_unknown_types_drop_out() {
        assert_eq!(
            flunder(json!({"reference": "x"}))["spec"],
            json!({"reference": "x", "referenceType": "Flunder"})
        );
        assert_eq!(
            flunder(json!({"reference": "x", "referenceType": "Other"}))["spec"],
            json!({})
        );
        assert_eq!(flunder(json!(null))["status"], json!({}));
    }

    #[test]
    fn a_fischer_reference_must_name_something() {
        let f = flunder(json!({"referenceType": "Fischer"}));
        let e = validate(resource("flunders").unwrap(), &f).unwrap_err();
        assert_eq!(e.code, 422);
        assert!(
            e.message
                .ends_with("spec.fischerReference: Required value: cannot be empty if referenceType is Fischer"),
            "{}",
            e.message
        );
        assert!(validate(resource("flunders").unwrap(), &flunder(json!({}))).is_ok());
    }

    #[test]
    fn a_name_some_fischer_disallows_is_forbidden() {
        let fischers = [json!({"disallowedFlunders": ["bad"]}), json!({})];
        let e = ban_flunder("bad", fischers.iter()).unwrap_err();
        assert_eq!(
            e.message,
            "flunders.wardle.example.com \"bad\" is forbidden: this name may not be used, please change the resource name"
        );
        assert!(ban_flunder("good", fischers.iter()).is_ok());
    }

    #[test]
    fn discovery_lists_both_kinds() {
        let l = resource_list();
        assert_eq!(l["groupVersion"], "wardle.example.com/v1alpha1");
        let names: Vec<&str> = l["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["fischers", "flunders"]);
        assert_eq!(api_group_list()["groups"][0]["name"], GROUP);
    }
}
