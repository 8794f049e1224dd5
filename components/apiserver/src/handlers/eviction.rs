//! POST pods/<name>/eviction, as upstream's EvictionREST: a pod that is finished, pending or already
//! being deleted goes at once; otherwise the PodDisruptionBudget covering it must allow the
//! disruption. Spending one is a compare-and-swap of the budget's status (`disruptionsAllowed`
//! minus one, the pod recorded in `disruptedPods`) through the same guaranteed-update loop every
//! write uses, so two evictions racing for the last disruption cannot both win; only then is the
//! pod marked DisruptionTarget and deleted. The decisions are `registry::policy::eviction`.

use std::collections::HashMap;
use std::time::Duration;

use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use rand::Rng;
use serde_json::Value;

use super::crud::{guaranteed_update, read, required_name};
use super::delete::{delete_object, DeleteOptions};
use super::list::{list_objects, Selectors};
use super::subresources::success;
use crate::registry::lifecycle::{now_rfc3339, UpdateScope};
use crate::registry::policy::eviction::{
    can_ignore_budgets, check_and_decrement, check_budgets, matching_budgets,
    multiple_budgets_status, should_enforce_resource_version, with_disruption_target, BudgetCheck,
    EvictionError,
};
use crate::registry::policy::PODDISRUPTIONBUDGETS;
use crate::request::{Requester, Target};
use crate::state::AppState;
use crate::status::{json_response, ApiError};

/// Upstream's EvictionsRetry: 20 steps, 500 ms apart with 10 % jitter. Each step here is a whole
/// guaranteed-update loop, which already retries a lost compare-and-swap at once.
const RETRY_STEPS: usize = 20;
const RETRY_STEP: Duration = Duration::from_millis(500);

fn pause() -> Duration {
    RETRY_STEP.mul_f64(1.0 + rand::rng().random_range(0.0..0.1))
}

/// An error response with upstream's `Retry-After` header when the Status suggests a delay.
fn error_response(e: ApiError) -> Response {
    let retry = e
        .details
        .as_ref()
        .and_then(|d| d["retryAfterSeconds"].as_i64())
        .filter(|s| *s > 0);
    let mut resp = e.into_response();
    if let Some(s) = retry {
        if let Ok(v) = HeaderValue::from_str(&s.to_string()) {
            resp.headers_mut()
                .insert(axum::http::header::RETRY_AFTER, v);
        }
    }
    resp
}

/// The dry-run values of the request and of the Eviction's deleteOptions, merged as upstream's
/// propagateDryRun: either may carry them; both must then agree.
fn dry_run(query: &HashMap<String, String>, eviction: &Value) -> Result<bool, ApiError> {
    let from_query: Vec<String> = query.get("dryRun").cloned().into_iter().collect();
    let from_body: Vec<String> = eviction["deleteOptions"]["dryRun"]
        .as_array()
        .map(|l| {
            l.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    if !from_query.is_empty() && !from_body.is_empty() && from_query != from_body {
        return Err(ApiError::internal(format!(
            "Non-matching dry-run options in request and content: [{}] and [{}]",
            from_query.join(" "),
            from_body.join(" ")
        )));
    }
    Ok(from_query.iter().chain(&from_body).any(|v| v == "All"))
}

pub async fn evict(
    state: &AppState,
    target: &Target,
    headers: &HeaderMap,
    query: &HashMap<String, String>,
    body: &[u8],
) -> Result<Response, ApiError> {
    match evict_inner(state, target, headers, query, body).await {
        Ok(resp) => Ok(resp),
        Err(e) => Ok(error_response(e)),
    }
}

struct Request<'a> {
    state: &'a AppState,
    target: &'a Target,
    name: &'a str,
    dry_run: bool,
    /// The query delete_object reads (only dryRun).
    delete_query: HashMap<String, String>,
    /// deleteOptions as the client sent them.
    uid: Option<String>,
    resource_version: Option<String>,
    grace: Option<i64>,
}

impl Request<'_> {
    fn options(&self, resource_version: Option<String>) -> DeleteOptions {
        DeleteOptions {
            grace: self.grace,
            uid: self.uid.clone(),
            resource_version,
        }
    }
}

async fn evict_inner(
    state: &AppState,
    target: &Target,
    headers: &HeaderMap,
    query: &HashMap<String, String>,
    body: &[u8],
) -> Result<Response, ApiError> {
    let eviction = crate::request_body::parse_body(headers, body)?;
    let name = required_name(target)?;
    if eviction["metadata"]["name"].as_str().unwrap_or("") != name {
        return Err(ApiError::bad_request(
            "name in URL does not match name in Eviction object",
        ));
    }
    if let Some(ns) = eviction["metadata"]["namespace"].as_str() {
        if !ns.is_empty() && Some(ns) != target.namespace.as_deref() {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
    }
    let dry_run = dry_run(query, &eviction)?;
    let opts = DeleteOptions::from_body(&eviction["deleteOptions"]);
    let mut delete_query = HashMap::new();
    if dry_run {
        delete_query.insert("dryRun".to_string(), "All".to_string());
    }
    let req = Request {
        state,
        target,
        name,
        dry_run,
        delete_query,
        uid: opts.uid,
        resource_version: opts.resource_version,
        grace: opts.grace,
    };
    let user_rv = req.resource_version.is_some();

    // Pods the budgets do not concern are deleted at once; a conflict (the pod changed since it
    // was read) is retried unless the client named a resourceVersion itself.
    let mut attempt = 0;
    let (pod, rev) = loop {
        let (pod, rev) = read(state, target, name).await?;
        crate::admission::node_restriction(
            &state.admission_context(),
            target,
            Some("eviction"),
            crate::admission::node_restriction::Op::Create(&pod),
        )?;
        if !can_ignore_budgets(&pod) {
            break (pod, rev);
        }
        let rv = match &req.resource_version {
            None if should_enforce_resource_version(&pod) => Some(rev.to_string()),
            other => other.clone(),
        };
        match mark_and_delete(&req, req.options(rv)).await {
            Ok(()) => return Ok(success()),
            Err(e) if e.code == 409 && !user_rv && attempt + 1 < RETRY_STEPS => {
                attempt += 1;
                tokio::time::sleep(pause()).await;
            }
            Err(e) => return Err(e),
        }
    };

    let ns = target.namespace.clone().unwrap_or_default();
    let budgets_target = Target {
        spec: &PODDISRUPTIONBUDGETS,
        namespace: Some(ns.clone()),
        name: None,
        status: false,
        requester: Requester::default(),
    };
    let everything = Selectors::from_query(&PODDISRUPTIONBUDGETS, &HashMap::new())?;
    let (budgets, _) = list_objects(state, &budgets_target, &everything).await?;
    let covering = matching_budgets(&pod, &budgets);
    let pod_name = name.to_string();
    let (rv, unhealthy_budget) = match check_budgets(&pod, &covering) {
        BudgetCheck::Unguarded => (req.resource_version.clone(), None),
        BudgetCheck::Multiple => {
            return Ok(json_response(
                StatusCode::INTERNAL_SERVER_ERROR,
                &multiple_budgets_status(),
            ))
        }
        // Deleted only as read: a pod that became ready meanwhile counts for the budget again.
        BudgetCheck::DeleteUnhealthy { budget } => (Some(rev.to_string()), Some(budget)),
        BudgetCheck::Decrement { budget } => {
            spend(&req, &ns, &budget, &pod_name).await?;
            tracing::info!(namespace = %ns, pod = %pod_name, pdb = %budget, dry_run, "eviction allowed by its disruption budget");
            (req.resource_version.clone(), None)
        }
    };
    match mark_and_delete(&req, req.options(rv)).await {
        Ok(()) => Ok(success()),
        Err(e) if e.code == 409 && !user_rv => match unhealthy_budget {
            Some(budget) => Err(EvictionError::PodChanged { budget }.to_api()),
            None => Err(e),
        },
        Err(e) => Err(e),
    }
}

/// Spend one disruption of `budget` on `pod` (upstream's checkAndDecrement under
/// RetryOnConflict): every attempt re-reads the budget, so one that another eviction just
/// exhausted refuses this one with 429. A dry run checks and writes nothing.
async fn spend(req: &Request<'_>, ns: &str, budget: &str, pod: &str) -> Result<(), ApiError> {
    let target = Target {
        spec: &PODDISRUPTIONBUDGETS,
        namespace: Some(ns.to_string()),
        name: Some(budget.to_string()),
        status: true,
        requester: Requester::default(),
    };
    let now = now_rfc3339();
    if req.dry_run {
        let (pdb, _) = read(req.state, &target, budget).await?;
        return check_and_decrement(&pdb, pod, &now)
            .map(|_| ())
            .map_err(|e| e.to_api());
    }
    let no_query = HashMap::new();
    for _ in 0..RETRY_STEPS {
        let result = guaranteed_update(req.state, &target, UpdateScope::Status, &no_query, |old| {
            check_and_decrement(old, pod, &now).map_err(|e| e.to_api())
        })
        .await;
        match result {
            Ok(_) => return Ok(()),
            Err(e) if e.code == 409 => tokio::time::sleep(pause()).await,
            Err(e) => {
                tracing::debug!(namespace = ns, pod, pdb = budget, error = %e, "eviction refused");
                return Err(e);
            }
        }
    }
    Err(EvictionError::Conflicts {
        budget: budget.to_string(),
    }
    .to_api())
}

/// Upstream's addConditionAndDeletePod: the DisruptionTarget condition on the latest pod (unless a
/// dry run), its preconditions checked against that pod, then the delete — with a resourceVersion
/// precondition moved to the version the condition write made.
async fn mark_and_delete(req: &Request<'_>, mut opts: DeleteOptions) -> Result<(), ApiError> {
    let name = req.name;
    if !req.dry_run {
        // The server's own write: no admission for the requester, no managedFields entry.
        let pod_target = Target {
            spec: req.target.spec,
            namespace: req.target.namespace.clone(),
            name: Some(name.to_string()),
            status: true,
            requester: Requester::default(),
        };
        let now = now_rfc3339();
        let updated = guaranteed_update(
            req.state,
            &pod_target,
            UpdateScope::Status,
            &HashMap::new(),
            |latest| {
                let meta = &latest["metadata"];
                if let Some(uid) = opts.uid.as_deref().filter(|u| !u.is_empty()) {
                    let current = meta["uid"].as_str().unwrap_or("");
                    if uid != current {
                        return Err(ApiError::conflict_with("", "Pod", name, &format!(
                            "the UID in the precondition ({uid}) does not match the UID in record ({current}). The object might have been deleted and then recreated")));
                    }
                }
                if let Some(rv) = opts.resource_version.as_deref().filter(|r| !r.is_empty()) {
                    let current = meta["resourceVersion"].as_str().unwrap_or("");
                    if rv != current {
                        return Err(ApiError::conflict_with("", "Pod", name, &format!(
                            "the ResourceVersion in the precondition ({rv}) does not match the ResourceVersion in record ({current}). The object might have been modified")));
                    }
                }
                Ok(with_disruption_target(latest, &now).unwrap_or_else(|| latest.clone()))
            },
        )
        .await?;
        if opts.resource_version.is_some() {
            opts.resource_version = updated["metadata"]["resourceVersion"]
                .as_str()
                .map(str::to_string);
        }
    }
    delete_object(req.state, req.target, name, &opts, &req.delete_query).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn query(dry: Option<&str>) -> HashMap<String, String> {
        dry.map(|d| ("dryRun".to_string(), d.to_string()))
            .into_iter()
            .collect()
    }

    #[test]
    fn dry_run_comes_from_either_place_and_must_agree() {
        let plain = json!({"metadata": {"name": "p"}});
        let in_body = json!({"metadata": {"name": "p"}, "deleteOptions": {"dryRun": ["All"]}});
        assert!(!dry_run(&query(None), &plain).unwrap());
        assert!(dry_run(&query(Some("All")), &plain).unwrap());
        assert!(dry_run(&query(None), &in_body).unwrap());
        assert!(dry_run(&query(Some("All")), &in_body).unwrap());
        let e = dry_run(&query(Some("Nope")), &in_body).unwrap_err();
        assert_eq!(e.code, 500);
        assert!(e
            .message
            .contains("Non-matching dry-run options in request and content: [Nope] and [All]"));
    }

    #[test]
    fn retry_after_header_follows_the_status() {
        let stale = EvictionError::Stale {
            budget: "foo".into(),
        }
        .to_api();
        let resp = error_response(stale);
        assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(resp.headers()["retry-after"], "10");
        let zero = EvictionError::NoDisruptionsAllowed {
            budget: "foo".into(),
            desired: 1,
            current: 1,
        }
        .to_api();
        assert!(error_response(zero).headers().get("retry-after").is_none());
    }
}
