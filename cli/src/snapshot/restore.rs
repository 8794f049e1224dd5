//! `kiln snapshot restore`: stop the whole control plane on every controller first (the seeds' warning:
//! a store restored under a running apiserver rolls state back underneath it), restore the store's data
//! on every member, start the control plane again, wait until it is healthy, and verify the restored data
//! against the bundle: the same number of Kubernetes objects at the snapshot's revision.

use std::path::Path;
use std::time::{Duration, Instant};

use super::bundle::Bundle;
use super::new_hosts;
use super::store_client::StoreClient;
use super::{BundleInfo, SnapshotError};
use crate::backup_store::encrypt::KeyMaterial;
use crate::bootstrap::phases::push;
use crate::bootstrap::{self, Context, Playbook};
use crate::transport::{Payload, Transport};

const MANIFESTS: &str = "/etc/kiln/manifests";
const STOPPED: &str = "/etc/kiln/manifests.restore";
const CONTROL_PLANE: &[&str] = &[
    "kiln-store",
    "kiln-apiserver",
    "kiln-scheduler",
    "kiln-controller-manager",
];

fn say(ctx: &Context, host: &str, step: &str, started: Instant) {
    ctx.say(&format!(
        "[{host:>8}] {step:<32} {:>6.2}s",
        started.elapsed().as_secs_f64()
    ));
}

/// Restore a bundle onto the hosts of `ctx`: in place when they are the bundle's own initialised
/// controllers, else onto new hosts with the bundle's identity (`new_hosts`), after checking that the
/// cluster.yaml changes nothing the data depends on.
pub async fn restore(
    ctx: &Context,
    bundle_path: &Path,
    key: Option<&KeyMaterial>,
) -> Result<BundleInfo, SnapshotError> {
    let bundle = Bundle::open(bundle_path, key)?;
    let old = new_hosts::bundle_cluster(&bundle)?;
    new_hosts::check_compatible(&old, &ctx.cluster.config)?;
    match new_hosts::detect(ctx, &bundle, &old).await? {
        new_hosts::Target::SameHosts => restore_bundle(ctx, &bundle).await,
        new_hosts::Target::NewHosts(why) => {
            ctx.say(&format!("restore onto new hosts: {}", why.join("; ")));
            for line in new_hosts::seed_state(ctx, &bundle)? {
                ctx.say(&line);
            }
            let mut report = |name: &str, started: Instant, r: &Result<(), String>| {
                ctx.say(&format!(
                    "[{:>8}] {:<32} {:>6.2}s  {}",
                    "restore",
                    name,
                    started.elapsed().as_secs_f64(),
                    match r {
                        Ok(()) => "ok",
                        Err(e) => e.as_str(),
                    }
                ));
            };
            new_hosts::rebuild(ctx, &bundle, &mut report).await
        }
    }
}

/// Restore an opened (checked) bundle onto the cluster of `ctx`.
pub async fn restore_bundle(ctx: &Context, bundle: &Bundle) -> Result<BundleInfo, SnapshotError> {
    let bundle_path = bundle.info.path.clone().unwrap_or_default();
    let bundle_path = bundle_path.as_path();
    let info = bundle.info.clone();
    if info.cluster != ctx.cluster.config.metadata.name {
        return Err(SnapshotError::Bundle {
            path: bundle_path.into(),
            message: format!(
                "it is a snapshot of cluster {:?}, not of {:?} ({})",
                info.cluster,
                ctx.cluster.config.metadata.name,
                ctx.cluster.path.display()
            ),
        });
    }
    let controllers: Vec<_> = ctx.cluster.config.controllers().cloned().collect();
    adopt_encryption_keys(ctx, bundle, &controllers).await?;
    let stamp = time::OffsetDateTime::now_utc().unix_timestamp();
    let token = format!("kiln-restore-{stamp}");
    let initial_cluster = controllers
        .iter()
        .map(|c| format!("{}=https://{}:2380", c.name, c.node_address()))
        .collect::<Vec<_>>()
        .join(",");

    // 1. Stop: every controller, before any data is touched.
    let stops = controllers.iter().map(|h| async move {
        let t = ctx.transport(&h.name).await?;
        let started = Instant::now();
        stop_control_plane(&*t).await?;
        say(ctx, &h.name, "control plane stopped", started);
        Ok::<_, SnapshotError>(())
    });
    for r in futures::future::join_all(stops).await {
        r?;
    }
    // 2. Restore every member's data from the same snapshot: a new cluster ID, the same member names.
    let snapshot = bundle.snapshot();
    let restores = controllers.iter().map(|h| {
        let (snapshot, initial_cluster, token) = (&snapshot, &initial_cluster, &token);
        async move {
            let t = ctx.transport(&h.name).await?;
            let started = Instant::now();
            t.upload(Payload::File(snapshot), "/var/lib/kiln/restore/snapshot.db", 0o600).await?;
            t.run(&format!(
                "set -e; rm -rf /var/lib/kiln/store.restoring; \
                 /usr/local/bin/kiln-store snapshot restore /var/lib/kiln/restore/snapshot.db \
                   --data-dir /var/lib/kiln/store.restoring --name {name} --initial-cluster {initial_cluster} \
                   --initial-advertise-peer-urls https://{ip}:2380 --initial-cluster-token {token} >/dev/null; \
                 if [ -d /var/lib/kiln/store ]; then mv /var/lib/kiln/store /var/lib/kiln/store.pre-restore-{stamp}; fi; \
                 mv /var/lib/kiln/store.restoring /var/lib/kiln/store; rm -rf /var/lib/kiln/restore",
                name = h.name,
                ip = h.node_address(),
            ))
            .await?;
            say(ctx, &h.name, "store data restored", started);
            Ok::<_, SnapshotError>(())
        }
    });
    let restored: Vec<_> = futures::future::join_all(restores).await;
    if restored.iter().all(|r| r.is_ok()) {
        // The restored members form a new cluster under the new token; every render of the store
        // manifest from now on must carry it (kept in the state directory).
        push::set_store_token(ctx, &token)?;
        for h in &controllers {
            let t = ctx.transport(&h.name).await?;
            let manifest = push::render_control_plane(ctx, &h.name, "kiln-store.yaml")?;
            t.upload(
                Payload::Bytes(manifest.as_bytes()),
                &format!("{STOPPED}/kiln-store.yaml"),
                0o600,
            )
            .await?;
        }
    }
    // 3. Start again whatever happened: a failed member must not leave the others stopped.
    let starts = controllers.iter().map(|h| async move {
        let t = ctx.transport(&h.name).await?;
        t.run(&format!(
            "for f in {STOPPED}/*.yaml; do [ -e \"$f\" ] && mv \"$f\" {MANIFESTS}/; done; rmdir {STOPPED} 2>/dev/null; true"
        ))
        .await?;
        Ok::<_, SnapshotError>(())
    });
    for r in futures::future::join_all(starts).await {
        r?;
    }
    for r in restored {
        r?;
    }
    // 4. Wait for the control plane, then verify the data.
    let waits = Playbook::load("restore-wait", None)?;
    bootstrap::run(ctx, &waits).await?;
    verify(ctx, &info).await?;
    Ok(info)
}

/// Keys a rotation retired after the bundle was made still sealed its Secrets: they are added back as
/// read keys (`encryption::bundle_keys`) and installed on every controller before the stop, so the API
/// servers start with them (they read the file at start only).
async fn adopt_encryption_keys(
    ctx: &Context,
    bundle: &Bundle,
    controllers: &[crate::config::Host],
) -> Result<(), SnapshotError> {
    let files = crate::encryption::steps::Files::in_state_dir(&ctx.state_dir);
    let added =
        crate::encryption::bundle_keys::adopt(&files, &bundle.state_dir()).map_err(|e| {
            SnapshotError::Bundle {
                path: bundle.info.path.clone().unwrap_or_default(),
                message: e.to_string(),
            }
        })?;
    if added.is_empty() {
        return Ok(());
    }
    let remote = crate::bootstrap::phases::apiserver_config::remote_encryption_config();
    for h in controllers {
        let t = ctx.transport(&h.name).await?;
        t.upload(Payload::File(&files.config), &remote, 0o600)
            .await?;
    }
    ctx.say(&format!(
        "encryption: the bundle's keys {} added back as read keys (`kiln encryption rotate` re-seals their Secrets and drops them)",
        added.join(", ")
    ));
    Ok(())
}

/// Move the control plane's manifests aside (the kubelet stops those pods) and wait until none of their
/// processes is left; kiln's own binaries that linger are killed by PID.
async fn stop_control_plane(t: &dyn Transport) -> Result<(), SnapshotError> {
    let files: Vec<String> = CONTROL_PLANE
        .iter()
        .map(|c| format!("{MANIFESTS}/{c}.yaml"))
        .collect();
    t.run(&format!(
        "mkdir -p {STOPPED}; for f in {}; do [ -e $f ] && mv $f {STOPPED}/; done; true",
        files.join(" ")
    ))
    .await?;
    let exes: Vec<String> = CONTROL_PLANE
        .iter()
        .map(|c| format!("/usr/local/bin/{c}"))
        .collect();
    let pids = format!(
        "for p in /proc/[0-9]*; do e=$(readlink $p/exe 2>/dev/null) || continue; case \" {} \" in *\" $e \"*) echo ${{p#/proc/}};; esac; done",
        exes.join(" ")
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let left = t.run(&pids).await?;
        if left.trim().is_empty() {
            return Ok(());
        }
        if Instant::now() > deadline {
            t.run(&format!(
                "kill -KILL {} 2>/dev/null; true",
                left.split_whitespace().collect::<Vec<_>>().join(" ")
            ))
            .await?;
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// The restored store holds exactly the bundle's objects at the snapshot's revision, and is at or past it.
async fn verify(ctx: &Context, info: &BundleInfo) -> Result<(), SnapshotError> {
    for h in ctx.cluster.config.controllers() {
        let mut store = StoreClient::connect(ctx, h).await?;
        let count = store.count_registry(info.revision).await?;
        if count != info.registry_objects {
            return Err(SnapshotError::Verify(format!(
                "{}: {count} objects at revision {}, the bundle recorded {}",
                h.name, info.revision, info.registry_objects
            )));
        }
        ctx.say(&format!(
            "[{:>8}] verified: {count} objects at revision {} as in the bundle",
            h.name, info.revision
        ));
    }
    Ok(())
}
