//! The written cases, one per conformance entry, by area. A case is named by its entry's exact
//! codename (a unit test checks each is in the list, once) and written from the entry's description
//! and the upstream e2e source it names: every MUST of the description is asserted.

use futures::future::BoxFuture;

use crate::ctx::Ctx;
use crate::error::CaseResult;

mod admission_webhooks;
mod api_machinery;
mod auth;
mod crds;
mod cronjobs;
mod daemonsets;
mod discovery;
mod disruption;
mod field_validation;
mod flowcontrol;
mod instrumentation;
mod jobs;
mod node;
mod objects;
mod podtemplates;
mod replication;
mod runtime;
mod statefulsets;
mod storage;
mod storage_api;
mod webhook_server;

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

/// Every written case.
pub fn all() -> Vec<&'static Case> {
    [
        admission_webhooks::CASES,
        api_machinery::CASES,
        auth::CASES,
        crds::CASES,
        cronjobs::CASES,
        daemonsets::CASES,
        discovery::CASES,
        disruption::CASES,
        field_validation::CASES,
        flowcontrol::CASES,
        instrumentation::CASES,
        jobs::CASES,
        node::CASES,
        objects::CASES,
        podtemplates::CASES,
        replication::CASES,
        runtime::CASES,
        statefulsets::CASES,
        storage::CASES,
        storage_api::CASES,
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
