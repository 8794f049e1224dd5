//! The auth record as the state machine keeps it: applied from Raft entries, carried by a
//! Raft snapshot to a member that installs it, and there in force at once.

use std::sync::Arc;
use std::time::Duration;

use etcd_client::proto::{PbAuthEnableRequest, PbAuthUserAddRequest, PbAuthUserGrantRoleRequest};
use openraft::storage::{RaftSnapshotBuilder, RaftStateMachine};
use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId};

use crate::auth::perm::Access;
use crate::auth::AuthStore;
use crate::command::auth::{auth_command::Cmd, AuthCommand, Authenticate};
use crate::command::{store_request::Op, StoreRequest, TypeConfig};
use crate::member::lease::Lessor;
use crate::member::raft::state_machine::StateMachine;
use crate::member::waiters::Waiters;
use crate::storage::mvcc::Mvcc;

fn machine(dir: &std::path::Path) -> (StateMachine, Arc<AuthStore>) {
    let db = crate::storage::db::open(&dir.join("member")).unwrap();
    let auth = Arc::new(AuthStore::open(&db, Duration::from_secs(300), 4).unwrap());
    let mvcc = Arc::new(Mvcc::open(db).unwrap());
    let sm = StateMachine::new(
        mvcc,
        Arc::new(Lessor::new(&[])),
        dir.join("snap"),
        Arc::new(Waiters::new()),
        auth.clone(),
    );
    (sm, auth)
}

fn entry(index: u64, cmd: Cmd) -> Entry<TypeConfig> {
    Entry {
        log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
        payload: EntryPayload::Normal(StoreRequest::new(Op::Auth(AuthCommand { cmd: Some(cmd) }))),
    }
}

#[tokio::test]
async fn auth_applies_from_the_log_and_travels_in_a_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let (mut a, auth_a) = machine(&dir.path().join("a"));
    let out = a
        .apply(vec![
            entry(
                1,
                Cmd::UserAdd(PbAuthUserAddRequest {
                    name: "root".into(),
                    hashed_password: "hash".into(),
                    ..Default::default()
                }),
            ),
            entry(
                2,
                Cmd::UserGrantRole(PbAuthUserGrantRoleRequest {
                    user: "root".into(),
                    role: "root".into(),
                }),
            ),
            entry(3, Cmd::Enable(PbAuthEnableRequest {})),
            entry(
                4,
                Cmd::Authenticate(Authenticate {
                    name: "root".into(),
                    token: "tok.1".into(),
                    // Enabling keeps the revision (etcd's AuthEnable).
                    checked_revision: 3,
                }),
            ),
        ])
        .await
        .unwrap();
    assert!(out.iter().all(|r| r.error_code == 0), "{out:?}");
    let state = auth_a.state();
    assert!(state.enabled);
    assert_eq!(state.revision, 3);
    // The authenticate entry handed its token to this member.
    assert_eq!(auth_a.tokens().user("tok.1").as_deref(), Some("root"));
    assert_eq!(
        auth_a.check("", Access::Read, b"k", b""),
        Err(crate::auth::error::AuthError::UserEmpty)
    );

    let snapshot = a
        .get_snapshot_builder()
        .await
        .build_snapshot()
        .await
        .unwrap();
    let (mut b, auth_b) = machine(&dir.path().join("b"));
    assert!(!auth_b.state().enabled);
    b.install_snapshot(&snapshot.meta, snapshot.snapshot)
        .await
        .unwrap();
    assert_eq!(*auth_b.state(), *state);
    // Reopened from disk, still the same.
    drop(b);
    drop(auth_b);
    let (_b, auth_b) = machine(&dir.path().join("b"));
    assert_eq!(*auth_b.state(), *state);
}
