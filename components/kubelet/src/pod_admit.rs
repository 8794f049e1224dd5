//! The kubelet's pod admit handlers beside eviction and NodePorts (upstream's lifecycle
//! PodAdmitHandlers): the sysctl allowlist ([`crate::sysctl_admission`]), AppArmor on the host
//! ([`crate::apparmor`]) and `supplementalGroupsPolicy: Strict` on a runtime that cannot honour it.
//! [`crate::eviction::admission::AdmissionGate`] runs them on each new pod; a refusal fails the pod
//! with the handler's reason and `Pod was rejected: <message>`.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;

use crate::sysctl_admission::Allowlist;

/// Why a pod is refused: upstream's PodAdmitResult reason and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub reason: String,
    pub message: String,
}

/// One admission rule: None admits the pod.
pub trait AdmitHandler: Send + Sync {
    fn admit(&self, pod: &Pod) -> Option<Refusal>;
}

impl AdmitHandler for Allowlist {
    fn admit(&self, pod: &Pod) -> Option<Refusal> {
        Allowlist::admit(self, pod).map(|message| Refusal {
            reason: crate::sysctl_admission::REASON.into(),
            message,
        })
    }
}

/// AppArmor: whether the host enforces it is read once, at start (as upstream's validator).
pub struct AppArmor {
    pub host_enabled: bool,
}

impl AdmitHandler for AppArmor {
    fn admit(&self, pod: &Pod) -> Option<Refusal> {
        crate::apparmor::admit(pod, self.host_enabled).map(|message| Refusal {
            reason: crate::apparmor::REASON.into(),
            message,
        })
    }
}

/// Upstream's reason and message for a Strict pod on a node without the feature.
pub const SUPPLEMENTAL_GROUPS_REASON: &str = "SupplementalGroupsPolicyNotSupported";
pub const SUPPLEMENTAL_GROUPS_MESSAGE: &str =
    "SupplementalGroupsPolicy=Strict is not supported in this node";

/// `supplementalGroupsPolicy: Strict` needs a runtime that reports the feature (CRI RuntimeStatus
/// `features.supplemental_groups_policy`, containerd 2.0+); Merge is what every runtime does anyway.
pub struct SupplementalGroupsPolicy {
    pub runtime_supports: bool,
}

impl AdmitHandler for SupplementalGroupsPolicy {
    fn admit(&self, pod: &Pod) -> Option<Refusal> {
        let policy = pod
            .spec
            .as_ref()?
            .security_context
            .as_ref()?
            .supplemental_groups_policy
            .as_deref()?;
        (policy == "Strict" && !self.runtime_supports).then(|| Refusal {
            reason: SUPPLEMENTAL_GROUPS_REASON.into(),
            message: SUPPLEMENTAL_GROUPS_MESSAGE.into(),
        })
    }
}

/// The first refusal of `handlers`, in order (upstream stops at the first handler that refuses).
pub fn first_refusal(handlers: &[Arc<dyn AdmitHandler>], pod: &Pod) -> Option<Refusal> {
    handlers.iter().find_map(|h| h.admit(pod))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(sc: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "uid": "u"},
            "spec": {"securityContext": sc, "containers": [{
                "name": "c", "image": "i",
                "securityContext": {"appArmorProfile": {"type": "RuntimeDefault"}}
            }]}
        }))
        .unwrap()
    }

    #[test]
    fn strict_needs_the_runtime_merge_does_not() {
        let off = SupplementalGroupsPolicy {
            runtime_supports: false,
        };
        let on = SupplementalGroupsPolicy {
            runtime_supports: true,
        };
        let strict = pod(serde_json::json!({"supplementalGroupsPolicy": "Strict"}));
        assert_eq!(
            off.admit(&strict),
            Some(Refusal {
                reason: "SupplementalGroupsPolicyNotSupported".into(),
                message: "SupplementalGroupsPolicy=Strict is not supported in this node".into()
            })
        );
        assert_eq!(on.admit(&strict), None);
        assert_eq!(
            off.admit(&pod(
                serde_json::json!({"supplementalGroupsPolicy": "Merge"})
            )),
            None
        );
        assert_eq!(off.admit(&pod(serde_json::json!({}))), None);
    }

    #[test]
    fn handlers_refuse_in_order_with_their_reasons() {
        let handlers: Vec<Arc<dyn AdmitHandler>> = vec![
            Arc::new(Allowlist::new(Some((6, 1)), &[]).unwrap()),
            Arc::new(AppArmor {
                host_enabled: false,
            }),
        ];
        let both = pod(serde_json::json!({"sysctls": [{"name": "kernel.msgmax", "value": "1"}]}));
        let r = first_refusal(&handlers, &both).unwrap();
        assert_eq!(r.reason, "SysctlForbidden");
        assert_eq!(
            r.message,
            "forbidden sysctl: \"kernel.msgmax\" not allowlisted"
        );
        let r = first_refusal(&handlers, &pod(serde_json::json!({}))).unwrap();
        assert_eq!(
            (r.reason.as_str(), r.message.as_str()),
            (
                "AppArmor",
                "Cannot enforce AppArmor: AppArmor is not enabled on the host"
            )
        );
        let enabled: Vec<Arc<dyn AdmitHandler>> = vec![Arc::new(AppArmor { host_enabled: true })];
        assert_eq!(first_refusal(&enabled, &pod(serde_json::json!({}))), None);
    }
}
