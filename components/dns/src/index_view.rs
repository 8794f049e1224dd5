//! The index's compact storage and the read side answers use. Memory is what this is shaped by
//! (issue #22: kiln-dns's RSS at 10 000 Services): a Service's key is kept once (the `Arc<str>` the
//! services map, its slices and its PTR entries share), names are not stored but built from that key
//! when a query needs them (the reply cache serves repeated queries), ports are interned, and every
//! list is an exact-size boxed slice.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;

use hickory_proto::rr::Name;

use crate::model::Port;

/// What kind of Service it is, compact ([`crate::model::ServiceKind`] as the index keeps it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// The ClusterIPs (one per family).
    ClusterIp(Box<[IpAddr]>),
    Headless,
    /// Boxed: a `Name` is ~80 bytes inline, and only a few Services are ExternalNames.
    ExternalName(Box<Name>),
}

/// What the Service object says (compared to tell a no-op update from a change).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Spec {
    pub kind: Kind,
    pub ports: Box<[Arc<Port>]>,
    pub publish_not_ready: bool,
}

#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Endpoint {
    pub addresses: Box<[IpAddr]>,
    pub hostname: Option<Box<str>>,
    pub ready: bool,
}

/// One EndpointSlice, kept in its Service's entry.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Slice {
    /// `<ns>/<name>`: the slices map's key (shared).
    pub key: Arc<str>,
    pub endpoints: Box<[Endpoint]>,
    pub ports: Box<[Arc<Port>]>,
}

/// An endpoint name `<label>.<service>.<ns>.svc.<zone>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host {
    /// Lowercase: the endpoint's `hostname`, or one derived from its IP.
    pub label: Box<str>,
    pub addresses: Box<[IpAddr]>,
    /// The ports of the slices the endpoint is in (what its SRV records carry).
    pub ports: Box<[Arc<Port>]>,
}

/// One Service key's slot: the Service (once seen), its slices (also before the Service is seen)
/// and the view derived from both.
#[derive(Debug, Default)]
pub(crate) struct Entry {
    pub spec: Option<Spec>,
    /// Sorted by key, so the hosts come out as they always did.
    pub slices: Vec<Slice>,
    /// Derived: the Service exists and its name fits in DNS.
    pub answers: bool,
    /// Derived, headless only: the usable endpoints' addresses, sorted (the name's A/AAAA).
    pub endpoint_ips: Box<[IpAddr]>,
    /// Derived: sorted by label.
    pub hosts: Box<[Host]>,
    pub records: usize,
}

/// The host index of a PTR entry that names the Service itself.
pub(crate) const SERVICE_ITSELF: u32 = u32::MAX;

/// `[<host>.]<name>.<ns>.svc.<zone>` of a `<ns>/<name>` key; None when it does not fit in DNS. Built
/// label by label from raw bytes (they are checked DNS labels already): `prepend_label` with a
/// `&str` would run IDNA on each, and `from_labels`/`append_domain` allocate and copy more.
pub(crate) fn dns_name(zone: &Name, key: &str, host: Option<&str>) -> Option<Name> {
    let (ns, name) = key.split_once('/')?;
    let own = host.map(str::as_bytes).into_iter();
    let own = own.chain([name.as_bytes(), ns.as_bytes(), b"svc".as_slice()]);
    let mut out = Name::new();
    for label in own.chain(zone.iter()) {
        out = out.append_label(label).ok()?;
    }
    out.set_fqdn(true);
    Some(out)
}

impl Entry {
    /// Recomputes the derived view from the spec and the slices (the view stays empty when the
    /// Service is unknown or its name does not fit).
    pub fn derive(&mut self, zone: &Name, key: &str) {
        self.answers = false;
        self.endpoint_ips = Box::default();
        self.hosts = Box::default();
        self.records = 0;
        let Some(spec) = &self.spec else {
            return;
        };
        if dns_name(zone, key, None).is_none() {
            tracing::debug!(service = %key, "name too long for DNS; no records");
            return;
        }
        let mut hosts: BTreeMap<String, (Vec<IpAddr>, Vec<Arc<Port>>)> = BTreeMap::new();
        let mut endpoint_ips: Vec<IpAddr> = Vec::new();
        if !matches!(spec.kind, Kind::ExternalName(_)) {
            for slice in &self.slices {
                let usable = slice
                    .endpoints
                    .iter()
                    .filter(|e| e.ready || spec.publish_not_ready);
                for ep in usable {
                    for ip in ep.addresses.iter() {
                        push_unique(&mut endpoint_ips, ip);
                        let label = ep
                            .hostname
                            .as_deref()
                            .map_or_else(|| super::ip_hostname(*ip), str::to_string);
                        // a host whose name would not fit has no records (its IP still counts)
                        if dns_name(zone, key, Some(&label)).is_none() {
                            continue;
                        }
                        let (addrs, ports) = hosts.entry(label).or_default();
                        push_unique(addrs, ip);
                        for p in slice.ports.iter() {
                            push_unique(ports, p);
                        }
                    }
                }
            }
        }
        endpoint_ips.sort();
        self.hosts = hosts
            .into_iter()
            .map(|(label, (addrs, ports))| Host {
                label: label.into_boxed_str(),
                addresses: addrs.into_boxed_slice(),
                ports: ports.into_boxed_slice(),
            })
            .collect();
        if spec.kind == Kind::Headless {
            self.endpoint_ips = endpoint_ips.into_boxed_slice();
        }
        self.answers = true;
        let view = ServiceView {
            key,
            zone,
            spec,
            entry: self,
        };
        let host_addrs: usize = view.hosts().iter().map(|h| h.addresses.len()).sum();
        let srv = match spec.kind {
            Kind::ClusterIp(_) => spec.ports.len(),
            Kind::Headless => view.hosts().iter().map(|h| h.ports.len()).sum(),
            Kind::ExternalName(_) => 0,
        };
        let cname = usize::from(matches!(spec.kind, Kind::ExternalName(_)));
        let ptrs = view.ptr_entries().count();
        let records = view.addresses().len() + host_addrs + srv + cname + ptrs;
        self.records = records;
    }
}

/// One Service as answers read it: borrowed from the index, names built on demand.
#[derive(Debug, Clone, Copy)]
pub struct ServiceView<'a> {
    /// `<ns>/<name>`.
    pub(crate) key: &'a str,
    pub(crate) zone: &'a Name,
    pub(crate) spec: &'a Spec,
    pub(crate) entry: &'a Entry,
}

impl<'a> ServiceView<'a> {
    /// `<service>.<ns>.svc.<zone>` (the index only holds views whose name fits).
    pub fn name(&self) -> Name {
        dns_name(self.zone, self.key, None).unwrap_or_else(|| self.zone.clone())
    }

    pub fn kind(&self) -> &'a Kind {
        &self.spec.kind
    }

    /// The Service name's A/AAAA answers: the ClusterIPs, or for a headless Service its endpoints.
    pub fn addresses(&self) -> &'a [IpAddr] {
        match &self.spec.kind {
            Kind::ClusterIp(ips) => ips,
            Kind::Headless => &self.entry.endpoint_ips,
            Kind::ExternalName(_) => &[],
        }
    }

    pub fn ports(&self) -> &'a [Arc<Port>] {
        &self.spec.ports
    }

    /// Sorted by label.
    pub fn hosts(&self) -> &'a [Host] {
        &self.entry.hosts
    }

    /// The endpoint host with this (lowercase) label.
    pub fn host(&self, label: &str) -> Option<&'a Host> {
        let hosts = self.hosts();
        hosts
            .binary_search_by(|h| (*h.label).cmp(label))
            .ok()
            .map(|i| &hosts[i])
    }

    /// `<label>.<service>…` of one of this Service's hosts (checked to fit when derived).
    pub fn host_name(&self, host: &Host) -> Name {
        dns_name(self.zone, self.key, Some(&host.label)).unwrap_or_else(|| self.zone.clone())
    }

    /// (IP, host index) pairs of the reverse zone: ClusterIPs → the Service ([`SERVICE_ITSELF`]),
    /// endpoint IPs → their host.
    pub(crate) fn ptr_entries(&self) -> impl Iterator<Item = (IpAddr, u32)> + 'a {
        let own: &'a [IpAddr] = match &self.spec.kind {
            Kind::ClusterIp(ips) => ips,
            _ => &[],
        };
        let hosts = self.hosts();
        own.iter()
            .map(|ip| (*ip, SERVICE_ITSELF))
            .chain(hosts.iter().enumerate().flat_map(|(i, h)| {
                let i = u32::try_from(i).unwrap_or(SERVICE_ITSELF);
                h.addresses.iter().map(move |ip| (*ip, i))
            }))
    }

    /// The SRV targets for `_<port>._<proto>`: (target, port number, target's addresses).
    pub fn srv_targets(&self, port: &str, proto: &str) -> Vec<(Name, u16, Vec<IpAddr>)> {
        let matches = |p: &&Arc<Port>| p.name == port && p.protocol == proto;
        match self.spec.kind {
            Kind::ClusterIp(_) => self
                .ports()
                .iter()
                .filter(matches)
                .map(|p| (self.name(), p.port, self.addresses().to_vec()))
                .collect(),
            // headless: one per endpoint, on the endpoint's (slice's) port, as CoreDNS does
            Kind::Headless => self
                .hosts()
                .iter()
                .flat_map(|h| {
                    h.ports
                        .iter()
                        .filter(matches)
                        .map(move |p| (self.host_name(h), p.port, h.addresses.to_vec()))
                })
                .collect(),
            Kind::ExternalName(_) => Vec::new(),
        }
    }

    /// Whether `_<proto>.<service>…` is an empty non-terminal (some named port uses the protocol).
    pub fn has_protocol(&self, proto: &str) -> bool {
        match self.spec.kind {
            Kind::ClusterIp(_) => self.ports().iter().any(|p| p.protocol == proto),
            Kind::Headless => self
                .hosts()
                .iter()
                .any(|h| h.ports.iter().any(|p| p.protocol == proto)),
            Kind::ExternalName(_) => false,
        }
    }
}

fn push_unique<T: PartialEq + Clone>(list: &mut Vec<T>, item: &T) {
    if !list.contains(item) {
        list.push(item.clone());
    }
}
