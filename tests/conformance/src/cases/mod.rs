//! The written cases, one per conformance entry, by area. A case is named by its entry's exact
//! codename (a unit test checks each is in the list, once) and written from the entry's description
//! and the upstream e2e source it names: every MUST of the description is asserted.

use futures::future::BoxFuture;

use crate::ctx::Ctx;
use crate::error::CaseResult;

mod admission_policy;
mod admission_webhooks;
mod aggregated_discovery;
mod aggregator;
mod api_chunking_watch;
mod api_machinery;
mod api_ops;
mod architecture;
mod auth;
mod configmap_volumes;
mod crd_openapi;
mod crds;
mod cronjobs;
mod daemonsets;
mod deployments;
mod discovery;
mod disruption;
mod dns;
mod downward_volumes;
mod empty_dir;
mod endpoint_slices;
mod ephemeral_containers;
mod etc_hosts;
mod field_validation;
mod flowcontrol;
mod garbage_collector;
mod instrumentation;
mod jobs;
mod kubectl_cli;
mod limit_range;
mod networking_api;
mod node;
mod node_lifecycle;
mod node_pods;
mod node_taints;
mod objects;
mod pod_networking;
mod pods_websockets;
mod podtemplates;
mod preemption;
mod projected;
mod proxy;
mod replicasets;
mod replication;
mod resource_quota;
mod runtime;
mod runtime_class;
mod sample_apiserver;
mod scheduling;
mod secret_volumes;
mod service_latency;
mod services_network;
mod statefulsets;
mod storage;
mod storage_api;
mod subpath;
mod webhook_server;
mod webhooks_more;

/// A case's body: runs in its own namespace (`ctx.ns`), Ok when every MUST held.
pub type Run = for<'a> fn(&'a Ctx) -> BoxFuture<'a, CaseResult>;

pub struct Case {
    /// The entry's codename, exactly as in `list.rs`.
    pub codename: &'static str,
    /// The base of the namespace's name (upstream's framework name, e.g. `pods`).
    pub namespace: &'static str,
    pub run: Run,
}

/// `case!("codename", "namespace-base", path::to::async_fn)`
macro_rules! case {
    ($codename:expr, $ns:expr, $f:path) => {
        $crate::cases::Case {
            codename: $codename,
            namespace: $ns,
            run: |ctx| Box::pin($f(ctx)),
        }
    };
}
pub(crate) use case;

/// Whether an entry fills half the cluster's pod capacity (see `garbage_collector::POD_HEAVY`).
pub fn pod_heavy(codename: &str) -> bool {
    garbage_collector::POD_HEAVY.contains(&codename)
}

/// The pod-heavy entries, for the runner's test.
#[cfg(test)]
pub fn garbage_collector_pod_heavy() -> &'static [&'static str] {
    garbage_collector::POD_HEAVY
}

/// Every written case.
pub fn all() -> Vec<&'static Case> {
    [
        admission_policy::CASES,
        admission_webhooks::CASES,
        aggregated_discovery::CASES,
        aggregator::CASES,
        api_chunking_watch::CASES,
        api_machinery::CASES,
        architecture::CASES,
        auth::CASES,
        configmap_volumes::CASES,
        crd_openapi::CASES,
        crds::CASES,
        cronjobs::CASES,
        daemonsets::CASES,
        deployments::CASES,
        discovery::CASES,
        disruption::CASES,
        dns::CASES,
        downward_volumes::CASES,
        empty_dir::CASES,
        ephemeral_containers::CASES,
        endpoint_slices::CASES,
        etc_hosts::CASES,
        field_validation::CASES,
        flowcontrol::CASES,
        garbage_collector::CASES,
        instrumentation::CASES,
        jobs::CASES,
        kubectl_cli::CASES,
        limit_range::CASES,
        networking_api::CASES,
        node::CASES,
        node_lifecycle::CASES,
        node_taints::CASES,
        node_pods::CASES,
        objects::CASES,
        pod_networking::CASES,
        podtemplates::CASES,
        pods_websockets::CASES,
        preemption::CASES,
        projected::CASES,
        proxy::CASES,
        replicasets::CASES,
        replication::CASES,
        resource_quota::CASES,
        runtime::CASES,
        runtime_class::CASES,
        scheduling::CASES,
        secret_volumes::CASES,
        service_latency::CASES,
        services_network::CASES,
        statefulsets::CASES,
        storage::CASES,
        storage_api::CASES,
        subpath::CASES,
        webhooks_more::CASES,
    ]
    .into_iter()
    .flatten()
    .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use crate::list::LIST;

    #[test]
    fn every_case_is_an_entry_of_the_list_once() {
        let listed: BTreeSet<&str> = LIST.iter().map(|l| l.codename).collect();
        let mut seen = BTreeSet::new();
        for c in super::all() {
            assert!(
                listed.contains(c.codename),
                "not in the conformance list: {}",
                c.codename
            );
            assert!(seen.insert(c.codename), "written twice: {}", c.codename);
        }
    }

    #[test]
    fn namespace_bases_are_dns_labels() {
        for c in super::all() {
            assert!(
                !c.namespace.is_empty()
                    && c.namespace.len() <= 50
                    && c.namespace
                        .chars()
                        .all(|ch| ch.is_ascii_lowercase() || ch.is_ascii_digit() || ch == '-'),
                "{}: namespace base {:?}",
                c.codename,
                c.namespace
            );
        }
    }
}
