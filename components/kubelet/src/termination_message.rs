//! A container's termination message, as upstream's kubelet makes it. Before each container run is
//! created the kubelet makes an empty, world-writable file `<pods_root>/<uid>/containers/<name>/<attempt>`
//! and bind-mounts it at the container's `terminationMessagePath` (default `/dev/termination-log`), so
//! any user the container runs as can write it. When the run has exited, its message is the file's last
//! 4096 bytes; with `terminationMessagePolicy: FallbackToLogsOnError`, a run that failed and left the file
//! empty (or missing) gets the last 80 lines of its log instead, at most their last 2048 bytes. The
//! runtime's own message, if any, comes first (`<runtime>: <message>`). Every terminated message of a
//! pod is then cut to 12 KiB shared evenly among its containers, as upstream's status manager does.
//!
//! The run's attempt number names its file (as it names its log, `<name>/<attempt>.log`), so the file is
//! found again after a kubelet restart without asking the runtime for the container's mounts; the pod's
//! directory, and with it every file, goes when the pod's volumes are torn down.

use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::Container;

use crate::cri_log::{self, LogFormat, RenderOptions};

/// Upstream's MaxContainerTerminationMessageLength: what is kept of the file (its end).
pub const MAX_FILE_BYTES: usize = 4 * 1024;
/// Upstream's MaxContainerTerminationMessageLogLength: what is kept of the log's tail (its end).
pub const MAX_LOG_BYTES: usize = 2 * 1024;
/// Upstream's MaxContainerTerminationMessageLogLines: how many log lines are read.
pub const MAX_LOG_LINES: u64 = 80;
/// Upstream's MaxPodTerminationMessageLogLength: all of a pod's messages together.
pub const MAX_POD_BYTES: usize = 12 * 1024;

/// The policy that reads the log when the file says nothing.
pub const FALLBACK_TO_LOGS_ON_ERROR: &str = "FallbackToLogsOnError";

#[derive(Debug, thiserror::Error)]
pub enum TerminationMessageError {
    #[error("creating the termination-log file {path}: {source}")]
    Create {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// `<pods_root>/<uid>/containers/<container>/<attempt>`: one run's termination-log file.
pub fn host_file(pods_root: &Path, uid: &str, container: &str, attempt: u32) -> PathBuf {
    crate::volumes::pod_dir(pods_root, uid)
        .join("containers")
        .join(container)
        .join(attempt.to_string())
}

/// Makes the run's file empty and writable by anyone (chmod after create: the umask would narrow it)
/// and returns its mount at the container's terminationMessagePath; None when the container has no
/// path.
pub fn prepare(
    pods_root: &Path,
    uid: &str,
    c: &Container,
    attempt: u32,
) -> Result<Option<cri::Mount>, TerminationMessageError> {
    let Some(target) = c
        .termination_message_path
        .as_deref()
        .filter(|p| !p.is_empty())
    else {
        return Ok(None);
    };
    let file = host_file(pods_root, uid, &c.name, attempt);
    let err = |source| TerminationMessageError::Create {
        path: file.clone(),
        source,
    };
    if let Some(dir) = file.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o750)
            .create(dir)
            .map_err(err)?;
    }
    std::fs::File::create(&file).map_err(err)?;
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o666)).map_err(err)?;
    Ok(Some(cri::Mount {
        container_path: target.to_string(),
        host_path: file.display().to_string(),
        readonly: false,
        ..Default::default()
    }))
}

/// Reading what a run left behind (a test double stands in for the node's files).
pub trait RunOutput {
    /// The last `max` bytes of the file (all of it when shorter); NotFound when there is none.
    fn file_tail(&self, path: &Path, max: usize) -> std::io::Result<Vec<u8>>;
    /// What `kubectl logs --tail=<lines>` shows of the CRI log file.
    fn log_tail(&self, path: &Path, lines: u64) -> std::io::Result<Vec<u8>>;
}

/// The node's files.
pub struct NodeFiles;

impl RunOutput for NodeFiles {
    fn file_tail(&self, path: &Path, max: usize) -> std::io::Result<Vec<u8>> {
        let mut f = std::fs::File::open(path)?;
        let len = f.seek(SeekFrom::End(0))?;
        f.seek(SeekFrom::Start(len.saturating_sub(max as u64)))?;
        let mut out = Vec::with_capacity(max.min(len as usize));
        f.take(max as u64).read_to_end(&mut out)?;
        Ok(out)
    }

    fn log_tail(&self, path: &Path, lines: u64) -> std::io::Result<Vec<u8>> {
        let mut f = std::fs::File::open(path)?;
        let start = cri_log::tail_offset(&mut f, lines)?;
        f.seek(SeekFrom::Start(start))?;
        let mut raw = Vec::new();
        f.read_to_end(&mut raw)?;
        let opts = RenderOptions::default();
        let mut out = Vec::new();
        for line in raw.split(|b| *b == b'\n') {
            if line.is_empty() {
                continue;
            }
            if let Some(shown) = cri_log::render_line(line, LogFormat::Cri, &opts) {
                out.extend_from_slice(&shown);
            }
        }
        Ok(out)
    }
}

/// How a run ended, as far as its message goes.
#[derive(Debug, Clone, Copy)]
pub struct Exit<'a> {
    pub exit_code: i32,
    /// The runtime's reason (a run that could not even start has no log to fall back to).
    pub reason: &'a str,
    /// The runtime's message, kept in front of the container's.
    pub runtime_message: &'a str,
}

/// The run's terminated message (None when empty): the runtime's, then the container's from `file`
/// (the run's host file) or, per policy, from the tail of `log`.
pub fn message(
    c: &Container,
    exit: Exit<'_>,
    file: &Path,
    log: &Path,
    out: &dyn RunOutput,
) -> Option<String> {
    let fallback = c.termination_message_policy.as_deref() == Some(FALLBACK_TO_LOGS_ON_ERROR)
        && exit.exit_code != 0
        && exit.reason != "ContainerCannotRun";
    let has_path = c
        .termination_message_path
        .as_deref()
        .is_some_and(|p| !p.is_empty());
    let (mut own, read_log) = if !has_path {
        (String::new(), fallback)
    } else {
        match out.file_tail(file, MAX_FILE_BYTES) {
            Ok(data) => (lossy(&data), fallback && data.is_empty()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => (String::new(), fallback),
            Err(e) => (
                format!("Error on reading termination log {}: {e}", file.display()),
                false,
            ),
        }
    };
    if read_log {
        own = match out.log_tail(log, MAX_LOG_LINES) {
            Ok(data) => lossy(&data[data.len().saturating_sub(MAX_LOG_BYTES)..]),
            Err(e) => format!("Error on reading termination message from logs: {e}"),
        };
    }
    let mut all = exit.runtime_message.to_string();
    if !own.is_empty() {
        if !all.is_empty() {
            all.push_str(": ");
        }
        all.push_str(&own);
    }
    (!all.is_empty()).then_some(all)
}

/// Each container's share of [`MAX_POD_BYTES`] in a pod of `containers` (app and init).
pub fn per_container_limit(containers: usize) -> usize {
    MAX_POD_BYTES / containers.max(1)
}

/// `message` cut to its first `max` bytes (at a character boundary at or before it).
pub fn truncate(mut message: String, max: usize) -> String {
    if message.len() > max {
        let mut end = max;
        while !message.is_char_boundary(end) {
            end -= 1;
        }
        message.truncate(end);
    }
    message
}

fn lossy(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::collections::HashMap;

    use super::*;

    /// Files by path; records what was read, and how much was asked for.
    #[derive(Default)]
    struct FakeOutput {
        files: HashMap<PathBuf, Vec<u8>>,
        logs: HashMap<PathBuf, Vec<u8>>,
        broken: bool,
        reads: RefCell<Vec<String>>,
    }

    impl RunOutput for FakeOutput {
        fn file_tail(&self, path: &Path, max: usize) -> std::io::Result<Vec<u8>> {
            self.reads
                .borrow_mut()
                .push(format!("file {} {max}", path.display()));
            if self.broken {
                return Err(std::io::Error::other("input/output error"));
            }
            let data = self
                .files
                .get(path)
                .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::NotFound))?;
            Ok(data[data.len().saturating_sub(max)..].to_vec())
        }

        fn log_tail(&self, path: &Path, lines: u64) -> std::io::Result<Vec<u8>> {
            self.reads
                .borrow_mut()
                .push(format!("log {} {lines}", path.display()));
            self.logs
                .get(path)
                .cloned()
                .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::NotFound))
        }
    }

    fn container(policy: Option<&str>, path: Option<&str>) -> Container {
        Container {
            name: "c".into(),
            termination_message_policy: policy.map(String::from),
            termination_message_path: path.map(String::from),
            ..Default::default()
        }
    }

    fn exit(code: i32) -> Exit<'static> {
        Exit {
            exit_code: code,
            reason: if code == 0 { "Completed" } else { "Error" },
            runtime_message: "",
        }
    }

    const FILE: &str = "/pods/u/containers/c/0";
    const LOG: &str = "/logs/c/0.log";

    fn output(file: Option<&[u8]>, log: Option<&[u8]>) -> FakeOutput {
        let mut o = FakeOutput::default();
        if let Some(f) = file {
            o.files.insert(FILE.into(), f.to_vec());
        }
        if let Some(l) = log {
            o.logs.insert(LOG.into(), l.to_vec());
        }
        o
    }

    fn run(c: &Container, e: Exit<'_>, o: &FakeOutput) -> Option<String> {
        message(c, e, Path::new(FILE), Path::new(LOG), o)
    }

    #[test]
    fn the_file_is_the_message_with_either_policy() {
        let o = output(Some(b"DONE"), Some(b"log\n"));
        let file = container(Some("File"), Some("/dev/termination-custom-log"));
        assert_eq!(run(&file, exit(0), &o).as_deref(), Some("DONE"));
        let fallback = container(
            Some(FALLBACK_TO_LOGS_ON_ERROR),
            Some("/dev/termination-log"),
        );
        assert_eq!(run(&fallback, exit(0), &o).as_deref(), Some("DONE"));
        assert_eq!(run(&fallback, exit(1), &o).as_deref(), Some("DONE"));
        assert_eq!(
            *o.reads.borrow(),
            vec![format!("file {FILE} 4096"); 3],
            "a file with something in it never sends the kubelet to the log"
        );
    }

    #[test]
    fn a_failed_run_with_an_empty_file_falls_back_to_its_logs_tail() {
        let c = container(
            Some(FALLBACK_TO_LOGS_ON_ERROR),
            Some("/dev/termination-log"),
        );
        let o = output(Some(b""), Some(b"DONE"));
        assert_eq!(run(&c, exit(1), &o).as_deref(), Some("DONE"));
        assert_eq!(
            *o.reads.borrow(),
            vec![format!("file {FILE} 4096"), format!("log {LOG} 80")]
        );
        // No file at all (it could not be made) counts as empty.
        let o = output(None, Some(b"from log\n"));
        assert_eq!(run(&c, exit(2), &o).as_deref(), Some("from log\n"));
    }

    #[test]
    fn success_or_the_file_policy_never_reads_the_log() {
        let o = output(Some(b""), Some(b"DONE"));
        let c = container(
            Some(FALLBACK_TO_LOGS_ON_ERROR),
            Some("/dev/termination-log"),
        );
        assert_eq!(run(&c, exit(0), &o), None);
        let c = container(Some("File"), Some("/dev/termination-log"));
        assert_eq!(run(&c, exit(1), &o), None);
        let cannot_run = Exit {
            reason: "ContainerCannotRun",
            ..exit(128)
        };
        let c = container(
            Some(FALLBACK_TO_LOGS_ON_ERROR),
            Some("/dev/termination-log"),
        );
        assert_eq!(run(&c, cannot_run, &o), None);
        assert!(o.reads.borrow().iter().all(|r| r.starts_with("file")));
    }

    #[test]
    fn without_a_path_only_the_log_can_say_something() {
        let o = output(Some(b"unused"), Some(b"tail"));
        let c = container(Some(FALLBACK_TO_LOGS_ON_ERROR), Some(""));
        assert_eq!(run(&c, exit(1), &o).as_deref(), Some("tail"));
        assert_eq!(*o.reads.borrow(), vec![format!("log {LOG} 80")]);
        let c = container(None, None);
        assert_eq!(run(&c, exit(1), &o), None);
    }

    #[test]
    fn the_file_keeps_its_last_4096_bytes_and_the_log_its_last_2048() {
        let mut big = vec![b'a'; 100];
        big.extend(vec![b'z'; MAX_FILE_BYTES]);
        let o = output(Some(&big), None);
        let c = container(Some("File"), Some("/dev/termination-log"));
        assert_eq!(run(&c, exit(0), &o).unwrap(), "z".repeat(MAX_FILE_BYTES));

        let mut log = vec![b'a'; 10];
        log.extend(vec![b'y'; MAX_LOG_BYTES]);
        let o = output(Some(b""), Some(&log));
        let c = container(
            Some(FALLBACK_TO_LOGS_ON_ERROR),
            Some("/dev/termination-log"),
        );
        assert_eq!(run(&c, exit(1), &o).unwrap(), "y".repeat(MAX_LOG_BYTES));
    }

    #[test]
    fn the_runtimes_message_comes_first_and_read_errors_are_the_message() {
        let o = output(Some(b"mine"), None);
        let c = container(Some("File"), Some("/dev/termination-log"));
        let e = Exit {
            runtime_message: "OOM",
            ..exit(137)
        };
        assert_eq!(run(&c, e, &o).as_deref(), Some("OOM: mine"));
        let o = FakeOutput {
            broken: true,
            ..Default::default()
        };
        assert_eq!(
            run(&c, exit(1), &o).as_deref(),
            Some(format!("Error on reading termination log {FILE}: input/output error").as_str())
        );
        let c = container(
            Some(FALLBACK_TO_LOGS_ON_ERROR),
            Some("/dev/termination-log"),
        );
        let o = output(Some(b""), None);
        let got = run(&c, exit(1), &o).unwrap();
        assert!(
            got.starts_with("Error on reading termination message from logs: "),
            "{got}"
        );
    }

    #[test]
    fn a_pods_messages_share_12_kib() {
        assert_eq!(per_container_limit(1), 12 * 1024);
        assert_eq!(per_container_limit(3), 4 * 1024);
        assert_eq!(per_container_limit(0), 12 * 1024);
        assert_eq!(truncate("abcdef".into(), 4), "abcd");
        assert_eq!(truncate("abc".into(), 4), "abc");
        assert_eq!(truncate("aé".into(), 2), "a", "never inside a character");
    }

    #[test]
    fn node_files_read_the_files_end_and_render_the_cri_logs_tail() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("msg");
        std::fs::write(&file, b"0123456789").unwrap();
        assert_eq!(NodeFiles.file_tail(&file, 4).unwrap(), b"6789");
        assert_eq!(NodeFiles.file_tail(&file, 100).unwrap(), b"0123456789");
        let missing = NodeFiles
            .file_tail(&tmp.path().join("none"), 4)
            .unwrap_err();
        assert_eq!(missing.kind(), std::io::ErrorKind::NotFound);

        let log = tmp.path().join("0.log");
        let mut lines = String::new();
        for i in 0..100 {
            lines.push_str(&format!(
                "2024-01-01T00:00:00.000000000Z stdout F line {i}\n"
            ));
        }
        lines.push_str("2024-01-01T00:00:00.000000000Z stdout P DONE\n");
        std::fs::write(&log, lines).unwrap();
        let tail = String::from_utf8(NodeFiles.log_tail(&log, 3).unwrap()).unwrap();
        assert_eq!(
            tail, "line 98\nline 99\nDONE",
            "a partial last line keeps no newline"
        );
    }

    #[test]
    fn prepare_makes_an_empty_world_writable_file_mounted_at_the_path() {
        let tmp = tempfile::tempdir().unwrap();
        let c = container(Some("File"), Some("/dev/termination-custom-log"));
        let m = prepare(tmp.path(), "u1", &c, 2).unwrap().unwrap();
        let file = tmp.path().join("u1/containers/c/2");
        assert_eq!(m.host_path, file.display().to_string());
        assert_eq!(m.container_path, "/dev/termination-custom-log");
        assert!(!m.readonly);
        let meta = std::fs::metadata(&file).unwrap();
        assert_eq!(meta.len(), 0);
        assert_eq!(meta.permissions().mode() & 0o777, 0o666);
        std::fs::write(&file, b"old").unwrap();
        prepare(tmp.path(), "u1", &c, 2).unwrap();
        assert_eq!(
            std::fs::metadata(&file).unwrap().len(),
            0,
            "a retry starts empty"
        );
        assert!(prepare(tmp.path(), "u1", &container(None, None), 0)
            .unwrap()
            .is_none());
    }
}
