//! Real nftables and routing, inside throwaway network namespaces of the test's own (root needed; CI runs as
//! root). Nothing touches the machine's own network namespace: every `nft`/`ip` call goes through
//! `ip netns exec` / `ip -n`, and every namespace is deleted on drop, also when a test fails.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use kiln_proxy::host::HostCommand;
use kiln_proxy::model::{
    EndpointGroup, EndpointPort, NodeConfig, Protocol, ProxyState, ServiceInfo, ServicePort,
    TargetPort,
};
use kiln_proxy::netfilter::{Netfilter, NftCli};
use kiln_proxy::render::{build, render, update_script};
use kiln_proxy::routes::{HostRoutes, IpRoutes};

fn is_root() -> bool {
    std::fs::metadata("/proc/self")
        .map(|m| m.uid() == 0)
        .unwrap_or(false)
}

macro_rules! require_root {
    () => {
        assert!(is_root(), "needs root: network namespaces, nftables");
    };
}

fn sh(args: &[&str]) -> String {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .expect("spawn");
    assert!(
        out.status.success(),
        "{args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A network namespace deleted on drop.
struct Netns {
    name: String,
}

impl Netns {
    fn new(suffix: &str) -> Netns {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        let name = format!("kp-test-{}-{nanos:x}{suffix}", std::process::id());
        sh(&["ip", "netns", "add", &name]);
        let ns = Netns { name };
        ns.ip(&["link", "set", "lo", "up"]);
        ns
    }
    fn ip(&self, args: &[&str]) -> String {
        let mut a = vec!["ip", "-n", &self.name];
        a.extend_from_slice(args);
        sh(&a)
    }
    fn exec(&self, args: &[&str]) -> std::process::Output {
        Command::new("ip")
            .args(["netns", "exec", &self.name])
            .args(args)
            .output()
            .expect("spawn")
    }
    /// A local interface with `addr` (a veth pair inside the namespace: this kernel has no dummy driver).
    fn add_local_link(&self, name: &str, addr: &str) {
        let peer = format!("{name}-p");
        self.ip(&["link", "add", name, "type", "veth", "peer", "name", &peer]);
        self.ip(&["addr", "add", addr, "dev", name]);
        self.ip(&["link", "set", name, "up"]);
        self.ip(&["link", "set", &peer, "up"]);
    }
    fn nft(&self) -> NftCli {
        NftCli {
            host: HostCommand::in_netns(&self.name),
        }
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

fn node() -> NodeConfig {
    NodeConfig {
        cluster_cidr: "10.244.0.0/16".parse().unwrap(),
    }
}

fn tcp_port(port: u16, target: u16, node_port: Option<u16>) -> ServicePort {
    ServicePort {
        name: String::new(),
        protocol: Protocol::Tcp,
        port,
        target_port: TargetPort::Number(target),
        node_port,
    }
}

fn service(name: &str, ip: &str, ports: Vec<ServicePort>) -> ServiceInfo {
    ServiceInfo {
        namespace: "default".into(),
        name: name.into(),
        cluster_ip: ip.parse().unwrap(),
        ports,
        affinity_timeout: None,
        internal_local: false,
    }
}

/// web (ClusterIP + NodePort 30080, two endpoints), dns (UDP, named port), empty (no endpoints).
fn state(web_endpoints: &[&str]) -> ProxyState {
    let mut dns = service(
        "dns",
        "10.96.0.53",
        vec![ServicePort {
            name: "dns".into(),
            protocol: Protocol::Udp,
            port: 53,
            target_port: TargetPort::Name("dns".into()),
            node_port: None,
        }],
    );
    dns.affinity_timeout = Some(600);
    let mut s = ProxyState {
        services: vec![
            service("web", "10.96.0.10", vec![tcp_port(80, 8080, Some(30080))]),
            dns,
            service("empty", "10.96.0.11", vec![tcp_port(80, 8080, Some(30081))]),
        ],
        endpoints: BTreeMap::new(),
        ..Default::default()
    };
    let key = |n: &str| ("default".to_string(), n.to_string());
    s.add_endpoints(
        key("web"),
        vec![EndpointGroup::ready(
            &web_endpoints
                .iter()
                .map(|a| a.parse().unwrap())
                .collect::<Vec<_>>(),
            vec![],
        )],
    );
    s.add_endpoints(
        key("dns"),
        vec![EndpointGroup::ready(
            &["10.244.1.3".parse().unwrap()],
            vec![EndpointPort {
                name: "dns".into(),
                protocol: Protocol::Udp,
                port: 5353,
            }],
        )],
    );
    s
}

#[test]
#[ignore = "needs root: network namespaces, nftables (CI runs it with --include-ignored)"]
fn rendered_table_loads_into_nft_replaces_atomically_and_cleanup_removes_it() {
    require_root!();
    let ns = Netns::new("");
    let nft = ns.nft();
    assert_eq!(
        nft.list_table().unwrap(),
        None,
        "fresh namespace has no table"
    );

    let script = render(&state(&["10.244.1.2", "10.244.2.2"]), &node()).script;
    nft.apply(&script)
        .expect("nft 1.0.6 accepts the rendered script");
    let first = nft.list_table().unwrap().expect("table kiln exists");
    for needle in [
        "10.96.0.10 . tcp . 80 : goto svc-default/web/tcp/80",
        "tcp . 30080 : goto np-default/web/tcp/80",
        "10.96.0.11 . tcp . 80 : goto reject-service",
        "tcp . 30081 : goto reject-service",
        "meta l4proto tcp dnat ip to numgen random mod 2 map { 0 : 10.244.1.2 . 8080, 1 : 10.244.2.2 . 8080 }",
        "udp dnat to 10.244.1.3:5353",
        "ct status dnat ip saddr . ip daddr @hairpin",
        "update @affinity-default/dns/udp/53__10.244.1.3/5353 { ip saddr }",
        "masquerade fully-random",
    ] {
        assert!(first.contains(needle), "missing {needle:?} in\n{first}");
    }

    // same script again: one table, no duplicated chains or rules
    nft.apply(&script).unwrap();
    let second = nft.list_table().unwrap().unwrap();
    assert_eq!(first, second);
    // a chain per endpoint only for the affinity service (dns)
    assert_eq!(second.matches("chain ep-default/web/").count(), 0);
    assert_eq!(second.matches("chain ep-default/dns/").count(), 1);

    // an endpoint leaves: the replace drops its chain
    nft.apply(&render(&state(&["10.244.2.2"]), &node()).script)
        .unwrap();
    let third = nft.list_table().unwrap().unwrap();
    assert!(!third.contains("10.244.1.2"), "{third}");
    assert!(third.contains("numgen random mod 1"));

    // kiln's own route (proto 252) and somebody else's route
    ns.add_local_link("kpd", "10.250.0.11/24");
    let routes = IpRoutes {
        host: HostCommand::in_netns(&ns.name),
    };
    let kiln_route = kiln_proxy::routes::Route {
        dst: "10.244.2.0/24".parse().unwrap(),
        via: "10.250.0.12".parse().unwrap(),
    };
    routes.replace(&kiln_route).unwrap();
    routes.replace(&kiln_route).unwrap();
    ns.ip(&["route", "add", "10.77.0.0/16", "via", "10.250.0.13"]);
    assert_eq!(
        routes.list().unwrap().into_iter().collect::<Vec<_>>(),
        vec![kiln_route]
    );

    // the binary's --cleanup, run inside the namespace; twice, since reset may run it again
    for _ in 0..2 {
        let out = ns.exec(&[env!("CARGO_BIN_EXE_kiln-proxy"), "--cleanup"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert_eq!(nft.list_table().unwrap(), None);
    let left = ns.ip(&["-4", "route", "show"]);
    assert!(!left.contains("10.244.2.0/24"), "{left}");
    assert!(
        left.contains("10.77.0.0/16"),
        "cleanup left other routes alone: {left}"
    );
}

/// A busybox httpd in its own namespace, killed on drop.
struct Backend {
    child: Child,
    _dir: tempfile::TempDir,
}

impl Drop for Backend {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Namespace `ep` wired to `main` by a veth: main side `gw`/24, endpoint `ip`/24, pod-network route back.
fn endpoint(main: &Netns, ep: &Netns, link: &str, gw: &str, ip: &str, body: &str) -> Backend {
    main.ip(&[
        "link", "add", link, "type", "veth", "peer", "name", "eth0", "netns", &ep.name,
    ]);
    main.ip(&["addr", "add", &format!("{gw}/24"), "dev", link]);
    main.ip(&["link", "set", link, "up"]);
    ep.ip(&["addr", "add", &format!("{ip}/24"), "dev", "eth0"]);
    ep.ip(&["link", "set", "eth0", "up"]);
    // like a pod: the pod network and services via the node, nothing else (no default route), so a reply
    // to a non-pod source only arrives when the node masqueraded it
    ep.ip(&["route", "add", "10.244.0.0/16", "via", gw]);
    ep.ip(&["route", "add", "10.96.0.0/12", "via", gw]);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("index.html"), body).unwrap();
    let child = Command::new("ip")
        .args([
            "netns", "exec", &ep.name, "busybox", "httpd", "-f", "-p", "8080", "-h",
        ])
        .arg(dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("busybox httpd");
    Backend { child, _dir: dir }
}

/// One HTTP GET from inside `ns` (busybox wget -T segfaults on Debian's busybox; `timeout` bounds it).
fn get(ns: &Netns, url: &str) -> Result<String, String> {
    let out = ns.exec(&["timeout", "3", "busybox", "wget", "-qO-", url]);
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    } else {
        Err(format!(
            "{} {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

fn wait_up(ns: &Netns, url: &str) {
    for _ in 0..50 {
        if get(ns, url).is_ok() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("{url} never answered");
}

#[test]
#[ignore = "needs root: network namespaces, nftables (CI runs it with --include-ignored)"]
fn cluster_ip_node_port_hairpin_and_reject_carry_real_traffic() {
    require_root!();
    let node_ns = Netns::new("");
    let a = Netns::new("-a");
    let b = Netns::new("-b");
    let _ha = endpoint(&node_ns, &a, "va", "10.244.1.1", "10.244.1.2", "backend-a");
    let _hb = endpoint(&node_ns, &b, "vb", "10.244.2.1", "10.244.2.2", "backend-b");
    // the node's own address, outside the pod network, and a route for the service range (lab pitfall 6)
    node_ns.add_local_link("kpd", "192.168.77.1/24");
    node_ns.ip(&[
        "route",
        "add",
        "10.96.0.0/12",
        "dev",
        "kpd",
        "src",
        "192.168.77.1",
    ]);
    let fwd = node_ns.exec(&["sysctl", "-qw", "net.ipv4.ip_forward=1"]);
    assert!(fwd.status.success());
    wait_up(&node_ns, "http://10.244.1.2:8080/");
    wait_up(&node_ns, "http://10.244.2.2:8080/");

    let nft = node_ns.nft();
    nft.apply(&render(&state(&["10.244.1.2", "10.244.2.2"]), &node()).script)
        .unwrap();

    let spread = |ns: &Netns, url: &str| {
        let mut seen = BTreeMap::new();
        for _ in 0..30 {
            let body = get(ns, url).unwrap_or_else(|e| panic!("{url} from {}: {e}", ns.name));
            *seen.entry(body).or_insert(0) += 1;
        }
        seen
    };
    // node → ClusterIP: source 192.168.77.1 is outside the pod CIDR, so only masquerade brings replies back
    let cip = spread(&node_ns, "http://10.96.0.10/");
    assert_eq!(
        cip.keys().collect::<Vec<_>>(),
        ["backend-a", "backend-b"],
        "{cip:?}"
    );
    // node → own NodePort
    let np = spread(&node_ns, "http://192.168.77.1:30080/");
    assert_eq!(
        np.keys().collect::<Vec<_>>(),
        ["backend-a", "backend-b"],
        "{np:?}"
    );
    // pod a → ClusterIP, landing on itself half the time (hairpin) and on b otherwise
    let hairpin = spread(&a, "http://10.96.0.10/");
    assert_eq!(
        hairpin.keys().collect::<Vec<_>>(),
        ["backend-a", "backend-b"],
        "{hairpin:?}"
    );

    // no endpoints: refused at once (without the reject rule the SYN would vanish and wget time out)
    let err = get(&node_ns, "http://10.96.0.11/").unwrap_err();
    assert!(err.contains("refused"), "{err}");
    let err = get(&a, "http://10.96.0.11/").unwrap_err();
    assert!(err.contains("refused"), "from a pod (forward hook): {err}");
    let err = get(&node_ns, "http://192.168.77.1:30081/").unwrap_err();
    assert!(err.contains("refused"), "NodePort: {err}");

    // endpoint a leaves, applied as an update (what the proxy does for a change): every request goes to b
    let table = |eps: &[&str]| build(&state(eps), &node()).table;
    let both = table(&["10.244.1.2", "10.244.2.2"]);
    let b_only = table(&["10.244.2.2"]);
    nft.apply(&update_script(&both, &b_only).unwrap()).unwrap();
    let only_b = spread(&node_ns, "http://10.96.0.10/");
    assert_eq!(
        only_b.keys().collect::<Vec<_>>(),
        ["backend-b"],
        "{only_b:?}"
    );
    // and back, also as an update
    nft.apply(&update_script(&b_only, &both).unwrap()).unwrap();
    let again = spread(&node_ns, "http://10.96.0.10/");
    assert_eq!(
        again.keys().collect::<Vec<_>>(),
        ["backend-a", "backend-b"],
        "{again:?}"
    );

    // ClientIP affinity switched on (an update): every request of one client lands on one backend,
    // through the ClusterIP and the NodePort, from the node and from a pod (also when it picked itself)
    let mut sticky = state(&["10.244.1.2", "10.244.2.2"]);
    sticky.services[0].affinity_timeout = Some(60);
    let sticky = build(&sticky, &node()).table;
    nft.apply(&update_script(&both, &sticky).unwrap()).unwrap();
    for (ns, url) in [
        (&node_ns, "http://10.96.0.10/"),
        (&node_ns, "http://192.168.77.1:30080/"),
        (&a, "http://10.96.0.10/"),
    ] {
        let pinned = spread(ns, url);
        assert_eq!(pinned.len(), 1, "{url} from {}: {pinned:?}", ns.name);
    }
}

/// `nft list table` with the order nft happens to print things in taken out (elements of one map, chains
/// added later), so a table reached by updates compares equal to the same table loaded whole.
fn normalized(listing: &str) -> Vec<String> {
    let mut lines: Vec<String> = listing
        .lines()
        .flat_map(|l| {
            let l = l.trim();
            let l = l.strip_prefix("elements = { ").unwrap_or(l);
            let l = l.trim_end_matches(',');
            let l = l.strip_suffix(" }").unwrap_or(l);
            // set elements may share a line
            l.split(", ").map(str::to_string).collect::<Vec<_>>()
        })
        .filter(|l| !l.is_empty())
        .collect();
    lines.sort();
    lines
}

#[test]
#[ignore = "needs root: network namespaces, nftables (CI runs it with --include-ignored)"]
fn updates_reach_the_same_table_as_a_whole_replace() {
    require_root!();
    let updated = Netns::new("-u");
    let whole = Netns::new("-w");
    let (nu, nw) = (updated.nft(), whole.nft());
    // a walk through the changes an update must handle: endpoints added/removed/emptied, a NodePort
    // added, affinity switched on (new sets) and off, a service removed and its ClusterIP reused
    let mut states = vec![
        state(&["10.244.1.2", "10.244.2.2"]),
        state(&["10.244.2.2"]),
        state(&[]),
        state(&["10.244.1.2", "10.244.3.3", "10.244.2.2"]),
    ];
    let mut s = state(&["10.244.1.2"]);
    s.services[0].ports[0].node_port = Some(30099);
    s.services[0].affinity_timeout = Some(60);
    states.push(s.clone());
    s.services.remove(1);
    s.services[0].affinity_timeout = None;
    s.services[0].cluster_ip = "10.96.0.53".parse().unwrap();
    states.push(s);
    states.push(ProxyState::default());
    states.push(state(&["10.244.2.2"]));

    let mut last = build(&states[0], &node()).table;
    nu.apply(&last.script()).unwrap();
    for (i, st) in states.iter().enumerate().skip(1) {
        let next = build(st, &node()).table;
        let script = update_script(&last, &next).expect("an update");
        nu.apply(&script)
            .unwrap_or_else(|e| panic!("step {i}: nft refused\n{script}\n{e}"));
        nw.apply(&next.script()).unwrap();
        let (a, b) = (
            nu.list_table().unwrap().unwrap(),
            nw.list_table().unwrap().unwrap(),
        );
        assert_eq!(
            normalized(&a),
            normalized(&b),
            "step {i}: updated\n{a}\nwhole\n{b}\nafter\n{script}"
        );
        last = next;
    }
}

/// The UDP flows of the `dns` service in `ns`, as `conntrack -L` prints them.
fn udp_flows(ns: &Netns, service_ip: &str) -> String {
    let out = ns.exec(&["conntrack", "-L", "-p", "udp", "--orig-dst", service_ip]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
#[ignore = "needs root: network namespaces, nftables (CI runs it with --include-ignored)"]
fn stale_udp_flows_are_deleted_by_the_conntrack_cli() {
    require_root!();
    use kiln_proxy::conntrack::{Conntrack, ConntrackCli, Flow};
    let ns = Netns::new("-ct");
    // the dns service (UDP 10.96.0.53:53) DNATs to 10.244.1.3
    ns.nft()
        .apply(&render(&state(&["10.244.1.2"]), &node()).script)
        .unwrap();
    // a route towards the endpoint, so the DNATed packet leaves (nobody answers: an unreplied flow)
    ns.add_local_link("kpc", "10.244.1.1/24");
    ns.ip(&["route", "add", "10.96.0.0/12", "dev", "kpc"]);
    let send = ns.exec(&["bash", "-c", "echo query > /dev/udp/10.96.0.53/53"]);
    assert!(
        send.status.success(),
        "{}",
        String::from_utf8_lossy(&send.stderr)
    );
    let flows = udp_flows(&ns, "10.96.0.53");
    assert!(
        flows.contains("src=10.244.1.3") && flows.contains("dport=53"),
        "a DNATed flow: {flows}"
    );
    let ct = ConntrackCli {
        host: HostCommand::in_netns(&ns.name),
    };
    // another endpoint's flows: none match, which is no error, and this flow stays
    ct.delete(&Flow::ServiceIpToEndpoint {
        service_ip: "10.96.0.53".parse().unwrap(),
        endpoint: "10.244.1.9".parse().unwrap(),
    })
    .unwrap();
    assert!(udp_flows(&ns, "10.96.0.53").contains("src=10.244.1.3"));
    ct.delete(&Flow::ServiceIpToEndpoint {
        service_ip: "10.96.0.53".parse().unwrap(),
        endpoint: "10.244.1.3".parse().unwrap(),
    })
    .unwrap();
    let left = udp_flows(&ns, "10.96.0.53");
    assert!(!left.contains("10.244.1.3"), "deleted: {left}");
}

#[test]
#[ignore = "needs root: network namespaces, nftables (CI runs it with --include-ignored)"]
fn a_local_service_without_a_local_endpoint_loads_as_drop() {
    require_root!();
    use kiln_proxy::model::{Endpoint, NodeTopology};
    let ns = Netns::new("-local");
    let mut s = state(&["10.244.1.2"]);
    s.topology = NodeTopology {
        name: "node-a".into(),
        zone: None,
    };
    s.services[0].internal_local = true;
    s.endpoints.insert(
        ("default".into(), "web".into()),
        vec![EndpointGroup {
            endpoints: vec![Endpoint {
                node_name: Some("node-b".into()),
                ..Endpoint::ready("10.244.2.2".parse().unwrap())
            }],
            ports: vec![],
        }],
    );
    ns.nft().apply(&render(&s, &node()).script).unwrap();
    let listed = ns.nft().list_table().unwrap().unwrap();
    assert!(listed.contains("10.96.0.10 . tcp . 80 : drop"), "{listed}");
    // its NodePort follows the Cluster policy: DNAT to the other node's endpoint
    assert!(
        listed.contains("tcp . 30080 : goto np-default/web/tcp/80"),
        "{listed}"
    );
}
