//! Kubernetes Events as the kubelet posts them (core/v1, `source.component: kubelet`): Pulling, Pulled,
//! Created, Started, Killing, BackOff, Unhealthy, Failed, hook failures. Recording is a side effect behind
//! [`EventRecorder`], so the pod workers call it without knowing the API: [`ApiRecorder`] only queues
//! (bounded, never blocks; a full queue drops the event with a warning) and its [`EventSink`] posts from a
//! background task; tests use [`FakeRecorder`].
//!
//! The sink correlates like client-go's recorder: one Event object per (object, fieldPath, type, reason,
//! message) whose `count` and `lastTimestamp` are patched on repeats ([`Correlator`], pure), and a
//! per-object token bucket (burst 25, one more every 5 minutes) so a flapping pod cannot flood the API.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::Client;
use tokio::sync::{mpsc, watch};

/// `source.component` and `reportingComponent` of every event this kubelet posts.
pub const COMPONENT: &str = "kubelet";
/// Events waiting for the sink; beyond this they are dropped (the API is down or slow).
pub const QUEUE: usize = 1000;
/// Distinct events remembered for aggregation (client-go's cache size).
const CACHE: usize = 4096;
/// The per-object spam filter: burst, and one more token per this interval (client-go's defaults).
const BURST: u32 = 25;
const REFILL: Duration = Duration::from_secs(300);
const POST_ATTEMPTS: u32 = 3;

#[derive(Debug, thiserror::Error)]
pub enum EventError {
    #[error("event {name}: {source}")]
    Api {
        name: String,
        #[source]
        source: kube::Error,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventType {
    Normal,
    Warning,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// The object an event is about: a pod, or one of its containers (`fieldPath`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct ObjectRef {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub resource_version: String,
    pub field_path: Option<String>,
}

impl ObjectRef {
    pub fn pod(p: &Pod) -> Self {
        ObjectRef {
            namespace: p
                .metadata
                .namespace
                .clone()
                .unwrap_or_else(|| "default".into()),
            name: p.metadata.name.clone().unwrap_or_default(),
            uid: p.metadata.uid.clone().unwrap_or_default(),
            resource_version: p.metadata.resource_version.clone().unwrap_or_default(),
            field_path: None,
        }
    }

    /// The same pod, narrowed to a container: `spec.containers{NAME}` (or `spec.initContainers{NAME}`).
    pub fn container(&self, name: &str, init: bool) -> Self {
        let list = if init { "initContainers" } else { "containers" };
        ObjectRef {
            field_path: Some(format!("spec.{list}{{{name}}}")),
            ..self.clone()
        }
    }
}

/// One occurrence, as a worker reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recorded {
    pub object: ObjectRef,
    pub type_: EventType,
    pub reason: String,
    pub message: String,
}

pub trait EventRecorder: Send + Sync {
    /// Must not block or fail: events are best effort, as upstream's.
    fn record(&self, object: &ObjectRef, type_: EventType, reason: &str, message: String);
}

/// For runtimes without an API client (static pods, `kiln-cri-smoke`).
pub struct NoopRecorder;

impl EventRecorder for NoopRecorder {
    fn record(&self, _: &ObjectRef, _: EventType, _: &str, _: String) {}
}

/// Keeps every event, in order, for unit tests.
#[derive(Default)]
pub struct FakeRecorder {
    events: std::sync::Mutex<Vec<Recorded>>,
}

impl FakeRecorder {
    pub fn events(&self) -> Vec<Recorded> {
        self.events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub fn take(&self) -> Vec<Recorded> {
        std::mem::take(&mut *self.events.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// `Reason` or `Reason: message`-free summaries, for order checks.
    pub fn reasons(&self) -> Vec<String> {
        self.events().into_iter().map(|e| e.reason).collect()
    }
}

impl EventRecorder for FakeRecorder {
    fn record(&self, object: &ObjectRef, type_: EventType, reason: &str, message: String) {
        self.events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Recorded {
                object: object.clone(),
                type_,
                reason: reason.into(),
                message,
            });
    }
}

/// The recorder the kubelet uses: a bounded queue in front of an [`EventSink`].
pub struct ApiRecorder {
    tx: mpsc::Sender<Recorded>,
    /// Events dropped on a full queue so far (logged at powers of two, not once each).
    dropped: AtomicU64,
}

/// A recorder and the sink that posts what it queues (run the sink once the API client exists; events
/// recorded before wait in the queue).
pub fn api_recorder(node_name: &str, capacity: usize) -> (ApiRecorder, EventSink) {
    let (tx, rx) = mpsc::channel(capacity.max(1));
    (
        ApiRecorder {
            tx,
            dropped: AtomicU64::new(0),
        },
        EventSink {
            rx,
            correlator: Correlator::new(node_name),
        },
    )
}

impl EventRecorder for ApiRecorder {
    fn record(&self, object: &ObjectRef, type_: EventType, reason: &str, message: String) {
        let ev = Recorded {
            object: object.clone(),
            type_,
            reason: reason.into(),
            message,
        };
        match self.tx.try_send(ev) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(ev)) => {
                let n = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
                if n.is_power_of_two() {
                    tracing::warn!(object = %format!("{}/{}", ev.object.namespace, ev.object.name), reason = %ev.reason, dropped = n, "event queue full (API server slow or down); dropping events");
                }
            }
            // The sink ended (kubelet shutting down): nothing to post to.
            Err(mpsc::error::TrySendError::Closed(_)) => {}
        }
    }
}

/// What to do with the API for one occurrence.
#[derive(Debug, Clone, PartialEq)]
pub enum Post {
    Create(Box<Event>),
    /// A repeat: raise the count of the existing object (created again from `event` if it is gone).
    Update(Box<Event>),
    /// Over the object's spam budget.
    Skip,
}

struct Seen {
    name: String,
    count: i32,
    first: Timestamp,
}

struct Bucket {
    tokens: u32,
    refilled: Instant,
}

/// Aggregation and spam filtering, pure apart from the clock passed in.
pub struct Correlator {
    node_name: String,
    seen: HashMap<Key, Seen>,
    order: VecDeque<Key>,
    buckets: HashMap<String, Bucket>,
}

type Key = (ObjectRef, EventType, String, String);

impl Correlator {
    pub fn new(node_name: &str) -> Self {
        Correlator {
            node_name: node_name.into(),
            seen: HashMap::new(),
            order: VecDeque::new(),
            buckets: HashMap::new(),
        }
    }

    fn allow(&mut self, uid: &str, now: Instant) -> bool {
        if self.buckets.len() >= CACHE && !self.buckets.contains_key(uid) {
            // Forget the fullest buckets' objects first: they are the quiet ones.
            self.buckets.retain(|_, b| b.tokens < BURST);
        }
        let b = self.buckets.entry(uid.to_string()).or_insert(Bucket {
            tokens: BURST,
            refilled: now,
        });
        let gained =
            (now.saturating_duration_since(b.refilled).as_secs() / REFILL.as_secs()) as u32;
        if gained > 0 {
            b.tokens = (b.tokens + gained).min(BURST);
            b.refilled = now;
        }
        if b.tokens == 0 {
            return false;
        }
        b.tokens -= 1;
        true
    }

    /// The API call for this occurrence at (`now`, `wall`); `name_nanos` makes a new object's name
    /// unique (`<object>.<hex nanos>`, as client-go names them).
    pub fn observe(&mut self, ev: &Recorded, now: Instant, wall: SystemTime) -> Post {
        if !self.allow(&ev.object.uid, now) {
            return Post::Skip;
        }
        let ts = Timestamp::try_from(wall).unwrap_or(Timestamp::UNIX_EPOCH);
        let key: Key = (
            ev.object.clone(),
            ev.type_,
            ev.reason.clone(),
            ev.message.clone(),
        );
        if let Some(s) = self.seen.get_mut(&key) {
            s.count += 1;
            let (name, count, first) = (s.name.clone(), s.count, s.first);
            return Post::Update(Box::new(self.event(ev, &name, count, first, ts)));
        }
        let nanos = wall
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        let name = format!("{}.{nanos:x}", ev.object.name);
        if self.order.len() >= CACHE {
            if let Some(old) = self.order.pop_front() {
                self.seen.remove(&old);
            }
        }
        self.order.push_back(key.clone());
        self.seen.insert(
            key,
            Seen {
                name: name.clone(),
                count: 1,
                first: ts,
            },
        );
        Post::Create(Box::new(self.event(ev, &name, 1, ts, ts)))
    }

    fn event(
        &self,
        ev: &Recorded,
        name: &str,
        count: i32,
        first: Timestamp,
        last: Timestamp,
    ) -> Event {
        let o = &ev.object;
        let some = |s: &str| (!s.is_empty()).then(|| s.to_string());
        Event {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some(o.namespace.clone()),
                ..Default::default()
            },
            involved_object: ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                namespace: Some(o.namespace.clone()),
                name: Some(o.name.clone()),
                uid: some(&o.uid),
                resource_version: some(&o.resource_version),
                field_path: o.field_path.clone(),
            },
            reason: Some(ev.reason.clone()),
            message: Some(ev.message.clone()),
            type_: Some(ev.type_.as_str().into()),
            source: Some(EventSource {
                component: Some(COMPONENT.into()),
                host: Some(self.node_name.clone()),
            }),
            reporting_component: Some(COMPONENT.into()),
            reporting_instance: Some(self.node_name.clone()),
            count: Some(count),
            first_timestamp: Some(Time(first)),
            last_timestamp: Some(Time(last)),
            ..Default::default()
        }
    }
}

/// Posts what an [`ApiRecorder`] queued, one event at a time, until shutdown.
pub struct EventSink {
    rx: mpsc::Receiver<Recorded>,
    correlator: Correlator,
}

impl EventSink {
    pub async fn run(mut self, client: Client, mut shutdown: watch::Receiver<bool>) {
        loop {
            let ev = tokio::select! {
                ev = self.rx.recv() => match ev { Some(ev) => ev, None => return },
                _ = shutdown.wait_for(|s| *s) => return,
            };
            let post = self
                .correlator
                .observe(&ev, Instant::now(), SystemTime::now());
            let mut attempt = 0;
            loop {
                attempt += 1;
                match send(&client, &post).await {
                    Ok(()) => break,
                    Err(e) if attempt >= POST_ATTEMPTS => {
                        tracing::warn!(error = %e, reason = %ev.reason, "posting event failed; dropping it");
                        break;
                    }
                    Err(e) => {
                        tracing::debug!(error = %e, "posting event; retrying");
                        tokio::time::sleep(Duration::from_millis(500 * u64::from(attempt))).await;
                    }
                }
            }
        }
    }
}

async fn send(client: &Client, post: &Post) -> Result<(), EventError> {
    let (ev, update) = match post {
        Post::Skip => return Ok(()),
        Post::Create(ev) => (ev, false),
        Post::Update(ev) => (ev, true),
    };
    let ns = ev.metadata.namespace.as_deref().unwrap_or("default");
    let name = ev.metadata.name.clone().unwrap_or_default();
    let api: Api<Event> = Api::namespaced(client.clone(), ns);
    let err = |source| EventError::Api {
        name: name.clone(),
        source,
    };
    if update {
        let patch = serde_json::json!({
            "count": ev.count,
            "lastTimestamp": ev.last_timestamp,
            "message": ev.message,
        });
        match api
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => return Ok(()),
            // Expired or deleted: post it again, with its count.
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(err(e)),
        }
    }
    match api.create(&PostParams::default(), ev).await {
        Ok(_) => Ok(()),
        // A retry of a create that reached the server.
        Err(kube::Error::Api(s)) if s.code == 409 && !update => Ok(()),
        Err(e) => Err(err(e)),
    }
}

#[cfg(test)]
#[path = "events_tests.rs"]
mod tests;
