use clap::Parser;
use kiln_proxy::netfilter::NftCli;
use kiln_proxy::routes::IpRoutes;
use kiln_proxy::{Flags, ProxyConfig};
use tokio::signal::unix::{signal, SignalKind};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let flags = Flags::parse();
    if flags.cleanup {
        kiln_proxy::cleanup(&NftCli::default(), &IpRoutes::default())?;
        tracing::info!("removed nftables table kiln and kiln's routes");
        return Ok(());
    }
    let cfg = ProxyConfig::from_flags(&flags)?;
    let mut term = signal(SignalKind::terminate())?;
    let shutdown = async move {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    };
    kiln_proxy::run(cfg, shutdown).await?;
    Ok(())
}
