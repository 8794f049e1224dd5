//! Admission of connect requests (pods/exec, pods/attach, pods/portforward): upstream runs the
//! admission chain with operation CONNECT before it dials the kubelet, the request's options
//! (PodExecOptions, PodAttachOptions, PodPortForwardOptions) as `object`, no old object and no
//! options. A webhook or policy can deny an attach or an exec; mutations of the options are ignored,
//! as they cannot change a request already on its way.

use serde_json::{json, Map, Value};

use super::request::{Operation, Request};
use super::{chain, dispatch, select, to_api_error, validate_all, warnings};
use crate::admission::context::AdmissionContext;
use crate::request::Target;
use crate::status::ApiError;

/// The options object of a connect, from the request's query pairs (repeated `command` kept in
/// order, booleans as the query decoder reads them, empty fields left out as Go's omitempty does).
pub fn options_object(subresource: &str, query: &[(String, String)]) -> Option<Value> {
    let get = |k: &str| query.iter().find(|(q, _)| q == k).map(|(_, v)| v.as_str());
    let flag = |k: &str| get(k).is_some_and(crate::request::flag);
    let mut o = Map::new();
    let kind = match subresource {
        "exec" => "PodExecOptions",
        "attach" => "PodAttachOptions",
        "portforward" => "PodPortForwardOptions",
        _ => return None,
    };
    o.insert("kind".into(), json!(kind));
    o.insert("apiVersion".into(), json!("v1"));
    if subresource == "portforward" {
        let ports: Vec<i64> = query
            .iter()
            .filter(|(k, _)| k == "ports")
            .flat_map(|(_, v)| v.split(','))
            .filter_map(|p| p.trim().parse().ok())
            .collect();
        if !ports.is_empty() {
            o.insert("ports".into(), json!(ports));
        }
        return Some(Value::Object(o));
    }
    for (key, field) in [
        ("stdin", "stdin"),
        ("stdout", "stdout"),
        ("stderr", "stderr"),
        ("tty", "tty"),
    ] {
        if flag(key) {
            o.insert(field.into(), json!(true));
        }
    }
    if let Some(c) = get("container").filter(|c| !c.is_empty()) {
        o.insert("container".into(), json!(c));
    }
    if subresource == "exec" {
        let command: Vec<&str> = query
            .iter()
            .filter(|(k, _)| k == "command")
            .map(|(_, v)| v.as_str())
            .collect();
        o.insert("command".into(), json!(command));
    }
    Some(Value::Object(o))
}

/// Runs mutating (answers ignored but denials count) and validating webhooks and the validating
/// admission policies for a connect to `target`'s pod.
pub async fn admit_connect(
    state: &AdmissionContext<'_>,
    target: &Target,
    subresource: &str,
    options: Value,
) -> Result<(), ApiError> {
    let Some((mutating, validating)) = chain(state) else {
        return Ok(());
    };
    let spec = target.spec;
    let req = Request {
        operation: Operation::Connect,
        group: spec.group.to_string(),
        version: spec.version.to_string(),
        kind: options["kind"].as_str().unwrap_or_default().to_string(),
        resource: spec.plural.to_string(),
        subresource: subresource.to_string(),
        served_versions: vec![spec.version.to_string()],
        name: target.name.clone().unwrap_or_default(),
        namespace: target.namespace.clone().unwrap_or_default(),
        cluster_scoped: !spec.namespaced,
        user: target.requester.user.clone(),
        object: Some(options),
        old_object: None,
        dry_run: false,
        options: Value::Null,
    };
    let caller = super::call::HttpsCaller {
        store: state.store.clone(),
    };
    let mut labels = None;
    let mut warnings = Vec::new();
    let selected = select(state, mutating, &req, &mut labels).await?;
    let mut view = req.clone();
    if let Err(r) = dispatch::mutate(&caller, &selected, &mut view, &mut warnings).await {
        warnings.iter().for_each(|w| warnings::add(w));
        return Err(to_api_error(r));
    }
    validate_all(state, &caller, validating, &req, &mut labels, warnings).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn exec_attach_and_portforward_options_are_upstreams_objects() {
        let exec = options_object(
            "exec",
            &q(&[
                ("command", "sh"),
                ("command", "-c"),
                ("command", "echo hi"),
                ("stdout", "true"),
                ("stderr", "1"),
                ("stdin", "false"),
                ("container", "app"),
            ]),
        )
        .unwrap();
        assert_eq!(
            exec,
            json!({"kind": "PodExecOptions", "apiVersion": "v1", "stdout": true, "stderr": true,
                   "container": "app", "command": ["sh", "-c", "echo hi"]})
        );
        let attach = options_object("attach", &q(&[("stdin", "true"), ("tty", "true")])).unwrap();
        assert_eq!(
            attach,
            json!({"kind": "PodAttachOptions", "apiVersion": "v1", "stdin": true, "tty": true})
        );
        let pf = options_object("portforward", &q(&[("ports", "80,8080")])).unwrap();
        assert_eq!(pf["ports"], json!([80, 8080]));
        assert_eq!(options_object("log", &[]), None);
    }
}
