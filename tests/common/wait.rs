//! Waiting for a condition instead of sleeping for a guess: every poll loop
//! of the tests is one of these.
//!
//! Each looks at least once, then again every 5 to 20 ms (a 200th of the
//! timeout), and once more at the deadline.

#![allow(dead_code)]

use std::time::{Duration, Instant};

/// How often a wait of `timeout` looks.
fn interval(timeout: Duration) -> Duration {
    (timeout / 200).clamp(Duration::from_millis(5), Duration::from_millis(20))
}

/// The first `Some` that `found` returns within `timeout`; `None` if it
/// returned none by then.
pub fn poll_for<T>(timeout: Duration, mut found: impl FnMut() -> Option<T>) -> Option<T> {
    let started = Instant::now();
    let every = interval(timeout);
    loop {
        if let Some(value) = found() {
            return Some(value);
        }
        let elapsed = started.elapsed();
        if elapsed >= timeout {
            return None;
        }
        std::thread::sleep(every.min(timeout - elapsed));
    }
}

/// Whether `ready` comes to hold within `timeout`: for a caller that fails
/// with a message of its own (or for whom "not yet" is an answer).
pub fn eventually(timeout: Duration, mut ready: impl FnMut() -> bool) -> bool {
    poll_for(timeout, || ready().then_some(())).is_some()
}

/// Waits until `ready` holds, failing with `what` after `timeout`.
pub fn wait_until(what: &str, timeout: Duration, ready: impl FnMut() -> bool) {
    assert!(
        eventually(timeout, ready),
        "{what} not ready within {timeout:?}"
    );
}

/// Waits until `found` returns a value, and returns it; fails with `what`
/// after `timeout`.
pub fn wait_for<T>(what: &str, timeout: Duration, found: impl FnMut() -> Option<T>) -> T {
    poll_for(timeout, found).unwrap_or_else(|| panic!("{what} not ready within {timeout:?}"))
}

/// Runs `each` again and again until `how_long` has passed (load, or an
/// answer that must hold all that time); returns how many times it ran.
pub fn repeat_for(how_long: Duration, mut each: impl FnMut()) -> u64 {
    let started = Instant::now();
    let mut times = 0;
    while started.elapsed() < how_long {
        each();
        times += 1;
    }
    times
}
