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
    #[serde(flatten)]
    signed: Signed<'a>,
}

/// What register signs for a user: the queueCredential (to a new
/// registration, or made again for a user the login proves) and the
/// receipt of the arrival (src/fairness/receipt.rs). Rank's answers carry
/// neither.
#[derive(Serialize, Default, Clone, Copy)]
#[serde(rename_all = "camelCase")]
pub struct Signed<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue_credential: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub receipt: Option<&'a str>,
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
    #[serde(flatten)]
    signed: Signed<'a>,
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
#[derive(Serialize, Default)]
#[serde(rename_all = "camelCase")]
struct ActiveBody<'a> {
    user_id: &'a str,
    queue: &'a str,
    status: &'static str,
    /// When the admission ends (register's answer only).
    #[serde(skip_serializing_if = "Option::is_none")]
    active_until: Option<String>,
    /// With the credential made again, for a user the login proves
    /// (identity binding).
    #[serde(flatten)]
    signed: Signed<'a>,
    /// For a client without the credential: the way back.
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<&'static str>,
}

/// What register tells an admitted user it cannot give a credential to
/// (anyone may send a `userId`: only the credential given at the join, or
/// a login with identity binding, proves it is theirs).
pub const LOST_CREDENTIAL: &str = "This user is already admitted. Its token is \
    exchanged with the queueCredential given when it joined (POST /api/v1/queue/active/token). \
    Without that credential, the user can join again when the admission ends \
    (activeUntil), or sooner if the site releases the user.";

/// `estimatedWaitSeconds` is the gate's estimate (see `lua/lib.lua`),
/// rounded to the nearest second.
pub fn waiting(queue: &Queue, user: &str, place: Place, signed: Signed<'_>) -> Reply {
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
            signed,
        },
    )
}

/// `opensInSeconds` rounds up: 0 only once the open has come.
pub fn prequeued(
    queue: &Queue,
    user: &str,
    opens_in_ms: u64,
    poll_after_ms: u64,
    signed: Signed<'_>,
) -> Reply {
    Reply::json(
        200,
        &PrequeueBody {
            user_id: user,
            queue: &queue.name,
            status: "PREQUEUE",
            opens_in_seconds: opens_in_ms.div_ceil(1000),
            poll_after_ms,
            signed,
        },
    )
}

/// Rank's answer to an admitted user.
pub fn active(queue: &Queue, user: &str) -> Reply {
    Reply::json(
        200,
        &ActiveBody {
            user_id: user,
            queue: &queue.name,
            status: "ACTIVE",
            ..ActiveBody::default()
        },
    )
}

/// Register's answer to an admitted user: until when, and either the
/// credential made again (`credential`, for a user a login proves) or how
/// to get back without it.
pub fn registered_active(
    queue: &Queue,
    user: &str,
    expires_at_ms: u64,
    signed: Signed<'_>,
) -> Reply {
    let body = ActiveBody {
        user_id: user,
        queue: &queue.name,
        status: "ACTIVE",
        active_until: (expires_at_ms > 0).then(|| crate::time::rfc3339(expires_at_ms)),
        signed,
        message: signed.queue_credential.is_none().then_some(LOST_CREDENTIAL),
    };
    Reply::json(200, &body)
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
