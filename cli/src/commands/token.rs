//! `kiln token create|list|delete`

use clap::Subcommand;

use super::cluster::{runtime, ClusterArgs};
use crate::bootstrap::phases::wait::admin_client;
use crate::tokens;

#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Create a bootstrap token (printed once on stdout).
    Create {
        #[command(flatten)]
        cluster: ClusterArgs,
        /// Use this token instead of a random one ([a-z0-9]{6}.[a-z0-9]{16}).
        token: Option<String>,
        /// Lifetime, e.g. 24h, 30m; 0 for a token that never expires.
        #[arg(long, default_value = "24h")]
        ttl: String,
        #[arg(long)]
        description: Option<String>,
    },
    /// List bootstrap tokens with their expiry.
    List {
        #[command(flatten)]
        cluster: ClusterArgs,
    },
    /// Delete a bootstrap token (by token or token id).
    Delete {
        #[command(flatten)]
        cluster: ClusterArgs,
        token: String,
    },
}

fn parse_ttl(s: &str) -> anyhow::Result<Option<time::Duration>> {
    if s == "0" {
        return Ok(None);
    }
    let (n, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: i64 = n
        .parse()
        .map_err(|_| anyhow::anyhow!("--ttl {s:?}: expected e.g. 24h, 30m or 0"))?;
    Ok(Some(match unit {
        "h" => time::Duration::hours(n),
        "m" => time::Duration::minutes(n),
        "s" => time::Duration::seconds(n),
        _ => anyhow::bail!("--ttl {s:?}: unit must be h, m or s"),
    }))
}

pub fn run(cmd: TokenCommand) -> anyhow::Result<i32> {
    let rt = runtime()?;
    match cmd {
        TokenCommand::Create {
            cluster,
            token,
            ttl,
            description,
        } => {
            let ttl = parse_ttl(&ttl)?;
            let token = token.unwrap_or_else(tokens::generate);
            let ctx = cluster.context(vec![], 0)?;
            let info = rt.block_on(async {
                let client = admin_client(&ctx).await?;
                Ok::<_, anyhow::Error>(
                    tokens::create(client, &token, ttl, description.as_deref()).await?,
                )
            })?;
            println!("{}", info.token);
            Ok(0)
        }
        TokenCommand::List { cluster } => {
            let ctx = cluster.context(vec![], 0)?;
            let all = rt.block_on(async {
                let client = admin_client(&ctx).await?;
                Ok::<_, anyhow::Error>(tokens::list(client).await?)
            })?;
            if cluster.output == "json" {
                println!("{}", serde_json::to_string_pretty(&all)?);
                return Ok(0);
            }
            println!(
                "{:<24} {:<22} {:<26} EXTRA GROUPS",
                "TOKEN", "EXPIRES", "USAGES"
            );
            for t in all {
                println!(
                    "{:<24} {:<22} {:<26} {}",
                    t.token,
                    t.expires.unwrap_or_else(|| "<never>".into()),
                    t.usages.join(","),
                    t.groups.join(",")
                );
            }
            Ok(0)
        }
        TokenCommand::Delete { cluster, token } => {
            let ctx = cluster.context(vec![], 0)?;
            rt.block_on(async {
                let client = admin_client(&ctx).await?;
                Ok::<_, anyhow::Error>(tokens::delete(client, &token).await?)
            })?;
            println!(
                "bootstrap token {:?} deleted",
                token.split('.').next().unwrap_or_default()
            );
            Ok(0)
        }
    }
}
