//! The cluster's Services, as the kubelet reads them for containers' Service variables
//! ([`crate::service_env`]). Upstream's kubelet keeps a Service informer and lists from its cache at
//! each container start; this does the same with a kube-rs reflector: one watch of every Service (the
//! kubelet already watches its pods this way, [`crate::workloads`]), its store read synchronously. The
//! variables are then the Services known when the container starts — a Service made later shows up in
//! containers started later, as upstream.

use std::sync::Arc;

use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::Service;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher::{self, watcher};
use kube::runtime::WatchStreamExt;
use kube::{Api, Client, ResourceExt};
use tokio::sync::watch;

use crate::service_env::Listed;

/// Where the Services come from; a trait so the pod workers are tested with a fixed list.
pub trait ServiceLister: Send + Sync {
    /// Every Service, once the first full list has arrived; None before.
    fn services(&self) -> Option<Vec<Arc<Service>>>;
}

/// What [`ServiceLister::services`] says, in the form [`crate::service_env::for_pod`] takes.
pub fn listed<'a>(
    lister: Option<&dyn ServiceLister>,
    holder: &'a mut Vec<Arc<Service>>,
) -> Listed<'a> {
    match lister.map(|l| l.services()) {
        None => Listed::NoApi,
        Some(None) => Listed::NotSynced,
        Some(Some(all)) => {
            *holder = all;
            Listed::Synced(holder)
        }
    }
}

/// A watch-fed cache of every Service.
#[derive(Clone)]
pub struct ServiceCache {
    store: Store<Service>,
}

impl ServiceCache {
    /// Starts watching Services with `client` (until `shutdown`); the cache is empty and not synced
    /// until the first list completes, and keeps its contents while the watch reconnects.
    pub fn start(client: Client, mut shutdown: watch::Receiver<bool>) -> Self {
        let (store, writer) = reflector::store();
        let api: Api<Service> = Api::all(client);
        let stream = watcher(api, watcher::Config::default())
            .default_backoff()
            // Only the spec and names are read; managed fields are most of an object's bytes.
            .modify(|s| s.managed_fields_mut().clear())
            .reflect(writer);
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            let mut last_error: Option<String> = None;
            loop {
                let ev = tokio::select! {
                    ev = stream.next() => ev,
                    _ = shutdown.wait_for(|s| *s) => return,
                };
                match ev {
                    Some(Ok(_)) => last_error = None,
                    Some(Err(e)) => {
                        let msg = e.to_string();
                        if last_error.as_ref() != Some(&msg) {
                            tracing::warn!(error = %msg, "watching Services (for containers' service variables); retrying");
                            last_error = Some(msg);
                        }
                    }
                    None => return,
                }
            }
        });
        ServiceCache { store }
    }

    /// A cache over an existing store (tests feed its writer).
    pub fn from_store(store: Store<Service>) -> Self {
        ServiceCache { store }
    }

    fn synced(&self) -> bool {
        // Ready from the first InitDone on (kube-rs never "unreadies" a store).
        matches!(self.store.wait_until_ready().now_or_never(), Some(Ok(())))
    }
}

impl ServiceLister for ServiceCache {
    fn services(&self) -> Option<Vec<Arc<Service>>> {
        self.synced().then(|| self.store.state())
    }
}

/// A fixed list, or none yet (`None`), for tests.
#[cfg(test)]
#[derive(Default)]
pub struct FakeServices(pub std::sync::Mutex<Option<Vec<Arc<Service>>>>);

#[cfg(test)]
impl FakeServices {
    pub fn synced(services: Vec<Service>) -> Self {
        FakeServices(std::sync::Mutex::new(Some(
            services.into_iter().map(Arc::new).collect(),
        )))
    }
}

#[cfg(test)]
impl ServiceLister for FakeServices {
    fn services(&self) -> Option<Vec<Arc<Service>>> {
        self.0.lock().unwrap().clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn svc(name: &str) -> Service {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"clusterIP": "10.96.0.1", "ports": [{"port": 443}]}
        }))
        .unwrap()
    }

    #[test]
    fn the_cache_is_not_synced_until_the_first_list_completes() {
        let (store, mut writer) = reflector::store::<Service>();
        let cache = ServiceCache::from_store(store);
        assert!(cache.services().is_none());
        writer.apply_watcher_event(&watcher::Event::Init);
        writer.apply_watcher_event(&watcher::Event::InitApply(svc("kubernetes")));
        assert!(cache.services().is_none(), "mid-list: not synced");
        writer.apply_watcher_event(&watcher::Event::InitDone);
        let names: Vec<String> = cache
            .services()
            .unwrap()
            .iter()
            .map(|s| s.name_any())
            .collect();
        assert_eq!(names, vec!["kubernetes"]);
        // Later changes show; a relist keeps it synced.
        writer.apply_watcher_event(&watcher::Event::Apply(svc("web")));
        assert_eq!(cache.services().unwrap().len(), 2);
        writer.apply_watcher_event(&watcher::Event::Init);
        assert_eq!(
            cache.services().unwrap().len(),
            2,
            "old contents during a relist"
        );
    }

    #[test]
    fn listed_maps_the_lister_for_the_env_builder() {
        let mut holder = Vec::new();
        assert!(matches!(listed(None, &mut holder), Listed::NoApi));
        let none = FakeServices::default();
        assert!(matches!(
            listed(Some(&none), &mut holder),
            Listed::NotSynced
        ));
        let some = FakeServices::synced(vec![svc("kubernetes")]);
        assert!(matches!(listed(Some(&some), &mut holder), Listed::Synced(s) if s.len() == 1));
    }
}
