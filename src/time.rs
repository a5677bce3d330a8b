//! Times as the admin API and the queue API write them: RFC 3339, UTC, to
//! the millisecond. Imports nothing of ours.

use chrono::{DateTime, SecondsFormat, Utc};

/// This machine's clock, in ms since the epoch (0 before 1970).
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// `ms` since the epoch as RFC 3339 (`2026-12-01T10:00:00.000Z`).
pub fn rfc3339(ms: u64) -> String {
    DateTime::<Utc>::from_timestamp_millis(ms as i64)
        .unwrap_or_default()
        .to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// A time as a person reads it in UTC, to the minute: `2026-12-01 10:00
/// UTC` (the waiting-room page, where RFC 3339's `T` and milliseconds are
/// noise).
pub fn readable_utc(ms: u64) -> String {
    DateTime::<Utc>::from_timestamp_millis(ms as i64)
        .unwrap_or_default()
        .format("%Y-%m-%d %H:%M UTC")
        .to_string()
}

/// An RFC 3339 time (any offset) as ms since the epoch; `None` for text
/// that is not one, or a time before 1970.
pub fn parse_rfc3339(text: &str) -> Option<u64> {
    let time = DateTime::parse_from_rfc3339(text).ok()?;
    u64::try_from(time.timestamp_millis()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_to_the_millisecond() {
        let ms = 1_796_119_200_123;
        assert_eq!(rfc3339(ms), "2026-12-01T10:00:00.123Z");
        assert_eq!(parse_rfc3339(&rfc3339(ms)), Some(ms));
        assert_eq!(
            parse_rfc3339("2026-12-01T19:00:00+09:00"),
            Some(1_796_119_200_000)
        );
        for bad in ["", "tomorrow", "2026-12-01", "1969-12-31T23:59:59Z"] {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
        }
    }
}
