//! sig-api-machinery Aggregator: a sample API server (wardle.example.com/v1alpha1) registered
//! through an APIService MUST be served by the aggregator (TestSampleAPIServer): flunders created
//! (201, the Flunder back), listed and deleted through the aggregated path by raw REST and by a
//! dynamic client once discovery names them; the APIService's status read ("all checks passed"),
//! its spec patched (versionPriority 400, a newer resourceVersion), listed, labelled, its status
//! updated and patched with new conditions, replaced with a new label, and removed by a
//! deleteCollection on that label.

use std::time::Duration;

use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, ListParams, PostParams};
use rand::Rng;
use serde_json::{json, Value};

use super::sample_apiserver::{
    call, cleanup, debug_info, must_call, set_up, Names, APISERVICE, GROUP, VERSION,
};
use super::{case, Case};
use crate::ctx::{from_json, Ctx};
use crate::error::{CaseError, CaseResult};
use crate::{must, must_eq};

pub const CASES: &[Case] = &[case!(
    "[sig-api-machinery] Aggregator Should be able to support the 1.17 Sample API Server using the current Aggregator [Conformance]",
    "aggregator",
    sample_api_server
)];

/// apiServiceRetryTimeout.
const RETRY_TIMEOUT: Duration = Duration::from_secs(120);
const STATUS: &str =
    "/apis/apiregistration.k8s.io/v1/apiservices/v1alpha1.wardle.example.com/status";
const ITEM: &str = "/apis/apiregistration.k8s.io/v1/apiservices/v1alpha1.wardle.example.com";
const JSON: &str = "application/json";
const MERGE: &str = "application/merge-patch+json";

fn generate_flunder_name(base: &str) -> String {
    format!("{base}-{}", rand::rng().random_range(0..2_147_483_647u32))
}

async fn sample_api_server(ctx: &Ctx) -> CaseResult {
    let n = Names::new(&ctx.ns);
    let result = async {
        set_up(ctx, &n).await?;
        exercise(ctx).await
    }
    .await;
    cleanup(ctx, &n).await;
    result
}

fn items(list: &Value) -> usize {
    list["items"].as_array().map_or(0, Vec::len)
}

/// A condition of the given type, reason and message in an APIService's status.
fn has_condition(obj: &Value, kind: &str, message: &str) -> bool {
    obj["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == kind && c["reason"] == "E2E" && c["message"] == message)
}

/// resourceversion.CompareResourceVersion for the numeric versions a store gives.
fn resource_version(obj: &Value) -> CaseResult<u64> {
    let rv = obj["metadata"]["resourceVersion"].as_str().unwrap_or("");
    rv.parse().map_err(|_| {
        CaseError::Failed(format!(
            "the resourceVersion {rv:?} is not a valid resource version"
        ))
    })
}

async fn exercise(ctx: &Ctx) -> CaseResult {
    let flunders = format!("/apis/{GROUP}/{VERSION}/namespaces/default/flunders");
    let api_version = format!("{GROUP}/{VERSION}");
    delegated_authorization(ctx).await?;

    // Raw REST: create, list, delete, list.
    let mut name = generate_flunder_name("rest-flunder");
    let flunder = json!({"apiVersion": api_version, "kind": "Flunder",
        "metadata": {"labels": {"sample-label": "true"}, "name": name, "namespace": "default"}});
    let (code, created) = call(ctx, "POST", &flunders, JSON, &flunder.to_string()).await?;
    must!(
        (200..300).contains(&code),
        "creating a new flunders resource: {code}: {created}"
    );
    must_eq!(code, 201, "Flunders client creation response status");
    must_eq!(
        created["apiVersion"].as_str(),
        Some(api_version.as_str()),
        "created apiVersion"
    );
    must_eq!(created["kind"].as_str(), Some("Flunder"), "created kind");
    must_eq!(
        created["metadata"]["name"].as_str(),
        Some(name.as_str()),
        "created name"
    );

    let list = must_call(
        ctx,
        "attempting to get a newly created flunders resource",
        "GET",
        &flunders,
        JSON,
        "",
    )
    .await?;
    must!(
        items(&list) == 1,
        "failed to get back the correct flunders list {list}\n{}",
        debug_info(ctx).await
    );
    let (code, body) = call(ctx, "DELETE", &format!("{flunders}/{name}"), JSON, "").await?;
    must!(
        (200..300).contains(&code),
        "attempting to delete a newly created flunders({name}) resource: {code}: {body}\n{}",
        debug_info(ctx).await
    );
    let list = must_call(
        ctx,
        "confirming delete of a newly created flunders resource",
        "GET",
        &flunders,
        JSON,
        "",
    )
    .await?;
    must!(
        items(&list) == 0,
        "failed to get back the correct deleted flunders list {list}"
    );

    // The dynamic client, once discovery names flunders.
    name = generate_flunder_name("dynamic-flunder");
    ctx.wait(
        "the dynamic client to discover wardle/flunders",
        Duration::from_secs(60),
        || async {
            let (code, apis) = call(ctx, "GET", "/apis", JSON, "").await?;
            let grouped = apis["groups"].as_array().into_iter().flatten().any(|g| {
                g["name"] == GROUP
                    && g["versions"].as_array().into_iter().flatten().any(|v| v["version"] == VERSION)
            });
            let (rcode, resources) = call(ctx, "GET", &format!("/apis/{GROUP}/{VERSION}"), JSON, "").await?;
            let listed = resources["resources"].as_array().into_iter().flatten().any(|r| {
                r["name"] == "flunders" && r["namespaced"] == true
            });
            Ok(if code == 200 && rcode == 200 && grouped && listed {
                Ok(())
            } else {
                Err(format!("/apis {code} (group listed: {grouped}); /apis/{GROUP}/{VERSION} {rcode} (flunders listed: {listed})"))
            })
        },
    )
    .await?;
    let ar = ApiResource {
        group: GROUP.into(),
        version: VERSION.into(),
        api_version: api_version.clone(),
        kind: "Flunder".into(),
        plural: "flunders".into(),
    };
    let dynamic: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), &ctx.ns, &ar);
    let test_flunder: DynamicObject =
        from_json(json!({"apiVersion": api_version, "kind": "Flunder",
        "metadata": {"name": name}, "spec": {}}))?;
    dynamic
        .create(&PostParams::default(), &test_flunder)
        .await?;
    let listed = dynamic.list(&ListParams::default()).await?;
    must!(
        listed.items.len() == 1,
        "failed to get back the correct flunders list {:?} from the dynamic client",
        listed.items
    );

    // Read Status.
    let status = must_call(
        ctx,
        "reading the APIService status",
        "GET",
        STATUS,
        JSON,
        "",
    )
    .await?;
    let old_rv = resource_version(&status)?;
    must_eq!(
        status["status"]["conditions"][0]["message"].as_str(),
        Some("all checks passed"),
        "the Message returned"
    );

    // kubectl patch apiservice … -p '{"spec":{"versionPriority": 400}}'
    let patched = must_call(
        ctx,
        "patching the APIService",
        "PATCH",
        ITEM,
        MERGE,
        r#"{"spec":{"versionPriority": 400}}"#,
    )
    .await?;
    must_eq!(
        patched["spec"]["versionPriority"].as_i64(),
        Some(400),
        "the VersionPriority returned"
    );
    must!(
        resource_version(&patched)? > old_rv,
        "patched object should have a larger resource version ({} after {old_rv})",
        resource_version(&patched)?
    );

    // List APIServices.
    let list = must_call(
        ctx,
        "listing APIServices",
        "GET",
        "/apis/apiregistration.k8s.io/v1/apiservices",
        JSON,
        "",
    )
    .await?;
    let found = list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|i| i["metadata"]["name"] == APISERVICE);
    must!(found, "Unable to find {APISERVICE} in APIServiceList");

    // Adding a label to the APIService (strategic merge patch).
    must_call(
        ctx,
        "labelling the APIService",
        "PATCH",
        ITEM,
        "application/strategic-merge-patch+json",
        r#"{"metadata":{"labels":{"e2e-apiservice":"patched"}}}"#,
    )
    .await?;
    let labelled = must_call(
        ctx,
        "reading the labelled APIService",
        "GET",
        ITEM,
        JSON,
        "",
    )
    .await?;
    must_eq!(
        labelled["metadata"]["labels"]["e2e-apiservice"].as_str(),
        Some("patched"),
        "the APIService's label"
    );

    // Updating APIService Status (retried on conflict).
    update_with_retry(ctx, STATUS, |obj| {
        let conds = obj["status"]["conditions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let mut conds = conds;
        conds.push(
            json!({"type": "StatusUpdated", "status": "True", "reason": "E2E",
            "message": "Set from e2e test"}),
        );
        obj["status"]["conditions"] = json!(conds);
    })
    .await?;
    let wardle = must_call(ctx, "reading the updated status", "GET", STATUS, JSON, "").await?;
    must!(
        has_condition(&wardle, "StatusUpdated", "Set from e2e test"),
        "The updated status condition was not found in: {}",
        wardle["status"]["conditions"]
    );

    // Replace APIService.
    let replaced = update_with_retry(ctx, ITEM, |obj| {
        obj["metadata"]["labels"] = json!({APISERVICE: "updated"});
    })
    .await?;
    must_eq!(
        replaced["metadata"]["labels"][APISERVICE].as_str(),
        Some("updated"),
        "should have the updated label"
    );

    // Delete flunders resource, list, recreate, list.
    dynamic.delete(&name, &DeleteParams::default()).await?;
    let listed = dynamic.list(&ListParams::default()).await?;
    must!(
        listed.items.is_empty(),
        "failed to get back the correct deleted flunders list {:?} from the dynamic client",
        listed.items
    );
    dynamic
        .create(&PostParams::default(), &test_flunder)
        .await?;
    let listed = dynamic.list(&ListParams::default()).await?;
    must!(
        listed.items.len() == 1,
        "failed to get back the correct flunders list {:?} from the dynamic client",
        listed.items
    );

    // Patch APIService Status.
    let before = must_call(
        ctx,
        "reading the status before patching it",
        "GET",
        STATUS,
        JSON,
        "",
    )
    .await?;
    let mut conds = before["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    conds.push(json!({"type": "StatusPatched", "status": "True", "reason": "E2E", "message": "Set by e2e test"}));
    must_call(
        ctx,
        "patching the status",
        "PATCH",
        STATUS,
        MERGE,
        &json!({"status": {"conditions": conds}}).to_string(),
    )
    .await?;
    let wardle = must_call(ctx, "reading the patched status", "GET", STATUS, JSON, "").await?;
    must!(
        has_condition(&wardle, "StatusPatched", "Set by e2e test"),
        "The patched status condition was not found in: {}",
        wardle["status"]["conditions"]
    );

    // APIService deleteCollection with the replaced label, then none is left.
    let selector = format!("{APISERVICE}=updated");
    let by_label = format!("/apis/apiregistration.k8s.io/v1/apiservices?labelSelector={selector}");
    must_call(
        ctx,
        &format!("Unable to delete apiservice {APISERVICE}"),
        "DELETE",
        &by_label,
        JSON,
        "",
    )
    .await?;
    ctx.wait(
        "the labelled APIService to be deleted",
        RETRY_TIMEOUT,
        || async {
            let list = must_call(
                ctx,
                "listing APIServices by label",
                "GET",
                &by_label,
                JSON,
                "",
            )
            .await?;
            Ok(if items(&list) == 0 {
                Ok(())
            } else {
                Err(format!("{} left", items(&list)))
            })
        },
    )
    .await?;
    Ok(())
}

/// Not one of upstream's assertions, but what they rest on: the extension server takes the user
/// the aggregator vouches for (X-Remote-User, believed only from the front-proxy certificate) and
/// asks the cluster through a SubjectAccessReview what that user may do. A user the admin
/// impersonates, given a Role to list flunders in the case's namespace, MUST be served (the review
/// allowed it: an anonymous request would be refused, a review the server may not create would
/// fail); without the Role it MUST be refused.
async fn delegated_authorization(ctx: &Ctx) -> CaseResult {
    let user = "e2e-aggregator-reader";
    let flunders = format!("/apis/{GROUP}/{VERSION}/namespaces/{}/flunders", ctx.ns);
    let as_user = || async {
        let req = http::Request::get(&flunders)
            .header(http::header::ACCEPT, JSON)
            .header("Impersonate-User", user)
            .body(kube::client::Body::empty())
            .map_err(|e| CaseError::Failed(format!("building GET {flunders}: {e}")))?;
        let resp = ctx.client.send(req).await?;
        let code = resp.status().as_u16();
        let body = resp.into_body().collect_bytes().await?;
        CaseResult::Ok((code, String::from_utf8_lossy(&body).into_owned()))
    };
    let (code, body) = as_user().await?;
    must_eq!(
        code,
        403,
        "listing flunders as {user} without a role ({body})"
    );

    let pp = PostParams::default();
    let role: Role = from_json(json!({"metadata": {"name": "flunder-reader"}, "rules": [
        {"apiGroups": [GROUP], "resources": ["flunders"], "verbs": ["list"]}]}))?;
    ctx.api::<Role>().create(&pp, &role).await?;
    let binding: RoleBinding = from_json(json!({"metadata": {"name": "flunder-reader"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "flunder-reader"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]}))?;
    ctx.api::<RoleBinding>().create(&pp, &binding).await?;
    // RBAC reads the new binding at once, but the extension server may have cached the first
    // answer (upstream caches reviews for 10 s): poll.
    ctx.wait(
        &format!("{user} to be allowed to list flunders through the extension server"),
        Duration::from_secs(30),
        || async {
            let (code, body) = as_user().await?;
            Ok(if code == 200 {
                Ok(())
            } else {
                Err(format!("{code}: {body}"))
            })
        },
    )
    .await
}

/// retry.RetryOnConflict(retry.DefaultRetry, …): get, change, put; a 409 tries again (5 times).
async fn update_with_retry(ctx: &Ctx, uri: &str, change: impl Fn(&mut Value)) -> CaseResult<Value> {
    let mut last = String::new();
    for _ in 0..5 {
        let mut obj = must_call(ctx, "reading before an update", "GET", uri, JSON, "").await?;
        change(&mut obj);
        let (code, body) = call(ctx, "PUT", uri, JSON, &obj.to_string()).await?;
        match code {
            200..=299 => return Ok(body),
            409 => last = body.to_string(),
            _ => return Err(CaseError::Failed(format!("PUT {uri}: {code}: {body}"))),
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Err(CaseError::Failed(format!(
        "PUT {uri}: still conflicting after 5 tries: {last}"
    )))
}
