//! Webhook conversion (`spec.conversion.strategy: Webhook`): objects read in another version than
//! they were written in are sent, all of a response's at once, to the CRD's conversion webhook as a
//! `ConversionReview` (apiextensions.k8s.io/v1) over HTTPS with the CRD's caBundle, through the same
//! client as admission webhooks. As upstream, a webhook may change only labels and annotations of
//! the metadata; everything else of it is kept from the original.

use std::time::Duration;

use serde_json::{json, Value};

use crate::admission::webhook::call::{post, service_destination, url_destination};
use crate::admission::webhook::WebhookError;
use crate::registry::lifecycle::new_uid;
use crate::registry::ResourceSpec;
use crate::status::ApiError;
use crate::storage::Store;

/// Upstream's conversion webhook timeout.
const TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum ConversionError {
    #[error(transparent)]
    Call(#[from] WebhookError),
    #[error(
        "conversion webhook does not accept ConversionReview v1 (conversionReviewVersions {0:?})"
    )]
    Versions(Vec<String>),
    #[error("{0}")]
    Response(String),
}

fn failed(spec: &ResourceSpec, e: ConversionError) -> ApiError {
    ApiError::internal(format!(
        "conversion webhook for {}, Kind={} failed: {e}",
        spec.api_version(),
        spec.kind
    ))
}

/// Converts `objects` to `spec`'s version with the webhook `config` (`spec.conversion.webhook`).
pub async fn convert(
    store: &Store,
    spec: &ResourceSpec,
    config: &Value,
    objects: Vec<Value>,
) -> Result<Vec<Value>, ApiError> {
    if objects.is_empty() {
        return Ok(objects);
    }
    let versions: Vec<String> = config["conversionReviewVersions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_string)
        .collect();
    if !versions.iter().any(|v| v == "v1") {
        return Err(failed(spec, ConversionError::Versions(versions)));
    }
    let desired = spec.api_version();
    let uid = new_uid();
    let review = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "ConversionReview",
        "request": {"uid": uid, "desiredAPIVersion": desired, "objects": objects},
    });
    let answer = call(store, &config["clientConfig"], review)
        .await
        .map_err(|e| failed(spec, e))?;
    let response = &answer["response"];
    let check = |ok: bool, why: String| {
        if ok {
            Ok(())
        } else {
            Err(failed(spec, ConversionError::Response(why)))
        }
    };
    check(
        response["uid"] == uid.as_str(),
        format!("expected response.uid={uid:?}, got {:?}", response["uid"]),
    )?;
    let status = response["result"]["status"].as_str().unwrap_or("");
    check(
        status == "Success",
        format!(
            "conversion request failed: {}",
            response["result"]["message"].as_str().unwrap_or(status)
        ),
    )?;
    let converted = response["convertedObjects"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    check(
        converted.len() == objects.len(),
        format!(
            "returned {} objects, expected {}",
            converted.len(),
            objects.len()
        ),
    )?;
    let mut out = Vec::with_capacity(objects.len());
    for (original, mut new) in objects.into_iter().zip(converted) {
        check(
            new["apiVersion"] == desired.as_str(),
            format!(
                "invalid apiVersion {:?}, expected {desired:?}",
                new["apiVersion"]
            ),
        )?;
        let mut meta = original["metadata"].clone();
        for field in ["labels", "annotations"] {
            match new["metadata"].get(field) {
                Some(v) => meta[field] = v.clone(),
                None => {
                    if let Some(m) = meta.as_object_mut() {
                        m.remove(field);
                    }
                }
            }
        }
        new["metadata"] = meta;
        out.push(new);
    }
    Ok(out)
}

async fn call(
    store: &Store,
    client_config: &Value,
    review: Value,
) -> Result<Value, ConversionError> {
    let secs = TIMEOUT.as_secs();
    let ca = client_config["caBundle"]
        .as_str()
        .map(|b| {
            base64::Engine::decode(&base64::engine::general_purpose::STANDARD, b)
                .unwrap_or_default()
        })
        .unwrap_or_default();
    let dest = match (
        client_config["url"].as_str(),
        client_config.get("service").filter(|s| s.is_object()),
    ) {
        (Some(url), _) => url_destination(url, secs)?,
        (None, Some(svc)) => {
            let port = svc["port"]
                .as_u64()
                .and_then(|p| u16::try_from(p).ok())
                .unwrap_or(443);
            service_destination(
                store,
                svc["namespace"].as_str().unwrap_or(""),
                svc["name"].as_str().unwrap_or(""),
                svc["path"].as_str().unwrap_or("/"),
                port,
                secs,
            )
            .await?
        }
        (None, None) => {
            return Err(ConversionError::Response(
                "clientConfig names neither url nor service".into(),
            ))
        }
    };
    let url = dest.url.clone();
    let body = serde_json::to_vec(&review).unwrap_or_default();
    tokio::time::timeout(TIMEOUT, post(&dest, &ca, body))
        .await
        .map_err(|_| ConversionError::Call(WebhookError::Timeout(url)))?
        .map_err(ConversionError::Call)
}
