//! The `authorizer` of admission policies: the request's user and resource for CEL's authz
//! library (`crate::cel::authz`), and the loop that answers its checks. Evaluation is
//! synchronous, so a check whose decision is not known is recorded, the recorded ones are asked
//! of the server's authorizer (`AccessChecker`, RBAC in the server), and the policy is evaluated
//! again with the answers — each check asked once per request.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use super::request::Request;
use crate::auth::{Attributes, Identity, User};
use crate::cel::authz::{AccessDecisions, AccessQuery, AccessTarget, AuthorizerVal};

/// Upper bound on evaluate-and-ask rounds for one policy evaluation: each round answers every
/// check the previous one reached, so only checks whose arguments depend on earlier decisions
/// need more than one.
pub const MAX_ROUNDS: usize = 8;

/// The server's authorizer, as admission asks it.
pub trait AccessChecker: Send + Sync {
    fn allowed<'a>(
        &'a self,
        query: &'a AccessQuery,
    ) -> Pin<Box<dyn Future<Output = Result<bool, String>> + Send + 'a>>;
}

impl AccessChecker for crate::rbac::Authorizer {
    fn allowed<'a>(
        &'a self,
        query: &'a AccessQuery,
    ) -> Pin<Box<dyn Future<Output = Result<bool, String>> + Send + 'a>> {
        Box::pin(async move {
            let identity = Identity::User(User {
                name: query.user.clone(),
                groups: query.groups.clone(),
            });
            let opt = |s: &'a str| Some(s).filter(|s| !s.is_empty());
            let attrs = match &query.target {
                AccessTarget::Resource {
                    group,
                    resource,
                    subresource,
                    namespace,
                    name,
                } => Attributes::Resource {
                    verb: &query.verb,
                    group,
                    resource,
                    subresource: opt(subresource),
                    namespace: opt(namespace),
                    name: opt(name),
                },
                AccessTarget::Path(path) => Attributes::NonResource {
                    verb: &query.verb,
                    path,
                },
                AccessTarget::None => return Ok(false),
            };
            self.authorize(&identity, &attrs)
                .await
                .map_err(|e| e.to_string())
        })
    }
}

/// Decisions answered so far for one request, and the checks still wanted.
#[derive(Debug, Default)]
pub struct KnownDecisions {
    known: Mutex<HashMap<AccessQuery, Result<bool, String>>>,
    pending: Mutex<Vec<AccessQuery>>,
}

impl AccessDecisions for KnownDecisions {
    fn decision(&self, query: &AccessQuery) -> Option<Result<bool, String>> {
        let known = self.known.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(d) = known.get(query) {
            return Some(d.clone());
        }
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        if !pending.contains(query) {
            pending.push(query.clone());
        }
        None
    }
}

impl KnownDecisions {
    /// Asks `checker` every wanted check; false when none was wanted.
    pub async fn answer_pending(&self, checker: &dyn AccessChecker) -> bool {
        let wanted: Vec<AccessQuery> =
            std::mem::take(&mut *self.pending.lock().unwrap_or_else(|e| e.into_inner()));
        if wanted.is_empty() {
            return false;
        }
        for query in wanted {
            let decision = checker.allowed(&query).await;
            self.known
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(query, decision);
        }
        true
    }
}

/// Runs `eval` with an `authorizer` for `req` bound, and while the checks it reached were not yet
/// answered, asks `checker` for them and runs it again (at most `MAX_ROUNDS` times): the result of
/// the last run, in which every check it reached had its decision.
pub async fn evaluate_with_authorizer<T>(
    req: &Request,
    checker: &dyn AccessChecker,
    mut eval: impl FnMut(AuthorizerVal) -> T,
) -> T {
    let decisions = Arc::new(KnownDecisions::default());
    let mut rounds = 0;
    loop {
        let result = eval(authorizer_for(req, Arc::clone(&decisions)));
        rounds += 1;
        if rounds > MAX_ROUNDS || !decisions.answer_pending(checker).await {
            return result;
        }
    }
}

/// The `authorizer` variable for `req`: its user (anonymous as upstream names it) and its
/// resource for `authorizer.requestResource`.
pub fn authorizer_for(req: &Request, decisions: Arc<KnownDecisions>) -> AuthorizerVal {
    let (user, groups) = match &req.user {
        Some(u) => (u.name.clone(), u.groups.clone()),
        None => (
            "system:anonymous".to_string(),
            vec!["system:unauthenticated".to_string()],
        ),
    };
    let target = AccessTarget::Resource {
        group: req.group.clone(),
        resource: req.resource.clone(),
        subresource: req.subresource.clone(),
        namespace: if req.cluster_scoped {
            String::new()
        } else {
            req.namespace.clone()
        },
        name: req.name.clone(),
    };
    AuthorizerVal::new(decisions, &user, &groups, target)
}
