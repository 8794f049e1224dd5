//! robfig/cron v3's field grammar, as `ParseStandard` reads one field: comma-separated ranges `a`,
//! `a-b`, `*` or `?`, each with an optional `/step` (`a/step` runs to the field's maximum), month
//! and weekday names in any case, and its error texts word for word.

use super::go::quote;
use super::ScheduleError;

/// One field's range of values and its names.
#[derive(Debug)]
pub(super) struct Bounds {
    pub min: u64,
    pub max: u64,
    names: &'static [(&'static str, u64)],
}

pub(super) const MINUTES: Bounds = Bounds {
    min: 0,
    max: 59,
    names: &[],
};
pub(super) const HOURS: Bounds = Bounds {
    min: 0,
    max: 23,
    names: &[],
};
pub(super) const DAYS_OF_MONTH: Bounds = Bounds {
    min: 1,
    max: 31,
    names: &[],
};
pub(super) const MONTHS: Bounds = Bounds {
    min: 1,
    max: 12,
    names: &[
        ("jan", 1),
        ("feb", 2),
        ("mar", 3),
        ("apr", 4),
        ("may", 5),
        ("jun", 6),
        ("jul", 7),
        ("aug", 8),
        ("sep", 9),
        ("oct", 10),
        ("nov", 11),
        ("dec", 12),
    ],
};
pub(super) const DAYS_OF_WEEK: Bounds = Bounds {
    min: 0,
    max: 6,
    names: &[
        ("sun", 0),
        ("mon", 1),
        ("tue", 2),
        ("wed", 3),
        ("thu", 4),
        ("fri", 5),
        ("sat", 6),
    ],
};

/// A parsed field: the values it allows (bit n = value n), and whether robfig marks it a wildcard
/// (a range starting with `*` or `?` that steps by 1). The mark decides how day of month and day of
/// week combine: both restricted → either may match; otherwise both must.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Field {
    pub bits: u64,
    pub star: bool,
}

impl Field {
    pub fn all(b: &Bounds) -> Field {
        Field {
            bits: span(b.min, b.max, 1),
            star: true,
        }
    }

    pub fn only(value: u64) -> Field {
        Field {
            bits: 1 << value,
            star: false,
        }
    }

    pub fn has(&self, value: u64) -> bool {
        value < 64 && self.bits & (1 << value) != 0
    }

    /// The values in ascending order.
    pub fn values(&self) -> impl Iterator<Item = u64> + '_ {
        (0..64).filter(|v| self.has(*v))
    }
}

fn span(start: u64, end: u64, step: u64) -> u64 {
    (start..=end)
        .step_by(step as usize)
        .fold(0, |bits, v| bits | (1 << v))
}

/// A whole field: its comma-separated ranges OR-ed together. Empty parts are skipped, as Go's
/// `strings.FieldsFunc` skips them, so `,` alone allows nothing.
pub(super) fn parse(field: &str, b: &Bounds) -> Result<Field, ScheduleError> {
    let mut out = Field {
        bits: 0,
        star: false,
    };
    for range in field.split(',').filter(|r| !r.is_empty()) {
        let f = parse_range(range, b)?;
        out.bits |= f.bits;
        out.star |= f.star;
    }
    Ok(out)
}

fn parse_range(expr: &str, b: &Bounds) -> Result<Field, ScheduleError> {
    let range_and_step: Vec<&str> = expr.split('/').collect();
    let low_and_high: Vec<&str> = range_and_step[0].split('-').collect();
    let single = low_and_high.len() == 1;
    let (start, mut end, mut star);
    if low_and_high[0] == "*" || low_and_high[0] == "?" {
        // robfig ignores whatever follows a `*-`.
        (start, end, star) = (b.min, b.max, true);
    } else {
        start = int_or_name(low_and_high[0], b)?;
        end = match low_and_high.len() {
            1 => start,
            2 => int_or_name(low_and_high[1], b)?,
            _ => return Err(ScheduleError::TooManyHyphens(expr.to_string())),
        };
        star = false;
    }
    let step = match range_and_step.len() {
        1 => 1,
        2 => {
            let step = must_int(range_and_step[1])?;
            if single {
                end = b.max;
            }
            if step > 1 {
                star = false;
            }
            step
        }
        _ => return Err(ScheduleError::TooManySlashes(expr.to_string())),
    };
    let expr = expr.to_string();
    if start < b.min {
        return Err(ScheduleError::BelowMinimum {
            start,
            min: b.min,
            expr,
        });
    }
    if end > b.max {
        return Err(ScheduleError::AboveMaximum {
            end,
            max: b.max,
            expr,
        });
    }
    if start > end {
        return Err(ScheduleError::Reversed { start, end, expr });
    }
    if step == 0 {
        return Err(ScheduleError::ZeroStep(expr));
    }
    Ok(Field {
        bits: span(start, end, step),
        star,
    })
}

fn int_or_name(expr: &str, b: &Bounds) -> Result<u64, ScheduleError> {
    let lower = expr.to_lowercase();
    match b.names.iter().find(|(n, _)| *n == lower) {
        Some((_, v)) => Ok(*v),
        None => must_int(expr),
    }
}

/// Go's `strconv.Atoi`, then robfig's refusal of negative numbers.
fn must_int(expr: &str) -> Result<u64, ScheduleError> {
    use std::num::IntErrorKind;
    let not_a_number = |reason: &'static str| ScheduleError::NotANumber {
        expr: expr.to_string(),
        quoted: quote(expr),
        reason,
    };
    let num: i64 = expr
        .parse()
        .map_err(|e: std::num::ParseIntError| match e.kind() {
            IntErrorKind::PosOverflow | IntErrorKind::NegOverflow => {
                not_a_number("value out of range")
            }
            _ => not_a_number("invalid syntax"),
        })?;
    u64::try_from(num).map_err(|_| ScheduleError::Negative {
        num,
        expr: expr.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(field: &str, b: &Bounds) -> Vec<u64> {
        parse(field, b).unwrap().values().collect()
    }

    fn error(field: &str, b: &Bounds) -> String {
        parse(field, b).unwrap_err().to_string()
    }

    #[test]
    fn ranges_steps_and_names() {
        assert_eq!(values("5", &MINUTES), vec![5]);
        assert_eq!(values("1-3,10", &MINUTES), vec![1, 2, 3, 10]);
        assert_eq!(values("*/15", &MINUTES), vec![0, 15, 30, 45]);
        // `N/step` runs to the maximum.
        assert_eq!(values("50/3", &MINUTES), vec![50, 53, 56, 59]);
        assert_eq!(values("10-20/5", &MINUTES), vec![10, 15, 20]);
        assert_eq!(values("MON-wed", &DAYS_OF_WEEK), vec![1, 2, 3]);
        assert_eq!(values("jan,Dec", &MONTHS), vec![1, 12]);
        assert_eq!(values("+5", &HOURS), vec![5]);
        assert_eq!(parse(",", &MINUTES).unwrap().bits, 0);
    }

    #[test]
    fn wildcard_mark_follows_robfig() {
        assert!(parse("*", &DAYS_OF_MONTH).unwrap().star);
        assert!(parse("?", &DAYS_OF_MONTH).unwrap().star);
        assert!(parse("*/1", &DAYS_OF_MONTH).unwrap().star);
        assert!(!parse("*/2", &DAYS_OF_MONTH).unwrap().star);
        assert!(!parse("1-31", &DAYS_OF_MONTH).unwrap().star);
        assert_eq!(
            parse("*", &DAYS_OF_WEEK).unwrap(),
            Field::all(&DAYS_OF_WEEK)
        );
    }

    #[test]
    fn errors_are_robfigs() {
        assert_eq!(
            error("x", &MINUTES),
            r#"failed to parse int from x: strconv.Atoi: parsing "x": invalid syntax"#
        );
        assert_eq!(
            error("L", &DAYS_OF_MONTH),
            r#"failed to parse int from L: strconv.Atoi: parsing "L": invalid syntax"#
        );
        assert_eq!(
            error("99999999999999999999", &MINUTES),
            r#"failed to parse int from 99999999999999999999: strconv.Atoi: parsing "99999999999999999999": value out of range"#
        );
        assert_eq!(
            error("60", &MINUTES),
            "end of range (60) above maximum (59): 60"
        );
        assert_eq!(
            error("7", &DAYS_OF_WEEK),
            "end of range (7) above maximum (6): 7"
        );
        assert_eq!(
            error("0", &DAYS_OF_MONTH),
            "beginning of range (0) below minimum (1): 0"
        );
        assert_eq!(
            error("5-2", &HOURS),
            "beginning of range (5) beyond end of range (2): 5-2"
        );
        assert_eq!(error("1-2-3", &HOURS), "too many hyphens: 1-2-3");
        assert_eq!(error("*/2/3", &HOURS), "too many slashes: */2/3");
        assert_eq!(
            error("*/0", &HOURS),
            "step of range should be a positive number: */0"
        );
        assert_eq!(
            error("*/-5", &HOURS),
            "negative number (-5) not allowed: -5"
        );
    }
}
