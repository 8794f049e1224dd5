//! Encryption at rest (`--encryption-provider-config`), as upstream's
//! `apiserver/pkg/server/options/encryptionconfig` and `storage/value/encrypt/{aes,secretbox}`:
//! values of the configured resources are sealed on their way into the store and opened on every
//! way out (get, list, watch), in `crate::storage::Store`. KMS providers are out of scope and
//! refused at start.

pub mod ciphers;
pub mod config;
pub mod transformer;

pub use config::{load, ConfigError};
pub use transformer::{TransformError, Transformers};
