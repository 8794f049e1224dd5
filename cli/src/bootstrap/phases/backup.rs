//! Phase backup-schedule: `spec.store.backup` installed on each controller exactly as `kiln snapshot
//! schedule` installs it (`backup_store::schedule::install_on`), so a schedule written in cluster.yaml runs.
//! Unchanged files are not uploaded and a running job is left alone: a re-run reports `skipped`.
//! Without `spec.store.backup` nothing is installed and a schedule made by hand is left as it is.

use super::Outcome;
use crate::backup_store::{destination, s3::Credentials, schedule};
use crate::bootstrap::{BootstrapError, Context};

pub(super) async fn backup_schedule(ctx: &Context, host: &str) -> Result<Outcome, BootstrapError> {
    let fail = |e: String| BootstrapError::phase("backup-schedule", host, e);
    let Some(b) = &ctx.cluster.config.spec.store.backup else {
        return Ok(Outcome::Skipped("spec.store.backup not set".into()));
    };
    let dir = b
        .destination
        .as_ref()
        .and_then(|d| d.dir.clone())
        .unwrap_or_else(|| schedule::DEFAULT_DIR.to_string());
    let s3 = destination::declared(&ctx.cluster);
    let creds = match &s3 {
        // The credentials are resolved on the operator's machine (file or environment) and written to
        // the controller; the error names the field that says where they were looked for.
        Some(d) => Some(
            Credentials::resolve(d.credentials_file.as_deref())
                .map_err(|e| fail(format!("spec.store.backup.destination.s3: {e}")))?,
        ),
        None => None,
    };
    if ctx.plan.is_some() {
        return Ok(Outcome::Done(format!(
            "would install the snapshot schedule '{}' (keep {}, in {dir}{})",
            b.schedule,
            b.retention,
            s3.as_ref()
                .map(|d| format!(", uploaded to s3://{}/{}", d.bucket, d.prefix))
                .unwrap_or_default()
        )));
    }
    let sched = schedule::Schedule {
        every: &b.schedule,
        keep: b.retention as usize,
        dir: &dir,
        key_file: None,
        s3: s3.as_ref().zip(creds.as_ref()),
    };
    let changed = schedule::install_on(ctx, host, &sched)
        .await
        .map_err(|e| fail(e.to_string()))?;
    let what = format!(
        "snapshot schedule '{}', keep {}, in {dir}{}",
        b.schedule,
        b.retention,
        s3.as_ref()
            .map(|d| format!(", uploaded to s3://{}/{}", d.bucket, d.prefix))
            .unwrap_or_default()
    );
    Ok(match changed {
        true => Outcome::Done(what),
        false => Outcome::Skipped(format!("{what}: already installed")),
    })
}
