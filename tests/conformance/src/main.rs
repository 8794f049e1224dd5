//! `kiln-conformance`: run upstream's conformance list (or a --focus/--skip part of it) against a
//! cluster, print `N passed, M failed` by SIG, write JUnit and the Markdown score, and gate on
//! passing.txt. Any cluster works given a kubeconfig; CI runs it on a lab cluster (tests/lab.rs).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use kiln_conformance::ctx::{Cluster, Images};
use kiln_conformance::runner::{self, Options, Selection};
use kiln_conformance::{gate, report};
use regex::Regex;

#[derive(Parser)]
#[command(version, about)]
struct Args {
    /// Kubeconfig of the cluster under test; default: KUBECONFIG or ~/.kube/config.
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Run only entries whose codename matches this regex.
    #[arg(long)]
    focus: Option<Regex>,
    /// Leave out entries whose codename matches this regex.
    #[arg(long)]
    skip: Option<Regex>,
    /// Entries run at once, each in its own namespace (entries that mostly wait — probes watched
    /// for minutes, CronJob schedules — have as many slots again).
    #[arg(long, default_value_t = 6)]
    parallel: usize,
    /// A case that runs longer fails.
    #[arg(long, default_value_t = 600)]
    case_timeout_secs: u64,
    /// Runs of a failing case before it fails (ginkgo's --flake-attempts): a later pass is reported
    /// as FLAKY with the earlier failure.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=5))]
    flake_attempts: u64,
    /// Registry and repository of the test images (agnhost, busybox, pause, dnsutils).
    #[arg(long, default_value = "10.250.0.1:5000/kiln")]
    images: String,
    /// The kubectl binary the cases drive.
    #[arg(long, default_value = "kubectl")]
    kubectl: String,
    /// Write JUnit XML here.
    #[arg(long)]
    junit: Option<PathBuf>,
    /// Write the Markdown score (docs/conformance.md) here.
    #[arg(long)]
    report: Option<PathBuf>,
    /// Fail when an entry listed in this file does not pass.
    #[arg(long)]
    passing: Option<PathBuf>,
    /// Add newly passing entries to --passing.
    #[arg(long, requires = "passing")]
    update_passing: bool,
    /// Run only the entries listed in --passing (the gate, as CI runs it): the others cannot regress,
    /// and their failures are mostly long waits.
    #[arg(long, requires = "passing", conflicts_with = "update_passing")]
    only_passing: bool,
    /// Print the selected entries, whether kiln has a test for each, and exit.
    #[arg(long)]
    list: bool,
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    match run(Args::parse()).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("kiln-conformance: {e:#}");
            ExitCode::from(2)
        }
    }
}

async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let selection = Selection {
        focus: args.focus,
        skip: args.skip,
    };
    let mut entries = selection.entries();
    // Read the gate first: a bad passing file fails before anything runs.
    let passing = args.passing.as_deref().map(gate::read).transpose()?;
    if let (true, Some(gate)) = (args.only_passing, &passing) {
        // passing.txt holds slugs.
        entries.retain(|e| gate.contains(&kiln_conformance::slug::slug(e.codename)));
        // A gate that selects nothing would pass vacuously.
        anyhow::ensure!(
            !entries.is_empty(),
            "--only-passing: no entry of the list is in the passing file"
        );
    }
    if args.list {
        let written: std::collections::BTreeSet<&str> = kiln_conformance::cases::all()
            .into_iter()
            .map(|c| c.codename)
            .collect();
        for e in &entries {
            let mark = if written.contains(e.codename) {
                "test "
            } else {
                "-    "
            };
            println!("{mark} {}", e.codename);
        }
        return Ok(ExitCode::SUCCESS);
    }
    let config = match &args.kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path)?;
            kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?
        }
        None => kube::Config::infer().await?,
    };
    let cluster = Arc::new(Cluster {
        client: kube::Client::try_from(config)?,
        kubeconfig: args.kubeconfig.clone(),
        kubectl: args.kubectl,
        images: Images {
            prefix: args.images,
        },
    });
    let opts = Options {
        parallel: args.parallel,
        case_timeout: Duration::from_secs(args.case_timeout_secs),
        attempts: args.flake_attempts as usize,
    };
    let outcomes = runner::run(cluster, &entries, &opts).await;
    print!("{}", report::summary(&outcomes));
    if let Some(path) = &args.junit {
        write(path, &report::junit(&outcomes))?;
    }
    if let Some(path) = &args.report {
        let kiln_commit = std::env::var("KILN_COMMIT").unwrap_or_else(|_| "(unknown)".into());
        let mut page = report::markdown(&outcomes, kiln_conformance::list::COMMIT, &kiln_commit);
        // The page's Python client e2e section comes from `kiln-python-e2e`: keep it.
        let old = std::fs::read_to_string(path).unwrap_or_default();
        if let Some(py) = kiln_conformance::python_e2e::existing_section(&old) {
            page = kiln_conformance::python_e2e::splice(&page, py);
        }
        // And kube-rs's cluster tests' section, from `kiln-kube-rs-e2e`.
        if let Some(k) = kiln_conformance::kube_rs_e2e::existing_section(&old) {
            page = kiln_conformance::kube_rs_e2e::splice(&page, k);
        }
        write(path, &page)?;
    }
    let Some(passing) = passing else {
        return Ok(ExitCode::SUCCESS);
    };
    let verdict = gate::judge(&passing, &outcomes);
    for r in &verdict.regressed {
        println!("REGRESSED (in passing.txt, did not pass): {r}");
    }
    if !verdict.newly_passing.is_empty() {
        let file = args.passing.as_ref().expect("checked above");
        if args.update_passing {
            gate::write_grown(file, &verdict.newly_passing)?;
            println!(
                "added {} newly passing entries to {}",
                verdict.newly_passing.len(),
                file.display()
            );
        } else {
            println!(
                "{} entries pass that {} does not list yet (--update-passing adds them):",
                verdict.newly_passing.len(),
                file.display()
            );
            for s in &verdict.newly_passing {
                println!("  {s}");
            }
        }
    }
    Ok(if verdict.ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Temporary file + rename: a report is whole or absent.
fn write(path: &std::path::Path, text: &str) -> anyhow::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path)?;
    Ok(())
}
