//! kiln: the cluster bootstrapper. The binary in `main.rs` only calls [`commands::main`].

pub mod apply;
pub mod backup_store;
pub mod bootstrap;
pub mod certs;
pub mod commands;
pub mod config;
pub mod encryption;
pub mod lab;
pub mod snapshot;
pub mod tokens;
pub mod transport;
pub mod upgrade;
