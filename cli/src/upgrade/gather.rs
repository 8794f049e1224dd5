//! What runs on each host (one SSH round trip per host, in parallel) and what this kiln would push.

use std::collections::BTreeMap;

use crate::bootstrap::phases::{CONTROL_PLANE_BINARIES, NODE_BINARIES};
use crate::bootstrap::{BootstrapError, Context};

use super::plan::{HostState, Installed, Target};
use super::stamp::Stamp;

/// Where kiln installs its binaries on hosts.
const REMOTE_BIN: &str = "/usr/local/bin";

#[derive(Debug, thiserror::Error)]
pub enum GatherError {
    #[error(transparent)]
    Bootstrap(Box<BootstrapError>),
    #[error("{host}: {source}")]
    Probe {
        host: String,
        #[source]
        source: Box<crate::transport::TransportError>,
    },
    #[error("{path}: not found (build it, or pass --bin-dir)")]
    Missing { path: String },
    #[error("{path} --version: {message}")]
    Version { path: String, message: String },
}

impl From<BootstrapError> for GatherError {
    fn from(e: BootstrapError) -> Self {
        GatherError::Bootstrap(Box::new(e))
    }
}

fn binaries(controller: bool) -> &'static [&'static str] {
    if controller {
        CONTROL_PLANE_BINARIES
    } else {
        NODE_BINARIES
    }
}

/// One line per binary: `<name> <sha256|-> <--version output>`.
fn probe_script(bins: &[&str]) -> String {
    let list = bins.join(" ");
    format!(
        "for b in {list}; do p={REMOTE_BIN}/$b; if [ -x \"$p\" ]; then \
         s=$(sha256sum \"$p\" | cut -d' ' -f1); v=$(\"$p\" --version 2>/dev/null | head -n1); \
         echo \"$b $s $v\"; else echo \"$b -\"; fi; done"
    )
}

fn parse_probe(out: &str) -> BTreeMap<String, Installed> {
    out.lines()
        .filter_map(|l| {
            let mut it = l.splitn(3, ' ');
            let (name, sha) = (it.next()?, it.next()?);
            let installed = if sha == "-" {
                Installed::default()
            } else {
                Installed {
                    sha256: Some(sha.to_string()),
                    stamp: it.next().and_then(Stamp::parse),
                }
            };
            Some((name.to_string(), installed))
        })
        .collect()
}

/// Every host of the cluster file: its binaries' checksums and stamps.
pub async fn hosts(ctx: &Context) -> Result<Vec<HostState>, GatherError> {
    let hosts = &ctx.cluster.config.spec.hosts;
    let probes = hosts.iter().map(|h| async move {
        let bins = binaries(h.is_controller());
        let t = ctx.transport(&h.name).await?;
        let out =
            t.probe(&probe_script(bins), None)
                .await
                .map_err(|source| GatherError::Probe {
                    host: h.name.clone(),
                    source: Box::new(source),
                })?;
        Ok::<_, GatherError>(HostState {
            name: h.name.clone(),
            controller: h.is_controller(),
            binaries: parse_probe(&out.stdout_str()),
        })
    });
    futures::future::join_all(probes)
        .await
        .into_iter()
        .collect()
}

/// The binaries in `--bin-dir` (default: beside this kiln), with their checksums and stamps.
pub fn targets(ctx: &Context) -> Result<BTreeMap<String, Target>, GatherError> {
    let mut out = BTreeMap::new();
    for b in CONTROL_PLANE_BINARIES {
        let path = ctx.bin_dir.join(b);
        let shown = path.display().to_string();
        if !path.exists() {
            return Err(GatherError::Missing { path: shown });
        }
        let run = std::process::Command::new(&path)
            .arg("--version")
            .output()
            .map_err(|e| GatherError::Version {
                path: shown.clone(),
                message: e.to_string(),
            })?;
        let line = String::from_utf8_lossy(&run.stdout)
            .lines()
            .next()
            .unwrap_or_default()
            .to_string();
        let stamp = Stamp::parse(&line).ok_or_else(|| GatherError::Version {
            path: shown.clone(),
            message: format!("not a kiln version line: {line:?}"),
        })?;
        out.insert(
            b.to_string(),
            Target {
                sha256: ctx.sha256_file(&path)?,
                stamp,
            },
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_probe_output_reads_back() {
        let got = parse_probe(
            "kiln-kubelet abc kiln-kubelet 0.1.0 (build X, Kubernetes v1.33.0)\nkiln-proxy -\nkiln-dns def\n",
        );
        assert_eq!(got["kiln-kubelet"].sha256.as_deref(), Some("abc"));
        assert_eq!(
            got["kiln-kubelet"].stamp.as_ref().unwrap().build.as_deref(),
            Some("X")
        );
        assert_eq!(got["kiln-proxy"], Installed::default());
        assert_eq!(got["kiln-dns"].sha256.as_deref(), Some("def"));
        assert_eq!(got["kiln-dns"].stamp, None);
        assert!(
            probe_script(&["kiln-dns"]).starts_with("for b in kiln-dns; do p=/usr/local/bin/$b;")
        );
    }
}
