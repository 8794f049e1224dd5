//! The collector's picture of the cluster: every watched object by UID with its owner references
//! and deletion state, and an index from each owner UID to its dependents (kept for owners never
//! seen too, so their dependents are found when one turns out to be gone). Each change answers
//! which objects the collector should look at next, as upstream's GraphBuilder enqueues them: the
//! rest of the time nothing is scanned.

use std::collections::{HashMap, HashSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

use super::{FOREGROUND, ORPHAN};

/// One object as the collector needs it.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    /// Index of its kind in the collector's list of watched kinds.
    pub kind: usize,
    pub uid: String,
    pub namespace: Option<String>,
    pub name: String,
    pub owners: Vec<OwnerReference>,
    pub finalizers: Vec<String>,
    /// It has a deletionTimestamp.
    pub deleting: bool,
}

impl Node {
    pub fn has_finalizer(&self, finalizer: &str) -> bool {
        self.finalizers.iter().any(|f| f == finalizer)
    }

    /// Deleted in the foreground and waiting for its blocking dependents to go (upstream's
    /// isDeletingDependents).
    pub fn deleting_dependents(&self) -> bool {
        self.deleting && self.has_finalizer(FOREGROUND)
    }

    /// Deleted with propagationPolicy Orphan: its dependents are to lose their references to it.
    pub fn orphaning(&self) -> bool {
        self.deleting && self.has_finalizer(ORPHAN)
    }

    /// Its reference to `owner` has blockOwnerDeletion: a foreground deletion of the owner waits
    /// for it.
    pub fn blocks(&self, owner: &str) -> bool {
        self.owners
            .iter()
            .any(|o| o.uid == owner && o.block_owner_deletion == Some(true))
    }

    fn owned_by(&self, owner: &str) -> bool {
        self.owners.iter().any(|o| o.uid == owner)
    }

    /// What the collector's decisions read: a change elsewhere (status, labels) wakes nothing.
    fn same_for_gc(&self, other: &Node) -> bool {
        self.owners == other.owners
            && self.finalizers == other.finalizers
            && self.deleting == other.deleting
    }
}

#[derive(Debug, Default)]
pub struct Graph {
    nodes: HashMap<String, Node>,
    /// owner UID → UIDs of the objects that reference it (whether or not the owner is known).
    dependents: HashMap<String, HashSet<String>>,
}

impl Graph {
    pub fn get(&self, uid: &str) -> Option<&Node> {
        self.nodes.get(uid)
    }

    pub fn object_count(&self) -> usize {
        self.nodes.len()
    }

    #[cfg(test)]
    pub fn all_uids(&self) -> Vec<String> {
        self.nodes.keys().cloned().collect()
    }

    /// The known objects that reference `owner`, in UID order.
    pub fn dependents(&self, owner: &str) -> Vec<&Node> {
        let mut out: Vec<&Node> = self
            .dependents
            .get(owner)
            .into_iter()
            .flatten()
            .filter_map(|d| self.nodes.get(d))
            .collect();
        out.sort_by(|a, b| a.uid.cmp(&b.uid));
        out
    }

    /// The dependents whose reference to `owner` blocks its foreground deletion.
    pub fn blocking_dependents(&self, owner: &str) -> Vec<&Node> {
        let mut out = self.dependents(owner);
        out.retain(|d| d.blocks(owner));
        out
    }

    /// Whether `node` itself has something for the collector to do: an owner waiting for its
    /// dependents or orphaning them, or a dependent one of whose owners is unknown (perhaps gone)
    /// or waiting for it.
    fn needs_attention(&self, node: &Node) -> bool {
        if node.deleting_dependents() || node.orphaning() {
            return true;
        }
        !node.deleting
            && node.owners.iter().any(|o| match self.nodes.get(&o.uid) {
                None => true,
                Some(owner) => owner.deleting_dependents(),
            })
    }

    /// Every object that needs attention now: the collector's start, and its periodic safety net.
    pub fn all_needing_attention(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .nodes
            .values()
            .filter(|n| self.needs_attention(n))
            .map(|n| n.uid.clone())
            .collect();
        out.sort();
        out
    }

    /// Records an added or changed object; returns the UIDs to look at because of it: the object
    /// when what the collector reads of it changed and it needs attention (upstream enqueues an
    /// object on its owners' or its own deletion state changing), and the owners waiting for
    /// their dependents that it no longer blocks.
    pub fn upsert(&mut self, node: Node) -> Vec<String> {
        let uid = node.uid.clone();
        let old = self.nodes.remove(&uid);
        if let Some(old) = &old {
            for o in &old.owners {
                if !node.owned_by(&o.uid) {
                    self.unindex(&o.uid, &uid);
                }
            }
        }
        for o in &node.owners {
            self.dependents
                .entry(o.uid.clone())
                .or_default()
                .insert(uid.clone());
        }
        let changed = old.as_ref().is_none_or(|old| !old.same_for_gc(&node));
        let mut out = Vec::new();
        if changed && self.needs_attention(&node) {
            out.push(uid.clone());
        }
        if let Some(old) = &old {
            for o in &old.owners {
                let unblocked = old.blocks(&o.uid) && !node.blocks(&o.uid);
                if unblocked && self.waiting(&o.uid) {
                    out.push(o.uid.clone());
                }
            }
        }
        self.nodes.insert(uid, node);
        out
    }

    /// Records an object's deletion; returns its dependents (an owner of theirs is gone) and its
    /// owners that wait for their dependents (one fewer now).
    pub fn remove(&mut self, uid: &str) -> Vec<String> {
        let Some(node) = self.nodes.remove(uid) else {
            return Vec::new();
        };
        let mut out: Vec<String> = self
            .dependents(uid)
            .into_iter()
            .map(|d| d.uid.clone())
            .collect();
        for o in &node.owners {
            self.unindex(&o.uid, uid);
            if self.waiting(&o.uid) {
                out.push(o.uid.clone());
            }
        }
        out
    }

    /// Replaces every object of `kind` after a (re)list: the ones not listed are removed.
    pub fn replace_kind(&mut self, kind: usize, nodes: Vec<Node>) -> Vec<String> {
        let listed: HashSet<&str> = nodes.iter().map(|n| n.uid.as_str()).collect();
        let gone: Vec<String> = self
            .nodes
            .values()
            .filter(|n| n.kind == kind && !listed.contains(n.uid.as_str()))
            .map(|n| n.uid.clone())
            .collect();
        let mut out = Vec::new();
        for uid in gone {
            out.extend(self.remove(&uid));
        }
        for n in nodes {
            out.extend(self.upsert(n));
        }
        out
    }

    fn waiting(&self, uid: &str) -> bool {
        self.nodes.get(uid).is_some_and(Node::deleting_dependents)
    }

    fn unindex(&mut self, owner: &str, dependent: &str) {
        if let Some(set) = self.dependents.get_mut(owner) {
            set.remove(dependent);
            if set.is_empty() {
                self.dependents.remove(owner);
            }
        }
    }
}

#[cfg(test)]
pub mod tests {
    use super::*;

    /// A reference to `uid` (a Pod named after it), blocking.
    pub fn owner(uid: &str) -> OwnerReference {
        OwnerReference {
            api_version: "v1".into(),
            kind: "Pod".into(),
            name: uid.into(),
            uid: uid.into(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }
    }

    /// An object whose name is its UID, in namespace `ns`.
    pub fn node(uid: &str, owners: &[&str]) -> Node {
        Node {
            kind: 0,
            uid: uid.into(),
            namespace: Some("ns".into()),
            name: uid.into(),
            owners: owners.iter().map(|u| owner(u)).collect(),
            finalizers: Vec::new(),
            deleting: false,
        }
    }

    pub fn deleting(mut n: Node, finalizers: &[&str]) -> Node {
        n.deleting = true;
        n.finalizers = finalizers.iter().map(|f| f.to_string()).collect();
        n
    }

    fn graph(nodes: Vec<Node>) -> Graph {
        let mut g = Graph::default();
        for n in nodes {
            g.upsert(n);
        }
        g
    }

    fn uids(nodes: Vec<&Node>) -> Vec<&str> {
        nodes.into_iter().map(|n| n.uid.as_str()).collect()
    }

    #[test]
    fn the_index_follows_owner_references() {
        let mut g = graph(vec![
            node("rc", &[]),
            node("a", &["rc"]),
            node("b", &["rc"]),
        ]);
        assert_eq!(uids(g.dependents("rc")), ["a", "b"]);
        // b drops its reference; a goes.
        g.upsert(node("b", &[]));
        g.remove("a");
        assert!(g.dependents("rc").is_empty());
        assert!(g.dependents.is_empty(), "no empty index entries left");
        // Non-blocking references are dependents, not blocking ones.
        let mut loose = node("c", &["rc"]);
        loose.owners[0].block_owner_deletion = None;
        g.upsert(loose);
        assert_eq!(uids(g.dependents("rc")), ["c"]);
        assert!(g.blocking_dependents("rc").is_empty());
    }

    #[test]
    fn a_dependent_of_an_unknown_owner_is_looked_at_once() {
        let mut g = Graph::default();
        assert_eq!(g.upsert(node("p", &["gone"])), ["p"]);
        // A status update changes nothing the collector reads.
        assert!(g.upsert(node("p", &["gone"])).is_empty());
        // With a known, settled owner there is nothing to do.
        let mut g = graph(vec![node("rs", &[])]);
        assert!(g.upsert(node("p", &["rs"])).is_empty());
        assert!(g.all_needing_attention().is_empty());
    }

    #[test]
    fn an_owners_deletion_wakes_its_dependents() {
        let mut g = graph(vec![
            node("rs", &[]),
            node("a", &["rs"]),
            node("b", &["rs"]),
        ]);
        assert_eq!(g.remove("rs"), ["a", "b"]);
        assert_eq!(g.all_needing_attention(), ["a", "b"]);
    }

    #[test]
    fn a_foreground_owner_is_woken_by_its_blocking_dependents_going() {
        let mut g = graph(vec![
            node("rc", &[]),
            node("a", &["rc"]),
            node("b", &["rc"]),
        ]);
        // The owner starts waiting: it is looked at (and its dependents, since one of their
        // owners waits).
        assert_eq!(g.upsert(deleting(node("rc", &[]), &[FOREGROUND])), ["rc"]);
        assert_eq!(g.all_needing_attention(), ["a", "b", "rc"]);
        // A dependent being deleted does not wake it; its removal does.
        assert!(g.upsert(deleting(node("a", &["rc"]), &[])).is_empty());
        assert_eq!(g.remove("a"), ["rc"]);
        // A dependent that makes its reference non-blocking wakes it too (and, its owner
        // waiting, is looked at itself).
        let mut loose = node("b", &["rc"]);
        loose.owners[0].block_owner_deletion = Some(false);
        assert_eq!(g.upsert(loose), ["b", "rc"]);
        assert!(g.blocking_dependents("rc").is_empty());
    }

    #[test]
    fn an_orphaning_owner_is_looked_at_and_its_dependents_are_not() {
        let mut g = graph(vec![node("rc", &[]), node("a", &["rc"])]);
        assert_eq!(g.upsert(deleting(node("rc", &[]), &[ORPHAN])), ["rc"]);
        assert_eq!(g.all_needing_attention(), ["rc"]);
    }

    #[test]
    fn a_relist_removes_what_it_no_longer_holds() {
        let mut g = graph(vec![node("rs", &[]), node("a", &["rs"])]);
        let mut other = node("x", &[]);
        other.kind = 1;
        g.upsert(other);
        // The kind-0 relist holds only `a`: `rs` is gone, so `a` is to be looked at.
        assert_eq!(g.replace_kind(0, vec![node("a", &["rs"])]), ["a"]);
        assert!(g.get("rs").is_none());
        assert!(g.get("x").is_some(), "other kinds untouched");
        assert_eq!(g.object_count(), 2);
    }
}
