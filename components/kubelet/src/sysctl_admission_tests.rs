use super::*;

fn pod(sysctls: &[&str], host_net: bool, host_ipc: bool) -> Pod {
    let list: Vec<serde_json::Value> = sysctls
        .iter()
        .map(|n| serde_json::json!({"name": n, "value": "1"}))
        .collect();
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": "p", "uid": "u"},
        "spec": {
            "hostNetwork": host_net, "hostIPC": host_ipc,
            "securityContext": {"sysctls": list},
            "containers": [{"name": "c", "image": "i"}]
        }
    }))
    .unwrap()
}

fn host() -> Allowlist {
    Allowlist::new(Some((6, 1)), &[]).unwrap()
}

#[test]
fn every_safe_sysctl_is_admitted_and_others_are_not_allowlisted() {
    for (name, _) in SAFE_SYSCTLS {
        assert_eq!(host().admit(&pod(&[name], false, false)), None, "{name}");
    }
    assert_eq!(host().admit(&pod(&[], false, false)), None);
    assert_eq!(
        host().admit(&pod(
            &["kernel.shm_rmid_forced", "kernel.msgmax"],
            false,
            false
        )),
        Some(r#"forbidden sysctl: "kernel.msgmax" not allowlisted"#.into())
    );
    // Slash-separated names are checked (and named) dotted.
    assert_eq!(
        host().admit(&pod(&["net/core/somaxconn"], false, false)),
        Some(r#"forbidden sysctl: "net.core.somaxconn" not allowlisted"#.into())
    );
    assert_eq!(
        host().admit(&pod(&["net/ipv4/tcp_syncookies"], false, false)),
        None
    );
}

#[test]
fn an_old_kernel_drops_the_sysctls_it_does_not_namespace() {
    let old = Allowlist::new(Some((4, 4)), &[]).unwrap();
    assert_eq!(
        old.admit(&pod(&["net.ipv4.ip_local_reserved_ports"], false, false)),
        None
    );
    assert_eq!(
        old.admit(&pod(&["net.ipv4.tcp_keepalive_time"], false, false)),
        Some(r#"forbidden sysctl: "net.ipv4.tcp_keepalive_time" not allowlisted"#.into())
    );
    let unknown = Allowlist::new(None, &[]).unwrap();
    assert!(unknown
        .admit(&pod(&["net.ipv4.ip_local_reserved_ports"], false, false))
        .is_some());
    assert_eq!(
        unknown.admit(&pod(&["net.ipv4.tcp_rmem"], false, false)),
        None
    );
    assert_eq!(kernel_version("6.18.44-fc-v1300"), Some((6, 18)));
    assert_eq!(kernel_version("5.4"), Some((5, 4)));
    assert_eq!(kernel_version("x"), None);
}

#[test]
fn allowed_unsafe_sysctls_take_names_and_prefixes() {
    let w = Allowlist::new(
        Some((6, 1)),
        &[
            "kernel.msg*".into(),
            "net.core.somaxconn".into(),
            "fs/mqueue/*".into(),
        ],
    )
    .unwrap();
    for ok in [
        "kernel.msgmax",
        "kernel.msgmnb",
        "net.core.somaxconn",
        "fs.mqueue.msg_max",
    ] {
        assert_eq!(w.admit(&pod(&[ok], false, false)), None, "{ok}");
    }
    assert_eq!(
        w.admit(&pod(&["net.core.rmem_max"], false, false)),
        Some(r#"forbidden sysctl: "net.core.rmem_max" not allowlisted"#.into())
    );
    let prefix = Allowlist::new(Some((6, 1)), &["net.ipv4.tcp_*".into()]).unwrap();
    assert_eq!(
        prefix.admit(&pod(&["net.ipv4.tcp_sack"], false, false)),
        None
    );
}

#[test]
fn host_namespaces_forbid_their_sysctls() {
    let w = Allowlist::new(Some((6, 1)), &["kernel.sem".into(), "kernel.msg*".into()]).unwrap();
    assert_eq!(
        w.admit(&pod(&["net.ipv4.ip_local_port_range"], true, false)),
        Some(
            r#"forbidden sysctl: "net.ipv4.ip_local_port_range" not allowed with host net enabled"#
                .into()
        )
    );
    assert_eq!(
        w.admit(&pod(&["kernel.shm_rmid_forced"], false, true)),
        Some(
            r#"forbidden sysctl: "kernel.shm_rmid_forced" not allowed with host ipc enabled"#
                .into()
        )
    );
    assert_eq!(
        w.admit(&pod(&["kernel.sem"], false, true)),
        Some(r#"forbidden sysctl: "kernel.sem" not allowed with host ipc enabled"#.into())
    );
    assert_eq!(
        w.admit(&pod(&["kernel.msgmax"], false, true)),
        Some(r#"forbidden sysctl: "kernel.msgmax" not allowed with host ipc enabled"#.into())
    );
    // The other namespace is still the pod's own.
    assert_eq!(w.admit(&pod(&["kernel.sem"], true, false)), None);
    assert_eq!(
        w.admit(&pod(&["net.ipv4.tcp_syncookies"], false, true)),
        None
    );
}

#[test]
fn unsafe_patterns_must_be_valid_and_namespaced() {
    let new = |p: &str| Allowlist::new(Some((6, 1)), &[p.to_string()]).map(|_| ());
    assert_eq!(
        new("vm.swappiness"),
        Err(SysctlError::NotNamespaced("vm.swappiness".into()))
    );
    assert_eq!(
        new("kernel.*").unwrap_err().to_string(),
        r#"the sysctls "kernel.*" are not known to be namespaced"#
    );
    assert_eq!(
        new("Net.core").unwrap_err().to_string(),
        r#"sysctl "Net.core" must have at most 253 characters and match regex ([a-z0-9]([-_a-z0-9]*[a-z0-9])?[\./])*([a-z0-9][-_a-z0-9]*)?[a-z0-9*]"#
    );
    assert!(matches!(new("net.*.x"), Err(SysctlError::BadPattern(_))));
    assert!(matches!(new("net..x"), Err(SysctlError::BadPattern(_))));
    assert_eq!(new("net.*"), Ok(()));
    assert_eq!(new("net/ipv4/conf/*"), Ok(()));
}
