//! kiln-dns: kiln's cluster DNS. It serves the Kubernetes DNS-Based Service Discovery spec (schema
//! 1.1.0) for the cluster zone from an index the Service and EndpointSlice watches keep current, and
//! forwards every other name to the upstream resolvers through a bounded cache.
//!
//! The answering is pure ([`answer`]: index + request → response) and the wire handling works on
//! bytes ([`wire::answer_bytes`], what the UDP/TCP loops and the fuzz target call); the network
//! ([`server`], [`forward`]) and the watches ([`run`]) are thin layers around them.

pub mod answer;
pub mod cache;
pub mod config;
#[cfg(test)]
mod fake_upstream;
pub mod forward;
pub mod health;
pub mod index;
pub mod malloc;
pub mod metrics;
pub mod model;
pub mod reply_cache;
pub mod resolv;
pub mod resolver;
pub mod run;
pub mod server;
pub mod wire;

pub use config::{DnsConfig, Flags};
pub use index::{Index, ZoneSettings};
pub use run::{run, start, Running};
pub use wire::{answer_bytes, Reply, Transport};
