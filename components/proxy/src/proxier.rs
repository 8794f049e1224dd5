//! One sync: build the table, apply what changed (or all of it when it vanished), delete the UDP
//! conntrack flows the change made stale, bring host-gw routes in line. Works through the [`Netfilter`],
//! [`Conntrack`] and [`HostRoutes`] traits, so it is unit-tested with recording doubles.
//!
//! A change is applied as an update of the table last applied ([`update_script`]: only the chains, sets
//! and map elements that differ, one `nft -f` transaction); the first sync, a table that vanished and the
//! sync after a failed apply replace the whole table (the kernel state is then unknown). A failed update
//! falls back to the whole replace at once.

use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Instant;

use crate::conntrack::{stale_flows, udp_view, Conntrack, UdpView};
use crate::health::SyncReport;
use crate::model::{NodeConfig, ProxyState};
use crate::netfilter::{Netfilter, NetfilterError};
use crate::render::{build_reusing, update_script, Table};
use crate::routes::{desired_routes, sync_routes, HostRoutes, NodeRouteInfo, RouteError};

#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    #[error(transparent)]
    Netfilter(#[from] NetfilterError),
    #[error(transparent)]
    Routes(#[from] RouteError),
}

pub struct Proxier {
    node: NodeConfig,
    node_name: String,
    nft: Arc<dyn Netfilter>,
    conntrack: Arc<dyn Conntrack>,
    routes: Arc<dyn HostRoutes>,
    /// The table as last applied successfully (what the kernel holds); an identical build skips the
    /// reload, a different one is applied as an update of it.
    last: Option<Table>,
    /// The UDP service ports the applied rules were built from, to tell which conntrack flows a change
    /// made stale. Empty before the first sync: the kernel may then hold flows from before a restart.
    last_udp: UdpView,
}

impl Proxier {
    pub fn new(
        node: NodeConfig,
        node_name: String,
        nft: Arc<dyn Netfilter>,
        conntrack: Arc<dyn Conntrack>,
        routes: Arc<dyn HostRoutes>,
    ) -> Self {
        Proxier {
            node,
            node_name,
            nft,
            conntrack,
            routes,
            last: None,
            last_udp: UdpView::new(),
        }
    }

    /// Syncs rules and routes; `None` skips a part whose inputs are not listed yet (so a missing Services
    /// API does not hold back host-gw routes, and vice versa). `verify` (the periodic resync) also checks
    /// that the table still exists, so a table deleted behind kiln's back comes back within one period.
    pub fn sync(
        &mut self,
        state: Option<&ProxyState>,
        nodes: Option<&[NodeRouteInfo]>,
        node_ip: Option<Ipv4Addr>,
        verify: bool,
    ) -> (SyncReport, Result<(), SyncError>) {
        let start = Instant::now();
        let mut report = SyncReport::default();
        let mut result = Ok(());
        if let Some(state) = state {
            result = self.sync_rules(state, verify, &mut report);
            if result.is_ok() {
                self.flush_stale_flows(state);
            }
        }
        if let (Some(nodes), Ok(())) = (nodes, &result) {
            result = self.sync_routes(nodes, node_ip, &mut report);
        }
        report.ok = result.is_ok();
        report.duration = start.elapsed();
        (report, result)
    }

    fn sync_rules(
        &mut self,
        state: &ProxyState,
        verify: bool,
        report: &mut SyncReport,
    ) -> Result<(), SyncError> {
        let built = build_reusing(state, &self.node, self.last.as_ref());
        for s in &built.skipped {
            tracing::warn!(service = %s, "service port left out");
        }
        report.service_ports = built.service_ports;
        report.endpoints = built.endpoints;
        let unchanged = self.last.as_ref() == Some(&built.table);
        let present = !verify || self.nft.table_exists()?;
        if unchanged && present {
            return Ok(());
        }
        if unchanged {
            tracing::warn!("table kiln vanished; re-creating it");
        }
        // forget the old table first: after a failed apply the kernel state is unknown
        let update = match self.last.take() {
            Some(old) if present => update_script(&old, &built.table),
            _ => None,
        };
        let nft_start = Instant::now();
        let updated = match update {
            Some(script) => match self.nft.apply(&script) {
                Ok(()) => true,
                Err(e) => {
                    tracing::warn!(error = %e, "updating table kiln failed; replacing it whole");
                    false
                }
            },
            None => false,
        };
        if !updated {
            self.nft.apply(&built.table.script())?;
            report.full = true;
        }
        report.nft = nft_start.elapsed();
        self.last = Some(built.table);
        report.applied = true;
        if updated {
            tracing::debug!(
                service_ports = built.service_ports,
                endpoints = built.endpoints,
                "nftables table kiln updated"
            );
        } else {
            tracing::info!(
                service_ports = built.service_ports,
                endpoints = built.endpoints,
                rejecting = built.rejecting,
                "nftables table kiln replaced"
            );
        }
        Ok(())
    }

    /// Deletes the UDP flows the rules just applied no longer back (only after the rules changed, as
    /// upstream: a flow deleted earlier would be re-created through the old rules). Best effort, as
    /// upstream's: a failure is logged and not retried.
    fn flush_stale_flows(&mut self, state: &ProxyState) {
        let udp = udp_view(state);
        for flow in stale_flows(&self.last_udp, &udp) {
            match self.conntrack.delete(&flow) {
                Ok(()) => tracing::debug!(?flow, "deleted stale UDP conntrack flows"),
                Err(e) => tracing::warn!(?flow, error = %e, "deleting stale UDP conntrack flows"),
            }
        }
        self.last_udp = udp;
    }

    fn sync_routes(
        &mut self,
        nodes: &[NodeRouteInfo],
        node_ip: Option<Ipv4Addr>,
        report: &mut SyncReport,
    ) -> Result<(), SyncError> {
        let desired = desired_routes(nodes, &self.node_name, node_ip);
        for op in sync_routes(self.routes.as_ref(), &desired)? {
            tracing::info!(?op, "host-gw route changed");
        }
        report.routes = desired.len();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conntrack::{Flow, RecordingConntrack};
    use crate::model::{EndpointGroup, Protocol, ServiceInfo, ServicePort, TargetPort};
    use crate::netfilter::RecordingNetfilter;
    use crate::routes::RecordingRoutes;

    fn state(endpoints: &[&str]) -> ProxyState {
        let mut s = ProxyState {
            services: vec![ServiceInfo {
                namespace: "default".into(),
                name: "web".into(),
                cluster_ip: "10.96.0.10".parse().unwrap(),
                ports: vec![ServicePort {
                    name: String::new(),
                    protocol: Protocol::Tcp,
                    port: 80,
                    target_port: TargetPort::Number(8080),
                    node_port: None,
                }],
                affinity_timeout: None,
                internal_local: false,
            }],
            ..Default::default()
        };
        s.add_endpoints(
            ("default".into(), "web".into()),
            vec![EndpointGroup::ready(
                &endpoints
                    .iter()
                    .map(|e| e.parse().unwrap())
                    .collect::<Vec<_>>(),
                vec![],
            )],
        );
        s
    }

    fn proxier(nft: Arc<RecordingNetfilter>, routes: Arc<RecordingRoutes>) -> Proxier {
        let node = NodeConfig {
            cluster_cidr: "10.244.0.0/16".parse().unwrap(),
        };
        Proxier::new(
            node,
            "host1".into(),
            nft,
            Arc::new(RecordingConntrack::default()),
            routes,
        )
    }

    #[test]
    fn unchanged_state_skips_the_reload_and_a_change_applies() {
        let nft = Arc::new(RecordingNetfilter::default());
        let routes = Arc::new(RecordingRoutes::default());
        let mut p = proxier(nft.clone(), routes);
        let (r, res) = p.sync(Some(&state(&["10.244.1.2"])), None, None, false);
        res.unwrap();
        assert!(r.applied && r.ok && r.endpoints == 1);
        let (r, _) = p.sync(Some(&state(&["10.244.1.2"])), None, None, true);
        assert!(!r.applied, "same state, table present: no reload");
        assert_eq!(nft.applied().len(), 1);
        let (r, _) = p.sync(
            Some(&state(&["10.244.1.2", "10.244.2.2"])),
            None,
            None,
            false,
        );
        assert!(r.applied && r.endpoints == 2);
        assert_eq!(nft.applied().len(), 2);
        assert!(nft.applied()[1].contains("10.244.2.2 . 8080"));
    }

    #[test]
    fn first_sync_replaces_the_table_and_later_changes_update_it() {
        let nft = Arc::new(RecordingNetfilter::default());
        let mut p = proxier(nft.clone(), Arc::new(RecordingRoutes::default()));
        let (r, _) = p.sync(Some(&state(&["10.244.1.2"])), None, None, true);
        assert!(r.applied && r.full);
        let (r, res) = p.sync(
            Some(&state(&["10.244.1.2", "10.244.2.2"])),
            None,
            None,
            false,
        );
        res.unwrap();
        assert!(r.applied && !r.full);
        let update = &nft.applied()[1];
        assert!(!update.contains("delete table"), "{update}");
        assert!(update.starts_with("flush chain ip kiln svc-default/web/tcp/80\n"));
    }

    /// Fails every update (anything but a whole-table replace), like nft rejecting a batch.
    #[derive(Default)]
    struct RejectsUpdates(RecordingNetfilter);

    impl Netfilter for RejectsUpdates {
        fn apply(&self, script: &str) -> Result<(), NetfilterError> {
            if !script.starts_with(&crate::render::cleanup_script()) {
                *self.0.fail_with.lock().unwrap() = Some("no such chain".into());
            }
            let res = self.0.apply(script);
            *self.0.fail_with.lock().unwrap() = None;
            res
        }
        fn list_table(&self) -> Result<Option<String>, NetfilterError> {
            self.0.list_table()
        }
    }

    #[test]
    fn a_failed_update_falls_back_to_a_whole_replace() {
        let nft = Arc::new(RejectsUpdates::default());
        let mut p = Proxier::new(
            NodeConfig {
                cluster_cidr: "10.244.0.0/16".parse().unwrap(),
            },
            "host1".into(),
            nft.clone(),
            Arc::new(RecordingConntrack::default()),
            Arc::new(RecordingRoutes::default()),
        );
        p.sync(Some(&state(&["10.244.1.2"])), None, None, true)
            .1
            .unwrap();
        let (r, res) = p.sync(Some(&state(&["10.244.2.2"])), None, None, false);
        res.unwrap();
        assert!(r.applied && r.full);
        let applied = nft.0.applied();
        assert_eq!(applied.len(), 2, "the rejected update is not recorded");
        assert!(
            applied[1].contains("{ 0 : 10.244.2.2 . 8080 }") && !applied[1].contains("10.244.1.2")
        );
    }

    #[test]
    fn periodic_verify_recreates_a_deleted_table() {
        let nft = Arc::new(RecordingNetfilter::default());
        let mut p = proxier(nft.clone(), Arc::new(RecordingRoutes::default()));
        p.sync(Some(&state(&["10.244.1.2"])), None, None, false)
            .1
            .unwrap();
        nft.delete_table().unwrap();
        let (r, _) = p.sync(Some(&state(&["10.244.1.2"])), None, None, false);
        assert!(!r.applied, "without verify the deletion goes unnoticed");
        let (r, _) = p.sync(Some(&state(&["10.244.1.2"])), None, None, true);
        assert!(r.applied);
    }

    #[test]
    fn failed_apply_is_retried_next_sync() {
        let nft = Arc::new(RecordingNetfilter::default());
        let mut p = proxier(nft.clone(), Arc::new(RecordingRoutes::default()));
        *nft.fail_with.lock().unwrap() = Some("boom".into());
        let (r, res) = p.sync(Some(&state(&["10.244.1.2"])), None, None, false);
        assert!(!r.ok && res.is_err());
        *nft.fail_with.lock().unwrap() = None;
        let (r, res) = p.sync(Some(&state(&["10.244.1.2"])), None, None, false);
        res.unwrap();
        assert!(r.applied);
    }

    #[test]
    fn udp_endpoint_removal_deletes_its_conntrack_flows_after_the_rules_changed() {
        let nft = Arc::new(RecordingNetfilter::default());
        let ct = Arc::new(RecordingConntrack::default());
        let node = NodeConfig {
            cluster_cidr: "10.244.0.0/16".parse().unwrap(),
        };
        let mut p = Proxier::new(
            node,
            "host1".into(),
            nft.clone(),
            ct.clone(),
            Arc::new(RecordingRoutes::default()),
        );
        let udp = |eps: &[&str]| {
            let mut s = state(eps);
            s.services[0].ports[0].protocol = Protocol::Udp;
            s
        };
        let service_ip = "10.96.0.10".parse().unwrap();
        p.sync(Some(&udp(&["10.244.1.2", "10.244.2.2"])), None, None, false)
            .1
            .unwrap();
        assert_eq!(
            ct.take(),
            [Flow::ToServiceIp(service_ip)],
            "first sync: flows from before the proxy started may be stale"
        );
        p.sync(Some(&udp(&["10.244.1.2", "10.244.2.2"])), None, None, false)
            .1
            .unwrap();
        assert!(ct.take().is_empty(), "nothing changed");

        // the apply fails: the kernel still DNATs to the old endpoint, so nothing is deleted yet
        *nft.fail_with.lock().unwrap() = Some("boom".into());
        let (_, res) = p.sync(Some(&udp(&["10.244.1.2"])), None, None, false);
        assert!(res.is_err());
        assert!(ct.take().is_empty());
        *nft.fail_with.lock().unwrap() = None;
        p.sync(Some(&udp(&["10.244.1.2"])), None, None, false)
            .1
            .unwrap();
        assert_eq!(
            ct.take(),
            [Flow::ServiceIpToEndpoint {
                service_ip,
                endpoint: "10.244.2.2".parse().unwrap(),
            }]
        );
        // TCP services never touch conntrack
        let mut tcp = Proxier::new(
            NodeConfig {
                cluster_cidr: "10.244.0.0/16".parse().unwrap(),
            },
            "host1".into(),
            nft.clone(),
            ct.clone(),
            Arc::new(RecordingRoutes::default()),
        );
        tcp.sync(
            Some(&state(&["10.244.1.2", "10.244.2.2"])),
            None,
            None,
            false,
        )
        .1
        .unwrap();
        tcp.sync(Some(&state(&["10.244.1.2"])), None, None, false)
            .1
            .unwrap();
        assert!(ct.take().is_empty());
    }

    #[test]
    fn routes_follow_nodes() {
        let routes = Arc::new(RecordingRoutes::default());
        let mut p = proxier(Arc::new(RecordingNetfilter::default()), routes.clone());
        let nodes = vec![
            NodeRouteInfo {
                name: "host1".into(),
                pod_cidr: Some("10.244.1.0/24".parse().unwrap()),
                internal_ip: Some("10.250.0.11".parse().unwrap()),
            },
            NodeRouteInfo {
                name: "host2".into(),
                pod_cidr: Some("10.244.2.0/24".parse().unwrap()),
                internal_ip: Some("10.250.0.12".parse().unwrap()),
            },
        ];
        let (r, _) = p.sync(None, Some(&nodes), None, false);
        assert_eq!(r.routes, 1);
        assert_eq!(routes.table.lock().unwrap().len(), 1);
        p.sync(None, Some(&nodes[..1]), None, false).1.unwrap();
        assert!(
            routes.table.lock().unwrap().is_empty(),
            "route of the removed node is gone"
        );
    }
}
