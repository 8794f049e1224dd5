//! tokencleaner: deletes bootstrap-token Secrets (`kube-system`, type
//! `bootstrap.kubernetes.io/token`) once their `expiration` has passed, and looks again when the
//! next one is due. An unparseable expiration counts as expired, as upstream's. Upstream runs this
//! controller only on request; kiln hands out bootstrap tokens on every join, so it is on by default.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, Preconditions};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use time::OffsetDateTime;

use crate::context::Context;

pub const NAMESPACE: &str = "kube-system";
pub const SECRET_TYPE: &str = "bootstrap.kubernetes.io/token";

#[derive(Debug, thiserror::Error)]
pub enum TokenCleanerError {
    #[error("deleting expired bootstrap token {name}: {source}")]
    Delete { name: String, source: kube::Error },
}

#[derive(Debug, PartialEq, Eq)]
pub enum Expiry {
    /// No expiration: kept forever.
    Never,
    Expired,
    In(Duration),
}

pub fn expiry(secret: &Secret, now: OffsetDateTime) -> Expiry {
    let Some(raw) = secret.data.as_ref().and_then(|d| d.get("expiration")) else {
        return Expiry::Never;
    };
    let Ok(text) = std::str::from_utf8(&raw.0) else {
        return Expiry::Expired;
    };
    if text.is_empty() {
        return Expiry::Never;
    }
    match OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339) {
        Ok(at) if at > now => Expiry::In((at - now).unsigned_abs()),
        _ => Expiry::Expired,
    }
}

pub async fn run(ctx: Context) {
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), NAMESPACE);
    Controller::new(
        api.clone(),
        watcher::Config::default().fields(&format!("type={SECRET_TYPE}")),
    )
    .run(reconcile, error_policy, Arc::new(api))
    .for_each(|_| async {})
    .await;
}

async fn reconcile(
    secret: Arc<Secret>,
    api: Arc<Api<Secret>>,
) -> Result<Action, TokenCleanerError> {
    if secret.type_.as_deref() != Some(SECRET_TYPE) {
        return Ok(Action::await_change());
    }
    match expiry(&secret, OffsetDateTime::now_utc()) {
        Expiry::Never => Ok(Action::await_change()),
        // A little after the moment, so the next look finds it expired; far-off expiries are
        // looked at hourly (the timer wheel does not take decades).
        Expiry::In(left) => Ok(Action::requeue(
            (left + Duration::from_secs(1)).min(Duration::from_secs(3600)),
        )),
        Expiry::Expired => {
            let name = secret.metadata.name.clone().unwrap_or_default();
            // Only the object we judged: a recreated token of the same name is not deleted.
            let dp = DeleteParams {
                preconditions: Some(Preconditions {
                    uid: secret.metadata.uid.clone(),
                    resource_version: None,
                }),
                ..Default::default()
            };
            match api.delete(&name, &dp).await {
                Ok(_) => tracing::info!(secret = %name, "deleted expired bootstrap token"),
                Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
                Err(source) => return Err(TokenCleanerError::Delete { name, source }),
            }
            Ok(Action::await_change())
        }
    }
}

fn error_policy(_: Arc<Secret>, err: &TokenCleanerError, _: Arc<Api<Secret>>) -> Action {
    tracing::warn!(error = %err, "tokencleaner");
    Action::requeue(Duration::from_secs(2))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;
    use std::collections::BTreeMap;

    fn secret(exp: Option<&str>) -> Secret {
        let mut data = BTreeMap::from([("token-id".to_string(), ByteString(b"abcdef".to_vec()))]);
        if let Some(e) = exp {
            data.insert("expiration".into(), ByteString(e.as_bytes().to_vec()));
        }
        Secret {
            data: Some(data),
            type_: Some(SECRET_TYPE.into()),
            ..Default::default()
        }
    }

    #[test]
    fn expiry_decisions() {
        let now = OffsetDateTime::parse(
            "2030-01-01T00:00:00Z",
            &time::format_description::well_known::Rfc3339,
        )
        .unwrap();
        assert_eq!(expiry(&secret(None), now), Expiry::Never);
        assert_eq!(
            expiry(&secret(Some("2029-12-31T23:59:59Z")), now),
            Expiry::Expired
        );
        assert_eq!(
            expiry(&secret(Some("2030-01-01T01:00:00Z")), now),
            Expiry::In(Duration::from_secs(3600))
        );
        assert_eq!(expiry(&secret(Some("tomorrow")), now), Expiry::Expired);
    }
}
