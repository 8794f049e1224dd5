use super::*;
use cri::security_profile::ProfileType;

fn pod(pod_sc: serde_json::Value, container_sc: serde_json::Value) -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": "web", "namespace": "apps", "uid": "u1"},
        "spec": {
            "securityContext": pod_sc,
            "containers": [{"name": "c", "image": "reg/busybox:1", "securityContext": container_sc}]
        }
    }))
    .unwrap()
}

fn first(p: &Pod) -> &Container {
    &p.spec.as_ref().unwrap().containers[0]
}

const ROOT: &str = "/var/lib/kiln/kubelet/seccomp";

fn cfg() -> Seccomp {
    Seccomp::node(Path::new("/var/lib/kiln/kubelet/pods"))
}

fn completed(p: &Pod, image: &ImageUser) -> cri::LinuxContainerSecurityContext {
    let mut out = cri::LinuxContainerSecurityContext::default();
    complete_container(p, first(p), image, &cfg(), &mut out).unwrap();
    out
}

#[test]
fn seccomp_root_is_beside_the_pods_dir() {
    assert_eq!(
        seccomp_root(Path::new("/var/lib/kiln/kubelet/pods")),
        Path::new(ROOT)
    );
}

#[test]
fn capabilities_pass_as_spelled_and_come_from_the_container_only() {
    let p = pod(
        serde_json::json!({"runAsUser": 1000}),
        serde_json::json!({"capabilities": {"add": ["NET_BIND_SERVICE"], "drop": ["ALL"]}}),
    );
    let caps = completed(&p, &ImageUser::default()).capabilities.unwrap();
    assert_eq!(caps.add_capabilities, vec!["NET_BIND_SERVICE"]);
    assert_eq!(caps.drop_capabilities, vec!["ALL"]);
    // None in the spec: none sent (the runtime's defaults apply).
    let p = pod(serde_json::json!({}), serde_json::json!({}));
    assert_eq!(completed(&p, &ImageUser::default()).capabilities, None);
}

#[test]
fn seccomp_container_field_wins_then_the_pod_s_then_unconfined() {
    let kind = |sp: &cri::SecurityProfile| ProfileType::try_from(sp.profile_type).unwrap();
    // The pod's profile applies to containers without their own, and to the sandbox.
    let p = pod(
        serde_json::json!({"seccompProfile": {"type": "RuntimeDefault"}}),
        serde_json::json!({}),
    );
    let sp = completed(&p, &ImageUser::default()).seccomp.unwrap();
    assert_eq!(kind(&sp), ProfileType::RuntimeDefault);
    let mut sb = cri::LinuxSandboxSecurityContext::default();
    complete_sandbox(&p, &cfg(), &mut sb).unwrap();
    assert_eq!(kind(&sb.seccomp.unwrap()), ProfileType::RuntimeDefault);

    // The container's own field wins; Localhost is relative to the kubelet's seccomp dir.
    let p = pod(
        serde_json::json!({"seccompProfile": {"type": "RuntimeDefault"}}),
        serde_json::json!({"seccompProfile": {"type": "Localhost", "localhostProfile": "profiles/audit.json"}}),
    );
    let sp = completed(&p, &ImageUser::default()).seccomp.unwrap();
    assert_eq!(kind(&sp), ProfileType::Localhost);
    assert_eq!(
        sp.localhost_ref,
        "/var/lib/kiln/kubelet/seccomp/profiles/audit.json"
    );
    let p = pod(
        serde_json::json!({"seccompProfile": {"type": "RuntimeDefault"}}),
        serde_json::json!({"seccompProfile": {"type": "Unconfined"}}),
    );
    assert_eq!(
        kind(&completed(&p, &ImageUser::default()).seccomp.unwrap()),
        ProfileType::Unconfined
    );

    // Nothing set: Unconfined, or RuntimeDefault with seccompDefault.
    let p = pod(serde_json::json!({}), serde_json::json!({}));
    assert_eq!(
        kind(&seccomp(&p, Some(first(&p)), Path::new(ROOT), false).unwrap()),
        ProfileType::Unconfined
    );
    assert_eq!(
        kind(&seccomp(&p, None, Path::new(ROOT), true).unwrap()),
        ProfileType::RuntimeDefault
    );

    // Localhost without a path: upstream's error, for the container and the sandbox.
    let p = pod(
        serde_json::json!({"seccompProfile": {"type": "Localhost"}}),
        serde_json::json!({}),
    );
    let mut out = cri::LinuxContainerSecurityContext::default();
    let err =
        complete_container(&p, first(&p), &ImageUser::default(), &cfg(), &mut out).unwrap_err();
    assert_eq!(
        err.to_string(),
        "localhostProfile must be set if seccompProfile type is Localhost."
    );
    let mut sb = cri::LinuxSandboxSecurityContext::default();
    assert_eq!(
        complete_sandbox(&p, &cfg(), &mut sb),
        Err(SecurityError::NoLocalhostProfile)
    );
}

#[test]
fn proc_mount_default_masks_upstream_s_paths_and_unmasked_none() {
    let p = pod(serde_json::json!({}), serde_json::json!({}));
    let sc = completed(&p, &ImageUser::default());
    assert_eq!(sc.masked_paths.len(), 11);
    assert!(sc.masked_paths.contains(&"/proc/kcore".to_string()));
    assert!(sc
        .masked_paths
        .contains(&"/sys/devices/virtual/powercap".to_string()));
    assert_eq!(
        sc.readonly_paths,
        vec![
            "/proc/bus",
            "/proc/fs",
            "/proc/irq",
            "/proc/sys",
            "/proc/sysrq-trigger"
        ]
    );
    let p = pod(
        serde_json::json!({}),
        serde_json::json!({"procMount": "Default"}),
    );
    assert_eq!(completed(&p, &ImageUser::default()).masked_paths.len(), 11);
    let p = pod(
        serde_json::json!({}),
        serde_json::json!({"procMount": "Unmasked"}),
    );
    let sc = completed(&p, &ImageUser::default());
    assert!(sc.masked_paths.is_empty() && sc.readonly_paths.is_empty());
}

#[test]
fn the_image_user_fills_in_when_the_pod_names_none() {
    let numeric = ImageUser {
        uid: Some(1000),
        username: String::new(),
    };
    let named = ImageUser {
        uid: None,
        username: "nobody".into(),
    };
    let p = pod(serde_json::json!({}), serde_json::json!({}));
    assert_eq!(
        completed(&p, &numeric).run_as_user.map(|u| u.value),
        Some(1000)
    );
    let sc = completed(&p, &named);
    assert_eq!(
        (sc.run_as_user, sc.run_as_username.as_str()),
        (None, "nobody")
    );
    // An image without a user runs as root: uid 0, as upstream sends it.
    let sc = completed(&p, &ImageUser::default());
    assert_eq!(sc.run_as_user.map(|u| u.value), Some(0));
    // The pod's runAsUser (already in the config spec.rs made) is kept.
    let mut out = cri::LinuxContainerSecurityContext {
        run_as_user: Some(cri::Int64Value { value: 42 }),
        ..Default::default()
    };
    complete_container(&p, first(&p), &named, &cfg(), &mut out).unwrap();
    assert_eq!(
        (
            out.run_as_user.map(|u| u.value),
            out.run_as_username.as_str()
        ),
        (Some(42), "")
    );
}

#[test]
fn run_as_non_root_refuses_root_with_upstream_s_messages() {
    let root_image = ImageUser::default();
    let desc = "web_apps(u1)";
    // Pod-level runAsNonRoot, image without a user: root.
    let p = pod(
        serde_json::json!({"runAsNonRoot": true}),
        serde_json::json!({}),
    );
    assert_eq!(
        verify_run_as_non_root(&p, first(&p), &root_image, desc)
            .unwrap_err()
            .to_string(),
        "container has runAsNonRoot and image will run as root (pod: \"web_apps(u1)\", container: c)"
    );
    let uid0 = ImageUser {
        uid: Some(0),
        username: String::new(),
    };
    assert!(verify_run_as_non_root(&p, first(&p), &uid0, desc).is_err());
    // A numeric non-root image user passes; a name cannot be checked.
    let ok = ImageUser {
        uid: Some(65534),
        username: String::new(),
    };
    assert_eq!(verify_run_as_non_root(&p, first(&p), &ok, desc), Ok(()));
    let named = ImageUser {
        uid: None,
        username: "nobody".into(),
    };
    assert_eq!(
        verify_run_as_non_root(&p, first(&p), &named, desc).unwrap_err().to_string(),
        "container has runAsNonRoot and image has non-numeric user (nobody), cannot verify user is non-root (pod: \"web_apps(u1)\", container: c)"
    );
    // An explicit runAsUser decides, whatever the image: 0 breaks the policy, others pass.
    let p = pod(
        serde_json::json!({"runAsNonRoot": true}),
        serde_json::json!({"runAsUser": 0}),
    );
    assert_eq!(
        verify_run_as_non_root(&p, first(&p), &ok, desc)
            .unwrap_err()
            .to_string(),
        "container's runAsUser breaks non-root policy (pod: \"web_apps(u1)\", container: c)"
    );
    let p = pod(
        serde_json::json!({"runAsNonRoot": true, "runAsUser": 0}),
        serde_json::json!({"runAsUser": 1000}),
    );
    assert_eq!(
        verify_run_as_non_root(&p, first(&p), &root_image, desc),
        Ok(())
    );
    // The container can turn the pod's policy off; unset or false never checks.
    let p = pod(
        serde_json::json!({"runAsNonRoot": true}),
        serde_json::json!({"runAsNonRoot": false}),
    );
    assert_eq!(
        verify_run_as_non_root(&p, first(&p), &root_image, desc),
        Ok(())
    );
    let p = pod(serde_json::json!({}), serde_json::json!({}));
    assert_eq!(
        verify_run_as_non_root(&p, first(&p), &root_image, desc),
        Ok(())
    );
}

#[test]
fn the_effective_context_layers_the_container_over_the_pod() {
    let p = pod(
        serde_json::json!({"runAsUser": 1, "runAsGroup": 2, "runAsNonRoot": true,
            "seLinuxOptions": {"level": "s0:c1"}, "fsGroup": 9}),
        serde_json::json!({"runAsGroup": 5, "privileged": false, "allowPrivilegeEscalation": false}),
    );
    let sc = effective(&p, first(&p));
    assert_eq!(sc.run_as_user, Some(1));
    assert_eq!(sc.run_as_group, Some(5));
    assert_eq!(sc.run_as_non_root, Some(true));
    assert_eq!(
        sc.se_linux_options.and_then(|o| o.level).as_deref(),
        Some("s0:c1")
    );
    assert_eq!(sc.allow_privilege_escalation, Some(false));
}

#[test]
fn a_privileged_container_anywhere_makes_the_sandbox_privileged() {
    let p = pod(serde_json::json!({}), serde_json::json!({}));
    let mut sb = cri::LinuxSandboxSecurityContext::default();
    complete_sandbox(&p, &cfg(), &mut sb).unwrap();
    assert!(!sb.privileged);
    let mut p = pod(serde_json::json!({}), serde_json::json!({}));
    p.spec.as_mut().unwrap().init_containers = Some(vec![serde_json::from_value(
        serde_json::json!({"name": "i", "image": "x", "securityContext": {"privileged": true}}),
    )
    .unwrap()]);
    complete_sandbox(&p, &cfg(), &mut sb).unwrap();
    assert!(sb.privileged);
}

#[test]
fn apparmor_and_the_supplemental_groups_policy_reach_the_container_and_sandbox() {
    #[allow(deprecated)]
    let fields = |out: &cri::LinuxContainerSecurityContext| {
        (
            out.apparmor.clone(),
            out.apparmor_profile.clone(),
            out.supplemental_groups_policy,
        )
    };
    let p = pod(
        serde_json::json!({"supplementalGroupsPolicy": "Strict",
            "appArmorProfile": {"type": "Localhost", "localhostProfile": "k8s-deny-write"}}),
        serde_json::json!({}),
    );
    assert_eq!(
        fields(&completed(&p, &ImageUser::default())),
        (
            Some(cri::SecurityProfile {
                profile_type: ProfileType::Localhost as i32,
                localhost_ref: "k8s-deny-write".into()
            }),
            "localhost/k8s-deny-write".into(),
            cri::SupplementalGroupsPolicy::Strict as i32
        )
    );
    let mut sandbox = cri::LinuxSandboxSecurityContext::default();
    complete_sandbox(&p, &cfg(), &mut sandbox).unwrap();
    assert_eq!(
        sandbox.supplemental_groups_policy,
        cri::SupplementalGroupsPolicy::Strict as i32
    );
    // Nothing asked: no AppArmor field (the runtime's default) and Merge.
    let plain = pod(serde_json::json!({}), serde_json::json!({}));
    assert_eq!(
        fields(&completed(&plain, &ImageUser::default())),
        (
            None,
            String::new(),
            cri::SupplementalGroupsPolicy::Merge as i32
        )
    );
    // An unknown policy or a Localhost profile without a name: CreateContainerConfigError texts.
    let mut out = cri::LinuxContainerSecurityContext::default();
    let bad = pod(
        serde_json::json!({"supplementalGroupsPolicy": "Loose"}),
        serde_json::json!({}),
    );
    assert_eq!(
        complete_container(&bad, first(&bad), &ImageUser::default(), &cfg(), &mut out)
            .unwrap_err()
            .to_string(),
        "unsupported supplementalGroupsPolicy: Loose"
    );
    let nameless = pod(
        serde_json::json!({}),
        serde_json::json!({"appArmorProfile": {"type": "Localhost"}}),
    );
    assert_eq!(
        complete_container(
            &nameless,
            first(&nameless),
            &ImageUser::default(),
            &cfg(),
            &mut out
        )
        .unwrap_err()
        .to_string(),
        "missing localhost apparmor profile name"
    );
}
