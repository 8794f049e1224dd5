//! kiln: the cluster bootstrapper. The binary in `main.rs` only calls [`commands::main`].

pub mod apply;
pub mod bootstrap;
pub mod certs;
pub mod commands;
pub mod config;
pub mod lab;
pub mod snapshot;
pub mod tokens;
pub mod transport;
pub mod upgrade;
