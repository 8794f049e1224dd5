//! The register/CAS workload: concurrent clients doing linearizable Gets, Puts and
//! compare-value-then-put Txns on a few keys, each operation recorded with its call and
//! return time and what the client saw.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_client::{Client, Compare, CompareOp, Txn, TxnOp};
use tokio::time::Instant;

use crate::checker::{Input, Op, Output, NEVER};

/// A client gives up on an operation after this long; its outcome is then unknown.
const OP_TIMEOUT: Duration = Duration::from_millis(1500);

/// One recorded operation on key `key` (an index into the run's keys).
#[derive(Debug, Clone)]
pub struct Record {
    pub key: usize,
    pub op: Op,
    /// The revision the store reported for a write that took effect.
    pub revision: Option<i64>,
}

/// A small deterministic generator (xorshift64*), seeded per run so failures can be replayed.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed | 1)
    }
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

pub struct Workload {
    pub keys: Vec<String>,
    pub endpoints: Vec<String>,
    pub epoch: std::time::Instant,
    pub until: Instant,
    pub records: Arc<Mutex<Vec<Record>>>,
}

fn nanos(epoch: std::time::Instant) -> u64 {
    epoch.elapsed().as_nanos() as u64
}

enum Outcome {
    Done(Output, Option<i64>),
    /// Failed or timed out: a read is dropped, a write becomes unknown.
    Failed,
}

async fn perform(c: &mut Client, key: &str, input: &Input) -> Outcome {
    let attempt = async {
        match input {
            Input::Read => {
                let r = c.get(key, None).await?;
                let v = r
                    .kvs()
                    .first()
                    .map(|kv| String::from_utf8_lossy(kv.value()).into_owned());
                Ok::<_, etcd_client::Error>(Outcome::Done(Output::Read(v), None))
            }
            Input::Write(v) => {
                let r = c.put(key, v.as_str(), None).await?;
                Ok(Outcome::Done(
                    Output::Written,
                    r.header().map(|h| h.revision()),
                ))
            }
            Input::Cas { expect, new } => {
                let cmp = match expect {
                    Some(v) => Compare::value(key, CompareOp::Equal, v.as_str()),
                    None => Compare::create_revision(key, CompareOp::Equal, 0),
                };
                let txn = Txn::new()
                    .when([cmp])
                    .and_then([TxnOp::put(key, new.as_str(), None)]);
                let r = c.txn(txn).await?;
                let rev = r
                    .succeeded()
                    .then(|| r.header().map(|h| h.revision()))
                    .flatten();
                Ok(Outcome::Done(Output::Cas(r.succeeded()), rev))
            }
        }
    };
    match tokio::time::timeout(OP_TIMEOUT, attempt).await {
        Ok(Ok(outcome)) => outcome,
        Ok(Err(_)) | Err(_) => Outcome::Failed,
    }
}

impl Workload {
    /// One client: starts on member `id % n`, moves to the next member after a failure.
    pub async fn client(self: Arc<Self>, id: usize, seed: u64) {
        let mut rng = Rng::new(seed);
        let n = self.endpoints.len();
        let mut member = id % n;
        let mut clients: Vec<Option<Client>> = vec![None; n];
        let mut last_seen: Vec<Option<String>> = vec![None; self.keys.len()];
        let mut seq = 0u64;
        while Instant::now() < self.until {
            if clients[member].is_none() {
                clients[member] = Client::connect(
                    [self.endpoints[member].clone()],
                    Some(crate::procs::connect_options()),
                )
                .await
                .ok();
            }
            let Some(c) = clients[member].as_mut() else {
                member = (member + 1) % n;
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            };
            let key = rng.below(self.keys.len() as u64) as usize;
            seq += 1;
            let value = format!("c{id}-{seq}");
            let input = match rng.below(10) {
                0..=3 => Input::Read,
                4..=6 => Input::Write(value.clone()),
                _ => Input::Cas {
                    expect: last_seen[key].clone(),
                    new: value.clone(),
                },
            };
            let call = nanos(self.epoch);
            let outcome = perform(c, &self.keys[key], &input).await;
            let ret = nanos(self.epoch);
            let (output, ret, revision) = match outcome {
                Outcome::Done(output, rev) => {
                    match &output {
                        Output::Read(v) => last_seen[key] = v.clone(),
                        Output::Written | Output::Cas(true) => last_seen[key] = Some(value),
                        _ => {}
                    }
                    (output, ret, rev)
                }
                Outcome::Failed => {
                    member = (member + 1) % n;
                    if input == Input::Read {
                        continue;
                    }
                    (Output::Unknown, NEVER, None)
                }
            };
            self.records.lock().unwrap().push(Record {
                key,
                op: Op {
                    input,
                    output,
                    call,
                    ret,
                },
                revision,
            });
            // A little jitter, so operations overlap in many different ways.
            tokio::time::sleep(Duration::from_micros(rng.below(3000))).await;
        }
    }
}
