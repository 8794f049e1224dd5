//! `kiln snapshot schedule`: scheduled bundles taken on every controller itself, with rotation and a log.
//!
//! What runs on a controller is the `kiln` binary (pushed to /var/lib/kiln/bin/kiln, so `kiln reset` removes
//! it with the rest of /var/lib/kiln) doing `kiln snapshot save --on-host NAME` against the local store
//! member with the host's PKI (/etc/kiln/pki) and the cluster.yaml pushed to /etc/kiln/cluster.yaml. A
//! systemd timer runs it where systemd runs; elsewhere a small loop script started like the kubelet
//! supervisor (setsid, pid file in /run/kiln, again at boot from /etc/kiln/boot.sh). Each run appends one
//! line to /var/log/kiln/snapshots.log. The bundles' directory (default /var/backups/kiln) is user data:
//! neither `--remove` nor `kiln reset` deletes it. The line each run appends is `snapshot::run_log`'s.

use std::path::Path;
use std::time::Duration;

use serde::Serialize;

use super::destination::install_credentials;
use super::encrypt::KeyMaterial;
use super::s3::{Credentials, HOST_CREDENTIALS};
use super::{io, BackupStoreError};
use crate::bootstrap::host_files::{install_files, staged, Install};
use crate::bootstrap::Context;
use crate::config::backup::S3Destination;
use crate::transport::shell_quote;

pub const HOST_PKI: &str = "/etc/kiln/pki";
pub const DEFAULT_DIR: &str = "/var/backups/kiln";
pub const LOG: &str = "/var/log/kiln/snapshots.log";
const BIN: &str = "/var/lib/kiln/bin/kiln";
const CLUSTER_YAML: &str = "/etc/kiln/cluster.yaml";
const KEY: &str = "/etc/kiln/snapshot.key";
const CONF: &str = "/etc/kiln/snapshot-schedule.conf";
const SCRIPT: &str = "/etc/kiln/snapshot-schedule.sh";
const PID: &str = "/run/kiln/snapshot-schedule.pid";
const SERVICE: &str = "/etc/systemd/system/kiln-snapshot.service";
const TIMER: &str = "/etc/systemd/system/kiln-snapshot.timer";

#[derive(Debug, thiserror::Error)]
pub enum ScheduleError {
    #[error("duration {0:?}: expected a number and a unit s, m, h or d (e.g. 6h, 30m, 45s)")]
    Duration(String),
    #[error("schedule {0:?}: {1}")]
    Cron(String, String),
}

/// `6h`, `30m`, `45s`, `1d`, or combinations like `1h30m`.
pub fn parse_duration(s: &str) -> Result<Duration, ScheduleError> {
    let bad = || ScheduleError::Duration(s.to_string());
    let (mut total, mut num) = (0u64, String::new());
    for c in s.trim().chars() {
        if c.is_ascii_digit() {
            num.push(c);
            continue;
        }
        let n: u64 = num.parse().map_err(|_| bad())?;
        num.clear();
        let unit = match c {
            's' => 1,
            'm' => 60,
            'h' => 3600,
            'd' => 86400,
            _ => return Err(bad()),
        };
        total = n
            .checked_mul(unit)
            .and_then(|v| total.checked_add(v))
            .ok_or_else(bad)?;
    }
    if !num.is_empty() || total == 0 {
        return Err(bad());
    }
    Ok(Duration::from_secs(total))
}

/// What a schedule installs; `kiln snapshot schedule` and init's backup-schedule phase (from
/// `spec.store.backup`) both build one, so both install exactly the same files.
pub struct Schedule<'a> {
    /// robfig cron as `spec.store.backup.schedule` (5 fields, `@daily`, `@every 6h`, `TZ=…`), or a bare
    /// interval as `--every` takes it (`6h`), read as `@every 6h`.
    pub every: &'a str,
    pub keep: usize,
    pub dir: &'a str,
    pub key_file: Option<&'a Path>,
    /// Also upload each bundle here, with these credentials (written to the controllers, 0600).
    pub s3: Option<(&'a S3Destination, &'a Credentials)>,
}

/// How the loop waits: a fixed interval, or until the next time a cron schedule names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cadence {
    Every(u64),
    Cron(String),
}

/// `6h` (an interval), `@every 6h`, or a cron schedule; errors are robfig's texts.
pub fn cadence(spec: &str) -> Result<Cadence, ScheduleError> {
    if let Ok(d) = parse_duration(spec) {
        return Ok(Cadence::Every(d.as_secs()));
    }
    if let Some(d) = spec.trim().strip_prefix("@every ") {
        return parse_duration(d.trim()).map(|d| Cadence::Every(d.as_secs()));
    }
    kiln_common::cron::parse_standard(spec)
        .map_err(|e| ScheduleError::Cron(spec.to_string(), e.to_string()))?;
    Ok(Cadence::Cron(spec.trim().to_string()))
}

/// The next run of a cron schedule after `now` (epoch seconds), for the loop script.
pub fn next_run(spec: &str, now: i64) -> Result<i64, ScheduleError> {
    let s = kiln_common::cron::parse_standard(spec)
        .map_err(|e| ScheduleError::Cron(spec.to_string(), e.to_string()))?;
    s.next(now)
        .ok_or_else(|| ScheduleError::Cron(spec.to_string(), "it never runs".into()))
}

/// The command each scheduled run executes: no secret in it (credentials are read from their file).
fn save_command(host: &str, s: &Schedule<'_>) -> String {
    let mut save = format!(
        "{BIN} --log warn snapshot save -f {CLUSTER_YAML} --on-host {} -o {} --keep {} --log-file {LOG}",
        shell_quote(host),
        shell_quote(s.dir),
        s.keep
    );
    if s.key_file.is_some() {
        save.push_str(&format!(" --encrypt-key-file {KEY}"));
    }
    if let Some((d, _)) = s.s3 {
        let url = format!("s3://{}/{}", d.bucket, d.prefix.trim_matches('/'));
        save.push_str(&format!(
            " --s3 {} --s3-region {} --s3-credentials-file {}",
            shell_quote(url.trim_end_matches('/')),
            shell_quote(&d.region),
            HOST_CREDENTIALS
        ));
        if !d.endpoint.is_empty() {
            save.push_str(&format!(" --s3-endpoint {}", shell_quote(&d.endpoint)));
        }
    }
    save
}

/// Install (or update) the scheduled job on every controller.
pub async fn install(ctx: &Context, s: &Schedule<'_>) -> Result<(), BackupStoreError> {
    for h in ctx.cluster.config.controllers() {
        install_on(ctx, &h.name, s).await?;
    }
    Ok(())
}

/// Install (or update) the scheduled job on one controller; true when anything changed there. Unchanged
/// files are not uploaded and a running job is left alone, so a re-run of `kiln init` converges.
pub async fn install_on(
    ctx: &Context,
    host: &str,
    s: &Schedule<'_>,
) -> Result<bool, BackupStoreError> {
    let cadence = cadence(s.every).map_err(|e| BackupStoreError::Invalid(e.to_string()))?;
    if s.keep == 0 {
        return Err(BackupStoreError::Invalid(
            "--keep must be at least 1".into(),
        ));
    }
    let key = match s.key_file {
        // Refuse an unusable key here rather than in every scheduled run.
        Some(k) => Some(KeyMaterial::from_file(k).map(|_| k)?),
        None => None,
    };
    let exe = std::env::current_exe().map_err(io("finding", Path::new("kiln")))?;
    let conf = format!(
        "# managed by kiln: `kiln snapshot schedule`\nEVERY={}\nKEEP={}\nDIR={}\n{}",
        shell_quote(s.every),
        s.keep,
        shell_quote(s.dir),
        match s.s3 {
            Some((d, _)) => format!(
                "S3={}\n",
                shell_quote(&format!("s3://{}/{}", d.bucket, d.prefix))
            ),
            None => String::new(),
        }
    );
    let t = ctx.transport(host).await?;
    let mut c = tera::Context::new();
    c.insert("save_command", &save_command(host, s));
    c.insert("every", s.every);
    match &cadence {
        Cadence::Every(secs) => c.insert("every_secs", secs),
        Cadence::Cron(spec) => c.insert(
            "next_command",
            &format!("{BIN} snapshot next-run {}", shell_quote(spec)),
        ),
    }
    let conf_file = ctx.state_dir.join("rendered").join(host);
    std::fs::create_dir_all(&conf_file).map_err(io("creating", &conf_file))?;
    let conf_file = conf_file.join("snapshot-schedule.conf");
    kiln_pki::files::write_atomic(&conf_file, conf.as_bytes(), 0o600)
        .map_err(|e| BackupStoreError::Invalid(format!("writing {}: {e}", conf_file.display())))?;
    let mut files = vec![
        Install {
            local: exe.clone(),
            remote: BIN.into(),
            mode: 0o755,
        },
        Install {
            local: ctx.cluster.path.clone(),
            remote: CLUSTER_YAML.into(),
            mode: 0o600,
        },
        Install {
            local: conf_file,
            remote: CONF.into(),
            mode: 0o600,
        },
    ];
    if let Some(k) = key {
        files.push(Install {
            local: k.to_path_buf(),
            remote: KEY.into(),
            mode: 0o600,
        });
    }
    t.run(&format!(
        "mkdir -p /var/lib/kiln/bin /run/kiln /var/log/kiln && mkdir -p -m 0700 {}",
        shell_quote(s.dir)
    ))
    .await?;
    let mut changed = false;
    match s.s3 {
        Some((_, creds)) => {
            changed |= install_credentials(&*t, creds).await?;
        }
        None => {
            t.run(&format!("rm -f {}", HOST_CREDENTIALS)).await?;
        }
    }
    let systemd = t.exec("test -d /run/systemd/system", None).await?.success();
    // systemd's timer takes an interval; a cron schedule runs the loop script under a service instead.
    let timer = systemd && matches!(cadence, Cadence::Every(_));
    if timer {
        files.push(staged(
            ctx,
            host,
            "kiln-snapshot.service",
            &c,
            SERVICE,
            0o644,
        )?);
        files.push(staged(ctx, host, "kiln-snapshot.timer", &c, TIMER, 0o644)?);
        changed |= !install_files(ctx, host, &files).await?.is_empty();
        let active = t
            .exec("systemctl is-active -q kiln-snapshot.timer", None)
            .await?
            .success();
        if changed || !active {
            t.run("systemctl daemon-reload && systemctl enable kiln-snapshot.timer && systemctl restart kiln-snapshot.timer")
                .await?;
        }
        ctx.say(&format!(
            "[{:>8}] systemd timer kiln-snapshot.timer: every {}, keep {}, in {}",
            host, s.every, s.keep, s.dir
        ));
    } else {
        files.push(staged(
            ctx,
            host,
            "snapshot-schedule.sh",
            &c,
            SCRIPT,
            0o755,
        )?);
        if systemd {
            files.push(staged(
                ctx,
                host,
                "kiln-snapshot-loop.service",
                &c,
                SERVICE,
                0o644,
            )?);
        }
        changed |= !install_files(ctx, host, &files).await?.is_empty();
        let running = t
            .exec(
                &format!("kill -0 \"$(cat {PID} 2>/dev/null)\" 2>/dev/null"),
                None,
            )
            .await?
            .success();
        if systemd {
            if changed || !running {
                t.run("systemctl disable --now kiln-snapshot.timer 2>/dev/null; rm -f /etc/systemd/system/kiln-snapshot.timer; \
                       systemctl daemon-reload && systemctl enable kiln-snapshot.service && systemctl restart kiln-snapshot.service")
                    .await?;
            }
        } else if changed || !running {
            // Restart the loop so a changed interval or command applies now.
            stop_loop(&*t).await?;
            t.run(&format!(
                "setsid /bin/sh {SCRIPT} </dev/null >/dev/null 2>&1 &"
            ))
            .await?;
        }
        ctx.say(&format!(
            "[{:>8}] snapshot loop{}: {}, keep {}, in {}{}",
            host,
            if systemd {
                " (systemd service)"
            } else {
                " (no systemd)"
            },
            s.every,
            s.keep,
            s.dir,
            match s.s3 {
                Some((d, _)) => format!(", uploaded to s3://{}/{}", d.bucket, d.prefix),
                None => String::new(),
            }
        ));
    }
    Ok(changed)
}

/// Stop the loop script by its pid file: TERM to the script alone lets a save in progress finish (the
/// shell runs its trap after the foreground command), then its whole session is killed if still there.
async fn stop_loop(t: &dyn crate::transport::Transport) -> Result<(), BackupStoreError> {
    t.run(&format!(
        "p=$(cat {PID} 2>/dev/null) || exit 0; kill -TERM $p 2>/dev/null; \
         for i in $(seq 600); do kill -0 $p 2>/dev/null || break; sleep 0.1; done; kill -KILL -- -$p 2>/dev/null; \
         rm -f {PID}; true"
    ))
    .await?;
    Ok(())
}

/// Uninstall from every controller: timer or loop stopped, its files gone. Bundles and the log stay.
pub async fn remove(ctx: &Context) -> Result<(), BackupStoreError> {
    for h in ctx.cluster.config.controllers() {
        let t = ctx.transport(&h.name).await?;
        t.run(&format!(
            "if [ -e {TIMER} ] || [ -e {SERVICE} ]; then systemctl disable --now kiln-snapshot.timer kiln-snapshot.service 2>/dev/null; \
             rm -f {TIMER} {SERVICE}; systemctl daemon-reload 2>/dev/null; fi; true"
        ))
        .await?;
        stop_loop(&*t).await?;
        t.run(&format!("rm -f {SCRIPT} {CONF} {KEY} {CLUSTER_YAML} {BIN} {}; rmdir /var/lib/kiln/bin 2>/dev/null; true", HOST_CREDENTIALS))
            .await?;
        ctx.say(&format!("[{:>8}] snapshot schedule removed", h.name));
    }
    Ok(())
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HostStatus {
    pub host: String,
    pub installed: bool,
    /// "systemd", "loop" or "" when not installed.
    pub mode: String,
    pub running: bool,
    pub every: String,
    pub keep: String,
    pub dir: String,
    /// The log's last line: "<time> ok <file> revision=… sha256=…" or "<time> error <message>".
    pub last_run: String,
    pub last_result: String,
    pub bundles: usize,
}

/// Per controller: installed?, interval, last run and result, bundles in the directory.
pub async fn status(ctx: &Context) -> Result<Vec<HostStatus>, BackupStoreError> {
    let mut out = vec![];
    for h in ctx.cluster.config.controllers() {
        let t = ctx.transport(&h.name).await?;
        let script = format!(
            "if [ -f {CONF} ]; then . {CONF}; echo installed=1; echo every=$EVERY; echo keep=$KEEP; echo dir=$DIR; \
               echo bundles=$(ls \"$DIR\" 2>/dev/null | grep -c '\\.kiln-bundle\\.tar$'); fi; \
             if [ -e {TIMER} ]; then echo mode=systemd; systemctl is-active -q kiln-snapshot.timer && echo running=1; \
             elif [ -e {SCRIPT} ]; then echo mode=loop; kill -0 \"$(cat {PID} 2>/dev/null)\" 2>/dev/null && echo running=1; fi; \
             echo last=$(tail -n 1 {LOG} 2>/dev/null); true"
        );
        let text = t.run(&script).await?;
        let get = |k: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(&format!("{k}=")))
                .unwrap_or("")
                .to_string()
        };
        let last = get("last");
        let mut parts = last.splitn(2, ' ');
        let last_run = parts.next().unwrap_or("").to_string();
        let last_result = parts.next().unwrap_or("").to_string();
        out.push(HostStatus {
            host: h.name.clone(),
            installed: get("installed") == "1",
            mode: get("mode"),
            running: get("running") == "1",
            every: get("every"),
            keep: get("keep"),
            dir: get("dir"),
            last_run,
            last_result,
            bundles: get("bundles").parse().unwrap_or(0),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_units() {
        assert_eq!(parse_duration("6h").unwrap().as_secs(), 6 * 3600);
        assert_eq!(parse_duration("30m").unwrap().as_secs(), 1800);
        assert_eq!(parse_duration("45s").unwrap().as_secs(), 45);
        assert_eq!(parse_duration("1h30m").unwrap().as_secs(), 5400);
        assert_eq!(parse_duration("2d").unwrap().as_secs(), 172800);
        for bad in ["", "6", "h", "0s", "5x", "-1h", "1.5h"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_loop_script_and_units_render() {
        let mut c = tera::Context::new();
        c.insert("save_command", "/var/lib/kiln/bin/kiln snapshot save");
        c.insert("every", "20s");
        c.insert("every_secs", &20);
        let render = |text: &str| {
            let mut t = tera::Tera::default();
            t.add_raw_template("t", text).unwrap();
            t.render("t", &c).unwrap()
        };
        let s = render(include_str!("../../../templates/snapshot-schedule.sh"));
        assert!(s.contains("next=$((now + 20))"), "{s}");
        assert!(
            s.contains("/var/lib/kiln/bin/kiln snapshot save >/dev/null"),
            "{s}"
        );
        let t = render(include_str!("../../../templates/kiln-snapshot.timer"));
        assert!(t.contains("OnUnitActiveSec=20s"), "{t}");
    }

    #[test]
    fn cadences_are_intervals_or_cron() {
        assert_eq!(cadence("6h").unwrap(), Cadence::Every(6 * 3600));
        assert_eq!(cadence("@every 30s").unwrap(), Cadence::Every(30));
        assert_eq!(
            cadence("0 */6 * * *").unwrap(),
            Cadence::Cron("0 */6 * * *".into())
        );
        assert_eq!(cadence("@daily").unwrap(), Cadence::Cron("@daily".into()));
        let e = cadence("* * *").unwrap_err().to_string();
        assert!(e.contains("expected exactly 5 fields, found 3"), "{e}");
        assert!(cadence("@every 0s").is_err());
        // 2026-12-06T11:21:43Z → the next 6-hourly slot is 12:00.
        assert_eq!(
            next_run("0 */6 * * *", 1_796_556_103).unwrap(),
            1_796_558_400
        );
    }

    #[test]
    fn a_cron_loop_waits_for_each_next_time() {
        let mut c = tera::Context::new();
        c.insert("save_command", "/var/lib/kiln/bin/kiln snapshot save");
        c.insert(
            "next_command",
            "/var/lib/kiln/bin/kiln snapshot next-run '0 */6 * * *'",
        );
        let mut t = tera::Tera::default();
        t.add_raw_template("t", include_str!("../../../templates/snapshot-schedule.sh"))
            .unwrap();
        let s = t.render("t", &c).unwrap();
        assert_eq!(
            s.matches("next=$(/var/lib/kiln/bin/kiln snapshot next-run '0 */6 * * *')")
                .count(),
            2,
            "{s}"
        );
        assert!(!s.contains("next=0"), "{s}");
    }

    #[test]
    fn the_scheduled_command_names_the_bucket_but_carries_no_secret() {
        let d = S3Destination {
            endpoint: "http://10.250.0.1:9000".into(),
            bucket: "kiln-backups".into(),
            prefix: "prod/".into(),
            region: "eu-west-1".into(),
            credentials_file: None,
        };
        let creds = Credentials {
            access_key_id: "AKIAEXAMPLE".into(),
            secret_access_key: "wJalrXUtnFEMI".into(),
            session_token: Some("tok3n".into()),
        };
        let s = Schedule {
            every: "@every 1m",
            keep: 3,
            dir: "/var/backups/kiln",
            key_file: None,
            s3: Some((&d, &creds)),
        };
        let cmd = save_command("c1", &s);
        assert!(
            cmd.ends_with(" --s3 s3://kiln-backups/prod --s3-region eu-west-1 --s3-credentials-file /etc/kiln/s3.credentials --s3-endpoint http://10.250.0.1:9000"),
            "{cmd}"
        );
        for secret in ["AKIAEXAMPLE", "wJalrXUtnFEMI", "tok3n"] {
            assert!(!cmd.contains(secret), "{cmd}");
        }
    }
}
