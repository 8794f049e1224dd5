//! API priority and fairness, as much of it as keeps an overloaded kiln-apiserver answering: the
//! FlowSchema / PriorityLevelConfiguration objects upstream clusters have (`bootstrap.rs`) and a
//! bound on requests in flight that sheds the excess with 429 and `Retry-After` (`limiter.rs`)
//! instead of queueing without limit. Requests of the exempt level (system:masters, health probes)
//! and long-running requests (watches, exec, logs) are never shed.

pub mod bootstrap;
pub mod limiter;
