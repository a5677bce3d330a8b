//! The operators' calls: changes to a queue (pause, close, live settings,
//! an event), revocations, and the state the admin API reports.

use std::time::Duration;

use super::connection::{Resend, Store};
use super::error::{count, StoreError};
use super::incidents::Incident;
use super::keys::QueueKeys;
use super::scripts::*;
use crate::fairness::draw::Seed;

/// An operator's change to a queue (see `lua/control.lua`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    Pause,
    Resume,
    /// Nobody joins or is admitted until a reopen; the waiting keep their
    /// places, and are told `message` (at most
    /// [`MAX_CLOSED_MESSAGE_BYTES`]).
    Close {
        message: String,
    },
    /// Ends a closure; silence counts against the waiting users' heartbeats
    /// again `grace_ms` after it.
    Reopen {
        grace_ms: u64,
    },
    /// Live admission parameters; `None` leaves one as it is,
    /// `Some(Setting::Configured)` goes back to the configured value.
    Admission {
        batch_size: Option<Setting>,
        interval_ms: Option<Setting>,
        max_active: Option<Setting>,
        /// What `Setting::Configured` means for the interval.
        configured_interval_ms: u64,
    },
    /// A scheduled open (times in ms since the epoch).
    Event {
        prequeue_from_ms: Option<u64>,
        open_at_ms: u64,
        shuffle: bool,
    },
    /// A pending event opens now; a past one is forgotten.
    EndEvent,
}

/// The longest message a closure may carry (`lua/control.lua` refuses a
/// longer one too).
pub const MAX_CLOSED_MESSAGE_BYTES: usize = 500;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Setting {
    Value(u64),
    Configured,
}

/// Why Redis refused a change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// A pre-queue is being placed right now.
    Placing,
    /// `openAt` is not in the future by Redis's clock.
    OpenAtPast,
    /// `prequeueFrom` is after `openAt`.
    PrequeueAfterOpen,
}

/// A queue's event phase, as `event_phase` in `lua/lib.lua` decides it
/// (the one place that rule lives; `lua/status.lua` reports it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// No event, or its pre-queue placed.
    Open,
    /// Before `prequeue_from`.
    Scheduled,
    /// Registrations are pre-queued until `open_at`.
    Prequeue,
    /// `open_at` has passed; the pre-queue is being placed.
    Placing,
}

impl Phase {
    fn from_lua(name: &str) -> Option<Phase> {
        Some(match name {
            "open" => Phase::Open,
            "scheduled" => Phase::Scheduled,
            "prequeue" => Phase::Prequeue,
            "placing" => Phase::Placing,
            _ => return None,
        })
    }

    /// Its name, as the admin API and `waitgate_event_phase` give it.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Open => "open",
            Phase::Scheduled => "scheduled",
            Phase::Prequeue => "prequeue",
            Phase::Placing => "placing",
        }
    }
}

/// A queue's state as the admin API reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct Status {
    /// The control hash as stored (see `lua/lib.lua`).
    pub control: std::collections::HashMap<String, String>,
    pub waiting: u64,
    /// Active entries, expired ones not yet cleaned up included.
    pub active: u64,
    pub prequeued: u64,
    pub rate_per_window: Option<f64>,
    pub admitted_total: u64,
    /// Redis time of the read (ms).
    pub now_ms: u64,
    /// The last Redis incident recorded for the queue.
    pub incident: Option<Incident>,
    /// The event's phase at `now_ms`.
    pub phase: Phase,
}

impl Status {
    /// A numeric field of the control hash.
    pub fn number(&self, field: &str) -> Option<u64> {
        self.control.get(field).and_then(|v| v.parse().ok())
    }

    pub fn paused(&self) -> bool {
        self.control.get("paused").is_some_and(|v| v == "1")
    }

    /// The operator's message while the queue is closed; `None` while open.
    pub fn closed(&self) -> Option<&str> {
        if self.control.get("closed").is_none_or(|v| v != "1") {
            return None;
        }
        Some(
            self.control
                .get("closed_message")
                .map_or("", String::as_str),
        )
    }

    pub fn phase(&self) -> &'static str {
        self.phase.name()
    }
}

impl Store {
    /// Applies an operator's change; `Ok(Err(_))` when Redis refused it.
    pub async fn control(
        &self,
        keys: &QueueKeys,
        change: &Change,
    ) -> Result<Result<(), Refused>, StoreError> {
        let mut invocation = CONTROL.invoke(keys);
        let setting = |s: &Option<Setting>| match s {
            None => String::new(),
            Some(Setting::Configured) => "-".to_string(),
            Some(Setting::Value(v)) => v.to_string(),
        };
        match change {
            Change::Pause => invocation.arg("pause"),
            Change::Resume => invocation.arg("resume"),
            Change::Close { message } => invocation.arg("close").arg(message),
            Change::Reopen { grace_ms } => invocation.arg("reopen").arg(grace_ms),
            Change::Admission {
                batch_size,
                interval_ms,
                max_active,
                configured_interval_ms,
            } => invocation
                .arg("admission")
                .arg(setting(batch_size))
                .arg(setting(interval_ms))
                .arg(setting(max_active))
                .arg(configured_interval_ms),
            Change::Event {
                prequeue_from_ms,
                open_at_ms,
                shuffle,
            } => {
                // Each schedule of a shuffled pre-queue draws its seed now,
                // and publishes only its commitment until the open.
                let seed = shuffle.then(Seed::draw);
                invocation
                    .arg("event")
                    .arg(prequeue_from_ms.map(|t| t.to_string()).unwrap_or_default())
                    .arg(open_at_ms)
                    .arg(if *shuffle { "1" } else { "0" })
                    .arg(seed.as_ref().map(Seed::hex).unwrap_or_default())
                    .arg(seed.as_ref().map(Seed::commitment).unwrap_or_default())
            }
            Change::EndEvent => invocation.arg("end-event"),
        };
        let (code, _now): (i64, i64) = self.run_write(invocation, &keys.control).await?;
        Ok(match ControlCode::of(code)? {
            ControlCode::Done => Ok(()),
            ControlCode::Placing => Err(Refused::Placing),
            ControlCode::OpenAtPast => Err(Refused::OpenAtPast),
            ControlCode::PrequeueAfterOpen => Err(Refused::PrequeueAfterOpen),
        })
    }
    /// Ends `user`'s active state and refuses its tokens issued until now
    /// on every instance, remembered for `keep` (the longest a token
    /// lives). Returns whether the user was active, and the revocation's
    /// time (Redis clock, ms).
    pub async fn revoke(
        &self,
        keys: &QueueKeys,
        queue: &str,
        user: &str,
        keep: Duration,
    ) -> Result<(bool, u64), StoreError> {
        let mut invocation = REVOKE.invoke(keys);
        invocation
            .arg(user)
            .arg(keep.as_millis() as u64)
            .arg(REVOKED_CHANNEL)
            .arg(queue);
        let (active, at): (i64, i64) = self.run_write(invocation, &keys.revoked).await?;
        Ok((active == 1, count(at)?))
    }
    /// Revocations made at or after `since_ms` (Redis clock): user and time.
    pub async fn revoked_since(
        &self,
        keys: &QueueKeys,
        since_ms: u64,
    ) -> Result<Vec<(String, u64)>, StoreError> {
        let mut cmd = redis::cmd("ZRANGE");
        cmd.arg(&keys.revoked)
            .arg(since_ms)
            .arg("+inf")
            .arg("BYSCORE")
            .arg("WITHSCORES");
        let cmd = &cmd;
        let result = self
            .call(Resend::Safe, |mut connection| async move {
                cmd.query_async::<Vec<(String, f64)>>(&mut connection).await
            })
            .await;
        Ok(result?
            .into_iter()
            .map(|(user, at)| (user, at as u64))
            .collect())
    }
    /// A queue's state for the admin API, read in one round-trip.
    pub async fn status(&self, keys: &QueueKeys) -> Result<Status, StoreError> {
        let invocation = STATUS.invoke(keys);
        type Raw = (
            std::collections::HashMap<String, String>,
            u64,
            u64,
            u64,
            Option<f64>,
            Option<u64>,
            u64,
            (Option<String>, Option<u64>, Option<u64>),
            String,
        );
        let (control, waiting, active, prequeued, rate, total, now_ms, incident, phase): Raw =
            self.run(invocation, Resend::Safe).await?;
        let incident = match incident {
            (Some(kind), at, length) => Some(Incident {
                kind,
                at_ms: at.unwrap_or(0),
                length_ms: length.unwrap_or(0),
            }),
            _ => None,
        };
        Ok(Status {
            incident,
            control,
            waiting,
            active,
            prequeued,
            rate_per_window: rate,
            admitted_total: total.unwrap_or(0),
            now_ms,
            phase: Phase::from_lua(&phase).ok_or_else(|| {
                StoreError::Failed(format!("status script returned phase {phase:?}"))
            })?,
        })
    }
}
