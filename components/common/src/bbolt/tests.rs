use super::read::{Bucket, Db, Entry};
use super::write::{write_all, Entries};
use super::*;

type Buckets = Vec<(&'static [u8], Entries)>;

fn sample() -> Buckets {
    let many: Entries = (0..3000u32)
        .map(|i| (i.to_be_bytes().to_vec(), vec![b'v'; (i % 97) as usize]))
        .collect();
    vec![
        (b"alarm", vec![]),
        (
            b"big",
            vec![(b"huge".to_vec(), vec![7u8; 3 * PAGE_SIZE + 5])],
        ),
        (b"key", many),
        (
            b"meta",
            vec![(b"consistent_index".to_vec(), 9u64.to_be_bytes().to_vec())],
        ),
    ]
}

fn read_back(data: &[u8]) -> Vec<(Vec<u8>, Entries)> {
    let db = Db::open(data).unwrap();
    let mut out: Vec<(Vec<u8>, Entries)> = Vec::new();
    db.for_each_in_buckets::<BboltError>(|name, e: Entry<'_>| {
        if out.last().map(|(n, _)| n.as_slice()) != Some(name) {
            out.push((name.to_vec(), vec![]));
        }
        out.last_mut()
            .unwrap()
            .1
            .push((e.key.to_vec(), e.value.to_vec()));
        Ok(())
    })
    .unwrap();
    out
}

#[test]
fn what_is_written_reads_back_in_order_with_the_trailer() {
    let buckets = sample();
    let data = write_all(PAGE_SIZE, &buckets).unwrap();
    assert!(is_bbolt(&data));
    assert_eq!(data.len() % 512, SHA256_LEN, "etcd's has-hash test");
    let (db_bytes, digest) = data.split_at(data.len() - SHA256_LEN);
    use sha2::Digest as _;
    assert_eq!(sha2::Sha256::digest(db_bytes).as_slice(), digest);
    let db = Db::open(&data).unwrap();
    assert_eq!(db.size(), db_bytes.len() as u64);
    let got = read_back(&data);
    // Empty buckets exist but list no entries.
    let want: Vec<_> = buckets
        .iter()
        .filter(|(_, e)| !e.is_empty())
        .map(|(n, e)| (n.to_vec(), e.clone()))
        .collect();
    assert_eq!(got, want);
    assert!(matches!(
        db.bucket(b"alarm").unwrap(),
        Some(Bucket::Paged(_))
    ));
    assert!(db.bucket(b"nope").unwrap().is_none());
}

#[test]
fn out_of_order_input_is_refused() {
    let bad: Buckets = vec![(b"b", vec![]), (b"a", vec![])];
    assert!(write_all(PAGE_SIZE, &bad).is_err());
    let bad: Buckets = vec![(b"a", vec![(b"2".to_vec(), vec![]), (b"1".to_vec(), vec![])])];
    assert!(write_all(PAGE_SIZE, &bad).is_err());
}

/// A tiny deterministic generator (no rand dependency for the always-built part).
fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

fn walk_all(data: &[u8]) {
    if let Ok(db) = Db::open(data) {
        let _ = db.for_each_in_buckets::<BboltError>(|_, e| {
            if let Some(inner) = e.bucket {
                let _ = db.for_each::<BboltError>(inner, |_| Ok(()));
            }
            Ok(())
        });
    }
}

#[test]
fn garbage_truncation_and_flipped_bytes_are_errors_never_panics() {
    let data = write_all(PAGE_SIZE, &sample()).unwrap();
    for cut in [
        0,
        1,
        16,
        20,
        100,
        PAGE_SIZE,
        PAGE_SIZE + 80,
        3 * PAGE_SIZE,
        data.len() / 2,
    ] {
        walk_all(&data[..cut]);
    }
    assert!(Db::open(&data[..100]).is_err());
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    for _ in 0..3000 {
        let mut d = data.clone();
        for _ in 0..(xorshift(&mut x) % 8 + 1) {
            let at = (xorshift(&mut x) as usize) % d.len();
            d[at] = xorshift(&mut x) as u8;
        }
        walk_all(&d);
    }
    for len in [0usize, 10, 64, 5000, 9000] {
        let junk: Vec<u8> = (0..len).map(|_| xorshift(&mut x) as u8).collect();
        walk_all(&junk);
    }
}

#[test]
fn a_page_reached_twice_is_an_error() {
    // Two buckets naming the same root page: each walk is fine alone; a branch naming a child twice
    // is refused (a cycle would be too).
    let data = write_all(PAGE_SIZE, &sample()).unwrap();
    let db = Db::open(&data).unwrap();
    let Some(Bucket::Paged(root)) = db.bucket(b"key").unwrap() else {
        panic!("key bucket is paged");
    };
    let mut d = data.clone();
    let at = root as usize * PAGE_SIZE;
    assert_eq!(
        u16::from_le_bytes([d[at + 8], d[at + 9]]),
        1,
        "a branch root"
    );
    let first_child = d[at + 16 + 8..at + 16 + 16].to_vec();
    d[at + 32 + 8..at + 32 + 16].copy_from_slice(&first_child);
    let db = Db::open(&d).unwrap();
    let err = db
        .for_each::<BboltError>(Bucket::Paged(root), |_| Ok(()))
        .unwrap_err();
    assert!(err.to_string().contains("reached twice"), "{err}");
}

/// The file as a [`write::Writer`] with pieces of at least `piece` bytes hands it over: the pieces.
fn pieces(buckets: &Buckets, piece: usize) -> Vec<Vec<u8>> {
    let mut planner = write::Planner::new(PAGE_SIZE);
    for (name, entries) in buckets {
        planner.bucket(name).unwrap();
        for (k, v) in entries {
            planner.entry(k, v.len()).unwrap();
        }
    }
    let mut out = Vec::new();
    let mut w = write::Writer::new(planner.finish().unwrap(), piece, |p| {
        out.push(p);
        true
    });
    for (name, entries) in buckets {
        w.bucket(name).unwrap();
        for (k, v) in entries {
            w.put(k, v).unwrap();
        }
    }
    w.finish().unwrap();
    out
}

#[test]
fn pieces_of_any_size_make_the_same_file() {
    // Leaves are filled in place in the piece being gathered: whatever the piece size (smaller than a
    // page, not a multiple of it, smaller than the overflowing entry), the pieces joined are the file.
    let buckets = sample();
    let whole = write_all(PAGE_SIZE, &buckets).unwrap();
    for piece in [1, 1000, PAGE_SIZE, 3 * PAGE_SIZE + 1, 256 << 10] {
        let got = pieces(&buckets, piece);
        let (last, full) = got.split_last().unwrap();
        assert!(full.iter().all(|p| p.len() >= piece), "piece {piece}");
        assert!(!last.is_empty());
        assert_eq!(got.concat(), whole, "piece {piece}");
    }
}

#[test]
fn a_reader_gone_ends_the_pieces() {
    let buckets = sample();
    let mut planner = write::Planner::new(PAGE_SIZE);
    for (name, entries) in &buckets {
        planner.bucket(name).unwrap();
        for (k, v) in entries {
            planner.entry(k, v.len()).unwrap();
        }
    }
    let mut taken = 0;
    let mut w = write::Writer::new(planner.finish().unwrap(), PAGE_SIZE, |_| {
        taken += 1;
        taken < 5
    });
    for (name, entries) in &buckets {
        w.bucket(name).unwrap();
        for (k, v) in entries {
            w.put(k, v).unwrap();
        }
    }
    assert!(!w.is_open());
    w.finish().unwrap();
    assert_eq!(taken, 5, "no piece after the sink said stop");
}
