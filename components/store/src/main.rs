//! kiln-store binary: parse etcd-style flags, set up logging, run the member; or, with a
//! leading `snapshot` word, run an offline snapshot tool (restore, status).

use clap::Parser;
use tracing_subscriber::EnvFilter;

fn main() -> std::process::ExitCode {
    match kiln_store::build_runtime() {
        Ok(rt) => rt.block_on(serve()),
        Err(e) => {
            eprintln!("kiln-store: starting the async runtime: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn serve() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| EnvFilter::new("info,openraft=warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    if std::env::args().nth(1).as_deref() == Some("snapshot") {
        let cli = kiln_store::OfflineCli::parse();
        return match kiln_store::run_offline(cli) {
            Ok(out) => {
                print!("{out}");
                std::process::ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("kiln-store: {e}");
                std::process::ExitCode::FAILURE
            }
        };
    }
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
