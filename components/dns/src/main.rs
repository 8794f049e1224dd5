use clap::Parser;
use kiln_dns::{DnsConfig, Flags};
use tokio::signal::unix::{signal, SignalKind};

fn main() -> anyhow::Result<()> {
    // before the runtime: its threads must not have made arenas yet
    kiln_dns::malloc::limit_arenas();
    // what #[tokio::main] builds (TOKIO_WORKER_THREADS still applies)
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(serve())
}

async fn serve() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let flags = Flags::parse();
    let cfg = DnsConfig::from_flags(&flags)?;
    let mut term = signal(SignalKind::terminate())?;
    let shutdown = async move {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    };
    kiln_dns::run(cfg, shutdown).await?;
    Ok(())
}
