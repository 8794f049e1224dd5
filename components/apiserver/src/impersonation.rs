//! User impersonation (`Impersonate-User`, `-Group`, `-Uid`, `-Extra-<key>` headers, what
//! `kubectl --as` and client-go's ImpersonationConfig send): when the authenticated requester may
//! `impersonate` each thing asked for, the request proceeds as the impersonated user, as upstream's
//! WithImpersonation filter does. kiln's users carry no uid or extra, so those are authorized but
//! not carried further.

use percent_encoding::percent_decode_str;
use std::future::Future;

use axum::http::HeaderMap;

use crate::auth::{Attributes, Identity, User};
use crate::status::ApiError;

const USER: &str = "impersonate-user";
const GROUP: &str = "impersonate-group";
const UID: &str = "impersonate-uid";
const EXTRA_PREFIX: &str = "impersonate-extra-";
const SA_PREFIX: &str = "system:serviceaccount:";
const AUTHENTICATED: &str = "system:authenticated";
const UNAUTHENTICATED: &str = "system:unauthenticated";
const ANONYMOUS: &str = "system:anonymous";

/// What the headers ask to act as.
#[derive(Debug, Default, PartialEq)]
pub struct Requested {
    pub user: String,
    pub groups: Vec<String>,
    pub uid: Option<String>,
    /// (key, value) pairs, keys lower-cased and unescaped as upstream does.
    pub extra: Vec<(String, String)>,
}

/// One `impersonate` authorization check, owned.
#[derive(Debug, Clone, PartialEq)]
pub struct Check {
    pub group: &'static str,
    pub resource: &'static str,
    pub subresource: Option<String>,
    pub namespace: Option<String>,
    pub name: String,
}

impl Check {
    fn attributes(&self) -> Attributes<'_> {
        Attributes::Resource {
            verb: "impersonate",
            group: self.group,
            resource: self.resource,
            subresource: self.subresource.as_deref(),
            namespace: self.namespace.as_deref(),
            name: Some(&self.name),
        }
    }
}

/// Decides a requester's `impersonate` checks (RBAC in the server, a recording double in tests).
pub trait Authorize {
    fn allows(
        &self,
        who: &Identity,
        attrs: &Attributes<'_>,
    ) -> impl Future<Output = Result<bool, String>> + Send;
}

impl Authorize for crate::rbac::Authorizer {
    async fn allows(&self, who: &Identity, attrs: &Attributes<'_>) -> Result<bool, String> {
        self.authorize(who, attrs).await.map_err(|e| e.to_string())
    }
}

/// Upstream unescapes `%XX` in extra keys (header names cannot carry every character).
fn unescape(key: &str) -> String {
    percent_decode_str(key)
        .decode_utf8()
        .map(|k| k.into_owned())
        .unwrap_or_else(|_| key.to_string())
}

/// The impersonation the headers ask for; `None` without any impersonation header.
pub fn requested(headers: &HeaderMap) -> Result<Option<Requested>, ApiError> {
    let mut r = Requested::default();
    let mut any = false;
    for (name, value) in headers {
        let name = name.as_str();
        let Some(value) = value.to_str().ok().map(str::to_string) else {
            continue;
        };
        if name == USER {
            r.user = value;
        } else if name == GROUP {
            r.groups.push(value);
        } else if name == UID {
            r.uid = Some(value);
        } else if let Some(key) = name.strip_prefix(EXTRA_PREFIX) {
            r.extra.push((unescape(key), value));
        } else {
            continue;
        }
        any = true;
    }
    if !any {
        return Ok(None);
    }
    if r.user.is_empty() {
        return Err(ApiError::internal(format!(
            "requested {r:?} without impersonating a user"
        )));
    }
    Ok(Some(r))
}

/// `system:serviceaccount:<namespace>:<name>` split, when the user is a service account.
fn service_account(user: &str) -> Option<(&str, &str)> {
    let (ns, name) = user.strip_prefix(SA_PREFIX)?.split_once(':')?;
    (!ns.is_empty() && !name.is_empty() && !name.contains(':')).then_some((ns, name))
}

/// The checks the request needs, in upstream's order: the user (or service account), each group,
/// each extra value, the uid.
pub fn checks(r: &Requested) -> Vec<Check> {
    let mut out = Vec::new();
    out.push(match service_account(&r.user) {
        Some((ns, name)) => Check {
            group: "",
            resource: "serviceaccounts",
            subresource: None,
            namespace: Some(ns.to_string()),
            name: name.to_string(),
        },
        None => Check {
            group: "",
            resource: "users",
            subresource: None,
            namespace: None,
            name: r.user.clone(),
        },
    });
    out.extend(r.groups.iter().map(|g| Check {
        group: "",
        resource: "groups",
        subresource: None,
        namespace: None,
        name: g.clone(),
    }));
    out.extend(r.extra.iter().map(|(k, v)| Check {
        group: "authentication.k8s.io",
        resource: "userextras",
        subresource: Some(k.clone()),
        namespace: None,
        name: v.clone(),
    }));
    out.extend(r.uid.iter().map(|u| Check {
        group: "authentication.k8s.io",
        resource: "uids",
        subresource: None,
        namespace: None,
        name: u.clone(),
    }));
    out
}

/// The user the request continues as: a service account without groups asked for gets its fixed
/// groups; everyone but system:anonymous is in system:authenticated (unless the groups asked for
/// say authenticated or unauthenticated already), system:anonymous in system:unauthenticated.
pub fn impersonated_user(r: &Requested) -> User {
    let mut groups = r.groups.clone();
    if let (Some((ns, _)), true) = (service_account(&r.user), groups.is_empty()) {
        groups = vec![
            "system:serviceaccounts".to_string(),
            format!("system:serviceaccounts:{ns}"),
        ];
    }
    if r.user != ANONYMOUS {
        if !groups
            .iter()
            .any(|g| g == AUTHENTICATED || g == UNAUTHENTICATED)
        {
            groups.push(AUTHENTICATED.to_string());
        }
    } else if !groups.iter().any(|g| g == UNAUTHENTICATED) {
        groups.push(UNAUTHENTICATED.to_string());
    }
    User {
        name: r.user.clone(),
        groups,
    }
}

/// The identity a request acts as: `None` when it asks for no impersonation; 403 when `who` may
/// not impersonate one of the things asked for.
pub async fn apply<A: Authorize>(
    authorizer: &A,
    who: &Identity,
    headers: &HeaderMap,
) -> Result<Option<Identity>, ApiError> {
    let Some(r) = requested(headers)? else {
        return Ok(None);
    };
    for check in checks(&r) {
        let allowed = authorizer
            .allows(who, &check.attributes())
            .await
            .map_err(ApiError::internal)?;
        if !allowed {
            return Err(ApiError::forbidden_resource(
                who.name(),
                "impersonate",
                check.group,
                check.resource,
                check.subresource.as_deref(),
                check.namespace.as_deref(),
                Some(&check.name),
            ));
        }
    }
    tracing::debug!(requester = who.name(), user = %r.user, "impersonating");
    Ok(Some(Identity::User(impersonated_user(&r))))
}

/// Drops the impersonation headers once applied, as upstream does, so nothing downstream (an
/// aggregated server, a webhook) mistakes them for the requester's.
pub fn strip(headers: &mut HeaderMap) {
    let names: Vec<_> = headers
        .keys()
        .filter(|n| {
            let n = n.as_str();
            n == USER || n == GROUP || n == UID || n.starts_with(EXTRA_PREFIX)
        })
        .cloned()
        .collect();
    for n in names {
        headers.remove(n);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::test_support::headers;

    /// Allows what names a resource in `allowed` and records every check it was asked.
    struct Recording {
        allowed: Vec<&'static str>,
        asked: Mutex<Vec<String>>,
    }

    impl Authorize for Recording {
        async fn allows(&self, who: &Identity, attrs: &Attributes<'_>) -> Result<bool, String> {
            let Attributes::Resource {
                verb,
                resource,
                namespace,
                name,
                ..
            } = attrs
            else {
                return Ok(false);
            };
            self.asked.lock().unwrap().push(format!(
                "{} {verb} {resource} {namespace:?} {name:?}",
                who.name()
            ));
            Ok(self.allowed.contains(resource))
        }
    }

    fn admin() -> Identity {
        Identity::User(User {
            name: "admin".into(),
            groups: vec!["system:masters".into()],
        })
    }

    #[tokio::test]
    async fn a_permitted_service_account_impersonation_acts_as_it() {
        let rec = Recording {
            allowed: vec!["serviceaccounts", "groups", "uids"],
            asked: Mutex::new(Vec::new()),
        };
        let h = headers(&[
            ("Impersonate-User", "system:serviceaccount:ns1:e2e"),
            ("Impersonate-Uid", "u-1"),
            ("Impersonate-Group", "system:authenticated"),
            ("Impersonate-Group", "system:serviceaccounts:ns1"),
        ]);
        let got = apply(&rec, &admin(), &h).await.unwrap();
        assert_eq!(
            got,
            Some(Identity::User(User {
                name: "system:serviceaccount:ns1:e2e".into(),
                groups: vec![
                    "system:authenticated".into(),
                    "system:serviceaccounts:ns1".into()
                ],
            }))
        );
        assert_eq!(
            *rec.asked.lock().unwrap(),
            vec![
                "admin impersonate serviceaccounts Some(\"ns1\") Some(\"e2e\")",
                "admin impersonate groups None Some(\"system:authenticated\")",
                "admin impersonate groups None Some(\"system:serviceaccounts:ns1\")",
                "admin impersonate uids None Some(\"u-1\")",
            ]
        );
    }

    #[tokio::test]
    async fn a_denied_check_is_forbidden_and_no_headers_no_impersonation() {
        let rec = Recording {
            allowed: vec![],
            asked: Mutex::new(Vec::new()),
        };
        let e = apply(&rec, &admin(), &headers(&[("Impersonate-User", "bob")]))
            .await
            .unwrap_err();
        assert_eq!(e.code, 403);
        assert_eq!(
            apply(&rec, &admin(), &headers(&[("Accept", "x")]))
                .await
                .unwrap(),
            None
        );
        let e = apply(&rec, &admin(), &headers(&[("Impersonate-Group", "g")]))
            .await
            .unwrap_err();
        assert_eq!(e.code, 500);
    }

    #[test]
    fn groups_follow_upstream() {
        let user = |name: &str, groups: &[&str]| {
            impersonated_user(&Requested {
                user: name.into(),
                groups: groups.iter().map(|g| g.to_string()).collect(),
                ..Default::default()
            })
            .groups
        };
        assert_eq!(
            user("system:serviceaccount:ns:sa", &[]),
            vec![
                "system:serviceaccounts",
                "system:serviceaccounts:ns",
                "system:authenticated"
            ]
        );
        assert_eq!(user("bob", &["dev"]), vec!["dev", "system:authenticated"]);
        assert_eq!(user("bob", &[UNAUTHENTICATED]), vec![UNAUTHENTICATED]);
        assert_eq!(user(ANONYMOUS, &[]), vec![UNAUTHENTICATED]);
    }

    #[test]
    fn extra_keys_are_unescaped_and_headers_stripped() {
        let mut h = headers(&[
            ("Impersonate-User", "bob"),
            ("Impersonate-Extra-Scopes%2Fread", "a"),
            ("Accept", "x"),
        ]);
        let r = requested(&h).unwrap().unwrap();
        assert_eq!(r.extra, vec![("scopes/read".to_string(), "a".to_string())]);
        assert_eq!(checks(&r)[1].subresource.as_deref(), Some("scopes/read"));
        strip(&mut h);
        assert_eq!(h.len(), 1);
    }
}
