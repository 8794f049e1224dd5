//! Watch streams under faults: a watcher on the run's prefix that resumes on another member
//! (from the revision after the last event it got) whenever its stream breaks, and the checks
//! on what it recorded.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_client::{Client, ConnectOptions, EventType, WatchOptions};
use tokio::sync::watch;

use crate::workload::Record;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ev {
    pub key: String,
    pub value: String,
    pub put: bool,
    pub create_revision: i64,
    pub mod_revision: i64,
    pub version: i64,
}

/// Watch clients get no request timeout: it would cut the stream.
fn watch_options() -> ConnectOptions {
    ConnectOptions::new().with_connect_timeout(Duration::from_millis(500))
}

/// Records events under `prefix` from `start_revision` until `stop` flips, moving to the next
/// member whenever a stream fails. Returns how many times it resumed.
pub async fn record(
    endpoints: Vec<String>,
    first: usize,
    prefix: String,
    start_revision: i64,
    out: Arc<Mutex<Vec<Ev>>>,
    mut stop: watch::Receiver<bool>,
) -> Result<usize, String> {
    let mut member = first;
    let mut next = start_revision;
    let mut resumes = 0;
    loop {
        if *stop.borrow() {
            return Ok(resumes);
        }
        let session = async {
            let mut c = Client::connect([endpoints[member].clone()], Some(watch_options()))
                .await
                .map_err(|e| e.to_string())?;
            let mut stream = c
                .watch(
                    prefix.as_str(),
                    Some(WatchOptions::new().with_prefix().with_start_revision(next)),
                )
                .await
                .map_err(|e| e.to_string())?;
            while let Some(resp) = stream.message().await.map_err(|e| e.to_string())? {
                if resp.canceled() {
                    return Err(format!(
                        "watch canceled: {} (compact revision {})",
                        resp.cancel_reason(),
                        resp.compact_revision()
                    ));
                }
                let mut got = out.lock().unwrap();
                for e in resp.events() {
                    let Some(kv) = e.kv() else { continue };
                    got.push(Ev {
                        key: String::from_utf8_lossy(kv.key()).into_owned(),
                        value: String::from_utf8_lossy(kv.value()).into_owned(),
                        put: e.event_type() == EventType::Put,
                        create_revision: kv.create_revision(),
                        mod_revision: kv.mod_revision(),
                        version: kv.version(),
                    });
                    next = next.max(kv.mod_revision() + 1);
                }
            }
            Ok::<(), String>(())
        };
        tokio::select! {
            r = session => {
                if let Err(e) = &r {
                    if e.starts_with("watch canceled") {
                        return Err(e.clone());
                    }
                }
                resumes += 1;
                member = (member + 1) % endpoints.len();
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            _ = stop.changed() => return Ok(resumes),
        }
    }
}

/// Collects events under `prefix` from `from` on member `endpoint` until one at `last_revision`
/// arrives.
pub async fn collect(
    endpoint: &str,
    prefix: &str,
    from: i64,
    last_revision: i64,
) -> Result<Vec<Ev>, String> {
    let mut c = Client::connect([endpoint], Some(watch_options()))
        .await
        .map_err(|e| e.to_string())?;
    let mut stream = c
        .watch(
            prefix,
            Some(WatchOptions::new().with_prefix().with_start_revision(from)),
        )
        .await
        .map_err(|e| e.to_string())?;
    let mut got = Vec::new();
    while got
        .last()
        .is_none_or(|e: &Ev| e.mod_revision < last_revision)
    {
        let resp = stream
            .message()
            .await
            .map_err(|e| e.to_string())?
            .ok_or("stream ended")?;
        for e in resp.events() {
            let Some(kv) = e.kv() else { continue };
            got.push(Ev {
                key: String::from_utf8_lossy(kv.key()).into_owned(),
                value: String::from_utf8_lossy(kv.value()).into_owned(),
                put: e.event_type() == EventType::Put,
                create_revision: kv.create_revision(),
                mod_revision: kv.mod_revision(),
                version: kv.version(),
            });
        }
    }
    Ok(got)
}

/// The final state of one key, from a Range at the final revision.
#[derive(Debug, Clone)]
pub struct FinalKv {
    pub key: String,
    pub value: String,
    pub create_revision: i64,
    pub mod_revision: i64,
    pub version: i64,
}

/// Checks recorded watch events (up to the final revision) against the final Range and the
/// clients' acknowledged writes: strictly increasing revisions (each operation of the
/// workload writes one key, so one event per revision), no duplicates, each key's versions
/// 1, 2, 3, … without a gap ending at the final version and value, every acknowledged write
/// present at the revision the client was told, and no value that no client wrote or that
/// was applied twice.
pub fn check_events(
    events: &[Ev],
    finals: &[FinalKv],
    records: &[Record],
    keys: &[String],
) -> Result<(), String> {
    for w in events.windows(2) {
        if w[1].mod_revision <= w[0].mod_revision {
            return Err(format!("revisions out of order or repeated: {w:?}"));
        }
    }
    if let Some(e) = events.iter().find(|e| !e.put) {
        return Err(format!("unexpected delete event {e:?}"));
    }
    let mut by_key: HashMap<&str, Vec<&Ev>> = HashMap::new();
    for e in events {
        by_key.entry(e.key.as_str()).or_default().push(e);
    }
    for f in finals {
        let evs = by_key.remove(f.key.as_str()).unwrap_or_default();
        for (i, e) in evs.iter().enumerate() {
            if e.version != i as i64 + 1 || e.create_revision != f.create_revision {
                return Err(format!(
                    "{}: event {i} is {e:?}; gap or wrong create revision (final {f:?})",
                    f.key
                ));
            }
        }
        let last = evs.last().ok_or(format!("{}: no events at all", f.key))?;
        if last.version != f.version || last.mod_revision != f.mod_revision || last.value != f.value
        {
            return Err(format!("{}: last event {last:?}, final {f:?}", f.key));
        }
    }
    if let Some((k, evs)) = by_key.into_iter().next() {
        return Err(format!(
            "events for {k} that the final range lacks: {evs:?}"
        ));
    }
    // Values are unique per operation: map each to its write.
    let mut written: HashMap<(&str, &str), &Record> = HashMap::new();
    for r in records {
        let value = match &r.op.input {
            crate::checker::Input::Write(v) => v.as_str(),
            // A compare that failed wrote nothing: its value must never show up.
            crate::checker::Input::Cas { .. }
                if r.op.output == crate::checker::Output::Cas(false) =>
            {
                continue
            }
            crate::checker::Input::Cas { new, .. } => new.as_str(),
            crate::checker::Input::Read => continue,
        };
        written.insert((keys[r.key].as_str(), value), r);
    }
    let mut applied: HashMap<(&str, &str), i64> = HashMap::new();
    for e in events {
        if !written.contains_key(&(e.key.as_str(), e.value.as_str())) {
            return Err(format!("event {e:?} carries a value no client wrote"));
        }
        if let Some(prev) = applied.insert((e.key.as_str(), e.value.as_str()), e.mod_revision) {
            return Err(format!("{e:?} applied twice (also at revision {prev})"));
        }
    }
    for ((key, value), r) in &written {
        let Some(rev) = r.revision else { continue };
        match applied.get(&(*key, *value)) {
            Some(at) if *at == rev => {}
            other => {
                return Err(format!(
                "acknowledged write {key}={value} at revision {rev} is in the history at {other:?}"
            ))
            }
        }
    }
    Ok(())
}
