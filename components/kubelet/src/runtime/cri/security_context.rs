//! The parts of a pod's and its containers' `securityContext` that [`super::spec`] does not map on its
//! own, as upstream's kuberuntime (security_context.go, helpers.go) and pkg/securitycontext do:
//! capabilities, seccomp (container and sandbox), the masked and read-only /proc paths (procMount),
//! the user an image runs as when the pod names none, the runAsNonRoot check before a container is
//! created, and a privileged sandbox for pods with a privileged container. Pure: the image's user is
//! read by the caller (CRI ImageStatus) and passed in.

use std::path::{Path, PathBuf};

use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::{
    Container, Pod, PodSecurityContext, SeccompProfile, SecurityContext,
};

/// The kubelet's seccomp profile directory under its root dir (upstream: `<root-dir>/seccomp`);
/// `localhostProfile` paths are relative to it.
pub const SECCOMP_DIR: &str = "seccomp";

/// Upstream's default masked paths (pkg/securitycontext, kept in sync with moby's).
pub const DEFAULT_MASKED_PATHS: &[&str] = &[
    "/proc/asound",
    "/proc/acpi",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/sys/firmware",
    "/sys/devices/virtual/powercap",
];

/// Upstream's default read-only paths.
pub const DEFAULT_READONLY_PATHS: &[&str] = &[
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
    "/proc/sys",
    "/proc/sysrq-trigger",
];

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecurityError {
    /// Upstream's text (helpers.go), also when the sandbox's profile is the pod's.
    #[error("localhostProfile must be set if seccompProfile type is Localhost.")]
    NoLocalhostProfile,
    #[error("container's runAsUser breaks non-root policy (pod: {pod:?}, container: {container})")]
    RunAsUserIsRoot { pod: String, container: String },
    #[error(
        "container has runAsNonRoot and image will run as root (pod: {pod:?}, container: {container})"
    )]
    ImageRunsAsRoot { pod: String, container: String },
    #[error("container has runAsNonRoot and image has non-numeric user ({user}), cannot verify user is non-root (pod: {pod:?}, container: {container})")]
    NonNumericUser {
        user: String,
        pod: String,
        container: String,
    },
    #[error(transparent)]
    AppArmor(#[from] crate::apparmor::AppArmorError),
    /// Upstream's text (determineEffectiveSecurityContext); the API server refuses such a pod first.
    #[error("unsupported supplementalGroupsPolicy: {0}")]
    SupplementalGroupsPolicy(String),
}

/// The pod's `supplementalGroupsPolicy` as CRI's enum (unset: Merge, CRI's zero value).
pub fn supplemental_groups_policy(pod: &Pod) -> Result<i32, SecurityError> {
    let policy = pod_security_context(pod).and_then(|s| s.supplemental_groups_policy.as_deref());
    match policy {
        None => Ok(cri::SupplementalGroupsPolicy::Merge as i32),
        Some(p) => cri::SupplementalGroupsPolicy::from_str_name(p)
            .map(|v| v as i32)
            .ok_or_else(|| SecurityError::SupplementalGroupsPolicy(p.to_string())),
    }
}

/// The user an image's config names, as CRI ImageStatus reports it: a numeric user as `uid`, a name as
/// `username`; neither (or an image the runtime does not have) means root, as upstream treats it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImageUser {
    pub uid: Option<i64>,
    pub username: String,
}

impl ImageUser {
    /// Upstream's getImageUser: the uid when numeric, else the name, else uid 0.
    fn resolved(&self) -> (Option<i64>, &str) {
        match (self.uid, self.username.as_str()) {
            (Some(uid), _) => (Some(uid), ""),
            (None, "") => (Some(0), ""),
            (None, name) => (None, name),
        }
    }
}

/// `<root-dir>/seccomp` for a kubelet whose pods live in `<root-dir>/pods`.
pub fn seccomp_root(pods_root: &Path) -> PathBuf {
    pods_root
        .parent()
        .unwrap_or(Path::new("/"))
        .join(SECCOMP_DIR)
}

fn pod_security_context(pod: &Pod) -> Option<&PodSecurityContext> {
    pod.spec.as_ref().and_then(|s| s.security_context.as_ref())
}

/// The container's security context with the pod's defaults under it (upstream's
/// DetermineEffectiveSecurityContext): the pod lends seLinuxOptions, windowsOptions, runAsUser,
/// runAsGroup and runAsNonRoot; every field the container sets wins.
pub fn effective(pod: &Pod, c: &Container) -> SecurityContext {
    let mut eff = SecurityContext::default();
    if let Some(p) = pod_security_context(pod) {
        eff.se_linux_options = p.se_linux_options.clone();
        eff.windows_options = p.windows_options.clone();
        eff.run_as_user = p.run_as_user;
        eff.run_as_group = p.run_as_group;
        eff.run_as_non_root = p.run_as_non_root;
    }
    let Some(sc) = &c.security_context else {
        return eff;
    };
    macro_rules! overlay {
        ($($field:ident),*) => {$(
            if sc.$field.is_some() {
                eff.$field = sc.$field.clone();
            }
        )*};
    }
    overlay!(
        se_linux_options,
        windows_options,
        capabilities,
        privileged,
        run_as_user,
        run_as_group,
        run_as_non_root,
        read_only_root_filesystem,
        allow_privilege_escalation,
        proc_mount,
        seccomp_profile,
        app_armor_profile
    );
    eff
}

/// The CRI capabilities: names as the pod spells them (`NET_BIND_SERVICE`, `ALL`); the runtime adds
/// the `CAP_` prefix (containerd: "Capabilities in CRI doesn't have `CAP_` prefix").
pub fn capabilities(sc: &SecurityContext) -> Option<cri::Capability> {
    let caps = sc.capabilities.as_ref()?;
    Some(cri::Capability {
        add_capabilities: caps.add.clone().unwrap_or_default(),
        drop_capabilities: caps.drop.clone().unwrap_or_default(),
        ..Default::default()
    })
}

fn profile(
    kind: cri::security_profile::ProfileType,
    localhost_ref: String,
) -> cri::SecurityProfile {
    cri::SecurityProfile {
        profile_type: kind as i32,
        localhost_ref,
    }
}

/// One `seccompProfile` field as CRI's SecurityProfile (upstream's fieldSeccompProfile): unset is
/// Unconfined (RuntimeDefault with `seccompDefault`), Localhost is `<seccomp root>/<localhostProfile>`.
fn field_profile(
    p: Option<&SeccompProfile>,
    root: &Path,
    runtime_default: bool,
) -> Result<cri::SecurityProfile, SecurityError> {
    use cri::security_profile::ProfileType;
    let unset = if runtime_default {
        ProfileType::RuntimeDefault
    } else {
        ProfileType::Unconfined
    };
    let Some(p) = p else {
        return Ok(profile(unset, String::new()));
    };
    match p.type_.as_str() {
        "RuntimeDefault" => Ok(profile(ProfileType::RuntimeDefault, String::new())),
        "Localhost" => match p.localhost_profile.as_deref().filter(|s| !s.is_empty()) {
            Some(rel) => Ok(profile(
                ProfileType::Localhost,
                root.join(rel).display().to_string(),
            )),
            None => Err(SecurityError::NoLocalhostProfile),
        },
        _ => Ok(profile(ProfileType::Unconfined, String::new())),
    }
}

/// The seccomp profile of a container (`c`) or, with `c: None`, of the pod's sandbox: the container's
/// field, else the pod's (upstream's getSeccompProfile). A missing Localhost file is the runtime's
/// error when it creates the container, as upstream.
pub fn seccomp(
    pod: &Pod,
    c: Option<&Container>,
    root: &Path,
    runtime_default: bool,
) -> Result<cri::SecurityProfile, SecurityError> {
    let own = c
        .and_then(|c| c.security_context.as_ref())
        .and_then(|s| s.seccomp_profile.as_ref());
    let from_pod = pod_security_context(pod).and_then(|s| s.seccomp_profile.as_ref());
    field_profile(own.or(from_pod), root, runtime_default)
}

/// The masked /proc and /sys paths: upstream's defaults, none with `procMount: Unmasked` (the runtime
/// also drops them for a privileged container).
pub fn masked_paths(sc: &SecurityContext) -> Vec<String> {
    paths(sc, DEFAULT_MASKED_PATHS)
}

/// The read-only /proc paths, as [`masked_paths`].
pub fn readonly_paths(sc: &SecurityContext) -> Vec<String> {
    paths(sc, DEFAULT_READONLY_PATHS)
}

fn paths(sc: &SecurityContext, defaults: &[&str]) -> Vec<String> {
    if sc.proc_mount.as_deref() == Some("Unmasked") {
        return Vec::new();
    }
    defaults.iter().map(|p| p.to_string()).collect()
}

/// Upstream's verifyRunAsNonRoot: with `runAsNonRoot: true`, an explicit runAsUser 0, or (without
/// one) an image running as uid 0 or as a user name that cannot be checked, is refused.
/// `pod_desc` is upstream's `name_namespace(uid)`.
pub fn verify_run_as_non_root(
    pod: &Pod,
    c: &Container,
    image: &ImageUser,
    pod_desc: &str,
) -> Result<(), SecurityError> {
    let sc = effective(pod, c);
    if sc.run_as_non_root != Some(true) {
        return Ok(());
    }
    let names = || (pod_desc.to_string(), c.name.clone());
    if let Some(uid) = sc.run_as_user {
        if uid == 0 {
            let (pod, container) = names();
            return Err(SecurityError::RunAsUserIsRoot { pod, container });
        }
        return Ok(());
    }
    match image.resolved() {
        (Some(0), _) => {
            let (pod, container) = names();
            Err(SecurityError::ImageRunsAsRoot { pod, container })
        }
        (None, user) => {
            let (pod, container) = names();
            Err(SecurityError::NonNumericUser {
                user: user.to_string(),
                pod,
                container,
            })
        }
        _ => Ok(()),
    }
}

/// Where the runtime finds the node's seccomp profiles and whether unset profiles default to the
/// runtime's (the kubelet's `seccompDefault`, off as upstream's default).
#[derive(Debug, Clone)]
pub struct Seccomp {
    pub root: PathBuf,
    pub runtime_default: bool,
}

impl Seccomp {
    /// The node's settings for a kubelet whose pods live in `pods_root` (`<root-dir>/pods`).
    pub fn node(pods_root: &Path) -> Self {
        Seccomp {
            root: seccomp_root(pods_root),
            runtime_default: false,
        }
    }
}

/// Completes the container's CRI security context [`super::spec::container_config`] made: capabilities,
/// seccomp, masked and read-only paths, and the image's user when the pod names no runAsUser
/// (upstream's determineEffectiveSecurityContext). Call [`verify_run_as_non_root`] first.
pub fn complete_container(
    pod: &Pod,
    c: &Container,
    image: &ImageUser,
    seccomp_cfg: &Seccomp,
    out: &mut cri::LinuxContainerSecurityContext,
) -> Result<(), SecurityError> {
    let sc = effective(pod, c);
    out.capabilities = capabilities(&sc);
    out.seccomp = Some(seccomp(
        pod,
        Some(c),
        &seccomp_cfg.root,
        seccomp_cfg.runtime_default,
    )?);
    out.masked_paths = masked_paths(&sc);
    out.readonly_paths = readonly_paths(&sc);
    // Both AppArmor fields: containerd 1.6 reads only the deprecated string.
    #[allow(deprecated)]
    {
        (out.apparmor, out.apparmor_profile) = crate::apparmor::cri_profile(pod, c)?;
    }
    out.supplemental_groups_policy = supplemental_groups_policy(pod)?;
    if out.run_as_user.is_none() {
        let (uid, name) = image.resolved();
        out.run_as_user = uid.map(|value| cri::Int64Value { value });
        out.run_as_username = name.to_string();
    }
    Ok(())
}

/// Any container of the pod (init and ephemeral ones too) is privileged: the sandbox must be, or the
/// runtime refuses the container (upstream's HasPrivilegedContainer).
pub fn has_privileged_container(pod: &Pod) -> bool {
    let Some(spec) = &pod.spec else {
        return false;
    };
    let privileged = |sc: Option<&SecurityContext>| sc.and_then(|s| s.privileged).unwrap_or(false);
    spec.containers
        .iter()
        .any(|c| privileged(c.security_context.as_ref()))
        || spec
            .init_containers
            .iter()
            .flatten()
            .any(|c| privileged(c.security_context.as_ref()))
        || spec
            .ephemeral_containers
            .iter()
            .flatten()
            .any(|c| privileged(c.security_context.as_ref()))
}

/// Completes the sandbox's CRI security context: the pod's seccomp profile and `privileged` when a
/// container needs it (upstream's generatePodSandboxLinuxConfig).
pub fn complete_sandbox(
    pod: &Pod,
    seccomp_cfg: &Seccomp,
    out: &mut cri::LinuxSandboxSecurityContext,
) -> Result<(), SecurityError> {
    out.seccomp = Some(seccomp(
        pod,
        None,
        &seccomp_cfg.root,
        seccomp_cfg.runtime_default,
    )?);
    out.privileged = has_privileged_container(pod);
    out.supplemental_groups_policy = supplemental_groups_policy(pod)?;
    Ok(())
}

/// [`complete_sandbox`] on a whole sandbox config (made by [`super::spec::sandbox_config`]).
pub fn complete_sandbox_config(
    pod: &Pod,
    seccomp_cfg: &Seccomp,
    config: &mut cri::PodSandboxConfig,
) -> Result<(), SecurityError> {
    let linux = config.linux.get_or_insert_with(Default::default);
    let sc = linux.security_context.get_or_insert_with(Default::default);
    complete_sandbox(pod, seccomp_cfg, sc)
}

#[cfg(test)]
#[path = "security_context_tests.rs"]
mod tests;
