//! `mounttest`: creates files with given permissions and prints the filesystem type, mode, permissions,
//! owner and content of paths, in exactly the lines the EmptyDir, ConfigMap, Secret, projected and
//! downward API volume e2e tests expect, e.g. `perms of file "/test-volume/test-file": -rw-r--r--`.

use std::ffi::CString;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::time::{Duration, Instant};

use clap::{ArgAction, Args};

use crate::gofmt::{self, quote};

/// What `--new_file_*` writes, and what `--file_content_in_loop` waits for.
pub const INITIAL_CONTENT: &str = "mount-tester new file\n";
const TMPFS_MAGIC: i64 = 0x0102_1994;

#[derive(Debug, Args, Default)]
pub struct MounttestArgs {
    /// Path to print the fs type for.
    #[arg(long = "fs_type", default_value = "")]
    pub fs_type: String,
    /// Path to print the mode bits of.
    #[arg(long = "file_mode", default_value = "")]
    pub file_mode: String,
    /// Path to print the perms of.
    #[arg(long = "file_perm", default_value = "")]
    pub file_perm: String,
    /// Path to print the owning UID and GID of.
    #[arg(long = "file_owner", default_value = "")]
    pub file_owner: String,
    /// Path to write to and read from with perm 0644.
    #[arg(long = "new_file_0644", default_value = "")]
    pub new_file_0644: String,
    /// Path to write to and read from with perm 0666.
    #[arg(long = "new_file_0666", default_value = "")]
    pub new_file_0666: String,
    /// Path to write to and read from with perm 0660.
    #[arg(long = "new_file_0660", default_value = "")]
    pub new_file_0660: String,
    /// Path to write to and read from with perm 0777.
    #[arg(long = "new_file_0777", default_value = "")]
    pub new_file_0777: String,
    /// Path to read the file content from.
    #[arg(long = "file_content", default_value = "")]
    pub file_content: String,
    /// Path to read the file content in loop from.
    #[arg(long = "file_content_in_loop", default_value = "")]
    pub file_content_in_loop: String,
    /// Retry time during the loop, in seconds.
    #[arg(long = "retry_time", default_value_t = 180)]
    pub retry_time: u64,
    /// Break out of the loop on expected content (with --file_content_in_loop only).
    #[arg(long = "break_on_expected_content", num_args = 0..=1, require_equals = true,
          default_value_t = true, default_missing_value = "true", action = ArgAction::Set)]
    pub break_on_expected_content: bool,
}

/// The filesystem type as upstream names it: `tmpfs`, or the magic number in decimal.
pub fn fs_type_name(magic: i64) -> String {
    if magic == TMPFS_MAGIC {
        "tmpfs".into()
    } else {
        magic.to_string()
    }
}

fn statfs_type(path: &str) -> std::io::Result<i64> {
    let c = CString::new(Path::new(path).as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    let mut buf: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a valid NUL-terminated path and `buf` a properly sized out-parameter.
    let rc = unsafe { libc::statfs(c.as_ptr(), &mut buf) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    #[allow(clippy::unnecessary_cast)]
    Ok(buf.f_type as i64)
}

type Step = Result<(), ()>;

fn fs_type(path: &str, out: &mut impl Write) -> Step {
    if path.is_empty() {
        return Ok(());
    }
    match statfs_type(path) {
        Ok(t) => {
            let _ = writeln!(out, "mount type of {}: {}", quote(path), fs_type_name(t));
            Ok(())
        }
        Err(e) => {
            let _ = writeln!(
                out,
                "error from statfs({}): {}",
                quote(path),
                gofmt::errno_text(&e)
            );
            Err(())
        }
    }
}

fn read_content(path: &str, out: &mut impl Write) -> Step {
    if path.is_empty() {
        return Ok(());
    }
    match std::fs::read(path) {
        Ok(bytes) => {
            let _ = writeln!(
                out,
                "content of file {}: {}",
                quote(path),
                String::from_utf8_lossy(&bytes)
            );
            Ok(())
        }
        Err(e) => {
            let _ = writeln!(
                out,
                "error reading file content for {}: {}",
                quote(path),
                gofmt::path_error("open", path, &e)
            );
            Err(())
        }
    }
}

/// Go's `os.WriteFile(path, content, perm)`: create (with `perm`, the umask cleared) or truncate.
fn write_new(path: &str, perm: u32, out: &mut impl Write) -> Step {
    if path.is_empty() {
        return Ok(());
    }
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(perm)
        .open(path)
        .and_then(|mut f| f.write_all(INITIAL_CONTENT.as_bytes()));
    if let Err(e) = written {
        let _ = writeln!(
            out,
            "error writing new file {}: {}",
            quote(path),
            gofmt::path_error("open", path, &e)
        );
        return Err(());
    }
    read_content(path, out)
}

fn stat_line(
    path: &str,
    out: &mut impl Write,
    line: impl Fn(&std::fs::Metadata) -> Vec<String>,
    lower_stat: bool,
) -> Step {
    if path.is_empty() {
        return Ok(());
    }
    match std::fs::metadata(path) {
        Ok(m) => {
            for l in line(&m) {
                let _ = writeln!(out, "{l}");
            }
            Ok(())
        }
        Err(e) => {
            // Upstream's owner check calls syscall.Stat (a bare errno), the others os.Stat (a PathError).
            let (name, err) = if lower_stat {
                ("stat", gofmt::errno_text(&e))
            } else {
                ("Stat", gofmt::path_error("stat", path, &e))
            };
            let _ = writeln!(out, "error from {name}({}): {err}", quote(path));
            Err(())
        }
    }
}

fn content_in_loop(
    path: &str,
    retry: Duration,
    break_on_expected: bool,
    pause: Duration,
    out: &mut impl Write,
) -> Step {
    if path.is_empty() {
        return Ok(());
    }
    let start = Instant::now();
    let mut last: Step = Ok(());
    let mut first = true;
    while start.elapsed() < retry {
        if !first {
            std::thread::sleep(pause);
        }
        first = false;
        match std::fs::read(path) {
            Err(e) => {
                let _ = writeln!(
                    out,
                    "Error reading file {path}: {}, retrying",
                    gofmt::path_error("open", path, &e)
                );
                last = Err(());
                continue;
            }
            Ok(bytes) => {
                last = Ok(());
                let text = String::from_utf8_lossy(&bytes);
                let _ = writeln!(out, "content of file {}: {text}", quote(path));
                if break_on_expected {
                    if text != INITIAL_CONTENT {
                        let _ = write!(
                            out,
                            "Unexpected content. Expected: {INITIAL_CONTENT}. Retrying"
                        );
                        continue;
                    }
                    break;
                }
            }
        }
    }
    let _ = out.flush();
    last
}

/// Runs the checks in upstream's order (fs type, new files, mode, perms, owner, content, content in a
/// loop), so one invocation can check a volume, write into it and read back; exit status 1 if any
/// failed.
pub fn run_with(args: &MounttestArgs, out: &mut impl Write) -> i32 {
    let results = [
        fs_type(&args.fs_type, out),
        write_new(&args.new_file_0644, 0o644, out),
        write_new(&args.new_file_0666, 0o666, out),
        write_new(&args.new_file_0660, 0o660, out),
        write_new(&args.new_file_0777, 0o777, out),
        stat_line(
            &args.file_mode,
            out,
            |m| {
                vec![format!(
                    "mode of file {}: {}",
                    quote(&args.file_mode),
                    gofmt::file_mode(m.mode())
                )]
            },
            false,
        ),
        stat_line(
            &args.file_perm,
            out,
            |m| {
                vec![format!(
                    "perms of file {}: {}",
                    quote(&args.file_perm),
                    gofmt::file_perm(m.mode())
                )]
            },
            false,
        ),
        stat_line(
            &args.file_owner,
            out,
            |m| {
                vec![
                    format!("owner UID of {}: {}", quote(&args.file_owner), m.uid()),
                    format!("owner GID of {}: {}", quote(&args.file_owner), m.gid()),
                ]
            },
            true,
        ),
        read_content(&args.file_content, out),
        content_in_loop(
            &args.file_content_in_loop,
            Duration::from_secs(args.retry_time),
            args.break_on_expected_content,
            Duration::from_secs(2),
            out,
        ),
    ];
    let _ = out.flush();
    if results.iter().any(Result::is_err) {
        1
    } else {
        0
    }
}

pub fn run(args: MounttestArgs) -> i32 {
    // Cleared so the new files get exactly the modes asked for.
    nix::sys::stat::umask(nix::sys::stat::Mode::empty());
    run_with(&args, &mut std::io::stdout().lock())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn output(args: &MounttestArgs) -> (i32, String) {
        let mut out = Vec::new();
        let code = run_with(args, &mut out);
        (code, String::from_utf8(out).unwrap())
    }

    #[test]
    fn new_file_perm_and_content_lines() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("test-file");
        let f = f.to_str().unwrap().to_string();
        let args = MounttestArgs {
            fs_type: dir.path().to_str().unwrap().into(),
            new_file_0644: f.clone(),
            file_perm: f.clone(),
            retry_time: 180,
            break_on_expected_content: true,
            ..Default::default()
        };
        // The umask is the process's: clear it as `run` does, for the 0644 to be exact.
        nix::sys::stat::umask(nix::sys::stat::Mode::empty());
        let (code, out) = output(&args);
        assert_eq!(code, 0, "{out}");
        let lines: Vec<&str> = out.lines().collect();
        assert!(lines[0].starts_with(&format!("mount type of \"{}\": ", dir.path().display())));
        assert_eq!(
            lines[1],
            format!("content of file \"{f}\": mount-tester new file")
        );
        assert_eq!(lines[3], format!("perms of file \"{f}\": -rw-r--r--"));
    }

    #[test]
    fn mode_owner_of_a_directory() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o3777)).unwrap();
        let p = dir.path().to_str().unwrap().to_string();
        let args = MounttestArgs {
            file_mode: p.clone(),
            file_perm: p.clone(),
            file_owner: p.clone(),
            ..Default::default()
        };
        let (code, out) = output(&args);
        assert_eq!(code, 0);
        let uid = nix::unistd::getuid();
        let gid = std::fs::metadata(&p).unwrap().gid();
        assert_eq!(
            out,
            format!(
                "mode of file \"{p}\": dgtrwxrwxrwx\nperms of file \"{p}\": -rwxrwxrwx\nowner UID of \"{p}\": {uid}\nowner GID of \"{p}\": {gid}\n"
            )
        );
    }

    #[test]
    fn a_missing_file_fails_with_go_s_message() {
        let args = MounttestArgs {
            file_content: "/nonexistent/x".into(),
            ..Default::default()
        };
        let (code, out) = output(&args);
        assert_eq!(code, 1);
        assert_eq!(
            out,
            "error reading file content for \"/nonexistent/x\": open /nonexistent/x: no such file or directory\n"
        );
    }

    #[test]
    fn tmpfs_has_a_name_others_a_number() {
        assert_eq!(fs_type_name(0x0102_1994), "tmpfs");
        assert_eq!(fs_type_name(0xEF53), "61267");
    }

    #[test]
    fn content_loop_stops_on_the_expected_content() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("f");
        std::fs::write(&f, INITIAL_CONTENT).unwrap();
        let mut out = Vec::new();
        let r = content_in_loop(
            f.to_str().unwrap(),
            Duration::from_secs(30),
            true,
            Duration::from_millis(10),
            &mut out,
        );
        assert_eq!(r, Ok(()));
        assert_eq!(
            String::from_utf8(out).unwrap(),
            format!(
                "content of file \"{}\": mount-tester new file\n\n",
                f.display()
            )
        );
    }

    #[test]
    fn content_loop_retries_a_missing_file_until_the_deadline() {
        let mut out = Vec::new();
        let r = content_in_loop(
            "/nonexistent/y",
            Duration::from_millis(50),
            true,
            Duration::from_millis(10),
            &mut out,
        );
        assert_eq!(r, Err(()));
        let out = String::from_utf8(out).unwrap();
        assert!(out.starts_with("Error reading file /nonexistent/y: open /nonexistent/y: no such file or directory, retrying\n"));
    }
}
