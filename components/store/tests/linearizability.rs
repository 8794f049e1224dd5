//! Linearizability under faults: three kiln-store processes on 127.0.0.1 with a fault-injecting
//! TCP proxy in front of every peer port; concurrent clients run a register/CAS workload on a
//! few keys while a nemesis kills (SIGKILL) and restarts members — the leader half the time —,
//! cuts members off (connections dropped, or blackholed so that only timeouts tell) and moves
//! leadership (MoveLeader). Every run's history is checked per key by a Wing–Gong/Lowe
//! linearizability checker; a watcher on the run's keys, resuming on another member whenever
//! its stream breaks, must see every revision in order, once, without gaps, and a watch resumed
//! from a middle revision must replay the identical suffix. After each run all members must
//! report the same HashKV.
//!
//! `KILN_LIN_RUNS` sets the number of runs (default 100, ≈ 3 s each), `KILN_LIN_SEED` replays
//! a failing seed. On a failure the member logs and the history are kept under
//! `$TMPDIR/kiln-linearizability-<pid>/`.

#[path = "linearizability/checker.rs"]
mod checker;
mod common;
#[path = "linearizability/procs.rs"]
mod procs;
#[path = "linearizability/proxy.rs"]
mod proxy;
#[path = "linearizability/watch_check.rs"]
mod watch_check;
#[path = "linearizability/workload.rs"]
mod workload;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use checker::{check, Input, Op, Output, NEVER};
use etcd_client::GetOptions;
use procs::ProcCluster;
use proxy::Fault;
use watch_check::{Ev, FinalKv};
use workload::{Record, Rng, Workload};

const MEMBERS: usize = 3;
const CLIENTS: usize = 5;
const KEYS: usize = 3;
/// Workload time per run.
const RUN_TIME: Duration = Duration::from_millis(1500);
/// A fresh cluster every so many runs (runs in between inherit its state and scars).
const RUNS_PER_CLUSTER: usize = 10;

fn op(input: Input, output: Output, call: u64, ret: u64) -> Op {
    Op {
        input,
        output,
        call,
        ret,
    }
}

fn w(v: &str) -> Input {
    Input::Write(v.into())
}

fn read(v: Option<&str>) -> Output {
    Output::Read(v.map(str::to_string))
}

#[test]
fn checker_accepts_concurrent_histories_with_a_valid_order() {
    // The read overlaps both writes; reading "b" is fine if it linearizes after them.
    let h = [
        op(w("a"), Output::Written, 0, 10),
        op(w("b"), Output::Written, 5, 20),
        op(Input::Read, read(Some("a")), 12, 14),
        op(Input::Read, read(Some("b")), 21, 30),
    ];
    check(&h).expect("linearizable");
    // A write with an unknown outcome may have happened ...
    let h = [
        op(w("a"), Output::Unknown, 0, NEVER),
        op(Input::Read, read(Some("a")), 5, 6),
    ];
    check(&h).expect("unknown write observed");
    // ... or not.
    let h = [
        op(w("a"), Output::Unknown, 0, NEVER),
        op(Input::Read, read(None), 5, 6),
        op(
            Input::Cas {
                expect: None,
                new: "b".into(),
            },
            Output::Cas(true),
            7,
            8,
        ),
    ];
    check(&h).expect("unknown write never observed");
}

#[test]
fn checker_rejects_stale_reads_and_lost_writes() {
    // A read that begins after a write completed must see it.
    let stale = [
        op(w("a"), Output::Written, 0, 10),
        op(w("b"), Output::Written, 11, 20),
        op(Input::Read, read(Some("a")), 21, 30),
    ];
    let v = check(&stale).expect_err("stale read accepted");
    assert_eq!(v.stuck_at.map(|o| o.input), Some(Input::Read));
    // Two successful CAS from the same expected value cannot both linearize.
    let cas = |new: &str| Input::Cas {
        expect: Some("a".into()),
        new: new.into(),
    };
    let double = [
        op(w("a"), Output::Written, 0, 1),
        op(cas("b"), Output::Cas(true), 2, 10),
        op(cas("c"), Output::Cas(true), 3, 11),
    ];
    check(&double).expect_err("double CAS accepted");
    // A value flips back: a, then b, then a again without a write of a in between.
    let flip = [
        op(w("a"), Output::Written, 0, 1),
        op(w("b"), Output::Written, 2, 8),
        op(Input::Read, read(Some("b")), 3, 4),
        op(Input::Read, read(Some("a")), 5, 6),
    ];
    check(&flip).expect_err("b then a accepted");
    // A failed CAS whose expected value was certainly there.
    let failed = [
        op(w("a"), Output::Written, 0, 1),
        op(
            Input::Cas {
                expect: Some("a".into()),
                new: "b".into(),
            },
            Output::Cas(false),
            2,
            3,
        ),
    ];
    check(&failed).expect_err("spurious CAS failure accepted");
}

#[derive(Default, Debug)]
struct Totals {
    ops: usize,
    unknown: usize,
    kills: usize,
    isolations: usize,
    moves: usize,
    watch_resumes: usize,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn linearizable_under_leader_kills_and_partitions() {
    let runs: usize = std::env::var("KILN_LIN_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    let seed: u64 = std::env::var("KILN_LIN_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(7)
        });
    eprintln!("linearizability: {runs} runs, KILN_LIN_SEED={seed}");
    let mut totals = Totals::default();
    let mut cluster: Option<ProcCluster> = None;
    for run in 0..runs {
        if run % RUNS_PER_CLUSTER == 0 {
            drop(cluster.take());
            cluster = Some(ProcCluster::start(MEMBERS, &format!("lin-{seed}-{run}")).await);
        }
        let c = cluster.as_mut().expect("cluster started");
        let run_seed = seed ^ (run as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        if let Err(e) = one_run(c, run, run_seed, &mut totals).await {
            let dir = c.keep_logs();
            panic!(
                "run {run} (KILN_LIN_SEED={seed}): {e}\nmember logs and history in {}",
                dir.display()
            );
        }
    }
    eprintln!("linearizability: {runs} runs, zero anomalies; {totals:?}");
    assert!(
        totals.kills + totals.isolations + totals.moves >= runs,
        "every run had a fault"
    );
}

/// A linearizable range over `prefix` on the leader, retried (bounded) while leadership
/// settles after the faults: (revision, key-values, leader index).
async fn final_range(c: &ProcCluster, prefix: &str) -> Result<(i64, Vec<FinalKv>, usize), String> {
    let deadline = tokio::time::Instant::now() + procs::SETTLE;
    loop {
        let attempt = async {
            let leader = c.leader().await.ok_or("no leader")?;
            let mut client = c.client(leader).await.ok_or("no client")?;
            let r = client
                .get(prefix, Some(GetOptions::new().with_prefix()))
                .await
                .map_err(|e| e.to_string())?;
            let finals = r
                .kvs()
                .iter()
                .map(|kv| FinalKv {
                    key: String::from_utf8_lossy(kv.key()).into_owned(),
                    value: String::from_utf8_lossy(kv.value()).into_owned(),
                    create_revision: kv.create_revision(),
                    mod_revision: kv.mod_revision(),
                    version: kv.version(),
                })
                .collect();
            Ok::<_, String>((r.header().map_or(0, |h| h.revision()), finals, leader))
        };
        match attempt.await {
            Ok(r) => return Ok(r),
            Err(e) if tokio::time::Instant::now() > deadline => {
                return Err(format!("range {prefix} after the run: {e}"))
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// Kills or cuts off members (the leader half of the time) until the workload ends.
async fn nemesis(c: &mut ProcCluster, rng: &mut Rng, until: tokio::time::Instant, t: &mut Totals) {
    let mut first = true;
    while tokio::time::Instant::now() < until || first {
        first = false;
        tokio::time::sleep(Duration::from_millis(100 + rng.below(300))).await;
        let leader = c.leader().await;
        let target = match (rng.below(2), leader) {
            (0, Some(l)) => l,
            _ => rng.below(MEMBERS as u64) as usize,
        };
        let hold = Duration::from_millis(200 + rng.below(600));
        let kind = rng.below(5);
        if kind == 4 {
            // Leadership handed to another member under load (MoveLeader); it may fail
            // while other faults settle, which is fine: safety is what is checked.
            if let Some(l) = leader {
                let to = (l + 1 + rng.below(MEMBERS as u64 - 1) as usize) % MEMBERS;
                if let (Some(mut lc), Some(id)) = (c.client(l).await, c.ids.get(to).copied()) {
                    let _ = tokio::time::timeout(hold * 4, lc.move_leader(id)).await;
                    t.moves += 1;
                }
            }
        } else if kind < 2 {
            c.kill(target);
            t.kills += 1;
            tokio::time::sleep(hold).await;
            c.restart(target);
        } else {
            let fault = if rng.below(2) == 0 {
                Fault::Drop
            } else {
                Fault::Blackhole
            };
            c.net.isolate(target, fault);
            t.isolations += 1;
            tokio::time::sleep(hold).await;
            c.net.heal();
        }
    }
}

async fn one_run(c: &mut ProcCluster, run: usize, seed: u64, t: &mut Totals) -> Result<(), String> {
    let mut rng = Rng::new(seed);
    let prefix = format!("/lin/{run}/");
    let keys: Vec<String> = (0..KEYS).map(|k| format!("{prefix}k{k}")).collect();
    let start_rev = final_range(c, "/settle").await?.0;

    // The watcher runs through the faults, resuming on another member when cut off.
    let events: Arc<Mutex<Vec<Ev>>> = Arc::default();
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let watcher = tokio::spawn(watch_check::record(
        c.endpoints(),
        rng.below(MEMBERS as u64) as usize,
        prefix.clone(),
        start_rev + 1,
        events.clone(),
        stop_rx,
    ));

    let epoch = std::time::Instant::now();
    let until = tokio::time::Instant::now() + RUN_TIME;
    let records: Arc<Mutex<Vec<Record>>> = Arc::default();
    let workload = Arc::new(Workload {
        keys: keys.clone(),
        endpoints: c.endpoints(),
        epoch,
        until,
        records: records.clone(),
    });
    let clients: Vec<_> = (0..CLIENTS)
        .map(|id| tokio::spawn(workload.clone().client(id, rng.next())))
        .collect();
    nemesis(c, &mut rng, until, t).await;
    for h in clients {
        h.await.map_err(|e| format!("client task: {e}"))?;
    }
    c.settle().await;

    // The final state, read linearizably once everything healed.
    let (final_rev, finals, leader) = final_range(c, &prefix).await?;
    let last_rev = finals.iter().map(|f| f.mod_revision).max().unwrap_or(0);

    // Let the watcher reach the final state, then stop it.
    let deadline = tokio::time::Instant::now() + procs::SETTLE;
    while events.lock().unwrap().last().map_or(0, |e| e.mod_revision) < last_rev {
        if tokio::time::Instant::now() > deadline || watcher.is_finished() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _ = stop_tx.send(true);
    t.watch_resumes += watcher.await.map_err(|e| format!("watcher task: {e}"))??;
    let events: Vec<Ev> = events
        .lock()
        .unwrap()
        .iter()
        .filter(|e| e.mod_revision <= final_rev)
        .cloned()
        .collect();

    let records = records.lock().unwrap().clone();
    t.ops += records.len();
    t.unknown += records
        .iter()
        .filter(|r| r.op.output == Output::Unknown)
        .count();
    let dump = |what: &str| {
        let dir = c.keep_logs();
        let path = dir.join(format!("run-{run}-history.txt"));
        let mut text = format!("{what}\nkeys {keys:?}\n");
        for r in &records {
            text.push_str(&format!("{r:?}\n"));
        }
        for e in &events {
            text.push_str(&format!("{e:?}\n"));
        }
        let _ = std::fs::write(&path, text);
        format!("{what} (history in {})", path.display())
    };

    for (k, key) in keys.iter().enumerate() {
        let ops: Vec<Op> = records
            .iter()
            .filter(|r| r.key == k)
            .map(|r| r.op.clone())
            .collect();
        if let Err(v) = check(&ops) {
            return Err(dump(&format!(
                "{key}: not linearizable; {} of {} operations explained, stuck at {:?}",
                v.explained,
                ops.len(),
                v.stuck_at
            )));
        }
    }
    watch_check::check_events(&events, &finals, &records, &keys).map_err(|e| dump(&e))?;

    // Every member holds the same key space up to the final revision.
    let mut hashes = Vec::new();
    for i in 0..MEMBERS {
        let mut mc = c.client(i).await.ok_or("no client")?;
        let deadline = tokio::time::Instant::now() + procs::SETTLE;
        let h = loop {
            match mc.hash_kv(final_rev).await {
                Ok(h) => break h.hash(),
                // A follower that has not applied the final revision yet calls it "future".
                Err(e) if tokio::time::Instant::now() < deadline => {
                    let _ = e;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => return Err(format!("m{i}: hashkv at {final_rev}: {e}")),
            }
        };
        hashes.push(h);
    }
    if hashes.iter().any(|h| *h != hashes[0]) {
        return Err(dump(&format!(
            "members disagree on HashKV at {final_rev}: {hashes:?}"
        )));
    }

    // A watch resumed from a middle revision, on another member, replays the same suffix.
    if let Some(mid) = events.get(events.len() / 2) {
        let other = (leader + 1) % MEMBERS;
        let suffix: Vec<Ev> = events
            .iter()
            .filter(|e| e.mod_revision >= mid.mod_revision)
            .cloned()
            .collect();
        let replay = tokio::time::timeout(
            procs::SETTLE,
            watch_check::collect(&c.endpoints()[other], &prefix, mid.mod_revision, last_rev),
        )
        .await
        .map_err(|_| "resumed watch never reached the final revision".to_string())??;
        // A write whose client gave up may still land after the final range (a follower
        // forwards for up to its request timeout); compare up to the final revision only.
        let replay: Vec<Ev> = replay
            .into_iter()
            .filter(|e| e.mod_revision <= final_rev)
            .collect();
        if replay != suffix {
            return Err(dump(&format!(
                "watch resumed at {} on m{other} differs: {replay:?}",
                mid.mod_revision
            )));
        }
    }
    Ok(())
}

/// A member cut off long enough that the leader purged the log it lacks catches up from a
/// Raft snapshot; a watch on that member must still deliver every revision (the snapshot
/// jumps the store forward, so the member replays them from history).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_on_a_member_that_installs_a_snapshot_misses_nothing() {
    let extra = ["--snapshot-count=5".to_string()];
    let c = ProcCluster::start_with(MEMBERS, "lin-snapshot-watch", &extra).await;
    let leader = c.leader().await.expect("leader");
    let lagging = (leader + 1) % MEMBERS;
    let prefix = "/snapwatch/".to_string();
    let (start_rev, _, _) = final_range(&c, &prefix).await.unwrap();
    let events: Arc<Mutex<Vec<Ev>>> = Arc::default();
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    // Only the lagging member: a broken stream would come back to it.
    let watcher = tokio::spawn(watch_check::record(
        vec![c.endpoints()[lagging].clone()],
        0,
        prefix.clone(),
        start_rev + 1,
        events.clone(),
        stop_rx,
    ));
    c.net.isolate(lagging, Fault::Drop);
    let mut lc = c.client(leader).await.expect("client");
    let mut last = 0;
    for i in 0..60 {
        let r = lc
            .put(format!("{prefix}{i:02}"), format!("v{i}"), None)
            .await
            .expect("put while one member is cut off");
        last = r.header().unwrap().revision();
    }
    c.net.heal();
    let deadline = tokio::time::Instant::now() + procs::SETTLE;
    while events.lock().unwrap().last().map_or(0, |e| e.mod_revision) < last
        && tokio::time::Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = stop_tx.send(true);
    watcher.await.unwrap().expect("watch not canceled");
    assert!(
        c.log(lagging).contains("installed raft snapshot"),
        "the cut-off member caught up without a snapshot; the test proves nothing"
    );
    let got: Vec<(String, i64)> = events
        .lock()
        .unwrap()
        .iter()
        .map(|e| (e.key.clone(), e.mod_revision))
        .collect();
    let want: Vec<(String, i64)> = (0..60)
        .map(|i| (format!("{prefix}{i:02}"), last - 59 + i))
        .collect();
    assert_eq!(got, want, "watch on m{lagging} across its snapshot install");
}
