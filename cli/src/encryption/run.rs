//! The two commands over a [`Context`]: preconditions, the dry run, and the walk with the real
//! [`ClusterEffects`].

use super::effects::ClusterEffects;
use super::steps::{self, Files};
use super::EncryptionError;
use crate::bootstrap::Context;

/// The controllers with a PKI tree in the state directory, in cluster.yaml's order: those whose API
/// servers the rotation restarts (one listed but not joined yet gets the configuration when it joins).
fn controllers(ctx: &Context) -> Vec<String> {
    ctx.cluster
        .config
        .controllers()
        .filter(|h| ctx.pki_dir(&h.name).exists())
        .map(|h| h.name.clone())
        .collect()
}

fn files(ctx: &Context) -> Result<Files, EncryptionError> {
    let api = &ctx.cluster.config.spec.api_server;
    if !api.encryption_enabled() {
        return Err(EncryptionError::NotEnabled(ctx.cluster.path.clone()));
    }
    let files = Files::in_state_dir(&ctx.state_dir);
    for p in [&files.config, &ctx.admin_conf()] {
        if !p.exists() {
            return Err(EncryptionError::Missing(p.clone()));
        }
    }
    Ok(files)
}

/// `kiln encryption rotate`; with `dry_run` only the steps left, nothing changed.
pub async fn rotate(ctx: &Context, dry_run: bool) -> Result<(), EncryptionError> {
    let files = files(ctx)?;
    let provider = ctx
        .cluster
        .config
        .spec
        .api_server
        .encryption
        .as_ref()
        .map(|e| e.provider)
        .unwrap_or_default();
    let controllers = controllers(ctx);
    if dry_run {
        let keys = files.keys()?;
        let (r, resumed) = steps::start(files.rotation()?, &keys, provider);
        println!(
            "{} the rotation to {} {} (nothing was changed):",
            if resumed {
                "would resume"
            } else {
                "would start"
            },
            r.provider.name(),
            r.new_key
        );
        for line in steps::plan(r.step, &controllers) {
            println!("  - {line}");
        }
        return Ok(());
    }
    let effects = ClusterEffects { ctx };
    let say = |line: &str| println!("{line}");
    let r = steps::rotate(&effects, &files, provider, &controllers, &say).await?;
    println!(
        "rotated: every Secret is sealed with {} {}, the only key left",
        r.provider.name(),
        r.new_key
    );
    Ok(())
}

/// `kiln encryption status`.
pub async fn status(ctx: &Context) -> Result<String, EncryptionError> {
    files(ctx)?;
    super::status::status(ctx, &ClusterEffects { ctx }).await
}
