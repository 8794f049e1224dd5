//! kiln-store's auth record (`auth::state::AuthState`, one JSON value in `sm_meta`) as etcd's auth
//! buckets and back: `auth` holds `authEnabled` (one byte, 1 or 0) and `authRevision` (8 bytes
//! big-endian), `authUsers` maps a name to an `authpb.User` (name 1, password 2 — the bcrypt hash —,
//! roles 3, options 4 { no_password 1 }), `authRoles` a name to an `authpb.Role` (name 1,
//! keyPermission 2 { permType 1, key 2, range_end 3 }), as etcd's auth store keeps them.

use kiln_common::etcd_db::put_varint;

use super::{Entries, EtcdSnapshotError};
use crate::auth::perm::Perm;
use crate::auth::state::{AuthState, Role, User};

pub const ENABLED: &[u8] = b"authEnabled";
pub const REVISION: &[u8] = b"authRevision";

fn bytes_field(out: &mut Vec<u8>, field: u8, bytes: &[u8]) {
    out.push(field << 3 | 2);
    put_varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// The `auth`, `authUsers` and `authRoles` entries of `state`.
pub fn to_buckets(state: &AuthState) -> (Entries, Entries, Entries) {
    let auth = vec![
        (ENABLED.to_vec(), vec![u8::from(state.enabled)]),
        (REVISION.to_vec(), state.revision.to_be_bytes().to_vec()),
    ];
    let users = state
        .users
        .iter()
        .map(|(name, u)| {
            let mut v = Vec::new();
            bytes_field(&mut v, 1, name.as_bytes());
            if !u.password.is_empty() {
                bytes_field(&mut v, 2, u.password.as_bytes());
            }
            for r in &u.roles {
                bytes_field(&mut v, 3, r.as_bytes());
            }
            if u.no_password {
                bytes_field(&mut v, 4, &[1 << 3, 1]);
            }
            (name.as_bytes().to_vec(), v)
        })
        .collect();
    let roles = state
        .roles
        .iter()
        .map(|(name, r)| {
            let mut v = Vec::new();
            bytes_field(&mut v, 1, name.as_bytes());
            for p in &r.perms {
                let mut perm = Vec::new();
                if p.perm_type != 0 {
                    perm.push(1 << 3);
                    put_varint(&mut perm, p.perm_type as i64 as u64);
                }
                if !p.key.is_empty() {
                    bytes_field(&mut perm, 2, &p.key);
                }
                if !p.range_end.is_empty() {
                    bytes_field(&mut perm, 3, &p.range_end);
                }
                bytes_field(&mut v, 2, &perm);
            }
            (name.as_bytes().to_vec(), v)
        })
        .collect();
    (auth, users, roles)
}

/// Protobuf fields of one message: (field number, varint value or bytes).
fn fields(mut buf: &[u8]) -> Option<Vec<(u64, u64, &[u8])>> {
    let mut out = Vec::new();
    while !buf.is_empty() {
        let tag = varint(&mut buf)?;
        match tag & 7 {
            0 => out.push((tag >> 3, varint(&mut buf)?, &[][..])),
            2 => {
                let len = usize::try_from(varint(&mut buf)?).ok()?;
                let bytes = buf.get(..len)?;
                buf = &buf[len..];
                out.push((tag >> 3, 0, bytes));
            }
            1 => buf = buf.get(8..)?,
            5 => buf = buf.get(4..)?,
            _ => return None,
        }
    }
    Some(out)
}

fn varint(buf: &mut &[u8]) -> Option<u64> {
    let mut v = 0u64;
    for (i, &b) in buf.iter().enumerate().take(10) {
        v |= u64::from(b & 0x7F) << (7 * i);
        if b & 0x80 == 0 {
            *buf = &buf[i + 1..];
            return Some(v);
        }
    }
    None
}

fn text(bytes: &[u8]) -> Result<String, EtcdSnapshotError> {
    String::from_utf8(bytes.to_vec())
        .map_err(|_| EtcdSnapshotError::Corrupt("an auth name is not UTF-8".into()))
}

/// The auth state the three buckets hold (`None`: no auth bucket entries, auth never touched).
pub fn from_buckets(
    auth: &[(&[u8], &[u8])],
    users: &[(&[u8], &[u8])],
    roles: &[(&[u8], &[u8])],
) -> Result<Option<AuthState>, EtcdSnapshotError> {
    if auth.is_empty() && users.is_empty() && roles.is_empty() {
        return Ok(None);
    }
    let bad = |what: &str| EtcdSnapshotError::Corrupt(format!("auth: {what}"));
    let mut state = AuthState::default();
    for (k, v) in auth {
        match *k {
            ENABLED => state.enabled = v.first() == Some(&1),
            REVISION => {
                state.revision = u64::from_be_bytes(
                    (*v).try_into()
                        .map_err(|_| bad("authRevision is not 8 bytes"))?,
                )
            }
            _ => {}
        }
    }
    for (name, v) in users {
        let mut user = User {
            password: String::new(),
            roles: Vec::new(),
            no_password: false,
        };
        for (field, _, bytes) in fields(v).ok_or_else(|| bad("a user is no authpb.User"))? {
            match field {
                2 => user.password = text(bytes)?,
                3 => user.roles.push(text(bytes)?),
                4 => {
                    let opts = fields(bytes).ok_or_else(|| bad("user options"))?;
                    user.no_password = opts.iter().any(|(f, n, _)| *f == 1 && *n != 0);
                }
                _ => {}
            }
        }
        user.roles.sort();
        state.users.insert(text(name)?, user);
    }
    for (name, v) in roles {
        let mut role = Role::default();
        for (field, _, bytes) in fields(v).ok_or_else(|| bad("a role is no authpb.Role"))? {
            if field != 2 {
                continue;
            }
            let mut perm = Perm {
                perm_type: 0,
                key: Vec::new(),
                range_end: Vec::new(),
            };
            for (f, n, b) in fields(bytes).ok_or_else(|| bad("a permission"))? {
                match f {
                    1 => perm.perm_type = n as i32,
                    2 => perm.key = b.to_vec(),
                    3 => perm.range_end = b.to_vec(),
                    _ => {}
                }
            }
            role.perms.push(perm);
        }
        state.roles.insert(text(name)?, role);
    }
    Ok(Some(state))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auth_state_round_trips_through_etcds_buckets() {
        let mut state = AuthState {
            enabled: true,
            revision: 7,
            ..AuthState::default()
        };
        state.users.insert(
            "root".into(),
            User {
                password: "$2a$10$hash".into(),
                roles: vec!["root".into()],
                no_password: false,
            },
        );
        state.users.insert(
            "cert-only".into(),
            User {
                password: String::new(),
                roles: vec!["a".into(), "b".into()],
                no_password: true,
            },
        );
        state.roles.insert(
            "a".into(),
            Role {
                perms: vec![Perm {
                    perm_type: 2,
                    key: b"/k".to_vec(),
                    range_end: b"/l".to_vec(),
                }],
            },
        );
        state.roles.insert("root".into(), Role::default());
        let (auth, users, roles) = to_buckets(&state);
        fn borrow(e: &Entries) -> Vec<(&[u8], &[u8])> {
            e.iter()
                .map(|(k, v)| (k.as_slice(), v.as_slice()))
                .collect()
        }
        let back = from_buckets(&borrow(&auth), &borrow(&users), &borrow(&roles))
            .unwrap()
            .unwrap();
        assert_eq!(back, state);
        assert!(from_buckets(&[], &[], &[]).unwrap().is_none());
    }
}
