//! resource.Quantity as far as validation, admission and quota need it: parse the serialized form
//! (`1Gi`, `500M`, `1.5e3`, `100m`) into an exact value so sizes compare as upstream's
//! `Quantity.Cmp` does, however each side was spelled, and print sums back in upstream's canonical
//! form (`500m`, `252Mi`, `2k`).

/// A quantity in thousandths of a unit (so `100m` is exact); storage sizes fit easily in i128.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Milli(pub i128);

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum QuantityError {
    #[error("quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'")]
    Format,
}

/// (multiplier numerator, divisor) for each suffix, in milli-units.
fn suffix_scale(suffix: &str) -> Option<(i128, i128)> {
    let bin = |p: u32| (1000 * (1i128 << (10 * p)), 1);
    let dec = |p: u32| (1000 * 10i128.pow(3 * p), 1);
    Some(match suffix {
        "" => (1000, 1),
        "m" => (1, 1),
        "n" => (1, 1_000_000),
        "u" => (1, 1000),
        "k" => dec(1),
        "M" => dec(2),
        "G" => dec(3),
        "T" => dec(4),
        "P" => dec(5),
        "E" => dec(6),
        "Ki" => bin(1),
        "Mi" => bin(2),
        "Gi" => bin(3),
        "Ti" => bin(4),
        "Pi" => bin(5),
        "Ei" => bin(6),
        _ => return None,
    })
}

/// Parses a serialized quantity (a JSON string or number's text).
pub fn parse(text: &str) -> Result<Milli, QuantityError> {
    let s = text.trim();
    let (negative, body) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let split = body
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(body.len());
    let (number, suffix) = body.split_at(split);
    if number.is_empty() || number == "." || number.matches('.').count() > 1 {
        return Err(QuantityError::Format);
    }
    let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));
    let digits: String = format!("{int_part}{frac_part}");
    let mantissa: i128 = digits.parse().map_err(|_| QuantityError::Format)?;
    let mut exp10 = -(frac_part.len() as i32);
    let (num, den) = if let Some(e) = suffix.strip_prefix(['e', 'E']) {
        exp10 += e.parse::<i32>().map_err(|_| QuantityError::Format)?;
        (1000, 1)
    } else {
        suffix_scale(suffix).ok_or(QuantityError::Format)?
    };
    let mut value = mantissa.checked_mul(num).ok_or(QuantityError::Format)?;
    let mut den = den;
    if exp10 >= 0 {
        value = value
            .checked_mul(
                10i128
                    .checked_pow(exp10 as u32)
                    .ok_or(QuantityError::Format)?,
            )
            .ok_or(QuantityError::Format)?;
    } else {
        den = den
            .checked_mul(
                10i128
                    .checked_pow((-exp10) as u32)
                    .ok_or(QuantityError::Format)?,
            )
            .ok_or(QuantityError::Format)?;
    }
    // Upstream rounds sub-milli remainders up; sizes never have them, so ceiling is enough.
    let value = (value + den - 1).div_euclid(den);
    Ok(Milli(if negative { -value } else { value }))
}

/// The quantity a JSON value holds (quantities serialize as strings; numbers are accepted too).
pub fn of(value: &serde_json::Value) -> Option<Milli> {
    match value {
        serde_json::Value::String(s) => parse(s).ok(),
        serde_json::Value::Number(n) => parse(&n.to_string()).ok(),
        _ => None,
    }
}

/// The text a quantity value prints as (the stored string; `0` when absent, as an empty
/// `resource.Quantity` prints).
pub fn text(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Number(n) => n.to_string(),
        _ => "0".to_string(),
    }
}

impl Milli {
    pub const ZERO: Milli = Milli(0);
}

impl std::ops::Add for Milli {
    type Output = Milli;
    fn add(self, o: Milli) -> Milli {
        Milli(self.0 + o.0)
    }
}

impl std::ops::Sub for Milli {
    type Output = Milli;
    fn sub(self, o: Milli) -> Milli {
        Milli(self.0 - o.0)
    }
}

/// Whether a serialized quantity uses a binary suffix (`Ki` … `Ei`): sums print in the format of
/// what they add up, as upstream's Quantity keeps its operand's format.
pub fn is_binary(text: &str) -> bool {
    text.trim_end().ends_with('i')
}

/// Upstream's canonical text of a value: milli-units when fractional (`500m`), else the largest
/// suffix that divides it exactly — binary (`252Mi`, `1Gi`) or decimal (`2k`, `1`).
pub fn format(value: Milli, binary: bool) -> String {
    let Milli(m) = value;
    if m == 0 {
        return "0".into();
    }
    if m % 1000 != 0 {
        return format!("{m}m");
    }
    let mut units = m / 1000;
    let (base, suffixes): (i128, &[&str]) = if binary {
        (1024, &["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"])
    } else {
        (1000, &["", "k", "M", "G", "T", "P", "E"])
    };
    let mut i = 0;
    while i + 1 < suffixes.len() && units % base == 0 {
        units /= base;
        i += 1;
    }
    format!("{units}{}", suffixes[i])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_text() {
        assert_eq!(format(parse("500m").unwrap(), false), "500m");
        assert_eq!(format(parse("252Mi").unwrap(), true), "252Mi");
        assert_eq!(
            format(parse("1Gi").unwrap() + parse("1Gi").unwrap(), true),
            "2Gi"
        );
        assert_eq!(format(parse("1").unwrap(), false), "1");
        assert_eq!(format(parse("2000").unwrap(), false), "2k");
        assert_eq!(format(Milli::ZERO, true), "0");
        assert_eq!(format(parse("1.5").unwrap(), false), "1500m");
        assert!(is_binary("30Gi") && !is_binary("30G") && !is_binary("2"));
    }

    #[test]
    fn spellings_of_one_size_compare_equal() {
        assert_eq!(parse("1Gi"), parse("1024Mi"));
        assert_eq!(parse("1G"), parse("1000M"));
        assert_eq!(parse("1e3"), parse("1k"));
        assert_eq!(parse("1.5Gi"), parse("1536Mi"));
        assert_eq!(parse("100m").unwrap(), Milli(100));
        assert_eq!(parse("2").unwrap(), Milli(2000));
        assert!(parse("1Gi").unwrap() > parse("1G").unwrap());
        assert!(parse("-1").unwrap() < Milli(0));
    }

    #[test]
    fn malformed_quantities_fail() {
        for bad in ["", "Gi", "1Gb", "1..2", "abc", "1e"] {
            assert_eq!(parse(bad), Err(QuantityError::Format), "{bad}");
        }
    }
}
