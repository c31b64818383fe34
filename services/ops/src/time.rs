//! The times an operator types and reads: RFC 3339 in UTC (`2026-12-06T05:00:00Z`), a
//! span back from now (`90s`, `15m`, `2h`, `7d`), or milliseconds since the epoch.

pub use sluice_service::utc::format;

/// Why a time could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{text:?} is not a time: write 2026-12-06T05:00:00Z (UTC), a span back from now (90s, 15m, 2h, 7d) or epoch milliseconds"
)]
pub struct BadTime {
    pub text: String,
}

/// `text` as milliseconds since the epoch, a span counted back from `now_ms`.
pub fn parse(text: &str, now_ms: i64) -> Result<i64, BadTime> {
    let bad = || BadTime { text: text.to_string() };
    let t = text.trim();
    if let Ok(ms) = t.parse::<i64>() {
        return Ok(ms);
    }
    if let Some(unit) = t.chars().last().filter(|c| "smhd".contains(*c)) {
        let n: i64 = t[..t.len() - 1].parse().map_err(|_| bad())?;
        let scale = match unit {
            's' => 1_000,
            'm' => 60_000,
            'h' => 3_600_000,
            _ => 86_400_000,
        };
        return Ok(now_ms - n * scale);
    }
    sluice_service::utc::rfc3339_ms(t).ok_or_else(bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_utc_spans_and_epoch_milliseconds() {
        assert_eq!(parse("1970-01-01T00:00:00Z", 0), Ok(0));
        assert_eq!(parse("2026-12-06T05:00:00Z", 0), Ok(1_796_533_200_000));
        assert_eq!(parse("2024-02-29T23:59:59.5Z", 0), Ok(1_709_251_199_500));
        assert_eq!(parse("15m", 1_000_000), Ok(100_000));
        assert_eq!(parse("2d", 200_000_000), Ok(200_000_000 - 172_800_000));
        assert_eq!(parse("1733461200000", 0), Ok(1_733_461_200_000));
        for bad in ["yesterday", "2026-13-01T00:00:00Z", "2026-12-06T05:00:00", "5x", "m"] {
            assert!(parse(bad, 0).is_err(), "{bad}");
        }
    }
}
