//! A linearizability checker for single-register histories: the Wing–Gong search with Lowe's
//! memoization, as Porcupine implements it (written here from the published algorithm).
//!
//! Operations are calls with a call time and a return time. An operation whose outcome is
//! unknown (the client timed out or lost its connection) gets an infinite return time and an
//! unknown output: it may take effect at any moment after it was called, or — placed after
//! everything observed — not visibly at all. Reads that failed carry no information and are
//! left out of the history by the caller.

use std::collections::HashSet;

/// What a client asked of one register (one key).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    Read,
    Write(String),
    /// Compare-and-set: put `new` if the value is `expect` (`None`: the key is absent).
    Cas {
        expect: Option<String>,
        new: String,
    },
}

/// What the client saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    Read(Option<String>),
    Written,
    Cas(bool),
    /// No answer: the operation may or may not have happened.
    Unknown,
}

/// The return time of an operation whose outcome is unknown.
pub const NEVER: u64 = u64::MAX;

#[derive(Debug, Clone)]
pub struct Op {
    pub input: Input,
    pub output: Output,
    /// Nanoseconds since the history began.
    pub call: u64,
    pub ret: u64,
}

/// The register's value; `None` = absent.
type State = Option<String>;

/// The register model: the state after applying `input` with result `output` to `state`, or
/// `None` when that result is impossible in that state.
fn step(state: &State, input: &Input, output: &Output) -> Option<State> {
    match (input, output) {
        (Input::Read, Output::Read(v)) => (v == state).then(|| state.clone()),
        (Input::Read, Output::Unknown) => Some(state.clone()),
        (Input::Write(v), Output::Written | Output::Unknown) => Some(Some(v.clone())),
        (Input::Cas { expect, new }, Output::Cas(true)) => {
            (state == expect).then(|| Some(new.clone()))
        }
        (Input::Cas { expect, .. }, Output::Cas(false)) => (state != expect).then(|| state.clone()),
        // Had it run while the value matched, it would have succeeded; if it never ran
        // visibly, the search places it after everything observed.
        (Input::Cas { expect, new }, Output::Unknown) => Some(if state == expect {
            Some(new.clone())
        } else {
            state.clone()
        }),
        _ => None,
    }
}

/// One call or return event in the time-ordered, doubly linked event list.
#[derive(Debug, Clone, Copy)]
struct Node {
    op: usize,
    /// For a call: the node of its return.
    ret: Option<usize>,
    prev: usize,
    next: Option<usize>,
}

struct Events {
    nodes: Vec<Node>,
    head: usize,
}

impl Events {
    fn new(ops: &[Op]) -> Self {
        // (time, calls before returns at equal times, op, is_call)
        let mut order: Vec<(u64, u8, usize, bool)> = Vec::with_capacity(ops.len() * 2);
        for (i, op) in ops.iter().enumerate() {
            order.push((op.call, 0, i, true));
            order.push((op.ret, 1, i, false));
        }
        order.sort();
        let n = order.len();
        let head = n;
        let mut nodes: Vec<Node> = Vec::with_capacity(n + 1);
        let mut ret_node = vec![0usize; ops.len()];
        for (pos, &(_, _, op, is_call)) in order.iter().enumerate() {
            if !is_call {
                ret_node[op] = pos;
            }
        }
        for (pos, &(_, _, op, is_call)) in order.iter().enumerate() {
            nodes.push(Node {
                op,
                ret: is_call.then(|| ret_node[op]),
                prev: if pos == 0 { head } else { pos - 1 },
                next: (pos + 1 < n).then_some(pos + 1),
            });
        }
        nodes.push(Node {
            op: usize::MAX,
            ret: None,
            prev: head,
            next: (n > 0).then_some(0),
        });
        Self { nodes, head }
    }

    fn unlink(&mut self, i: usize) {
        let Node { prev, next, .. } = self.nodes[i];
        self.nodes[prev].next = next;
        if let Some(n) = next {
            self.nodes[n].prev = prev;
        }
    }

    fn relink(&mut self, i: usize) {
        let Node { prev, next, .. } = self.nodes[i];
        self.nodes[prev].next = Some(i);
        if let Some(n) = next {
            self.nodes[n].prev = i;
        }
    }

    /// Takes a call and its return out of the list (dancing links: they remember their place).
    fn lift(&mut self, call: usize) {
        let ret = self.nodes[call].ret.expect("a call node");
        self.unlink(call);
        self.unlink(ret);
    }

    fn unlift(&mut self, call: usize) {
        let ret = self.nodes[call].ret.expect("a call node");
        self.relink(ret);
        self.relink(call);
    }
}

#[derive(Clone, PartialEq, Eq, Hash)]
struct Bits(Vec<u64>);

impl Bits {
    fn new(n: usize) -> Self {
        Bits(vec![0; n.div_ceil(64)])
    }
    fn set(&mut self, i: usize) {
        self.0[i / 64] |= 1 << (i % 64);
    }
    fn clear(&mut self, i: usize) {
        self.0[i / 64] &= !(1 << (i % 64));
    }
}

/// Why a history is not linearizable: the most operations any attempted order could explain,
/// and the first operation (by call time) no order could place after them.
#[derive(Debug)]
pub struct Violation {
    pub explained: usize,
    pub stuck_at: Option<Op>,
}

/// Checks that `ops` on one register, starting absent, are linearizable.
pub fn check(ops: &[Op]) -> Result<(), Violation> {
    let mut events = Events::new(ops);
    let mut state: State = None;
    let mut linearized = Bits::new(ops.len());
    let mut done = 0usize;
    let mut best = 0usize;
    let mut stuck: Option<usize> = None;
    let mut calls: Vec<(usize, State)> = Vec::new();
    let mut seen: HashSet<(Bits, State)> = HashSet::new();
    let mut entry = events.nodes[events.head].next;
    while events.nodes[events.head].next.is_some() {
        let Some(e) = entry else {
            // Only returns end the list, and a return is handled before reaching the end.
            unreachable!("event list ended on a call");
        };
        let node = events.nodes[e];
        match node.ret {
            Some(_) => {
                let op = &ops[node.op];
                let next_state = step(&state, &op.input, &op.output);
                let mut advanced = false;
                if let Some(next_state) = next_state {
                    let mut bits = linearized.clone();
                    bits.set(node.op);
                    if seen.insert((bits.clone(), next_state.clone())) {
                        calls.push((e, std::mem::replace(&mut state, next_state)));
                        linearized = bits;
                        done += 1;
                        events.lift(e);
                        entry = events.nodes[events.head].next;
                        advanced = true;
                    }
                }
                if !advanced {
                    entry = node.next;
                }
            }
            None => {
                // A return whose call is not yet placed: backtrack.
                if done >= best {
                    best = done;
                    stuck = Some(node.op);
                }
                let Some((call, prev_state)) = calls.pop() else {
                    return Err(Violation {
                        explained: best,
                        stuck_at: stuck.map(|i| ops[i].clone()),
                    });
                };
                state = prev_state;
                linearized.clear(events.nodes[call].op);
                done -= 1;
                events.unlift(call);
                entry = events.nodes[call].next;
            }
        }
    }
    Ok(())
}
