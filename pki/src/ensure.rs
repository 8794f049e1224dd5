//! `ensure_tree`: walk the certificate tree and create only what is missing, so re-running init never
//! rotates a certificate that already exists.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::files::{read_string, write_atomic, FileError, PUBLIC_MODE, SECRET_MODE};
use crate::issue::{generate_key_pair, CertAuthority, IssueError, LeafRequest};
use crate::tree::{CertSpec, TreeParams, CERT_TREE, SA_KEY_FILE, SA_PUB_FILE};

#[derive(Debug, thiserror::Error)]
pub enum EnsureError {
    #[error(transparent)]
    File(#[from] FileError),
    #[error("{name}: {source}")]
    Issue {
        name: String,
        #[source]
        source: IssueError,
    },
    #[error("{name}: {present} exists but {missing} is missing; remove both to regenerate")]
    HalfPresent {
        name: String,
        present: PathBuf,
        missing: PathBuf,
    },
    #[error("{name} exists but its CA {ca} is missing; refusing to create a new CA that would not match it")]
    MissingCa { name: String, ca: String },
}

/// What `ensure_tree` did, by spec name (plus "sa" for the service-account key pair).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct EnsureReport {
    pub created: Vec<String>,
    pub existing: Vec<String>,
}

enum Presence {
    Both,
    Neither,
}

fn presence(name: &str, a: &Path, b: &Path) -> Result<Presence, EnsureError> {
    match (a.exists(), b.exists()) {
        (true, true) => Ok(Presence::Both),
        (false, false) => Ok(Presence::Neither),
        (true, false) => Err(EnsureError::HalfPresent {
            name: name.into(),
            present: a.into(),
            missing: b.into(),
        }),
        (false, true) => Err(EnsureError::HalfPresent {
            name: name.into(),
            present: b.into(),
            missing: a.into(),
        }),
    }
}

/// The request a spec describes for these params.
pub fn leaf_request(spec: &CertSpec, params: &TreeParams) -> LeafRequest {
    LeafRequest {
        common_name: spec.common_name(params).to_string(),
        organizations: spec.organizations.iter().map(|o| o.to_string()).collect(),
        usages: spec.usages.to_vec(),
        sans: params.sans(spec.sans),
    }
}

/// Loads the CA of `name` from `dir`.
pub fn load_ca(dir: &Path, spec: &CertSpec) -> Result<CertAuthority, EnsureError> {
    let cert = read_string(&dir.join(spec.cert_file()))?;
    let key = read_string(&dir.join(spec.key_file()))?;
    CertAuthority::load(&cert, &key).map_err(|source| EnsureError::Issue {
        name: spec.name.into(),
        source,
    })
}

/// Creates every missing certificate, key and the service-account key pair under `dir`.
pub fn ensure_tree(dir: &Path, params: &TreeParams) -> Result<EnsureReport, EnsureError> {
    let mut report = EnsureReport::default();
    let mut cas: HashMap<&'static str, CertAuthority> = HashMap::new();
    for spec in CERT_TREE {
        let crt = dir.join(spec.cert_file());
        let key = dir.join(spec.key_file());
        let issue_err = |source| EnsureError::Issue {
            name: spec.name.into(),
            source,
        };
        match presence(spec.name, &crt, &key)? {
            Presence::Both => {
                if spec.is_ca() {
                    cas.insert(spec.name, load_ca(dir, spec)?);
                }
                report.existing.push(spec.name.into());
            }
            Presence::Neither => {
                let pair = match spec.ca {
                    None => {
                        // A new CA would not match certificates the old one issued: refuse instead.
                        if let Some(leaf) = CERT_TREE
                            .iter()
                            .find(|l| l.ca == Some(spec.name) && dir.join(l.cert_file()).exists())
                        {
                            return Err(EnsureError::MissingCa {
                                name: leaf.name.into(),
                                ca: spec.name.into(),
                            });
                        }
                        let (ca, pair) =
                            CertAuthority::generate(spec.common_name(params), &params.validity)
                                .map_err(issue_err)?;
                        cas.insert(spec.name, ca);
                        pair
                    }
                    Some(ca_name) => {
                        let ca = cas.get(ca_name).ok_or_else(|| EnsureError::MissingCa {
                            name: spec.name.into(),
                            ca: ca_name.into(),
                        })?;
                        ca.issue(&leaf_request(spec, params), &params.validity)
                            .map_err(issue_err)?
                    }
                };
                // Key first: a certificate without its key would read as "half present" next run.
                write_atomic(&key, pair.key_pem.as_bytes(), SECRET_MODE)?;
                write_atomic(&crt, pair.cert_pem.as_bytes(), PUBLIC_MODE)?;
                report.created.push(spec.name.into());
            }
        }
    }
    let sa_key = dir.join(SA_KEY_FILE);
    let sa_pub = dir.join(SA_PUB_FILE);
    match presence("sa", &sa_key, &sa_pub)? {
        Presence::Both => report.existing.push("sa".into()),
        Presence::Neither => {
            let (private, public) = generate_key_pair().map_err(|source| EnsureError::Issue {
                name: "sa".into(),
                source,
            })?;
            write_atomic(&sa_key, private.as_bytes(), SECRET_MODE)?;
            write_atomic(&sa_pub, public.as_bytes(), PUBLIC_MODE)?;
            report.created.push("sa".into());
        }
    }
    Ok(report)
}
