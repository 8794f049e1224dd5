//! The string formats a CRD schema may name (upstream's supported subset of OpenAPI formats).
//! Unknown formats validate nothing, as upstream.

use base64::Engine;

/// Whether `s` is valid for `format`.
pub fn valid(format: &str, s: &str) -> bool {
    match format {
        "byte" => base64::engine::general_purpose::STANDARD.decode(s).is_ok(),
        "date" => {
            time::Date::parse(s, time::macros::format_description!("[year]-[month]-[day]")).is_ok()
        }
        "date-time" | "datetime" => {
            time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339).is_ok()
        }
        "uuid" => is_uuid(s),
        "ipv4" => s.parse::<std::net::Ipv4Addr>().is_ok(),
        "ipv6" => s.parse::<std::net::Ipv6Addr>().is_ok(),
        "cidr" => is_cidr(s),
        "mac" => is_mac(s),
        "hostname" => is_hostname(s),
        "email" => is_email(s),
        "duration" => is_go_duration(s),
        "uri" => s.split_once(':').is_some_and(|(scheme, _)| {
            !scheme.is_empty()
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
        }),
        _ => true,
    }
}

fn is_uuid(s: &str) -> bool {
    let groups: Vec<&str> = s.split('-').collect();
    groups.len() == 5
        && groups
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(g, n)| g.len() == n && g.chars().all(|c| c.is_ascii_hexdigit()))
}

fn is_cidr(s: &str) -> bool {
    let Some((ip, bits)) = s.split_once('/') else {
        return false;
    };
    let Ok(bits) = bits.parse::<u8>() else {
        return false;
    };
    match ip.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(_)) => bits <= 32,
        Ok(std::net::IpAddr::V6(_)) => bits <= 128,
        Err(_) => false,
    }
}

fn is_mac(s: &str) -> bool {
    let parts: Vec<&str> = s.split([':', '-']).collect();
    matches!(parts.len(), 6 | 8 | 20)
        && parts
            .iter()
            .all(|p| p.len() == 2 && p.chars().all(|c| c.is_ascii_hexdigit()))
}

fn is_hostname(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 255
        && s.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        })
}

fn is_email(s: &str) -> bool {
    match s.split_once('@') {
        Some((local, domain)) => !local.is_empty() && is_hostname(domain),
        None => false,
    }
}

/// Go's `time.ParseDuration` syntax: `1h30m`, `-1.5s`, `300ms`, `0`.
fn is_go_duration(s: &str) -> bool {
    let s = s.strip_prefix(['-', '+']).unwrap_or(s);
    if s == "0" {
        return true;
    }
    let mut rest = s;
    if rest.is_empty() {
        return false;
    }
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit() && c != '.')
            .unwrap_or(rest.len());
        if digits == 0 {
            return false;
        }
        rest = &rest[digits..];
        let unit = ["ns", "us", "µs", "ms", "s", "m", "h"]
            .iter()
            .filter(|u| rest.starts_with(**u))
            .max_by_key(|u| u.len());
        match unit {
            Some(u) => rest = &rest[u.len()..],
            None => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::valid;

    #[test]
    fn formats_accept_and_reject_like_upstream() {
        assert!(valid("date-time", "2024-01-02T03:04:05Z"));
        assert!(!valid("date-time", "yesterday"));
        assert!(valid("date", "2024-01-02"));
        assert!(valid("uuid", "0f3b2c3e-1111-4a2b-9c3d-123456789abc"));
        assert!(!valid("uuid", "0f3b"));
        assert!(valid("ipv4", "10.0.0.1") && !valid("ipv4", "10.0.0"));
        assert!(valid("cidr", "10.0.0.0/8") && !valid("cidr", "10.0.0.0/33"));
        assert!(
            valid("duration", "1h30m")
                && valid("duration", "300ms")
                && !valid("duration", "5 minutes")
        );
        assert!(valid("byte", "aGVsbG8=") && !valid("byte", "***"));
        assert!(valid("whatever-unknown", "anything"));
    }
}
