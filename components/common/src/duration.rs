//! Go-style durations ("40s", "2m30s", "500ms"), as kube-scheduler and kube-controller-manager take them
//! on their command lines, so manifests written for upstream carry over.

use std::time::Duration;

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum DurationError {
    #[error(
        "invalid duration {0:?}: expected a number with a unit (ns, us, ms, s, m, h), e.g. 40s"
    )]
    Invalid(String),
}

/// Parses a Go `time.Duration` string (a sequence of decimal numbers with units; "0" alone is allowed).
pub fn parse_duration(input: &str) -> Result<Duration, DurationError> {
    let invalid = || DurationError::Invalid(input.to_string());
    let s = input.trim();
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.is_empty() {
        return Err(invalid());
    }
    let mut total = 0f64;
    let mut rest = s;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(invalid)?;
        if num_len == 0 {
            return Err(invalid());
        }
        let value: f64 = rest[..num_len].parse().map_err(|_| invalid())?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let seconds = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(invalid()),
        };
        total += value * seconds;
        rest = &rest[unit_len..];
    }
    Ok(Duration::from_secs_f64(total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_parse() {
        assert_eq!(parse_duration("40s").unwrap(), Duration::from_secs(40));
        assert_eq!(parse_duration("2m30s").unwrap(), Duration::from_secs(150));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("1.5h").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse_duration("0").unwrap(), Duration::ZERO);
    }

    #[test]
    fn bad_durations_are_rejected() {
        for bad in ["", "40", "s", "4x", "-"] {
            assert!(parse_duration(bad).is_err(), "{bad:?} should fail");
        }
    }
}
