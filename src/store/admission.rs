//! Admission and cleanup: the global gate's call, and the pass that
//! removes silent users, expired active entries and stray heartbeats.

use std::time::Duration;

use redis::ScriptInvocation;

use super::connection::{Resend, Store};
use super::error::{count, StoreError};
use super::heartbeat;
use super::keys::QueueKeys;
use super::scripts::*;
use crate::config::HeartbeatConfig;

/// The outcome of one admission call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admission {
    pub admitted: u64,
    /// The window the call fell in: floor(Redis time / interval).
    pub window: u64,
    pub outcome: AdmitOutcome,
    /// Redis time of the call (ms), and when a call may decide again: the
    /// caller sleeps by Redis's clock.
    pub now_ms: u64,
    pub next_ms: u64,
    /// The gate's record after a decision: what the deciding instance
    /// remembers in case Redis loses it (see `durability`).
    pub record: Option<GateRecord>,
    /// Each user admitted by this call: the wait from arrival (the
    /// pre-queue arrival for a placed pre-queue user) to admission, in ms.
    pub waited_ms: Vec<u64>,
    /// Of the users this call admitted, those admitted after someone
    /// behind them (a place seated again after a loss of state, for one).
    pub out_of_order: u64,
}

/// Users admitted in all, and the frontiers: every place at or before
/// `frontier` (every pre-queue arrival at or before `frontier_prequeue`, of
/// a pre-queue placed in arrival order) was admitted or left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GateRecord {
    pub total: u64,
    pub frontier: u64,
    pub frontier_prequeue: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdmitOutcome {
    /// This call decided the window (and admitted `admitted` users).
    Decided,
    /// The window was already decided, by this or another instance.
    AlreadyDecided,
    /// Nobody waits; the window stays open.
    Empty,
    /// `max-active` left no room this window.
    AtCapacity,
    /// An operator paused admission.
    Paused,
    /// An operator closed the queue.
    Closed,
    /// A scheduled open has not come yet.
    NotOpen,
    /// Placed one step of the pre-queue at the open: call again at once.
    Placing,
}

/// Pre-queued users placed per admission call at a scheduled open: bounds
/// the Redis time of one call (measured in docs/performance.md).
pub const PLACE_STEP: u64 = 150;

/// What one cleanup pass removed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Cleanup {
    pub stale_waiting: u64,
    /// Heartbeats found with no place behind them, removed.
    pub strays: u64,
    /// Silent users may be left that the call had no room to look at.
    pub more: bool,
    pub expired_active: u64,
    /// Where the next call of the same pass starts (see [`Store::cleanup`]).
    pub next: Option<NextBucket>,
    /// The call removed most of the candidates it looked at (users leaving
    /// in a crowd): the next reads its candidates in the script.
    pub crowd: bool,
}

/// The next bucket of candidates past the timeout, as a cleanup call's
/// last script call named it, and the cutoff that made it past (heartbeats
/// due before it, in ms of Redis time, are past the timeout).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NextBucket {
    bucket: String,
    cutoff: i64,
}

/// A call of cleanup.lua or sweep.lua, which take the same keys and
/// settings first.
pub(super) fn cleanup_invocation(
    script: &'static QueueScript,
    keys: &QueueKeys,
    heartbeat: &HeartbeatConfig,
) -> ScriptInvocation<'static> {
    let mut invocation = script.invoke(keys);
    invocation
        .arg(heartbeat.cleanup_batch_size)
        .arg(heartbeat.timeout.as_millis() as u64)
        .arg(heartbeat.outage_grace.as_millis() as u64);
    invocation
}

/// What one call of `lua/sweep.lua` did, and the next bucket to read.
pub(super) struct Swept {
    removed: u64,
    expired: u64,
    next: Option<NextBucket>,
    /// Candidates looked at, by the instance or the script.
    looked: u64,
    /// Heartbeats with no place behind them, removed.
    strays: u64,
}

/// What a `lua/sweep.lua` call is given of a bucket.
pub(super) enum SweepInput<'a> {
    /// Nothing: the call that starts a pass only finds the first bucket.
    FirstBucket,
    /// The instance's look: the bucket's length when read, how many
    /// candidates it read from its start, and the stale among them.
    Looked {
        bucket: &'a str,
        length: u64,
        read: u64,
        stale: &'a [&'a str],
    },
    /// The bucket alone: the script reads up to `take` candidates itself.
    Bucket { bucket: &'a str, take: u64 },
}

impl Store {
    /// One call of the global admission gate. `seen` is what this instance
    /// has seen of the queue's state: the operator's changes (the control
    /// HASH's `version`) and the users admitted in all; a Redis with less
    /// is refused as lost.
    pub async fn admit(
        &self,
        queue: QueueRef<'_>,
        seen: (u64, u64),
    ) -> Result<Admission, StoreError> {
        let QueueRef {
            keys,
            admission,
            heartbeat,
        } = queue;
        let mut invocation = ADMIT.invoke(keys);
        invocation
            .arg(admission.interval.as_millis() as u64)
            .arg(admission.batch_size)
            .arg(admission.active_ttl.as_millis() as u64)
            .arg(admission.max_active)
            .arg(format!("{:032x}", rand::random::<u128>()))
            .arg(PLACE_STEP);
        heartbeat_args(&mut invocation, heartbeat);
        invocation.arg(seen.0).arg(seen.1);
        let reply: Vec<i64> = self.run_write(invocation, &keys.waiting).await?;
        let (&[admitted, window, why, now_ms, next_ms], record) = reply
            .split_first_chunk::<5>()
            .ok_or_else(|| StoreError::Failed("admit: a short answer".into()))?;
        let (record, out_of_order, waited_ms) = match *record {
            [total, frontier, frontier_prequeue, out_of_order, ref waited @ ..] => (
                Some(GateRecord {
                    total: count(total)?,
                    frontier: count(frontier)?,
                    frontier_prequeue: count(frontier_prequeue)?,
                }),
                count(out_of_order)?,
                waited.iter().map(|&w| count(w)).collect::<Result<_, _>>()?,
            ),
            _ => (None, 0, Vec::new()),
        };
        let outcome = match AdmitCode::of(why)? {
            AdmitCode::Decided => AdmitOutcome::Decided,
            AdmitCode::AlreadyDecided => AdmitOutcome::AlreadyDecided,
            AdmitCode::Empty => AdmitOutcome::Empty,
            AdmitCode::AtCapacity => AdmitOutcome::AtCapacity,
            // Still seating again the users of a lost state.
            AdmitCode::Paused | AdmitCode::Rebuilding => AdmitOutcome::Paused,
            AdmitCode::Closed => AdmitOutcome::Closed,
            AdmitCode::NotOpen => AdmitOutcome::NotOpen,
            AdmitCode::Placing => AdmitOutcome::Placing,
            // Nothing was written: the state is written back first.
            AdmitCode::Missing | AdmitCode::Behind => return Err(StoreError::Lost),
        };
        Ok(Admission {
            record,
            admitted: count(admitted)?,
            window: count(window)?,
            outcome,
            now_ms: count(now_ms)?,
            next_ms: count(next_ms)?,
            waited_ms,
            out_of_order,
        })
    }
    /// Whether the instance `id` runs a queue's cleanup pass now: the
    /// first instance to ask takes the claim (`sweeper`) for `hold`, and
    /// every other that asks meanwhile leaves the pass to it. So a queue
    /// is swept about once an interval however many instances share it,
    /// where each would otherwise read the same candidates. `hold` is a
    /// little shorter than the interval, so that the holder's next tick
    /// finds the claim free again (a lone instance sweeps every interval);
    /// an instance that stops holding it, or never sweeps, leaves the next
    /// pass to whichever asks first once it runs out.
    pub async fn claim_sweep(
        &self,
        keys: &QueueKeys,
        id: &str,
        hold: Duration,
    ) -> Result<bool, StoreError> {
        let holder = self.take_if_free(&keys.sweeper, id, hold).await?;
        // Free, or already this instance's (a resent claim).
        Ok(holder.is_none_or(|holder| holder == id))
    }

    /// Gives back a claim on a cleanup pass that `id` could not run (a
    /// call failed), if it still holds it: the next instance to tick runs
    /// the pass, rather than the queue going unswept for as long as this
    /// instance keeps failing.
    pub async fn release_sweep(&self, keys: &QueueKeys, id: &str) -> Result<(), StoreError> {
        let mut invocation = RELEASE.invoke(keys);
        invocation.arg(id);
        self.run::<i64>(invocation, Resend::Safe).await?;
        Ok(())
    }

    /// One cleanup step: active entries past their expiry, and a batch of
    /// heartbeat candidates looked at. The look is made here, in plain
    /// commands, as a poll far back is (see [`Store::poll_many`]): the
    /// candidates of the first bucket past the timeout are read with
    /// `LRANGE` and their heartbeats with `HMGET`, and `lua/sweep.lua`
    /// takes out those found stale after checking each again, then drops
    /// the candidates read. A user goes only by the script's own check, so
    /// what the instance reads can only make it propose a user, never keep
    /// one. After a step that removed most of what it looked at (`crowd`),
    /// the script reads the candidates itself: the look would only read
    /// what the script reads again. While an earlier version's heartbeats
    /// exist, `lua/cleanup.lua` does it all, reading both.
    pub async fn cleanup(
        &self,
        keys: &QueueKeys,
        heartbeat: &HeartbeatConfig,
        from: Option<NextBucket>,
        crowd: bool,
    ) -> Result<Cleanup, StoreError> {
        let mut done = Cleanup {
            stale_waiting: 0,
            strays: 0,
            expired_active: 0,
            more: false,
            next: None,
            crowd,
        };
        // The bucket the call before named, in a pass of calls: its script
        // call already expired what it could and found the bucket, and a
        // call of its own here would only do the same again (one script
        // call of two a step, Redis time the step spends finding nothing).
        let NextBucket { bucket, cutoff } = match from {
            Some(next) => next,
            None => {
                let Some(first) = self.sweep(keys, heartbeat, SweepInput::FirstBucket).await?
                else {
                    return self.cleanup_script(keys, heartbeat).await;
                };
                done.stale_waiting = first.removed;
                done.strays = first.strays;
                done.expired_active = first.expired;
                let Some(next) = first.next else {
                    return Ok(done);
                };
                next
            }
        };
        let take = u64::from(heartbeat.cleanup_batch_size).max(1);
        let swept = if crowd {
            self.sweep(
                keys,
                heartbeat,
                SweepInput::Bucket {
                    bucket: &bucket,
                    take,
                },
            )
            .await?
        } else {
            self.look_and_sweep(keys, heartbeat, &bucket, cutoff, take)
                .await?
        };
        let swept =
            swept.ok_or_else(|| StoreError::Failed("sweep: earlier heartbeats appeared".into()))?;
        done.stale_waiting += swept.removed;
        done.strays += swept.strays;
        done.expired_active += swept.expired;
        done.more = swept.next.is_some();
        done.next = swept.next;
        if swept.looked > 0 {
            done.crowd = 2 * swept.removed > swept.looked;
        }
        Ok(done)
    }
    /// A step's look at up to `take` candidates of `bucket`, in plain
    /// commands, and the sweep.lua call with the stale it found.
    async fn look_and_sweep(
        &self,
        keys: &QueueKeys,
        heartbeat: &HeartbeatConfig,
        bucket: &str,
        cutoff: i64,
        take: u64,
    ) -> Result<Option<Swept>, StoreError> {
        let list = format!("{}:{bucket}", keys.dues);
        // The list's length as read, with the candidates: sweep.lua drops
        // them only if it is still that long.
        let mut read = redis::pipe();
        read.cmd("LLEN")
            .arg(&list)
            .cmd("LRANGE")
            .arg(&list)
            .arg(0)
            .arg(take - 1);
        let read = &read;
        let (length, candidates): (u64, Vec<String>) = self
            .call(Resend::Safe, |mut c| async move {
                read.query_async::<(u64, Vec<String>)>(&mut c).await
            })
            .await?;
        // The stale, and the heartbeats with no place behind them (a
        // stray keeps polling, so it is never stale: see sweep.lua).
        let mut stale: Vec<&str> = Vec::new();
        if !candidates.is_empty() {
            let mut look = redis::pipe();
            look.cmd("HMGET")
                .arg(&keys.due)
                .arg(&candidates)
                .cmd("ZMSCORE")
                .arg(&keys.waiting)
                .arg(&candidates);
            let look = &look;
            type Looked = (Vec<Option<String>>, Vec<Option<f64>>);
            let (values, places): Looked = self
                .call(Resend::Safe, |mut c| async move {
                    look.query_async::<Looked>(&mut c).await
                })
                .await?;
            let mut seen = std::collections::HashSet::new();
            for ((user, value), place) in candidates.iter().zip(&values).zip(&places) {
                if value
                    .as_deref()
                    .is_some_and(|v| place.is_none() || heartbeat::may_be_stale(v, cutoff))
                    && seen.insert(user.as_str())
                {
                    stale.push(user);
                }
            }
        }
        let read = SweepInput::Looked {
            bucket,
            length,
            read: candidates.len() as u64,
            stale: &stale,
        };
        self.sweep(keys, heartbeat, read).await
    }
    /// One call of `lua/sweep.lua`; `None` while an earlier version's
    /// heartbeats exist.
    async fn sweep(
        &self,
        keys: &QueueKeys,
        heartbeat: &HeartbeatConfig,
        read: SweepInput<'_>,
    ) -> Result<Option<Swept>, StoreError> {
        let mut invocation = cleanup_invocation(&SWEEP, keys, heartbeat);
        match read {
            SweepInput::FirstBucket => {
                invocation.arg("").arg(0).arg(0);
            }
            SweepInput::Looked {
                bucket,
                length,
                read,
                stale,
            } => {
                invocation.arg(bucket).arg(length).arg(read).arg(stale);
            }
            SweepInput::Bucket { bucket, take } => {
                invocation.arg(bucket).arg("").arg(take);
            }
        }
        let reply: Vec<redis::Value> = self.run_write(invocation, &keys.waiting).await?;
        let number = |v: &redis::Value| -> Result<i64, StoreError> {
            match v {
                redis::Value::Int(n) => Ok(*n),
                _ => Err(StoreError::Failed("sweep: not a number".into())),
            }
        };
        match reply.as_slice() {
            [legacy] if number(legacy)? == -1 => Ok(None),
            // The bucket's length is read again with its candidates.
            [removed, expired, next, _length, cutoff, looked, strays] => {
                let cutoff = number(cutoff)?;
                let next = match next {
                    redis::Value::BulkString(b) if b.is_empty() => None,
                    redis::Value::BulkString(b) => Some(NextBucket {
                        bucket: String::from_utf8_lossy(b).into_owned(),
                        cutoff,
                    }),
                    _ => return Err(StoreError::Failed("sweep: no bucket".into())),
                };
                Ok(Some(Swept {
                    removed: count(number(removed)?)?,
                    expired: count(number(expired)?)?,
                    next,
                    looked: count(number(looked)?)?,
                    strays: count(number(strays)?)?,
                }))
            }
            _ => Err(StoreError::Failed("sweep: a short answer".into())),
        }
    }
    /// `lua/cleanup.lua`: the whole step in one script, for queues where
    /// an earlier version's heartbeats exist.
    async fn cleanup_script(
        &self,
        keys: &QueueKeys,
        heartbeat: &HeartbeatConfig,
    ) -> Result<Cleanup, StoreError> {
        let invocation = cleanup_invocation(&CLEANUP, keys, heartbeat);
        let (stale, expired, more): (i64, i64, i64) =
            self.run_write(invocation, &keys.waiting).await?;
        Ok(Cleanup {
            stale_waiting: count(stale)?,
            strays: 0,
            expired_active: count(expired)?,
            more: more == 1,
            next: None,
            crowd: false,
        })
    }
}
