//! Which key ranges a user may read or write: etcd's range_perm_cache as plain data.
//!
//! A permission with no range end names one key; with range end `\0` every key from its key on;
//! otherwise the half-open range [key, range end). A request for one key is allowed when some
//! permission names it or covers it; a request for a range only when the granted ranges together
//! cover all of it (etcd's interval tree `Contains`), so a prefix grant never lets a wider read in.

use serde::{Deserialize, Serialize};

/// authpb.Permission.Type values.
pub const READ: i32 = 0;
pub const WRITE: i32 = 1;
pub const READWRITE: i32 = 2;

/// What a request needs on its keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Read,
    Write,
}

/// One granted permission, as stored with its role.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Perm {
    pub perm_type: i32,
    pub key: Vec<u8>,
    pub range_end: Vec<u8>,
}

impl Perm {
    fn grants(&self, access: Access) -> bool {
        match access {
            Access::Read => self.perm_type == READ || self.perm_type == READWRITE,
            Access::Write => self.perm_type == WRITE || self.perm_type == READWRITE,
        }
    }
}

/// The end of a range: `None` is "no end" (etcd's `\0`).
fn end_of(range_end: &[u8]) -> Option<&[u8]> {
    (range_end != [0]).then_some(range_end)
}

/// Whether `perms` grant `access` on `key` (and `range_end`, as in a RangeRequest).
pub fn permits<'a>(
    perms: impl IntoIterator<Item = &'a Perm>,
    access: Access,
    key: &[u8],
    range_end: &[u8],
) -> bool {
    let granted: Vec<&Perm> = perms.into_iter().filter(|p| p.grants(access)).collect();
    if range_end.is_empty() {
        return granted.iter().any(|p| {
            if p.range_end.is_empty() {
                p.key == key
            } else {
                p.key.as_slice() <= key && end_of(&p.range_end).is_none_or(|e| key < e)
            }
        });
    }
    // Ranges: sweep the granted intervals in key order, extending what is covered from `key`.
    let mut intervals: Vec<(&[u8], Option<&[u8]>)> = granted
        .iter()
        .filter(|p| !p.range_end.is_empty())
        .map(|p| (p.key.as_slice(), end_of(&p.range_end)))
        .collect();
    intervals.sort();
    let want = end_of(range_end);
    let mut covered: Vec<u8> = key.to_vec();
    for (start, end) in intervals {
        if start > covered.as_slice() {
            break;
        }
        match end {
            None => return true,
            Some(e) if e > covered.as_slice() => covered = e.to_vec(),
            Some(_) => {}
        }
        if want.is_some_and(|w| covered.as_slice() >= w) {
            return true;
        }
    }
    want.is_some_and(|w| covered.as_slice() >= w)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn perm(perm_type: i32, key: &str, end: &[u8]) -> Perm {
        Perm {
            perm_type,
            key: key.as_bytes().to_vec(),
            range_end: end.to_vec(),
        }
    }

    /// (granted, access, request key, request range end, allowed)
    type Row<'a> = (Vec<&'a Perm>, Access, &'a str, &'a [u8], bool);

    #[test]
    fn table() {
        let prefix_foo = perm(READ, "foo", b"fop");
        let key_bar = perm(READWRITE, "bar", b"");
        let from_x = perm(WRITE, "x", b"\0");
        let a_c = perm(READ, "a", b"c");
        let c_e = perm(READ, "c", b"e");
        let cases: Vec<Row> = vec![
            (vec![&prefix_foo], Access::Read, "foo", b"", true),
            (vec![&prefix_foo], Access::Read, "foo/a", b"", true),
            (vec![&prefix_foo], Access::Write, "foo/a", b"", false),
            (vec![&prefix_foo], Access::Read, "fop", b"", false),
            (vec![&prefix_foo], Access::Read, "foo", b"fop", true),
            (vec![&prefix_foo], Access::Read, "foo/", b"foo0", true),
            // Wider than the grant.
            (vec![&prefix_foo], Access::Read, "fo", b"fop", false),
            (vec![&prefix_foo], Access::Read, "foo", b"\0", false),
            (vec![&prefix_foo], Access::Read, "", b"\0", false),
            // One key: that key only, read and write.
            (vec![&key_bar], Access::Read, "bar", b"", true),
            (vec![&key_bar], Access::Write, "bar", b"", true),
            (vec![&key_bar], Access::Write, "bar0", b"", false),
            (vec![&key_bar], Access::Read, "bar", b"bas", false),
            // From a key on.
            (vec![&from_x], Access::Write, "zzz", b"", true),
            (vec![&from_x], Access::Write, "x", b"\0", true),
            (vec![&from_x], Access::Write, "w", b"", false),
            (vec![&from_x], Access::Read, "x", b"", false),
            // Adjacent grants cover a range together; a gap does not.
            (vec![&c_e, &a_c], Access::Read, "a", b"e", true),
            (vec![&a_c], Access::Read, "a", b"e", false),
            (vec![&a_c, &from_x], Access::Read, "a", b"z", false),
            (vec![], Access::Read, "a", b"", false),
        ];
        for (granted, access, key, end, allowed) in cases {
            assert_eq!(
                permits(granted.iter().copied(), access, key.as_bytes(), end),
                allowed,
                "{access:?} {key:?}..{end:?} with {granted:?}"
            );
        }
    }
}
