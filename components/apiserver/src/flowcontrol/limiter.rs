//! The bound on requests in flight (upstream's `--max-requests-inflight` and
//! `--max-mutating-requests-inflight`, the seats APF divides among priority levels): a request
//! that finds no free seat is answered 429 TooManyRequests with `Retry-After: 1` at once, so an
//! overloaded server sheds load instead of queueing until clients time out. The exempt flows
//! (system:masters, health probes) and long-running requests (watch, exec, attach, port-forward,
//! logs, proxy) take no seat. Leader election has seats of its own (upstream's `leader-election`
//! priority level), so a flood of controller writes cannot shed the lease renewals that keep the
//! controller-manager and scheduler alive: losing them restarts every controller at the worst time.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, Method};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use tokio::sync::Semaphore;

use crate::auth::Identity;
use crate::status::ApiError;

/// Seats for read-only and for mutating requests, and leader election's own.
#[derive(Debug, Clone)]
pub struct Limits {
    readonly: Arc<Semaphore>,
    mutating: Arc<Semaphore>,
    leader_election: Arc<Semaphore>,
}

/// Upstream's APF shares: leader-election's 10 of the 245 nominal shares of the suggested levels.
const LEADER_ELECTION_SHARES: usize = 10;
const TOTAL_SHARES: usize = 245;

impl Limits {
    /// 0 means unlimited, as upstream's flags.
    pub fn new(max_readonly: usize, max_mutating: usize) -> Self {
        let seats = |n: usize| {
            Arc::new(Semaphore::new(if n == 0 {
                Semaphore::MAX_PERMITS
            } else {
                n
            }))
        };
        let leader_election = if max_readonly == 0 || max_mutating == 0 {
            0
        } else {
            (max_readonly + max_mutating) * LEADER_ELECTION_SHARES / TOTAL_SHARES + 1
        };
        Limits {
            readonly: seats(max_readonly),
            mutating: seats(max_mutating),
            leader_election: seats(leader_election),
        }
    }
}

/// What a request costs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    Exempt,
    ReadOnly,
    Mutating,
    LeaderElection,
}

/// Upstream's `leader-election` flow schema: these users' get/create/update of leases in
/// kube-system.
const LEADER_ELECTION_USERS: &[&str] = &[
    "system:kube-controller-manager",
    "system:kube-scheduler",
    "system:serviceaccount:kube-system:kube-controller-manager",
    "system:serviceaccount:kube-system:kube-scheduler",
];
const KUBE_SYSTEM_LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases";

fn is_leader_election(identity: &Identity, method: &Method, path: &str) -> bool {
    let Identity::User(u) = identity else {
        return false;
    };
    let lease = path == KUBE_SYSTEM_LEASES
        || path
            .strip_prefix(KUBE_SYSTEM_LEASES)
            .and_then(|rest| rest.strip_prefix('/'))
            .is_some_and(|name| !name.is_empty() && !name.contains('/'));
    lease
        && matches!(*method, Method::GET | Method::POST | Method::PUT)
        && LEADER_ELECTION_USERS.contains(&u.name.as_str())
}

const LONG_RUNNING_SUBRESOURCES: &[&str] = &["exec", "attach", "portforward", "log", "proxy"];
const PROBES: &[&str] = &["/healthz", "/livez", "/readyz"];

/// Classifies a request by who sent it, its method, path and query.
pub fn classify(identity: &Identity, method: &Method, path: &str, query: &str) -> Class {
    if let Identity::User(u) = identity {
        if u.groups.iter().any(|g| g == "system:masters") {
            return Class::Exempt;
        }
    }
    if PROBES
        .iter()
        .any(|p| path == *p || path.starts_with(&format!("{p}/")))
    {
        return Class::Exempt;
    }
    let watch = query
        .split('&')
        .any(|kv| kv == "watch=true" || kv == "watch=1");
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let long_running = watch
        || segments.get(1) == Some(&"watch")
        || segments.get(2) == Some(&"watch")
        || segments
            .last()
            .is_some_and(|s| LONG_RUNNING_SUBRESOURCES.contains(s))
        || segments.iter().rev().nth(1).is_some_and(|s| *s == "proxy");
    if long_running {
        return Class::Exempt;
    }
    if is_leader_election(identity, method, path) {
        return Class::LeaderElection;
    }
    match *method {
        Method::GET | Method::HEAD | Method::OPTIONS => Class::ReadOnly,
        _ => Class::Mutating,
    }
}

fn too_many_requests() -> Response {
    let err = ApiError::new(
        429,
        "TooManyRequests",
        "Too many requests, please try again later.".into(),
        Some(json!({"retryAfterSeconds": 1})),
    );
    let mut resp = err.into_response();
    resp.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    resp
}

/// The middleware: runs after authentication (it reads the identity).
pub async fn shed(
    State(limits): State<Limits>,
    req: Request,
    next: axum::middleware::Next,
) -> Response {
    let identity = req
        .extensions()
        .get::<Identity>()
        .cloned()
        .unwrap_or(Identity::Anonymous);
    let class = classify(
        &identity,
        req.method(),
        req.uri().path(),
        req.uri().query().unwrap_or(""),
    );
    let seats = match class {
        Class::Exempt => return next.run(req).await,
        Class::ReadOnly => &limits.readonly,
        Class::Mutating => &limits.mutating,
        Class::LeaderElection => &limits.leader_election,
    };
    match seats.clone().try_acquire_owned() {
        Ok(_seat) => next.run(req).await,
        Err(_) => {
            tracing::debug!(path = %req.uri().path(), "shed: no free seat");
            too_many_requests()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::User;

    fn user(groups: &[&str]) -> Identity {
        Identity::User(User {
            name: "u".into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
        })
    }

    #[test]
    fn requests_are_classified_like_upstream() {
        let u = user(&["system:authenticated"]);
        assert_eq!(
            classify(&u, &Method::GET, "/api/v1/pods", ""),
            Class::ReadOnly
        );
        assert_eq!(
            classify(&u, &Method::POST, "/api/v1/namespaces/a/pods", ""),
            Class::Mutating
        );
        assert_eq!(
            classify(&u, &Method::GET, "/api/v1/pods", "watch=true&rv=1"),
            Class::Exempt
        );
        assert_eq!(
            classify(&u, &Method::GET, "/api/v1/watch/pods", ""),
            Class::Exempt
        );
        assert_eq!(
            classify(
                &u,
                &Method::POST,
                "/api/v1/namespaces/a/pods/p/exec",
                "command=ls"
            ),
            Class::Exempt
        );
        assert_eq!(
            classify(&u, &Method::GET, "/api/v1/namespaces/a/pods/p/log", ""),
            Class::Exempt
        );
        assert_eq!(classify(&u, &Method::GET, "/readyz", ""), Class::Exempt);
        assert_eq!(
            classify(
                &user(&["system:masters"]),
                &Method::DELETE,
                "/api/v1/nodes/n",
                ""
            ),
            Class::Exempt
        );
    }

    #[test]
    fn lease_renewals_of_the_control_plane_have_their_own_level() {
        let cm = Identity::User(User {
            name: "system:kube-controller-manager".into(),
            groups: vec!["system:authenticated".into()],
        });
        let lease =
            "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/kube-controller-manager";
        assert_eq!(
            classify(&cm, &Method::PUT, lease, ""),
            Class::LeaderElection
        );
        assert_eq!(
            classify(&cm, &Method::GET, lease, ""),
            Class::LeaderElection
        );
        assert_eq!(
            classify(&cm, &Method::POST, KUBE_SYSTEM_LEASES, ""),
            Class::LeaderElection
        );
        // Not a lease in kube-system, another verb, or another user: the ordinary levels.
        assert_eq!(classify(&cm, &Method::DELETE, lease, ""), Class::Mutating);
        assert_eq!(
            classify(
                &cm,
                &Method::PUT,
                "/apis/coordination.k8s.io/v1/namespaces/default/leases/x",
                ""
            ),
            Class::Mutating
        );
        assert_eq!(
            classify(&user(&["system:authenticated"]), &Method::PUT, lease, ""),
            Class::Mutating
        );
        // Mutating seats all taken: the renewal still finds one.
        let limits = Limits::new(400, 1);
        let _taken = limits.mutating.clone().try_acquire_owned().unwrap();
        assert!(limits.mutating.clone().try_acquire_owned().is_err());
        assert!(limits.leader_election.clone().try_acquire_owned().is_ok());
    }

    #[tokio::test]
    async fn a_full_level_sheds_with_retry_after() {
        let limits = Limits::new(1, 1);
        let seat = limits.readonly.clone().try_acquire_owned().unwrap();
        assert!(limits.readonly.clone().try_acquire_owned().is_err());
        drop(seat);
        assert!(limits.readonly.clone().try_acquire_owned().is_ok());
        let resp = too_many_requests();
        assert_eq!(resp.status(), 429);
        assert_eq!(resp.headers()[header::RETRY_AFTER], "1");
    }
}
