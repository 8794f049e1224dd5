//! `/always-allow-delay-5s` and `/always-deny`: answers that ignore the object (the route adds the
//! delay, so the answer itself stays a pure function).

use super::review::{AdmissionRequest, AdmissionResponse};
use crate::kube_json::Status;

/// How long `/always-allow-delay-5s` waits before it answers: the e2e tests use it to exceed a
/// webhook's `timeoutSeconds`.
pub const ALLOW_DELAY: std::time::Duration = std::time::Duration::from_secs(5);

pub fn always_allow(_: &AdmissionRequest) -> AdmissionResponse {
    AdmissionResponse {
        allowed: true,
        result: Some(Status::message("this webhook allows all requests")),
        patch: None,
    }
}

pub fn always_deny(_: &AdmissionRequest) -> AdmissionResponse {
    AdmissionResponse::deny(Status::message("this webhook denies all requests"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allow_and_deny_say_so() {
        let r = always_allow(&AdmissionRequest::default());
        assert!(r.allowed);
        assert_eq!(
            r.result.unwrap().message,
            "this webhook allows all requests"
        );
        let r = always_deny(&AdmissionRequest::default());
        assert!(!r.allowed);
        assert_eq!(
            r.result.unwrap().message,
            "this webhook denies all requests"
        );
    }
}
