//! Turning a key scan into etcd's RangeResponse: filters, sort, limit, `more`, keys_only.

use etcd_client::proto::{PbKeyValue, PbRangeRequest, PbRangeResponse, PbResponseHeader};

use crate::storage::mvcc::read::Scan;

// etcd's RangeRequest enum values (not re-exported by etcd-client).
const SORT_NONE: i32 = 0;
const SORT_ASCEND: i32 = 1;
const SORT_DESCEND: i32 = 2;
const TARGET_KEY: i32 = 0;
const TARGET_VERSION: i32 = 1;
const TARGET_CREATE: i32 = 2;
const TARGET_MOD: i32 = 3;
const TARGET_VALUE: i32 = 4;

fn needs_full_scan(req: &PbRangeRequest) -> bool {
    req.sort_order != SORT_NONE
        || req.sort_target != TARGET_KEY
        || req.min_mod_revision != 0
        || req.max_mod_revision != 0
        || req.min_create_revision != 0
        || req.max_create_revision != 0
}

/// How many values the scan must decode: `Some(n)` = the first n, `None` = all.
pub fn scan_limit(req: &PbRangeRequest) -> Option<usize> {
    if req.count_only {
        Some(0)
    } else if needs_full_scan(req) || req.limit <= 0 {
        None
    } else {
        Some(req.limit as usize)
    }
}

/// Builds the response like etcd 3.4's applier: filters and sort apply to the scanned keys,
/// `count` is the number of keys in the range, `more` says the limit cut the result.
pub fn build_response(req: &PbRangeRequest, scan: Scan, header_revision: i64) -> PbRangeResponse {
    let Scan { mut kvs, count } = scan;
    if req.count_only {
        kvs.clear();
    }
    kvs.retain(|kv| {
        (req.max_mod_revision == 0 || kv.mod_revision <= req.max_mod_revision)
            && (req.min_mod_revision == 0 || kv.mod_revision >= req.min_mod_revision)
            && (req.max_create_revision == 0 || kv.create_revision <= req.max_create_revision)
            && (req.min_create_revision == 0 || kv.create_revision >= req.min_create_revision)
    });
    let mut order = req.sort_order;
    if req.sort_target != TARGET_KEY && order == SORT_NONE {
        // etcd sorts ascending by default only when the target is not the key.
        order = SORT_ASCEND;
    }
    if order == SORT_ASCEND || order == SORT_DESCEND {
        sort_kvs(&mut kvs, req.sort_target);
        if order == SORT_DESCEND {
            kvs.reverse();
        }
    }
    let mut more = false;
    if req.limit > 0 && kvs.len() > req.limit as usize {
        kvs.truncate(req.limit as usize);
        more = true;
    }
    if req.limit > 0 && !req.count_only && !needs_full_scan(req) && count > req.limit {
        // The scan stopped decoding at the limit; the count says more keys exist.
        more = true;
    }
    if req.keys_only {
        for kv in &mut kvs {
            kv.value.clear();
        }
    }
    PbRangeResponse {
        header: Some(PbResponseHeader {
            revision: header_revision,
            ..Default::default()
        }),
        kvs,
        more,
        count,
    }
}

fn sort_kvs(kvs: &mut [PbKeyValue], target: i32) {
    match target {
        TARGET_VERSION => kvs.sort_by_key(|kv| kv.version),
        TARGET_CREATE => kvs.sort_by_key(|kv| kv.create_revision),
        TARGET_MOD => kvs.sort_by_key(|kv| kv.mod_revision),
        TARGET_VALUE => kvs.sort_by(|a, b| a.value.cmp(&b.value)),
        _ => kvs.sort_by(|a, b| a.key.cmp(&b.key)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(key: &str, version: i64) -> PbKeyValue {
        PbKeyValue {
            key: key.as_bytes().to_vec(),
            value: b"v".to_vec(),
            version,
            ..Default::default()
        }
    }

    #[test]
    fn limit_sets_more_and_keeps_count() {
        let req = PbRangeRequest {
            limit: 2,
            ..Default::default()
        };
        let scan = Scan {
            kvs: vec![kv("a", 1), kv("b", 1)],
            count: 3,
        };
        let resp = build_response(&req, scan, 7);
        assert_eq!(resp.kvs.len(), 2);
        assert!(resp.more);
        assert_eq!(resp.count, 3);
        assert_eq!(resp.header.unwrap().revision, 7);
    }

    #[test]
    fn sort_by_version_descending_then_limit() {
        let req = PbRangeRequest {
            limit: 1,
            sort_order: SORT_DESCEND,
            sort_target: TARGET_VERSION,
            keys_only: true,
            ..Default::default()
        };
        let scan = Scan {
            kvs: vec![kv("a", 1), kv("b", 3), kv("c", 2)],
            count: 3,
        };
        let resp = build_response(&req, scan, 1);
        assert_eq!(resp.kvs.len(), 1);
        assert_eq!(resp.kvs[0].key, b"b");
        assert!(resp.kvs[0].value.is_empty());
        assert!(resp.more);
    }
}
