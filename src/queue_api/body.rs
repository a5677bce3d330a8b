//! How register and rank describe a user: one shape for a waiting user, one
//! for a pre-queued one, one for an admitted one, and rank's for a closed
//! queue.

use serde::Serialize;

use crate::queues::Queue;
use crate::reply::Reply;
use crate::store::{Closed, Place};

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
    /// When to poll again (the heartbeat promises the user is kept that
    /// long plus the heartbeat timeout).
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

/// A user polling a closed queue: the operator's message; a place the user
/// has is kept.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ClosedBody<'a> {
    user_id: &'a str,
    queue: &'a str,
    status: &'static str,
    message: &'a str,
}

/// An admitted user.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ActiveBody<'a> {
    user_id: &'a str,
    queue: &'a str,
    status: &'static str,
}

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
            poll_after_ms: place.poll_after_ms,
            queue_credential: credential,
        },
    )
}

/// `opensInSeconds` rounds up: 0 only once the open has come.
pub fn prequeued(
    queue: &Queue,
    user: &str,
    opens_in_ms: u64,
    poll_after_ms: u64,
    credential: Option<&str>,
) -> Reply {
    Reply::json(
        200,
        &PrequeueBody {
            user_id: user,
            queue: &queue.name,
            status: "PREQUEUE",
            opens_in_seconds: opens_in_ms.div_ceil(1000),
            poll_after_ms,
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

/// `message` is the operator's, from the close.
pub fn closed(queue: &Queue, user: &str, closed: &Closed) -> Reply {
    Reply::json(
        200,
        &ClosedBody {
            user_id: user,
            queue: &queue.name,
            status: "CLOSED",
            message: &closed.message,
        },
    )
}
