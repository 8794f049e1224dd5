use super::*;

/// Unix seconds of a UTC wall-clock time.
fn utc(y: i32, mo: u32, d: u32, h: u32, mi: u32) -> i64 {
    chrono::Utc
        .with_ymd_and_hms(y, mo, d, h, mi, 0)
        .single()
        .expect("valid time")
        .timestamp()
}

fn next(spec: &str, after: i64) -> Option<i64> {
    parse_standard(spec).expect("parses").next(after)
}

fn error(spec: &str) -> String {
    parse_standard(spec).expect_err("refused").to_string()
}

#[test]
fn upstream_e2e_schedules_parse() {
    for spec in [
        "*/1 * * * ?",
        "* */1 * * ?",
        "0 0 * * MON-FRI",
        "5/5 * * * *",
        "@every 1h30m",
        "TZ=Europe/Berlin 0 9 * * *",
        "CRON_TZ=UTC @daily",
    ] {
        assert!(parse_standard(spec).is_ok(), "{spec}");
    }
}

#[test]
fn refusals_carry_robfigs_messages() {
    assert_eq!(error(""), "empty spec string");
    assert_eq!(
        error("* * * *"),
        "expected exactly 5 fields, found 4: [* * * *]"
    );
    assert_eq!(
        error("0 0 * * * *"),
        "expected exactly 5 fields, found 6: [0 0 * * * *]"
    );
    assert_eq!(error("bad"), "expected exactly 5 fields, found 1: [bad]");
    // Leading space: not a descriptor, so it is counted as fields.
    assert_eq!(
        error(" @daily"),
        "expected exactly 5 fields, found 1: [@daily]"
    );
    assert_eq!(error("@daily "), "unrecognized descriptor: @daily ");
    assert_eq!(
        error("@fortnightly"),
        "unrecognized descriptor: @fortnightly"
    );
    assert_eq!(
        error("@every soon"),
        r#"failed to parse duration @every soon: time: invalid duration "soon""#
    );
    assert_eq!(
        error("TZ=Mars/Olympus 0 * * * *"),
        "provided bad location Mars/Olympus: unknown time zone Mars/Olympus"
    );
    assert_eq!(
        error("0 0 L * *"),
        r#"failed to parse int from L: strconv.Atoi: parsing "L": invalid syntax"#
    );
    assert_eq!(error("0 0 * * 7"), "end of range (7) above maximum (6): 7");
    assert_eq!(
        error("61 * * * *"),
        "end of range (61) above maximum (59): 61"
    );
}

#[test]
fn next_is_strictly_after() {
    let t = utc(2024, 1, 15, 9, 30);
    assert_eq!(next("*/1 * * * ?", t), Some(t + 60));
    assert_eq!(next("*/1 * * * ?", t + 59), Some(t + 60));
    assert_eq!(next("0 * * * *", t), Some(utc(2024, 1, 15, 10, 0)));
    assert_eq!(next("* */1 * * ?", t), Some(t + 60));
}

#[test]
fn descriptors_stand_for_their_fields() {
    // 2024-05-05 is a Sunday.
    let t = utc(2024, 5, 5, 12, 0);
    assert_eq!(next("@yearly", t), Some(utc(2025, 1, 1, 0, 0)));
    assert_eq!(next("@annually", t), Some(utc(2025, 1, 1, 0, 0)));
    assert_eq!(next("@monthly", t), Some(utc(2024, 6, 1, 0, 0)));
    assert_eq!(next("@weekly", t), Some(utc(2024, 5, 12, 0, 0)));
    assert_eq!(next("@daily", t), Some(utc(2024, 5, 6, 0, 0)));
    assert_eq!(next("@midnight", t), Some(utc(2024, 5, 6, 0, 0)));
    assert_eq!(next("@hourly", t), Some(utc(2024, 5, 5, 13, 0)));
}

#[test]
fn every_is_a_fixed_delay_in_whole_seconds() {
    assert_eq!(next("@every 90s", 1000), Some(1090));
    assert_eq!(next("@every 1.5s", 1000), Some(1001));
    // Below a second rounds up to one, as robfig's Every does.
    assert_eq!(next("@every 10ms", 1000), Some(1001));
    assert_eq!(next("@every -5m", 1000), Some(1001));
}

#[test]
fn day_of_month_and_weekday_combine_like_robfig() {
    // Both restricted: the 13th OR a Friday. 2024-09-01 is a Sunday; Friday is the 6th.
    let t = utc(2024, 9, 1, 0, 0);
    assert_eq!(next("0 0 13 * 5", t), Some(utc(2024, 9, 6, 0, 0)));
    assert_eq!(
        next("0 0 13 * 5", utc(2024, 9, 12, 0, 0)),
        Some(utc(2024, 9, 13, 0, 0))
    );
    // A wildcard day of month (even `*/1`) means only the weekday decides.
    assert_eq!(next("0 0 */1 * 5", t), Some(utc(2024, 9, 6, 0, 0)));
    assert_eq!(
        next("0 0 * * 5", utc(2024, 9, 6, 0, 0)),
        Some(utc(2024, 9, 13, 0, 0))
    );
    // `*/2` is no wildcard: odd days OR Fridays.
    assert_eq!(
        next("0 0 */2 * 5", utc(2024, 9, 1, 1, 0)),
        Some(utc(2024, 9, 3, 0, 0))
    );
    // A wildcard weekday leaves the day of month to decide.
    assert_eq!(next("0 0 13 * ?", t), Some(utc(2024, 9, 13, 0, 0)));
}

#[test]
fn fields_are_read_in_the_schedules_zone() {
    let berlin = go::load_location("Europe/Berlin").unwrap();
    let winter = utc(2024, 1, 15, 0, 0);
    let summer = utc(2024, 7, 15, 0, 0);
    let at_nine = parse_standard("0 9 * * *").unwrap().in_zone(berlin);
    assert_eq!(at_nine.next(winter), Some(utc(2024, 1, 15, 8, 0)));
    assert_eq!(at_nine.next(summer), Some(utc(2024, 7, 15, 7, 0)));
    let prefixed = parse_standard("TZ=Europe/Berlin 0 9 * * *").unwrap();
    assert_eq!(prefixed.zone(), berlin);
    assert_eq!(prefixed.next(winter), Some(utc(2024, 1, 15, 8, 0)));
    // No prefix: UTC, the controller-manager's own zone.
    assert_eq!(next("0 9 * * *", winter), Some(utc(2024, 1, 15, 9, 0)));
}

#[test]
fn impossible_schedules_never_fire() {
    let t = utc(2024, 1, 1, 0, 0);
    assert_eq!(next("0 0 30 2 *", t), None);
    assert_eq!(next("0 0 31 4,6,9,11 *", t), None);
    assert_eq!(next(", * * * *", t), None);
    // February 29th comes within robfig's five-year horizon from 2024 ...
    assert_eq!(
        next("0 0 29 2 *", utc(2024, 3, 1, 0, 0)),
        Some(utc(2028, 2, 29, 0, 0))
    );
    // ... but not from 2096, when the next one is in 2104.
    assert_eq!(next("0 0 29 2 *", utc(2096, 3, 1, 0, 0)), None);
    // Both day fields restricted: a weekday can always match, so it is not impossible.
    assert!(next("0 0 30 2 1", t).is_some());
}
