//! MutatingAdmissionPolicy with MutatingAdmissionPolicyBinding: the first mutating plugin of the
//! chain, before the mutating webhooks, as upstream orders `MutatingAdmissionPolicy` ahead of
//! `MutatingAdmissionWebhook`. Each binding (in name order) whose policy and binding match the
//! request runs the policy's mutations once per param, in order: an ApplyConfiguration expression
//! yields an `Object{…}` merged into the object as server-side apply merges
//! (`fieldmanager::merge`), a JSONPatch expression a list of `JSONPatch{…}` operations applied as
//! a JSON patch (`crate::patch`; a failed `test` leaves the object as it was). Errors — a
//! matchCondition or mutation that fails to evaluate, a patch that does not apply, a binding whose
//! params cannot be found — reject the request unless the policy's failurePolicy is Ignore, with
//! upstream's texts (`policy 'p' with binding 'b' denied request: …`).
//!
//! Reinvocation follows upstream's `policyReinvokeContext`: when the object changes after a
//! policy with reinvocationPolicy IfNeeded ran (by a later policy, or by the webhooks), the chain's
//! second pass (`run` with `reinvoke`) runs those policies once more.
//!
//! Expressions see the `authorizer` (RBAC for the requesting user, asked between evaluation
//! rounds: `access::evaluate_with_authorizer`) and `variables`, evaluated lazily as upstream's
//! composition does — each at most once per evaluation, only when read, so an unused failing
//! variable is no error; each mutation evaluates them against the object as it is then.

use std::collections::BTreeSet;
use std::sync::Arc;

use serde_json::{json, Map, Value};

use super::access::{evaluate_with_authorizer, AccessChecker};
use super::hook::parse_conditions;
use super::policy::{evaluate_match_only, params_for};
use super::request::{Operation, Request};
use crate::admission::context::AdmissionContext;
use crate::cel::authz::AuthorizerVal;
use crate::cel::mutation::{apply_configuration, json_patch, MutationProgram};
use crate::cel::{Activation, Program};
use crate::list_keys::{apply_list, field_path, item_path, ApplyList};
use crate::patch::{self, PatchType};
use crate::registry::lifecycle::from_stored;
use crate::registry::resources::NAMESPACES;
use crate::status::ApiError;

/// Policy, binding and param names: one invocation's identity across the two passes.
type Key = (String, String, String);

/// One policy × binding × param that matched the request.
struct Invocation {
    policy: Arc<Value>,
    binding: Arc<Value>,
    param: Value,
    key: Key,
}

/// A failure upstream collects as a `PolicyError` and reports after the pass.
struct PolicyError {
    policy: Arc<Value>,
    binding: Option<String>,
    message: String,
    /// metav1.StatusReason the failure carries (Invalid for evaluation errors, none for
    /// configuration errors, which keep Forbidden).
    invalid: bool,
}

impl PolicyError {
    fn text(&self) -> String {
        let policy = self.policy["metadata"]["name"].as_str().unwrap_or("");
        match &self.binding {
            Some(b) => format!(
                "policy '{policy}' with binding '{b}' denied request: {}",
                self.message
            ),
            None => format!("policy {policy:?} denied request: {}", self.message),
        }
    }
}

fn name(obj: &Value) -> String {
    obj["metadata"]["name"].as_str().unwrap_or("").to_string()
}

/// The matched policies of one request, across the chain's passes.
pub struct Session {
    invocations: Vec<Invocation>,
    /// Configuration errors found while matching (params not found, paramKind not served).
    config_errors: Vec<PolicyError>,
    namespace_object: Value,
    /// IfNeeded invocations that ran already.
    reinvocable: BTreeSet<Key>,
    /// Invocations the second pass runs again.
    to_reinvoke: BTreeSet<Key>,
    /// The object as the policies last left it.
    last_output: Option<Value>,
    /// Refuse apply configurations that set atomic lists (built-in kinds, whose list types
    /// `list_keys` knows; a custom resource's are in its schema).
    check_atomics: bool,
}

/// The object after one mutation: decoded and defaulted again, as upstream converts and defaults
/// a patched object before the next plugin sees it.
pub type Normalize<'a> = dyn Fn(Value) -> Result<Value, ApiError> + Send + Sync + 'a;

impl Session {
    /// The invocations this request matches, or `None` when no policy can apply (no bindings, a
    /// delete: a MutatingAdmissionPolicy may not match DELETE, or a connect).
    pub async fn prepare(
        state: &AdmissionContext<'_>,
        req: &Request,
        builtin: bool,
    ) -> Result<Option<Session>, ApiError> {
        if !matches!(req.operation, Operation::Create | Operation::Update) {
            return Ok(None);
        }
        let (policies, bindings) = state.webhooks.mutating_policies();
        if policies.is_empty() || bindings.is_empty() {
            return Ok(None);
        }
        let mut namespace_object = Value::Null;
        let mut ns_labels: Option<Map<String, Value>> = None;
        if !req.cluster_scoped && !req.namespace.is_empty() {
            if let Some(v) = state
                .store
                .get(&NAMESPACES.key(None, &req.namespace))
                .await
                .map_err(crate::storage_status::store_error)?
            {
                namespace_object = from_stored(&v.value, v.mod_revision)?;
                ns_labels = Some(
                    namespace_object["metadata"]["labels"]
                        .as_object()
                        .cloned()
                        .unwrap_or_default(),
                );
            }
        }
        let mut invocations = Vec::new();
        let mut config_errors = Vec::new();
        for binding in &bindings {
            let policy_name = binding["spec"]["policyName"].as_str().unwrap_or("");
            let Some(policy) = policies.iter().find(|p| name(p) == policy_name) else {
                continue;
            };
            if evaluate_match_only(policy, binding, req, ns_labels.as_ref()) {
                continue;
            }
            match params_for(state, policy, binding, req).await {
                Ok(None) => {}
                Ok(Some(params)) if params.is_empty() => config_errors.push(PolicyError {
                    policy: policy.clone(),
                    binding: Some(name(binding)),
                    message: "failed to configure binding: no params found for policy binding with `Deny` parameterNotFoundAction".into(),
                    invalid: false,
                }),
                Ok(Some(params)) => {
                    for param in params {
                        let key = (name(policy), name(binding), name(&param));
                        invocations.push(Invocation {
                            policy: policy.clone(),
                            binding: binding.clone(),
                            param,
                            key,
                        });
                    }
                }
                Err(message) => config_errors.push(PolicyError {
                    policy: policy.clone(),
                    binding: Some(name(binding)),
                    message,
                    invalid: false,
                }),
            }
        }
        if invocations.is_empty() && config_errors.is_empty() {
            return Ok(None);
        }
        Ok(Some(Session {
            invocations,
            config_errors,
            namespace_object,
            reinvocable: BTreeSet::new(),
            to_reinvoke: BTreeSet::new(),
            last_output: None,
            check_atomics: builtin,
        }))
    }

    /// One pass of the policies over `req.object`; returns whether it changed. `reinvoke` is the
    /// chain's second pass: only the IfNeeded invocations that something changed the object
    /// after run again. `checker` answers the `authorizer`'s checks.
    pub async fn run(
        &mut self,
        req: &mut Request,
        reinvoke: bool,
        normalize: &Normalize<'_>,
        checker: &dyn AccessChecker,
    ) -> Result<bool, ApiError> {
        let mut errors = if reinvoke {
            Vec::new()
        } else {
            std::mem::take(&mut self.config_errors)
        };
        if reinvoke && self.last_output.as_ref() != req.object.as_ref() {
            // Plugins after the policies (the webhooks) changed the object.
            self.to_reinvoke = self.reinvocable.clone();
        }
        let mut changed = false;
        for inv in &self.invocations {
            if reinvoke && !self.to_reinvoke.contains(&inv.key) {
                continue;
            }
            let before = req.object.clone();
            let context = (&self.namespace_object, self.check_atomics);
            // Each round runs the invocation on the object as it came in; the last round, in
            // which every authorizer check it reached was answered, is the one kept.
            let start: &Request = req;
            let (after, mut failed, outcome) =
                evaluate_with_authorizer(start, checker, |authorizer| {
                    let mut attempt = start.clone();
                    let mut failed = Vec::new();
                    let outcome = invoke(
                        inv,
                        &mut attempt,
                        context,
                        normalize,
                        &mut failed,
                        authorizer,
                    );
                    (attempt, failed, outcome)
                })
                .await;
            outcome?;
            *req = after;
            errors.append(&mut failed);
            if req.object != before {
                changed = true;
                // Every IfNeeded policy that ran before this change sees the result once more.
                self.to_reinvoke = self.reinvocable.clone();
            }
            if inv.policy["spec"]["reinvocationPolicy"] == "IfNeeded" {
                self.reinvocable.insert(inv.key.clone());
            }
        }
        self.last_output = req.object.clone();
        errors.retain(|e| e.policy["spec"]["failurePolicy"] != "Ignore");
        if errors.is_empty() {
            return Ok(changed);
        }
        Err(rejection(req, &errors))
    }
}

/// Upstream's aggregate: a 403 whose message and reason are the first failure's, every failure
/// a cause.
fn rejection(req: &Request, errors: &[PolicyError]) -> ApiError {
    let first = &errors[0];
    let mut err = crate::admission::forbidden(&req.group, &req.resource, &req.name, "");
    err.message = first.text();
    if first.invalid {
        err.reason = "Invalid";
    }
    let causes: Vec<Value> = errors
        .iter()
        .map(|e| json!({"message": e.text()}))
        .collect();
    if let Some(d) = err.details.as_mut() {
        d["causes"] = json!(causes);
    }
    err
}

/// A policy expression's failure text, as upstream's.
fn eval_bool(expression: &str, activation: &Activation) -> Result<bool, String> {
    match Program::compile(expression).and_then(|p| activation.eval(&p)) {
        Ok(Value::Bool(b)) => Ok(b),
        Ok(other) => Err(format!(
            "expression '{expression}' must evaluate to bool, got {other}"
        )),
        Err(e) => Err(format!("expression '{expression}' resulted in error: {e}")),
    }
}

/// One invocation: matchConditions, then each mutation in order, with lazy variables and the
/// `authorizer` bound. Failures are collected in `errors`; an `Err` is a failure upstream returns
/// at once (a mutated object that no longer decodes).
fn invoke(
    inv: &Invocation,
    req: &mut Request,
    (namespace_object, check_atomics): (&Value, bool),
    normalize: &Normalize<'_>,
    errors: &mut Vec<PolicyError>,
    authorizer: AuthorizerVal,
) -> Result<(), ApiError> {
    let spec = &inv.policy["spec"];
    let fail = |message: String, errors: &mut Vec<PolicyError>| {
        errors.push(PolicyError {
            policy: inv.policy.clone(),
            binding: Some(name(&inv.binding)),
            message,
            invalid: true,
        })
    };
    let review = req.review("", &req.version);
    let request = review["request"].clone();
    let variables: Vec<(String, Result<Arc<Program>, _>)> = spec["variables"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|v| {
            let expression = v["expression"].as_str().unwrap_or("");
            (
                v["name"].as_str().unwrap_or("").to_string(),
                Program::compile(expression).map(Arc::new),
            )
        })
        .collect();
    // One activation per evaluation of the object: variables are evaluated at most once in it.
    let activation = |object: &Value| {
        Activation::new(
            vec![
                ("object".into(), object.clone()),
                ("oldObject".into(), request["oldObject"].clone()),
                ("request".into(), request.clone()),
                ("params".into(), inv.param.clone()),
                ("namespaceObject".into(), namespace_object.clone()),
            ],
            Some(authorizer.clone()),
            variables.clone(),
        )
    };
    // matchConditions: any false skips the invocation; an error (with none false) fails it.
    let first = activation(&request["object"]);
    let mut condition_error = None;
    for (cname, expression) in parse_conditions(&spec["matchConditions"]) {
        match eval_bool(&expression, &first) {
            Ok(true) => {}
            Ok(false) => return Ok(()),
            Err(e) => {
                condition_error.get_or_insert(format!("matchCondition {cname:?}: {e}"));
            }
        }
    }
    if let Some(e) = condition_error {
        fail(e, errors);
        return Ok(());
    }
    for m in spec["mutations"].as_array().into_iter().flatten() {
        let Some(current) = req.object.clone() else {
            continue;
        };
        match mutate(m, &current, &activation(&current), check_atomics) {
            Ok(Some(patched)) => req.object = Some(normalize(patched)?),
            Ok(None) => {}
            Err(message) => fail(message, errors),
        }
    }
    Ok(())
}

/// One mutation of `object`: the patched object, or `None` when a JSON patch's `test` failed.
fn mutate(
    m: &Value,
    object: &Value,
    activation: &Activation,
    check_atomics: bool,
) -> Result<Option<Value>, String> {
    let (expression, apply) = match m["patchType"].as_str() {
        Some("ApplyConfiguration") => (&m["applyConfiguration"]["expression"], true),
        Some("JSONPatch") => (&m["jsonPatch"]["expression"], false),
        other => return Err(format!("unsupported patch type {other:?}")),
    };
    let expression = expression.as_str().unwrap_or("");
    let program = MutationProgram::compile(expression).map_err(|e| e.to_string())?;
    let result = program
        .execute_in(activation)
        .map_err(|e| format!("expression '{expression}' resulted in error: {e}"))?;
    if apply {
        let config = apply_configuration(&result)?;
        if check_atomics {
            let mut atomics = Vec::new();
            find_atomics(&config, "", "", &mut atomics);
            if !atomics.is_empty() {
                return Err(format!(
                    "error applying patch: invalid ApplyConfiguration: may not mutate atomic arrays, maps or structs: {}",
                    atomics.join(", ")
                ));
            }
        }
        let mut patched = object.clone();
        crate::fieldmanager::merge::merge_applied(&mut patched, &config);
        return Ok(Some(patched));
    }
    let ops = json_patch(&result)?;
    match patch::apply(PatchType::Json, object, &ops) {
        Ok(patched) => Ok(Some(patched)),
        // A failed `test` means the patch is not applied, and is no error (upstream checks for
        // jsonpatch.ErrTestFailed; kiln's patch reports it as `test failed at …`).
        Err(e) if e.to_string().contains("test failed at") => Ok(None),
        Err(e) => Err(format!("JSONPath: {e}")),
    }
}

/// The atomic lists an apply configuration sets (`findAtomics`): merging would replace them
/// whole, dropping items the configuration does not list. `display` is upstream's field path
/// (`.spec.containers[0].command`).
fn find_atomics(value: &Value, schema: &str, display: &str, out: &mut Vec<String>) {
    match value {
        Value::Object(fields) => {
            for (k, v) in fields {
                find_atomics(v, &field_path(schema, k), &format!("{display}.{k}"), out);
            }
        }
        Value::Array(items) => {
            if apply_list(schema) == ApplyList::Atomic {
                out.push(display.to_string());
            }
            let item = item_path(schema);
            for (i, v) in items.iter().enumerate() {
                find_atomics(v, &item, &format!("{display}[{i}]"), out);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(obj: &Value) -> Activation {
        Activation::new(vec![("object".into(), obj.clone())], None, Vec::new())
    }

    #[test]
    fn apply_configuration_merges_keyed_lists() {
        let pod = json!({"metadata": {"name": "p", "labels": {"a": "1"}},
            "spec": {"containers": [{"name": "app", "image": "x", "env": [{"name": "A", "value": "1"}]}]}});
        let m = json!({"patchType": "ApplyConfiguration", "applyConfiguration": {"expression":
            "Object{metadata: Object.metadata{labels: {'b': '2'}}, spec: Object.spec{containers: [Object.spec.containers{name: 'app', env: [Object.spec.containers.env{name: 'B', value: '2'}]}]}}"}});
        let out = mutate(&m, &pod, &vars(&pod), true).unwrap().unwrap();
        assert_eq!(out["metadata"]["labels"], json!({"a": "1", "b": "2"}));
        assert_eq!(
            out["spec"]["containers"][0]["env"],
            json!([{"name": "A", "value": "1"}, {"name": "B", "value": "2"}])
        );
        assert_eq!(out["spec"]["containers"][0]["image"], "x");
    }

    #[test]
    fn atomic_lists_are_refused() {
        let pod = json!({"spec": {"containers": [{"name": "app", "command": ["a"]}]}});
        let m = json!({"patchType": "ApplyConfiguration", "applyConfiguration": {"expression":
            "Object{spec: Object.spec{containers: [Object.spec.containers{name: 'app', command: ['b']}]}}"}});
        assert_eq!(
            mutate(&m, &pod, &vars(&pod), true).unwrap_err(),
            "error applying patch: invalid ApplyConfiguration: may not mutate atomic arrays, maps or structs: .spec.containers[0].command"
        );
    }

    #[test]
    fn json_patch_applies_and_failed_test_skips() {
        let pod = json!({"spec": {"initContainers": []}});
        let m = json!({"patchType": "JSONPatch", "jsonPatch": {"expression":
            "[JSONPatch{op: 'add', path: '/spec/initContainers/-', value: Object.spec.initContainers{name: 'init', image: 'busybox'}}]"}});
        let out = mutate(&m, &pod, &vars(&pod), true).unwrap().unwrap();
        assert_eq!(
            out["spec"]["initContainers"],
            json!([{"name": "init", "image": "busybox"}])
        );
        let t = json!({"patchType": "JSONPatch", "jsonPatch": {"expression":
            "[JSONPatch{op: 'test', path: '/spec/initContainers', value: [1]}, JSONPatch{op: 'remove', path: '/spec'}]"}});
        assert_eq!(mutate(&t, &pod, &vars(&pod), true).unwrap(), None);
        let bad = json!({"patchType": "JSONPatch", "jsonPatch": {"expression": "[JSONPatch{op: 'remove', path: '/nope'}]"}});
        assert!(mutate(&bad, &pod, &vars(&pod), true)
            .unwrap_err()
            .starts_with("JSONPath: "));
        let err = json!({"patchType": "JSONPatch", "jsonPatch": {"expression": "[JSONPatch{op: 'add', path: object.missing}]"}});
        assert_eq!(
            mutate(&err, &pod, &vars(&pod), true).unwrap_err(),
            "expression '[JSONPatch{op: 'add', path: object.missing}]' resulted in error: no such key: missing"
        );
    }
}
