//! Dynamic admission: MutatingWebhookConfiguration / ValidatingWebhookConfiguration webhooks, called
//! after the built-in plugins and before the store write, mutating first, as upstream's chain.
//! `cache` keeps the configurations, `matching` picks the webhooks, `request` builds the
//! AdmissionReview, `dispatch` orders the calls and reads verdicts, `call` does the HTTPS.
//!
//! MutatingAdmissionPolicies with their bindings run first (`mutating_policy`), then the mutating
//! webhooks; ValidatingAdmissionPolicies with their bindings run last (`policy`).
//! matchConditions are CEL (`crate::cel`) over object/oldObject/request and `authorizer`, whose
//! checks RBAC answers (`access`), for webhooks and ValidatingAdmissionPolicies alike. Connects (exec, attach) are admitted with operation CONNECT (`connect`); the other action
//! subresources (binding, eviction, scale, ...) do not call webhooks yet.

pub mod access;
pub mod cache;
pub mod call;
pub mod connect;
pub mod dispatch;
pub mod hook;
pub mod matching;
pub mod mutating_policy;
pub mod policy;
pub mod request;
pub use crate::warnings;

use std::collections::HashMap;

use serde_json::{Map, Value};

pub use cache::Webhooks;
use dispatch::{Rejection, Selected};
use hook::{Hook, Kind};
pub use request::Operation;
use request::Request;

use crate::admission::context::AdmissionContext;
use crate::registry::admission_registration::GROUP;
use crate::registry::lifecycle::{from_stored, name_of, validate_name};
use crate::registry::resources::NAMESPACES;
use crate::request::Target;
use crate::status::ApiError;

/// Why a webhook call failed (the text after upstream's `failed to call webhook: `).
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    #[error("Post {0:?}: context deadline exceeded")]
    Timeout(String),
    #[error("Post {url:?}: {reason}")]
    Transport { url: String, reason: String },
    #[error("an error on the server ({body:?}) has prevented the request from succeeding (status {code})")]
    Status { code: u16, body: String },
    #[error("invalid webhook URL {0:?}")]
    BadUrl(String),
    #[error("{0}")]
    Resolve(String),
    #[error("{0}")]
    Config(String),
}

/// Admission for a create; `obj` may be changed by mutating webhooks.
pub async fn admit_create(
    state: &AdmissionContext<'_>,
    target: &Target,
    query: &HashMap<String, String>,
    obj: &mut Value,
) -> Result<(), ApiError> {
    run(state, target, query, Operation::Create, None, Some(obj)).await
}

/// Admission for an update or patch of `old` into `new` (which mutating webhooks may change).
pub async fn admit_update(
    state: &AdmissionContext<'_>,
    target: &Target,
    query: &HashMap<String, String>,
    old: &Value,
    new: &mut Value,
) -> Result<(), ApiError> {
    run(
        state,
        target,
        query,
        Operation::Update,
        Some(old),
        Some(new),
    )
    .await
}

/// Admission for a delete of `obj`.
pub async fn admit_delete(
    state: &AdmissionContext<'_>,
    target: &Target,
    query: &HashMap<String, String>,
    obj: &Value,
) -> Result<(), ApiError> {
    run(state, target, query, Operation::Delete, Some(obj), None).await
}

fn static_reason(reason: &str) -> &'static str {
    const KNOWN: &[&str] = &[
        "Unauthorized",
        "Forbidden",
        "NotFound",
        "AlreadyExists",
        "Conflict",
        "Gone",
        "Invalid",
        "ServerTimeout",
        "Timeout",
        "TooManyRequests",
        "BadRequest",
        "MethodNotAllowed",
        "NotAcceptable",
        "RequestEntityTooLarge",
        "UnsupportedMediaType",
        "InternalError",
        "Expired",
        "ServiceUnavailable",
    ];
    KNOWN.iter().copied().find(|k| *k == reason).unwrap_or("")
}

/// Upstream's texts: `ToStatusErr` for denials, `ErrCallingWebhook` as an InternalError.
pub fn to_api_error(r: Rejection) -> ApiError {
    match r {
        Rejection::Denied {
            webhook,
            code,
            reason,
            message,
        } => {
            let by = format!("admission webhook {webhook:?} denied the request");
            let message = match (message.is_empty(), reason.is_empty()) {
                (false, _) => format!("{by}: {message}"),
                (true, false) => format!("{by}: {reason}"),
                (true, true) => format!("{by} without explanation"),
            };
            ApiError {
                code,
                reason: static_reason(&reason),
                message,
                details: None,
            }
        }
        Rejection::Failed { webhook, reason } => {
            ApiError::internal(format!("failed calling webhook {webhook:?}: {reason}"))
        }
        Rejection::DryRunUnsupported(webhook) => ApiError::bad_request(format!(
            "admission webhook {webhook:?} does not support dry run"
        )),
        Rejection::Patch { webhook, reason } => ApiError::internal(format!(
            "applying the patch of admission webhook {webhook:?}: {reason}"
        )),
    }
}

fn build_request(
    state: &AdmissionContext<'_>,
    target: &Target,
    query: &HashMap<String, String>,
    operation: Operation,
    old: Option<&Value>,
    obj: Option<&Value>,
) -> Request {
    let spec = target.spec;
    let dry_run = query.get("dryRun").is_some_and(|v| v == "All");
    let shown = obj.or(old);
    let name = shown.map(name_of).unwrap_or("").to_string();
    let is_namespace = spec.group.is_empty() && spec.plural == "namespaces";
    let namespace = if is_namespace {
        name.clone()
    } else {
        target.namespace.clone().unwrap_or_default()
    };
    let served_versions = state
        .registry
        .all()
        .iter()
        .filter(|s| s.group == spec.group && s.plural == spec.plural)
        .map(|s| s.version.to_string())
        .collect();
    Request {
        operation,
        group: spec.group.to_string(),
        version: spec.version.to_string(),
        kind: spec.kind.to_string(),
        resource: spec.plural.to_string(),
        subresource: if target.status {
            "status".into()
        } else {
            String::new()
        },
        served_versions,
        name,
        namespace,
        cluster_scoped: !spec.namespaced || is_namespace,
        user: target.requester.user.clone(),
        object: obj.cloned(),
        old_object: old.cloned(),
        dry_run,
        options: request::options(
            operation,
            dry_run,
            query.get("fieldManager").map(String::as_str),
        ),
    }
}

async fn namespace_labels(
    state: &AdmissionContext<'_>,
    ns: &str,
) -> Result<Map<String, Value>, ApiError> {
    let Some(v) = state
        .store
        .get(&NAMESPACES.key(None, ns))
        .await
        .map_err(crate::storage_status::store_error)?
    else {
        return Ok(Map::new());
    };
    let obj = from_stored(&v.value, v.mod_revision)?;
    Ok(obj["metadata"]["labels"]
        .as_object()
        .cloned()
        .unwrap_or_default())
}

/// The webhooks of `hooks` this request goes to, with the version each is called at.
async fn select(
    state: &AdmissionContext<'_>,
    hooks: Vec<std::sync::Arc<Hook>>,
    req: &Request,
    labels: &mut Option<Map<String, Value>>,
) -> Result<Vec<Selected>, ApiError> {
    let mut out = Vec::new();
    for hook in hooks {
        let Some(version) = matching::matching_version(&hook, req) else {
            continue;
        };
        if !matching::object_matches(&hook, req) {
            continue;
        }
        if matching::needs_namespace_labels(&hook, req) && labels.is_none() {
            *labels = Some(namespace_labels(state, &req.namespace).await?);
        }
        if !matching::namespace_matches(&hook, req, labels.as_ref()) {
            continue;
        }
        // Most hooks have no conditions: no authorizer to make for them on every request.
        let verdict = if hook.match_conditions.is_empty() {
            Ok(true)
        } else {
            access::evaluate_with_authorizer(req, state.access, |authorizer| {
                matching::conditions_match(&hook, req, &version, Some(authorizer))
            })
            .await
        };
        match verdict {
            Ok(true) => out.push(Selected { hook, version }),
            Ok(false) => {}
            Err(reason) if hook.ignore_failures => {
                tracing::warn!(webhook = %hook.name, %reason, "matchConditions failed, skipping the webhook (failurePolicy Ignore)");
            }
            Err(reason) => {
                return Err(to_api_error(Rejection::Failed {
                    webhook: hook.name.clone(),
                    reason,
                }))
            }
        }
    }
    Ok(out)
}

/// Why the mutating half failed: a webhook's rejection, or a policy's (already a status).
enum MutateError {
    Webhook(Rejection),
    Policy(ApiError),
}

impl MutateError {
    fn into_api_error(self) -> ApiError {
        match self {
            MutateError::Webhook(r) => to_api_error(r),
            MutateError::Policy(e) => e,
        }
    }
}

/// The MutatingAdmissionPolicies as the chain's second pass needs them: the matched session,
/// whether their first pass changed the object, how a mutated object is normalized, and who
/// answers the `authorizer`.
struct PolicyPass<'a, 'n> {
    session: Option<&'a mut mutating_policy::Session>,
    changed: bool,
    normalize: &'a mutating_policy::Normalize<'n>,
    checker: &'a dyn access::AccessChecker,
}

/// The webhooks' first pass, then — when a policy or webhook changed the object — the chain's
/// second pass, as upstream reinvokes it: the IfNeeded policies something changed the object
/// after, then the IfNeeded webhooks (all of them when that pass of policies changed it, else
/// those before the last webhook change). Returns whether the webhooks or that pass changed it.
async fn mutate_passes(
    caller: &call::HttpsCaller,
    selected: &[Selected],
    req: &mut Request,
    warnings: &mut Vec<String>,
    policies: PolicyPass<'_, '_>,
) -> Result<bool, MutateError> {
    let last = dispatch::mutate_first(caller, selected, req, warnings)
        .await
        .map_err(MutateError::Webhook)?;
    if last.is_none() && !policies.changed {
        return Ok(false);
    }
    let again = match policies.session {
        Some(p) => p
            .run(req, true, policies.normalize, policies.checker)
            .await
            .map_err(MutateError::Policy)?,
        None => false,
    };
    let upto = if again {
        selected.len()
    } else {
        last.unwrap_or(0)
    };
    dispatch::reinvoke(caller, &selected[..upto], req, warnings)
        .await
        .map_err(MutateError::Webhook)?;
    Ok(last.is_some() || again)
}

/// A mutated object decoded and defaulted again, as upstream decodes a patched object through its
/// scheme; admission may not rename or move it.
fn normalize(target: &Target, mutated: Value) -> Result<Value, ApiError> {
    let spec = target.spec;
    let mut obj = (spec.decode)(mutated).map_err(|why| {
        ApiError::bad_request(format!(
            "{kind} in version \"{v}\" cannot be handled as a {kind}: {why}",
            kind = spec.kind,
            v = spec.version
        ))
    })?;
    // What a webhook added is defaulted like the rest of the object (upstream decodes the
    // patched object through its scheme, which defaults): an added init container gets its
    // terminationMessagePolicy, a custom resource its schema defaults.
    (spec.defaults)(&mut obj);
    if let Some(cr) = spec.custom {
        // Fields a webhook added that the schema does not know are pruned, as upstream prunes the
        // mutated object when it decodes it.
        cr.prune(&mut obj);
        cr.apply_defaults(&mut obj);
    }
    Ok(obj)
}

/// A mutated object goes through the kind's decode and validation again, as upstream validates
/// after mutating admission; webhooks may not rename or move it.
fn revalidate(
    target: &Target,
    old: Option<&Value>,
    before: &Value,
    mutated: Value,
) -> Result<Value, ApiError> {
    let spec = target.spec;
    for field in ["name", "namespace"] {
        if mutated["metadata"][field] != before["metadata"][field] {
            return Err(ApiError::internal(format!(
                "an admission webhook changed metadata.{field}, which admission may not change"
            )));
        }
    }
    let obj = normalize(target, mutated)?;
    let mut causes: Vec<_> = validate_name(spec, name_of(&obj)).into_iter().collect();
    causes.extend((spec.validate)(&obj));
    if let Some(old) = old {
        causes.extend((spec.validate_update)(old, &obj));
    }
    if causes.is_empty() {
        Ok(obj)
    } else {
        Err(ApiError::invalid(
            spec.group,
            spec.kind,
            name_of(&obj),
            causes,
        ))
    }
}

async fn run(
    state: &AdmissionContext<'_>,
    target: &Target,
    query: &HashMap<String, String>,
    operation: Operation,
    old: Option<&Value>,
    obj: Option<&mut Value>,
) -> Result<(), ApiError> {
    // Upstream never sends its own configuration kinds to webhooks: a broken webhook could
    // otherwise lock out the fix.
    if target.spec.group == GROUP {
        return Ok(());
    }
    let Some((mutating, validating)) = chain(state) else {
        return pod_security(state, target, operation, old, obj.as_deref()).await;
    };
    let mut req = build_request(state, target, query, operation, old, obj.as_deref());
    let caller = call::HttpsCaller {
        store: state.store.clone(),
    };
    let mut labels = None;
    let mut warnings = Vec::new();
    // MutatingAdmissionPolicies first, then the mutating webhooks, as upstream's plugin order.
    let builtin = target.spec.custom.is_none();
    let mut policies = mutating_policy::Session::prepare(state, &req, builtin).await?;
    let normalized = |v: Value| normalize(target, v);
    let mut changed = match policies.as_mut() {
        Some(p) => p.run(&mut req, false, &normalized, state.access).await?,
        None => false,
    };
    let selected = select(state, mutating, &req, &mut labels).await?;
    let outcome = if operation == Operation::Delete {
        // No object to patch on a delete; the webhooks are still asked.
        let mut view = req.clone();
        dispatch::mutate(&caller, &selected, &mut view, &mut warnings)
            .await
            .map(|_| false)
            .map_err(MutateError::Webhook)
    } else {
        let policies = policies.as_mut();
        let (hooks, warnings) = (selected.as_slice(), &mut warnings);
        let policies = PolicyPass {
            session: policies,
            changed,
            normalize: &normalized,
            checker: state.access,
        };
        mutate_passes(&caller, hooks, &mut req, warnings, policies).await
    };
    changed |= match outcome {
        Ok(changed) => changed,
        Err(r) => {
            warnings.iter().for_each(|w| warnings::add(w));
            return Err(r.into_api_error());
        }
    };
    if let (true, Some(obj)) = (changed, obj) {
        let mutated = req.object.take().unwrap_or(Value::Null);
        let checked = revalidate(target, old, obj, mutated)?;
        req.object = Some(checked.clone());
        *obj = checked;
    }
    // The mutating webhooks' warnings come before those of the validating plugins.
    warnings.drain(..).for_each(|w| warnings::add(&w));
    pod_security(state, target, operation, old, req.object.as_ref()).await?;
    validate_all(state, &caller, validating, &req, &mut labels, warnings).await
}

/// The built-in validating plugin upstream orders between the mutating and the validating
/// webhooks: PodSecurity sees the object as the mutating webhooks left it.
async fn pod_security(
    state: &AdmissionContext<'_>,
    target: &Target,
    operation: Operation,
    old: Option<&Value>,
    obj: Option<&Value>,
) -> Result<(), ApiError> {
    crate::admission::pod_security::admit(state, target, operation, old, obj).await
}

/// Webhooks of one kind, in call order.
type Hooks = Vec<std::sync::Arc<Hook>>;

/// The mutating and validating webhooks, or None when nothing (webhook or policy) is configured.
fn chain(state: &AdmissionContext<'_>) -> Option<(Hooks, Hooks)> {
    let mutating = state.webhooks.hooks(Kind::Mutating);
    let validating = state.webhooks.hooks(Kind::Validating);
    let none = mutating.is_empty()
        && validating.is_empty()
        && state.webhooks.policies().1.is_empty()
        && state.webhooks.mutating_policies().1.is_empty();
    (!none).then_some((mutating, validating))
}

/// The validating half of the chain: the matched validating webhooks, then the policies; the
/// warnings gathered on the way are reported with the verdict.
async fn validate_all(
    state: &AdmissionContext<'_>,
    caller: &call::HttpsCaller,
    validating: Hooks,
    req: &Request,
    labels: &mut Option<Map<String, Value>>,
    mut warnings: Vec<String>,
) -> Result<(), ApiError> {
    let selected = select(state, validating, req, labels).await?;
    let verdict = match dispatch::validate(caller, &selected, req, &mut warnings).await {
        Ok(()) => policy::admit(state, req, &mut warnings).await,
        Err(r) => Err(to_api_error(r)),
    };
    warnings.iter().for_each(|w| warnings::add(w));
    verdict
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn denial_texts_follow_upstream() {
        let denied = |message: &str, reason: &str, code| {
            to_api_error(Rejection::Denied {
                webhook: "deny.example.com".into(),
                code,
                reason: reason.into(),
                message: message.into(),
            })
        };
        let e = denied("no thanks", "", 400);
        assert_eq!(
            e.message,
            "admission webhook \"deny.example.com\" denied the request: no thanks"
        );
        assert_eq!((e.code, e.reason), (400, ""));
        let e = denied("", "Forbidden", 403);
        assert_eq!(
            e.message,
            "admission webhook \"deny.example.com\" denied the request: Forbidden"
        );
        assert_eq!(e.reason, "Forbidden");
        assert_eq!(
            denied("", "", 400).message,
            "admission webhook \"deny.example.com\" denied the request without explanation"
        );
        let e = to_api_error(Rejection::Failed {
            webhook: "slow.example.com".into(),
            reason: "failed to call webhook: Post \"https://127.0.0.1:1/?timeout=1s\": context deadline exceeded".into(),
        });
        assert_eq!((e.code, e.reason), (500, "InternalError"));
        assert_eq!(e.message, "Internal error occurred: failed calling webhook \"slow.example.com\": failed to call webhook: Post \"https://127.0.0.1:1/?timeout=1s\": context deadline exceeded");
        let e = to_api_error(Rejection::DryRunUnsupported("x.example.com".into()));
        assert_eq!(
            (e.code, e.message.as_str()),
            (
                400,
                "admission webhook \"x.example.com\" does not support dry run"
            )
        );
    }
}
