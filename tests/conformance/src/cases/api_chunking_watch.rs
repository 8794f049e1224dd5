//! sig-api-machinery entries on reading the API: watches resumed from a resourceVersion, selector
//! changes seen through a watch, concurrent watches' order (upstream's watch.go); paged lists
//! (chunking.go); the server version (server_version.go); a Table asked of a kind that has none
//! (table_conversion.go).

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, PodTemplate};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use rand::Rng;
use serde_json::{json, Value};

use super::api_machinery::{next_event, next_events, watch_configmaps, EventStream, WATCH_LABEL};
use super::{case, Case};
use crate::ctx::{from_json, Ctx};
use crate::error::{CaseError, CaseResult};
use crate::{must, must_eq};

pub const CASES: &[Case] = &[
    case!(
        "[sig-api-machinery] Watchers should be able to start watching from a specific resource version [Conformance]",
        "watch",
        watch_from_resource_version
    ),
    case!(
        "[sig-api-machinery] Watchers should be able to restart watching from the last resource version observed by the previous watch [Conformance]",
        "watch",
        watch_restarted
    ),
    case!(
        "[sig-api-machinery] Watchers should observe an object deletion if it stops meeting the requirements of the selector [Conformance]",
        "watch",
        watch_label_changed
    ),
    case!(
        "[sig-api-machinery] Watchers should receive events on concurrent watches in same order [Conformance]",
        "watch",
        concurrent_watches
    ),
    case!(
        "[sig-api-machinery] Servers with support for API chunking should return chunks of results for list calls [Conformance]",
        "chunking",
        chunks
    ),
    case!(
        "[sig-api-machinery] Servers with support for API chunking should support continue listing from the last key if the original version has been compacted away, though the list is inconsistent [Slow] [Conformance]",
        "chunking",
        chunks_after_compaction
    ),
    case!(
        "[sig-api-machinery] server version should find the server version [Conformance]",
        "server-version",
        server_version
    ),
    case!(
        "[sig-api-machinery] Servers with support for Table transformation should return a 406 for a backend which does not implement metadata [Conformance]",
        "tables",
        table_406
    ),
];

// ---- Watchers -------------------------------------------------------------------------------

/// A configmap named `name` carrying `WATCH_LABEL: value`.
async fn create_watched(cms: &Api<ConfigMap>, name: &str, value: &str) -> CaseResult<ConfigMap> {
    let cm: ConfigMap =
        from_json(json!({"metadata": {"name": name, "labels": {WATCH_LABEL: value}}}))?;
    Ok(cms.create(&PostParams::default(), &cm).await?)
}

/// upstream's updateConfigMap + setConfigMapData: data.mutation = `n`.
async fn mutate(cms: &Api<ConfigMap>, name: &str, n: u32) -> CaseResult<ConfigMap> {
    relabel_and_mutate(cms, name, None, Some(n)).await
}

/// Sets the watched label to `label` and/or data.mutation to `n`.
async fn relabel_and_mutate(
    cms: &Api<ConfigMap>,
    name: &str,
    label: Option<&str>,
    n: Option<u32>,
) -> CaseResult<ConfigMap> {
    let mut patch = json!({});
    if let Some(l) = label {
        patch["metadata"] = json!({"labels": {WATCH_LABEL: l}});
    }
    if let Some(n) = n {
        patch["data"] = json!({"mutation": n.to_string()});
    }
    Ok(cms
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?)
}

fn rv_of(cm: &ConfigMap) -> String {
    cm.metadata.resource_version.clone().unwrap_or_default()
}

/// The resourceVersion of the namespace's configmap collection now (a watch from it sees what
/// follows, as upstream's watch without a resourceVersion does in a fresh namespace).
async fn collection_rv(cms: &Api<ConfigMap>) -> CaseResult<String> {
    Ok(cms
        .list_metadata(&ListParams::default())
        .await?
        .metadata
        .resource_version
        .unwrap_or_default())
}

/// watch-configmaps-from-resource-version: after a configmap is created, modified twice and
/// deleted, a watch opened at the first modification's resourceVersion MUST deliver exactly the
/// notifications after it: the second modification, then the deletion.
async fn watch_from_resource_version(ctx: &Ctx) -> CaseResult {
    let cms: Api<ConfigMap> = ctx.api();
    let (name, value) = ("e2e-watch-test-resource-version", "from-resource-version");
    create_watched(&cms, name, value).await?;
    let first = mutate(&cms, name, 1).await?;
    mutate(&cms, name, 2).await?;
    cms.delete(name, &DeleteParams::default()).await?;
    let mut w = watch_configmaps(&cms, &rv_of(&first), &[value]).await?;
    let got = next_events(&mut w, 2).await?;
    must_eq!(
        got,
        ["MODIFIED version 2", "DELETED version 2"],
        "events after the first update's resourceVersion"
    );
    Ok(())
}

/// watch-configmaps-closed-and-restarted: a watch sees the creation and first modification and is
/// closed; the configmap is modified again while no watch is open; a watch reopened at the last
/// resourceVersion the first one observed MUST deliver the second modification and then the
/// deletion that follows.
async fn watch_restarted(ctx: &Ctx) -> CaseResult {
    let cms: Api<ConfigMap> = ctx.api();
    let (name, value) = ("e2e-watch-test-watch-closed", "watch-closed-and-restarted");
    let mut first = watch_configmaps(&cms, &collection_rv(&cms).await?, &[value]).await?;
    create_watched(&cms, name, value).await?;
    mutate(&cms, name, 1).await?;
    let (added, _) = next_event(&mut first, &[]).await?;
    must_eq!(added, "ADDED closed", "the first watch's first event");
    let (modified, last) = next_event(&mut first, &[added]).await?;
    must_eq!(
        modified,
        "MODIFIED closed 1",
        "the first watch's second event"
    );
    drop(first);
    mutate(&cms, name, 2).await?;
    let mut restarted = watch_configmaps(&cms, &rv_of(&last), &[value]).await?;
    cms.delete(name, &DeleteParams::default()).await?;
    let got = next_events(&mut restarted, 2).await?;
    must_eq!(
        got,
        ["MODIFIED closed 2", "DELETED closed 2"],
        "events of the watch restarted at resourceVersion {}",
        rv_of(&last)
    );
    Ok(())
}

/// watch-configmaps-label-changed: when a watched configmap's label stops matching the watch's
/// selector the watch MUST see it DELETED, and MUST NOT see its changes while it does not match
/// (here: the next event after the deletion is the ADDED of the restored label, so no event of
/// the modification made in between came before it — a watch delivers in order); once the label
/// matches again the watch MUST see it ADDED, then MODIFIED, then DELETED.
async fn watch_label_changed(ctx: &Ctx) -> CaseResult {
    let cms: Api<ConfigMap> = ctx.api();
    let (name, value) = ("e2e-watch-test-label-changed", "label-changed-and-restored");
    let mut w = watch_configmaps(&cms, &collection_rv(&cms).await?, &[value]).await?;
    create_watched(&cms, name, value).await?;
    mutate(&cms, name, 1).await?;
    relabel_and_mutate(&cms, name, Some("wrong-value"), None).await?;
    let got = next_events(&mut w, 3).await?;
    must_eq!(
        got,
        ["ADDED changed", "MODIFIED changed 1", "DELETED changed 1"],
        "events up to the label change"
    );
    mutate(&cms, name, 2).await?;
    relabel_and_mutate(&cms, name, Some(value), None).await?;
    mutate(&cms, name, 3).await?;
    cms.delete(name, &DeleteParams::default()).await?;
    let got = next_events(&mut w, 3).await?;
    must_eq!(
        got,
        ["ADDED changed 2", "MODIFIED changed 3", "DELETED changed 3"],
        "events after the label change (nothing while the label did not match)"
    );
    Ok(())
}

/// How many watches upstream's watch-consistency opens, one per event.
const CONCURRENT_WATCHES: usize = 100;

/// watch-consistency: while configmaps are created, updated and deleted in the background, a watch
/// is opened at the resourceVersion of each event the first watch receives (100 in all); every
/// open watch MUST then receive the same next event (the same resourceVersion) as the first.
async fn concurrent_watches(ctx: &Ctx) -> CaseResult {
    let cms: Api<ConfigMap> = ctx.api();
    let mut rv = collection_rv(&cms).await?;
    let check = async {
        let mut watches: Vec<EventStream> = Vec::new();
        for i in 0..CONCURRENT_WATCHES {
            watches.push(
                cms.watch(&kube::api::WatchParams::default(), &rv)
                    .await?
                    .boxed(),
            );
            let (_, cm) = next_event(&mut watches[0], &[]).await?;
            rv = rv_of(&cm);
            for (j, w) in watches.iter_mut().enumerate().skip(1) {
                let (what, other) = next_event(w, &[]).await?;
                must_eq!(
                    rv_of(&other),
                    rv,
                    "resourceVersion of watch {j}'s event {what:?} (round {i})"
                );
            }
        }
        Ok::<(), CaseError>(())
    };
    tokio::select! {
        r = check => r,
        e = produce_configmap_events(&cms) => Err(e),
    }
}

/// upstream's produceConfigMapEvents: every 5 ms create, update or delete a configmap `cm-<i>`,
/// at random (create when none exist). Runs until dropped; returns only on an error.
async fn produce_configmap_events(cms: &Api<ConfigMap>) -> CaseError {
    let mut existing: Vec<usize> = Vec::new();
    let mut next = 0;
    let mut tick = tokio::time::interval(Duration::from_millis(5));
    loop {
        tick.tick().await;
        let op = if existing.is_empty() {
            0
        } else {
            rand::rng().random_range(0..3)
        };
        let result = match op {
            0 => {
                let cm: ConfigMap =
                    match from_json(json!({"metadata": {"name": format!("cm-{next}")}})) {
                        Ok(cm) => cm,
                        Err(e) => return e,
                    };
                existing.push(next);
                next += 1;
                cms.create(&PostParams::default(), &cm).await.map(|_| ())
            }
            1 => {
                let i = existing[rand::rng().random_range(0..existing.len())];
                let patch = json!({"data": {"update": next.to_string()}});
                next += 1;
                cms.patch(
                    &format!("cm-{i}"),
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await
                .map(|_| ())
            }
            _ => {
                let i = existing.swap_remove(rand::rng().random_range(0..existing.len()));
                cms.delete(&format!("cm-{i}"), &DeleteParams::default())
                    .await
                    .map(|_| ())
            }
        };
        if let Err(e) = result {
            return CaseError::Failed(format!("producing configmap events: {e}"));
        }
    }
}

// ---- API chunking ---------------------------------------------------------------------------

/// upstream's numberOfTotalResources.
const TEMPLATES: usize = 400;

fn template_name(i: usize) -> String {
    format!("template-{i:04}")
}

/// The BeforeEach of chunking.go: 400 PodTemplates `template-0000`…, 20 created at a time, each
/// tried up to 4 times.
async fn create_templates(ctx: &Ctx) -> CaseResult<Api<PodTemplate>> {
    let templates: Api<PodTemplate> = ctx.api();
    let created: Vec<CaseResult> = futures::stream::iter(0..TEMPLATES)
        .map(|i| {
            let templates = templates.clone();
            async move {
                let t: PodTemplate = from_json(json!({
                    "metadata": {"name": template_name(i)},
                    "template": {"spec": {"containers": [{"name": "test", "image": "test2"}]}},
                }))?;
                let mut last = None;
                for _ in 0..4 {
                    match templates.create(&PostParams::default(), &t).await {
                        Ok(_) => return Ok(()),
                        Err(e) => last = Some(e),
                    }
                }
                Err(CaseError::Failed(format!(
                    "unable to create template {i}: {}",
                    last.map(|e| e.to_string()).unwrap_or_default()
                )))
            }
        })
        .buffer_unordered(20)
        .collect()
        .await;
    created.into_iter().collect::<CaseResult>()?;
    Ok(templates)
}

/// One page of a paged list, as the checks need it.
struct Page {
    names: Vec<String>,
    resource_version: String,
    continue_token: String,
    remaining: Option<i64>,
}

impl Page {
    fn of(list: kube::api::ObjectList<PodTemplate>) -> Self {
        Page {
            names: list
                .items
                .iter()
                .map(|t| t.metadata.name.clone().unwrap_or_default())
                .collect(),
            resource_version: list.metadata.resource_version.unwrap_or_default(),
            continue_token: list.metadata.continue_.unwrap_or_default(),
            remaining: list.metadata.remaining_item_count,
        }
    }

    /// The MUSTs every page meets: at most `limit` items, named in order from `found` on, and
    /// remainingItemCount set exactly when a continue token is (then counting the rest).
    fn check(&self, limit: u32, found: usize) -> CaseResult {
        must!(
            self.names.len() <= limit as usize,
            "a page of limit {limit} holds {} items",
            self.names.len()
        );
        for (k, name) in self.names.iter().enumerate() {
            must_eq!(
                name.as_str(),
                template_name(found + k).as_str(),
                "item {} of the paged list",
                found + k
            );
        }
        if self.continue_token.is_empty() {
            must_eq!(self.remaining, None, "remainingItemCount of the last page");
        } else {
            let Some(remaining) = self.remaining else {
                return Err(CaseError::Failed(format!(
                    "a page with a continue token (items {found}..{}) has no remainingItemCount",
                    found + self.names.len()
                )));
            };
            must_eq!(
                remaining as usize + self.names.len() + found,
                TEMPLATES,
                "remainingItemCount {remaining} + items of the page + items before it"
            );
        }
        Ok(())
    }
}

async fn page(templates: &Api<PodTemplate>, limit: u32, token: &str) -> CaseResult<Page> {
    let mut lp = ListParams::default().limit(limit);
    if !token.is_empty() {
        lp = lp.continue_token(token);
    }
    Ok(Page::of(templates.list(&lp).await?))
}

/// Reads the pages from `token` on (limit `limit`, items from `found` on) to the end: each page
/// MUST meet `Page::check` and carry resourceVersion `rv` (the first page's when empty). Returns
/// how many items were read in all.
async fn read_pages(
    templates: &Api<PodTemplate>,
    limit: u32,
    mut token: String,
    mut found: usize,
    mut rv: String,
) -> CaseResult<usize> {
    loop {
        let p = page(templates, limit, &token).await?;
        p.check(limit, found)?;
        if rv.is_empty() {
            rv = p.resource_version.clone();
        }
        must_eq!(
            p.resource_version,
            rv,
            "resourceVersion of the page from item {found}"
        );
        found += p.names.len();
        if p.continue_token.is_empty() {
            return Ok(found);
        }
        token = p.continue_token;
    }
}

/// API Chunking, chunks of results: of 400 PodTemplates, paged lists with limit 17 (three times)
/// MUST return pages of at most 17 items, in order, each with the first page's resourceVersion,
/// with remainingItemCount set (and right) exactly when a continue token is, and all 400 in all;
/// a list with a limit above 400 MUST return all 400 at once.
async fn chunks(ctx: &Ctx) -> CaseResult {
    let templates = create_templates(ctx).await?;
    for _ in 0..3 {
        let found = read_pages(&templates, 17, String::new(), 0, String::new()).await?;
        must_eq!(found, TEMPLATES, "items read in pages");
    }
    let all = templates
        .list(&ListParams::default().limit(TEMPLATES as u32 + 1))
        .await?;
    must_eq!(all.items.len(), TEMPLATES, "items of a list with limit 401");
    Ok(())
}

/// How long the compacted-away entry waits for its continue token to expire. Upstream waits two
/// of kube-apiserver's compaction intervals (2 × 5 min); kiln compacts nothing on its own
/// (kiln-apiserver runs no compaction loop like kube-apiserver's --etcd-compaction-interval, and
/// kiln-store's --auto-compaction-retention is off in the manifest `kiln init` writes), so a
/// longer wait only delays the failure. Compaction every 90 s or less fits in this wait.
/// Two of the API server's compaction intervals (upstream's default 5 min) and a margin: a revision
/// is compacted away one to two intervals after it was written.
const EXPIRY_WAIT: Duration = Duration::from_secs(660);

/// API Chunking, continue after compaction: the first page (limit 40) MUST meet the page checks;
/// once the store has compacted its resourceVersion away, a list continuing from its token MUST
/// fail 410 Expired with a continue token for an inconsistent list; continuing from that token
/// MUST return the next 40 items (at a resourceVersion other than the first page's) with the
/// page checks met, and the pages after it MUST carry that page's resourceVersion, up to all 400.
async fn chunks_after_compaction(ctx: &Ctx) -> CaseResult {
    let templates = create_templates(ctx).await?;
    let limit = (TEMPLATES / 10) as u32;
    let first = page(&templates, limit, "").await?;
    first.check(limit, 0)?;
    must!(
        !first.continue_token.is_empty(),
        "the first page of {limit} items has no continue token"
    );
    let path = format!("/api/v1/namespaces/{}/podtemplates", ctx.ns);
    let inconsistent = ctx
        .wait(
            "the first page's continue token to expire (410 with an inconsistent continue token)",
            EXPIRY_WAIT,
            || async {
                let lp = ListParams::default()
                    .limit(limit)
                    .continue_token(&first.continue_token);
                let (code, body) = raw_list(ctx, &path, &lp).await?;
                match code {
                    200 => Ok(Err(format!(
                        "the token of resourceVersion {} has not expired (the API server compacts every --etcd-compaction-interval)",
                        first.resource_version
                    ))),
                    410 => match body["metadata"]["continue"].as_str() {
                        Some(t) if !t.is_empty() => Ok(Ok(t.to_string())),
                        _ => Err(CaseError::Failed(format!(
                            "410 for the expired continue token carries no continue token for an inconsistent list: {body}"
                        ))),
                    },
                    _ => Err(CaseError::Failed(format!(
                        "continuing from the first page's token: {code} {body}"
                    ))),
                }
            },
        )
        .await?;
    let second = page(&templates, limit, &inconsistent).await?;
    must!(
        second.resource_version != first.resource_version,
        "the inconsistent list's page has the first page's resourceVersion {}",
        first.resource_version
    );
    must_eq!(
        second.names.len(),
        limit as usize,
        "items of the page continued from the inconsistent token"
    );
    second.check(limit, limit as usize)?;
    let found = read_pages(
        &templates,
        limit,
        second.continue_token.clone(),
        2 * limit as usize,
        second.resource_version.clone(),
    )
    .await?;
    must_eq!(found, TEMPLATES, "items read in pages");
    Ok(())
}

/// A list answered whatever its status: (code, body as JSON).
async fn raw_list(ctx: &Ctx, path: &str, lp: &ListParams) -> CaseResult<(u16, Value)> {
    let req = kube::core::Request::new(path)
        .list(lp)
        .map_err(|e| CaseError::Failed(format!("building the list request: {e}")))?;
    send(ctx, req.map(kube::client::Body::from)).await
}

async fn send(ctx: &Ctx, req: http::Request<kube::client::Body>) -> CaseResult<(u16, Value)> {
    let resp = ctx.client.send(req).await?;
    let code = resp.status().as_u16();
    let bytes = resp.into_body().collect_bytes().await?;
    let body = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
    Ok((code, body))
}

// ---- server version, Table ------------------------------------------------------------------

/// Confirm a server version: /version MUST answer, its major version MUST be a single digit 1-9
/// and its minor version MUST be an integer (a trailing non-digit such as `+` aside).
async fn server_version(ctx: &Ctx) -> CaseResult {
    let v = ctx.client.apiserver_version().await?;
    let major = regex::Regex::new("[1-9]").expect("regex");
    must_eq!(
        major.find(&v.major).map(|m| m.as_str()),
        Some(v.major.as_str()),
        "major version {:?}",
        v.major
    );
    let digits: String = v.minor.chars().filter(char::is_ascii_digit).collect();
    let first_run = regex::Regex::new("[0-9]+").expect("regex");
    must_eq!(
        first_run.find(&v.minor).map(|m| m.as_str()),
        Some(digits.as_str()),
        "minor version {:?}",
        v.minor
    );
    Ok(())
}

/// API metadata HTTP return: a SelfSubjectAccessReview posted with `Accept: as=Table` (a kind
/// without object metadata, so no Table of it exists) MUST fail with HTTP 406.
async fn table_406(ctx: &Ctx) -> CaseResult {
    let sar = json!({
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {"nonResourceAttributes": {"path": "/", "verb": "get"}},
    });
    let req = http::Request::post("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews")
        .header(
            http::header::ACCEPT,
            "application/json;as=Table;v=v1;g=meta.k8s.io",
        )
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(kube::client::Body::from(sar.to_string().into_bytes()))
        .map_err(|e| CaseError::Failed(format!("building the review: {e}")))?;
    let (code, body) = send(ctx, req).await?;
    must_eq!(
        code,
        406,
        "status of a SelfSubjectAccessReview asked for as a Table (body {body})"
    );
    Ok(())
}
