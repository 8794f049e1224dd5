//! The bits of Go's `time` package that CronJob behaviour shows to users, reproduced so kiln's
//! messages and annotations read exactly like kube-apiserver's and kube-controller-manager's:
//! `time.ParseDuration` (for `@every`) and its quoting, `time.LoadLocation`, and the RFC 3339 /
//! RFC 1123Z renderings of a time.

use std::str::FromStr;

use chrono::{DateTime, Offset, TimeZone, Utc};
use chrono_tz::Tz;

const NANOS_PER: &[(&str, u64)] = &[
    ("ns", 1),
    ("us", 1_000),
    ("µs", 1_000),
    ("μs", 1_000),
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
    ("m", 60_000_000_000),
    ("h", 3_600_000_000_000),
];

/// Go's `time.quote`: `"` + the text with `"`/`\` escaped and non-ASCII or control bytes as `\xNN`.
pub fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        if !c.is_ascii() || c < ' ' {
            let mut buf = [0u8; 4];
            for b in c.encode_utf8(&mut buf).bytes() {
                out.push_str(&format!("\\x{b:02x}"));
            }
        } else {
            if c == '"' || c == '\\' {
                out.push('\\');
            }
            out.push(c);
        }
    }
    out.push('"');
    out
}

/// Go's `time.ParseDuration`, in nanoseconds, with its error texts (`time: invalid duration "x"`,
/// `time: missing unit in duration "5"`, `time: unknown unit "q" in duration "5q"`).
pub fn parse_duration(orig: &str) -> Result<i64, String> {
    let invalid = || format!("time: invalid duration {}", quote(orig));
    let mut s = orig;
    let mut neg = false;
    if let Some(c) = s.chars().next() {
        if c == '-' || c == '+' {
            neg = c == '-';
            s = &s[1..];
        }
    }
    if s == "0" {
        return Ok(0);
    }
    if s.is_empty() {
        return Err(invalid());
    }
    const LIMIT: u64 = 1 << 63;
    let mut total: u64 = 0;
    while !s.is_empty() {
        let first = s.as_bytes()[0];
        if !(first == b'.' || first.is_ascii_digit()) {
            return Err(invalid());
        }
        let int_len = s.bytes().take_while(u8::is_ascii_digit).count();
        let mut whole: u64 = 0;
        for b in s[..int_len].bytes() {
            // Go's leadingInt overflows past 1<<63, which the duration then rejects.
            if whole > LIMIT / 10 {
                return Err(invalid());
            }
            whole = whole * 10 + u64::from(b - b'0');
            if whole > LIMIT {
                return Err(invalid());
            }
        }
        s = &s[int_len..];
        let (mut frac, mut scale, mut frac_len) = (0u64, 1f64, 0usize);
        let dot = s.starts_with('.');
        if dot {
            s = &s[1..];
            frac_len = s.bytes().take_while(u8::is_ascii_digit).count();
            let mut overflow = false;
            for b in s[..frac_len].bytes() {
                // Go's leadingFraction stops adding digits once they no longer fit.
                if overflow || frac > (LIMIT - 1) / 10 {
                    overflow = true;
                    continue;
                }
                frac = frac * 10 + u64::from(b - b'0');
                scale *= 10.0;
            }
            s = &s[frac_len..];
        }
        if int_len == 0 && frac_len == 0 {
            return Err(invalid());
        }
        let unit_len = s
            .char_indices()
            .find(|(_, c)| *c == '.' || c.is_ascii_digit())
            .map_or(s.len(), |(i, _)| i);
        if unit_len == 0 {
            return Err(format!("time: missing unit in duration {}", quote(orig)));
        }
        let unit_name = &s[..unit_len];
        s = &s[unit_len..];
        let Some(&(_, unit)) = NANOS_PER.iter().find(|(n, _)| *n == unit_name) else {
            return Err(format!(
                "time: unknown unit {} in duration {}",
                quote(unit_name),
                quote(orig)
            ));
        };
        if whole > LIMIT / unit {
            return Err(invalid());
        }
        let mut value = whole * unit;
        if frac > 0 {
            value += (frac as f64 * (unit as f64 / scale)) as u64;
            if value > LIMIT {
                return Err(invalid());
            }
        }
        total += value;
        if total > LIMIT {
            return Err(invalid());
        }
    }
    if neg {
        return Ok(-(total as i128) as i64);
    }
    i64::try_from(total).map_err(|_| invalid())
}

/// Go's `time.LoadLocation` as kube-apiserver and kube-controller-manager see it: `""` and
/// `"UTC"` are UTC, `"Local"` is the process's zone (UTC for kiln's components), anything else an
/// IANA name from the bundled database; the error text is Go's.
pub fn load_location(name: &str) -> Result<Tz, String> {
    match name {
        "" | "UTC" | "Local" => Ok(Tz::UTC),
        _ if name.contains("..") || name.starts_with('/') || name.starts_with('\\') => {
            Err("time: invalid location name".to_string())
        }
        _ => Tz::from_str(name).map_err(|_| format!("unknown time zone {name}")),
    }
}

fn at(secs: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(secs, 0).unwrap_or_default()
}

/// `t.In(zone).Format(time.RFC3339)`: `2024-05-01T10:00:00+02:00`, or `Z` for a zero offset.
pub fn rfc3339_in(secs: i64, zone: Tz) -> String {
    let local = zone.from_utc_datetime(&at(secs).naive_utc());
    let offset = local.offset().fix().local_minus_utc();
    let clock = local.format("%Y-%m-%dT%H:%M:%S");
    if offset == 0 {
        return format!("{clock}Z");
    }
    let sign = if offset < 0 { '-' } else { '+' };
    let abs = offset.abs();
    format!("{clock}{sign}{:02}:{:02}", abs / 3600, abs % 3600 / 60)
}

/// `t.UTC().Format(time.RFC1123Z)`: `Mon, 02 Jan 2006 15:04:05 +0000`.
pub fn rfc1123z_utc(secs: i64) -> String {
    at(secs).format("%a, %d %b %Y %H:%M:%S +0000").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: i64 = 1_000_000_000;

    #[test]
    fn durations_parse_like_go() {
        assert_eq!(parse_duration("5m"), Ok(300 * SEC));
        assert_eq!(parse_duration("1h30m"), Ok(5400 * SEC));
        assert_eq!(parse_duration("1.5s"), Ok(1_500_000_000));
        assert_eq!(parse_duration(".5s"), Ok(500_000_000));
        assert_eq!(parse_duration("-2s"), Ok(-2 * SEC));
        assert_eq!(parse_duration("+3ms"), Ok(3_000_000));
        assert_eq!(parse_duration("0"), Ok(0));
        assert_eq!(parse_duration("2µs"), Ok(2_000));
    }

    #[test]
    fn duration_errors_are_gos() {
        assert_eq!(
            parse_duration("x").unwrap_err(),
            r#"time: invalid duration "x""#
        );
        assert_eq!(
            parse_duration("").unwrap_err(),
            r#"time: invalid duration """#
        );
        assert_eq!(
            parse_duration("5").unwrap_err(),
            r#"time: missing unit in duration "5""#
        );
        assert_eq!(
            parse_duration("5q").unwrap_err(),
            r#"time: unknown unit "q" in duration "5q""#
        );
        assert_eq!(
            parse_duration(".s").unwrap_err(),
            r#"time: invalid duration ".s""#
        );
        assert_eq!(
            parse_duration("9999999999999h").unwrap_err(),
            r#"time: invalid duration "9999999999999h""#
        );
        assert_eq!(quote("a\"é"), r#""a\"\xc3\xa9""#);
    }

    #[test]
    fn locations_load_like_go() {
        assert_eq!(load_location(""), Ok(Tz::UTC));
        assert_eq!(load_location("UTC"), Ok(Tz::UTC));
        assert_eq!(
            load_location("Europe/Berlin"),
            Ok(chrono_tz::Europe::Berlin)
        );
        assert_eq!(
            load_location("bad-time-zone").unwrap_err(),
            "unknown time zone bad-time-zone"
        );
        assert_eq!(
            load_location("../etc/passwd").unwrap_err(),
            "time: invalid location name"
        );
    }

    #[test]
    fn times_render_like_go() {
        // 2024-01-15T09:30:00Z, a Monday.
        let t = 1_705_311_000;
        assert_eq!(rfc3339_in(t, Tz::UTC), "2024-01-15T09:30:00Z");
        assert_eq!(
            rfc3339_in(t, chrono_tz::Europe::Berlin),
            "2024-01-15T10:30:00+01:00"
        );
        assert_eq!(
            rfc3339_in(t, chrono_tz::America::St_Johns),
            "2024-01-15T06:00:00-03:30"
        );
        // London is at +00:00 in winter: Go prints Z for any zero offset.
        assert_eq!(
            rfc3339_in(t, chrono_tz::Europe::London),
            "2024-01-15T09:30:00Z"
        );
        assert_eq!(rfc1123z_utc(t), "Mon, 15 Jan 2024 09:30:00 +0000");
    }
}
