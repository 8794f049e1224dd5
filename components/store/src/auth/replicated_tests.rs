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

/// etcd's authApplierV3 through the state machine: a write proposed with the auth revision it
/// was checked at is refused when applied after an auth change, also when the change is an
/// earlier command of the same batch entry.
#[tokio::test]
async fn a_write_applied_after_its_permission_was_revoked_is_refused() {
    use etcd_client::proto::{PbAuthUserRevokeRoleRequest, PbPutRequest};

    use crate::command::auth::RequestAuth;
    use crate::command::{store_response, StoreBatch};

    let dir = tempfile::tempdir().unwrap();
    let db = crate::storage::db::open(&dir.path().join("member")).unwrap();
    let auth = Arc::new(AuthStore::open(&db, Duration::from_secs(300), 4).unwrap());
    let mvcc = Arc::new(Mvcc::open(db).unwrap());
    let mut sm = StateMachine::new(
        mvcc.clone(),
        Arc::new(Lessor::new(&[])),
        dir.path().join("snap"),
        Arc::new(Waiters::new()),
        auth.clone(),
    );
    let user_add = |name: &str| {
        Cmd::UserAdd(PbAuthUserAddRequest {
            name: name.into(),
            hashed_password: "hash".into(),
            ..Default::default()
        })
    };
    let grant_root = |user: &str| {
        Cmd::UserGrantRole(PbAuthUserGrantRoleRequest {
            user: user.into(),
            role: "root".into(),
        })
    };
    let revoke_root = Cmd::UserRevokeRole(PbAuthUserRevokeRoleRequest {
        name: "alice".into(),
        role: "root".into(),
    });
    let auth_cmd = |cmd: Cmd| StoreRequest::new(Op::Auth(AuthCommand { cmd: Some(cmd) }));
    let put = |key: &str, revision: u64| {
        let op = Op::Put(PbPutRequest {
            key: key.into(),
            value: b"v".to_vec(),
            ..Default::default()
        });
        let caller = RequestAuth {
            username: "alice".into(),
            revision,
        };
        StoreRequest::on_behalf(op, caller)
    };
    let normal = |index: u64, req: StoreRequest| Entry {
        log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
        payload: EntryPayload::Normal(req),
    };
    let setup = sm
        .apply(vec![
            entry(1, user_add("root")),
            entry(2, grant_root("root")),
            entry(3, user_add("alice")),
            entry(4, grant_root("alice")),
            entry(5, Cmd::Enable(PbAuthEnableRequest {})),
        ])
        .await
        .unwrap();
    assert!(setup.iter().all(|r| r.error_code == 0), "{setup:?}");
    let checked_at = auth.state().revision;
    assert_eq!(checked_at, 5);

    let out = sm
        .apply(vec![
            // Checked and applied at the same revision: written.
            normal(6, put("/k1", checked_at)),
            // The revoke commits between the check of the next write and its apply.
            entry(7, revoke_root.clone()),
            normal(8, put("/k2", checked_at)),
            // Granted again, then revoked by the command just before the write in one batch.
            entry(9, grant_root("alice")),
            normal(
                10,
                StoreRequest::new(Op::Batch(StoreBatch {
                    requests: vec![auth_cmd(revoke_root), put("/k3", 7)],
                })),
            ),
            // Signed in again after the revoke: judged on the permissions now.
            normal(11, put("/k4", 8)),
        ])
        .await
        .unwrap();
    let answer = |r: &crate::command::StoreResponse| (r.error_code, r.error_message.clone());
    let old = (
        tonic::Code::InvalidArgument as i32,
        "etcdserver: revision of auth store is old".to_string(),
    );
    assert_eq!(answer(&out[0]), (0, String::new()));
    assert_eq!(answer(&out[2]), old);
    let Some(store_response::Result::Batch(batch)) = &out[4].result else {
        panic!("batch answered with {:?}", out[4]);
    };
    assert_eq!(answer(&batch.responses[0]), (0, String::new()));
    assert_eq!(answer(&batch.responses[1]), old);
    assert_eq!(
        answer(&out[5]),
        (
            tonic::Code::PermissionDenied as i32,
            "etcdserver: permission denied".to_string()
        )
    );
    assert_eq!(auth.state().revision, 8);
    // Only /k1 was written.
    let range = mvcc
        .range(&etcd_client::proto::PbRangeRequest {
            key: b"/".to_vec(),
            range_end: b"0".to_vec(),
            ..Default::default()
        })
        .unwrap();
    let keys: Vec<&[u8]> = range.kvs.iter().map(|kv| kv.key.as_slice()).collect();
    assert_eq!(keys, vec![b"/k1".as_slice()]);
}
