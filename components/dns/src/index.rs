//! The in-memory index the answers come from. The watchers apply every Service and EndpointSlice event
//! to it; a change rebuilds only the view of the one Service it touches (its hosts and PTRs), so an
//! update is answerable as soon as the event is applied. How it is stored is in [`view`]: compact,
//! since at 10 000 Services the index is most of kiln-dns's memory (issue #22).

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::sync::Arc;

use hickory_proto::rr::Name;

use crate::model::{Port, ServiceInfo, ServiceKey, ServiceKind, SliceInfo, SliceKey};

#[path = "index_view.rs"]
mod view;
use view::{Endpoint, Entry, Slice, Spec, SERVICE_ITSELF};
pub use view::{Host, Kind, ServiceView};

/// What the zone is, independent of the cluster's objects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZoneSettings {
    /// Lowercase FQDN, e.g. `cluster.local.`.
    pub zone: Name,
    pub ttl: u32,
    /// Addresses of `ns.dns.<zone>` (the NS of the apex): where this server listens, when known.
    pub ns_addresses: Vec<IpAddr>,
}

impl Default for ZoneSettings {
    fn default() -> Self {
        ZoneSettings {
            zone: Name::from_ascii("cluster.local.").unwrap_or_else(|_| Name::root()),
            ttl: 5,
            ns_addresses: Vec::new(),
        }
    }
}

/// Counts for /metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IndexStats {
    pub services: usize,
    pub slices: usize,
    /// Resource records the zone can answer (A/AAAA, CNAME, SRV, PTR).
    pub records: usize,
}

/// A PTR entry: the Service (its key, shared with the services map) and which of its names.
#[derive(Debug, Clone)]
struct PtrTarget {
    service: Arc<str>,
    /// An index into the Service's hosts, or [`SERVICE_ITSELF`].
    host: u32,
}

#[derive(Debug, Default)]
pub struct Index {
    settings: ZoneSettings,
    /// By `<ns>/<name>` (lowercase; neither part can hold a `/`): each Service once, with its
    /// slices; also the slices of a Service not seen yet.
    services: HashMap<Arc<str>, Entry>,
    /// EndpointSlice `<ns>/<name>` → the key of the Service whose entry holds it.
    slices: HashMap<Arc<str>, Arc<str>>,
    namespaces: HashMap<Box<str>, usize>,
    ptr: HashMap<IpAddr, Vec<PtrTarget>>,
    /// Interned ports: thousands of Services share a few `http/tcp/80`s.
    ports: HashSet<Arc<Port>>,
    /// When the interned ports are next swept of ones nothing uses.
    ports_sweep_at: usize,
    /// Services that answer (exist and their name fits).
    views: usize,
    records: usize,
    serial: u32,
    /// Bumped on every change that can alter an answer (a rebuild, the first sync): what the
    /// encoded replies in [`crate::reply_cache`] are valid for.
    generation: u64,
    /// Whether the first lists of Services and EndpointSlices are in (see [`Index::awaiting_sync`]).
    synced: bool,
}

/// The derived hostname of an endpoint without one: its IP with dashes (`10-244-1-5`; IPv6 in full,
/// `fd00-0000-…-0001`, so the label never starts with a dash and is unique per address).
pub fn ip_hostname(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => v4.to_string().replace('.', "-"),
        IpAddr::V6(v6) => v6
            .segments()
            .iter()
            .map(|s| format!("{s:04x}"))
            .collect::<Vec<_>>()
            .join("-"),
    }
}

fn service_key(key: &ServiceKey) -> String {
    format!("{}/{}", key.namespace, key.name)
}

fn slice_key(key: &SliceKey) -> String {
    format!("{}/{}", key.namespace, key.name)
}

impl Index {
    /// An index that is complete as built (what it holds is all there is): tests, the fuzz target.
    pub fn new(settings: ZoneSettings) -> Self {
        Index {
            settings,
            serial: 1,
            synced: true,
            ..Default::default()
        }
    }

    /// An empty index still waiting for the watches' first lists: until [`Index::mark_synced`], a
    /// name it does not hold may exist all the same, so it is answered SERVFAIL, not NXDOMAIN (as
    /// CoreDNS's kubernetes plugin does before its informers have synced) — a client must not cache a
    /// negative answer for `kubernetes.default` because this instance started a moment ago.
    pub fn awaiting_sync(settings: ZoneSettings) -> Self {
        Index {
            synced: false,
            ..Index::new(settings)
        }
    }

    /// The first full lists are in: absent names are NXDOMAIN from now on (also across relists).
    pub fn mark_synced(&mut self) {
        if !self.synced {
            self.generation += 1;
        }
        self.synced = true;
    }

    pub fn synced(&self) -> bool {
        self.synced
    }

    pub fn settings(&self) -> &ZoneSettings {
        &self.settings
    }

    /// Changes whenever any answer may have changed (unlike the serial, it never wraps or repeats).
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Bumped on every change (the SOA serial).
    pub fn serial(&self) -> u32 {
        self.serial
    }

    pub fn service(&self, namespace: &str, name: &str) -> Option<ServiceView<'_>> {
        if namespace.contains('/') || name.contains('/') {
            return None;
        }
        let mut key = format!("{namespace}/{name}");
        key.make_ascii_lowercase();
        self.view(&key)
    }

    fn view(&self, key: &str) -> Option<ServiceView<'_>> {
        let (key, entry) = self.services.get_key_value(key)?;
        let spec = entry.spec.as_ref().filter(|_| entry.answers)?;
        Some(ServiceView {
            key,
            zone: &self.settings.zone,
            spec,
            entry,
        })
    }

    /// Whether `<ns>.svc.<zone>` exists: some Service lives in the namespace.
    pub fn has_namespace(&self, namespace: &str) -> bool {
        self.namespaces
            .contains_key(namespace.to_ascii_lowercase().as_str())
    }

    /// The names an IP reverse-resolves to (ClusterIPs and endpoint addresses), built on demand.
    pub fn ptr(&self, ip: IpAddr) -> impl Iterator<Item = Name> + '_ {
        self.ptr.get(&ip).into_iter().flatten().filter_map(|t| {
            let view = self.view(&t.service)?;
            if t.host == SERVICE_ITSELF {
                return Some(view.name());
            }
            let host = view.hosts().get(usize::try_from(t.host).ok()?)?;
            Some(view.host_name(host))
        })
    }

    pub fn stats(&self) -> IndexStats {
        IndexStats {
            services: self.views,
            slices: self.slices.len(),
            records: self.records,
        }
    }

    /// The map's own copy of `key` (so an entry, its slices and PTRs share one), or a new one.
    fn shared_key(&self, key: String) -> Arc<str> {
        match self.services.get_key_value(key.as_str()) {
            Some((k, _)) => k.clone(),
            None => Arc::from(key),
        }
    }

    fn intern(&mut self, port: &Port) -> Arc<Port> {
        if let Some(p) = self.ports.get(port) {
            return p.clone();
        }
        if self.ports.len() >= self.ports_sweep_at {
            self.ports.retain(|p| Arc::strong_count(p) > 1);
            self.ports_sweep_at = (2 * self.ports.len()).max(64);
        }
        let p = Arc::new(port.clone());
        self.ports.insert(p.clone());
        p
    }

    fn intern_all(&mut self, ports: &[Port]) -> Box<[Arc<Port>]> {
        ports.iter().map(|p| self.intern(p)).collect()
    }

    fn spec(&mut self, info: ServiceInfo) -> Spec {
        let kind = match info.kind {
            ServiceKind::ClusterIp(ips) => Kind::ClusterIp(ips.into_boxed_slice()),
            ServiceKind::Headless => Kind::Headless,
            ServiceKind::ExternalName(n) => Kind::ExternalName(Box::new(n)),
        };
        Spec {
            kind,
            ports: self.intern_all(&info.ports),
            publish_not_ready: info.publish_not_ready,
        }
    }

    fn slice(&mut self, key: Arc<str>, info: SliceInfo) -> Slice {
        let endpoints = info
            .endpoints
            .into_iter()
            .map(|e| Endpoint {
                addresses: e.addresses.into_boxed_slice(),
                hostname: e.hostname.map(String::into_boxed_str),
                ready: e.ready,
            })
            .collect();
        Slice {
            key,
            endpoints,
            ports: self.intern_all(&info.ports),
        }
    }

    /// Adds or replaces a Service. Returns whether anything changed.
    pub fn upsert_service(&mut self, info: ServiceInfo) -> bool {
        let key = self.shared_key(service_key(&info.key));
        let spec = self.spec(info);
        let entry = self.services.entry(key.clone()).or_default();
        if entry.spec.as_ref() == Some(&spec) {
            return false;
        }
        self.unpublish(&key);
        let entry = self.services.entry(key.clone()).or_default();
        if entry.spec.replace(spec).is_none() {
            let ns = key.split_once('/').map_or("", |(ns, _)| ns);
            *self.namespaces.entry(ns.into()).or_default() += 1;
        }
        self.rebuild(&key);
        true
    }

    pub fn remove_service(&mut self, key: &ServiceKey) -> bool {
        self.remove_service_key(&service_key(key))
    }

    fn remove_service_key(&mut self, key: &str) -> bool {
        let Some((key, entry)) = self.services.get_key_value(key) else {
            return false;
        };
        if entry.spec.is_none() {
            return false;
        }
        let key = key.clone();
        self.unpublish(&key);
        if let Some(entry) = self.services.get_mut(&key) {
            entry.spec = None;
        }
        let ns = key.split_once('/').map_or("", |(ns, _)| ns);
        if let Some(n) = self.namespaces.get_mut(ns) {
            *n -= 1;
            if *n == 0 {
                self.namespaces.remove(ns);
            }
        }
        self.rebuild(&key);
        true
    }

    /// Adds or replaces an EndpointSlice (also when it moved to another Service).
    pub fn upsert_slice(&mut self, info: SliceInfo) -> bool {
        let skey = slice_key(&info.key);
        let (skey, old_service) = match self.slices.get_key_value(skey.as_str()) {
            Some((k, s)) => (k.clone(), Some(s.clone())),
            None => (Arc::from(skey), None),
        };
        let service = self.shared_key(service_key(&info.service));
        let data = self.slice(skey.clone(), info);
        if let Some(old) = old_service {
            let entry = self.services.get_mut(&old);
            let pos = entry
                .as_ref()
                .and_then(|e| e.slices.iter().position(|s| s.key == skey));
            if let (Some(entry), Some(pos)) = (entry, pos) {
                if old == service {
                    if entry.slices[pos] == data {
                        return false;
                    }
                    entry.slices[pos] = data;
                    self.rebuild(&service);
                    return true;
                }
                entry.slices.remove(pos);
            }
            self.rebuild(&old);
        }
        self.slices.insert(skey, service.clone());
        let slices = &mut self.services.entry(service.clone()).or_default().slices;
        let at = slices.partition_point(|s| s.key < data.key);
        slices.insert(at, data);
        self.rebuild(&service);
        true
    }

    pub fn remove_slice(&mut self, key: &SliceKey) -> bool {
        self.remove_slice_key(&slice_key(key))
    }

    fn remove_slice_key(&mut self, key: &str) -> bool {
        let Some((skey, service)) = self.slices.remove_entry(key) else {
            return false;
        };
        if let Some(entry) = self.services.get_mut(&service) {
            entry.slices.retain(|s| s.key != skey);
        }
        self.rebuild(&service);
        true
    }

    /// After a (re)list: the Services are exactly `list`; only those that changed are rebuilt.
    /// Sorted in place and searched, so the list is not copied (a relist of every Service must not
    /// double the memory it takes).
    pub fn replace_services(&mut self, mut list: Vec<ServiceInfo>) {
        list.sort_unstable_by(|a, b| a.key.cmp(&b.key));
        let gone: Vec<Arc<str>> = self
            .services
            .iter()
            .filter(|(_, e)| e.spec.is_some())
            .map(|(k, _)| k)
            .filter(|k| {
                let (ns, name) = k.split_once('/').unwrap_or_default();
                list.binary_search_by(|s| (&*s.key.namespace, &*s.key.name).cmp(&(ns, name)))
                    .is_err()
            })
            .cloned()
            .collect();
        for k in gone {
            self.remove_service_key(&k);
        }
        for s in list {
            self.upsert_service(s);
        }
    }

    /// After a (re)list: the EndpointSlices are exactly `list` (sorted in place, not copied).
    pub fn replace_slices(&mut self, mut list: Vec<SliceInfo>) {
        list.sort_unstable_by(|a, b| a.key.cmp(&b.key));
        let gone: Vec<Arc<str>> = self
            .slices
            .keys()
            .filter(|k| {
                let (ns, name) = k.split_once('/').unwrap_or_default();
                list.binary_search_by(|s| (&*s.key.namespace, &*s.key.name).cmp(&(ns, name)))
                    .is_err()
            })
            .cloned()
            .collect();
        for k in gone {
            self.remove_slice_key(&k);
        }
        for s in list {
            self.upsert_slice(s);
        }
    }

    /// Takes one Service's view out of the answers: its PTR entries and counts. Done before its
    /// spec changes too, since the ClusterIPs the PTRs came from are read from the spec.
    fn unpublish(&mut self, key: &Arc<str>) {
        let Some(entry) = self.services.get_mut(key) else {
            return;
        };
        if !entry.answers {
            return;
        }
        self.views -= 1;
        self.records -= entry.records;
        if let Some(spec) = &entry.spec {
            let old = ServiceView {
                key,
                zone: &self.settings.zone,
                spec,
                entry,
            };
            for (ip, _) in old.ptr_entries() {
                if let Some(targets) = self.ptr.get_mut(&ip) {
                    targets.retain(|t| *t.service != **key);
                    if targets.is_empty() {
                        self.ptr.remove(&ip);
                    }
                }
            }
        }
        entry.answers = false;
    }

    /// Recomputes one Service's view and its PTR entries (and drops an entry left with nothing).
    fn rebuild(&mut self, key: &Arc<str>) {
        self.serial = self.serial.wrapping_add(1).max(1);
        self.generation += 1;
        self.unpublish(key);
        let Some(entry) = self.services.get_mut(key) else {
            return;
        };
        if entry.spec.is_none() && entry.slices.is_empty() {
            self.services.remove(key);
            return;
        }
        entry.derive(&self.settings.zone, key);
        let Some(spec) = entry.spec.as_ref().filter(|_| entry.answers) else {
            return;
        };
        let view = ServiceView {
            key,
            zone: &self.settings.zone,
            spec,
            entry,
        };
        for (ip, host) in view.ptr_entries() {
            let target = PtrTarget {
                service: key.clone(),
                host,
            };
            self.ptr.entry(ip).or_default().push(target);
        }
        self.views += 1;
        self.records += entry.records;
    }
}

/// `ip6.arpa`/`in-addr.arpa` name → the one address it names (None for a partial name).
pub fn reverse_ip(name: &Name) -> Option<IpAddr> {
    let net = name.parse_arpa_name().ok()?;
    let full = match net.addr() {
        IpAddr::V4(_) => 32,
        IpAddr::V6(_) => 128,
    };
    (net.prefix_len() == full).then(|| net.addr())
}

#[cfg(test)]
#[path = "index_tests.rs"]
pub(crate) mod tests;
