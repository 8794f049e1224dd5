//! `kiln snapshot schedule --drill`: the operator machine's cron entry that runs `kiln drill
//! --scheduled` (routine drills, `spec.store.backup.drill`). Drills make scratch `kiln lab` hosts, so
//! they run where kiln runs, not on a controller: the entry is a file of its own in `/etc/cron.d`
//! (`kiln-drill-<cluster>`), written only when its content differs and removed only when it is kiln's.
//! The run itself decides whether a drill is due (every N bundles), so the entry can run often.

use std::path::{Path, PathBuf};

use crate::transport::shell_quote;

/// Where the entry goes: cron's drop-in directory (Debian's cron and cronie read it).
pub const CRON_DIR: &str = "/etc/cron.d";
/// When the entry runs unless told (`--every`): hourly, at half past. A run that is not due only
/// lists the schedule's bundles and exits.
pub const DEFAULT_AT: &str = "30 * * * *";
/// The first line of every file kiln writes there; `--remove` deletes no other.
const MANAGED: &str = "# managed by kiln";
/// What a scheduled drill may need on its PATH (cron's own is /usr/bin:/bin).
const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

#[derive(Debug, thiserror::Error)]
pub enum DrillCronError {
    #[error(
        "--every {0:?}: a cron.d entry takes 5 fields or @hourly, @daily, @weekly, @monthly, @yearly \
         (no @every, TZ= or bare interval: write e.g. \"30 */6 * * *\")"
    )]
    NotForCron(String),
    #[error("--every {0:?}: {1}")]
    Invalid(String, String),
    #[error(
        "{0} holds a file that is not kiln's (its first line is not {MANAGED:?}): not touched"
    )]
    Foreign(PathBuf),
    #[error(
        "{0} does not exist: is cron installed? (add this line to the machine's scheduler instead: {1})"
    )]
    NoCron(PathBuf, String),
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// One cluster's drill entry.
#[derive(Debug, Clone)]
pub struct DrillCron {
    /// `metadata.name`: names the file and the lock.
    pub cluster: String,
    /// Cron's time fields, checked by [`cron_time`].
    pub at: String,
    /// This kiln, the cluster.yaml and the bundle key, absolute (cron runs from `/`).
    pub kiln: PathBuf,
    pub file: PathBuf,
    pub key_file: Option<PathBuf>,
    /// The state directory: the run's output goes to `drill-cron.log` there.
    pub state_dir: PathBuf,
}

/// How the install went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Installed {
    Written(PathBuf),
    Unchanged(PathBuf),
}

/// `--every` as a cron.d time: five fields, or one of the macros cron itself knows. Checked with the
/// same parser as CronJob schedules; forms only robfig's parser knows are refused with the reason.
pub fn cron_time(spec: Option<&str>) -> Result<String, DrillCronError> {
    let Some(spec) = spec else {
        return Ok(DEFAULT_AT.to_string());
    };
    let spec = spec.trim();
    const MACROS: &[&str] = &[
        "@yearly",
        "@annually",
        "@monthly",
        "@weekly",
        "@daily",
        "@midnight",
        "@hourly",
    ];
    let fields = spec.split_whitespace().count();
    let cron_form = if spec.starts_with('@') {
        MACROS.contains(&spec)
    } else {
        fields == 5 && !spec.contains('=')
    };
    if !cron_form {
        return Err(DrillCronError::NotForCron(spec.to_string()));
    }
    kiln_common::cron::parse_standard(spec)
        .map_err(|e| DrillCronError::Invalid(spec.to_string(), e.to_string()))?;
    Ok(spec.split_whitespace().collect::<Vec<_>>().join(" "))
}

/// The file's name in cron.d: cron skips names with anything but letters, digits, `-` and `_`.
pub fn file_name(cluster: &str) -> String {
    let safe: String = cluster
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("kiln-drill-{safe}")
}

/// A path as one shell word on a cron command line, where `%` ends the command unless escaped.
fn word(p: &Path) -> String {
    shell_quote(&p.display().to_string()).replace('%', "\\%")
}

impl DrillCron {
    /// The command the entry runs: one drill at a time (`flock -n`: a run that finds the previous
    /// still going exits), its output appended to the state directory's `drill-cron.log`.
    pub fn command(&self) -> String {
        let lock = format!("/run/lock/{}.lock", file_name(&self.cluster));
        let mut cmd = format!(
            "flock -n {lock} {} drill -f {} --scheduled",
            word(&self.kiln),
            word(&self.file)
        );
        if let Some(k) = &self.key_file {
            cmd.push_str(&format!(" --encrypt-key-file {}", word(k)));
        }
        cmd.push_str(&format!(
            " >> {} 2>&1",
            word(&self.state_dir.join("drill-cron.log"))
        ));
        cmd
    }

    /// The whole file.
    pub fn render(&self) -> String {
        format!(
            "{MANAGED}: routine restore drills of cluster {} (`kiln snapshot schedule --drill`; \
             `--drill --remove` deletes this file).\n\
             # `kiln drill --scheduled` drills the newest bundle once spec.store.backup.drill.every bundles\n\
             # were taken since the last drill, and otherwise exits at once; results: kiln status.\n\
             PATH={PATH}\n\
             {} root {}\n",
            self.cluster,
            self.at,
            self.command()
        )
    }
}

fn io<'a>(
    what: &'static str,
    path: &'a Path,
) -> impl FnOnce(std::io::Error) -> DrillCronError + 'a {
    move |source| DrillCronError::Io {
        what,
        path: path.to_path_buf(),
        source,
    }
}

/// Whether `path` is absent or a file kiln wrote.
fn ours(path: &Path) -> Result<bool, DrillCronError> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(text.starts_with(MANAGED)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(true),
        Err(e) => Err(io("reading", path)(e)),
    }
}

/// Write the entry into `dir` (cron.d) unless it is there already as it would be written: 0644, by a
/// rename (cron never reads half a file).
pub fn install(dir: &Path, entry: &DrillCron) -> Result<Installed, DrillCronError> {
    if !dir.is_dir() {
        return Err(DrillCronError::NoCron(
            dir.to_path_buf(),
            format!("{} root {}", entry.at, entry.command()),
        ));
    }
    let path = dir.join(file_name(&entry.cluster));
    let text = entry.render();
    if std::fs::read_to_string(&path).ok().as_deref() == Some(text.as_str()) {
        return Ok(Installed::Unchanged(path));
    }
    if !ours(&path)? {
        return Err(DrillCronError::Foreign(path));
    }
    // A dot name: cron ignores it while it is written.
    let tmp = dir.join(format!(".{}.tmp", file_name(&entry.cluster)));
    std::fs::write(&tmp, &text).map_err(io("writing", &tmp))?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o644))
        .map_err(io("chmod", &tmp))?;
    std::fs::rename(&tmp, &path).map_err(io("renaming", &path))?;
    tracing::info!(path = %path.display(), "drill cron entry written");
    Ok(Installed::Written(path))
}

/// Remove the cluster's entry from `dir`; None when there was none.
pub fn remove(dir: &Path, cluster: &str) -> Result<Option<PathBuf>, DrillCronError> {
    let path = dir.join(file_name(cluster));
    if !path.exists() {
        return Ok(None);
    }
    if !ours(&path)? {
        return Err(DrillCronError::Foreign(path));
    }
    std::fs::remove_file(&path).map_err(io("removing", &path))?;
    tracing::info!(path = %path.display(), "drill cron entry removed");
    Ok(Some(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(at: &str) -> DrillCron {
        DrillCron {
            cluster: "prod".into(),
            at: at.into(),
            kiln: "/usr/local/bin/kiln".into(),
            file: "/srv/prod 1/cluster.yaml".into(),
            key_file: Some("/srv/prod/50%.pass".into()),
            state_dir: "/srv/prod/.kiln".into(),
        }
    }

    #[test]
    fn the_entry_runs_the_scheduled_drill_as_root_one_at_a_time() {
        let text = entry("30 */6 * * *").render();
        assert!(text.starts_with("# managed by kiln: "), "{text}");
        let line = text.lines().last().unwrap();
        assert_eq!(
            line,
            "30 */6 * * * root flock -n /run/lock/kiln-drill-prod.lock /usr/local/bin/kiln drill \
             -f '/srv/prod 1/cluster.yaml' --scheduled --encrypt-key-file /srv/prod/50\\%.pass \
             >> /srv/prod/.kiln/drill-cron.log 2>&1"
        );
        assert!(text.contains("\nPATH=/usr/local/sbin:"), "{text}");
    }

    #[test]
    fn times_cron_cannot_read_are_refused() {
        assert_eq!(cron_time(None).unwrap(), DEFAULT_AT);
        assert_eq!(cron_time(Some(" 30  */6 * * * ")).unwrap(), "30 */6 * * *");
        assert_eq!(cron_time(Some("@daily")).unwrap(), "@daily");
        for bad in ["6h", "@every 6h", "TZ=UTC 0 3 * * *", "0 3 * *"] {
            assert!(
                matches!(cron_time(Some(bad)), Err(DrillCronError::NotForCron(_))),
                "{bad}"
            );
        }
        let e = cron_time(Some("61 * * * *")).unwrap_err();
        assert!(matches!(e, DrillCronError::Invalid(..)), "{e}");
    }

    #[test]
    fn file_names_are_ones_cron_reads() {
        assert_eq!(file_name("prod-eu_1"), "kiln-drill-prod-eu_1");
        assert_eq!(file_name("a.b"), "kiln-drill-a_b");
    }

    #[test]
    fn install_is_idempotent_and_remove_takes_only_kiln_files() {
        let dir = tempfile::tempdir().unwrap();
        let e = entry("30 * * * *");
        let path = dir.path().join("kiln-drill-prod");
        assert_eq!(
            install(dir.path(), &e).unwrap(),
            Installed::Written(path.clone())
        );
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o644);
        assert_eq!(
            install(dir.path(), &e).unwrap(),
            Installed::Unchanged(path.clone())
        );
        // Another time replaces the entry, nothing else is left beside it.
        assert_eq!(
            install(dir.path(), &entry("@daily")).unwrap(),
            Installed::Written(path.clone())
        );
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["kiln-drill-prod"]);
        assert!(std::fs::read_to_string(&path)
            .unwrap()
            .contains("\n@daily root flock"));
        assert_eq!(remove(dir.path(), "prod").unwrap(), Some(path.clone()));
        assert_eq!(remove(dir.path(), "prod").unwrap(), None);

        // A file of the same name that kiln did not write is neither replaced nor removed.
        std::fs::write(&path, "0 * * * * root true\n").unwrap();
        assert!(matches!(
            install(dir.path(), &e),
            Err(DrillCronError::Foreign(_))
        ));
        assert!(matches!(
            remove(dir.path(), "prod"),
            Err(DrillCronError::Foreign(_))
        ));
        assert!(path.exists());

        // No cron.d: the line to add elsewhere is in the error.
        let e = install(&dir.path().join("nope"), &entry("30 * * * *")).unwrap_err();
        assert!(e.to_string().contains("30 * * * * root flock -n"), "{e}");
    }
}
