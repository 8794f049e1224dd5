//! kiln-controller-manager binary: flags, logging, run.

use clap::Parser;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let options = kiln_controller_manager::Options::parse();
    match kiln_controller_manager::run(options).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "kiln-controller-manager stopped");
            std::process::ExitCode::FAILURE
        }
    }
}
