//! list: selectors, and limit/continue paging over consistent store revisions.

use std::collections::HashMap;

use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use base64::Engine;
use serde_json::{json, Value};

use super::stored;
use super::table::{self, Include};
use crate::registry::lifecycle::from_stored;
use crate::registry::ResourceSpec;
use crate::request::Target;
use crate::selectors::{FieldSelector, LabelSelector};
use crate::state::AppState;
use crate::status::{bytes_response, ApiError};
use crate::storage::{StoreError, Versioned};
use crate::storage_status::store_error;

pub struct Selectors {
    pub labels: LabelSelector,
    pub fields: FieldSelector,
}

impl Selectors {
    pub fn from_query(
        spec: &ResourceSpec,
        query: &HashMap<String, String>,
    ) -> Result<Self, ApiError> {
        let labels = LabelSelector::parse(query.get("labelSelector").map_or("", String::as_str))
            .map_err(|e| ApiError::bad_request(e.to_string()))?;
        let fields =
            FieldSelector::parse(query.get("fieldSelector").map_or("", String::as_str), spec)
                .map_err(|e| ApiError::bad_request(e.to_string()))?;
        Ok(Selectors { labels, fields })
    }

    /// Selects everything (no labelSelector or fieldSelector terms).
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty() && self.fields.is_empty()
    }

    pub fn matches(&self, obj: &Value) -> bool {
        self.labels.matches(obj) && self.fields.matches(obj)
    }
}

/// A continue token's revision that means "the latest" (upstream's -1): what the 410 for a token
/// whose revision was compacted away hands out, so a client can finish its list inconsistently.
pub const LATEST: i64 = -1;

/// Upstream's text for a continue token compacted away (`handleCompactedErrorForPaging`).
const EXPIRED_CONTINUE: &str = "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.";

/// The continue token, in upstream's shape: base64 of `{"v":"meta.k8s.io/v1","rv":N,"start":K}`
/// where K is the next key relative to the list's key prefix.
#[derive(Debug, Clone, PartialEq)]
pub struct Continue {
    pub revision: i64,
    pub start: String,
}

impl Continue {
    pub fn encode(&self) -> String {
        let raw = json!({"v": "meta.k8s.io/v1", "rv": self.revision, "start": self.start});
        base64::engine::general_purpose::URL_SAFE.encode(raw.to_string())
    }

    pub fn decode(token: &str) -> Result<Self, ApiError> {
        let bad = || ApiError::bad_request(format!("continue key is not valid: {token}"));
        let bytes = base64::engine::general_purpose::URL_SAFE
            .decode(token)
            .or_else(|_| base64::engine::general_purpose::STANDARD.decode(token))
            .map_err(|_| bad())?;
        let v: Value = serde_json::from_slice(&bytes).map_err(|_| bad())?;
        // -1: continue at the latest revision (the inconsistent token of an expired one, below).
        let revision = v["rv"]
            .as_i64()
            .filter(|r| *r > 0 || *r == LATEST)
            .ok_or_else(bad)?;
        let start = v["start"].as_str().ok_or_else(bad)?.to_string();
        if start.contains("..") || start.starts_with('/') {
            return Err(bad());
        }
        Ok(Continue { revision, start })
    }
}

/// Every matching object and the list's resourceVersion (the store revision it was read at).
pub async fn list_objects(
    state: &AppState,
    target: &Target,
    selectors: &Selectors,
) -> Result<(Vec<Value>, i64), ApiError> {
    let page = list_page(state, target, selectors, 0, None).await?;
    let objects = page
        .items
        .iter()
        .map(|item| from_stored(&item.value, item.mod_revision))
        .collect::<Result<_, _>>()?;
    Ok((objects, page.revision))
}

pub struct ListPage {
    /// The matching objects as stored: encoding them is the caller's (see `stored.rs`).
    pub items: Vec<Versioned>,
    pub revision: i64,
    pub next: Option<Continue>,
    /// Objects after this page (upstream's remainingItemCount): only on a page with a continue
    /// token and no selector, where the store's count of the keys left is exact.
    pub remaining: Option<i64>,
}

/// Store reads per filtered page are bounded so a selective selector cannot spin forever on a
/// huge collection without answering; a short page with a continue token is valid.
const MAX_ROUNDS: usize = 16;

/// Keeps the items the selectors match; without selectors nothing is decoded.
fn retain_matching(items: &mut Vec<Versioned>, selectors: &Selectors) -> Result<(), ApiError> {
    if selectors.is_empty() {
        return Ok(());
    }
    let mut failed = None;
    items.retain(|item| match stored::view(&item.value, item.mod_revision) {
        Ok(obj) => selectors.matches(&obj),
        Err(e) => {
            failed.get_or_insert(e);
            false
        }
    });
    failed.map_or(Ok(()), Err)
}

/// Objects read in another version than they were stored in are converted (custom resources
/// and built-in kinds served in several versions).
fn served_versions(target: &Target, items: &mut [Versioned]) {
    if target.spec.custom.is_some() || target.spec.convert.is_some() {
        for item in items {
            crate::crd::convert::convert_in_place(target.spec, &mut item.value, item.mod_revision);
        }
    }
}

/// Up to `limit` matching objects (0 = all) from `from` on, at one store revision.
pub async fn list_page(
    state: &AppState,
    target: &Target,
    selectors: &Selectors,
    limit: i64,
    from: Option<Continue>,
) -> Result<ListPage, ApiError> {
    let prefix = target.spec.key_prefix(target.namespace.as_deref());
    if limit <= 0 && from.is_none() {
        // Everything at once: the store reads it in pages that fit a gRPC message.
        let (mut items, revision) = state.store.list(&prefix).await.map_err(store_error)?;
        served_versions(target, &mut items);
        crate::crd::convert::served_stored(&state.store, target.spec, &mut items).await?;
        retain_matching(&mut items, selectors)?;
        return Ok(ListPage {
            items,
            revision,
            next: None,
            remaining: None,
        });
    }
    let (mut start, mut revision) = match &from {
        Some(c) => (format!("{prefix}{}", c.start), c.revision.max(0)),
        None => (prefix.clone(), 0),
    };
    let mut items = Vec::new();
    let mut remaining = None;
    for _ in 0..MAX_ROUNDS {
        let want = if limit > 0 {
            limit - items.len() as i64
        } else {
            0
        };
        let mut page = state
            .store
            .list_page(&prefix, &start, revision, want)
            .await
            .map_err(|e| match e {
                StoreError::Compacted => ApiError::expired(EXPIRED_CONTINUE.into()),
                other => store_error(other),
            })?;
        revision = page.revision;
        // The keys counted from this read's start on, less the ones it returned.
        remaining = Some(page.count - page.items.len() as i64);
        let last_key = page.items.last().map(|i| i.key.clone());
        served_versions(target, &mut page.items);
        crate::crd::convert::served_stored(&state.store, target.spec, &mut page.items).await?;
        retain_matching(&mut page.items, selectors)?;
        items.append(&mut page.items);
        let Some(last_key) = last_key.filter(|_| page.more) else {
            return Ok(ListPage {
                items,
                revision,
                next: None,
                remaining: None,
            });
        };
        // The next read starts just after the last key seen.
        start = format!("{last_key}\0");
        if limit > 0 && items.len() as i64 >= limit {
            break;
        }
    }
    let next = Continue {
        revision,
        start: start.strip_prefix(&prefix).unwrap_or(&start).to_string(),
    };
    Ok(ListPage {
        items,
        revision,
        next: Some(next),
        remaining: remaining.filter(|_| selectors.is_empty()),
    })
}

pub async fn list(
    state: &AppState,
    target: &Target,
    headers: &HeaderMap,
    query: &HashMap<String, String>,
) -> Result<Response, ApiError> {
    let spec = target.spec;
    super::list_options::validate(query, false)?;
    let selectors = Selectors::from_query(spec, query)?;
    let limit = match query.get("limit").map(String::as_str) {
        None | Some("") => 0,
        Some(l) => l
            .parse::<i64>()
            .map_err(|_| ApiError::bad_request(format!("invalid limit {l:?}")))?
            .max(0),
    };
    let from = match query.get("continue").map(String::as_str) {
        None | Some("") => None,
        Some(token) => Some(Continue::decode(token)?),
    };
    let started = std::time::Instant::now();
    let restart = from.as_ref().map(|c| c.start.clone());
    let page = match list_page(state, target, &selectors, limit, from).await {
        Ok(page) => page,
        // Its revision was compacted away: upstream's 410 carries a token that goes on from the
        // same key at the latest revision.
        Err(e) if e.code == 410 && e.message == EXPIRED_CONTINUE => {
            let token = Continue {
                revision: LATEST,
                start: restart.unwrap_or_default(),
            };
            return Ok(crate::status::with_continue(&e, &token.encode()));
        }
        Err(e) => return Err(e),
    };
    let read = started.elapsed();
    let mut metadata = json!({"resourceVersion": page.revision.to_string()});
    if let Some(next) = &page.next {
        metadata["continue"] = json!(next.encode());
    }
    if let Some(n) = page.remaining {
        metadata["remainingItemCount"] = json!(n);
    }
    let body = if table::wants_table(headers) {
        let mut out = Vec::with_capacity(stored_size(&page.items) + 4096);
        table::write_table(
            &mut out,
            spec,
            &page.items,
            &metadata,
            Include::from_query(query),
        )?;
        out
    } else if let Some(v) = super::partial_metadata::list_version(headers) {
        super::partial_metadata::write_list(v, &page.items, &metadata)?
    } else {
        write_list(spec, &page.items, &metadata)?
    };
    // Where a LIST's time goes (RUST_LOG=kiln_apiserver::handlers::list=debug).
    tracing::debug!(
        resource = spec.plural,
        items = page.items.len(),
        bytes = body.len(),
        store_ms = read.as_secs_f64() * 1000.0,
        encode_ms = (started.elapsed() - read).as_secs_f64() * 1000.0,
        "list"
    );
    Ok(bytes_response(StatusCode::OK, body))
}

/// Roughly what the objects take written out (each value plus its resourceVersion and a comma), so
/// the body is allocated once.
fn stored_size(items: &[Versioned]) -> usize {
    items.iter().map(|i| i.value.len() + 40).sum()
}

/// The `<Kind>List` of stored objects: keys in sorted order, as a serialised `Value` has them.
fn write_list(
    spec: &ResourceSpec,
    items: &[Versioned],
    metadata: &Value,
) -> Result<Vec<u8>, ApiError> {
    let mut out = Vec::with_capacity(stored_size(items) + 1024);
    let head = json!({"apiVersion": spec.api_version()});
    let _ = serde_json::to_writer(&mut out, &head);
    out.pop(); // reopen the object after apiVersion
    out.extend_from_slice(br#","items":["#);
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        stored::write_object(&mut out, &item.value, item.mod_revision)?;
    }
    out.extend_from_slice(br#"],"kind":"#);
    let _ = serde_json::to_writer(&mut out, spec.list_kind);
    out.extend_from_slice(br#","metadata":"#);
    let _ = serde_json::to_writer(&mut out, metadata);
    out.push(b'}');
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continue_token_round_trips_and_rejects_garbage() {
        let c = Continue {
            revision: 42,
            start: "default/web\0".into(),
        };
        assert_eq!(Continue::decode(&c.encode()).unwrap(), c);
        assert_eq!(Continue::decode("not-base64!").unwrap_err().code, 400);
    }
}
