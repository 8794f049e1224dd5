//! The pod DNS config on values, with cases taken from upstream's dns_test.go.

use super::*;

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

fn pod(spec: serde_json::Value) -> Pod {
    let mut v = serde_json::json!({
        "metadata": {"name": "test-pod", "namespace": "testNS", "uid": "u1"},
        "spec": {"containers": [{"name": "c", "image": "i"}]}
    });
    for (k, val) in spec.as_object().unwrap() {
        v["spec"][k] = val.clone();
    }
    serde_json::from_value(v).unwrap()
}

fn settings(cluster_dns: &[&str], domain: &str) -> DnsSettings {
    DnsSettings {
        cluster_dns: cluster_dns.iter().map(|ip| ip.parse().unwrap()).collect(),
        cluster_domain: domain.into(),
        resolv_conf: Some("/etc/resolv.conf".into()),
    }
}

/// The host file of upstream's TestGetPodDNSCustom.
fn host() -> ResolvConf {
    parse_resolv_conf("nameserver 8.8.8.8\nsearch host.domain\n").unwrap()
}

const NODE: &[IpAddr] = &[IpAddr::V4(std::net::Ipv4Addr::new(10, 250, 0, 11))];

/// (input, nameservers, searches, options)
type ParseCase = (
    &'static str,
    &'static [&'static str],
    &'static [&'static str],
    &'static [&'static str],
);

#[test]
fn parse_resolv_conf_like_upstream() {
    // (input, nameservers, searches, options); upstream's TestParseResolvConf.
    let cases: &[ParseCase] = &[
        ("", &[], &[], &[]),
        (" ", &[], &[], &[]),
        ("\n", &[], &[], &[]),
        ("\t\n\t", &[], &[], &[]),
        ("#comment\n", &[], &[], &[]),
        (" #comment\n", &[], &[], &[]),
        ("#comment\n#comment", &[], &[], &[]),
        ("#comment\nnameserver 1.2.3.4\nsearch", &["1.2.3.4"], &[], &[]),
        ("nameserver 1.2.3.4", &["1.2.3.4"], &[], &[]),
        (" nameserver 1.2.3.4", &["1.2.3.4"], &[], &[]),
        ("\tnameserver 1.2.3.4", &["1.2.3.4"], &[], &[]),
        ("nameserver\t1.2.3.4", &["1.2.3.4"], &[], &[]),
        ("nameserver \t 1.2.3.4", &["1.2.3.4"], &[], &[]),
        ("nameserver 1.2.3.4\nnameserver 5.6.7.8", &["1.2.3.4", "5.6.7.8"], &[], &[]),
        ("nameserver 1.2.3.4 #comment", &["1.2.3.4"], &[], &[]),
        ("search ", &[], &[], &[]),
        ("search foo", &[], &["foo"], &[]),
        ("search foo bar", &[], &["foo", "bar"], &[]),
        ("search foo. bar", &[], &["foo", "bar"], &[]),
        ("search foo bar bat\n", &[], &["foo", "bar", "bat"], &[]),
        ("search foo\nsearch bar", &[], &["bar"], &[]),
        ("nameserver 1.2.3.4\nsearch foo bar", &["1.2.3.4"], &["foo", "bar"], &[]),
        (
            "nameserver 1.2.3.4\nsearch foo\nnameserver 5.6.7.8\nsearch bar",
            &["1.2.3.4", "5.6.7.8"],
            &["bar"],
            &[],
        ),
        ("#comment\nnameserver 1.2.3.4\n#comment\nsearch foo\ncomment", &["1.2.3.4"], &["foo"], &[]),
        ("options ", &[], &[], &[]),
        ("options ndots:5 attempts:2", &[], &[], &["ndots:5", "attempts:2"]),
        ("options ndots:1\noptions ndots:5 attempts:3", &[], &[], &["ndots:5", "attempts:3"]),
        (
            "nameserver 1.2.3.4\nsearch foo\nnameserver 5.6.7.8\nsearch bar\noptions ndots:5 attempts:4",
            &["1.2.3.4", "5.6.7.8"],
            &["bar"],
            &["ndots:5", "attempts:4"],
        ),
    ];
    for (i, (text, ns, search, opts)) in cases.iter().enumerate() {
        let r = parse_resolv_conf(text).unwrap_or_else(|e| panic!("case {i} {text:?}: {e}"));
        assert_eq!(r.servers, s(ns), "case {i} {text:?}: nameservers");
        assert_eq!(r.searches, s(search), "case {i} {text:?}: searches");
        assert_eq!(r.options, s(opts), "case {i} {text:?}: options");
    }
    for bad in ["#comment\nnameserver", "#comment\nnameserver\nsearch"] {
        assert_eq!(
            parse_resolv_conf(bad),
            Err(DnsError::EmptyNameserver),
            "{bad:?}"
        );
    }
}

#[test]
fn cluster_first_puts_cluster_dns_and_domains_before_the_hosts() {
    let host = parse_resolv_conf(
        "nameserver 10.250.0.1\nsearch lab.example corp.example\noptions timeout:1\n",
    )
    .unwrap();
    let d = pod_dns(
        &pod(serde_json::json!({})),
        &settings(&["10.96.0.10"], "cluster.local"),
        Some(&host),
        NODE,
    );
    assert_eq!(
        d.config,
        ResolvConf {
            servers: s(&["10.96.0.10"]),
            searches: s(&[
                "testNS.svc.cluster.local",
                "svc.cluster.local",
                "cluster.local",
                "lab.example",
                "corp.example"
            ]),
            options: s(&["ndots:5"]),
        }
    );
    assert!(d.notices.is_empty());
    // A host search domain equal to a cluster one is listed once.
    let host = parse_resolv_conf("search cluster.local other\n").unwrap();
    let d = pod_dns(
        &pod(serde_json::json!({"dnsPolicy": "ClusterFirst"})),
        &settings(&["10.96.0.10"], "cluster.local"),
        Some(&host),
        NODE,
    );
    assert_eq!(
        d.config.searches,
        s(&[
            "testNS.svc.cluster.local",
            "svc.cluster.local",
            "cluster.local",
            "other"
        ])
    );
    // No cluster domain: the host's search list only.
    let d = pod_dns(
        &pod(serde_json::json!({})),
        &settings(&["10.96.0.10"], ""),
        Some(&host),
        NODE,
    );
    assert_eq!(d.config.searches, s(&["cluster.local", "other"]));
}

#[test]
fn policy_per_host_network_like_upstream_get_pod_dns_type() {
    let cfg = settings(&["203.0.113.1"], "TEST");
    let h = host();
    let run = |spec| pod_dns(&pod(spec), &cfg, Some(&h), NODE).config.servers;
    // (spec, nameservers): ClusterFirst* → cluster, Default and hostNetwork+ClusterFirst → host.
    let cases = [
        (
            serde_json::json!({"dnsPolicy": "ClusterFirst"}),
            "203.0.113.1",
        ),
        (
            serde_json::json!({"dnsPolicy": "ClusterFirstWithHostNet", "hostNetwork": true}),
            "203.0.113.1",
        ),
        (
            serde_json::json!({"dnsPolicy": "ClusterFirstWithHostNet"}),
            "203.0.113.1",
        ),
        (serde_json::json!({"dnsPolicy": "Default"}), "8.8.8.8"),
        (
            serde_json::json!({"dnsPolicy": "Default", "hostNetwork": true}),
            "8.8.8.8",
        ),
        (
            serde_json::json!({"dnsPolicy": "ClusterFirst", "hostNetwork": true}),
            "8.8.8.8",
        ),
        (serde_json::json!({"hostNetwork": true}), "8.8.8.8"),
        // Invalid: upstream falls back to ClusterFirst.
        (
            serde_json::json!({"dnsPolicy": "invalidPolicy"}),
            "203.0.113.1",
        ),
    ];
    for (spec, want) in cases {
        assert_eq!(run(spec.clone()), s(&[want]), "{spec}");
    }
    assert_eq!(
        pod_dns(
            &pod(serde_json::json!({"dnsPolicy": "None"})),
            &cfg,
            Some(&h),
            NODE
        )
        .config,
        ResolvConf::default(),
        "DNSNone without dnsConfig: empty"
    );
}

#[test]
fn dns_config_is_merged_like_upstream_get_pod_dns_custom() {
    let cfg = settings(&["10.0.0.10"], "kubernetes.io");
    let h = host();
    let extra = serde_json::json!({
        "nameservers": ["10.0.0.11"], "searches": ["my.domain"],
        "options": [{"name": "ndots", "value": "3"}, {"name": "debug"}]
    });
    let merged = ResolvConf {
        servers: s(&["10.0.0.10", "10.0.0.11"]),
        searches: s(&[
            "testNS.svc.kubernetes.io",
            "svc.kubernetes.io",
            "kubernetes.io",
            "host.domain",
            "my.domain",
        ]),
        options: s(&["ndots:3", "debug"]),
    };
    let cases = [
        (
            serde_json::json!({"dnsPolicy": "None", "dnsConfig": {
                "nameservers": ["203.0.113.1"], "searches": ["my.domain", "second.domain"],
                "options": [{"name": "ndots", "value": "3"}, {"name": "debug"}]}}),
            ResolvConf {
                servers: s(&["203.0.113.1"]),
                searches: s(&["my.domain", "second.domain"]),
                options: s(&["ndots:3", "debug"]),
            },
        ),
        (
            serde_json::json!({"dnsPolicy": "ClusterFirst", "dnsConfig": extra}),
            merged.clone(),
        ),
        (
            serde_json::json!({"dnsPolicy": "ClusterFirstWithHostNet", "hostNetwork": true, "dnsConfig": extra}),
            merged,
        ),
        (
            serde_json::json!({"dnsPolicy": "Default", "dnsConfig": extra}),
            ResolvConf {
                servers: s(&["8.8.8.8", "10.0.0.11"]),
                searches: s(&["host.domain", "my.domain"]),
                options: s(&["ndots:3", "debug"]),
            },
        ),
    ];
    for (spec, want) in cases {
        let d = pod_dns(&pod(spec.clone()), &cfg, Some(&h), NODE);
        assert_eq!(d.config, want, "{spec}");
        assert!(d.notices.is_empty(), "{spec}: {:?}", d.notices);
    }
}

#[test]
fn options_merge_by_name_like_upstream_merge_dns_options() {
    let opt = |name: &str, value: Option<&str>| PodDNSConfigOption {
        name: Some(name.into()),
        value: value.map(String::from),
    };
    let existing = s(&["ndots:5", "debug"]);
    assert_eq!(merge_options(&existing, &[]), s(&["ndots:5", "debug"]));
    assert_eq!(
        merge_options(
            &existing,
            &[opt("single-request", None), opt("attempts", Some("3"))]
        ),
        s(&["ndots:5", "debug", "single-request", "attempts:3"])
    );
    assert_eq!(
        merge_options(
            &existing,
            &[
                opt("ndots", Some("3")),
                opt("debug", None),
                opt("single-request", None),
                opt("attempts", Some("3")),
            ]
        ),
        s(&["ndots:3", "debug", "single-request", "attempts:3"])
    );
    // Repeats in the host's own options collapse, the last value winning (upstream's map).
    assert_eq!(
        merge_options(&s(&["ndots:1", "ndots:2"]), &[]),
        s(&["ndots:2"])
    );
}

#[test]
fn without_cluster_dns_cluster_first_falls_back_to_default_with_upstreams_events() {
    let h = host();
    let d = pod_dns(
        &pod(serde_json::json!({})),
        &settings(&[], "cluster.local"),
        Some(&h),
        NODE,
    );
    assert_eq!(d.config, h);
    assert_eq!(
        d.notices,
        vec![DnsNotice::MissingClusterDns(
            "pod: \"test-pod_testNS(u1)\". kubelet does not have ClusterDNS IP configured and cannot create Pod using \"ClusterFirst\" policy. Falling back to \"Default\" policy.".into()
        )]
    );
    assert_eq!(d.notices[0].reason(), "MissingClusterDNS");
    // Default and None do not need cluster DNS: no notice.
    for policy in ["Default", "None"] {
        let d = pod_dns(
            &pod(
                serde_json::json!({"dnsPolicy": policy, "dnsConfig": {"nameservers": ["1.1.1.1"]}}),
            ),
            &settings(&[], "cluster.local"),
            Some(&h),
            NODE,
        );
        assert!(d.notices.is_empty(), "{policy}");
    }
}

#[test]
fn without_a_host_file_default_uses_the_node_loopback_like_upstream() {
    // Upstream's testGetPodDNS with resolvConf "": Default (and the hostNetwork fallback) gets
    // 127.0.0.1 and the search line ".".
    let cfg = DnsSettings {
        resolv_conf: None,
        ..settings(&["203.0.113.1"], "kubernetes.io")
    };
    for spec in [
        serde_json::json!({"dnsPolicy": "Default"}),
        serde_json::json!({"dnsPolicy": "ClusterFirst", "hostNetwork": true}),
    ] {
        let d = pod_dns(&pod(spec.clone()), &cfg, None, NODE);
        assert_eq!(d.config.servers, s(&["127.0.0.1"]), "{spec}");
        assert_eq!(d.config.searches, s(&["."]), "{spec}");
    }
    let v6: &[IpAddr] = &["fd00::11".parse().unwrap()];
    let d = pod_dns(
        &pod(serde_json::json!({"dnsPolicy": "Default"})),
        &cfg,
        None,
        v6,
    );
    assert_eq!(d.config.servers, s(&["::1"]));
    // ClusterFirst does not care about the host file.
    let d = pod_dns(&pod(serde_json::json!({})), &cfg, None, NODE);
    assert_eq!(d.config.servers, s(&["203.0.113.1"]));
    assert_eq!(d.config.searches[0], "testNS.svc.kubernetes.io");
}

/// Upstream's TestFormDNSSearchFitsLimits (on the limiter itself: the list repeats domains, which
/// the dnsConfig merge would collapse).
#[test]
fn search_limits_like_upstream() {
    let base = ["testNS.svc.TEST", "svc.TEST", "TEST"];
    let mut list_2048: Vec<String> = vec!["A".repeat(128)];
    list_2048.extend((0..15).map(|_| "A".repeat(127)));
    assert_eq!(list_2048.join(" ").len(), 2048);
    let numbered = |n: usize| -> Vec<String> {
        base.iter()
            .map(|x| x.to_string())
            .chain((4..=n).map(|i| i.to_string()))
            .collect()
    };
    let long = "B".repeat(256);
    let cases: Vec<(Vec<String>, Vec<String>, bool)> = vec![
        (s(&base), s(&base), false),
        (
            s(&["testNS.svc.TEST", "svc.TEST", "TEST", "AAA", "BBB"]),
            s(&["testNS.svc.TEST", "svc.TEST", "TEST", "AAA", "BBB"]),
            false,
        ),
        (
            s(&["testNS.svc.TEST", "svc.TEST", "TEST", "AAA", &long, "BBB"]),
            s(&["testNS.svc.TEST", "svc.TEST", "TEST", "AAA", "BBB"]),
            true,
        ),
        (list_2048.clone(), list_2048.clone(), false),
        (
            list_2048.iter().cloned().chain(["B".to_string()]).collect(),
            list_2048.clone(),
            true,
        ),
        (numbered(32), numbered(32), false),
        (numbered(33), numbered(32), true),
    ];
    for (i, (input, want, cut)) in cases.into_iter().enumerate() {
        let (searches, notice) = fit_searches(input);
        assert_eq!(searches, want, "case {i}");
        let notices: Vec<&DnsNotice> = notice.iter().collect();
        if cut {
            assert_eq!(
                notices,
                vec![&DnsNotice::Forming(format!(
                    "Search Line limits were exceeded, some search paths have been omitted, the applied search line is: {}",
                    want.join(" ")
                ))],
                "case {i}"
            );
            assert_eq!(notices[0].reason(), "DNSConfigForming");
        } else {
            assert!(notices.is_empty(), "case {i}: {notices:?}");
        }
    }
}

#[test]
fn search_limits_apply_to_the_merged_list() {
    // 29 host domains + 3 cluster ones + 1 from dnsConfig: the last is cut, with a notice.
    let host = ResolvConf {
        servers: s(&["10.250.0.1"]),
        searches: (1..=29).map(|i| format!("h{i}")).collect(),
        options: vec![],
    };
    let p = pod(serde_json::json!({"dnsConfig": {"searches": ["extra.example"]}}));
    let d = pod_dns(
        &p,
        &settings(&["10.96.0.10"], "cluster.local"),
        Some(&host),
        NODE,
    );
    assert_eq!(d.config.searches.len(), 32);
    assert_eq!(d.config.searches.last().unwrap(), "h29");
    assert_eq!(d.notices.len(), 1);
    assert_eq!(d.notices[0].reason(), "DNSConfigForming");
}

/// Upstream's TestFormDNSNameserversFitsLimits.
#[test]
fn nameserver_limit_like_upstream() {
    let cfg = settings(&[], "TEST");
    let cases: [(&[&str], &[&str], bool); 3] = [
        (&["127.0.0.1"], &["127.0.0.1"], false),
        (
            &["127.0.0.1", "10.0.0.10", "8.8.8.8"],
            &["127.0.0.1", "10.0.0.10", "8.8.8.8"],
            false,
        ),
        (
            &["127.0.0.1", "10.0.0.10", "8.8.8.8", "1.2.3.4"],
            &["127.0.0.1", "10.0.0.10", "8.8.8.8"],
            true,
        ),
    ];
    for (input, want, cut) in cases {
        let p = pod(serde_json::json!({"dnsPolicy": "None", "dnsConfig": {"nameservers": input}}));
        let d = pod_dns(&p, &cfg, None, NODE);
        assert_eq!(d.config.servers, s(want));
        assert_eq!(!d.notices.is_empty(), cut, "{input:?}");
        if cut {
            assert_eq!(
                d.notices[0].message(),
                "Nameserver limits were exceeded, some nameservers have been omitted, the applied nameserver line is: 127.0.0.1 10.0.0.10 8.8.8.8"
            );
        }
    }
    // Cluster DNS plus dnsConfig beyond three: cut the same way.
    let cfg = settings(&["10.96.0.10", "10.96.0.11"], "cluster.local");
    let p = pod(serde_json::json!({"dnsConfig": {"nameservers": ["1.1.1.1", "8.8.8.8"]}}));
    let d = pod_dns(&p, &cfg, Some(&host()), NODE);
    assert_eq!(
        d.config.servers,
        s(&["10.96.0.10", "10.96.0.11", "1.1.1.1"])
    );
}

#[test]
fn host_file_limits_are_checked_at_start_like_upstream() {
    let path = Path::new("/etc/resolv.conf");
    let ok = parse_resolv_conf("search a b c\n").unwrap();
    assert_eq!(host_limits_warning(&ok, path, "cluster.local"), None);
    let many = ResolvConf {
        searches: (0..30).map(|i| format!("d{i}")).collect(),
        ..Default::default()
    };
    assert_eq!(
        host_limits_warning(&many, path, "cluster.local").as_deref(),
        Some("Resolv.conf file '/etc/resolv.conf' contains search line consisting of more than 29 domains!")
    );
    assert_eq!(
        host_limits_warning(&many, path, ""),
        None,
        "32 without a cluster domain"
    );
    let long = ResolvConf {
        searches: vec!["x".repeat(254)],
        ..Default::default()
    };
    assert!(host_limits_warning(&long, path, "")
        .unwrap()
        .contains("more than allowed 253 chars"));
}

#[test]
fn reads_the_host_file_and_names_it_in_errors() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("resolv.conf");
    std::fs::write(&f, "nameserver 10.250.0.1\nsearch lab\n").unwrap();
    let r = read_host_resolv_conf(Some(&f)).unwrap().unwrap();
    assert_eq!((r.servers, r.searches), (s(&["10.250.0.1"]), s(&["lab"])));
    assert_eq!(read_host_resolv_conf(None).unwrap(), None);
    let missing = dir.path().join("nope");
    let e = read_host_resolv_conf(Some(&missing))
        .unwrap_err()
        .to_string();
    assert!(e.starts_with(&missing.display().to_string()), "{e}");
}
