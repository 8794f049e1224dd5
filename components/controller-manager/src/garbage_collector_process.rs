//! What a collector worker does with one UID, as upstream's attemptToDeleteItem,
//! processDeletingDependentsItem and attemptToOrphan: decided from the graph and the owners'
//! states as the API gives them now, done through [`GcApi`] (the API server, or a recording double
//! in the tests).

use std::collections::HashSet;
use std::future::Future;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

use super::graph::{Graph, Node};
use super::queue::WorkQueue;
use super::{GcError, FOREGROUND, ORPHAN};

/// Dependents orphaned side by side for one owner (upstream runs one goroutine per dependent).
const ORPHAN_CONCURRENCY: usize = 20;
/// UIDs confirmed gone are remembered (UIDs never come back), up to this many.
const ABSENT_CACHE: usize = 50_000;

/// What an owner reference points at, as the API says now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OwnerState {
    /// No object of that name and UID.
    Gone,
    /// Being deleted in the foreground: waiting for its dependents to go.
    Waiting,
    /// A valid owner.
    Solid,
}

/// A deletion's propagationPolicy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Propagation {
    Background,
    Foreground,
    Orphan,
}

/// The side effects of the collector.
pub trait GcApi: Send + Sync + 'static {
    /// The state of `owner`, referenced by `dependent`; None when its kind is not one the
    /// collector knows (it is then presumed valid).
    fn owner_state(
        &self,
        dependent: &Node,
        owner: &OwnerReference,
    ) -> impl Future<Output = Result<Option<OwnerState>, GcError>> + Send;
    /// Deletes the object (if it is still the one with this UID).
    fn delete(
        &self,
        node: &Node,
        policy: Propagation,
    ) -> impl Future<Output = Result<(), GcError>> + Send;
    /// Drops the object's references to these owner UIDs.
    fn remove_owner_references(
        &self,
        node: &Node,
        owners: &[String],
    ) -> impl Future<Output = Result<(), GcError>> + Send;
    /// Makes every blocking reference of the object non-blocking.
    fn unblock_owner_references(
        &self,
        node: &Node,
    ) -> impl Future<Output = Result<(), GcError>> + Send;
    fn remove_finalizer(
        &self,
        node: &Node,
        finalizer: &'static str,
    ) -> impl Future<Output = Result<(), GcError>> + Send;
}

/// What to do with a dependent, given its owners' states (None: cannot tell).
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    Keep,
    /// Every owner is gone or waiting: delete it, in the foreground when an owner waits for it and
    /// it has dependents of its own (upstream's attemptToDeleteItem).
    Delete {
        foreground: bool,
    },
    /// Some owners are valid: drop the references (by UID) to the gone and waiting ones.
    RemoveOwners(Vec<String>),
}

pub fn verdict(
    owners: &[OwnerReference],
    state: impl Fn(&OwnerReference) -> Option<OwnerState>,
    has_dependents: bool,
) -> Verdict {
    if owners.is_empty() {
        return Verdict::Keep;
    }
    let states: Vec<Option<OwnerState>> = owners.iter().map(&state).collect();
    let not_solid: Vec<String> = owners
        .iter()
        .zip(&states)
        .filter(|(_, s)| matches!(s, Some(OwnerState::Gone | OwnerState::Waiting)))
        .map(|(o, _)| o.uid.clone())
        .collect();
    if not_solid.is_empty() {
        Verdict::Keep
    } else if not_solid.len() == owners.len() {
        let waited_for = states.contains(&Some(OwnerState::Waiting));
        Verdict::Delete {
            foreground: waited_for && has_dependents,
        }
    } else {
        Verdict::RemoveOwners(not_solid)
    }
}

/// The step a UID calls for, read from the graph.
#[derive(Debug, PartialEq)]
pub enum Step {
    /// An owner deleted in the foreground with no blocking dependent left: drop its finalizer.
    Release(Node),
    /// An owner deleted in the foreground: look at its blocking dependents (except those waiting
    /// for their own dependents, which a cycle would otherwise keep busy).
    Wait(Vec<String>),
    /// An owner deleted with Orphan: strip its references from its dependents, then its finalizer.
    Orphan(Node, Vec<Node>),
    /// A dependent whose owners may be gone or waiting: classify them through the API and act.
    /// `cycle`: one of its own dependents waits for its dependents too.
    Dependent {
        node: Node,
        has_dependents: bool,
        cycle: bool,
    },
}

pub fn step(graph: &Graph, uid: &str) -> Option<Step> {
    let node = graph.get(uid)?;
    if node.deleting_dependents() {
        let blocking = graph.blocking_dependents(uid);
        if blocking.is_empty() {
            return Some(Step::Release(node.clone()));
        }
        let waiting_on = blocking
            .into_iter()
            .filter(|d| !d.deleting_dependents())
            .map(|d| d.uid.clone())
            .collect();
        return Some(Step::Wait(waiting_on));
    }
    if node.orphaning() {
        let dependents = graph.dependents(uid).into_iter().cloned().collect();
        return Some(Step::Orphan(node.clone(), dependents));
    }
    // Being deleted is a one-way trip: its dependents are looked at once it is gone.
    if node.deleting || node.owners.is_empty() {
        return None;
    }
    let dependents = graph.dependents(uid);
    Some(Step::Dependent {
        node: node.clone(),
        has_dependents: !dependents.is_empty(),
        cycle: dependents.iter().any(|d| d.deleting_dependents()),
    })
}

/// The workers' shared state: the graph the watches keep, the queue, and the API.
pub struct Collector<A> {
    pub graph: Arc<Mutex<Graph>>,
    pub queue: Arc<WorkQueue>,
    pub api: A,
    /// (dependent's namespace, owner UID) confirmed gone: a hundred pods of one deleted
    /// ReplicaSet cost one GET of it, not a hundred.
    absent: Mutex<HashSet<(Option<String>, String)>>,
}

impl<A: GcApi> Collector<A> {
    pub fn new(graph: Arc<Mutex<Graph>>, queue: Arc<WorkQueue>, api: A) -> Self {
        Collector {
            graph,
            queue,
            api,
            absent: Mutex::new(HashSet::new()),
        }
    }

    /// Handles one UID the queue handed out.
    pub async fn process(&self, uid: &str) -> Result<(), GcError> {
        let Some(step) = step(&self.graph.lock().expect("gc graph"), uid) else {
            return Ok(());
        };
        match step {
            Step::Release(owner) => {
                tracing::info!(namespace = ?owner.namespace, name = %owner.name, "removing the foregroundDeletion finalizer: no blocking dependent left");
                self.api.remove_finalizer(&owner, FOREGROUND).await
            }
            Step::Wait(dependents) => {
                for d in dependents {
                    self.queue.add(d);
                }
                Ok(())
            }
            Step::Orphan(owner, dependents) => self.orphan(&owner, &dependents).await,
            Step::Dependent {
                node,
                has_dependents,
                cycle,
            } => self.attempt_to_delete(&node, has_dependents, cycle).await,
        }
    }

    /// Orphan propagation: every dependent loses its reference to the owner (side by side), then
    /// the owner's `orphan` finalizer goes and its deletion completes.
    async fn orphan(&self, owner: &Node, dependents: &[Node]) -> Result<(), GcError> {
        let owner_uid = [owner.uid.clone()];
        tracing::info!(namespace = ?owner.namespace, name = %owner.name, dependents = dependents.len(), "orphaning dependents");
        // Owned items: a closure over borrowed ones trips the compiler's Send check of the
        // worker's future (a higher-ranked lifetime it cannot prove general).
        let owner_uid = &owner_uid;
        let results: Vec<Result<(), GcError>> = futures::stream::iter(dependents.to_vec())
            .map(|d| async move { self.api.remove_owner_references(&d, owner_uid).await })
            .buffer_unordered(ORPHAN_CONCURRENCY)
            .collect()
            .await;
        results.into_iter().collect::<Result<(), GcError>>()?;
        self.api.remove_finalizer(owner, ORPHAN).await
    }

    async fn owner_state(
        &self,
        node: &Node,
        owner: &OwnerReference,
    ) -> Result<Option<OwnerState>, GcError> {
        let key = (node.namespace.clone(), owner.uid.clone());
        if self.absent.lock().expect("gc cache").contains(&key) {
            return Ok(Some(OwnerState::Gone));
        }
        let state = self.api.owner_state(node, owner).await?;
        if state == Some(OwnerState::Gone) {
            let mut absent = self.absent.lock().expect("gc cache");
            if absent.len() >= ABSENT_CACHE {
                absent.clear();
            }
            absent.insert(key);
        }
        Ok(state)
    }

    /// Confirms each owner through the API (the graph may lag), then acts.
    async fn attempt_to_delete(
        &self,
        node: &Node,
        has_dependents: bool,
        cycle: bool,
    ) -> Result<(), GcError> {
        let mut states = Vec::with_capacity(node.owners.len());
        for o in &node.owners {
            states.push((o.uid.clone(), self.owner_state(node, o).await?));
        }
        let state_of = |o: &OwnerReference| {
            states
                .iter()
                .find(|(uid, _)| *uid == o.uid)
                .and_then(|(_, s)| *s)
        };
        match verdict(&node.owners, state_of, has_dependents) {
            Verdict::Keep => Ok(()),
            Verdict::RemoveOwners(gone) => {
                tracing::info!(namespace = ?node.namespace, name = %node.name, owners = ?gone, "removing references to gone or waiting owners");
                self.api.remove_owner_references(node, &gone).await
            }
            Verdict::Delete { foreground: true } => {
                if cycle {
                    // One of its dependents waits for its own dependents: blocking references here
                    // would close a cycle of owners waiting on each other.
                    tracing::info!(namespace = ?node.namespace, name = %node.name, "unblocking its owner references: a dependent of it waits for its own");
                    self.api.unblock_owner_references(node).await?;
                }
                tracing::info!(namespace = ?node.namespace, name = %node.name, "deleting in the foreground: an owner waits for it and it has dependents");
                self.api.delete(node, Propagation::Foreground).await
            }
            Verdict::Delete { foreground: false } => {
                // A finalizer already on it says how it wants to go.
                let policy = if node.has_finalizer(ORPHAN) {
                    Propagation::Orphan
                } else if node.has_finalizer(FOREGROUND) {
                    Propagation::Foreground
                } else {
                    Propagation::Background
                };
                tracing::info!(namespace = ?node.namespace, name = %node.name, ?policy, "deleting: every owner is gone or waiting for its dependents");
                self.api.delete(node, policy).await
            }
        }
    }
}

#[cfg(test)]
#[path = "garbage_collector_process_tests.rs"]
mod tests;
