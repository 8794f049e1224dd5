//! How much heap the index holds for the benchmark's cluster (bench/dns.sh: 10 000 Services in 4
//! namespaces, ~70% ClusterIP with a named port, ~20% headless with 3 ready endpoints, ~10%
//! ExternalName), counted by a global allocator wrapper: what part of kiln-dns's RSS is the index
//! itself (docs/benchmarks.md "Cluster DNS"). Its own test binary, so no other test allocates
//! while it counts.

use std::alloc::{GlobalAlloc, Layout, System};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicIsize, Ordering};

use hickory_proto::rr::Name;
use kiln_dns::model::{
    EndpointInfo, Port, ServiceInfo, ServiceKey, ServiceKind, SliceInfo, SliceKey,
};
use kiln_dns::{Index, ZoneSettings};

struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        LIVE.fetch_add(l.size() as isize, Ordering::Relaxed);
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size() as isize, Ordering::Relaxed);
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        LIVE.fetch_add(new as isize - l.size() as isize, Ordering::Relaxed);
        unsafe { System.realloc(p, l, new) }
    }
}

#[global_allocator]
static A: Counting = Counting;

fn http() -> Port {
    Port {
        name: "http".into(),
        protocol: "tcp".into(),
        port: 80,
    }
}

/// The benchmark's cluster of `n` Services, as the watches hand it to the index.
fn build(n: usize) -> Index {
    let mut idx = Index::new(ZoneSettings::default());
    let mut services = Vec::new();
    let mut slices = Vec::new();
    for i in 0..n {
        let (ns, name) = (format!("dns-{}", i % 4), format!("svc-{i:05}"));
        let key = ServiceKey::new(&ns, &name);
        let kind = match i % 10 {
            0..=6 => {
                ServiceKind::ClusterIp(vec![IpAddr::V4(Ipv4Addr::from(0x0A60_0000 + i as u32))])
            }
            7 | 8 => ServiceKind::Headless,
            _ => ServiceKind::ExternalName(
                Name::from_ascii(format!("ext-{}.example.test.", i / 10)).unwrap(),
            ),
        };
        if kind == ServiceKind::Headless {
            slices.push(SliceInfo {
                key: SliceKey {
                    namespace: ns.clone(),
                    name: format!("{name}-abcde"),
                },
                service: key.clone(),
                endpoints: (0..3)
                    .map(|k| EndpointInfo {
                        addresses: vec![IpAddr::V4(Ipv4Addr::from(
                            0x0A80_0000 + (i * 3 + k + 1) as u32,
                        ))],
                        hostname: Some(format!("ep-{k}")),
                        ready: true,
                    })
                    .collect(),
                ports: vec![http()],
            });
        }
        services.push(ServiceInfo {
            key,
            ports: if matches!(kind, ServiceKind::ExternalName(_)) {
                vec![]
            } else {
                vec![http()]
            },
            kind,
            publish_not_ready: false,
        });
    }
    idx.replace_services(services);
    idx.replace_slices(slices);
    idx
}

#[test]
fn index_heap_at_10000_services() {
    let before = LIVE.load(Ordering::Relaxed);
    let idx = build(10_000);
    let bytes = LIVE.load(Ordering::Relaxed) - before;
    let mib = bytes as f64 / (1024.0 * 1024.0);
    println!(
        "index of {} Services: {mib:.1} MiB live heap ({} bytes per Service)",
        idx.stats().services,
        bytes / 10_000
    );
    assert_eq!(idx.stats().services, 10_000);
    assert_eq!(idx.stats().slices, 2_000);
    // The index before issue #22 took 2 640 bytes per Service (25.2 MiB): the Service key kept 3–4
    // times, a hickory Name per Service, endpoint and PTR entry, per-Service maps. The compact one
    // keeps each key once and builds names per query; this ceiling is what keeps it compact.
    let per_service = bytes / 10_000;
    assert!(
        per_service < 1_200,
        "index takes {per_service} bytes per Service ({mib:.1} MiB)"
    );
    drop(idx);
}
