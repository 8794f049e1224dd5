//! Any bytes as a snapshot file: the bbolt reader, etcd's status and live-key reads over it, and the
//! format-detecting reader the CLI uses must return (an error or an answer), never panic or loop.
//! The unit test `garbage_truncation_and_flipped_bytes_are_errors_never_panics` checks the same on
//! mutations of a valid file.
#![no_main]

use kiln_common::bbolt::read::Db;
use kiln_common::{etcd_db, store_snapshot};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(db) = Db::open(data) {
        let _ = etcd_db::status(&db);
        let _ = etcd_db::revision(&db);
        let _ = etcd_db::live_keys(&db, b"", None);
        let _ = db.for_each_in_buckets::<kiln_common::bbolt::BboltError>(|_, e| {
            if let Some(inner) = e.bucket {
                let _ = db.for_each::<kiln_common::bbolt::BboltError>(inner, |_| Ok(()));
            }
            Ok(())
        });
    }
    let _ = store_snapshot::live_at_revision(data, b"/registry/");
});
