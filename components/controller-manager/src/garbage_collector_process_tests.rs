//! The collector's steps against a recording double of the API server: an in-memory store that
//! deletes, patches and finalizes as the API server does (a foreground or orphan deletion leaves
//! the object with its finalizer; removing the last finalizer of a deleted object removes it),
//! whose changes are fed back into the graph as the watches would.

use std::collections::{BTreeMap, HashSet};

use super::super::graph::tests::{deleting, node, owner};
use super::*;

#[derive(Default)]
struct Store {
    objects: Mutex<BTreeMap<String, Node>>,
    calls: Mutex<Vec<String>>,
    /// Owner UIDs whose kind the collector cannot resolve.
    unknown: HashSet<String>,
}

impl Store {
    fn record(&self, call: String) {
        self.calls.lock().unwrap().push(call);
    }

    /// The API server's side of a DELETE with `policy`.
    fn delete_now(&self, uid: &str, policy: Propagation) {
        let mut objects = self.objects.lock().unwrap();
        let Some(o) = objects.get_mut(uid) else {
            return;
        };
        let finalizer = match policy {
            Propagation::Foreground => Some(FOREGROUND),
            Propagation::Orphan => Some(ORPHAN),
            Propagation::Background => None,
        };
        if let Some(f) = finalizer {
            if !o.has_finalizer(f) {
                o.finalizers.push(f.to_string());
            }
        }
        if o.finalizers.is_empty() {
            objects.remove(uid);
        } else {
            o.deleting = true;
        }
    }
}

impl GcApi for Arc<Store> {
    async fn owner_state(
        &self,
        _dependent: &Node,
        owner: &OwnerReference,
    ) -> Result<Option<OwnerState>, GcError> {
        self.record(format!("get {}", owner.name));
        if self.unknown.contains(&owner.uid) {
            return Ok(None);
        }
        Ok(Some(match self.objects.lock().unwrap().get(&owner.uid) {
            None => OwnerState::Gone,
            Some(o) if o.deleting_dependents() => OwnerState::Waiting,
            Some(_) => OwnerState::Solid,
        }))
    }

    async fn delete(&self, node: &Node, policy: Propagation) -> Result<(), GcError> {
        self.record(format!("delete {} {policy:?}", node.name));
        self.delete_now(&node.uid, policy);
        Ok(())
    }

    async fn remove_owner_references(&self, node: &Node, owners: &[String]) -> Result<(), GcError> {
        self.record(format!("drop {} {owners:?}", node.name));
        if let Some(o) = self.objects.lock().unwrap().get_mut(&node.uid) {
            o.owners.retain(|r| !owners.contains(&r.uid));
        }
        Ok(())
    }

    async fn unblock_owner_references(&self, node: &Node) -> Result<(), GcError> {
        self.record(format!("unblock {}", node.name));
        if let Some(o) = self.objects.lock().unwrap().get_mut(&node.uid) {
            for r in &mut o.owners {
                if r.block_owner_deletion == Some(true) {
                    r.block_owner_deletion = Some(false);
                }
            }
        }
        Ok(())
    }

    async fn remove_finalizer(&self, node: &Node, finalizer: &'static str) -> Result<(), GcError> {
        self.record(format!("release {} {finalizer}", node.name));
        let mut objects = self.objects.lock().unwrap();
        if let Some(o) = objects.get_mut(&node.uid) {
            o.finalizers.retain(|f| f != finalizer);
            if o.deleting && o.finalizers.is_empty() {
                objects.remove(&node.uid);
            }
        }
        Ok(())
    }
}

/// The store, a collector over it, and the watches' part played by [`Harness::sync`].
struct Harness {
    store: Arc<Store>,
    collector: Collector<Arc<Store>>,
}

impl Harness {
    fn new(objects: Vec<Node>) -> Harness {
        Harness::with_unknown(objects, &[])
    }

    fn with_unknown(objects: Vec<Node>, unknown: &[&str]) -> Harness {
        let store = Arc::new(Store {
            unknown: unknown.iter().map(|u| u.to_string()).collect(),
            ..Store::default()
        });
        let mut graph = Graph::default();
        for o in objects {
            store
                .objects
                .lock()
                .unwrap()
                .insert(o.uid.clone(), o.clone());
            graph.upsert(o);
        }
        let queue = WorkQueue::new();
        for uid in graph.all_needing_attention() {
            queue.add(uid);
        }
        let collector = Collector::new(Arc::new(Mutex::new(graph)), queue, store.clone());
        Harness { store, collector }
    }

    /// What the watches would report: the store's changes into the graph, their triggers into the
    /// queue.
    fn sync(&self) {
        let objects = self.store.objects.lock().unwrap().clone();
        let mut graph = self.collector.graph.lock().unwrap();
        let mut triggered = Vec::new();
        let known: Vec<String> = objects.keys().cloned().collect();
        let mut stale = Vec::new();
        for uid in graph.all_uids() {
            if !objects.contains_key(&uid) {
                stale.push(uid);
            }
        }
        for uid in stale {
            triggered.extend(graph.remove(&uid));
        }
        for uid in known {
            let now = &objects[&uid];
            if graph.get(&uid) != Some(now) {
                triggered.extend(graph.upsert(now.clone()));
            }
        }
        drop(graph);
        for uid in triggered {
            self.collector.queue.add(uid);
        }
    }

    /// A user's DELETE.
    fn delete(&self, uid: &str, policy: Propagation) {
        self.store.delete_now(uid, policy);
        self.sync();
    }

    /// Runs the queue dry, one UID at a time, syncing after each.
    async fn run(&self) {
        for _ in 0..10_000 {
            let Some(uid) = self.collector.queue.try_get() else {
                return;
            };
            self.collector.process(&uid).await.unwrap();
            self.collector.queue.done(&uid);
            self.sync();
        }
        panic!("the collector never settled: {:?}", self.calls());
    }

    fn calls(&self) -> Vec<String> {
        self.store.calls.lock().unwrap().clone()
    }

    fn left(&self) -> Vec<Node> {
        self.store
            .objects
            .lock()
            .unwrap()
            .values()
            .cloned()
            .collect()
    }

    fn left_names(&self) -> Vec<String> {
        self.left().into_iter().map(|n| n.name).collect()
    }
}

fn pods(owner_uid: &str, n: usize) -> Vec<Node> {
    (0..n)
        .map(|i| node(&format!("p{i:02}"), &[owner_uid]))
        .collect()
}

#[test]
fn verdicts() {
    use OwnerState::*;
    let state = |o: &OwnerReference| match o.uid.as_str() {
        "alive" => Some(Solid),
        "waiting" => Some(Waiting),
        "gone" => Some(Gone),
        _ => None,
    };
    assert_eq!(verdict(&[], state, false), Verdict::Keep);
    assert_eq!(verdict(&[owner("alive")], state, false), Verdict::Keep);
    assert_eq!(
        verdict(&[owner("gone")], state, true),
        Verdict::Delete { foreground: false }
    );
    assert_eq!(
        verdict(&[owner("alive"), owner("gone")], state, false),
        Verdict::RemoveOwners(vec!["gone".into()])
    );
    // An owner whose kind cannot be resolved is presumed alive.
    assert_eq!(verdict(&[owner("x")], |_| None, false), Verdict::Keep);
    // Foreground: a dependent with a valid owner only loses the waiting one…
    assert_eq!(
        verdict(&[owner("waiting"), owner("alive")], state, false),
        Verdict::RemoveOwners(vec!["waiting".into()])
    );
    // …one without goes, in the foreground itself when it has dependents.
    assert_eq!(
        verdict(&[owner("waiting")], state, false),
        Verdict::Delete { foreground: false }
    );
    assert_eq!(
        verdict(&[owner("waiting"), owner("gone")], state, true),
        Verdict::Delete { foreground: true }
    );
}

#[test]
fn steps_read_from_the_graph() {
    let mut g = Graph::default();
    g.upsert(deleting(node("rc", &[]), &[FOREGROUND]));
    g.upsert(node("p1", &["rc"]));
    g.upsert(deleting(node("p2", &["rc"]), &[]));
    // The owner waits for both (p2 is going but not gone) and looks at both, as upstream's
    // processDeletingDependentsItem (p2's look ends at once: it is being deleted).
    assert_eq!(
        step(&g, "rc"),
        Some(Step::Wait(vec!["p1".into(), "p2".into()]))
    );
    assert!(matches!(
        step(&g, "p1"),
        Some(Step::Dependent {
            has_dependents: false,
            cycle: false,
            ..
        })
    ));
    assert_eq!(
        step(&g, "p2"),
        None,
        "being deleted: nothing until it is gone"
    );
    g.remove("p1");
    g.remove("p2");
    assert!(matches!(step(&g, "rc"), Some(Step::Release(_))));
    assert_eq!(step(&g, "unknown"), None);
}

#[tokio::test]
async fn background_dependents_of_a_gone_owner_go_with_one_lookup_of_it() {
    let h = Harness::new(pods("rs", 5));
    h.run().await;
    assert!(h.left().is_empty(), "left: {:?}", h.left_names());
    let gets = h.calls().iter().filter(|c| *c == "get rs").count();
    assert_eq!(gets, 1, "the owner confirmed gone once: {:?}", h.calls());
    assert!(h.calls().contains(&"delete p00 Background".to_string()));
}

#[tokio::test]
async fn an_owner_of_an_unknown_kind_is_presumed_valid() {
    let h = Harness::with_unknown(pods("crd", 2), &["crd"]);
    h.run().await;
    assert_eq!(h.left_names(), ["p00", "p01"]);
}

#[tokio::test]
async fn foreground_keeps_the_owner_until_its_dependents_are_gone() {
    let mut objects = pods("rc", 30);
    objects.push(node("rc", &[]));
    let h = Harness::new(objects);
    h.run().await;
    assert!(h.calls().is_empty(), "nothing to do before the deletion");
    h.delete("rc", Propagation::Foreground);
    h.run().await;
    assert!(h.left().is_empty(), "left: {:?}", h.left_names());
    let calls = h.calls();
    assert_eq!(
        calls.last().map(String::as_str),
        Some("release rc foregroundDeletion"),
        "the owner goes last: {calls:?}"
    );
    let deletes = calls.iter().filter(|c| c.starts_with("delete p")).count();
    assert_eq!(deletes, 30);
}

#[tokio::test]
async fn dependents_with_a_valid_owner_only_lose_the_waiting_one() {
    let mut objects = vec![node("rc1", &[]), node("rc2", &[])];
    for (i, p) in pods("rc1", 6).into_iter().enumerate() {
        let mut p = p;
        if i % 2 == 0 {
            // As the e2e test's patch: a plain reference, neither controller nor blocking.
            p.owners.push(OwnerReference {
                controller: None,
                block_owner_deletion: None,
                ..owner("rc2")
            });
        }
        objects.push(p);
    }
    let h = Harness::new(objects);
    h.delete("rc1", Propagation::Foreground);
    h.run().await;
    let left = h.left();
    let names: Vec<&str> = left.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, ["p00", "p02", "p04", "rc2"]);
    for p in left.iter().filter(|n| n.name.starts_with('p')) {
        assert!(!p.deleting, "{} is being deleted", p.name);
        let owners: Vec<&str> = p.owners.iter().map(|o| o.uid.as_str()).collect();
        assert_eq!(owners, ["rc2"], "{}", p.name);
    }
}

#[tokio::test]
async fn a_cycle_of_foreground_deletions_does_not_block() {
    // pod1 is owned by pod3, pod2 by pod1, pod3 by pod2, every reference blocking.
    let h = Harness::new(vec![
        node("pod1", &["pod3"]),
        node("pod2", &["pod1"]),
        node("pod3", &["pod2"]),
    ]);
    h.delete("pod1", Propagation::Foreground);
    h.run().await;
    assert!(h.left().is_empty(), "left: {:?}", h.left());
    let calls = h.calls();
    let at = |c: &str| calls.iter().position(|x| x == c);
    // pod2 goes in the foreground (it has a dependent); pod3, whose dependent pod1 waits for its
    // own, first makes its references non-blocking, which frees pod2, then pod1, then itself.
    assert!(at("delete pod2 Foreground").is_some(), "{calls:?}");
    assert!(
        at("unblock pod3") < at("delete pod3 Foreground"),
        "{calls:?}"
    );
    assert!(at("unblock pod3").is_some());
}

#[tokio::test]
async fn orphaning_strips_every_dependent_then_the_finalizer() {
    let mut objects = pods("rc", 25);
    objects.push(node("rc", &[]));
    objects.push(node("other", &["keeper"]));
    objects.push(node("keeper", &[]));
    let h = Harness::new(objects);
    h.delete("rc", Propagation::Orphan);
    h.run().await;
    let left = h.left();
    assert_eq!(left.len(), 27, "every pod stays: {:?}", h.left_names());
    assert!(left.iter().all(|n| n.name != "rc"), "the owner is gone");
    for p in left.iter().filter(|n| n.name.starts_with('p')) {
        assert!(p.owners.is_empty(), "{} still has {:?}", p.name, p.owners);
    }
    let calls = h.calls();
    assert_eq!(calls.iter().filter(|c| c.starts_with("drop p")).count(), 25);
    assert_eq!(calls.last().map(String::as_str), Some("release rc orphan"));
}

#[tokio::test]
async fn a_dependent_already_carrying_a_finalizer_goes_as_it_says() {
    let mut p = node("p", &["gone"]);
    p.finalizers = vec![ORPHAN.to_string()];
    let h = Harness::new(vec![p, node("child", &["p"])]);
    h.run().await;
    assert_eq!(
        h.calls(),
        [
            "get gone",
            "delete p Orphan",
            "drop child [\"p\"]",
            "release p orphan"
        ]
    );
    assert_eq!(h.left_names(), ["child"]);
}
