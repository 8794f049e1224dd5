//! Topology hints for a Service's `spec.trafficDistribution`, as upstream's EndpointSlice controller
//! writes them (staging/src/k8s.io/endpointslice/trafficdist, 1.33/1.34): `PreferClose` /
//! `PreferSameZone` give every ready endpoint `forZones: [its zone]`; `PreferSameNode` also gives it
//! `forNodes: [its node]`; anything else (or nothing) removes hints. Not-ready endpoints get none, so a
//! proxy never narrows traffic to an endpoint that cannot take it.
//!
//! kube-proxy (and kiln-proxy) then keeps a node's traffic on the endpoints hinted for it, and falls
//! back to all ready endpoints when none is (see kiln-proxy's `topology` module).

use k8s_openapi::api::discovery::v1::{Endpoint, EndpointHints, ForNode, ForZone};

pub const PREFER_CLOSE: &str = "PreferClose";
pub const PREFER_SAME_ZONE: &str = "PreferSameZone";
pub const PREFER_SAME_NODE: &str = "PreferSameNode";

fn ready(e: &Endpoint) -> bool {
    e.conditions.as_ref().and_then(|c| c.ready) == Some(true)
}

/// Sets (or clears) the hints of `endpoints` for the Service's trafficDistribution. The endpoints
/// are freshly built from pods (no hints yet), so clearing only matters for the default heuristic.
pub fn reconcile_hints(traffic_distribution: Option<&str>, endpoints: &mut [Endpoint]) {
    let node_hints = match traffic_distribution {
        Some(PREFER_CLOSE | PREFER_SAME_ZONE) => false,
        Some(PREFER_SAME_NODE) => true,
        _ => {
            for e in endpoints.iter_mut() {
                e.hints = None;
            }
            return;
        }
    };
    for e in endpoints.iter_mut().filter(|e| ready(e)) {
        let for_zones = e.zone.clone().map(|name| vec![ForZone { name }]);
        let for_nodes = e
            .node_name
            .clone()
            .filter(|_| node_hints)
            .map(|name| vec![ForNode { name }]);
        e.hints = (for_zones.is_some() || for_nodes.is_some()).then_some(EndpointHints {
            for_nodes,
            for_zones,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::discovery::v1::EndpointConditions;

    fn ep(node: Option<&str>, zone: Option<&str>, ready: bool) -> Endpoint {
        Endpoint {
            addresses: vec!["10.244.1.2".into()],
            conditions: Some(EndpointConditions {
                ready: Some(ready),
                serving: Some(ready),
                terminating: Some(false),
            }),
            node_name: node.map(String::from),
            zone: zone.map(String::from),
            ..Default::default()
        }
    }

    fn names(e: &Endpoint) -> (Vec<String>, Vec<String>) {
        let h = e.hints.clone().unwrap_or_default();
        (
            h.for_nodes
                .unwrap_or_default()
                .into_iter()
                .map(|n| n.name)
                .collect(),
            h.for_zones
                .unwrap_or_default()
                .into_iter()
                .map(|z| z.name)
                .collect(),
        )
    }

    #[test]
    fn prefer_same_node_hints_node_and_zone_of_ready_endpoints() {
        let mut eps = [
            ep(Some("n1"), None, true),
            ep(Some("n2"), Some("z1"), true),
            ep(Some("n3"), Some("z1"), false),
            ep(None, None, true),
        ];
        reconcile_hints(Some(PREFER_SAME_NODE), &mut eps);
        assert_eq!(names(&eps[0]), (vec!["n1".into()], vec![]));
        assert_eq!(names(&eps[1]), (vec!["n2".into()], vec!["z1".into()]));
        assert_eq!(eps[2].hints, None, "not ready: no hints");
        assert_eq!(eps[3].hints, None, "neither node nor zone: no hints");
        let json = serde_json::to_value(&eps[0]).unwrap();
        assert_eq!(
            json["hints"],
            serde_json::json!({"forNodes": [{"name": "n1"}]})
        );
    }

    #[test]
    fn prefer_close_and_same_zone_hint_zones_only() {
        for td in [PREFER_CLOSE, PREFER_SAME_ZONE] {
            let mut eps = [ep(Some("n1"), Some("z1"), true), ep(Some("n2"), None, true)];
            reconcile_hints(Some(td), &mut eps);
            assert_eq!(names(&eps[0]), (vec![], vec!["z1".into()]), "{td}");
            assert_eq!(eps[1].hints, None, "{td}: no zone, no hint");
        }
    }

    #[test]
    fn no_or_unknown_distribution_removes_hints() {
        for td in [None, Some("Unknown")] {
            let mut eps = [ep(Some("n1"), Some("z1"), true)];
            reconcile_hints(Some(PREFER_SAME_NODE), &mut eps);
            assert!(eps[0].hints.is_some());
            reconcile_hints(td, &mut eps);
            assert_eq!(eps[0].hints, None, "{td:?}");
        }
    }
}
