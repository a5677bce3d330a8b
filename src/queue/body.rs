//! How register and rank describe a user: one shape for a waiting user, one
//! for an admitted one.

use serde::Serialize;

use crate::queues::Queue;
use crate::reply::Reply;
use crate::store::Place;

/// A waiting user, as register and rank describe it.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct WaitingBody<'a> {
    user_id: &'a str,
    queue: &'a str,
    status: &'static str,
    rank: u64,
    estimated_waiting_count: u64,
    /// No estimate while admission is paused.
    #[serde(skip_serializing_if = "Option::is_none")]
    estimated_wait_seconds: Option<u64>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    paused: bool,
    /// When to poll again: see [`poll_after_ms`].
    poll_after_ms: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    queue_credential: Option<&'a str>,
}

/// A pre-queued user, before a scheduled open: no place yet.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct PrequeueBody<'a> {
    user_id: &'a str,
    queue: &'a str,
    status: &'static str,
    opens_in_seconds: u64,
    poll_after_ms: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    queue_credential: Option<&'a str>,
}

/// An admitted user.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ActiveBody<'a> {
    user_id: &'a str,
    queue: &'a str,
    status: &'static str,
}

/// The advised wait before the next poll, for a user expected to wait
/// `wait_ms` (unknown while admission is paused): a quarter of it, between
/// 1 s and 15 s, so that a user near the head hears at once and one far
/// back does not poll for nothing; and never more than a third of the
/// heartbeat timeout, so that a client that follows the advice is never
/// taken for gone, even with a poll lost.
pub fn poll_after_ms(queue: &Queue, wait_ms: Option<u64>) -> u64 {
    let ceiling = (queue.heartbeat.timeout.as_millis() as u64 / 3).max(100);
    let ideal = wait_ms.map_or(MAX_POLL_MS, |w| (w / 4).clamp(MIN_POLL_MS, MAX_POLL_MS));
    ideal.min(ceiling)
}

/// The bounds of the advised poll interval.
pub const MIN_POLL_MS: u64 = 1_000;
pub const MAX_POLL_MS: u64 = 15_000;

/// `estimatedWaitSeconds` is the gate's estimate (see `lua/lib.lua`),
/// rounded to the nearest second.
pub fn waiting(queue: &Queue, user: &str, place: Place, credential: Option<&str>) -> Reply {
    Reply::json(
        200,
        &WaitingBody {
            user_id: user,
            queue: &queue.name,
            status: "WAITING",
            rank: place.rank,
            estimated_waiting_count: place.rank + 1,
            estimated_wait_seconds: place.wait_ms.map(|ms| ms.saturating_add(500) / 1000),
            paused: place.wait_ms.is_none(),
            poll_after_ms: poll_after_ms(queue, place.wait_ms),
            queue_credential: credential,
        },
    )
}

/// `opensInSeconds` rounds up: 0 only once the open has come.
pub fn prequeued(queue: &Queue, user: &str, opens_in_ms: u64, credential: Option<&str>) -> Reply {
    Reply::json(
        200,
        &PrequeueBody {
            user_id: user,
            queue: &queue.name,
            status: "PREQUEUE",
            opens_in_seconds: opens_in_ms.div_ceil(1000),
            poll_after_ms: poll_after_ms(queue, Some(opens_in_ms)),
            queue_credential: credential,
        },
    )
}

pub fn active(queue: &Queue, user: &str) -> Reply {
    Reply::json(
        200,
        &ActiveBody {
            user_id: user,
            queue: &queue.name,
            status: "ACTIVE",
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_advised_poll_is_short_near_the_head_and_within_the_heartbeat() {
        let queue = super::super::tests::queue();
        assert_eq!(queue.heartbeat.timeout.as_millis(), 30_000);
        assert_eq!(poll_after_ms(&queue, Some(0)), 1_000);
        assert_eq!(poll_after_ms(&queue, Some(20_000)), 5_000);
        assert_eq!(
            poll_after_ms(&queue, Some(600_000)),
            10_000,
            "a third of 30 s"
        );
        assert_eq!(poll_after_ms(&queue, None), 10_000);
        let mut short = super::super::tests::queue();
        short.heartbeat.timeout = std::time::Duration::from_millis(600);
        assert_eq!(poll_after_ms(&short, Some(0)), 200);
    }
}
