//! AppArmor as upstream's kubelet applies it (pkg/security/apparmor, kuberuntime helpers.go and the
//! lifecycle admit handler): a container's profile is its own `appArmorProfile`, else the deprecated
//! `container.apparmor.security.beta.kubernetes.io/<name>` annotation, else the pod's; it reaches CRI as
//! `apparmor` (SecurityProfile) and as the deprecated `apparmor_profile` string older runtimes read. A
//! pod needing AppArmor (any profile but Unconfined) is refused on a host where AppArmor is off.

use std::path::Path;

use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::{AppArmorProfile, Container, Pod};

/// Upstream's admission reason, and the prefix of its message.
pub const REASON: &str = "AppArmor";
pub const MESSAGE_PREFIX: &str = "Cannot enforce AppArmor: ";
/// Upstream's validateHost error when the kernel has AppArmor off.
pub const NOT_ENABLED: &str = "AppArmor is not enabled on the host";

/// The deprecated per-container annotation and its values.
pub const ANNOTATION_PREFIX: &str = "container.apparmor.security.beta.kubernetes.io/";
pub const RUNTIME_DEFAULT: &str = "runtime/default";
pub const UNCONFINED: &str = "unconfined";
pub const LOCALHOST_PREFIX: &str = "localhost/";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AppArmorError {
    /// Upstream's texts (getAppArmorProfile): the container's CreateContainerConfigError.
    #[error("missing localhost apparmor profile name")]
    NoLocalhostProfile,
    #[error("unknown apparmor profile type: {0:?}")]
    UnknownType(String),
}

fn profile_of(type_: &str, localhost: Option<String>) -> AppArmorProfile {
    AppArmorProfile {
        type_: type_.into(),
        localhost_profile: localhost,
    }
}

/// The profile the deprecated annotation names for `container` (None: none, or a value it cannot
/// mean, which the API server refuses anyway).
fn from_annotation(pod: &Pod, container: &str) -> Option<AppArmorProfile> {
    let key = format!("{ANNOTATION_PREFIX}{container}");
    let value = pod.metadata.annotations.as_ref()?.get(&key)?;
    match value.as_str() {
        RUNTIME_DEFAULT => Some(profile_of("RuntimeDefault", None)),
        UNCONFINED => Some(profile_of("Unconfined", None)),
        v => v
            .strip_prefix(LOCALHOST_PREFIX)
            .map(|name| profile_of("Localhost", Some(name.to_string()))),
    }
}

/// Upstream's GetProfile: the container's field, the annotation (static pods may carry only it),
/// then the pod's field.
pub fn profile(pod: &Pod, c: &Container) -> Option<AppArmorProfile> {
    if let Some(p) = c
        .security_context
        .as_ref()
        .and_then(|s| s.app_armor_profile.clone())
    {
        return Some(p);
    }
    from_annotation(pod, &c.name).or_else(|| {
        pod.spec
            .as_ref()?
            .security_context
            .as_ref()?
            .app_armor_profile
            .clone()
    })
}

/// The CRI fields for `c`: the SecurityProfile and the deprecated profile string (`runtime/default`,
/// `unconfined`, `localhost/<name>`); both unset when no profile applies (the runtime's default).
pub fn cri_profile(
    pod: &Pod,
    c: &Container,
) -> Result<(Option<cri::SecurityProfile>, String), AppArmorError> {
    use cri::security_profile::ProfileType;
    let Some(p) = profile(pod, c) else {
        return Ok((None, String::new()));
    };
    let sp = |kind: ProfileType, localhost_ref: String| {
        Some(cri::SecurityProfile {
            profile_type: kind as i32,
            localhost_ref,
        })
    };
    match p.type_.as_str() {
        "RuntimeDefault" => Ok((
            sp(ProfileType::RuntimeDefault, String::new()),
            RUNTIME_DEFAULT.into(),
        )),
        "Unconfined" => Ok((
            sp(ProfileType::Unconfined, String::new()),
            UNCONFINED.into(),
        )),
        "Localhost" => match p.localhost_profile.filter(|n| !n.is_empty()) {
            Some(name) => Ok((
                sp(ProfileType::Localhost, name.clone()),
                format!("{LOCALHOST_PREFIX}{name}"),
            )),
            None => Err(AppArmorError::NoLocalhostProfile),
        },
        other => Err(AppArmorError::UnknownType(other.to_string())),
    }
}

/// Upstream's isRequired: a pod or container profile other than Unconfined, or an annotation other
/// than `unconfined`.
pub fn required(pod: &Pod) -> bool {
    let confining = |p: Option<&AppArmorProfile>| p.is_some_and(|p| p.type_ != "Unconfined");
    let Some(spec) = pod.spec.as_ref() else {
        return false;
    };
    if confining(
        spec.security_context
            .as_ref()
            .and_then(|s| s.app_armor_profile.as_ref()),
    ) {
        return true;
    }
    let containers = spec
        .init_containers
        .iter()
        .flatten()
        .chain(&spec.containers)
        .map(|c| c.security_context.as_ref());
    let ephemeral = spec
        .ephemeral_containers
        .iter()
        .flatten()
        .map(|c| c.security_context.as_ref());
    if containers
        .chain(ephemeral)
        .any(|sc| confining(sc.and_then(|s| s.app_armor_profile.as_ref())))
    {
        return true;
    }
    pod.metadata
        .annotations
        .iter()
        .flatten()
        .any(|(k, v)| k.starts_with(ANNOTATION_PREFIX) && v != UNCONFINED)
}

/// runc's apparmor.IsEnabled: the securityfs directory exists and the module says `Y`.
pub fn host_enabled(sys: &Path) -> bool {
    sys.join("kernel/security/apparmor").exists()
        && std::fs::read_to_string(sys.join("module/apparmor/parameters/enabled"))
            .is_ok_and(|s| s.starts_with('Y'))
}

/// Upstream's AppArmor admit handler: None admits, Some is the refusal message. Only a pending pod is
/// checked (a running one was admitted before).
pub fn admit(pod: &Pod, host_enabled: bool) -> Option<String> {
    let pending = pod
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .is_none_or(|p| p == "Pending");
    (pending && !host_enabled && required(pod)).then(|| format!("{MESSAGE_PREFIX}{NOT_ENABLED}"))
}

#[cfg(test)]
#[path = "apparmor_tests.rs"]
mod tests;
