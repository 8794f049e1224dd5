//! Bootstrap tokens (`[a-z0-9]{6}.[a-z0-9]{16}`) checked against the Secret
//! `kube-system/bootstrap-token-<id>` of type `bootstrap.kubernetes.io/token`, as upstream's
//! bootstrap token authenticator: usage-bootstrap-authentication must be "true", an expired or
//! deleting secret is ignored, auth-extra-groups must be `system:bootstrappers:*`.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use serde_json::Value;

use crate::auth::User;

pub const SECRET_TYPE: &str = "bootstrap.kubernetes.io/token";

/// (id, secret) when `token` has the bootstrap token shape.
pub fn parse(token: &str) -> Option<(&str, &str)> {
    let (id, secret) = token.split_once('.')?;
    let ok = |s: &str, n: usize| {
        s.len() == n
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    };
    (ok(id, 6) && ok(secret, 16)).then_some((id, secret))
}

fn data(secret: &Value, key: &str) -> Option<String> {
    let raw = secret["data"][key].as_str()?;
    String::from_utf8(STANDARD.decode(raw).ok()?).ok()
}

/// Constant-time comparison, so the secret's bytes do not leak through timing.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

/// The user a valid token stands for, given its Secret; `None` when the token is not valid.
pub fn user_for(secret: &Value, id: &str, token_secret: &str, now: i64) -> Option<User> {
    if secret["type"] != SECRET_TYPE || secret["metadata"]["deletionTimestamp"].is_string() {
        return None;
    }
    if data(secret, "token-id").as_deref() != Some(id) {
        return None;
    }
    if !same(&data(secret, "token-secret")?, token_secret) {
        return None;
    }
    if data(secret, "usage-bootstrap-authentication").as_deref() != Some("true") {
        return None;
    }
    if let Some(exp) = data(secret, "expiration") {
        let t = time::OffsetDateTime::parse(&exp, &time::format_description::well_known::Rfc3339)
            .ok()?;
        if t.unix_timestamp() <= now {
            return None;
        }
    }
    let mut groups = vec!["system:bootstrappers".to_string()];
    if let Some(extra) = data(secret, "auth-extra-groups") {
        for g in extra.split(',').map(str::trim).filter(|g| !g.is_empty()) {
            if !g.starts_with("system:bootstrappers:") {
                return None; // upstream rejects the whole token
            }
            if !groups.iter().any(|x| x == g) {
                groups.push(g.to_string());
            }
        }
    }
    groups.push("system:authenticated".into());
    Some(User {
        name: format!("system:bootstrap:{id}"),
        groups,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn b(s: &str) -> String {
        STANDARD.encode(s)
    }

    fn secret(exp: &str) -> Value {
        json!({"type": SECRET_TYPE, "metadata": {"name": "bootstrap-token-abcdef"}, "data": {
            "token-id": b("abcdef"), "token-secret": b("0123456789abcdef"),
            "usage-bootstrap-authentication": b("true"), "expiration": b(exp),
            "auth-extra-groups": b("system:bootstrappers:kubeadm:default-node-token")}})
    }

    #[test]
    fn shape() {
        assert_eq!(
            parse("abcdef.0123456789abcdef"),
            Some(("abcdef", "0123456789abcdef"))
        );
        assert_eq!(parse("ABCDEF.0123456789abcdef"), None);
        assert_eq!(parse("abcdef.0123"), None);
        assert_eq!(parse("eyJhbGciOi.x.y"), None);
    }

    #[test]
    fn valid_expired_and_wrong_secret() {
        let s = secret("2030-01-01T00:00:00Z");
        let u = user_for(&s, "abcdef", "0123456789abcdef", 0).unwrap();
        assert_eq!(u.name, "system:bootstrap:abcdef");
        assert_eq!(
            u.groups,
            [
                "system:bootstrappers",
                "system:bootstrappers:kubeadm:default-node-token",
                "system:authenticated"
            ]
        );
        assert!(user_for(&s, "abcdef", "0123456789abcdeX", 0).is_none());
        let expired = secret("2020-01-01T00:00:00Z");
        assert!(user_for(&expired, "abcdef", "0123456789abcdef", 1_700_000_000).is_none());
    }
}
