//! Fixture tests: good files parse with the documented defaults; bad files fail with `file:line: field: why`.

use std::path::PathBuf;

use super::*;

fn fixture(name: &str) -> (String, &'static str) {
    let text = match name {
        "minimal.yaml" => include_str!("fixtures/minimal.yaml"),
        "full.yaml" => include_str!("fixtures/full.yaml"),
        "bad-role.yaml" => include_str!("fixtures/bad-role.yaml"),
        "bad-unknown-field.yaml" => include_str!("fixtures/bad-unknown-field.yaml"),
        "bad-cidr.yaml" => include_str!("fixtures/bad-cidr.yaml"),
        "bad-semantic.yaml" => include_str!("fixtures/bad-semantic.yaml"),
        "bad-cluster-dns.yaml" => include_str!("fixtures/bad-cluster-dns.yaml"),
        "bad-cluster-dns-range.yaml" => include_str!("fixtures/bad-cluster-dns-range.yaml"),
        "bad-kubelet.yaml" => include_str!("fixtures/bad-kubelet.yaml"),
        "bad-storage.yaml" => include_str!("fixtures/bad-storage.yaml"),
        "bad-reserved.yaml" => include_str!("fixtures/bad-reserved.yaml"),
        other => panic!("no fixture {other}"),
    };
    (name.to_string(), text)
}

fn error_lines(name: &str) -> Vec<String> {
    let (file, text) = fixture(name);
    let err = parse(text, &file).expect_err("fixture must be rejected");
    err.to_string().lines().map(str::to_string).collect()
}

#[test]
fn minimal_gets_defaults() {
    let (file, text) = fixture("minimal.yaml");
    let c = parse(text, &file).unwrap();
    let h = &c.spec.hosts[0];
    assert_eq!(h.role, Role::ControllerWorker);
    assert!(h.is_controller() && h.is_worker());
    assert_eq!(h.ssh.user, "root");
    assert_eq!(h.ssh.port, 22);
    assert!(!h.ssh.uses_sudo());
    assert_eq!(c.control_plane_endpoint(), "10.0.0.11:6443");
    assert_eq!(c.spec.networking.pod_cidr.to_string(), "10.244.0.0/16");
    assert_eq!(c.spec.networking.service_cidr.to_string(), "10.96.0.0/12");
    assert_eq!(c.spec.networking.node_cidr_mask_size, 24);
    assert_eq!(c.spec.proxy.mode, ProxyMode::Nftables);
    assert_eq!(c.spec.pki.ca_validity_days, 3650);
    assert_eq!(c.spec.pki.cert_validity_days, 365);
    assert_eq!(c.spec.images.pause, "registry.k8s.io/pause:3.10");
    assert!(c.spec.registry.is_none() && c.spec.store.backup.is_none());

    let f = ClusterFile {
        path: PathBuf::from("/srv/demo/cluster.yaml"),
        config: c,
    };
    assert_eq!(f.state_dir(), PathBuf::from("/srv/demo/demo.kiln"));
    assert_eq!(f.known_hosts_file(), home_dir().join(".ssh/known_hosts"));
    assert_eq!(f.key_file(&f.config.spec.hosts[0]), None);
}

#[test]
fn full_parses_every_field() {
    let (file, text) = fixture("full.yaml");
    let c = parse(text, &file).unwrap();
    assert_eq!(c.metadata.name, "prod");
    let cp = &c.spec.hosts[0];
    assert_eq!(cp.node_ip.unwrap().to_string(), "172.16.0.11");
    assert_eq!(cp.node_address(), "172.16.0.11");
    assert_eq!(cp.labels["topology.kubernetes.io/zone"], "a");
    assert_eq!(cp.ssh.user, "debian");
    assert!(cp.ssh.uses_sudo(), "non-root users get sudo by default");
    assert_eq!(cp.ssh.port, 2222);
    let b = cp.ssh.bastion.as_ref().unwrap();
    assert_eq!(
        (b.address.as_str(), b.port, b.user.as_deref()),
        ("bastion.example.com", 22, Some("jump"))
    );
    let w = &c.spec.hosts[1];
    assert_eq!(w.role, Role::Worker);
    assert_eq!(w.ssh.sudo, Some(false));
    assert_eq!(c.controllers().count(), 1);
    assert_eq!(c.workers().count(), 1);
    assert_eq!(c.control_plane_endpoint(), "api.example.com:6443");
    assert_eq!(c.spec.networking.node_cidr_mask_size, 26);
    assert_eq!(
        c.spec.networking.cluster_dns_ip().to_string(),
        "10.100.0.53"
    );
    assert_eq!(c.spec.networking.cluster_domain, "prod.internal");
    assert_eq!(
        c.spec.networking.dns.upstream,
        ["192.0.2.53", "192.0.2.54:5353"]
    );
    assert_eq!(c.spec.networking.dns.ttl, Some(30));
    let backup = c.spec.store.backup.as_ref().unwrap();
    assert_eq!(
        (backup.schedule.as_str(), backup.retention),
        ("0 */6 * * *", 14)
    );
    let dest = backup.destination.as_ref().unwrap();
    assert_eq!(dest.dir.as_deref(), Some("/srv/backups/kiln"));
    let s3 = dest.s3.as_ref().unwrap();
    assert_eq!(
        (
            s3.endpoint.as_str(),
            s3.bucket.as_str(),
            s3.prefix.as_str(),
            s3.region.as_str()
        ),
        (
            "https://s3.example.net:9000",
            "kiln-backups",
            "prod",
            "us-east-1"
        )
    );
    assert_eq!(
        s3.credentials_file.as_deref(),
        Some(std::path::Path::new("s3.credentials"))
    );
    assert_eq!(c.spec.store.quota_backend_bytes, Some(8 << 30));
    assert_eq!(c.spec.store.keep_awake, Some(false));
    assert_eq!(
        (c.spec.pki.ca_validity_days, c.spec.pki.cert_validity_days),
        (7300, 730)
    );
    let reg = c.spec.registry.as_ref().unwrap();
    assert_eq!(
        (reg.mirror.as_str(), reg.insecure),
        ("registry.lab:5000", true)
    );

    let f = ClusterFile {
        path: PathBuf::from("/srv/prod/cluster.yaml"),
        config: c,
    };
    assert_eq!(f.state_dir(), PathBuf::from("/var/lib/kiln-state/prod"));
    assert_eq!(f.known_hosts_file(), PathBuf::from("/srv/prod/known_hosts"));
    assert_eq!(
        f.key_file(&f.config.spec.hosts[0]),
        Some(PathBuf::from("/srv/prod/keys/id_ed25519"))
    );
    assert_eq!(
        f.resolve(Path::new("~/.ssh/bastion")),
        home_dir().join(".ssh/bastion")
    );

    // What we serialize parses back to the same config.
    let again = serde_norway::to_string(&f.config).unwrap();
    assert_eq!(parse(&again, "again.yaml").unwrap(), f.config);
}

#[test]
fn unknown_role_names_file_line_and_field() {
    assert_eq!(
        error_lines("bad-role.yaml"),
        ["bad-role.yaml:12: hosts[2].role: unknown role 'master', expected one of controller, worker, controller+worker"]
    );
}

#[test]
fn unknown_field_is_rejected_with_its_line() {
    let lines = error_lines("bad-unknown-field.yaml");
    assert_eq!(lines.len(), 1);
    assert!(
        lines[0].starts_with(
            "bad-unknown-field.yaml:12: hosts[0].ssh.keyfile: unknown field `keyfile`"
        ),
        "{lines:?}"
    );
    assert!(
        lines[0].contains("keyFile"),
        "suggests the right spelling: {lines:?}"
    );
}

#[test]
fn bad_cidr_is_located() {
    assert_eq!(
        error_lines("bad-cidr.yaml"),
        ["bad-cidr.yaml:11: networking.podCIDR: invalid CIDR '10.244.0.0/33': prefix /33 is longer than 32 bits"]
    );
}

#[test]
fn bad_cluster_dns_is_located() {
    let lines = error_lines("bad-cluster-dns.yaml");
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].starts_with("bad-cluster-dns.yaml:11: networking.clusterDNS: "),
        "{lines:?}"
    );
}

#[test]
fn cluster_dns_outside_the_service_range_and_bad_dns_settings_are_located() {
    let lines = error_lines("bad-cluster-dns-range.yaml");
    let expected = [
        "bad-cluster-dns-range.yaml:12: networking.clusterDNS: 10.200.0.10 is outside serviceCIDR 10.96.0.0/12",
        "bad-cluster-dns-range.yaml:15: networking.dns.upstream[1]: invalid resolver 'resolver.example': expected an IP address or IP:port",
        "bad-cluster-dns-range.yaml:16: networking.dns.ttl: 7200 is more than 3600 seconds",
    ];
    for e in expected {
        assert!(lines.iter().any(|l| l == e), "missing {e:?} in {lines:#?}");
    }
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("bad-cluster-dns-range.yaml:13: networking.clusterDomain: invalid cluster domain 'Cluster_Local'")),
        "{lines:#?}"
    );
}

#[test]
fn bad_eviction_thresholds_are_located() {
    let lines = error_lines("bad-kubelet.yaml");
    let expected = [
        "bad-kubelet.yaml:14: kubelet.evictionHard.imagefs.available: invalid threshold '2Qi': unknown quantity suffix 'Qi'",
        "bad-kubelet.yaml:13: kubelet.evictionHard.nodefs.available: invalid threshold '110%': a percentage must be a number from 0 to 100",
        "bad-kubelet.yaml:12: kubelet.evictionHard.nodefs.inodesFree: unsupported eviction signal 'nodefs.inodesFree': expected one of memory.available, nodefs.available, imagefs.available, pid.available",
    ];
    assert_eq!(lines, expected);
}

#[test]
fn memory_and_pid_thresholds_are_accepted() {
    let (file, text) = fixture("minimal.yaml");
    let mut c = parse(text, &file).unwrap();
    c.spec.kubelet.eviction_hard = [("memory.available", "100Mi"), ("pid.available", "5%")]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    assert!(
        validate::validate(&c).is_empty(),
        "{:?}",
        validate::validate(&c)
    );
    c.spec.kubelet.eviction_hard = [("memory.available".to_string(), "lots".to_string())]
        .into_iter()
        .collect();
    let problems = validate::validate(&c);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert_eq!(
        problems[0].path,
        "spec.kubelet.evictionHard.memory.available"
    );
}

#[test]
fn local_path_storage_defaults_on_under_var_lib_kiln_and_renders_the_kubelet_flag() {
    let (file, text) = fixture("minimal.yaml");
    let c = parse(text, &file).unwrap();
    let lp = &c.spec.storage.local_path;
    assert!(lp.enabled);
    assert_eq!(lp.dir, PathBuf::from("/var/lib/kiln/local-path"));
    assert_eq!(
        lp.kubelet_flag(),
        "--local-path-dir=/var/lib/kiln/local-path"
    );
    let with = |storage: &str| {
        let text = format!("{text}  storage:\n{storage}");
        parse(&text, &file)
    };
    let off = with("    localPath:\n      enabled: false\n").unwrap();
    assert_eq!(
        off.spec.storage.local_path.kubelet_flag(),
        "--local-path-dir="
    );
    let moved = with("    localPath:\n      dir: /srv/kiln-volumes\n").unwrap();
    assert!(moved.spec.storage.local_path.enabled);
    assert_eq!(
        moved.spec.storage.local_path.kubelet_flag(),
        "--local-path-dir=/srv/kiln-volumes"
    );
    let typo = with("    localPaths: {}\n").unwrap_err().to_string();
    assert!(typo.contains("localPaths"), "{typo}");
    for bad in ["relative/dir", "/", "/srv/a/../b"] {
        let e = with(&format!("    localPath:\n      dir: {bad}\n"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("spec.storage.localPath.dir") || e.contains("storage.localPath.dir"),
            "{bad}: {e}"
        );
    }
}

#[test]
fn a_local_path_dir_a_shell_would_read_is_refused_with_its_line() {
    assert_eq!(
        error_lines("bad-storage.yaml"),
        ["bad-storage.yaml:13: storage.localPath.dir: invalid local-path directory '/srv/kiln volumes/../x': may contain only letters, digits, '/', '.', '_' and '-'"]
    );
}

#[test]
fn cluster_dns_defaults_to_the_tenth_service_address() {
    let (file, text) = fixture("minimal.yaml");
    let c = parse(text, &file).unwrap();
    let net = &c.spec.networking;
    assert_eq!(net.cluster_dns_ip().to_string(), "10.96.0.10");
    assert_eq!(net.kubernetes_service_ip().to_string(), "10.96.0.1");
    assert_eq!(net.cluster_domain, "cluster.local");
    assert!(net.dns.upstream.is_empty());
}

#[test]
fn semantic_problems_all_reported_with_lines() {
    let lines = error_lines("bad-semantic.yaml");
    let expected = [
        "bad-semantic.yaml:6: hosts: no controller: at least one host needs role controller or controller+worker",
        "bad-semantic.yaml:8: hosts[0].address: invalid address '0.0.0.0': 0.0.0.0 is not a reachable address",
        "bad-semantic.yaml:11: hosts[1].address: 10.0.0.2 lies inside the podCIDR 10.0.0.0/8",
        "bad-semantic.yaml:13: hosts[2].name: duplicate host name 'a' (also hosts[0])",
        "bad-semantic.yaml:14: hosts[2].address: duplicate address '10.0.0.2' (also hosts[1])",
        "bad-semantic.yaml:18: networking.serviceCIDR: 10.96.0.0/12 overlaps podCIDR 10.0.0.0/8",
        "bad-semantic.yaml:21: pki.certValidityDays: 365 days outlives the CA (100 days); certificates cannot be valid longer than their CA",
    ];
    for e in expected {
        assert!(lines.iter().any(|l| l == e), "missing {e:?} in {lines:#?}");
    }
}

#[test]
fn wrong_kind_and_version_and_missing_fields() {
    let text = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: x\nspec:\n  hosts:\n  - name: a\n    address: 10.0.0.1\n    role: controller\n";
    let err = parse(text, "c.yaml").unwrap_err().to_string();
    assert!(
        err.contains(
            "c.yaml:1: apiVersion: unsupported apiVersion 'v1', expected kiln.dev/v1alpha1"
        ),
        "{err}"
    );
    assert!(
        err.contains("c.yaml:2: kind: unsupported kind 'Pod', expected Cluster"),
        "{err}"
    );

    let text = "apiVersion: kiln.dev/v1alpha1\nkind: Cluster\nmetadata:\n  name: x\nspec:\n  hosts:\n  - name: a\n    role: worker\n";
    let err = parse(text, "c.yaml").unwrap_err().to_string();
    assert!(
        err.starts_with("c.yaml:7: hosts[0]: missing field `address`"),
        "{err}"
    );

    // serde_norway alone would blame the mapping (`hosts[0]`, line 7); the field and its line are wanted.
    let text = "apiVersion: kiln.dev/v1alpha1\nkind: Cluster\nmetadata:\n  name: x\nspec:\n  hosts:\n  - name: a\n    address: 10.0.0.1\n    role: controller\n    nodeIP: 1.2.3\n";
    let err = parse(text, "c.yaml").unwrap_err().to_string();
    assert_eq!(
        err,
        "c.yaml:10: hosts[0].nodeIP: invalid IP address '1.2.3'"
    );
}

#[test]
fn yaml_syntax_error_has_a_line() {
    let err = parse("apiVersion: kiln.dev/v1alpha1\nkind: [unclosed\n", "c.yaml").unwrap_err();
    let ConfigError::Invalid { problems, .. } = &err else {
        panic!("{err}")
    };
    assert!(problems[0].line.is_some(), "{err}");
}

#[test]
fn load_reports_missing_file() {
    let err = load(Path::new("/nonexistent/cluster.yaml")).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("/nonexistent/cluster.yaml: cannot read"),
        "{err}"
    );
}

/// examples/vagrant/cluster.yaml is for real VMs (not run here): it must stay valid as the schema grows.
#[test]
fn the_vagrant_example_is_a_valid_cluster() {
    let text = include_str!("../../../examples/vagrant/cluster.yaml");
    let c = super::parse(text, "examples/vagrant/cluster.yaml").unwrap();
    assert_eq!(c.controllers().count(), 1);
    assert_eq!(c.workers().count(), 2);
    assert_eq!(c.control_plane_endpoint(), "192.168.56.11:6443");
}

#[test]
fn bad_reservations_are_located() {
    let lines = error_lines("bad-reserved.yaml");
    let expected = [
        "bad-reserved.yaml:13: kubelet.systemReserved.gpu: cannot reserve 'gpu': expected one of cpu, memory, ephemeral-storage, pid",
        "bad-reserved.yaml:15: kubelet.kubeReserved.memory: '-256Mi' is negative",
        "bad-reserved.yaml:16: kubelet.kubeReserved.ephemeral-storage: invalid quantity '1Gi;rm': expected e.g. 500m, 1Gi or 1000",
        "bad-reserved.yaml:17: kubelet.podPidsLimit: 0: expected a positive number, or -1 for unlimited",
    ];
    for e in expected {
        assert!(lines.iter().any(|l| l == e), "missing {e:?} in {lines:#?}");
    }
}

#[test]
fn allowed_unsafe_sysctls_must_be_namespaced() {
    let (file, text) = fixture("minimal.yaml");
    let with = format!(
        "{text}  kubelet:\n    allowedUnsafeSysctls: [\"kernel.msg*\", net.core.somaxconn]\n"
    );
    let mut c = parse(&with, &file).unwrap();
    assert!(
        validate::validate(&c).is_empty(),
        "{:?}",
        validate::validate(&c)
    );
    assert_eq!(
        c.spec.kubelet.allowed_unsafe_sysctls,
        ["kernel.msg*", "net.core.somaxconn"]
    );
    c.spec.kubelet.allowed_unsafe_sysctls = vec!["vm.swappiness".into(), "net.$(x)".into()];
    let problems: Vec<String> = validate::validate(&c)
        .iter()
        .map(|p| format!("{}: {}", p.path, p.message))
        .collect();
    assert_eq!(
        problems,
        [
            "spec.kubelet.allowedUnsafeSysctls[0]: 'vm.swappiness': not known to be namespaced (kernel.shm*, kernel.msg*, kernel.sem, fs.mqueue.*, net.*)",
            "spec.kubelet.allowedUnsafeSysctls[1]: 'net.$(x)': expected a sysctl name, or a prefix ending in *",
        ]
    );
}
