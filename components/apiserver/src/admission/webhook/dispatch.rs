//! Calling the matched webhooks in upstream's order and reading their verdicts: mutating webhooks one
//! after another (patches applied as they come, one reinvocation pass for `IfNeeded`), validating
//! webhooks together; failurePolicy decides what a failed call means. I/O is behind `Caller`, so this
//! logic is tested with a recording double.

use std::future::Future;
use std::sync::Arc;

use base64::Engine;
use serde_json::Value;

use super::hook::Hook;
use super::request::Request;
use super::WebhookError;
use crate::patch::{self, PatchType};
use crate::registry::lifecycle::new_uid;

/// Sends one AdmissionReview to one webhook and returns the AdmissionReview it answered.
pub trait Caller: Send + Sync {
    fn call(
        &self,
        hook: &Hook,
        review: &Value,
    ) -> impl Future<Output = Result<Value, WebhookError>> + Send;
}

/// A webhook chosen for this request, with the version its rule matched at.
#[derive(Debug, Clone)]
pub struct Selected {
    pub hook: Arc<Hook>,
    pub version: String,
}

/// Why admission refused the request.
#[derive(Debug, Clone, PartialEq)]
pub enum Rejection {
    /// The webhook answered `allowed: false`.
    Denied {
        webhook: String,
        code: u16,
        reason: String,
        message: String,
    },
    /// The call failed and failurePolicy is Fail.
    Failed { webhook: String, reason: String },
    /// A dry-run request for a webhook that may have side effects.
    DryRunUnsupported(String),
    /// The webhook's JSON patch did not apply.
    Patch { webhook: String, reason: String },
}

/// What one webhook said.
#[derive(Debug, Default)]
struct Verdict {
    allowed: bool,
    code: u16,
    reason: String,
    message: String,
    patch: Option<Value>,
    warnings: Vec<String>,
}

/// Upstream's `VerifyAdmissionResponse` for admission.k8s.io/v1.
fn verdict(uid: &str, review: &Value, mutating: bool) -> Result<Verdict, String> {
    let (api_version, kind) = (
        review["apiVersion"].as_str().unwrap_or(""),
        review["kind"].as_str().unwrap_or(""),
    );
    if api_version != "admission.k8s.io/v1" || kind != "AdmissionReview" {
        return Err(format!("expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, got {api_version}, Kind={kind}"));
    }
    let r = &review["response"];
    if !r.is_object() {
        return Err("webhook response was absent".into());
    }
    let got = r["uid"].as_str().unwrap_or("");
    if got != uid {
        return Err(format!("expected response.uid={uid:?}, got {got:?}"));
    }
    let patch = match (
        r["patch"].as_str().filter(|p| !p.is_empty()),
        r["patchType"].as_str(),
    ) {
        (None, _) => None,
        (Some(_), _) if !mutating => {
            return Err("validating webhook may not return response.patch".into())
        }
        (Some(_), None) => {
            return Err("webhook returned response.patch but not response.patchType".into())
        }
        (Some(p), Some("JSONPatch")) => {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(p)
                .map_err(|e| format!("webhook returned an undecodable response.patch: {e}"))?;
            Some(
                serde_json::from_slice(&bytes)
                    .map_err(|e| format!("webhook returned an invalid JSON patch: {e}"))?,
            )
        }
        (Some(_), Some(t)) => {
            return Err(format!(
                "webhook returned invalid response.patchType of {t:?}"
            ))
        }
    };
    let status = &r["status"];
    Ok(Verdict {
        allowed: r["allowed"].as_bool().unwrap_or(false),
        code: status["code"]
            .as_u64()
            .and_then(|c| u16::try_from(c).ok())
            .unwrap_or(0),
        reason: status["reason"].as_str().unwrap_or("").to_string(),
        message: status["message"].as_str().unwrap_or("").to_string(),
        patch,
        warnings: r["warnings"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_string)
            .collect(),
    })
}

/// A failed call: skipped with failurePolicy Ignore, a rejection with Fail.
fn failure(hook: &Hook, reason: String) -> Result<Option<Verdict>, Rejection> {
    if hook.ignore_failures {
        tracing::warn!(webhook = %hook.name, %reason, "failed calling webhook, failing open (failurePolicy Ignore)");
        return Ok(None);
    }
    Err(Rejection::Failed {
        webhook: hook.name.clone(),
        reason,
    })
}

/// One call; `None` when it failed and is ignored.
async fn call_one<C: Caller>(
    caller: &C,
    s: &Selected,
    req: &Request,
    mutating: bool,
) -> Result<Option<Verdict>, Rejection> {
    let hook = &s.hook;
    if req.dry_run && !hook.dry_run_safe() {
        return Err(Rejection::DryRunUnsupported(hook.name.clone()));
    }
    let uid = new_uid();
    let review = req.review(&uid, &s.version);
    tracing::debug!(webhook = %hook.name, operation = req.operation.as_str(), resource = %req.resource, name = %req.name, "calling admission webhook");
    let answer = match caller.call(hook, &review).await {
        Ok(a) => a,
        Err(e) => return failure(hook, format!("failed to call webhook: {e}")),
    };
    match verdict(&uid, &answer, mutating) {
        Ok(v) => Ok(Some(v)),
        Err(e) => failure(hook, format!("received invalid webhook response: {e}")),
    }
}

fn denied(hook: &Hook, v: &Verdict) -> Rejection {
    Rejection::Denied {
        webhook: hook.name.clone(),
        code: v.code.max(400),
        reason: v.reason.clone(),
        message: v.message.clone(),
    }
}

/// Runs one mutating webhook; returns whether it changed the object.
async fn mutate_one<C: Caller>(
    caller: &C,
    s: &Selected,
    req: &mut Request,
    warnings: &mut Vec<String>,
) -> Result<bool, Rejection> {
    let Some(v) = call_one(caller, s, req, true).await? else {
        return Ok(false);
    };
    warnings.extend(v.warnings.iter().cloned());
    if !v.allowed {
        return Err(denied(&s.hook, &v));
    }
    let (Some(p), Some(obj)) = (&v.patch, req.object.as_ref()) else {
        return Ok(false);
    };
    // The webhook saw the object at its matched version; patch that view, then label it back.
    let mut review = req.review("", &s.version);
    let seen = review["request"]["object"].take();
    let mut seen = patch::apply(PatchType::Json, &seen, p).map_err(|e| Rejection::Patch {
        webhook: s.hook.name.clone(),
        reason: e.to_string(),
    })?;
    if seen.is_object() {
        seen["apiVersion"] = obj["apiVersion"].clone();
    }
    if &seen == obj {
        return Ok(false);
    }
    req.object = Some(seen);
    Ok(true)
}

/// Mutating webhooks in order; webhooks with reinvocationPolicy IfNeeded that ran before the last
/// change are called once more. Returns whether the object changed.
pub async fn mutate<C: Caller>(
    caller: &C,
    hooks: &[Selected],
    req: &mut Request,
    warnings: &mut Vec<String>,
) -> Result<bool, Rejection> {
    let Some(last) = mutate_first(caller, hooks, req, warnings).await? else {
        return Ok(false);
    };
    reinvoke(caller, &hooks[..last], req, warnings).await?;
    Ok(true)
}

/// The chain's first pass over the mutating webhooks: returns the index of the last webhook that
/// changed the object, if any did.
pub async fn mutate_first<C: Caller>(
    caller: &C,
    hooks: &[Selected],
    req: &mut Request,
    warnings: &mut Vec<String>,
) -> Result<Option<usize>, Rejection> {
    let mut last_change = None;
    for (i, s) in hooks.iter().enumerate() {
        if mutate_one(caller, s, req, warnings).await? {
            last_change = Some(i);
        }
    }
    Ok(last_change)
}

/// The reinvocation pass: the webhooks of `hooks` with reinvocationPolicy IfNeeded, called once
/// more. Returns whether they changed the object.
pub async fn reinvoke<C: Caller>(
    caller: &C,
    hooks: &[Selected],
    req: &mut Request,
    warnings: &mut Vec<String>,
) -> Result<bool, Rejection> {
    let mut changed = false;
    for s in hooks.iter().filter(|s| s.hook.reinvoke) {
        changed |= mutate_one(caller, s, req, warnings).await?;
    }
    Ok(changed)
}

/// Validating webhooks, called together; the first refusal in webhook order wins.
pub async fn validate<C: Caller>(
    caller: &C,
    hooks: &[Selected],
    req: &Request,
    warnings: &mut Vec<String>,
) -> Result<(), Rejection> {
    let calls = hooks.iter().map(|s| call_one(caller, s, req, false));
    let results = futures::future::join_all(calls).await;
    let mut first_error = None;
    for (s, r) in hooks.iter().zip(results) {
        match r {
            Ok(Some(v)) => {
                warnings.extend(v.warnings.iter().cloned());
                if !v.allowed && first_error.is_none() {
                    first_error = Some(denied(&s.hook, &v));
                }
            }
            Ok(None) => {}
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    first_error.map_or(Ok(()), Err)
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::time::Duration;

    use serde_json::json;

    use super::super::hook::{Endpoint, Kind};
    use super::super::request::tests::configmap_create;
    use super::*;

    /// Answers from a per-webhook script and records every call (webhook name, review sent).
    #[derive(Default)]
    struct Recording {
        calls: Mutex<Vec<(String, Value)>>,
        /// webhook name → how to answer: (allowed, JSON patch, message, warning)
        script: Vec<(&'static str, Answer)>,
    }

    #[derive(Clone)]
    enum Answer {
        Allow,
        Patch(Value),
        Deny(&'static str),
        Warn(&'static str),
        Fail,
        WrongUid,
    }

    impl Caller for Recording {
        async fn call(&self, hook: &Hook, review: &Value) -> Result<Value, WebhookError> {
            self.calls
                .lock()
                .unwrap()
                .push((hook.name.clone(), review.clone()));
            let answer = self
                .script
                .iter()
                .find(|(n, _)| *n == hook.name)
                .map(|(_, a)| a.clone())
                .unwrap_or(Answer::Allow);
            let uid = review["request"]["uid"].clone();
            let mut response = json!({"uid": uid, "allowed": true});
            match answer {
                Answer::Allow => {}
                Answer::Patch(p) => {
                    response["patchType"] = json!("JSONPatch");
                    response["patch"] = json!(base64::engine::general_purpose::STANDARD
                        .encode(serde_json::to_vec(&p).unwrap()));
                }
                Answer::Deny(m) => {
                    response["allowed"] = json!(false);
                    response["status"] = json!({"message": m, "code": 403});
                }
                Answer::Warn(w) => response["warnings"] = json!([w]),
                Answer::Fail => return Err(WebhookError::Timeout("https://x/".into())),
                Answer::WrongUid => response["uid"] = json!("other"),
            }
            Ok(
                json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}),
            )
        }
    }

    impl Recording {
        fn names(&self) -> Vec<String> {
            self.calls
                .lock()
                .unwrap()
                .iter()
                .map(|c| c.0.clone())
                .collect()
        }
    }

    fn selected(name: &str, kind: Kind, reinvoke: bool, ignore: bool) -> Selected {
        Selected {
            hook: Arc::new(Hook {
                kind,
                configuration: "c".into(),
                name: name.into(),
                rules: vec![],
                ignore_failures: ignore,
                exact: false,
                namespace_selector: json!({}),
                object_selector: json!({}),
                side_effects: "None".into(),
                timeout: Duration::from_secs(1),
                reinvoke,
                endpoint: Endpoint::Url("https://127.0.0.1/".into()),
                ca_bundle: vec![],
                match_conditions: vec![],
            }),
            version: "v1".into(),
        }
    }

    fn label_patch(key: &str) -> Answer {
        Answer::Patch(
            json!([{"op": "add", "path": format!("/metadata/labels/{key}"), "value": "yes"}]),
        )
    }

    #[tokio::test]
    async fn patches_apply_in_order_and_later_webhooks_see_them() {
        let caller = Recording {
            script: vec![("a", label_patch("a"))],
            ..Default::default()
        };
        let hooks = [
            selected("a", Kind::Mutating, false, false),
            selected("b", Kind::Mutating, false, false),
        ];
        let mut req = configmap_create();
        let mut warnings = vec![];
        assert_eq!(
            mutate(&caller, &hooks, &mut req, &mut warnings).await,
            Ok(true)
        );
        assert_eq!(
            req.object.as_ref().unwrap()["metadata"]["labels"]["a"],
            "yes"
        );
        let calls = caller.calls.lock().unwrap();
        assert_eq!(
            calls[1].1["request"]["object"]["metadata"]["labels"]["a"],
            "yes"
        );
    }

    #[tokio::test]
    async fn reinvocation_reruns_earlier_if_needed_webhooks_once() {
        let caller = Recording {
            script: vec![("c", label_patch("c"))],
            ..Default::default()
        };
        let hooks = [
            selected("a", Kind::Mutating, true, false),
            selected("b", Kind::Mutating, false, false),
            selected("c", Kind::Mutating, true, false),
        ];
        let mut req = configmap_create();
        mutate(&caller, &hooks, &mut req, &mut vec![])
            .await
            .unwrap();
        assert_eq!(caller.names(), ["a", "b", "c", "a"]);

        // Nothing changed: no second pass.
        let quiet = Recording::default();
        let mut req = configmap_create();
        assert_eq!(
            mutate(&quiet, &hooks, &mut req, &mut vec![]).await,
            Ok(false)
        );
        assert_eq!(quiet.names(), ["a", "b", "c"]);
    }

    #[tokio::test]
    async fn denial_stops_the_chain() {
        let caller = Recording {
            script: vec![("a", Answer::Deny("no configmaps today"))],
            ..Default::default()
        };
        let hooks = [
            selected("a", Kind::Mutating, false, false),
            selected("b", Kind::Mutating, false, false),
        ];
        let err = mutate(&caller, &hooks, &mut configmap_create(), &mut vec![])
            .await
            .unwrap_err();
        assert_eq!(
            err,
            Rejection::Denied {
                webhook: "a".into(),
                code: 403,
                reason: String::new(),
                message: "no configmaps today".into()
            }
        );
        assert_eq!(caller.names(), ["a"]);
    }

    #[tokio::test]
    async fn failure_policy_fail_versus_ignore() {
        let caller = Recording {
            script: vec![("a", Answer::Fail), ("b", Answer::WrongUid)],
            ..Default::default()
        };
        let ignore = [
            selected("a", Kind::Validating, false, true),
            selected("b", Kind::Validating, false, true),
        ];
        assert_eq!(
            validate(&caller, &ignore, &configmap_create(), &mut vec![]).await,
            Ok(())
        );
        let fail = [selected("a", Kind::Validating, false, false)];
        match validate(&caller, &fail, &configmap_create(), &mut vec![]).await {
            Err(Rejection::Failed { webhook, reason }) => {
                assert_eq!(webhook, "a");
                assert_eq!(
                    reason,
                    "failed to call webhook: Post \"https://x/\": context deadline exceeded"
                );
            }
            other => panic!("{other:?}"),
        }
        let bad = [selected("b", Kind::Validating, false, false)];
        match validate(&caller, &bad, &configmap_create(), &mut vec![]).await {
            Err(Rejection::Failed { reason, .. }) => assert!(
                reason.starts_with("received invalid webhook response: expected response.uid="),
                "{reason}"
            ),
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn validating_calls_all_and_reports_first_refusal_and_warnings() {
        let caller = Recording {
            script: vec![
                ("a", Answer::Warn("careful")),
                ("b", Answer::Deny("b says no")),
                ("c", Answer::Deny("c says no")),
            ],
            ..Default::default()
        };
        let hooks = ["a", "b", "c"].map(|n| selected(n, Kind::Validating, false, false));
        let mut warnings = vec![];
        let err = validate(&caller, &hooks, &configmap_create(), &mut warnings)
            .await
            .unwrap_err();
        assert!(
            matches!(err, Rejection::Denied { ref webhook, .. } if webhook == "b"),
            "{err:?}"
        );
        assert_eq!(warnings, ["careful"]);
        assert_eq!(caller.names().len(), 3);
    }

    #[tokio::test]
    async fn validating_webhooks_may_not_patch() {
        let caller = Recording {
            script: vec![("a", label_patch("a"))],
            ..Default::default()
        };
        let hooks = [selected("a", Kind::Validating, false, false)];
        match validate(&caller, &hooks, &configmap_create(), &mut vec![]).await {
            Err(Rejection::Failed { reason, .. }) => {
                assert!(reason.contains("validating webhook may not return response.patch"))
            }
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn dry_run_needs_side_effect_free_webhooks() {
        let caller = Recording::default();
        let mut some = selected("a", Kind::Validating, false, true);
        Arc::get_mut(&mut some.hook).unwrap().side_effects = "Some".into();
        let mut req = configmap_create();
        req.dry_run = true;
        assert_eq!(
            validate(&caller, &[some.clone()], &req, &mut vec![]).await,
            Err(Rejection::DryRunUnsupported("a".into()))
        );
        assert!(caller.names().is_empty(), "not called");
        req.dry_run = false;
        assert_eq!(validate(&caller, &[some], &req, &mut vec![]).await, Ok(()));
    }
}
