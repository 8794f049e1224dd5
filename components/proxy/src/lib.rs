//! kiln-proxy: Services in nftables (one table `kiln`, replaced atomically, kube-proxy semantics) and
//! host-gw routes to the other nodes' pod CIDRs.
//!
//! Pure parts ([`model`], [`render`], route planning in [`routes`]) do no I/O and are tested on strings;
//! the kernel is reached only through the [`netfilter::Netfilter`], [`routes::HostRoutes`] and
//! [`conntrack::Conntrack`] traits.

pub mod config;
pub mod conntrack;
pub mod health;
pub mod host;
pub mod model;
pub mod netfilter;
pub mod proxier;
pub mod render;
pub mod routes;
pub mod run;
pub mod sysctl;
pub mod topology;

pub use config::{Flags, ProxyConfig};
pub use run::{cleanup, run, run_with};
