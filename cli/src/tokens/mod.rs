//! `kiln token create|list|delete`: bootstrap tokens (kubeadm's format `[a-z0-9]{6}.[a-z0-9]{16}`) kept as
//! `bootstrap.kubernetes.io/token` Secrets in kube-system, with an expiration (TTL) the API server honours.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::ByteString;
use kube::api::{DeleteParams, ListParams, ObjectMeta, PostParams};
use rand::Rng;

pub const NAMESPACE: &str = "kube-system";
pub const SECRET_TYPE: &str = "bootstrap.kubernetes.io/token";
pub const DEFAULT_GROUP: &str = "system:bootstrappers:kiln:default-node-token";

#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("token {0:?} is not of the form [a-z0-9]{{6}}.[a-z0-9]{{16}}")]
    Malformed(String),
    #[error("token id {0:?} is not of the form [a-z0-9]{{6}}")]
    BadId(String),
    #[error("bootstrap token {id}: {source}")]
    Api {
        id: String,
        #[source]
        source: kube::Error,
    },
}

/// A bootstrap token as listed.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TokenInfo {
    pub token: String,
    pub expires: Option<String>,
    pub usages: Vec<String>,
    pub groups: Vec<String>,
    pub description: Option<String>,
}

const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";

pub fn generate() -> String {
    let mut rng = rand::rng();
    let mut pick = |n: usize| -> String {
        (0..n)
            .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
            .collect()
    };
    format!("{}.{}", pick(6), pick(16))
}

fn valid_part(s: &str, len: usize) -> bool {
    s.len() == len && s.bytes().all(|b| ALPHABET.contains(&b))
}

/// (id, secret) of a well-formed token.
pub fn parse(token: &str) -> Result<(&str, &str), TokenError> {
    match token.split_once('.') {
        Some((id, secret)) if valid_part(id, 6) && valid_part(secret, 16) => Ok((id, secret)),
        _ => Err(TokenError::Malformed(token.to_string())),
    }
}

/// The Secret holding `token`, expiring `ttl` from `now` (None: never).
pub fn secret(
    token: &str,
    ttl: Option<time::Duration>,
    now: time::OffsetDateTime,
    description: Option<&str>,
) -> Result<Secret, TokenError> {
    let (id, secret) = parse(token)?;
    let mut data: BTreeMap<String, ByteString> = BTreeMap::new();
    let mut put = |k: &str, v: &str| {
        data.insert(k.to_string(), ByteString(v.as_bytes().to_vec()));
    };
    put("token-id", id);
    put("token-secret", secret);
    put("usage-bootstrap-authentication", "true");
    put("usage-bootstrap-signing", "true");
    put("auth-extra-groups", DEFAULT_GROUP);
    if let Some(ttl) = ttl {
        let at = (now + ttl)
            .replace_nanosecond(0)
            .unwrap_or(now + ttl)
            .format(&time::format_description::well_known::Rfc3339)
            .unwrap_or_default();
        put("expiration", &at);
    }
    if let Some(d) = description {
        put("description", d);
    }
    Ok(Secret {
        metadata: ObjectMeta {
            name: Some(format!("bootstrap-token-{id}")),
            namespace: Some(NAMESPACE.into()),
            ..Default::default()
        },
        type_: Some(SECRET_TYPE.into()),
        data: Some(data),
        ..Default::default()
    })
}

fn field(s: &Secret, k: &str) -> Option<String> {
    s.data
        .as_ref()?
        .get(k)
        .map(|v| String::from_utf8_lossy(&v.0).into_owned())
}

pub fn info(s: &Secret) -> Option<TokenInfo> {
    if s.type_.as_deref() != Some(SECRET_TYPE) {
        return None;
    }
    let id = field(s, "token-id")?;
    let secret = field(s, "token-secret")?;
    let usages = ["authentication", "signing"]
        .into_iter()
        .filter(|u| field(s, &format!("usage-bootstrap-{u}")).as_deref() == Some("true"))
        .map(str::to_string)
        .collect();
    Some(TokenInfo {
        token: format!("{id}.{secret}"),
        expires: field(s, "expiration"),
        usages,
        groups: field(s, "auth-extra-groups")
            .map(|g| g.split(',').map(str::to_string).collect())
            .unwrap_or_default(),
        description: field(s, "description"),
    })
}

pub async fn create(
    client: kube::Client,
    token: &str,
    ttl: Option<time::Duration>,
    description: Option<&str>,
) -> Result<TokenInfo, TokenError> {
    let s = secret(token, ttl, time::OffsetDateTime::now_utc(), description)?;
    let api: kube::Api<Secret> = kube::Api::namespaced(client, NAMESPACE);
    let (id, _) = parse(token)?;
    let created = api
        .create(&PostParams::default(), &s)
        .await
        .map_err(|source| TokenError::Api {
            id: id.to_string(),
            source,
        })?;
    Ok(info(&created).expect("a token secret we just made"))
}

pub async fn list(client: kube::Client) -> Result<Vec<TokenInfo>, TokenError> {
    let api: kube::Api<Secret> = kube::Api::namespaced(client, NAMESPACE);
    let all = api
        .list(&ListParams::default())
        .await
        .map_err(|source| TokenError::Api {
            id: "*".into(),
            source,
        })?;
    Ok(all.items.iter().filter_map(info).collect())
}

/// Delete by token or by id.
pub async fn delete(client: kube::Client, token_or_id: &str) -> Result<(), TokenError> {
    let id = token_or_id.split('.').next().unwrap_or_default();
    if !valid_part(id, 6) {
        return Err(TokenError::BadId(token_or_id.to_string()));
    }
    let api: kube::Api<Secret> = kube::Api::namespaced(client, NAMESPACE);
    api.delete(&format!("bootstrap-token-{id}"), &DeleteParams::default())
        .await
        .map_err(|source| TokenError::Api {
            id: id.to_string(),
            source,
        })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_tokens_are_well_formed_and_differ() {
        let a = generate();
        assert!(parse(&a).is_ok(), "{a}");
        assert_ne!(a, generate());
        for bad in [
            "abc.def",
            "ABCDEF.0123456789abcdef",
            "abcdef0123456789abcdef",
            "abcdef.0123456789abcde!",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_secret_has_kubeadms_fields_and_expiry() {
        let now = time::macros::datetime!(2026-11-29 12:00:00 UTC);
        let s = secret(
            "abcdef.0123456789abcdef",
            Some(time::Duration::hours(24)),
            now,
            Some("lab"),
        )
        .unwrap();
        assert_eq!(s.metadata.name.as_deref(), Some("bootstrap-token-abcdef"));
        assert_eq!(s.type_.as_deref(), Some(SECRET_TYPE));
        let i = info(&s).unwrap();
        assert_eq!(i.token, "abcdef.0123456789abcdef");
        assert_eq!(i.expires.as_deref(), Some("2026-11-30T12:00:00Z"));
        assert_eq!(i.usages, vec!["authentication", "signing"]);
        assert_eq!(i.groups, vec![DEFAULT_GROUP]);
        let never = secret("abcdef.0123456789abcdef", None, now, None).unwrap();
        assert_eq!(info(&never).unwrap().expires, None);
    }
}
