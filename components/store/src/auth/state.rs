//! The auth store's state — users, roles, the enabled flag and the auth revision — and how each
//! replicated command changes it (etcd's auth/store.go rules). Deterministic: every member
//! computes the same state from the same commands. Kept as one JSON record in the state
//! machine's metadata family, so it is written in the same batch as the entry that changed it
//! and travels in Raft snapshots with the rest of the state machine.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::auth::error::AuthError;
use crate::auth::perm::{self, Access, Perm};
use crate::command::auth::{auth_command::Cmd, AuthApplied};

/// The root user and role (root role: every permission; enabling auth needs root with it).
pub const ROOT: &str = "root";

/// sm_meta key of the auth record.
pub const META_AUTH: &[u8] = b"auth";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct User {
    /// bcrypt hash; empty for a no-password user (client-certificate auth only).
    pub password: String,
    /// Sorted, as etcd keeps them.
    pub roles: Vec<String>,
    pub no_password: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Role {
    /// Sorted by key then range end, as etcd keeps them.
    pub perms: Vec<Perm>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuthState {
    pub enabled: bool,
    /// Bumped by every change; etcd starts at 1.
    pub revision: u64,
    pub users: BTreeMap<String, User>,
    pub roles: BTreeMap<String, Role>,
}

impl Default for AuthState {
    fn default() -> Self {
        Self {
            enabled: false,
            revision: 1,
            users: BTreeMap::new(),
            roles: BTreeMap::new(),
        }
    }
}

impl AuthState {
    pub fn has_root_role(&self, user: &str) -> bool {
        self.users
            .get(user)
            .is_some_and(|u| u.roles.iter().any(|r| r == ROOT))
    }

    /// etcd's isOpPermitted for an authenticated user name.
    pub fn check(
        &self,
        user: &str,
        access: Access,
        key: &[u8],
        range_end: &[u8],
    ) -> Result<(), AuthError> {
        if !self.enabled {
            return Ok(());
        }
        if user.is_empty() {
            return Err(AuthError::UserEmpty);
        }
        let Some(u) = self.users.get(user) else {
            return Err(AuthError::PermissionDenied);
        };
        if u.roles.iter().any(|r| r == ROOT) {
            return Ok(());
        }
        let perms = u
            .roles
            .iter()
            .filter_map(|r| self.roles.get(r))
            .flat_map(|r| r.perms.iter());
        if perm::permits(perms, access, key, range_end) {
            Ok(())
        } else {
            Err(AuthError::PermissionDenied)
        }
    }

    /// etcd's IsAdminPermitted.
    pub fn check_admin(&self, user: &str) -> Result<(), AuthError> {
        if !self.enabled {
            return Ok(());
        }
        if user.is_empty() {
            return Err(AuthError::UserEmpty);
        }
        if !self.users.contains_key(user) {
            return Err(AuthError::UserNotFound);
        }
        if !self.has_root_role(user) {
            return Err(AuthError::PermissionDenied);
        }
        Ok(())
    }

    /// Applies one replicated command. Every change bumps the revision; a command that
    /// changes nothing (enable twice, a role granted again) does not, as in etcd. Nor does
    /// enabling auth (etcd's AuthEnable keeps the revision; AuthDisable bumps it): the
    /// revision is in every JWT token's claims, so clients see the same numbers as etcd's.
    pub fn apply(&mut self, cmd: &Cmd) -> Result<AuthApplied, AuthError> {
        let changed = match cmd {
            Cmd::Enable(_) => {
                if self.enabled {
                    false
                } else {
                    let root = self.users.get(ROOT).ok_or(AuthError::RootUserNotExist)?;
                    if !root.roles.iter().any(|r| r == ROOT) {
                        return Err(AuthError::RootRoleNotExist);
                    }
                    self.enabled = true;
                    false
                }
            }
            Cmd::Disable(_) => {
                let was = self.enabled;
                self.enabled = false;
                was
            }
            Cmd::UserAdd(r) => {
                if r.name.is_empty() {
                    return Err(AuthError::UserEmpty);
                }
                if self.users.contains_key(&r.name) {
                    return Err(AuthError::UserAlreadyExist);
                }
                let no_password = r.options.as_ref().is_some_and(|o| o.no_password);
                self.users.insert(
                    r.name.clone(),
                    User {
                        password: if no_password {
                            String::new()
                        } else {
                            r.hashed_password.clone()
                        },
                        roles: Vec::new(),
                        no_password,
                    },
                );
                true
            }
            Cmd::UserDelete(r) => {
                if self.enabled && r.name == ROOT {
                    return Err(AuthError::InvalidAuthMgmt);
                }
                self.users.remove(&r.name).ok_or(AuthError::UserNotFound)?;
                true
            }
            Cmd::UserChangePassword(r) => {
                let u = self.users.get_mut(&r.name).ok_or(AuthError::UserNotFound)?;
                u.password = r.hashed_password.clone();
                true
            }
            Cmd::UserGrantRole(r) => {
                if r.role != ROOT && !self.roles.contains_key(&r.role) {
                    // etcd looks the user up first.
                    if !self.users.contains_key(&r.user) {
                        return Err(AuthError::UserNotFound);
                    }
                    return Err(AuthError::RoleNotFound);
                }
                let u = self.users.get_mut(&r.user).ok_or(AuthError::UserNotFound)?;
                match u.roles.binary_search(&r.role) {
                    Ok(_) => false,
                    Err(at) => {
                        u.roles.insert(at, r.role.clone());
                        true
                    }
                }
            }
            Cmd::UserRevokeRole(r) => {
                if self.enabled && r.name == ROOT && r.role == ROOT {
                    return Err(AuthError::InvalidAuthMgmt);
                }
                let u = self.users.get_mut(&r.name).ok_or(AuthError::UserNotFound)?;
                let at = u
                    .roles
                    .iter()
                    .position(|x| *x == r.role)
                    .ok_or(AuthError::RoleNotGranted)?;
                u.roles.remove(at);
                true
            }
            Cmd::RoleAdd(r) => {
                if r.name.is_empty() {
                    return Err(AuthError::RoleEmpty);
                }
                if self.roles.contains_key(&r.name) {
                    return Err(AuthError::RoleAlreadyExist);
                }
                self.roles.insert(r.name.clone(), Role::default());
                true
            }
            Cmd::RoleDelete(r) => {
                if self.enabled && r.role == ROOT {
                    return Err(AuthError::InvalidAuthMgmt);
                }
                self.roles.remove(&r.role).ok_or(AuthError::RoleNotFound)?;
                // etcd takes the role away from every user that had it.
                for u in self.users.values_mut() {
                    u.roles.retain(|x| *x != r.role);
                }
                true
            }
            Cmd::RoleGrantPermission(r) => {
                let p = r.perm.as_ref().ok_or(AuthError::PermissionNotGiven)?;
                let role = self.roles.get_mut(&r.name).ok_or(AuthError::RoleNotFound)?;
                let granted = Perm {
                    perm_type: p.perm_type,
                    key: p.key.clone(),
                    range_end: p.range_end.clone(),
                };
                match role.perms.binary_search_by(|x| {
                    (&x.key, &x.range_end).cmp(&(&granted.key, &granted.range_end))
                }) {
                    // The same range granted again: its type is replaced.
                    Ok(at) => role.perms[at].perm_type = granted.perm_type,
                    Err(at) => role.perms.insert(at, granted),
                }
                true
            }
            Cmd::RoleRevokePermission(r) => {
                let role = self.roles.get_mut(&r.role).ok_or(AuthError::RoleNotFound)?;
                let at = role
                    .perms
                    .iter()
                    .position(|p| p.key == r.key && p.range_end == r.range_end)
                    .ok_or(AuthError::PermissionNotGranted)?;
                role.perms.remove(at);
                true
            }
            Cmd::Authenticate(a) => {
                if !self.enabled {
                    return Err(AuthError::AuthNotEnabled);
                }
                if a.checked_revision != self.revision {
                    return Err(AuthError::AuthOldRevision);
                }
                if !self.users.contains_key(&a.name) {
                    return Err(AuthError::AuthFailed);
                }
                return Ok(AuthApplied {
                    auth_revision: self.revision,
                    token: a.token.clone(),
                });
            }
        };
        if changed {
            self.revision += 1;
        }
        Ok(AuthApplied {
            auth_revision: self.revision,
            token: String::new(),
        })
    }
}

#[cfg(test)]
mod tests {
    use etcd_client::proto::{
        PbAuthEnableRequest, PbAuthRoleAddRequest, PbAuthUserAddRequest, PbAuthUserGrantRoleRequest,
    };

    use super::*;

    fn user_add(name: &str) -> Cmd {
        Cmd::UserAdd(PbAuthUserAddRequest {
            name: name.into(),
            hashed_password: "h".into(),
            ..Default::default()
        })
    }

    #[test]
    fn enable_needs_root_with_the_root_role_and_every_change_bumps_the_revision() {
        let mut s = AuthState::default();
        let enable = Cmd::Enable(PbAuthEnableRequest {});
        assert_eq!(s.apply(&enable), Err(AuthError::RootUserNotExist));
        s.apply(&user_add(ROOT)).unwrap();
        assert_eq!(s.revision, 2);
        assert_eq!(s.apply(&enable), Err(AuthError::RootRoleNotExist));
        let grant = Cmd::UserGrantRole(PbAuthUserGrantRoleRequest {
            user: ROOT.into(),
            role: ROOT.into(),
        });
        s.apply(&grant).unwrap();
        // Granted again: nothing changes, no new revision.
        assert_eq!(s.apply(&grant).unwrap().auth_revision, 3);
        // Enabling keeps the revision, as etcd's AuthEnable does; disabling bumps it.
        assert_eq!(s.apply(&enable).unwrap().auth_revision, 3);
        assert!(s.enabled);
        assert_eq!(
            s.apply(&Cmd::Disable(Default::default()))
                .unwrap()
                .auth_revision,
            4
        );
        assert_eq!(s.apply(&enable).unwrap().auth_revision, 4);
        assert_eq!(s.apply(&user_add(ROOT)), Err(AuthError::UserAlreadyExist));
        assert_eq!(s.apply(&user_add("")), Err(AuthError::UserEmpty));
        assert_eq!(
            s.apply(&Cmd::RoleAdd(PbAuthRoleAddRequest { name: "".into() })),
            Err(AuthError::RoleEmpty)
        );
        // Root may do anything; an unknown user nothing; no user name at all is its own error.
        assert_eq!(s.check(ROOT, Access::Write, b"x", b""), Ok(()));
        assert_eq!(
            s.check("nobody", Access::Read, b"x", b""),
            Err(AuthError::PermissionDenied)
        );
        assert_eq!(
            s.check("", Access::Read, b"x", b""),
            Err(AuthError::UserEmpty)
        );
        assert_eq!(s.check_admin("nobody"), Err(AuthError::UserNotFound));
    }
}
