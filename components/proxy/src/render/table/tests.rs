//! Updates are checked by replaying them on a model of the kernel's table that refuses what nf_tables
//! refuses (a chain or set deleted while referenced or not empty, a rule in a missing chain, an element
//! added twice or deleted when absent, in maps and in the `hairpin` set): replaying
//! `update_script(old, new)` on `old` must give `new`. tests/netns.rs replays the same updates on the real
//! nft.

use std::collections::{BTreeMap, BTreeSet};

use super::*;
use crate::model::TargetPort;
use crate::model::{EndpointGroup, NodeConfig, Protocol, ProxyState, ServiceInfo, ServicePort};
use crate::render::{build, build_reusing};
use std::sync::Arc;

/// The kernel's view: chains with rules, sets, map elements.
#[derive(Debug, Default, PartialEq, Eq)]
struct Kernel {
    chains: BTreeMap<String, Vec<String>>,
    sets: BTreeMap<String, String>,
    maps: BTreeMap<String, BTreeMap<String, String>>,
    hairpin: BTreeSet<String>,
}

impl Kernel {
    fn from_table(t: &Table) -> Kernel {
        let t = t.flat();
        Kernel {
            chains: t.chains.iter().cloned().collect(),
            sets: t
                .sets
                .iter()
                .map(|(n, timeout)| (n.clone(), format!("{timeout}s")))
                .collect(),
            maps: t
                .maps
                .iter()
                .map(|m| (m.name.to_string(), m.elements.clone()))
                .collect(),
            hairpin: t.hairpin.iter().map(|ip| format!("{ip} . {ip}")).collect(),
        }
    }

    /// Whether any rule or map element still names this chain (`goto`/`jump`) or set (`@set`).
    fn referenced(&self, name: &str, set: bool) -> bool {
        let in_rule = |r: &String| {
            if set {
                return r.contains(&format!("@{name} "));
            }
            let words: Vec<&str> = r.split([' ', ',']).collect();
            words
                .windows(2)
                .any(|w| (w[0] == "goto" || w[0] == "jump") && w[1] == name)
        };
        let goto = format!("goto {name}");
        self.chains.values().flatten().any(in_rule)
            || (!set
                && self
                    .maps
                    .values()
                    .flat_map(|m| m.values())
                    .any(|v| *v == goto))
    }

    fn apply(&mut self, script: &str) {
        let prefix = format!("ip {TABLE} ");
        for line in script.lines() {
            let (cmd, rest) = line
                .split_once(&prefix)
                .unwrap_or_else(|| panic!("unexpected command {line:?}"));
            match cmd.trim() {
                "add chain" => {
                    assert!(self.chains.insert(rest.into(), vec![]).is_none(), "{line}");
                }
                "flush chain" => self
                    .chains
                    .get_mut(rest)
                    .unwrap_or_else(|| panic!("no chain: {line}"))
                    .clear(),
                "delete chain" => {
                    assert!(self.chains[rest].is_empty(), "not flushed: {line}");
                    assert!(!self.referenced(rest, false), "still referenced: {line}");
                    self.chains.remove(rest);
                }
                "add rule" => {
                    let (chain, rule) = rest.split_once(' ').unwrap();
                    let rules = self
                        .chains
                        .get_mut(chain)
                        .unwrap_or_else(|| panic!("no chain: {line}"));
                    rules.push(rule.into());
                    // every chain a rule jumps to must exist already
                    let words: Vec<&str> = rule.split([' ', ',']).collect();
                    for w in words.windows(2) {
                        if w[0] == "goto" || w[0] == "jump" {
                            assert!(self.chains.contains_key(w[1]), "{line}");
                        }
                    }
                }
                "add set" => {
                    let (name, decl) = rest.split_once(' ').unwrap();
                    let timeout = decl
                        .split("timeout ")
                        .nth(1)
                        .and_then(|t| t.split(';').next())
                        .unwrap();
                    assert!(self.sets.insert(name.into(), timeout.into()).is_none());
                }
                "delete set" => {
                    assert!(!self.referenced(rest, true), "set still used: {line}");
                    assert!(self.sets.remove(rest).is_some(), "{line}");
                }
                "add element" | "delete element" if rest.starts_with("hairpin ") => {
                    let elems = rest["hairpin ".len()..]
                        .trim_start_matches("{ ")
                        .trim_end_matches(" }");
                    for e in elems.split(", ") {
                        let (a, b) = e.split_once(" . ").unwrap();
                        assert_eq!(a, b, "{line}");
                        if cmd.trim() == "add element" {
                            assert!(self.hairpin.insert(e.into()), "twice: {line}");
                        } else {
                            assert!(self.hairpin.remove(e), "absent: {line}");
                        }
                    }
                }
                "add element" | "delete element" => {
                    let (map, elems) = rest.split_once(' ').unwrap();
                    let elems = elems.trim_start_matches("{ ").trim_end_matches(" }");
                    let m = self.maps.get_mut(map).unwrap();
                    for e in elems.split(", ") {
                        if cmd.trim() == "add element" {
                            let (k, v) = e.split_once(" : ").unwrap();
                            let target = v.trim_start_matches("goto ");
                            // a verdict (drop) or a chain that exists
                            assert!(
                                v == "drop"
                                    || self.chains.contains_key(target)
                                    || target == "reject-service",
                                "{line}"
                            );
                            assert!(m.insert(k.into(), v.into()).is_none(), "twice: {line}");
                        } else {
                            assert!(m.remove(e).is_some(), "absent: {line}");
                        }
                    }
                }
                other => panic!("unexpected command {other:?} in {line:?}"),
            }
        }
    }
}

fn node() -> NodeConfig {
    NodeConfig {
        cluster_cidr: "10.244.0.0/16".parse().unwrap(),
    }
}

fn service(name: &str, ip: &str, node_port: Option<u16>, affinity: Option<u32>) -> ServiceInfo {
    ServiceInfo {
        namespace: "default".into(),
        name: name.into(),
        cluster_ip: ip.parse().unwrap(),
        ports: vec![ServicePort {
            name: String::new(),
            protocol: Protocol::Tcp,
            port: 80,
            target_port: TargetPort::Number(8080),
            node_port,
        }],
        affinity_timeout: affinity,
        internal_local: false,
    }
}

fn state(services: Vec<ServiceInfo>, endpoints: &[(&str, &[&str])]) -> ProxyState {
    let mut s = ProxyState {
        services,
        ..Default::default()
    };
    for (svc, addrs) in endpoints {
        s.add_endpoints(
            ("default".into(), svc.to_string()),
            vec![EndpointGroup::ready(
                &addrs.iter().map(|a| a.parse().unwrap()).collect::<Vec<_>>(),
                vec![],
            )],
        );
    }
    s
}

fn table(s: &ProxyState) -> Table {
    build(s, &node()).table
}

/// Replays the update on `old` and checks it lands on `new`; returns the script.
fn check(old: &ProxyState, new: &ProxyState) -> String {
    let (a, b) = (table(old), table(new));
    let script = update_script(&a, &b).expect("expressible as an update");
    let mut k = Kernel::from_table(&a);
    k.apply(&script);
    assert_eq!(k, Kernel::from_table(&b), "after\n{script}");
    script
}

fn web(eps: &[&str]) -> ProxyState {
    state(
        vec![
            service("web", "10.96.0.10", None, None),
            service("db", "10.96.0.11", None, None),
        ],
        &[("web", eps), ("db", &["10.244.9.9"])],
    )
}

#[test]
fn identical_tables_need_no_update() {
    let s = web(&["10.244.1.2"]);
    assert_eq!(update_script(&table(&s), &table(&s)).as_deref(), Some(""));
}

#[test]
fn one_endpoint_change_touches_only_its_service() {
    let script = check(
        &web(&["10.244.1.2", "10.244.1.3"]),
        &web(&["10.244.1.2", "10.244.1.4"]),
    );
    let lines: Vec<&str> = script.lines().collect();
    assert_eq!(
        lines,
        [
            // no chain and no jump added: the service chain's rules are rewritten
            "flush chain ip kiln svc-default/web/tcp/80",
            "add rule ip kiln svc-default/web/tcp/80 ip saddr != 10.244.0.0/16 meta mark set meta mark | 0x4000",
            "add rule ip kiln svc-default/web/tcp/80 meta l4proto tcp dnat to numgen random mod 2 map { 0 : 10.244.1.2 . 8080, 1 : 10.244.1.4 . 8080 }",
            "delete element ip kiln hairpin { 10.244.1.3 . 10.244.1.3 }",
            "add element ip kiln hairpin { 10.244.1.4 . 10.244.1.4 }",
        ]
    );
    assert!(!script.contains("db"), "the other service is untouched");
}

#[test]
fn services_come_and_go_and_lose_their_endpoints() {
    let none: &[&str] = &[];
    let base = web(&["10.244.1.2"]);
    // a new service with a NodePort
    let mut more = base.clone();
    more.services
        .push(service("api", "10.96.0.12", Some(30080), None));
    more.add_endpoints(
        ("default".into(), "api".into()),
        vec![EndpointGroup::ready(
            &["10.244.2.2".parse().unwrap()],
            vec![],
        )],
    );
    let script = check(&base, &more);
    assert!(script.contains(
        "add element ip kiln service-nodeports { tcp . 30080 : goto np-default/api/tcp/80 }"
    ));
    // and away again
    check(&more, &base);
    // web loses its endpoints: its key moves to the reject map, its chains go
    let empty = state(
        vec![
            service("web", "10.96.0.10", None, None),
            service("db", "10.96.0.11", None, None),
        ],
        &[("web", none), ("db", &["10.244.9.9"])],
    );
    let script = check(&base, &empty);
    assert!(script.contains("delete element ip kiln service-ips { 10.96.0.10 . tcp . 80 }"));
    assert!(script.contains(
        "add element ip kiln no-endpoint-services { 10.96.0.10 . tcp . 80 : goto reject-service }"
    ));
    check(&empty, &base);
    // everything removed, and back from nothing
    check(&base, &ProxyState::default());
    check(&ProxyState::default(), &more);
}

#[test]
fn a_key_that_changes_its_target_is_deleted_then_added() {
    let a = web(&["10.244.1.2"]);
    let mut b = a.clone();
    // the ClusterIP moves from web to a new service "web2"
    b.services[0].cluster_ip = "10.96.0.99".parse().unwrap();
    b.services.push(service("web2", "10.96.0.10", None, None));
    b.add_endpoints(
        ("default".into(), "web2".into()),
        vec![EndpointGroup::ready(
            &["10.244.3.3".parse().unwrap()],
            vec![],
        )],
    );
    let script = check(&a, &b);
    let del = script.find("delete element ip kiln service-ips").unwrap();
    let add = script.find("add element ip kiln service-ips").unwrap();
    assert!(del < add, "{script}");
}

#[test]
fn affinity_sets_follow_endpoints_and_a_new_timeout_needs_a_replace() {
    let with = |eps: &[&str], timeout| {
        state(
            vec![service("web", "10.96.0.10", None, Some(timeout))],
            &[("web", eps)],
        )
    };
    let script = check(&with(&["10.244.1.2"], 600), &with(&["10.244.1.3"], 600));
    assert!(script.contains(
        "add set ip kiln affinity-default/web/tcp/80__10.244.1.3/8080 { type ipv4_addr; flags dynamic,timeout; timeout 600s; }"
    ));
    assert!(script
        .trim_end()
        .ends_with("delete set ip kiln affinity-default/web/tcp/80__10.244.1.2/8080"));
    // affinity switched on and off
    check(&web(&["10.244.1.2"]), &{
        let mut s = web(&["10.244.1.2"]);
        s.services[0].affinity_timeout = Some(60);
        s
    });
    assert_eq!(
        update_script(
            &table(&with(&["10.244.1.2"], 600)),
            &table(&with(&["10.244.1.2"], 900))
        ),
        None
    );
}

#[test]
fn table_script_is_what_render_prints() {
    let s = web(&["10.244.1.2", "10.244.1.3"]);
    assert_eq!(
        table(&s).script(),
        crate::render::render(&s, &node()).script
    );
    let t = table(&s).flat();
    let chains: BTreeSet<&str> = t.chains.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(chains.len(), 2, "one per service port: {chains:?}");
}

#[test]
fn a_hairpin_address_shared_by_two_services_stays_until_both_drop_it() {
    // web and db share the endpoint 10.244.9.9
    let shared = state(
        vec![
            service("web", "10.96.0.10", None, None),
            service("db", "10.96.0.11", None, None),
        ],
        &[
            ("web", &["10.244.1.2", "10.244.9.9"]),
            ("db", &["10.244.9.9"]),
        ],
    );
    let web_leaves = web(&["10.244.1.2"]);
    let script = check(&shared, &web_leaves);
    assert!(!script.contains("hairpin"), "db still has it:\n{script}");
    let script = check(&web_leaves, &shared);
    assert!(!script.contains("hairpin"), "{script}");
    // both lose it: deleted once
    let none: &[&str] = &[];
    let gone = state(
        vec![
            service("web", "10.96.0.10", None, None),
            service("db", "10.96.0.11", None, None),
        ],
        &[("web", &["10.244.1.2"]), ("db", none)],
    );
    let script = check(&shared, &gone);
    assert_eq!(
        script.matches("10.244.9.9 . 10.244.9.9").count(),
        1,
        "{script}"
    );
    check(&gone, &shared);
}

#[test]
fn a_rebuild_reuses_the_fragments_of_unchanged_services() {
    let before = table(&web(&["10.244.1.2"]));
    let after_state = web(&["10.244.1.2", "10.244.1.3"]);
    let reused = build_reusing(&after_state, &node(), Some(&before)).table;
    assert_eq!(reused, table(&after_state), "same table as a fresh build");
    // fragments are in name order: db, web
    assert!(
        Arc::ptr_eq(&reused.fragments[0], &before.fragments[0]),
        "db reused"
    );
    assert!(
        !Arc::ptr_eq(&reused.fragments[1], &before.fragments[1]),
        "web rebuilt"
    );
    // a clash that appears changes the fragment that loses its key, even though its own inputs did not
    let mut clash = after_state.clone();
    clash
        .services
        .push(service("aaa", "10.96.0.11", None, None));
    let rebuilt = build_reusing(&clash, &node(), Some(&reused)).table;
    assert_eq!(rebuilt, table(&clash));
    check(&after_state, &clash);
}

#[test]
fn a_local_service_losing_its_local_endpoint_moves_to_drop_and_back() {
    use crate::model::{Endpoint, NodeTopology};
    let with = |local: bool| {
        let mut svc = service("web", "10.96.0.10", None, None);
        svc.internal_local = true;
        let mut s = ProxyState {
            services: vec![svc],
            topology: NodeTopology {
                name: "n1".into(),
                zone: None,
            },
            ..Default::default()
        };
        let on = |a: &str, n: &str| Endpoint {
            node_name: Some(n.into()),
            ..Endpoint::ready(a.parse().unwrap())
        };
        let mut endpoints = vec![on("10.244.2.2", "n2")];
        if local {
            endpoints.push(on("10.244.1.2", "n1"));
        }
        s.add_endpoints(
            ("default".into(), "web".into()),
            vec![EndpointGroup {
                endpoints,
                ports: vec![],
            }],
        );
        s
    };
    let script = check(&with(true), &with(false));
    assert!(
        script
            .contains("add element ip kiln no-endpoint-services { 10.96.0.10 . tcp . 80 : drop }"),
        "{script}"
    );
    assert!(script.contains("delete chain ip kiln svc-default/web/tcp/80"));
    check(&with(false), &with(true));
}
