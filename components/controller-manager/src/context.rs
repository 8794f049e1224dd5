//! What every controller gets: the client, the flags, an event recorder, and reflector stores that
//! stay current in the background.

use std::fmt::Debug;
use std::sync::Arc;

use futures::channel::mpsc::UnboundedReceiver;
use futures::StreamExt;
use kiln_common::events::EventRecorder;
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

/// Like [`spawn_reflector`], and also sends each object the watch adds, changes or deletes once the
/// store holds that change. A controller triggered from these never reads a cache older than its
/// trigger; a second watch used only for triggers can run ahead of the cache, and the reconcile
/// then acts on the state from before the change (e.g. still counts a just-deleted pod).
pub fn spawn_reflector_with_changes<K>(
    client: &kube::Client,
) -> (Store<K>, UnboundedReceiver<K>, ReflectorTask)
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let (store, writer) = reflector::store();
    let (changes, receiver) = futures::channel::mpsc::unbounded();
    let stream = reflector::reflector(
        writer,
        watcher(Api::<K>::all(client.clone()), watcher::Config::default()),
    )
    .default_backoff();
    let task = tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        // A (re)list only replaces the store's contents at InitDone; hold its objects until then.
        let mut listed = Vec::new();
        // Sends fail only once the receiver is gone; the store stays current regardless.
        while let Some(item) = stream.next().await {
            match item {
                Ok(watcher::Event::Apply(obj) | watcher::Event::Delete(obj)) => {
                    let _ = changes.unbounded_send(obj);
                }
                Ok(watcher::Event::Init) => listed.clear(),
                Ok(watcher::Event::InitApply(obj)) => listed.push(obj),
                Ok(watcher::Event::InitDone) => {
                    for obj in listed.drain(..) {
                        let _ = changes.unbounded_send(obj);
                    }
                }
                Err(e) => {
                    tracing::debug!(kind = %K::kind(&()), error = %e, "watch failed; retrying");
                }
            }
        }
    });
    (store, receiver, ReflectorTask(task))
}

/// Stops the reflector's task when dropped.
pub struct ReflectorTask(tokio::task::JoinHandle<()>);

impl Drop for ReflectorTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}
