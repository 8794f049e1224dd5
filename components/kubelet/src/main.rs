use kiln_kubelet::{Flags, KubeletConfig};
use tokio::signal::unix::{signal, SignalKind};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // kube-rs logs every failed connection at ERROR; the agent already reports each failure once per change.
    tracing_subscriber::fmt()
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
                tracing_subscriber::EnvFilter::new("info,kube_client::client::builder=off")
            }),
        )
        .init();
    let flags = Flags::load()?;
    if flags.cleanup {
        let n = kiln_kubelet::cleanup_workloads(&flags.container_runtime_endpoint).await?;
        println!("removed {n} pod sandbox(es)");
        return Ok(());
    }
    let cfg = KubeletConfig::from_flags(flags)?;
    let handle = kiln_kubelet::run(cfg).await?;
    let mut term = signal(SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    // kiln-host processes are not adopted by a restarted kubelet yet, so they stop with it.
    tracing::info!("shutting down: stopping static pods");
    handle.shutdown().await;
    Ok(())
}
