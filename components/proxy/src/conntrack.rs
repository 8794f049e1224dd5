//! Stale UDP conntrack entries. A UDP "connection" is a conntrack entry that lives as long as packets
//! keep coming, and it pins its DNAT: without a flush, a client that keeps sending (a resolver asking
//! kube-dns every few seconds) keeps reaching an endpoint that is gone, long after the rules changed.
//! So after each sync, like upstream kube-proxy (pkg/proxy/conntrack, with the `conntrack` CLI filters it
//! used up to 1.30), the proxy deletes:
//!
//! - the flows of a UDP service port's endpoint that stopped serving or went away
//!   (`-D --orig-dst <clusterIP> --dst-nat <endpoint> -p udp`, and `--dport <nodePort>` for NodePorts);
//! - every flow to a UDP service port that went from no serving endpoint to some (`-D --orig-dst
//!   <clusterIP> -p udp`; and `-p udp --dport <nodePort>`): a flow created while it had none would
//!   otherwise keep bypassing the new DNAT;
//! - every flow to the ClusterIP of a UDP service port that went away.
//!
//! TCP needs nothing: a TCP connection to a gone endpoint fails and the client reconnects.
//!
//! Which entries to delete is computed on values ([`udp_view`], [`stale_flows`]); the kernel is reached
//! through the [`Conntrack`] trait (the `conntrack` CLI, or a recording double in tests).

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::sync::Mutex;

use crate::host::{HostCommand, HostError};
use crate::model::{resolve_endpoints, Backend, Protocol, ProxyState};

/// What `conntrack -D` prints (with exit status 1) when its filter matched nothing.
const NOTHING_DELETED: &str = "0 flow entries have been deleted";

#[derive(Debug, thiserror::Error)]
pub enum ConntrackError {
    #[error("conntrack: {0}")]
    Cli(#[from] HostError),
}

/// One `conntrack -D` filter, always for UDP.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Flow {
    /// Every flow to a service IP.
    ToServiceIp(Ipv4Addr),
    /// Every flow to a NodePort.
    ToNodePort(u16),
    /// Flows to a service IP that were DNATed to `endpoint`.
    ServiceIpToEndpoint {
        service_ip: Ipv4Addr,
        endpoint: Ipv4Addr,
    },
    /// Flows to a NodePort that were DNATed to `endpoint`.
    NodePortToEndpoint { node_port: u16, endpoint: Ipv4Addr },
}

impl Flow {
    /// The `conntrack` arguments that delete these flows (upstream's ClearEntriesFor* parameters).
    pub fn args(&self) -> Vec<String> {
        let v = |a: &[&str]| a.iter().map(|s| s.to_string()).collect();
        match self {
            Flow::ToServiceIp(ip) => v(&["-D", "--orig-dst", &ip.to_string(), "-p", "udp"]),
            Flow::ToNodePort(port) => v(&["-D", "-p", "udp", "--dport", &port.to_string()]),
            Flow::ServiceIpToEndpoint {
                service_ip,
                endpoint,
            } => v(&[
                "-D",
                "--orig-dst",
                &service_ip.to_string(),
                "--dst-nat",
                &endpoint.to_string(),
                "-p",
                "udp",
            ]),
            Flow::NodePortToEndpoint {
                node_port,
                endpoint,
            } => v(&[
                "-D",
                "-p",
                "udp",
                "--dport",
                &node_port.to_string(),
                "--dst-nat",
                &endpoint.to_string(),
            ]),
        }
    }
}

pub trait Conntrack: Send + Sync {
    /// Deletes the flows `flow` matches; matching none is no error.
    fn delete(&self, flow: &Flow) -> Result<(), ConntrackError>;
}

/// The `conntrack` command line tool (Debian package `conntrack`).
#[derive(Debug, Clone, Default)]
pub struct ConntrackCli {
    pub host: HostCommand,
}

impl Conntrack for ConntrackCli {
    fn delete(&self, flow: &Flow) -> Result<(), ConntrackError> {
        let args = flow.args();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        match self.host.run("conntrack", &args, None) {
            Ok(_) => Ok(()),
            Err(HostError::Failed { stderr, .. }) if stderr.contains(NOTHING_DELETED) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

/// Test double: records every deletion.
#[derive(Debug, Default)]
pub struct RecordingConntrack {
    pub deleted: Mutex<Vec<Flow>>,
}

impl RecordingConntrack {
    /// Everything deleted so far, and forgets it.
    pub fn take(&self) -> Vec<Flow> {
        std::mem::take(&mut *self.deleted.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

impl Conntrack for RecordingConntrack {
    fn delete(&self, flow: &Flow) -> Result<(), ConntrackError> {
        self.deleted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(flow.clone());
        Ok(())
    }
}

/// A UDP service port as conntrack cleanup needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UdpPort {
    pub cluster_ip: Ipv4Addr,
    pub node_port: Option<u16>,
    /// Endpoints that are serving (ready or not): the ones traffic may have been sent to.
    pub serving: BTreeSet<Backend>,
}

/// Every UDP service port, keyed by (namespace, name, port name) like upstream's ServicePortName.
pub type UdpView = BTreeMap<(String, String, String), UdpPort>;

/// The UDP service ports of a state and their serving endpoints (all of them, whatever topology or
/// traffic policy this node applies: a flow may point at any of them).
pub fn udp_view(state: &ProxyState) -> UdpView {
    let mut out = UdpView::new();
    for svc in &state.services {
        let groups = state
            .endpoints
            .get(&(svc.namespace.clone(), svc.name.clone()))
            .map(Vec::as_slice)
            .unwrap_or_default();
        for port in svc.ports.iter().filter(|p| p.protocol == Protocol::Udp) {
            let serving = resolve_endpoints(port, groups)
                .into_iter()
                .filter(|(e, _)| e.serving)
                .map(|(e, p)| (e.addr, p))
                .collect();
            out.insert(
                (svc.namespace.clone(), svc.name.clone(), port.name.clone()),
                UdpPort {
                    cluster_ip: svc.cluster_ip,
                    node_port: port.node_port,
                    serving,
                },
            );
        }
    }
    out
}

/// The flows to delete after the rules moved from `old` to `new` (upstream's
/// detectStaleConntrackEntries + deleteStale*ConntrackEntries), sorted, without duplicates.
pub fn stale_flows(old: &UdpView, new: &UdpView) -> Vec<Flow> {
    let mut out = BTreeSet::new();
    for (key, was) in old {
        let now = new.get(key);
        let current = now.unwrap_or(was);
        if now.is_none() {
            out.insert(Flow::ToServiceIp(was.cluster_ip));
        }
        for (addr, port) in &was.serving {
            if now.is_some_and(|n| n.serving.contains(&(*addr, *port))) {
                continue;
            }
            out.insert(Flow::ServiceIpToEndpoint {
                service_ip: current.cluster_ip,
                endpoint: *addr,
            });
            if let Some(np) = current.node_port {
                out.insert(Flow::NodePortToEndpoint {
                    node_port: np,
                    endpoint: *addr,
                });
            }
        }
    }
    for (key, now) in new {
        let was_serving = old.get(key).is_some_and(|o| !o.serving.is_empty());
        if !now.serving.is_empty() && !was_serving {
            out.insert(Flow::ToServiceIp(now.cluster_ip));
            if let Some(np) = now.node_port {
                out.insert(Flow::ToNodePort(np));
            }
        }
    }
    out.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{
        Endpoint, EndpointGroup, EndpointPort, ServiceInfo, ServicePort, TargetPort,
    };

    fn ip(s: &str) -> Ipv4Addr {
        s.parse().unwrap()
    }

    /// kube-dns: 53/UDP and 53/TCP on 10.96.0.10, endpoints (address, serving).
    fn dns(endpoints: &[(&str, bool)]) -> ProxyState {
        let port = |name: &str, protocol| ServicePort {
            name: name.into(),
            protocol,
            port: 53,
            target_port: TargetPort::Number(53),
            node_port: None,
        };
        let mut s = ProxyState {
            services: vec![ServiceInfo {
                namespace: "kube-system".into(),
                name: "kube-dns".into(),
                cluster_ip: ip("10.96.0.10"),
                ports: vec![port("dns", Protocol::Udp), port("dns-tcp", Protocol::Tcp)],
                affinity_timeout: None,
                internal_local: false,
            }],
            ..Default::default()
        };
        let endpoints = endpoints
            .iter()
            .map(|(a, serving)| Endpoint {
                ready: *serving,
                serving: *serving,
                ..Endpoint::ready(ip(a))
            })
            .collect();
        let ports = [("dns", Protocol::Udp), ("dns-tcp", Protocol::Tcp)]
            .into_iter()
            .map(|(name, protocol)| EndpointPort {
                name: name.into(),
                protocol,
                port: 53,
            })
            .collect();
        s.add_endpoints(
            ("kube-system".into(), "kube-dns".into()),
            vec![EndpointGroup { endpoints, ports }],
        );
        s
    }

    fn stale(old: &ProxyState, new: &ProxyState) -> Vec<Flow> {
        stale_flows(&udp_view(old), &udp_view(new))
    }

    #[test]
    fn a_removed_endpoint_loses_its_flows() {
        let before = dns(&[("10.250.0.11", true), ("10.250.0.12", true)]);
        let after = dns(&[("10.250.0.11", true)]);
        assert_eq!(
            stale(&before, &after),
            [Flow::ServiceIpToEndpoint {
                service_ip: ip("10.96.0.10"),
                endpoint: ip("10.250.0.12"),
            }],
            "one delete for the UDP port; TCP needs none"
        );
        assert!(
            stale(&after, &after).is_empty(),
            "no change, nothing deleted"
        );
        assert!(
            stale(&after, &before).is_empty(),
            "an added endpoint leaves flows alone"
        );
    }

    #[test]
    fn an_endpoint_that_stops_serving_loses_its_flows() {
        // the node went away: the node lifecycle controller marked the pod not ready
        let before = dns(&[("10.250.0.11", true), ("10.250.0.12", true)]);
        let after = dns(&[("10.250.0.11", true), ("10.250.0.12", false)]);
        assert_eq!(
            stale(&before, &after),
            [Flow::ServiceIpToEndpoint {
                service_ip: ip("10.96.0.10"),
                endpoint: ip("10.250.0.12"),
            }]
        );
    }

    #[test]
    fn a_service_that_gets_its_first_endpoint_flushes_its_ip() {
        let none = dns(&[("10.250.0.11", false)]);
        let one = dns(&[("10.250.0.11", true)]);
        assert_eq!(stale(&none, &one), [Flow::ToServiceIp(ip("10.96.0.10"))]);
        assert_eq!(
            stale(&ProxyState::default(), &one),
            [Flow::ToServiceIp(ip("10.96.0.10"))],
            "first sync: whatever the kernel holds may be stale"
        );
    }

    #[test]
    fn a_removed_service_flushes_its_ip_and_endpoints() {
        let one = dns(&[("10.250.0.11", true)]);
        assert_eq!(
            stale(&one, &ProxyState::default()),
            [
                Flow::ToServiceIp(ip("10.96.0.10")),
                Flow::ServiceIpToEndpoint {
                    service_ip: ip("10.96.0.10"),
                    endpoint: ip("10.250.0.11"),
                },
            ]
        );
    }

    #[test]
    fn node_ports_are_flushed_too() {
        let with_np = |eps: &[(&str, bool)]| {
            let mut s = dns(eps);
            s.services[0].ports[0].node_port = Some(30053);
            s
        };
        let two = with_np(&[("10.250.0.11", true), ("10.250.0.12", true)]);
        let one = with_np(&[("10.250.0.11", true)]);
        assert_eq!(
            stale(&two, &one),
            [
                Flow::ServiceIpToEndpoint {
                    service_ip: ip("10.96.0.10"),
                    endpoint: ip("10.250.0.12"),
                },
                Flow::NodePortToEndpoint {
                    node_port: 30053,
                    endpoint: ip("10.250.0.12"),
                },
            ]
        );
        let none = with_np(&[]);
        assert_eq!(
            stale(&none, &one),
            [Flow::ToServiceIp(ip("10.96.0.10")), Flow::ToNodePort(30053)]
        );
    }

    #[test]
    fn cli_arguments_are_upstreams() {
        let a = |f: Flow| f.args().join(" ");
        assert_eq!(
            a(Flow::ToServiceIp(ip("10.96.0.10"))),
            "-D --orig-dst 10.96.0.10 -p udp"
        );
        assert_eq!(a(Flow::ToNodePort(30053)), "-D -p udp --dport 30053");
        assert_eq!(
            a(Flow::ServiceIpToEndpoint {
                service_ip: ip("10.96.0.10"),
                endpoint: ip("10.244.1.2")
            }),
            "-D --orig-dst 10.96.0.10 --dst-nat 10.244.1.2 -p udp"
        );
        assert_eq!(
            a(Flow::NodePortToEndpoint {
                node_port: 30053,
                endpoint: ip("10.244.1.2")
            }),
            "-D -p udp --dport 30053 --dst-nat 10.244.1.2"
        );
    }

    #[test]
    fn the_cli_takes_nothing_to_delete_as_success() {
        // a stand-in `conntrack` that fails the way the real one does when no flow matched
        let dir = tempfile::tempdir().unwrap();
        let fake = dir.path().join("fake-conntrack");
        std::fs::write(
            &fake,
            "#!/bin/sh\necho 'conntrack v1.4.7 (conntrack-tools): 0 flow entries have been deleted.' >&2\nexit 1\n",
        )
        .unwrap();
        let broken = dir.path().join("broken-conntrack");
        std::fs::write(
            &broken,
            "#!/bin/sh\necho 'Operation not permitted' >&2\nexit 1\n",
        )
        .unwrap();
        // the prefix runs the stand-in through sh (read, not executed: no "text file busy" while
        // another test forks), which ignores the real program name and arguments after it
        let cli = |script: &std::path::Path| ConntrackCli {
            host: HostCommand {
                prefix: vec!["sh".into(), script.display().to_string()],
            },
        };
        let flow = Flow::ToServiceIp(ip("10.96.0.10"));
        cli(&fake).delete(&flow).unwrap();
        assert!(cli(&broken).delete(&flow).is_err());
    }
}
