//! Every certificate the operator's state directory holds (the tree per controller, and the client
//! certificates of the kubeconfigs kiln issued), for `kiln certs check-expiration` and `kiln status`; and
//! the 30-day warning logic as a pure function.

use time::{Duration, OffsetDateTime};

use super::CertsError;
use crate::bootstrap::Context;

/// One certificate: where it is (`host` of the per-controller tree, or "all" for the cluster's own
/// kubeconfigs), its name, and what it says.
#[derive(Debug, Clone)]
pub struct Row {
    pub host: String,
    pub name: String,
    pub info: kiln_pki::CertInfo,
}

impl Row {
    pub fn label(&self) -> String {
        format!("{}/{}", self.host, self.name)
    }
}

/// Rows for every certificate present: per controller the tree then its kubeconfigs, then admin.conf and
/// proxy.conf (host "all").
pub fn rows(ctx: &Context) -> Result<Vec<Row>, CertsError> {
    let mut out = vec![];
    let read_conf = |path: &std::path::Path| -> Result<Option<kiln_pki::CertInfo>, CertsError> {
        if !path.exists() {
            return Ok(None);
        }
        let kc = kiln_pki::read_kubeconfig(path).map_err(|e| CertsError::read(path, e))?;
        let pem = kc
            .client_cert_pem()
            .map_err(|e| CertsError::read(path, e))?;
        let info = kiln_pki::parse_cert_pem(&pem, &path.display().to_string())
            .map_err(|e| CertsError::read(path, e))?;
        Ok(Some(info))
    };
    for h in ctx.cluster.config.controllers() {
        let dir = ctx.pki_dir(&h.name);
        if dir.exists() {
            for (name, info) in kiln_pki::expiry(&dir).map_err(|e| CertsError::read(&dir, e))? {
                out.push(Row {
                    host: h.name.clone(),
                    name,
                    info,
                });
            }
        }
        for conf in ["scheduler.conf", "controller-manager.conf"] {
            let path = ctx.state_dir.join("kubeconfigs").join(&h.name).join(conf);
            if let Some(info) = read_conf(&path)? {
                out.push(Row {
                    host: h.name.clone(),
                    name: conf.into(),
                    info,
                });
            }
        }
    }
    for conf in ["admin.conf", "proxy.conf", "dns.conf"] {
        if let Some(info) = read_conf(&ctx.state_dir.join(conf))? {
            out.push(Row {
                host: "all".into(),
                name: conf.into(),
                info,
            });
        }
    }
    Ok(out)
}

/// Certificates with this little time left get a warning in `kiln status`.
pub const WARN_WITHIN: Duration = Duration::days(30);

/// What `kiln status` prints about certificates: one WARNING line per certificate (CAs included) with at
/// most `within` left (or already expired), else one line naming the earliest expiry.
pub fn summary(rows: &[Row], now: OffsetDateTime, within: Duration) -> Vec<String> {
    let Some(earliest) = rows.iter().min_by_key(|r| r.info.not_after) else {
        return vec!["certificates: none in the state directory (run `kiln init`)".into()];
    };
    let mut sorted: Vec<&Row> = rows.iter().collect();
    sorted.sort_by_key(|r| r.info.not_after);
    let warnings: Vec<String> = sorted
        .into_iter()
        .filter(|r| r.info.not_after - now <= within)
        .map(|r| {
            let left = r.info.not_after - now;
            let when = if left <= Duration::ZERO {
                format!("EXPIRED {} days ago", (-left).whole_days())
            } else {
                format!("expires in {} days", left.whole_days())
            };
            let what = if r.info.is_ca {
                "CA certificate"
            } else {
                "certificate"
            };
            let todo = if r.info.is_ca {
                "a new CA means re-issuing everything it signed".to_string()
            } else {
                format!("renew with `kiln certs renew {}`", r.name)
            };
            format!("WARNING: {what} {} {when} ({todo})", r.label())
        })
        .collect();
    if !warnings.is_empty() {
        return warnings;
    }
    vec![format!(
        "certificates: all valid for > {} days (earliest: {} in {} days)",
        within.whole_days(),
        earliest.label(),
        (earliest.info.not_after - now).whole_days()
    )]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(host: &str, name: &str, days: i64, is_ca: bool, now: OffsetDateTime) -> Row {
        Row {
            host: host.into(),
            name: name.into(),
            info: kiln_pki::CertInfo {
                subject_cn: name.into(),
                organizations: vec![],
                issuer_cn: "kubernetes".into(),
                not_before: now - Duration::days(1),
                not_after: now + Duration::days(days) + Duration::hours(1),
                is_ca,
                sans: vec![],
            },
        }
    }

    #[test]
    fn all_valid_names_the_earliest() {
        let now = OffsetDateTime::now_utc();
        let rows = [
            row("host1", "ca", 3649, true, now),
            row("host1", "apiserver", 364, false, now),
            row("all", "admin.conf", 200, false, now),
        ];
        assert_eq!(
            summary(&rows, now, WARN_WITHIN),
            ["certificates: all valid for > 30 days (earliest: all/admin.conf in 200 days)"]
        );
    }

    #[test]
    fn one_warning_per_certificate_within_30_days_soonest_first() {
        let now = OffsetDateTime::now_utc();
        let rows = [
            row("host1", "apiserver", 29, false, now),
            row("host1", "store-peer", 31, false, now),
            row("host1", "ca", 12, true, now),
            row("host1", "scheduler.conf", -4, false, now),
        ];
        let lines = summary(&rows, now, WARN_WITHIN);
        assert_eq!(lines.len(), 3, "{lines:?}");
        assert!(
            lines[0].starts_with("WARNING: certificate host1/scheduler.conf EXPIRED 3 days ago"),
            "{lines:?}"
        );
        assert!(
            lines[0].contains("kiln certs renew scheduler.conf"),
            "{lines:?}"
        );
        assert!(
            lines[1].starts_with("WARNING: CA certificate host1/ca expires in 12 days"),
            "{lines:?}"
        );
        assert!(
            lines[2].starts_with("WARNING: certificate host1/apiserver expires in 29 days"),
            "{lines:?}"
        );
    }

    #[test]
    fn the_boundary_is_inclusive_and_nothing_is_a_line_of_its_own() {
        let now = OffsetDateTime::now_utc();
        let mut r = row("h", "apiserver", 30, false, now);
        r.info.not_after = now + WARN_WITHIN;
        assert!(summary(&[r], now, WARN_WITHIN)[0].starts_with("WARNING"));
        assert!(summary(&[], now, WARN_WITHIN)[0].contains("none"));
    }
}
