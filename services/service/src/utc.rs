//! UTC timestamps as people and logs write them, RFC 3339 (`2026-12-06T05:00:00.123Z`),
//! to and from milliseconds since the epoch, without a date-time crate: the operator's CLI
//! reads and prints them, the benchmarks read the broker's GC log with them.

/// Milliseconds since the epoch of `YYYY-MM-DDTHH:MM:SS[.fff]Z`.
pub fn rfc3339_ms(t: &str) -> Option<i64> {
    let t = t.strip_suffix('Z').or_else(|| t.strip_suffix('z'))?;
    let (date, clock) = t.split_once(['T', 't', ' '])?;
    let mut d = date.splitn(3, '-').map(str::parse::<i64>);
    let (y, mo, day) = (d.next()?.ok()?, d.next()?.ok()?, d.next()?.ok()?);
    let (hms, frac) = clock.split_once('.').unwrap_or((clock, "0"));
    let mut c = hms.splitn(3, ':').map(str::parse::<i64>);
    let (h, mi, s) = (c.next()?.ok()?, c.next()?.ok()?, c.next()?.ok()?);
    let valid = (1..=12).contains(&mo) && (1..=31).contains(&day) && h < 24 && mi < 60 && s < 61;
    let ms: i64 = format!("{frac:0<3}")[..3].parse().ok()?;
    valid.then(|| ((days(y, mo, day) * 24 + h) * 60 + mi) * 60_000 + s * 1_000 + ms)
}

/// Days from 1970-01-01 to a civil date (proleptic Gregorian).
fn days(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Milliseconds since the epoch as `YYYY-MM-DDTHH:MM:SS.fffZ`.
pub fn format(ms: i64) -> String {
    let (day, in_day) = (ms.div_euclid(86_400_000), ms.rem_euclid(86_400_000));
    let z = day + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    let (h, mi, s, f) = (in_day / 3_600_000, in_day / 60_000 % 60, in_day / 1_000 % 60, in_day % 1_000);
    format!("{y:04}-{m:02}-{d:02}T{h:02}:{mi:02}:{s:02}.{f:03}Z")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_what_it_reads() {
        for ms in [0, 951_782_400_000, 1_709_251_199_500, 1_796_533_200_123, 4_102_444_800_000] {
            assert_eq!(rfc3339_ms(&format(ms)), Some(ms), "{}", format(ms));
        }
        assert_eq!(format(1_796_533_200_000), "2026-12-06T05:00:00.000Z");
        assert_eq!(rfc3339_ms("2024-02-29T23:59:59.5Z"), Some(1_709_251_199_500));
        for bad in ["2026-13-01T00:00:00Z", "2026-12-06T05:00:00", "2026-12-06"] {
            assert_eq!(rfc3339_ms(bad), None, "{bad}");
        }
    }
}
