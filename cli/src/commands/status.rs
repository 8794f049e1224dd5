//! `kiln status`: the cluster at a glance — nodes, the control plane's static pods, every store member,
//! certificate expiry (a warning per certificate with 30 days or less left) and the last backup per
//! controller.

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::ListParams;

use super::cluster::{runtime, ClusterArgs};
use crate::bootstrap::phases::wait::admin_client;

fn ready(conds: Option<&Vec<k8s_openapi::api::core::v1::NodeCondition>>) -> &'static str {
    match conds
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .map(|c| c.status.as_str())
    {
        Some("True") => "Ready",
        Some("False") => "NotReady",
        _ => "Unknown",
    }
}

pub fn run(cluster: ClusterArgs) -> anyhow::Result<i32> {
    let ctx = cluster.context(vec![], 0)?;
    runtime()?.block_on(async {
        let client = admin_client(&ctx).await?;
        let server = client.apiserver_version().await?.git_version;
        println!("kiln    {}", kiln_common::version::LONG);
        println!("server  {server}");
        println!();
        let nodes: kube::Api<Node> = kube::Api::all(client.clone());
        let pods: kube::Api<Pod> = kube::Api::namespaced(client.clone(), "kube-system");
        println!(
            "{:<10} {:<9} {:<15} {:<16} VERSION",
            "NODE", "STATUS", "ADDRESS", "POD CIDR"
        );
        for n in nodes.list(&ListParams::default()).await?.items {
            let status = n.status.as_ref();
            let addr = status
                .and_then(|s| s.addresses.as_ref())
                .and_then(|a| a.iter().find(|a| a.type_ == "InternalIP"))
                .map(|a| a.address.clone())
                .unwrap_or_default();
            let version = status
                .and_then(|s| s.node_info.as_ref())
                .map(|i| i.kubelet_version.clone())
                .unwrap_or_default();
            // A node on another build than the API server is mid-upgrade (or was missed by one).
            let mark = if version == server {
                ""
            } else {
                " (not the server's build)"
            };
            println!(
                "{:<10} {:<9} {:<15} {:<16} {version}{mark}",
                n.metadata.name.unwrap_or_default(),
                ready(status.and_then(|s| s.conditions.as_ref())),
                addr,
                n.spec.and_then(|s| s.pod_cidr).unwrap_or_default(),
            );
        }
        println!();
        println!(
            "{:<34} {:<10} {:<8} RESTARTS",
            "CONTROL PLANE / NODE PODS", "NODE", "READY"
        );
        for p in pods
            .list(&ListParams::default().labels("tier in (control-plane,node)"))
            .await?
            .items
        {
            let st = p.status.as_ref();
            let ok = st
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
            let restarts: i32 = st
                .and_then(|s| s.container_statuses.as_ref())
                .map(|cs| cs.iter().map(|c| c.restart_count).sum())
                .unwrap_or(0);
            println!(
                "{:<34} {:<10} {:<8} {restarts}",
                p.metadata.name.unwrap_or_default(),
                p.spec.and_then(|s| s.node_name).unwrap_or_default(),
                if ok { "yes" } else { "no" }
            );
        }
        println!();
        dns(&ctx, &client).await;
        println!();
        // Every kiln-store member, or every endpoint of spec.store.external (with its own Status).
        let access = crate::bootstrap::phases::external_etcd::StoreAccess::for_cluster(&ctx);
        let external = ctx.cluster.config.spec.store.external.is_some();
        let health = if external {
            crate::bootstrap::phases::external_etcd::health(&access).await
        } else {
            vec![]
        };
        for (i, a) in access.iter().enumerate() {
            let kind = if external { "etcd " } else { "store" };
            let status = crate::snapshot::store_status(a).await;
            match (status, health.get(i)) {
                (Ok((rev, objects)), Some(h)) if h.healthy => println!(
                    "{kind} {:<10} healthy: revision {rev}, {objects} objects ({})",
                    a.name, h.detail
                ),
                (_, Some(h)) if !h.healthy => {
                    println!("{kind} {:<10} UNHEALTHY: {}", a.name, h.detail)
                }
                (Ok((rev, objects)), _) => println!(
                    "{kind} {:<10} healthy: revision {rev}, {objects} objects",
                    a.name
                ),
                (Err(e), _) => println!("{kind} {:<10} UNHEALTHY: {e}", a.name),
            }
        }
        println!();
        let now = time::OffsetDateTime::now_utc();
        match crate::certs::expiry::rows(&ctx) {
            Ok(rows) => {
                for l in
                    crate::certs::expiry::summary(&rows, now, crate::certs::expiry::WARN_WITHIN)
                {
                    println!("{l}");
                }
            }
            Err(e) => println!("certificates: cannot read them: {e}"),
        }
        backups(&ctx, now).await;
        super::status_drills::print(&ctx, now);
        Ok::<_, anyhow::Error>(())
    })?;
    Ok(0)
}

/// Cluster DNS: the kube-dns Service and its ready endpoints, then every node's kiln-dns asked directly
/// (in parallel, 2 s each), so one node's silence shows even while the Service still answers.
async fn dns(ctx: &crate::bootstrap::Context, client: &kube::Client) {
    use super::dns_probe;
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    let net = &ctx.cluster.config.spec.networking;
    let slices: kube::Api<EndpointSlice> = kube::Api::namespaced(client.clone(), "kube-system");
    let lp = ListParams::default().labels("kubernetes.io/service-name=kube-dns");
    match slices.list(&lp).await {
        Ok(list) => {
            let ready = list
                .items
                .iter()
                .flat_map(|s| s.endpoints.iter())
                .filter(|e| e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true))
                .count();
            println!(
                "dns service kube-system/kube-dns {}: {ready} ready endpoints",
                net.cluster_dns_ip()
            );
        }
        Err(e) => println!("dns service kube-system/kube-dns: cannot read its endpoints: {e}"),
    }
    let hosts = &ctx.cluster.config.spec.hosts;
    let probes = hosts.iter().map(|h| async move {
        let r = match h.node_address().parse() {
            Ok(ip) => {
                dns_probe::kubernetes_service(
                    ip,
                    &net.cluster_domain,
                    std::time::Duration::from_secs(2),
                )
                .await
            }
            Err(_) => Err(dns_probe::ProbeError::NotAnIp(h.node_address())),
        };
        dns_probe::line(&h.name, &net.cluster_domain, &r)
    });
    for l in futures::future::join_all(probes).await {
        println!("{l}");
    }
}

/// Per controller: the last scheduled snapshot run and its result (`snapshot schedule --status`'s reader)
/// and the newest bundle in its backup directory; then the newest bundle in the operator's own directory.
async fn backups(ctx: &crate::bootstrap::Context, now: time::OffsetDateTime) {
    use crate::backup_store::schedule;
    let scheduled = match schedule::status(ctx).await {
        Ok(s) => s,
        Err(e) => {
            println!("backup: cannot read the snapshot schedule: {e}");
            return;
        }
    };
    for s in scheduled {
        let dir = if s.dir.is_empty() {
            schedule::DEFAULT_DIR
        } else {
            s.dir.as_str()
        };
        let newest = match ctx.transport(&s.host).await {
            Ok(t) => t
                .run(&newest_bundle_script(dir))
                .await
                .ok()
                .and_then(|out| parse_newest(&out)),
            Err(_) => None,
        };
        println!(
            "{}",
            backup_line(&s.host, &s.last_run, &s.last_result, newest.as_ref(), now)
        );
    }
    let local = crate::snapshot::default_dir(ctx);
    let newest = std::fs::read_dir(&local)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(BUNDLE_SUFFIX))
        .filter_map(|e| {
            let t = e.metadata().ok()?.modified().ok()?;
            Some((
                e.path().display().to_string(),
                time::OffsetDateTime::from(t),
            ))
        })
        .max_by_key(|(_, t)| *t);
    match newest {
        Some((path, t)) => println!(
            "backup (operator): newest bundle {path} ({} ago)",
            age(now - t)
        ),
        None => println!("backup (operator): none in {}", local.display()),
    }
}

const BUNDLE_SUFFIX: &str = ".kiln-bundle.tar";

/// Prints `<mtime> <path>` of the newest bundle in `dir`, or nothing.
fn newest_bundle_script(dir: &str) -> String {
    let d = crate::transport::shell_quote(dir);
    format!(
        "f=$(ls -1t {d} 2>/dev/null | grep '\\.kiln-bundle\\.tar$' | head -n 1); \
         [ -n \"$f\" ] && stat -c '%Y %n' {d}/\"$f\"; true"
    )
}

fn parse_newest(out: &str) -> Option<(String, time::OffsetDateTime)> {
    let (secs, path) = out.trim().split_once(' ')?;
    let t = time::OffsetDateTime::from_unix_timestamp(secs.parse().ok()?).ok()?;
    Some((path.to_string(), t))
}

fn age(d: time::Duration) -> String {
    match d.whole_seconds().max(0) {
        s if s < 120 => format!("{s}s"),
        s if s < 7200 => format!("{}m", s / 60),
        s if s < 172_800 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}

/// One line about a host's backups. `last_run`/`last_result` come from the snapshot log's last line
/// ("<time> ok <file> revision=…" or "<time> error <message>"); "none" when there is no run and no bundle.
fn backup_line(
    host: &str,
    last_run: &str,
    last_result: &str,
    newest: Option<&(String, time::OffsetDateTime)>,
    now: time::OffsetDateTime,
) -> String {
    if last_run.is_empty() && newest.is_none() {
        return format!("backup {host}: none");
    }
    let run = if last_run.is_empty() {
        "last scheduled run none".to_string()
    } else {
        let mut words = last_result.split_whitespace();
        let result = match words.next() {
            Some("ok") => {
                let rev = last_result
                    .split_whitespace()
                    .find_map(|w| w.strip_prefix("revision="));
                match rev {
                    Some(r) => format!("ok (revision {r})"),
                    None => "ok".to_string(),
                }
            }
            Some("error") => format!("FAILED: {}", words.collect::<Vec<_>>().join(" ")),
            _ => last_result.to_string(),
        };
        format!("last scheduled run {last_run} {result}")
    };
    let bundle = match newest {
        Some((path, t)) => format!("newest bundle {path} ({} ago)", age(now - *t)),
        None => "no bundle".to_string(),
    };
    format!("backup {host}: {run}; {bundle}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backup_lines() {
        let now = time::OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap();
        assert_eq!(
            backup_line("host1", "", "", None, now),
            "backup host1: none"
        );
        let newest = (
            "/var/backups/kiln/a.kiln-bundle.tar".to_string(),
            now - time::Duration::minutes(5),
        );
        assert_eq!(
            backup_line(
                "host1",
                "2026-11-29T21:00:00Z",
                "ok /var/backups/kiln/a.kiln-bundle.tar revision=42 objects=7 sha256=ab",
                Some(&newest),
                now
            ),
            "backup host1: last scheduled run 2026-11-29T21:00:00Z ok (revision 42); \
             newest bundle /var/backups/kiln/a.kiln-bundle.tar (5m ago)"
        );
        assert_eq!(
            backup_line(
                "host1",
                "2026-11-29T21:00:00Z",
                "error store down",
                None,
                now
            ),
            "backup host1: last scheduled run 2026-11-29T21:00:00Z FAILED: store down; no bundle"
        );
        assert_eq!(
            backup_line("host1", "", "", Some(&newest), now),
            "backup host1: last scheduled run none; newest bundle /var/backups/kiln/a.kiln-bundle.tar (5m ago)"
        );
    }

    #[test]
    fn the_newest_bundle_is_parsed_from_stat() {
        let (p, t) = parse_newest("1800000000 /var/backups/kiln/x.kiln-bundle.tar\n").unwrap();
        assert_eq!(p, "/var/backups/kiln/x.kiln-bundle.tar");
        assert_eq!(t.unix_timestamp(), 1_800_000_000);
        assert!(parse_newest("").is_none());
        assert_eq!(age(time::Duration::hours(50)), "2d");
    }
}
