//! `kiln encryption status`: the configuration's keys in read order (the first writes), how many
//! Secrets each one sealed (one range read of the store, values looked at only for their prefix),
//! a rotation under way, and whether each controller's installed configuration is the state
//! directory's. Never prints a key's secret.

use std::collections::BTreeMap;

use super::keys::{KeySet, Sealed};
use super::steps::{plan, Files, Rotation};
use super::EncryptionError;
use crate::bootstrap::phases::apiserver_config::remote_encryption_config;
use crate::bootstrap::Context;
use crate::transport::shell_quote;

/// A controller's installed configuration compared with the state directory's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Installed {
    Same,
    Differs,
    Missing,
    Unreachable(String),
}

/// The report's text.
pub fn render(
    files: &Files,
    keys: &KeySet,
    census: Result<&[(String, Sealed)], &str>,
    rotation: Option<&Rotation>,
    controllers: &[(String, Installed)],
) -> String {
    let mut out = format!(
        "configuration: {} (the first key writes, the others read)\n",
        files.config.display()
    );
    let mut counts: BTreeMap<Sealed, usize> = BTreeMap::new();
    if let Ok(c) = census {
        for (_, s) in c {
            *counts.entry(s.clone()).or_default() += 1;
        }
    }
    let count = |s: &Sealed, counts: &mut BTreeMap<Sealed, usize>| match census {
        Ok(_) => counts.remove(s).unwrap_or(0).to_string(),
        Err(_) => "?".into(),
    };
    out.push_str(&format!(
        "  {:<10} {:<10} {:<7} SECRETS\n",
        "KEY", "PROVIDER", "ROLE"
    ));
    for (i, k) in keys.keys.iter().enumerate() {
        let s = Sealed::Key {
            provider: k.provider.name().into(),
            name: k.name.clone(),
        };
        out.push_str(&format!(
            "  {:<10} {:<10} {:<7} {}\n",
            k.name,
            k.provider.name(),
            if i == 0 { "writes" } else { "reads" },
            count(&s, &mut counts)
        ));
    }
    if keys.identity {
        out.push_str(&format!(
            "  {:<10} {:<10} {:<7} {}\n",
            "identity",
            "-",
            "reads",
            count(&Sealed::Plain, &mut counts)
        ));
    }
    // What the store holds under keys the configuration does not have: no API server reads those.
    for (s, n) in counts {
        out.push_str(&format!(
            "  WARNING {n} Secret(s) sealed with {s}, which the configuration cannot read\n"
        ));
    }
    if let Err(e) = census {
        out.push_str(&format!("  (Secrets not counted: {e})\n"));
    }
    match rotation {
        None => out.push_str("rotation: none under way\n"),
        Some(r) => {
            out.push_str(&format!(
                "rotation: to {} {} under way; `kiln encryption rotate` resumes it with:\n",
                r.provider.name(),
                r.new_key
            ));
            let names: Vec<String> = controllers.iter().map(|(h, _)| h.clone()).collect();
            for line in plan(r.step, &names) {
                out.push_str(&format!("  - {line}\n"));
            }
        }
    }
    out.push_str("controllers:\n");
    for (h, i) in controllers {
        let what = match i {
            Installed::Same => "the state directory's configuration".to_string(),
            Installed::Differs => {
                "DIFFERS from the state directory's (a rotation step not rolled out there)".into()
            }
            Installed::Missing => format!("no {}", remote_encryption_config()),
            Installed::Unreachable(e) => format!("not reachable: {e}"),
        };
        out.push_str(&format!("  {h:<10} {what}\n"));
    }
    out
}

async fn installed(ctx: &Context, host: &str, want: &str) -> Installed {
    let t = match ctx.transport(host).await {
        Ok(t) => t,
        Err(e) => return Installed::Unreachable(e.to_string()),
    };
    let q = shell_quote(&remote_encryption_config());
    match t
        .probe(&format!("sha256sum {q} 2>/dev/null; true"), None)
        .await
    {
        Ok(o) => match o.stdout_str().split_whitespace().next() {
            None => Installed::Missing,
            Some(sum) if sum == want => Installed::Same,
            Some(_) => Installed::Differs,
        },
        Err(e) => Installed::Unreachable(e.to_string()),
    }
}

pub async fn status(
    ctx: &Context,
    effects: &dyn super::steps::Effects,
) -> Result<String, EncryptionError> {
    let files = Files::in_state_dir(&ctx.state_dir);
    if !files.config.exists() {
        return Err(EncryptionError::Missing(files.config.clone()));
    }
    let keys = files.keys()?;
    let want = ctx.sha256_file(&files.config)?;
    let mut controllers = vec![];
    for h in ctx.cluster.config.controllers() {
        controllers.push((h.name.clone(), installed(ctx, &h.name, &want).await));
    }
    let census = effects.census().await;
    Ok(render(
        &files,
        &keys,
        census.as_deref().map_err(String::as_str),
        files.rotation()?.as_ref(),
        &controllers,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::EncryptionProvider;
    use crate::encryption::keys::Key;
    use crate::encryption::steps::Step;

    #[test]
    fn the_report_counts_secrets_per_key_and_shows_the_rotation() {
        let files = Files::in_state_dir(std::path::Path::new("/s"));
        let keys = KeySet {
            keys: vec![
                Key {
                    provider: EncryptionProvider::Aesgcm,
                    name: "key2".into(),
                    secret: "zzsecret-two".into(),
                },
                Key {
                    provider: EncryptionProvider::Aesgcm,
                    name: "key1".into(),
                    secret: "zzsecret-one".into(),
                },
            ],
            identity: true,
        };
        let k = |n: &str| Sealed::Key {
            provider: "aesgcm".into(),
            name: n.into(),
        };
        let census = vec![
            ("/registry/secrets/a/x".to_string(), k("key2")),
            ("/registry/secrets/a/y".to_string(), k("key2")),
            ("/registry/secrets/b/z".to_string(), k("key1")),
            ("/registry/secrets/b/old".to_string(), k("key0")),
        ];
        let rotation = Rotation {
            step: Step::Reencrypt,
            new_key: "key2".into(),
            provider: EncryptionProvider::Aesgcm,
        };
        let text = render(
            &files,
            &keys,
            Ok(&census),
            Some(&rotation),
            &[
                ("c1".into(), Installed::Same),
                ("c2".into(), Installed::Differs),
            ],
        );
        assert!(!text.contains("zzsecret"), "{text}");
        assert!(
            text.contains("  key2       aesgcm     writes  2\n"),
            "{text}"
        );
        assert!(
            text.contains("  key1       aesgcm     reads   1\n"),
            "{text}"
        );
        assert!(
            text.contains("  identity   -          reads   0\n"),
            "{text}"
        );
        assert!(
            text.contains(
                "WARNING 1 Secret(s) sealed with aesgcm key0, which the configuration cannot read"
            ),
            "{text}"
        );
        assert!(
            text.contains("rotation: to aesgcm key2 under way"),
            "{text}"
        );
        assert!(text.contains("  - re-encrypt: "), "{text}");
        assert!(text.contains("  - retire: "), "{text}");
        assert!(!text.contains("  - promote"), "{text}");
        assert!(text.contains("  c2         DIFFERS"), "{text}");
        let text = render(&files, &keys, Err("store down"), None, &[]);
        assert!(
            text.contains("  key2       aesgcm     writes  ?\n"),
            "{text}"
        );
        assert!(text.contains("(Secrets not counted: store down)"), "{text}");
        assert!(text.contains("rotation: none under way"), "{text}");
    }
}
