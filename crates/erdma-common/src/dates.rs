//! UTC dates as image configs, package metadata, signatures, log lines and backup names carry
//! them, without a date crate.
use std::time::{SystemTime, UNIX_EPOCH};

/// Seconds since the Unix epoch, now.
pub fn now() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's `days_from_civil`).
pub fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (H. Hinnant's
/// `civil_from_days`).
pub fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// `(year, month, day, hour, minute, second)` in UTC of Unix seconds.
pub fn civil(secs: i64) -> (i64, u32, u32, u32, u32, u32) {
    let (y, mo, d) = civil_from_days(secs.div_euclid(86_400));
    let s = secs.rem_euclid(86_400) as u32;
    (y, mo, d, s / 3600, s / 60 % 60, s % 60)
}

/// RFC 3339 in UTC, as image configs and the OCI runtime's log carry it:
/// `2026-11-26T01:24:23Z`.
pub fn rfc3339(secs: i64) -> String {
    let (y, mo, d, hh, mm, ss) = civil(secs);
    format!("{y:04}-{mo:02}-{d:02}T{hh:02}:{mm:02}:{ss:02}Z")
}

/// `2026-11-26 01:24:23 UTC`.
pub fn format_utc(secs: i64) -> String {
    let (y, mo, d, hh, mm, ss) = civil(secs);
    format!("{y:04}-{mo:02}-{d:02} {hh:02}:{mm:02}:{ss:02} UTC")
}

/// Parses `[Day,] DD Mon YYYY HH:MM[:SS] [zone]`, zone `UTC`, `GMT`, `UT`, `Z` or `±hhmm`
/// (apt's `RFC1123StrToTime` accepts the same forms). Seconds since the epoch.
pub fn parse_rfc2822(s: &str) -> Option<i64> {
    let mut tokens: Vec<&str> = s.split_whitespace().collect();
    if tokens.first()?.ends_with(',') || tokens.first()?.chars().all(|c| c.is_ascii_alphabetic()) {
        tokens.remove(0);
    }
    let (day, month, year, time) = match tokens[..] {
        [d, m, y, t] | [d, m, y, t, _] => (d, m, y, t),
        _ => return None,
    };
    let zone = tokens.get(4).copied().unwrap_or("UTC");
    let day: u32 = day.parse().ok().filter(|d| (1..=31).contains(d))?;
    const MONTHS: [&str; 12] =
        ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"];
    let month = MONTHS.iter().position(|m| m.eq_ignore_ascii_case(month))? as u32 + 1;
    let year: i64 = year.parse().ok().filter(|y| (1970..=9999).contains(y))?;
    let mut hms = time.split(':').map(|p| p.parse::<i64>().ok());
    let h = hms.next()??;
    let mi = hms.next()??;
    let sec = hms.next().unwrap_or(Some(0))?;
    if hms.next().is_some()
        || !(0..24).contains(&h)
        || !(0..60).contains(&mi)
        || !(0..=60).contains(&sec)
    {
        return None;
    }
    let offset = match zone {
        z if ["UTC", "GMT", "UT", "Z"].iter().any(|u| u.eq_ignore_ascii_case(z)) => 0,
        z if z.len() == 5 && (z.starts_with('+') || z.starts_with('-')) => {
            let hh: i64 = z[1..3].parse().ok()?;
            let mm: i64 = z[3..5].parse().ok()?;
            let off = hh * 3600 + mm * 60;
            if z.starts_with('-') {
                -off
            } else {
                off
            }
        }
        _ => return None,
    };
    Some(days_from_civil(year, month, day) * 86_400 + h * 3600 + mi * 60 + sec - offset)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_dates() {
        assert_eq!(civil(0), (1970, 1, 1, 0, 0, 0));
        // `date -u -d @1764120263`: Wed Nov 26 01:24:23 UTC 2025.
        assert_eq!(format_utc(1_764_120_263), "2025-11-26 01:24:23 UTC");
        // The leap day of a century year divisible by 400, and one before the epoch.
        assert_eq!(civil_from_days(days_from_civil(2000, 2, 29)), (2000, 2, 29));
        assert_eq!(civil(-1), (1969, 12, 31, 23, 59, 59));
    }

    #[test]
    fn days_and_dates_round_trip() {
        for z in (-800_000..800_000).step_by(997) {
            let (y, m, d) = civil_from_days(z);
            assert_eq!(days_from_civil(y, m, d), z, "{y}-{m}-{d}");
        }
    }

    #[test]
    fn parses_rfc2822_dates() {
        // As apt writes them: `Sat, 11 Jul 2026 10:16:37 UTC`.
        let rfc2822 = |t: i64| {
            let (y, mo, d, h, mi, s) = civil(t);
            const M: [&str; 12] = [
                "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
            ];
            format!("{d:02} {} {y} {h:02}:{mi:02}:{s:02} UTC", M[mo as usize - 1])
        };
        assert_eq!(parse_rfc2822("Sat, 11 Jul 2026 10:16:37 UTC"), Some(1_783_764_997));
        assert_eq!(parse_rfc2822("Thu, 29 Feb 2024 23:59:59 +0200"), Some(1_709_243_999));
        assert_eq!(parse_rfc2822("1 Mar 2000 00:00 GMT"), Some(951_868_800));
        assert_eq!(parse_rfc2822("Thu, 01 Jan 1970 00:00:00 Z"), Some(0));
        assert_eq!(parse_rfc2822("2026-07-11 10:16:37"), None);
        assert_eq!(parse_rfc2822("Sat, 11 Foo 2026 10:16:37 UTC"), None);
        assert_eq!(parse_rfc2822("Sat, 11 Jul 2026 10:16:37 CEST"), None);
        assert_eq!(format_utc(1_783_764_997), "2026-07-11 10:16:37 UTC");
        for t in [0, 951_868_800, 1_709_243_999, 1_783_764_997] {
            assert_eq!(parse_rfc2822(&rfc2822(t)), Some(t), "{}", rfc2822(t));
        }
    }
}
