use clap::{Parser, Subcommand};

use kiln_agnhost::{
    connect, crd_conversion_webhook, dns, entrypoint_tester, grpc_health_checking, guestbook,
    liveness, logs_generator, mounttest, netexec, pause, porter, sample_apiserver, serve_hostname,
    test_webserver, webhook,
};

/// Subcommands of the Kubernetes e2e test image, as upstream agnhost names and runs them.
#[derive(Parser)]
#[command(name = "agnhost", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// klog's verbosity flag, which upstream's binary takes with every subcommand (e2e tests pass
    /// `-v=4`). Accepted and ignored: logging follows RUST_LOG.
    #[arg(short = 'v', long = "v", global = true, value_name = "LEVEL")]
    _verbosity: Option<String>,
    /// klog's `--alsologtostderr`, accepted likewise (logs always go to stderr).
    #[arg(long = "alsologtostderr", global = true)]
    _alsologtostderr: bool,
}

#[derive(Subcommand)]
enum Command {
    /// Attempts a TCP or UDP connection and prints a classified error (TIMEOUT, REFUSED, DNS, OTHER).
    Connect(connect::ConnectArgs),
    /// Starts HTTP server on port 443 for testing CustomResourceConversionWebhook
    #[command(name = "crd-conversion-webhook")]
    CrdConversionWebhook(crd_conversion_webhook::CrdConversionWebhookArgs),
    /// Prints the host's DNS suffix list.
    #[command(name = "dns-suffix")]
    DnsSuffix,
    /// Prints the host's DNS server list.
    #[command(name = "dns-server-list")]
    DnsServerList,
    /// Prints the host's /etc/hosts file.
    #[command(name = "etc-hosts")]
    EtcHosts,
    /// Prints the args it's passed and exits.
    #[command(name = "entrypoint-tester", disable_help_flag = true)]
    EntrypointTester {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Starts a simple grpc health checking endpoint
    #[command(name = "grpc-health-checking")]
    GrpcHealthChecking(grpc_health_checking::GrpcHealthCheckingArgs),
    /// Creates a HTTP server with various endpoints representing a guestbook app
    Guestbook(guestbook::GuestbookArgs),
    /// Starts a server that is alive for 10 seconds.
    Liveness,
    /// Outputs lines of logs to stdout uniformly.
    #[command(name = "logs-generator")]
    LogsGenerator(logs_generator::LogsGeneratorArgs),
    /// Creates files with given permissions and outputs FS type, owner, mode, permissions, contents of
    /// files.
    Mounttest(mounttest::MounttestArgs),
    /// Creates HTTP(S) and UDP servers with various endpoints.
    Netexec(netexec::NetexecArgs),
    /// Pauses the execution.
    Pause(pause::PauseArgs),
    /// Serves requested data on ports specified in environment variables.
    Porter(porter::PorterArgs),
    /// Launch a wardle API server (k8s.io/sample-apiserver's API, for the Aggregator test)
    #[command(name = "sample-apiserver")]
    SampleApiserver(sample_apiserver::SampleApiserverArgs),
    /// Serves the hostname.
    #[command(name = "serve-hostname")]
    ServeHostname(serve_hostname::ServeHostnameArgs),
    /// Tests the ServiceAccountIssuerDiscovery feature
    #[command(name = "test-service-account-issuer-discovery")]
    TestServiceAccountIssuerDiscovery(kiln_agnhost::openidmetadata::IssuerDiscoveryArgs),
    /// Starts a simple HTTP fileserver.
    #[command(name = "test-webserver")]
    TestWebserver(test_webserver::TestWebserverArgs),
    /// Starts a HTTP server, useful for testing MutatingAdmissionWebhook and
    /// ValidatingAdmissionWebhook
    Webhook(webhook::WebhookArgs),
}

fn main() {
    // Logs on stderr, like Go's log package: stdout stays exactly the output tests compare.
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_target(false)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let cli = Cli::parse();
    let code = match cli.command {
        Command::EntrypointTester { .. } => entrypoint_tester::run(),
        Command::DnsSuffix => dns::run(dns::suffixes, dns::RESOLV_CONF),
        Command::DnsServerList => dns::run(dns::servers, dns::RESOLV_CONF),
        Command::EtcHosts => dns::run_etc_hosts(),
        Command::Mounttest(a) => mounttest::run(a),
        command => {
            let rt = match tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    eprintln!("agnhost: starting the runtime: {e}");
                    std::process::exit(1);
                }
            };
            rt.block_on(serve(command))
        }
    };
    std::process::exit(code);
}

/// The subcommands that serve or wait; a failure to start is logged and exits 1, as Go's log.Fatal.
async fn serve(command: Command) -> i32 {
    let result: Result<i32, String> = match command {
        Command::Connect(a) => Ok(connect::run(a).await),
        Command::CrdConversionWebhook(a) => Ok(crd_conversion_webhook::run(a).await),
        Command::GrpcHealthChecking(a) => grpc_health_checking::run(a)
            .await
            .map_err(|e| e.to_string()),
        Command::Guestbook(a) => guestbook::run(a).await.map_err(|e| e.to_string()),
        Command::Liveness => liveness::run().await.map_err(|e| e.to_string()),
        Command::LogsGenerator(a) => Ok(logs_generator::run(a).await),
        Command::Netexec(a) => netexec::run(a).await.map_err(|e| e.to_string()),
        Command::Pause(a) => Ok(pause::run(a).await),
        Command::Porter(a) => Ok(porter::run(a).await),
        Command::SampleApiserver(a) => sample_apiserver::run(a).await,
        Command::ServeHostname(a) => serve_hostname::run(a).await.map_err(|e| e.to_string()),
        Command::TestServiceAccountIssuerDiscovery(a) => {
            Ok(kiln_agnhost::openidmetadata::run(a).await)
        }
        Command::TestWebserver(a) => test_webserver::run(a).await.map_err(|e| e.to_string()),
        Command::Webhook(a) => Ok(webhook::run(a).await),
        Command::EntrypointTester { .. }
        | Command::DnsSuffix
        | Command::DnsServerList
        | Command::EtcHosts
        | Command::Mounttest(_) => unreachable!("handled without a runtime"),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            tracing::error!("{e}");
            1
        }
    }
}
