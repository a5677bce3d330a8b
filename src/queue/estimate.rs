//! How long a waiting user should expect to wait.

use crate::config::AdmissionConfig;

/// Expected seconds until admission at the configured rate.
///
/// A user with `rank` users ahead is admitted in the `rank / batch + 1`-th
/// admission from now. The next admission is on average half an interval
/// away, each later one a full interval, so the expectation is
/// `(rank / batch + 0.5) * interval`, rounded to the nearest second.
pub fn wait_seconds(rank: u64, admission: &AdmissionConfig) -> u64 {
    let batches_ahead = rank / u64::from(admission.batch_size.max(1));
    let interval_ms = admission.interval.as_millis() as u64;
    let ms = batches_ahead
        .saturating_mul(interval_ms)
        .saturating_add(interval_ms / 2);
    ms.saturating_add(500) / 1000
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn seed() -> AdmissionConfig {
        AdmissionConfig {
            interval: Duration::from_secs(3),
            batch_size: 100,
            active_ttl: Duration::from_secs(600),
            max_active: 0,
        }
    }

    #[test]
    fn estimate_grows_one_interval_per_batch() {
        let a = seed();
        assert_eq!(wait_seconds(0, &a), 2); // 1.5 s rounds up
        assert_eq!(wait_seconds(99, &a), 2);
        assert_eq!(wait_seconds(100, &a), 5); // 4.5 s
        assert_eq!(wait_seconds(1_000, &a), 32); // 31.5 s
        assert_eq!(wait_seconds(u64::MAX, &a), u64::MAX / 1000);
    }
}
