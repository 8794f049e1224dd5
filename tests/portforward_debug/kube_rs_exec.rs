//! Issue #30 through kube-rs (kube 5 with `ws`, the client kube-rs's `pod_shell` example uses): exec
//! negotiates `v5.channel.k8s.io`, so closing stdin is a CLOSE signal on its channel, not the end of
//! the session — the command's output after the close still arrives, and its Status says Success.
//! Over v4 that output is lost. The client runs in a thread that entered the lab's network namespace:
//! the API server's address exists only there.

use std::os::fd::AsRawFd;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, AttachParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What one exec saw: stdout read to its end, and the Status's `status`.
#[derive(Debug)]
pub struct Seen {
    pub stdout: String,
    pub status: Option<String>,
}

/// Moves the calling thread (only it) into network namespace `netns` (`ip netns` name).
fn enter_netns(netns: &str) -> anyhow::Result<()> {
    let f = std::fs::File::open(format!("/run/netns/{netns}"))?;
    // SAFETY: a valid namespace fd; setns changes this thread's network namespace only.
    if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(std::io::Error::last_os_error().into());
    }
    Ok(())
}

/// Execs `sh -c 'sleep 2; echo after-close'` in `pod` with stdin open, writes a line, closes stdin at
/// once, then reads stdout to its end.
pub fn exec_after_stdin_close(netns: &str, kubeconfig: &str, pod: &str) -> anyhow::Result<Seen> {
    let (netns, kubeconfig, pod) = (netns.to_string(), kubeconfig.to_string(), pod.to_string());
    std::thread::spawn(move || {
        enter_netns(&netns)?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        rt.block_on(async move {
            let kc = Kubeconfig::read_from(&kubeconfig)?;
            let cfg =
                kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?;
            let pods: Api<Pod> = Api::default_namespaced(kube::Client::try_from(cfg)?);
            let ap = AttachParams::default().stdin(true).stderr(false);
            let script = vec!["sh", "-c", "sleep 2; echo after-close"];
            let mut attached = pods.exec(&pod, script, &ap).await?;
            let mut stdin = attached
                .stdin()
                .ok_or_else(|| anyhow::anyhow!("no stdin"))?;
            let mut stdout = attached
                .stdout()
                .ok_or_else(|| anyhow::anyhow!("no stdout"))?;
            let status = attached
                .take_status()
                .ok_or_else(|| anyhow::anyhow!("no status"))?;
            stdin.write_all(b"ignored\n").await?;
            stdin.shutdown().await?;
            let mut out = String::new();
            tokio::time::timeout(
                std::time::Duration::from_secs(30),
                stdout.read_to_string(&mut out),
            )
            .await??;
            let status = tokio::time::timeout(std::time::Duration::from_secs(30), status).await?;
            attached.join().await?;
            Ok(Seen {
                stdout: out,
                status: status.and_then(|s| s.status),
            })
        })
    })
    .join()
    .map_err(|_| anyhow::anyhow!("the kube-rs exec thread panicked"))?
}
