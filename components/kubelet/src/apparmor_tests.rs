use super::*;
use cri::security_profile::ProfileType;

fn pod(v: serde_json::Value) -> Pod {
    serde_json::from_value(v).unwrap()
}

fn first(p: &Pod) -> Container {
    p.spec.as_ref().unwrap().containers[0].clone()
}

#[test]
fn the_containers_field_wins_then_the_annotation_then_the_pods_field() {
    let p = pod(serde_json::json!({
        "metadata": {"name": "p", "annotations": {
            "container.apparmor.security.beta.kubernetes.io/b": "localhost/k8s-deny-write"
        }},
        "spec": {
            "securityContext": {"appArmorProfile": {"type": "RuntimeDefault"}},
            "containers": [
                {"name": "a", "image": "i", "securityContext": {"appArmorProfile": {"type": "Unconfined"}}},
                {"name": "b", "image": "i"},
                {"name": "c", "image": "i"}
            ]
        }
    }));
    let cs = p.spec.as_ref().unwrap().containers.clone();
    let got: Vec<_> = cs.iter().map(|c| cri_profile(&p, c).unwrap()).collect();
    let sp = |kind: ProfileType, r: &str| {
        Some(cri::SecurityProfile {
            profile_type: kind as i32,
            localhost_ref: r.into(),
        })
    };
    assert_eq!(
        got[0],
        (sp(ProfileType::Unconfined, ""), "unconfined".into())
    );
    assert_eq!(
        got[1],
        (
            sp(ProfileType::Localhost, "k8s-deny-write"),
            "localhost/k8s-deny-write".into()
        )
    );
    assert_eq!(
        got[2],
        (
            sp(ProfileType::RuntimeDefault, ""),
            "runtime/default".into()
        )
    );
}

#[test]
fn no_profile_leaves_the_runtime_default_and_bad_ones_are_errors() {
    let p = pod(serde_json::json!({"metadata": {"name": "p"},
        "spec": {"containers": [{"name": "a", "image": "i"}]}}));
    assert_eq!(cri_profile(&p, &first(&p)), Ok((None, String::new())));
    let p = pod(serde_json::json!({"metadata": {"name": "p"},
        "spec": {"containers": [{"name": "a", "image": "i",
            "securityContext": {"appArmorProfile": {"type": "Localhost"}}}]}}));
    assert_eq!(
        cri_profile(&p, &first(&p)).unwrap_err().to_string(),
        "missing localhost apparmor profile name"
    );
    let p = pod(serde_json::json!({"metadata": {"name": "p"},
        "spec": {"containers": [{"name": "a", "image": "i",
            "securityContext": {"appArmorProfile": {"type": "Strict"}}}]}}));
    assert_eq!(
        cri_profile(&p, &first(&p)).unwrap_err().to_string(),
        "unknown apparmor profile type: \"Strict\""
    );
}

#[test]
fn a_pod_needing_apparmor_is_refused_where_it_is_off() {
    let msg = Some("Cannot enforce AppArmor: AppArmor is not enabled on the host".to_string());
    let field = pod(serde_json::json!({"metadata": {"name": "p"},
        "spec": {"containers": [{"name": "a", "image": "i",
            "securityContext": {"appArmorProfile": {"type": "RuntimeDefault"}}}]}}));
    assert_eq!(admit(&field, false), msg);
    assert_eq!(admit(&field, true), None);
    let annotated = pod(
        serde_json::json!({"metadata": {"name": "p", "annotations": {
            "container.apparmor.security.beta.kubernetes.io/a": "runtime/default"}},
        "spec": {"containers": [{"name": "a", "image": "i"}]}}),
    );
    assert_eq!(admit(&annotated, false), msg);
    let pod_level = pod(serde_json::json!({"metadata": {"name": "p"},
        "spec": {"securityContext": {"appArmorProfile": {"type": "Localhost", "localhostProfile": "x"}},
            "containers": [{"name": "a", "image": "i"}]}}));
    assert_eq!(admit(&pod_level, false), msg);
    // Unconfined everywhere, or nothing asked: nothing to enforce.
    let unconfined = pod(
        serde_json::json!({"metadata": {"name": "p", "annotations": {
            "container.apparmor.security.beta.kubernetes.io/a": "unconfined"}},
        "spec": {"securityContext": {"appArmorProfile": {"type": "Unconfined"}},
            "containers": [{"name": "a", "image": "i"}]}}),
    );
    assert_eq!(admit(&unconfined, false), None);
    // A pod already running was admitted before.
    let mut running = field.clone();
    running.status = Some(k8s_openapi::api::core::v1::PodStatus {
        phase: Some("Running".into()),
        ..Default::default()
    });
    assert_eq!(admit(&running, false), None);
}

#[test]
fn the_host_check_reads_securityfs_and_the_module_parameter() {
    let dir = std::env::temp_dir().join(format!("kiln-apparmor-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    assert!(!host_enabled(&dir));
    std::fs::create_dir_all(dir.join("kernel/security/apparmor")).unwrap();
    std::fs::create_dir_all(dir.join("module/apparmor/parameters")).unwrap();
    std::fs::write(dir.join("module/apparmor/parameters/enabled"), "N\n").unwrap();
    assert!(!host_enabled(&dir));
    std::fs::write(dir.join("module/apparmor/parameters/enabled"), "Y\n").unwrap();
    assert!(host_enabled(&dir));
    std::fs::remove_dir_all(&dir).unwrap();
}
