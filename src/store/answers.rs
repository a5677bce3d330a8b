//! What the calls of the queue API answer: a waiting user's place, and where
//! a registration or a poll left the user.

use std::sync::Arc;

use super::error::{count, StoreError};

/// A waiting user's place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Place {
    /// Users ahead (0-based).
    pub rank: u64,
    /// Expected wait, from the gate's observed rate (see `lua/lib.lua`);
    /// `None` while admission is paused.
    pub wait_ms: Option<u64>,
    /// When to poll again: the heartbeat promises the user is not removed
    /// before this plus the heartbeat timeout (see `lua/lib.lua`).
    pub poll_after_ms: u64,
}

/// The outcome of `register`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Registration {
    /// Added at the tail at `arrival` (its score in the waiting set), which
    /// the queueCredential signs, with its `number` if Redis numbered it
    /// (see `marks` in `lua/lib.lua`).
    New {
        place: Place,
        arrival: u64,
        number: Option<u64>,
    },
    /// Was already waiting, since `arrival` (numbered `number`, if it was);
    /// place and credential unchanged.
    AlreadyWaiting {
        place: Place,
        arrival: u64,
        number: Option<u64>,
    },
    /// Is active until this time (Redis clock, ms since the epoch), admitted
    /// from the registration at `arrival` (0 if unknown).
    Active { expires_at_ms: u64, arrival: u64 },
    /// Is in the pre-queue of a scheduled open, which opens in
    /// `opens_in_ms` (0: being placed now), since `arrival` (0 if unknown);
    /// `new` when this call pre-queued the user (for its credential).
    /// `committed_at_ms` names the draw the user joined (0: none).
    Prequeued {
        opens_in_ms: u64,
        arrival: u64,
        new: bool,
        committed_at_ms: u64,
        poll_after_ms: u64,
    },
    /// Registration opens at this time (Redis clock, ms).
    NotOpen { opens_at_ms: u64 },
    /// The queue is closed: nobody joins (a place already had is kept).
    Closed(Closed),
    /// The proof of work was spent already (or its challenge expired by
    /// Redis's clock), and the user has no place: nothing was done.
    ProofSpent,
    /// The same for the user's invite.
    InviteSpent,
}

/// The outcome of `rank`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Position {
    Waiting(Place),
    Active {
        expires_at_ms: u64,
    },
    Prequeued {
        opens_in_ms: u64,
        poll_after_ms: u64,
    },
    NotQueued,
    /// The queue is closed; a place the user has is kept as it is.
    Closed(Closed),
}

/// A closed queue, as an answer tells it: the operator's message, shared
/// by every answer of a batch.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Closed {
    pub message: Arc<str>,
}

/// A place as a script answers it: rank, expected wait (-1 while paused)
/// and poll advice.
pub(super) fn place(rank: i64, wait_ms: i64, poll_after_ms: i64) -> Result<Place, StoreError> {
    Ok(Place {
        rank: count(rank)?,
        // -1: paused, no estimate.
        wait_ms: (wait_ms >= 0).then_some(wait_ms as u64),
        poll_after_ms: count(poll_after_ms)?,
    })
}
