//! kiln-store binary: parse etcd-style flags, set up logging, run the member.

use clap::Parser;
use tracing_subscriber::EnvFilter;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| EnvFilter::new("info,openraft=warn")),
        )
        .init();
    let config = kiln_store::Config::parse();
    match kiln_store::run(config).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "kiln-store failed");
            eprintln!("kiln-store: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
