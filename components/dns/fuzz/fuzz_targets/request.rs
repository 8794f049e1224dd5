//! Any bytes, as a UDP datagram and as a TCP message, through the function the DNS loops call.
//! Checks what the unit test `malformed_truncated_and_random_packets_never_crash` checks: no panic,
//! a query header always gets a well-formed reply of the same id that fits the transport.
#![no_main]

use std::sync::OnceLock;

use hickory_proto::op::{Message, MessageType};
use hickory_proto::rr::Name;
use kiln_dns::model::{
    EndpointInfo, Port, ServiceInfo, ServiceKey, ServiceKind, SliceInfo, SliceKey,
};
use kiln_dns::{answer_bytes, Index, Reply, Transport, ZoneSettings};
use libfuzzer_sys::fuzz_target;

/// A ClusterIP Service with a named port, a headless one with endpoints, and an ExternalName, so
/// inputs near real questions reach every answering path.
fn index() -> &'static Index {
    static INDEX: OnceLock<Index> = OnceLock::new();
    INDEX.get_or_init(|| {
        let mut idx = Index::new(ZoneSettings::default());
        let port = Port {
            name: "http".into(),
            protocol: "tcp".into(),
            port: 80,
        };
        idx.upsert_service(ServiceInfo {
            key: ServiceKey::new("default", "web"),
            kind: ServiceKind::ClusterIp(vec![
                "10.96.0.10".parse().unwrap(),
                "fd00::10".parse().unwrap(),
            ]),
            ports: vec![port.clone()],
            publish_not_ready: false,
        });
        idx.upsert_service(ServiceInfo {
            key: ServiceKey::new("default", "pg"),
            kind: ServiceKind::Headless,
            ports: vec![port.clone()],
            publish_not_ready: false,
        });
        idx.upsert_slice(SliceInfo {
            key: SliceKey {
                namespace: "default".into(),
                name: "pg-1".into(),
            },
            service: ServiceKey::new("default", "pg"),
            endpoints: (1..=40)
                .map(|i| EndpointInfo {
                    addresses: vec![format!("10.244.1.{i}").parse().unwrap()],
                    hostname: (i % 2 == 0).then(|| format!("pg-{i}")),
                    ready: i % 7 != 0,
                })
                .collect(),
            ports: vec![port],
        });
        idx.upsert_service(ServiceInfo {
            key: ServiceKey::new("default", "ext"),
            kind: ServiceKind::ExternalName(Name::from_ascii("www.example.com.").unwrap()),
            ports: vec![],
            publish_not_ready: false,
        });
        idx
    })
}

fuzz_target!(|data: &[u8]| {
    for (t, cap) in [(Transport::Udp, 4096), (Transport::Tcp, 65535)] {
        match answer_bytes(index(), data, t) {
            Reply::Send(s) => {
                assert!(s.bytes.len() <= cap);
                let m = Message::from_vec(&s.bytes).expect("our replies parse");
                assert_eq!(m.metadata.message_type, MessageType::Response);
                assert_eq!(m.metadata.id.to_be_bytes(), data[..2]);
            }
            Reply::Drop => assert!(data.len() < 12 || data[2] & 0x80 != 0),
            Reply::Forward(p) => assert_eq!(p.request.queries.len(), 1),
        }
    }
});
