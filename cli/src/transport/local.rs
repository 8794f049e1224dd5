//! LocalTransport: the Transport on this machine (`--local` runs on the host itself, and tests).

use std::process::Stdio;
use std::time::Duration;

use async_trait::async_trait;
use tokio::io::AsyncWriteExt;
use tokio::process::Command;

use super::{
    payload_digest, upload_result, upload_script, ExecOutput, Payload, Result, Transport,
    TransportError,
};

pub struct LocalTransport {
    name: String,
    timeout: Duration,
}

impl LocalTransport {
    pub fn new(name: &str) -> Self {
        LocalTransport {
            name: name.to_string(),
            timeout: Duration::from_secs(600),
        }
    }

    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    fn io(&self, step: &'static str) -> impl FnOnce(std::io::Error) -> TransportError + '_ {
        move |e| TransportError::Other {
            host: self.name.clone(),
            step,
            message: e.to_string(),
        }
    }

    async fn run_with(&self, cmd: &str, input: Option<Payload<'_>>) -> Result<ExecOutput> {
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(cmd)
            .stdin(if input.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(self.io("spawn sh"))?;
        let stdin = child.stdin.take();
        // Feed stdin while collecting output, so a command that echoes its input cannot deadlock.
        let feed = async move {
            let (Some(mut w), Some(input)) = (stdin, input) else {
                return Ok(());
            };
            let r = match input {
                Payload::Bytes(b) => w.write_all(b).await,
                Payload::File(p) => match tokio::fs::File::open(p).await {
                    Ok(mut f) => tokio::io::copy(&mut f, &mut w).await.map(|_| ()),
                    Err(e) => Err(e),
                },
            };
            // A command that exits without reading all of stdin is not our error; its status tells.
            match r {
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
                other => other,
            }
        };
        let run = async {
            let (fed, out) = tokio::join!(feed, child.wait_with_output());
            fed.map_err(self.io("write stdin"))?;
            let out = out.map_err(self.io("wait"))?;
            use std::os::unix::process::ExitStatusExt;
            let status = out
                .status
                .code()
                .or_else(|| out.status.signal().map(|s| 128 + s))
                .unwrap_or(255);
            Ok(ExecOutput {
                status,
                stdout: out.stdout,
                stderr: out.stderr,
            })
        };
        tokio::time::timeout(self.timeout, run)
            .await
            .map_err(|_| TransportError::Other {
                host: self.name.clone(),
                step: "exec",
                message: format!("timed out after {}s", self.timeout.as_secs()),
            })?
    }
}

#[async_trait]
impl Transport for LocalTransport {
    fn host(&self) -> &str {
        &self.name
    }

    async fn exec(&self, cmd: &str, stdin: Option<&[u8]>) -> Result<ExecOutput> {
        self.run_with(cmd, stdin.map(Payload::Bytes)).await
    }

    async fn upload(&self, src: Payload<'_>, remote: &str, mode: u32) -> Result<()> {
        let (sha, _) = payload_digest(src)
            .await
            .map_err(self.io("read upload source"))?;
        let script =
            upload_script(remote, &sha, mode).map_err(|message| TransportError::Other {
                host: self.name.clone(),
                step: "upload",
                message,
            })?;
        let out = self.run_with(&script, Some(src)).await?;
        upload_result(&self.name, remote, out)
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[tokio::test]
    async fn exec_status_stdin_and_signal() {
        let t = LocalTransport::new("here");
        let out = t
            .exec("cat; echo err >&2; exit 3", Some(b"hello"))
            .await
            .unwrap();
        assert_eq!(
            (out.status, out.stdout.as_slice(), out.stderr.as_slice()),
            (3, &b"hello"[..], &b"err\n"[..])
        );
        let out = t.exec("kill -TERM $$", None).await.unwrap();
        assert_eq!(out.status, 128 + 15);
        assert_eq!(t.run("echo hi").await.unwrap(), "hi\n");
        let err = t
            .run("echo boom >&2; exit 2")
            .await
            .unwrap_err()
            .to_string();
        assert_eq!(err, "here: `echo boom >&2; exit 2`: exit status 2: boom");
    }

    #[tokio::test]
    async fn upload_download_read_file() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("sub/dir/file.bin");
        let target_s = target.to_str().unwrap();
        let t = LocalTransport::new("here");
        let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        t.upload((&data).into(), target_s, 0o640).await.unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), data);
        assert_eq!(
            std::fs::metadata(&target).unwrap().permissions().mode() & 0o777,
            0o640
        );
        assert_eq!(t.download(target_s).await.unwrap(), data);
        assert_eq!(t.read_file(target_s).await.unwrap(), Some(data.clone()));
        assert_eq!(
            t.read_file(&format!("{target_s}.missing")).await.unwrap(),
            None
        );
        assert!(t.download(&format!("{target_s}.missing")).await.is_err());

        // a file source, replacing the target; no temp files are left behind
        let src = dir.path().join("src");
        std::fs::write(&src, b"second").unwrap();
        t.upload(Payload::File(&src), target_s, 0o600)
            .await
            .unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"second");
        let names: Vec<_> = std::fs::read_dir(target.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["file.bin"]);
    }

    #[tokio::test]
    async fn upload_failure_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("f");
        std::fs::write(&target, b"old").unwrap();
        let t = LocalTransport::new("here");
        // a wrong checksum (as if bytes were corrupted in transit) is caught on the host
        let script = upload_script(target.to_str().unwrap(), &"0".repeat(64), 0o644).unwrap();
        let out = t.exec(&script, Some(b"new")).await.unwrap();
        let err = upload_result("here", target.to_str().unwrap(), out)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("sha256 verification") && err.contains("sha256 mismatch"),
            "{err}"
        );
        assert_eq!(std::fs::read(&target).unwrap(), b"old");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}
