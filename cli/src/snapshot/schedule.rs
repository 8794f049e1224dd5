//! `kiln snapshot schedule`: scheduled bundles taken on every controller itself, with rotation and a log.
//!
//! What runs on a controller is the `kiln` binary (pushed to /var/lib/kiln/bin/kiln, so `kiln reset` removes
//! it with the rest of /var/lib/kiln) doing `kiln snapshot save --on-host NAME` against the local store
//! member with the host's PKI (/etc/kiln/pki) and the cluster.yaml pushed to /etc/kiln/cluster.yaml. A
//! systemd timer runs it where systemd runs; elsewhere a small loop script started like the kubelet
//! supervisor (setsid, pid file in /run/kiln, again at boot from /etc/kiln/boot.sh). Each run appends one
//! line to /var/log/kiln/snapshots.log. The bundles' directory (default /var/backups/kiln) is user data:
//! neither `--remove` nor `kiln reset` deletes it.

use std::path::Path;
use std::time::Duration;

use serde::Serialize;

use super::SnapshotError;
use crate::bootstrap::phases::push::{install_files, staged, Install};
use crate::bootstrap::Context;
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

pub struct Schedule<'a> {
    pub every: &'a str,
    pub keep: usize,
    pub dir: &'a str,
    pub key_file: Option<&'a Path>,
}

/// Install (or update) the scheduled job on every controller.
pub async fn install(ctx: &Context, s: &Schedule<'_>) -> Result<(), SnapshotError> {
    let every = parse_duration(s.every)
        .map_err(|e| SnapshotError::Verify(e.to_string()))?
        .as_secs();
    if s.keep == 0 {
        return Err(SnapshotError::Verify("--keep must be at least 1".into()));
    }
    let key = match s.key_file {
        // Refuse an unusable key here rather than in every scheduled run.
        Some(k) => Some(super::KeyMaterial::from_file(k).map(|_| k)?),
        None => None,
    };
    let exe = std::env::current_exe().map_err(super::io("finding", Path::new("kiln")))?;
    let conf = format!(
        "# managed by kiln: `kiln snapshot schedule`\nEVERY={}\nEVERY_SECS={every}\nKEEP={}\nDIR={}\n",
        s.every,
        s.keep,
        shell_quote(s.dir)
    );
    for h in ctx.cluster.config.controllers() {
        let t = ctx.transport(&h.name).await?;
        let mut save = format!(
            "{BIN} --log warn snapshot save -f {CLUSTER_YAML} --on-host {} -o {} --keep {} --log-file {LOG}",
            shell_quote(&h.name),
            shell_quote(s.dir),
            s.keep
        );
        if key.is_some() {
            save.push_str(&format!(" --encrypt-key-file {KEY}"));
        }
        let mut c = tera::Context::new();
        c.insert("save_command", &save);
        c.insert("every", s.every);
        c.insert("every_secs", &every);
        let conf_file = ctx.state_dir.join("rendered").join(&h.name);
        std::fs::create_dir_all(&conf_file).map_err(super::io("creating", &conf_file))?;
        let conf_file = conf_file.join("snapshot-schedule.conf");
        kiln_pki::files::write_atomic(&conf_file, conf.as_bytes(), 0o600)
            .map_err(|e| SnapshotError::Verify(format!("writing {}: {e}", conf_file.display())))?;
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
        let systemd = t.exec("test -d /run/systemd/system", None).await?.success();
        if systemd {
            files.push(staged(
                ctx,
                &h.name,
                "kiln-snapshot.service",
                &c,
                SERVICE,
                0o644,
            )?);
            files.push(staged(
                ctx,
                &h.name,
                "kiln-snapshot.timer",
                &c,
                TIMER,
                0o644,
            )?);
            install_files(ctx, &h.name, &files).await?;
            t.run("systemctl daemon-reload && systemctl enable kiln-snapshot.timer && systemctl restart kiln-snapshot.timer")
                .await?;
            ctx.say(&format!(
                "[{:>8}] systemd timer kiln-snapshot.timer: every {}, keep {}, in {}",
                h.name, s.every, s.keep, s.dir
            ));
        } else {
            files.push(staged(
                ctx,
                &h.name,
                "snapshot-schedule.sh",
                &c,
                SCRIPT,
                0o755,
            )?);
            install_files(ctx, &h.name, &files).await?;
            // Restart the loop so a changed interval or command applies now.
            stop_loop(&*t).await?;
            t.run(&format!(
                "setsid /bin/sh {SCRIPT} </dev/null >/dev/null 2>&1 &"
            ))
            .await?;
            ctx.say(&format!(
                "[{:>8}] snapshot loop (no systemd): every {}, keep {}, in {}",
                h.name, s.every, s.keep, s.dir
            ));
        }
    }
    Ok(())
}

/// Stop the loop script by its pid file: TERM to the script alone lets a save in progress finish (the
/// shell runs its trap after the foreground command), then its whole session is killed if still there.
async fn stop_loop(t: &dyn crate::transport::Transport) -> Result<(), SnapshotError> {
    t.run(&format!(
        "p=$(cat {PID} 2>/dev/null) || exit 0; kill -TERM $p 2>/dev/null; \
         for i in $(seq 600); do kill -0 $p 2>/dev/null || break; sleep 0.1; done; kill -KILL -- -$p 2>/dev/null; \
         rm -f {PID}; true"
    ))
    .await?;
    Ok(())
}

/// Uninstall from every controller: timer or loop stopped, its files gone. Bundles and the log stay.
pub async fn remove(ctx: &Context) -> Result<(), SnapshotError> {
    for h in ctx.cluster.config.controllers() {
        let t = ctx.transport(&h.name).await?;
        t.run(&format!(
            "if [ -e {TIMER} ]; then systemctl disable --now kiln-snapshot.timer 2>/dev/null; \
             rm -f {TIMER} {SERVICE}; systemctl daemon-reload 2>/dev/null; fi; true"
        ))
        .await?;
        stop_loop(&*t).await?;
        t.run(&format!("rm -f {SCRIPT} {CONF} {KEY} {CLUSTER_YAML} {BIN}; rmdir /var/lib/kiln/bin 2>/dev/null; true"))
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
pub async fn status(ctx: &Context) -> Result<Vec<HostStatus>, SnapshotError> {
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

/// One line for the log of scheduled runs.
pub fn log_line(result: &Result<super::BundleInfo, SnapshotError>) -> String {
    let now = time::OffsetDateTime::now_utc()
        .format(time::macros::format_description!(
            "[year]-[month]-[day]T[hour]:[minute]:[second]Z"
        ))
        .unwrap_or_default();
    match result {
        Ok(i) => format!(
            "{now} ok {} revision={} objects={} sha256={}{}\n",
            i.path
                .as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
            i.revision,
            i.registry_objects,
            i.snapshot_sha256,
            if i.encrypted { " encrypted" } else { "" }
        ),
        Err(e) => format!("{now} error {}\n", e.to_string().replace('\n', " ")),
    }
}

/// Append a line to the log (0600: it names the bundles).
pub fn append_log(path: &Path, line: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    // The directory is not created: on a controller it is /var/log/kiln, and a run that ends after
    // `kiln reset` removed it must not bring it back.
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(line.as_bytes())
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
}
