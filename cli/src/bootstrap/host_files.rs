//! Files onto hosts, only where they changed: `staged` renders a template into the host's staging folder,
//! `install_files` uploads what differs (or, in a dry run, records the diff in the plan). Below the phases
//! so that everything that installs files on a host (the phases, `certs renew`, the snapshot schedule in
//! `backup_store`) shares one way to do it without reaching into a phase.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::bootstrap::render::render;
use crate::bootstrap::{BootstrapError, Context};
use crate::transport::{shell_quote, Payload};

/// Render `template` into the host's staging folder (`<stateDir>/rendered/<host>/`, private like the
/// state directory) and describe where it goes on the host.
pub fn staged(
    ctx: &Context,
    host: &str,
    template: &str,
    c: &tera::Context,
    remote: impl Into<String>,
    mode: u32,
) -> Result<Install, BootstrapError> {
    let staging = ctx.staging_dir(host);
    std::fs::create_dir_all(&staging).map_err(|source| BootstrapError::Io {
        what: "creating",
        path: staging.clone(),
        source,
    })?;
    let local = staging.join(template);
    kiln_pki::files::write_atomic(&local, render(template, c)?.as_bytes(), 0o600)
        .map_err(|e| BootstrapError::Pki(e.to_string()))?;
    Ok(Install {
        local,
        remote: remote.into(),
        mode,
    })
}

/// A file to install on a host.
pub struct Install {
    pub local: PathBuf,
    pub remote: String,
    pub mode: u32,
}

/// Upload the files whose content differs on the host (one round trip to compare, then parallel uploads).
pub async fn install_files(
    ctx: &Context,
    host: &str,
    files: &[Install],
) -> Result<Vec<String>, BootstrapError> {
    let t = ctx.transport(host).await?;
    let list: Vec<String> = files.iter().map(|f| shell_quote(&f.remote)).collect();
    let out = t
        .probe(
            &format!("sha256sum {} 2>/dev/null; true", list.join(" ")),
            None,
        )
        .await?;
    let remote: BTreeMap<String, String> = out
        .stdout_str()
        .lines()
        .filter_map(|l| {
            let (sum, path) = l.split_once("  ")?;
            Some((path.to_string(), sum.to_string()))
        })
        .collect();
    if let Some(plan) = &ctx.plan {
        return plan_files(ctx, plan, &*t, host, files, &remote).await;
    }
    let mut changed = vec![];
    let mut uploads = vec![];
    for f in files {
        if remote.get(&f.remote) == Some(&ctx.sha256_file(&f.local)?) {
            continue;
        }
        changed.push(f.remote.clone());
        let t = t.clone();
        uploads.push(async move { t.upload(Payload::File(&f.local), &f.remote, f.mode).await });
    }
    for r in futures::future::join_all(uploads).await {
        r?;
    }
    Ok(changed)
}

/// A dry run's install: what differs, as a diff for text files, recorded in the plan; nothing is sent.
async fn plan_files(
    ctx: &Context,
    plan: &crate::bootstrap::dry_run::Plan,
    t: &dyn crate::transport::Transport,
    host: &str,
    files: &[Install],
    remote: &BTreeMap<String, String>,
) -> Result<Vec<String>, BootstrapError> {
    let mut changed = vec![];
    for f in files {
        if !f.local.exists() {
            // Made by an earlier phase (certs, kubeconfigs) that the dry run did not run.
            plan.add(
                host,
                format!("install {} (created by an earlier phase)", f.remote),
            );
            changed.push(f.remote.clone());
            continue;
        }
        let sum = ctx.sha256_file(&f.local)?;
        let Some(old) = remote.get(&f.remote) else {
            plan.add(
                host,
                format!("install {} (new, mode {:o})", f.remote, f.mode),
            );
            changed.push(f.remote.clone());
            continue;
        };
        if *old == sum {
            continue;
        }
        changed.push(f.remote.clone());
        let content = std::fs::read(&f.local).map_err(|source| BootstrapError::Io {
            what: "reading",
            path: f.local.clone(),
            source,
        })?;
        let text = content.len() < 256 * 1024 && std::str::from_utf8(&content).is_ok();
        if !text {
            plan.add(
                host,
                format!(
                    "replace {} (binary, sha256 {}… → {}…)",
                    f.remote,
                    &old[..12],
                    &sum[..12]
                ),
            );
            continue;
        }
        let q = shell_quote(&f.remote);
        let diff = t
            .probe(
                &format!("diff -u --label {q} --label {q}.kiln {q} -"),
                Some(&content),
            )
            .await?;
        plan.add(
            host,
            format!("change {}:\n{}", f.remote, diff.stdout_str().trim_end()),
        );
    }
    Ok(changed)
}
