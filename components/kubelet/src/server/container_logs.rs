//! `GET /containerLogs/{namespace}/{pod}/{container}`: a container's log file, as `kubectl logs` asks for it
//! through the API server (follow, previous, tailLines, timestamps, sinceSeconds, sinceTime, limitBytes).
//! Each run of a container has its own file, `<pod log dir>/<container>/<restartCount>.log`
//! ([`crate::logs`]); `previous` is the newest file before the current run's.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use time::OffsetDateTime;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncSeekExt, BufReader};
use tokio::sync::mpsc;

use super::pods::{self, NodePod, PodSource};
use super::query;
use crate::container_status::ContainerState;
use crate::cri_log::{self, LogFormat, RenderOptions};

/// How often a followed file is checked for new lines.
const FOLLOW_POLL: Duration = Duration::from_millis(200);

#[derive(Debug, thiserror::Error)]
pub enum LogsError {
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}")]
    NotFound(String),
    #[error("reading {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// The query of a log request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogOptions {
    pub follow: bool,
    pub previous: bool,
    pub tail_lines: Option<u64>,
    pub limit_bytes: Option<u64>,
    pub render: RenderOptions,
}

impl LogOptions {
    pub fn parse(q: &[(String, String)], now: OffsetDateTime) -> Result<Self, LogsError> {
        let bad = LogsError::BadRequest;
        let non_negative = |key: &str| -> Result<Option<u64>, LogsError> {
            match query::get_i64(q, key).map_err(bad)? {
                Some(v) if v < 0 => Err(bad(format!("{key}: must be non-negative"))),
                v => Ok(v.map(|v| v as u64)),
            }
        };
        let since = match (
            non_negative("sinceSeconds")?,
            query::get(q, "sinceTime").filter(|s| !s.is_empty()),
        ) {
            (Some(_), Some(_)) => {
                return Err(bad("at most one of sinceTime or sinceSeconds".into()))
            }
            (Some(s), None) => Some(now - Duration::from_secs(s)),
            (None, Some(t)) => {
                Some(cri_log::parse_time(t).ok_or_else(|| bad(format!("sinceTime: {t:?}")))?)
            }
            (None, None) => None,
        };
        let limit_bytes = non_negative("limitBytes")?;
        if limit_bytes == Some(0) {
            return Err(bad("limitBytes: must be greater than 0".into()));
        }
        Ok(LogOptions {
            follow: query::get_bool(q, "follow").map_err(bad)?,
            previous: query::get_bool(q, "previous").map_err(bad)?,
            tail_lines: non_negative("tailLines")?,
            limit_bytes,
            render: RenderOptions {
                timestamps: query::get_bool(q, "timestamps").map_err(bad)?,
                since,
            },
        })
    }
}

/// The runs (`<n>.log`) in a container's log directory, oldest first.
pub fn runs(dir: &Path) -> Vec<u32> {
    let mut runs: Vec<u32> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .filter_map(|e| {
                    e.file_name()
                        .to_str()?
                        .strip_suffix(".log")?
                        .parse::<u32>()
                        .ok()
                })
                .collect()
        })
        .unwrap_or_default();
    runs.sort_unstable();
    runs
}

/// Which run a request reads: the current one (the container's restartCount, else the newest file) or
/// the newest before it.
pub fn pick_run(runs: &[u32], restart_count: Option<u32>, previous: bool) -> Option<u32> {
    let newest = *runs.last()?;
    let current = restart_count
        .filter(|rc| runs.contains(rc))
        .unwrap_or(newest);
    if previous {
        runs.iter().copied().filter(|r| *r < current).max()
    } else {
        Some(current)
    }
}

/// A located log file and what is needed to follow it.
pub struct LogFile {
    pub path: PathBuf,
    pub format: LogFormat,
    run: u32,
    namespace: String,
    pod: String,
    container: String,
}

pub fn locate(
    source: &dyn PodSource,
    log_root: &Path,
    namespace: &str,
    pod: &str,
    container: &str,
    previous: bool,
) -> Result<LogFile, LogsError> {
    let p: NodePod = pods::find(source, namespace, pod)
        .ok_or_else(|| LogsError::NotFound(format!("pod {namespace}/{pod} not found")))?;
    let spec = p.pod.spec.as_ref();
    let known = spec.is_some_and(|s| {
        s.containers.iter().any(|c| c.name == container)
            || s.init_containers
                .iter()
                .flatten()
                .any(|c| c.name == container)
            || s.ephemeral_containers
                .iter()
                .flatten()
                .any(|c| c.name == container)
    });
    if !known {
        return Err(LogsError::NotFound(format!(
            "container {container} is not valid for pod {pod}"
        )));
    }
    let status = p.status.as_ref().and_then(|s| {
        s.containers
            .iter()
            .chain(&s.init_containers)
            .chain(&s.ephemeral_containers)
            .find(|c| c.name == container)
    });
    let dir = crate::logs::pod_log_dir(log_root, namespace, pod, p.uid()).join(container);
    let all = runs(&dir);
    let restart_count = status.and_then(|c| u32::try_from(c.restart_count).ok());
    let run = pick_run(&all, restart_count, previous).ok_or_else(|| {
        if previous {
            LogsError::BadRequest(format!(
                "previous terminated container \"{container}\" in pod \"{pod}\" not found"
            ))
        } else {
            let why = match status.map(|c| &c.state) {
                Some(ContainerState::Waiting { reason, .. }) => reason.clone(),
                _ => "ContainerCreating".into(),
            };
            LogsError::BadRequest(format!(
                "container \"{container}\" in pod \"{pod}\" is waiting to start: {why}"
            ))
        }
    })?;
    Ok(LogFile {
        path: dir.join(format!("{run}.log")),
        format: p.runtime.log_format(),
        run,
        namespace: namespace.into(),
        pod: pod.into(),
        container: container.into(),
    })
}

/// True while the run being followed is the container's running instance.
fn still_running(source: &dyn PodSource, f: &LogFile) -> bool {
    pods::find(source, &f.namespace, &f.pod)
        .and_then(|p| p.status)
        .and_then(|s| {
            s.containers
                .into_iter()
                .chain(s.init_containers)
                .chain(s.ephemeral_containers)
                .find(|c| c.name == f.container)
        })
        .is_some_and(|c| c.is_running() && c.restart_count == f.run as i32)
}

/// Streams the file into `tx` (the response body) per the options; ends at EOF, or with `follow` when the
/// followed run has ended and its file is drained, or when the client goes away.
pub async fn stream(
    file: LogFile,
    opts: LogOptions,
    source: Arc<dyn PodSource>,
    tx: mpsc::Sender<Bytes>,
) -> Result<(), LogsError> {
    let io = |source| LogsError::Io {
        path: file.path.clone(),
        source,
    };
    let mut f = std::fs::File::open(&file.path).map_err(io)?;
    let start = match opts.tail_lines {
        Some(n) => cri_log::tail_offset(&mut f, n).map_err(io)?,
        None => 0,
    };
    // Follow only the current run; a previous one is complete.
    let follow = opts.follow && !opts.previous;
    // Without follow the answer is the file as it was when asked: lines the container appends while the
    // response is sent (slowly, to a slow client) are not part of it, so `tailLines=N` gives exactly N.
    let end = f.metadata().map_err(io)?.len().max(start);
    let mut f = tokio::fs::File::from_std(f);
    f.seek(std::io::SeekFrom::Start(start)).await.map_err(io)?;
    let mut r: Box<dyn tokio::io::AsyncBufRead + Unpin + Send> = if follow {
        Box::new(BufReader::new(f))
    } else {
        Box::new(BufReader::new(f.take(end - start)))
    };
    let mut left = opts.limit_bytes;
    let mut line = Vec::new();
    let mut draining = false;
    loop {
        let n = r.read_until(b'\n', &mut line).await.map_err(io)?;
        let complete = line.last() == Some(&b'\n');
        if n == 0 || !complete {
            // EOF; a line without its newline is still being written when following.
            if !follow || draining {
                if !line.is_empty() {
                    emit(&line, &file, &opts, &mut left, &tx).await;
                }
                return Ok(());
            }
            if tx.is_closed() {
                return Ok(());
            }
            if !still_running(source.as_ref(), &file) {
                // One more pass picks up what was written before the exit.
                draining = true;
                continue;
            }
            tokio::time::sleep(FOLLOW_POLL).await;
            continue;
        }
        line.pop();
        if !emit(&line, &file, &opts, &mut left, &tx).await {
            return Ok(());
        }
        line.clear();
    }
}

/// Sends one rendered line; false when the stream must end (limitBytes reached or client gone).
async fn emit(
    line: &[u8],
    file: &LogFile,
    opts: &LogOptions,
    left: &mut Option<u64>,
    tx: &mpsc::Sender<Bytes>,
) -> bool {
    let Some(mut out) = cri_log::render_line(line, file.format, &opts.render) else {
        return true;
    };
    let mut last = false;
    if let Some(l) = left {
        if out.len() as u64 >= *l {
            out.truncate(*l as usize);
            last = true;
        }
        *l -= out.len() as u64;
    }
    if tx.send(Bytes::from(out)).await.is_err() {
        return false;
    }
    !last
}

#[cfg(test)]
mod tests {
    use super::*;

    struct NoPods;
    impl PodSource for NoPods {
        fn pods(&self) -> Vec<NodePod> {
            Vec::new()
        }
    }

    /// The conformance entry "Kubectl logs ... retrieve and filter logs" reads `--tail=1` of a container
    /// that writes a line every 100 ms: lines written while the answer is being sent must not be in it.
    #[tokio::test]
    async fn without_follow_the_answer_ends_where_the_file_ended_when_asked() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("0.log");
        std::fs::write(&path, "one\ntwo\nthree\n").unwrap();
        let file = LogFile {
            path: path.clone(),
            format: LogFormat::Raw,
            run: 0,
            namespace: "ns".into(),
            pod: "p".into(),
            container: "c".into(),
        };
        let opts = LogOptions {
            tail_lines: Some(3),
            ..Default::default()
        };
        // Room for one line: the stream cannot reach the file's end before the line below is appended.
        let (tx, mut rx) = mpsc::channel(1);
        let task = tokio::spawn(stream(file, opts, Arc::new(NoPods), tx));
        let mut got = rx.recv().await.unwrap().to_vec();
        use std::io::Write as _;
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(b"four\n")
            .unwrap();
        while let Some(b) = rx.recv().await {
            got.extend_from_slice(&b);
        }
        task.await.unwrap().unwrap();
        assert_eq!(String::from_utf8(got).unwrap(), "one\ntwo\nthree\n");
    }

    #[test]
    fn picks_current_and_previous_runs() {
        assert_eq!(pick_run(&[0, 1, 2], Some(2), false), Some(2));
        assert_eq!(pick_run(&[0, 1, 2], Some(2), true), Some(1));
        // Older runs may have been removed: previous is the newest one before the current.
        assert_eq!(pick_run(&[0, 3], Some(3), true), Some(0));
        assert_eq!(pick_run(&[0], Some(0), true), None);
        // No status (or no file for it yet): the newest file is current.
        assert_eq!(pick_run(&[0, 1], None, false), Some(1));
        assert_eq!(pick_run(&[0, 1], Some(2), true), Some(0));
        assert_eq!(pick_run(&[], Some(0), false), None);
    }

    #[test]
    fn parses_log_options() {
        let now = OffsetDateTime::from_unix_timestamp(1_000).unwrap();
        let q = query::parse_query("follow=true&tailLines=2&timestamps=1&sinceSeconds=10");
        let o = LogOptions::parse(&q, now).unwrap();
        assert!(o.follow && !o.previous && o.render.timestamps);
        assert_eq!(o.tail_lines, Some(2));
        assert_eq!(
            o.render.since,
            Some(OffsetDateTime::from_unix_timestamp(990).unwrap())
        );
        let q = query::parse_query("sinceTime=2026-11-29T10:00:00Z&limitBytes=5&previous=true");
        let o = LogOptions::parse(&q, now).unwrap();
        assert!(o.previous);
        assert_eq!(o.limit_bytes, Some(5));
        assert!(o.render.since.is_some());
        for bad in [
            "tailLines=-1",
            "limitBytes=0",
            "sinceSeconds=1&sinceTime=2026-11-29T10:00:00Z",
            "sinceTime=yesterday",
            "follow=maybe",
        ] {
            assert!(
                LogOptions::parse(&query::parse_query(bad), now).is_err(),
                "{bad}"
            );
        }
    }
}
