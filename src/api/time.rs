//! RFC 3339 timestamps as Kubernetes `metav1.Time` serializes them:
//! UTC, whole seconds, e.g. "2024-05-01T12:34:56Z".

use std::time::{SystemTime, UNIX_EPOCH};

const NANOS_PER_SEC: i64 = 1_000_000_000;
const SECS_PER_DAY: i64 = 86_400;

/// Unix seconds of an RFC 3339 UTC time as the apiserver writes it ("2026-11-24T21:40:02Z").
pub fn parse_rfc3339(s: &str) -> Option<i64> {
    let s = s.strip_suffix('Z')?;
    let (date, time) = s.split_once('T')?;
    let mut d = date.splitn(3, '-').map(|x| x.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let time = time.split('.').next()?;
    let mut t = time.splitn(3, ':').map(|x| x.parse::<i64>().ok());
    let (hh, mm, ss) = (t.next()??, t.next()??, t.next()??);
    if !(1..=12).contains(&m) || !(1..=31).contains(&day) {
        return None;
    }
    // Days from civil (proleptic Gregorian), March-based years.
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400 + hh * 3600 + mm * 60 + ss)
}

/// Formats nanoseconds since the Unix epoch (UTC). Sub-second precision is
/// dropped by rounding towards the past, as Go's time formatting does.
pub fn rfc3339(unix_nanos: i64) -> String {
    let secs = unix_nanos.div_euclid(NANOS_PER_SEC);
    let (year, month, day) = civil_from_days(secs.div_euclid(SECS_PER_DAY));
    let sod = secs.rem_euclid(SECS_PER_DAY);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        sod / 3600,
        sod % 3600 / 60,
        sod % 60
    )
}

/// Formats as Kubernetes `metav1.MicroTime` does: UTC with six fractional digits
/// ("2024-05-01T12:34:56.123456Z"), the format of a Lease's renewTime.
pub fn rfc3339_micro(unix_nanos: i64) -> String {
    let base = rfc3339(unix_nanos);
    let micros = unix_nanos.rem_euclid(NANOS_PER_SEC) / 1000;
    format!("{}.{micros:06}Z", &base[..base.len() - 1])
}

/// Current wall-clock time in nanoseconds since the Unix epoch, saturating
/// at the `i64` range (years 1677..2262).
pub fn unix_nanos_now() -> i64 {
    match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_nanos()).unwrap_or(i64::MAX),
        Err(e) => i64::try_from(e.duration().as_nanos()).map_or(i64::MIN, |n| -n),
    }
}

/// The current time formatted by [`rfc3339`].
pub fn now_rfc3339() -> String {
    rfc3339(unix_nanos_now())
}

/// Converts a count of days since 1970-01-01 into a proleptic Gregorian
/// (year, month, day).
///
/// The calendar is shifted to start on March 1st so that the leap day is the
/// last day of the shifted year; years are grouped into 400-year eras of
/// 146097 days, each of which repeats exactly.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    // Days from 0000-03-01 to 1970-01-01.
    const EPOCH_SHIFT: i64 = 719_468;
    const DAYS_PER_ERA: i64 = 146_097;

    let shifted = days + EPOCH_SHIFT;
    let era = shifted.div_euclid(DAYS_PER_ERA);
    let day_of_era = shifted.rem_euclid(DAYS_PER_ERA); // 0..=146096
    // Year within the era: remove the leap days accumulated so far
    // (one per 4 years, minus one per century, plus one per 400 years).
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    // Months from March: lengths 31,30,31,30,31,31,30,31,30,31,31,(28|29)
    // follow the pattern (153 * m + 2) / 5.
    let month_from_march = (5 * day_of_year + 2) / 153; // 0..=11
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1; // 1..=31
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    // Both are small and positive by construction.
    let to_u32 = |v: i64| u32::try_from(v).unwrap_or(0);
    (year, to_u32(month), to_u32(day))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn micro_time() {
        assert_eq!(
            rfc3339_micro(1_700_000_000 * NANOS_PER_SEC + 123_456_789),
            "2023-11-14T22:13:20.123456Z"
        );
        assert_eq!(rfc3339_micro(0), "1970-01-01T00:00:00.000000Z");
    }

    const S: i64 = NANOS_PER_SEC;

    #[test]
    fn epoch() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(999_999_999), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(S), "1970-01-01T00:00:01Z");
    }

    #[test]
    fn known_dates() {
        assert_eq!(rfc3339(1_714_566_896 * S), "2024-05-01T12:34:56Z");
        assert_eq!(
            rfc3339(1_714_566_896 * S + 500_000_000),
            "2024-05-01T12:34:56Z"
        );
        assert_eq!(rfc3339(946_684_799 * S), "1999-12-31T23:59:59Z");
        assert_eq!(rfc3339(946_684_800 * S), "2000-01-01T00:00:00Z");
        assert_eq!(rfc3339(78_796_799 * S), "1972-06-30T23:59:59Z");
        assert_eq!(rfc3339(4_102_444_800 * S), "2100-01-01T00:00:00Z");
    }

    #[test]
    fn leap_years() {
        // 2000 is a leap year (divisible by 400)
        assert_eq!(rfc3339(951_782_400 * S), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339((951_782_400 + 86_400) * S), "2000-03-01T00:00:00Z");
        // 2024 is a leap year
        assert_eq!(rfc3339(1_709_251_199 * S), "2024-02-29T23:59:59Z");
        assert_eq!(rfc3339(1_709_251_200 * S), "2024-03-01T00:00:00Z");
        // 2100 and 1900 are not (centuries not divisible by 400)
        assert_eq!(rfc3339((4_107_542_400 - 1) * S), "2100-02-28T23:59:59Z");
        assert_eq!(rfc3339(4_107_542_400 * S), "2100-03-01T00:00:00Z");
        assert_eq!(rfc3339((-2_203_891_200 - 1) * S), "1900-02-28T23:59:59Z");
        assert_eq!(rfc3339(-2_203_891_200 * S), "1900-03-01T00:00:00Z");
    }

    #[test]
    fn before_epoch_rounds_to_the_past() {
        assert_eq!(rfc3339(-1), "1969-12-31T23:59:59Z");
        assert_eq!(rfc3339(-S), "1969-12-31T23:59:59Z");
        assert_eq!(rfc3339(-S - 1), "1969-12-31T23:59:58Z");
        assert_eq!(rfc3339(-86_400 * S), "1969-12-31T00:00:00Z");
    }

    #[test]
    fn extremes() {
        assert_eq!(rfc3339(i64::MAX), "2262-04-11T23:47:16Z");
        assert_eq!(rfc3339(i64::MIN), "1677-09-21T00:12:43Z");
    }

    #[test]
    fn civil_far_range() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(-719_162), (1, 1, 1));
        assert_eq!(civil_from_days(-719_468), (0, 3, 1));
        assert_eq!(civil_from_days(2_932_896), (9999, 12, 31));
        // walking a whole 400-year era day by day visits every calendar day once
        let leap = |y: i64| (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
        let month_len = |y: i64, m: u32| match m {
            2 if leap(y) => 29,
            2 => 28,
            4 | 6 | 9 | 11 => 30,
            _ => 31,
        };
        let mut prev = civil_from_days(-1);
        assert_eq!(prev, (1969, 12, 31));
        for d in 0..146_097 {
            let cur = civil_from_days(d);
            let expected = if prev.2 < month_len(prev.0, prev.1) {
                (prev.0, prev.1, prev.2 + 1)
            } else if prev.1 < 12 {
                (prev.0, prev.1 + 1, 1)
            } else {
                (prev.0 + 1, 1, 1)
            };
            assert_eq!(cur, expected, "day {d}");
            prev = cur;
        }
        assert_eq!(prev, (2369, 12, 31));
    }

    #[test]
    fn now_is_plausible() {
        let now = now_rfc3339();
        assert_eq!(now.len(), 20, "{now}");
        assert!(now.ends_with('Z'));
        assert!(now.as_str() > "2024-01-01T00:00:00Z", "{now}");
        assert!(unix_nanos_now() > 1_700_000_000 * S);
    }
}
