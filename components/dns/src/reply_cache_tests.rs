use super::*;

fn sent(bytes: &[u8], rcode: ResponseCode) -> Sent {
    Sent {
        bytes: bytes.to_vec(),
        qtype: Some(RecordType::A),
        rcode,
    }
}

/// A 12-byte header with `id`, then `body`.
fn request(id: u16, body: &[u8]) -> Vec<u8> {
    let mut r = id.to_be_bytes().to_vec();
    r.extend_from_slice(&[1, 0, 0, 1, 0, 0, 0, 0, 0, 0]);
    r.extend_from_slice(body);
    r
}

#[test]
fn a_hit_is_the_stored_reply_with_the_requests_id() {
    let c = ReplyCache::new(64);
    let reply = [0xAA, 0xBB, 0x81, 0x80, 9, 9, 9];
    c.insert(
        3,
        &request(0xAABB, b"q1"),
        &sent(&reply, ResponseCode::NXDomain),
    );
    let hit = c.get(3, &request(0x0102, b"q1")).expect("kept");
    assert_eq!(hit.bytes, [0x01, 0x02, 0x81, 0x80, 9, 9, 9]);
    assert_eq!(hit.rcode, ResponseCode::NXDomain);
    assert_eq!(hit.qtype, Some(RecordType::A));
    // anything else in the request differs: another entry
    assert!(c.get(3, &request(0x0102, b"q2")).is_none());
    let mut other_flags = request(0x0102, b"q1");
    other_flags[2] = 0;
    assert!(
        c.get(3, &other_flags).is_none(),
        "flags are part of the key"
    );
}

#[test]
fn a_new_index_generation_empties_it() {
    let c = ReplyCache::new(64);
    c.insert(
        3,
        &request(1, b"q"),
        &sent(&[0, 1, 2], ResponseCode::NoError),
    );
    assert!(
        c.get(4, &request(1, b"q")).is_none(),
        "kept for generation 3"
    );
    c.insert(
        4,
        &request(1, b"r"),
        &sent(&[0, 1, 2], ResponseCode::NoError),
    );
    assert!(c.get(4, &request(1, b"q")).is_none());
    // a reply computed at an older generation than the shard's is not kept
    c.insert(
        2,
        &request(1, b"r"),
        &sent(&[0, 1, 9], ResponseCode::NoError),
    );
    assert_eq!(
        c.get(4, &request(1, b"r")).map(|s| s.bytes),
        Some(vec![0, 1, 2])
    );
}

#[test]
fn bounded_and_short_or_long_requests_are_not_kept() {
    let c = ReplyCache::new(SHARDS * 2);
    for i in 0..1000u32 {
        c.insert(
            1,
            &request(1, &i.to_be_bytes()),
            &sent(&[0, 1], ResponseCode::NoError),
        );
    }
    assert!(c.len() <= SHARDS * 2, "{} entries", c.len());
    let c = ReplyCache::new(64);
    c.insert(1, &[0u8; 11], &sent(&[0, 1], ResponseCode::NoError));
    c.insert(
        1,
        &request(1, &[7; MAX_KEY]),
        &sent(&[0, 1], ResponseCode::NoError),
    );
    assert!(c.is_empty());
    let off = ReplyCache::new(0);
    off.insert(1, &request(1, b"q"), &sent(&[0, 1], ResponseCode::NoError));
    assert!(off.get(1, &request(1, b"q")).is_none());
}
