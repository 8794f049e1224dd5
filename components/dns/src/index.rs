//! The in-memory index the answers come from. The watchers apply every Service and EndpointSlice event
//! to it; a change rebuilds only the view of the one Service it touches (its names, hosts and PTRs),
//! so an update is answerable as soon as the event is applied.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;

use hickory_proto::rr::Name;

use crate::model::{Port, ServiceInfo, ServiceKey, ServiceKind, SliceInfo, SliceKey};

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

/// An endpoint name `<hostname>.<service>.<ns>.svc.<zone>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host {
    pub name: Name,
    pub addresses: Vec<IpAddr>,
    /// The ports of the slices the endpoint is in (what its SRV records carry).
    pub ports: Vec<Port>,
}

/// Everything one Service answers, precomputed when it or one of its slices changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceView {
    /// `<service>.<ns>.svc.<zone>`.
    pub name: Name,
    pub kind: ServiceKind,
    /// The Service name's A/AAAA answers: the ClusterIPs, or for a headless Service its endpoints.
    pub addresses: Vec<IpAddr>,
    pub ports: Vec<Port>,
    /// By lowercase hostname: the endpoint's `hostname`, or one derived from its IP.
    pub hosts: BTreeMap<String, Host>,
    records: usize,
}

/// Counts for /metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IndexStats {
    pub services: usize,
    pub slices: usize,
    /// Resource records the zone can answer (A/AAAA, CNAME, SRV, PTR).
    pub records: usize,
}

#[derive(Debug, Default)]
pub struct Index {
    settings: ZoneSettings,
    services: HashMap<ServiceKey, ServiceInfo>,
    slices: HashMap<SliceKey, SliceInfo>,
    slices_of: HashMap<ServiceKey, BTreeSet<SliceKey>>,
    views: HashMap<ServiceKey, ServiceView>,
    namespaces: HashMap<String, usize>,
    ptr: HashMap<IpAddr, Vec<(ServiceKey, Name)>>,
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

fn push_unique<T: PartialEq + Clone>(list: &mut Vec<T>, item: &T) {
    if !list.contains(item) {
        list.push(item.clone());
    }
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

    pub fn service(&self, namespace: &str, name: &str) -> Option<&ServiceView> {
        self.views.get(&ServiceKey::new(namespace, name))
    }

    /// Whether `<ns>.svc.<zone>` exists: some Service lives in the namespace.
    pub fn has_namespace(&self, namespace: &str) -> bool {
        self.namespaces
            .contains_key(&namespace.to_ascii_lowercase())
    }

    /// The names an IP reverse-resolves to (ClusterIPs and endpoint addresses).
    pub fn ptr(&self, ip: IpAddr) -> impl Iterator<Item = &Name> {
        self.ptr.get(&ip).into_iter().flatten().map(|(_, n)| n)
    }

    pub fn stats(&self) -> IndexStats {
        IndexStats {
            services: self.views.len(),
            slices: self.slices.len(),
            records: self.records,
        }
    }

    /// Adds or replaces a Service. Returns whether anything changed.
    pub fn upsert_service(&mut self, info: ServiceInfo) -> bool {
        let key = info.key.clone();
        match self.services.insert(key.clone(), info) {
            Some(old) if Some(&old) == self.services.get(&key) => return false,
            Some(_) => {}
            None => *self.namespaces.entry(key.namespace.clone()).or_default() += 1,
        }
        self.rebuild(&key);
        true
    }

    pub fn remove_service(&mut self, key: &ServiceKey) -> bool {
        if self.services.remove(key).is_none() {
            return false;
        }
        if let Some(n) = self.namespaces.get_mut(&key.namespace) {
            *n -= 1;
            if *n == 0 {
                self.namespaces.remove(&key.namespace);
            }
        }
        self.rebuild(key);
        true
    }

    /// Adds or replaces an EndpointSlice (also when it moved to another Service).
    pub fn upsert_slice(&mut self, info: SliceInfo) -> bool {
        let key = info.key.clone();
        let service = info.service.clone();
        let old = self.slices.insert(key.clone(), info);
        if old.as_ref() == self.slices.get(&key) {
            return false;
        }
        if let Some(old) = old.filter(|o| o.service != service) {
            self.unlink_slice(&old.service, &key);
            self.rebuild(&old.service);
        }
        self.slices_of
            .entry(service.clone())
            .or_default()
            .insert(key);
        self.rebuild(&service);
        true
    }

    pub fn remove_slice(&mut self, key: &SliceKey) -> bool {
        let Some(old) = self.slices.remove(key) else {
            return false;
        };
        self.unlink_slice(&old.service, key);
        self.rebuild(&old.service);
        true
    }

    /// After a (re)list: the Services are exactly `list`; only those that changed are rebuilt.
    pub fn replace_services(&mut self, list: Vec<ServiceInfo>) {
        let keep: BTreeSet<ServiceKey> = list.iter().map(|s| s.key.clone()).collect();
        let gone: Vec<ServiceKey> = self
            .services
            .keys()
            .filter(|k| !keep.contains(*k))
            .cloned()
            .collect();
        for k in gone {
            self.remove_service(&k);
        }
        for s in list {
            self.upsert_service(s);
        }
    }

    /// After a (re)list: the EndpointSlices are exactly `list`.
    pub fn replace_slices(&mut self, list: Vec<SliceInfo>) {
        let keep: BTreeSet<SliceKey> = list.iter().map(|s| s.key.clone()).collect();
        let gone: Vec<SliceKey> = self
            .slices
            .keys()
            .filter(|k| !keep.contains(*k))
            .cloned()
            .collect();
        for k in gone {
            self.remove_slice(&k);
        }
        for s in list {
            self.upsert_slice(s);
        }
    }

    fn unlink_slice(&mut self, service: &ServiceKey, slice: &SliceKey) {
        if let Some(set) = self.slices_of.get_mut(service) {
            set.remove(slice);
            if set.is_empty() {
                self.slices_of.remove(service);
            }
        }
    }

    /// Recomputes one Service's view and its PTR entries.
    fn rebuild(&mut self, key: &ServiceKey) {
        self.serial = self.serial.wrapping_add(1).max(1);
        self.generation += 1;
        if let Some(old) = self.views.remove(key) {
            self.records -= old.records;
            for ip in old.ptr_ips() {
                if let Some(names) = self.ptr.get_mut(&ip) {
                    names.retain(|(k, _)| k != key);
                    if names.is_empty() {
                        self.ptr.remove(&ip);
                    }
                }
            }
        }
        let Some(info) = self.services.get(key) else {
            return;
        };
        let slices = self
            .slices_of
            .get(key)
            .into_iter()
            .flatten()
            .filter_map(|k| self.slices.get(k));
        let Some(view) = build_view(&self.settings.zone, info, slices) else {
            tracing::debug!(service = %key, "name too long for DNS; no records");
            return;
        };
        for (ip, name) in view.ptr_entries() {
            self.ptr.entry(ip).or_default().push((key.clone(), name));
        }
        self.records += view.records;
        self.views.insert(key.clone(), view);
    }
}

impl ServiceView {
    /// (IP, name) pairs of the reverse zone: ClusterIPs → the Service, endpoint IPs → their host.
    fn ptr_entries(&self) -> Vec<(IpAddr, Name)> {
        let mut out = Vec::new();
        if let ServiceKind::ClusterIp(ips) = &self.kind {
            out.extend(ips.iter().map(|ip| (*ip, self.name.clone())));
        }
        for host in self.hosts.values() {
            out.extend(host.addresses.iter().map(|ip| (*ip, host.name.clone())));
        }
        out
    }

    fn ptr_ips(&self) -> Vec<IpAddr> {
        self.ptr_entries().into_iter().map(|(ip, _)| ip).collect()
    }

    /// The SRV targets for `_<port>._<proto>`: (target, port number, target's addresses).
    pub fn srv_targets(&self, port: &str, proto: &str) -> Vec<(Name, u16, Vec<IpAddr>)> {
        let matches = |p: &&Port| p.name == port && p.protocol == proto;
        match self.kind {
            ServiceKind::ClusterIp(_) => self
                .ports
                .iter()
                .filter(matches)
                .map(|p| (self.name.clone(), p.port, self.addresses.clone()))
                .collect(),
            // headless: one per endpoint, on the endpoint's (slice's) port, as CoreDNS does
            ServiceKind::Headless => self
                .hosts
                .values()
                .flat_map(|h| {
                    h.ports
                        .iter()
                        .filter(matches)
                        .map(|p| (h.name.clone(), p.port, h.addresses.clone()))
                })
                .collect(),
            ServiceKind::ExternalName(_) => Vec::new(),
        }
    }

    /// Whether `_<proto>.<service>…` is an empty non-terminal (some named port uses the protocol).
    pub fn has_protocol(&self, proto: &str) -> bool {
        match self.kind {
            ServiceKind::ClusterIp(_) => self.ports.iter().any(|p| p.protocol == proto),
            ServiceKind::Headless => self
                .hosts
                .values()
                .any(|h| h.ports.iter().any(|p| p.protocol == proto)),
            ServiceKind::ExternalName(_) => false,
        }
    }
}

fn build_view<'a>(
    zone: &Name,
    info: &ServiceInfo,
    slices: impl Iterator<Item = &'a SliceInfo>,
) -> Option<ServiceView> {
    let name = Name::from_labels([
        info.key.name.as_bytes(),
        info.key.namespace.as_bytes(),
        b"svc".as_slice(),
    ])
    .ok()?
    .append_domain(zone)
    .ok()?;
    let mut hosts: BTreeMap<String, Host> = BTreeMap::new();
    let mut endpoint_ips: Vec<IpAddr> = Vec::new();
    if !matches!(info.kind, ServiceKind::ExternalName(_)) {
        for slice in slices {
            let usable = slice
                .endpoints
                .iter()
                .filter(|e| e.ready || info.publish_not_ready);
            for ep in usable {
                for ip in &ep.addresses {
                    push_unique(&mut endpoint_ips, ip);
                    let hostname = ep.hostname.clone().unwrap_or_else(|| ip_hostname(*ip));
                    let Ok(host_name) = name.prepend_label(hostname.as_str()) else {
                        continue;
                    };
                    let host = hosts.entry(hostname).or_insert_with(|| Host {
                        name: host_name,
                        addresses: Vec::new(),
                        ports: Vec::new(),
                    });
                    push_unique(&mut host.addresses, ip);
                    for p in &slice.ports {
                        push_unique(&mut host.ports, p);
                    }
                }
            }
        }
    }
    endpoint_ips.sort();
    let addresses = match &info.kind {
        ServiceKind::ClusterIp(ips) => ips.clone(),
        ServiceKind::Headless => endpoint_ips,
        ServiceKind::ExternalName(_) => Vec::new(),
    };
    let mut view = ServiceView {
        name,
        kind: info.kind.clone(),
        addresses,
        ports: info.ports.clone(),
        hosts,
        records: 0,
    };
    let host_addrs: usize = view.hosts.values().map(|h| h.addresses.len()).sum();
    let srv: usize = match view.kind {
        ServiceKind::ClusterIp(_) => view.ports.len(),
        ServiceKind::Headless => view.hosts.values().map(|h| h.ports.len()).sum(),
        ServiceKind::ExternalName(_) => 0,
    };
    let cname = usize::from(matches!(view.kind, ServiceKind::ExternalName(_)));
    view.records = view.addresses.len() + host_addrs + srv + cname + view.ptr_entries().len();
    Some(view)
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
