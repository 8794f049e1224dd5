//! What every controller gets: the client, the flags, an event recorder, and reflector stores that
//! stay current in the background.

use std::fmt::Debug;
use std::sync::Arc;

use futures::StreamExt;
use kiln_scheduler::events::EventRecorder;
use kube::api::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::Resource;
use serde::de::DeserializeOwned;

use crate::config::Options;

#[derive(Clone)]
pub struct Context {
    pub client: kube::Client,
    pub options: Arc<Options>,
    pub recorder: Arc<EventRecorder>,
}

/// A reflector over every object of the kind, driven by its own task for as long as the returned
/// guard lives. Wait with `store.wait_until_ready()` before trusting its contents.
pub fn spawn_reflector<K>(client: &kube::Client) -> (Store<K>, ReflectorTask)
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let (store, writer) = reflector::store();
    let stream = reflector::reflector(
        writer,
        watcher(Api::<K>::all(client.clone()), watcher::Config::default()),
    )
    .default_backoff();
    let task = tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(item) = stream.next().await {
            if let Err(e) = item {
                tracing::debug!(kind = %K::kind(&()), error = %e, "watch failed; retrying");
            }
        }
    });
    (store, ReflectorTask(task))
}

/// Stops the reflector's task when dropped.
pub struct ReflectorTask(tokio::task::JoinHandle<()>);

impl Drop for ReflectorTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}
