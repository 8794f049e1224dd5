//! kiln-pki: the cluster's certificates and kubeconfigs.
//!
//! The certificate tree is data ([`tree::CERT_TREE`]); [`ensure::ensure_tree`] walks it and creates only what is
//! missing, so `kiln init` can be re-run without rotating anything. [`expiry`] reads certificates back for
//! `kiln certs check-expiration`, [`renew`] re-signs leaves with their CA for `kiln certs renew`, and
//! [`kubeconfig`] writes standard kubeconfigs with embedded client certs.

pub mod ensure;
pub mod expiry;
pub mod files;
pub mod issue;
pub mod kubeconfig;
pub mod renew;
pub mod tree;
pub mod validity;

pub use ensure::{ensure_tree, load_ca, EnsureError, EnsureReport};
pub use expiry::{expiry, parse_cert_pem, read_cert, CertInfo, ExpiryError};
pub use issue::{generate_key_pair, CertAndKey, CertAuthority, IssueError, LeafRequest};
pub use kubeconfig::{
    build_kubeconfig, ensure_kubeconfig, read_kubeconfig, Kubeconfig, KubeconfigError,
    KubeconfigKind,
};
pub use renew::{reissue, renew_cert, renew_kubeconfig, RenewError};
pub use tree::{spec, CertSpec, CommonName, SanKind, TreeParams, Usage, CERT_TREE};
pub use validity::Validity;
