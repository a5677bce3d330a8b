//! Redis: the scripts of `lua/` behind typed calls.
//!
//! Every change to queue state is one Lua script, so each API call is one
//! round-trip and no reader ever sees half a change. Scripts are sent with
//! EVALSHA; on NOSCRIPT (a restarted or flushed Redis) `redis::Script` loads
//! the script and retries, so waitgate recovers without a restart.
//!
//! Every call is bounded by `redis.command-timeout-ms`. A Redis that is down,
//! hung or slow turns into [`StoreError::Unavailable`] within that time, and
//! the caller answers 503 instead of queueing work behind it.

mod answers;
pub mod coalesce;
mod connection;
mod error;
mod keys;
pub mod ranks;

use std::collections::HashMap;
use std::sync::LazyLock;
use std::time::Duration;

use redis::{Script, ScriptInvocation};

use ranks::NearHead;

use crate::config::{AdmissionConfig, HeartbeatConfig};

use answers::place;
pub use answers::{Place, Position, Registration};
use connection::Resend;
pub use connection::Store;
pub use error::StoreError;
use error::{count, unexpected};
pub use keys::QueueKeys;
pub use ranks::Samples;

/// The scripts, compiled into the binary so that what runs is what was built.
/// Each is loaded after `lua/lib.lua`, the helpers they share.
macro_rules! script {
    ($file:literal) => {
        LazyLock::new(|| {
            Script::new(concat!(
                include_str!("../../lua/lib.lua"),
                include_str!(concat!("../../lua/", $file))
            ))
        })
    };
}
/// Read-only: the `no-writes` flag lets Redis run it on a replica and
/// refuse it any write.
macro_rules! read_only_script {
    ($file:literal) => {
        LazyLock::new(|| {
            Script::new(concat!(
                "#!lua flags=no-writes\n",
                include_str!("../../lua/lib.lua"),
                include_str!(concat!("../../lua/", $file))
            ))
        })
    };
}
static REGISTER: LazyLock<Script> = script!("register.lua");
static RANK: LazyLock<Script> = script!("rank.lua");
static DROPOUT: LazyLock<Script> = script!("dropout.lua");
static ADMIT: LazyLock<Script> = script!("admit.lua");
static CLEANUP: LazyLock<Script> = script!("cleanup.lua");
static SWEEP: LazyLock<Script> = script!("sweep.lua");
static RECHECK: LazyLock<Script> = script!("recheck.lua");
static CONTROL: LazyLock<Script> = script!("control.lua");
static SAMPLES: LazyLock<Script> = read_only_script!("samples.lua");
static REVOKE: LazyLock<Script> = script!("revoke.lua");

/// The channel revocations are pushed on (`lua/revoke.lua` publishes; every
/// instance subscribes, see `edge::revoked`).
pub const REVOKED_CHANNEL: &str = "waitgate:revoked";
static TOKEN: LazyLock<Script> = read_only_script!("token.lua");
static CURRENT: LazyLock<Script> = read_only_script!("current.lua");

mod health;
mod incidents;
pub use incidents::{Incident, Recovered, Recovery, Watched};

/// The outcome of one admission call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
    /// A scheduled open has not come yet.
    NotOpen,
    /// Placed one step of the pre-queue at the open: call again at once.
    Placing,
}

/// An operator's change to a queue (see `lua/control.lua`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    Pause,
    Resume,
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

/// Queue sizes, for the gauges.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    pub waiting: u64,
    pub active: u64,
    /// Users admitted per window, as observed; `None` before any admission.
    pub rate_per_window: Option<f64>,
    /// The admission interval in effect (a live override, or the config's).
    pub interval_ms: Option<u64>,
    pub paused: bool,
    pub phase: &'static str,
}

/// A queue's event phase, as `lua/lib.lua` decides it: `open` (no event,
/// or its pre-queue placed), `scheduled` (before `prequeue_from`),
/// `prequeue`, or `placing`, from the control hash and Redis time.
pub fn event_phase(
    control: &std::collections::HashMap<String, String>,
    now_ms: u64,
) -> &'static str {
    let number = |key: &str| control.get(key).and_then(|v| v.parse::<u64>().ok());
    let placed = control.get("placed").is_some_and(|v| v == "1");
    match number("open_at") {
        None => "open",
        Some(_) if placed => "open",
        Some(_) if number("prequeue_from").is_some_and(|from| now_ms < from) => "scheduled",
        Some(open_at) if now_ms < open_at => "prequeue",
        Some(_) => "placing",
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
}

/// Pre-queued users placed per admission call at a scheduled open: bounds
/// the Redis time of one call (measured in docs/performance.md).
pub const PLACE_STEP: u64 = 150;

impl Status {
    /// A numeric field of the control hash.
    pub fn number(&self, field: &str) -> Option<u64> {
        self.control.get(field).and_then(|v| v.parse().ok())
    }

    pub fn paused(&self) -> bool {
        self.control.get("paused").is_some_and(|v| v == "1")
    }

    pub fn phase(&self) -> &'static str {
        event_phase(&self.control, self.now_ms)
    }
}

/// The outcome of `dropout`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dropout {
    Removed,
    NotQueued,
    CredentialMismatch,
}

/// The outcome of `current`: is a credential's registration the user's
/// current one?
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Current {
    Yes,
    NotQueued,
    /// The user registered again since.
    Earlier,
}

/// The typed calls: each builds its script call, runs it through the
/// connection layer (`connection`) and reads the answer.
impl Store {
    pub async fn register(
        &self,
        keys: &QueueKeys,
        user: &str,
        admission: &AdmissionConfig,
        heartbeat: &HeartbeatConfig,
    ) -> Result<Registration, StoreError> {
        one(
            "register",
            self.register_many(keys, &[user], admission, heartbeat)
                .await?,
        )
    }

    /// Registers each of `users` (at most [`MAX_BATCH`]), in this order, in
    /// one script call.
    pub async fn register_many(
        &self,
        keys: &QueueKeys,
        users: &[&str],
        admission: &AdmissionConfig,
        heartbeat: &HeartbeatConfig,
    ) -> Result<Vec<Registration>, StoreError> {
        let mut invocation = REGISTER.prepare_invoke();
        invocation
            .key(&keys.waiting)
            .key(&keys.heartbeat)
            .key(&keys.credential)
            .key(&keys.active)
            .key(&keys.admission)
            .key(&keys.control)
            .key(&keys.prequeue)
            .key(&keys.due)
            .key(&keys.dues)
            .arg(admission.interval.as_millis() as u64)
            .arg(admission.batch_size);
        heartbeat_args(&mut invocation, heartbeat);
        for user in users {
            invocation.arg(*user);
        }
        let flat: Vec<i64> = self.run_write(invocation, &keys.waiting).await?;
        answers("register", &flat, 5, users.len())?
            .map(|a| {
                let (code, value, wait, arrival, advice) = (a[0], a[1], a[2], a[3], a[4]);
                match code {
                    1 => Ok(Registration::New {
                        place: place(value, wait, advice)?,
                        arrival: count(arrival)?,
                    }),
                    2 => Ok(Registration::AlreadyWaiting {
                        place: place(value, wait, advice)?,
                        arrival: count(arrival)?,
                    }),
                    3 => Ok(Registration::Active {
                        expires_at_ms: count(value)?,
                        arrival: count(arrival)?,
                    }),
                    4 => Ok(Registration::Prequeued {
                        opens_in_ms: count(value)?,
                        arrival: None,
                        poll_after_ms: count(advice)?,
                    }),
                    5 => Ok(Registration::Prequeued {
                        opens_in_ms: count(value)?,
                        arrival: Some(count(arrival)?),
                        poll_after_ms: count(advice)?,
                    }),
                    6 => Ok(Registration::NotOpen {
                        opens_at_ms: count(value)?,
                    }),
                    _ => Err(unexpected("register", code)),
                }
            })
            .collect()
    }

    pub async fn rank(
        &self,
        keys: &QueueKeys,
        user: &str,
        admission: &AdmissionConfig,
        heartbeat: &HeartbeatConfig,
        samples: Option<&Samples>,
    ) -> Result<Position, StoreError> {
        one(
            "rank",
            self.rank_many(keys, &[user], admission, heartbeat, samples)
                .await?,
        )
    }

    /// The places of each of `users` (at most [`MAX_BATCH`]) in one script
    /// call, keeping those waiting alive. With `samples`, ranks far back are
    /// derived from them (see [`ranks`]); any that cannot be told within
    /// 0.1% are asked again, exactly, in a second call.
    pub async fn rank_many(
        &self,
        keys: &QueueKeys,
        users: &[&str],
        admission: &AdmissionConfig,
        heartbeat: &HeartbeatConfig,
        samples: Option<&Samples>,
    ) -> Result<Vec<Position>, StoreError> {
        let told = self
            .rank_many_told(keys, users, admission, heartbeat, samples)
            .await?;
        Ok(told.into_iter().map(|t| t.position).collect())
    }

    /// [`Store::rank_many`], saying of each answer whether its rank was
    /// walked in the waiting set (near the head).
    async fn rank_many_told(
        &self,
        keys: &QueueKeys,
        users: &[&str],
        admission: &AdmissionConfig,
        heartbeat: &HeartbeatConfig,
        samples: Option<&Samples>,
    ) -> Result<Vec<Told>, StoreError> {
        let (mut told, _) = self
            .rank_call(keys, users, admission, heartbeat, derive(samples))
            .await?;
        let exact: Vec<usize> = (0..users.len()).filter(|&i| told[i].is_none()).collect();
        if !exact.is_empty() {
            let again: Vec<&str> = exact.iter().map(|&i| users[i]).collect();
            let (answers, _) = self
                .rank_call(keys, &again, admission, heartbeat, None)
                .await?;
            for (i, answer) in exact.into_iter().zip(answers) {
                told[i] = answer;
            }
        }
        told.into_iter()
            .map(|t| t.ok_or_else(|| StoreError::Failed("rank: a rank not derived".into())))
            .collect()
    }

    /// One call of rank.lua for `users`: each one's answer (`None` where a
    /// derived rank could not be told), and the batch's numbers.
    async fn rank_call(
        &self,
        keys: &QueueKeys,
        users: &[&str],
        admission: &AdmissionConfig,
        heartbeat: &HeartbeatConfig,
        derive: Derive<'_>,
    ) -> Result<(Vec<Option<Told>>, RankBatch), StoreError> {
        let invocation = rank_invocation(keys, admission, heartbeat, derive, users);
        let flat: Vec<i64> = self.run(invocation, Resend::Safe).await?;
        let (each, batch) = rank_batch(&flat)?;
        let samples = derive.map(|(s, _)| s);
        Ok((rank_answers(each, &batch, samples, users.len())?, batch))
    }

    /// The places of `users` as [`Store::rank_many`] tells them, with the
    /// polls far back decided here, in plain commands: one script call
    /// reads the batch's numbers while one `HMGET` reads the users'
    /// heartbeats; a heartbeat that must be written goes with one `RPUSH`,
    /// `ZADD` and `HSET` for all of them; the others are asked of rank.lua
    /// as before. The same decisions as rank.lua's pass far back, made with
    /// Redis's time of the first call. Users `near` names (last answered
    /// near the head by this instance) are asked of rank.lua in that first
    /// call, not read: near the head a rank is walked anyway.
    ///
    /// Why: a poll far back costs Redis a hash lookup and, for one in two,
    /// a write. Through a script, every user also passes through Lua as a
    /// string both ways, which cost more than the lookup and the write
    /// themselves: `scripts/poll-profile.sh` measured 1.30 µs a user for
    /// the HMGET from a script against 0.43 as a command, and 1.57 against
    /// 0.47 for the write.
    ///
    /// What it gives up is the script's atomicity between the read and the
    /// write, for users far back only:
    /// - A user who leaves between the two (a dropout, cleanup), or joins
    ///   again at another arrival, would have the write name an arrival
    ///   that is not theirs. When the set's departure counters moved
    ///   between the read and the write, the write is checked against the
    ///   waiting set right after it and put right, and that poll answered
    ///   exactly (see [`Store::write_far`]).
    /// - Two instances that write one user's heartbeat at the same moment
    ///   may leave the earlier of the two times, shorter than the later
    ///   answer's promise by the time between the two reads: a client that
    ///   polls two instances within those milliseconds.
    pub async fn poll_many(
        &self,
        keys: &QueueKeys,
        users: &[&str],
        admission: &AdmissionConfig,
        heartbeat: &HeartbeatConfig,
        samples: Option<&Samples>,
        near: &NearHead,
    ) -> Result<Vec<Position>, StoreError> {
        let told = self
            .poll_many_told(keys, users, admission, heartbeat, samples, near)
            .await?;
        // Near the head: walked, and nearer than ranks are derived. (A rank
        // is also walked past the last sample, for users who joined since
        // it was taken: far back, and soon sampled.)
        let nearest = samples.map_or(0, |s| s.nearest);
        near.note(users.iter().zip(&told).map(|(u, t)| {
            let near_head =
                t.walked && matches!(t.position, Position::Waiting(p) if p.rank < nearest);
            (*u, near_head)
        }));
        Ok(told.into_iter().map(|t| t.position).collect())
    }

    async fn poll_many_told(
        &self,
        keys: &QueueKeys,
        users: &[&str],
        admission: &AdmissionConfig,
        heartbeat: &HeartbeatConfig,
        samples: Option<&Samples>,
        near: &NearHead,
    ) -> Result<Vec<Told>, StoreError> {
        let Some((samples, range)) = derive(samples) else {
            return self
                .rank_many_told(keys, users, admission, heartbeat, samples)
                .await;
        };
        // Users last answered near the head go to rank.lua in the first
        // call, beside the batch's numbers; the others' heartbeats are read.
        let hints = near.hints(users);
        let (hinted, read): (Vec<usize>, Vec<usize>) = (0..users.len()).partition(|&i| hints[i]);
        if read.is_empty() {
            return self
                .rank_many_told(keys, users, admission, heartbeat, Some(samples))
                .await;
        }
        let first_users: Vec<&str> = hinted.iter().map(|&i| users[i]).collect();
        let read_users: Vec<&str> = read.iter().map(|&i| users[i]).collect();
        // The departure counters, read before the heartbeats: see
        // `write_far`.
        let mut pipe = redis::pipe();
        pipe.add_command(departures(keys))
            .cmd("HMGET")
            .arg(&keys.due)
            .arg(&read_users);
        // Both at once on the shared connection: one round trip.
        let pipe = &pipe;
        let asked = std::time::Instant::now();
        let ((first, batch), (before, values)) = futures::try_join!(
            self.rank_call(
                keys,
                &first_users,
                admission,
                heartbeat,
                Some((samples, range))
            ),
            self.call(Resend::Safe, |mut c| async move {
                pipe.query_async::<(Departures, Vec<Option<String>>)>(&mut c)
                    .await
            }),
        )?;
        let mut told: Vec<Option<Told>> = vec![None; users.len()];
        for (&i, answer) in hinted.iter().zip(first) {
            told[i] = answer;
        }
        if batch.fast && values.len() == read_users.len() {
            let far = Far::new(&batch, heartbeat, range.1);
            let written = decide_far(
                &far,
                &batch,
                samples,
                (&read, &read_users),
                &values,
                &mut told,
            );
            if asked.elapsed() > late_write(heartbeat) {
                // Written late (an instance that stalled between its read
                // and its write), a heartbeat could overwrite a later one
                // another poll wrote meanwhile with an earlier one; past a
                // bound, those users are asked of rank.lua instead, which
                // writes with its own time. (Bytes the network delivers late
                // after they were sent are not covered: see docs/scale.md.)
                forget(&mut told, users, written.iter().map(|w| w.0));
            } else if !written.is_empty() {
                // Users found moved after the write are asked again, exactly.
                let moved = self.write_far(keys, &far, &written, &before).await?;
                forget(&mut told, users, moved.into_iter());
            }
        }
        let rest: Vec<usize> = (0..users.len()).filter(|&i| told[i].is_none()).collect();
        if !rest.is_empty() {
            let asked: Vec<&str> = rest.iter().map(|&i| users[i]).collect();
            let answers = self
                .rank_many_told(keys, &asked, admission, heartbeat, Some(samples))
                .await?;
            for (i, answer) in rest.into_iter().zip(answers) {
                told[i] = Some(answer);
            }
        }
        Ok(told.into_iter().flatten().collect())
    }

    /// Writes the heartbeats `poll_many` decided (user, value, arrival):
    /// the candidates first, as rank.lua files them before the write (see
    /// `file_all` in lua/lib.lua), then the values. A user who left, or
    /// joined again at another arrival, between the instance's read and its
    /// write (a dropout and a new registration within that millisecond)
    /// has the write put right by `lua/recheck.lua`: a stray heartbeat
    /// would stay until cleanup passed it, and an old arrival would be the
    /// one every later rank far back was read off. Anything that changes
    /// the user after the write writes its own heartbeat over this one.
    /// Returns the users found moved, whose answers must be asked again.
    ///
    /// Who moved is found by each user's score in the waiting set, read
    /// after the write, but only when the departure counters (`before`,
    /// read before the heartbeats) moved by then: no user leaves the set,
    /// or is placed in it anywhere but at the tail, without one of them
    /// moving (see `counted` in lua/lib.lua), and a registration at the
    /// tail of a user still waiting changes nothing. Why: `ZMSCORE` on a
    /// set of a million cost Redis 1.47 µs a poll in `scripts/scale.sh`,
    /// a third of the time of the rest of the poll, and the counters move
    /// for a few of the batches only (a cleanup step, an admission).
    async fn write_far<'u>(
        &self,
        keys: &QueueKeys,
        far: &Far,
        written: &[(&'u str, String, u64)],
        before: &Departures,
    ) -> Result<Vec<&'u str>, StoreError> {
        let bucket = far.bucket.to_string();
        let users: Vec<&str> = written.iter().map(|w| w.0).collect();
        let mut hset = redis::cmd("HSET");
        hset.arg(&keys.due);
        for (user, value, _) in written {
            hset.arg(*user).arg(value);
        }
        let mut pipe = redis::pipe();
        pipe.cmd("RPUSH")
            .arg(format!("{}:{bucket}", keys.dues))
            .arg(&users)
            .ignore()
            .cmd("ZADD")
            .arg(&keys.dues)
            .arg(&bucket)
            .arg(&bucket)
            .ignore()
            .add_command(hset)
            .ignore()
            .add_command(departures(keys));
        let pipe = &pipe;
        let (after,): (Departures,) = self
            .call(Resend::Safe, |mut c| async move {
                pipe.query_async::<(Departures,)>(&mut c).await
            })
            .await?;
        if &after == before {
            return Ok(Vec::new());
        }
        let mut zmscore = redis::cmd("ZMSCORE");
        zmscore.arg(&keys.waiting).arg(&users);
        let zmscore = &zmscore;
        let scores: Vec<Option<f64>> = self
            .call(Resend::Safe, |mut c| async move {
                zmscore.query_async::<Vec<Option<f64>>>(&mut c).await
            })
            .await?;
        let moved: Vec<&(&'u str, String, u64)> = written
            .iter()
            .zip(&scores)
            .filter(|((_, _, arrival), score)| score.map(|s| s as u64) != Some(*arrival))
            .map(|(w, _)| w)
            .collect();
        if moved.is_empty() {
            return Ok(Vec::new());
        }
        let mut invocation = RECHECK.prepare_invoke();
        invocation.key(&keys.waiting).key(&keys.due);
        for (user, value, _) in &moved {
            invocation.arg(*user).arg(value);
        }
        self.run::<i64>(invocation, Resend::Safe).await?;
        Ok(moved.into_iter().map(|w| w.0).collect())
    }

    /// Takes the samples of a queue's waiting set from place `first` on, in
    /// bounded read-only steps; `None` if the set started anew or changed
    /// uncounted meanwhile.
    pub async fn take_samples(
        &self,
        keys: &QueueKeys,
        first: u64,
    ) -> Result<Option<Samples>, StoreError> {
        let taken = std::time::Instant::now();
        let mut points = Vec::new();
        let mut steps = Vec::new();
        // Places, counted with those admitted: the first of the first step
        // is `first` from the head as the sampling starts.
        let mut next = None;
        loop {
            let mut invocation = SAMPLES.prepare_invoke();
            invocation.key(&keys.waiting).key(&keys.admission);
            let start = match next {
                Some(place) => place,
                None => {
                    // The first step reads the counters alone.
                    invocation.arg(u64::MAX);
                    let flat: Vec<i64> = self.run(invocation, Resend::Safe).await?;
                    next =
                        Some(first.saturating_add(counters(flat.get(..6).unwrap_or(&[]))?.total));
                    continue;
                }
            };
            let mut place = start;
            let step: Vec<u64> = (0..ranks::STEP)
                .map(|_| {
                    let this = place;
                    place = ranks::after(this);
                    this
                })
                .collect();
            next = Some(place);
            for place in &step {
                invocation.arg(*place);
            }
            let flat: Vec<i64> = self.run(invocation, Resend::Safe).await?;
            let read = counters(flat.get(..6).unwrap_or(&[]))?;
            steps.push(read);
            let scores = &flat[6..];
            for (place, score) in step.iter().zip(scores) {
                if *score >= 0 {
                    points.push(ranks::Point {
                        score: count(*score)?,
                        lifted: *place,
                        total: read.total,
                        removed: read.removed,
                        added: read.added,
                    });
                }
            }
            if scores.len() < step.len() {
                // Past the tail.
                break;
            }
        }
        // Steps apart in time can disagree where changes came between
        // them; what is left increasing is what a rank is read off.
        points.dedup_by(|later, earlier| {
            later.score <= earlier.score || later.lifted <= earlier.lifted
        });
        Ok(ranks::Samples::new(points, &steps, taken).map(|s| s.from_place(first)))
    }

    /// One call of the global admission gate. `seen` is what this instance
    /// has seen of the queue's state: the operator's changes (the control
    /// HASH's `version`) and the users admitted in all; a Redis with less
    /// is refused as lost.
    pub async fn admit(
        &self,
        keys: &QueueKeys,
        admission: &AdmissionConfig,
        heartbeat: &HeartbeatConfig,
        seen: (u64, u64),
    ) -> Result<Admission, StoreError> {
        let mut invocation = ADMIT.prepare_invoke();
        invocation
            .key(&keys.waiting)
            .key(&keys.heartbeat)
            .key(&keys.active)
            .key(&keys.admission)
            .key(&keys.credential)
            .key(&keys.control)
            .key(&keys.prequeue)
            .key(&keys.due)
            .key(&keys.dues)
            .key(&keys.spent)
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
        let record = match *record {
            [total, frontier, frontier_prequeue] => Some(GateRecord {
                total: count(total)?,
                frontier: count(frontier)?,
                frontier_prequeue: count(frontier_prequeue)?,
            }),
            _ => None,
        };
        let outcome = match why {
            0 => AdmitOutcome::Decided,
            1 => AdmitOutcome::AlreadyDecided,
            2 => AdmitOutcome::Empty,
            3 => AdmitOutcome::AtCapacity,
            // (9: still seating again the users of a lost state.)
            4 | 9 => AdmitOutcome::Paused,
            5 => AdmitOutcome::NotOpen,
            6 => AdmitOutcome::Placing,
            // Nothing was written: the state is written back first.
            7 | 8 => return Err(StoreError::Lost),
            _ => return Err(unexpected("admit", why)),
        };
        Ok(Admission {
            record,
            admitted: count(admitted)?,
            window: count(window)?,
            outcome,
            now_ms: count(now_ms)?,
            next_ms: count(next_ms)?,
        })
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
                let Some(first) = self.sweep(keys, heartbeat, Read::Nothing).await? else {
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
                Read::Here {
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
                    .is_some_and(|v| place.is_none() || stale_heartbeat(v, cutoff))
                    && seen.insert(user.as_str())
                {
                    stale.push(user);
                }
            }
        }
        let read = Read::Looked {
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
        read: Read<'_>,
    ) -> Result<Option<Swept>, StoreError> {
        let mut invocation = cleanup_invocation(&SWEEP, keys, heartbeat);
        match read {
            Read::Nothing => {
                invocation.arg("").arg(0).arg(0);
            }
            Read::Looked {
                bucket,
                length,
                read,
                stale,
            } => {
                invocation.arg(bucket).arg(length).arg(read).arg(stale);
            }
            Read::Here { bucket, take } => {
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

    /// The sizes and settings of a queue for the gauges: the admin API's
    /// read, in one round-trip.
    pub async fn sample(&self, keys: &QueueKeys) -> Result<Sample, StoreError> {
        let status = self.status(keys).await?;
        Ok(Sample {
            waiting: status.waiting,
            active: status.active,
            rate_per_window: status.rate_per_window,
            interval_ms: status.number("interval"),
            paused: status.paused(),
            phase: status.phase(),
        })
    }

    /// Takes out the registration at `arrival`, the one a checked
    /// credential names.
    pub async fn dropout(
        &self,
        keys: &QueueKeys,
        user: &str,
        arrival: u64,
    ) -> Result<Dropout, StoreError> {
        let mut invocation = DROPOUT.prepare_invoke();
        invocation
            .key(&keys.waiting)
            .key(&keys.heartbeat)
            .key(&keys.credential)
            .key(&keys.active)
            .key(&keys.prequeue)
            .key(&keys.admission)
            .key(&keys.due)
            .key(&keys.spent)
            .key(&keys.control)
            .arg(user)
            .arg(arrival);
        let code: i64 = self.run_write(invocation, &keys.waiting).await?;
        match code {
            1 => Ok(Dropout::Removed),
            0 => Ok(Dropout::NotQueued),
            -1 => Ok(Dropout::CredentialMismatch),
            _ => Err(unexpected("dropout", code)),
        }
    }

    /// Whether the registration at `arrival` (a credential's) is `user`'s
    /// current one (`lua/current.lua`).
    pub async fn current(
        &self,
        keys: &QueueKeys,
        user: &str,
        arrival: u64,
    ) -> Result<Current, StoreError> {
        let mut invocation = CURRENT.prepare_invoke();
        invocation
            .key(&keys.waiting)
            .key(&keys.prequeue)
            .key(&keys.credential)
            .arg(user)
            .arg(arrival);
        let code: i64 = self.run(invocation, Resend::Safe).await?;
        match code {
            1 => Ok(Current::Yes),
            0 => Ok(Current::NotQueued),
            -1 => Ok(Current::Earlier),
            _ => Err(unexpected("current", code)),
        }
    }

    /// Applies an operator's change; `Ok(Err(_))` when Redis refused it.
    pub async fn control(
        &self,
        keys: &QueueKeys,
        change: &Change,
    ) -> Result<Result<(), Refused>, StoreError> {
        let mut invocation = CONTROL.prepare_invoke();
        invocation
            .key(&keys.control)
            .key(&keys.admission)
            .key(&keys.prequeue);
        let setting = |s: &Option<Setting>| match s {
            None => String::new(),
            Some(Setting::Configured) => "-".to_string(),
            Some(Setting::Value(v)) => v.to_string(),
        };
        match change {
            Change::Pause => invocation.arg("pause"),
            Change::Resume => invocation.arg("resume"),
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
            } => invocation
                .arg("event")
                .arg(prequeue_from_ms.map(|t| t.to_string()).unwrap_or_default())
                .arg(open_at_ms)
                .arg(if *shuffle { "1" } else { "0" }),
            Change::EndEvent => invocation.arg("end-event"),
        };
        let (code, _now): (i64, i64) = self.run_write(invocation, &keys.control).await?;
        match code {
            1 => Ok(Ok(())),
            -1 => Ok(Err(Refused::Placing)),
            -2 => Ok(Err(Refused::OpenAtPast)),
            -3 => Ok(Err(Refused::PrequeueAfterOpen)),
            _ => Err(unexpected("control", code)),
        }
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
        let mut invocation = REVOKE.prepare_invoke();
        invocation
            .key(&keys.active)
            .key(&keys.credential)
            .key(&keys.revoked)
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
        let mut pipe = redis::pipe();
        pipe.hgetall(&keys.control)
            .zcard(&keys.waiting)
            .zcard(&keys.active)
            .zcard(&keys.prequeue)
            .hget(&keys.admission, "rate")
            .hget(&keys.admission, "total")
            .cmd("TIME")
            .cmd("HMGET")
            .arg(&keys.admission)
            .arg(&["incident", "incident_at", "incident_ms"][..]);
        type Raw = (
            std::collections::HashMap<String, String>,
            u64,
            u64,
            u64,
            Option<f64>,
            Option<u64>,
            (u64, u64),
            (Option<String>, Option<u64>, Option<u64>),
        );
        let pipe = &pipe;
        let result = self
            .call(Resend::Safe, |mut connection| async move {
                pipe.query_async::<Raw>(&mut connection).await
            })
            .await;
        let (control, waiting, active, prequeued, rate, total, (secs, micros), incident) = result?;
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
            now_ms: secs * 1000 + micros / 1000,
        })
    }

    /// The active-state expiry (Redis clock, ms) when the user is active and
    /// was admitted from the registration at `arrival`; `None` for either
    /// failure, alike.
    pub async fn token(
        &self,
        keys: &QueueKeys,
        user: &str,
        arrival: u64,
    ) -> Result<Option<u64>, StoreError> {
        one("token", self.token_many(keys, &[(user, arrival)]).await?)
    }

    /// For each (user, arrival the credential names), at most
    /// [`MAX_BATCH`] / 2 of them, the active-state expiry when the user is
    /// active from that registration: one script call.
    pub async fn token_many(
        &self,
        keys: &QueueKeys,
        users: &[(&str, u64)],
    ) -> Result<Vec<Option<u64>>, StoreError> {
        let mut invocation = TOKEN.prepare_invoke();
        invocation.key(&keys.active).key(&keys.credential);
        for (user, arrival) in users {
            invocation.arg(*user).arg(*arrival);
        }
        let flat: Vec<i64> = self.run(invocation, Resend::Safe).await?;
        Ok(answers("token", &flat, 1, users.len())?
            .map(|a| u64::try_from(a[0]).ok().filter(|&ms| ms > 0))
            .collect())
    }
}

/// A call of cleanup.lua or sweep.lua, which take the same keys and
/// settings first.
fn cleanup_invocation<'a>(
    script: &'a Script,
    keys: &'a QueueKeys,
    heartbeat: &HeartbeatConfig,
) -> ScriptInvocation<'a> {
    let mut invocation = script.prepare_invoke();
    invocation
        .key(&keys.waiting)
        .key(&keys.heartbeat)
        .key(&keys.credential)
        .key(&keys.active)
        .key(&keys.prequeue)
        .key(&keys.admission)
        .key(&keys.due)
        .key(&keys.dues)
        .arg(heartbeat.cleanup_batch_size)
        .arg(heartbeat.timeout.as_millis() as u64)
        .arg(heartbeat.outage_grace.as_millis() as u64);
    invocation
}

/// A call of rank.lua for `users` with its keys and settings and, with
/// `derive`, the samples' range of arrivals (from, before) and exact window
/// (`nearest`) the instance derives ranks for.
fn rank_invocation<'a>(
    keys: &'a QueueKeys,
    admission: &AdmissionConfig,
    heartbeat: &HeartbeatConfig,
    derive: Derive<'_>,
    users: &[&str],
) -> ScriptInvocation<'a> {
    let ((from, to), nearest) = derive.map_or(((0, 0), 0), |(s, range)| (range, s.nearest));
    let mut invocation = RANK.prepare_invoke();
    invocation
        .key(&keys.waiting)
        .key(&keys.heartbeat)
        .key(&keys.active)
        .key(&keys.admission)
        .key(&keys.control)
        .key(&keys.prequeue)
        .key(&keys.due)
        .key(&keys.dues)
        .arg(admission.interval.as_millis() as u64)
        .arg(admission.batch_size);
    heartbeat_args(&mut invocation, heartbeat);
    invocation.arg(from).arg(to).arg(nearest);
    for user in users {
        invocation.arg(*user);
    }
    invocation
}

/// Samples ranks far back are derived from, with their range as read once
/// for a batch ([`Samples::range`]).
type Derive<'s> = Option<(&'s Samples, (u64, u64))>;

/// The samples' range, when ranks can be derived from them now.
fn derive(samples: Option<&Samples>) -> Derive<'_> {
    samples.and_then(|s| Some((s, s.range()?)))
}

/// The heartbeat settings a script reads (`heartbeat_args` in
/// `lua/lib.lua`): the timeout and the bounds of the poll advice, in ms.
fn heartbeat_args(invocation: &mut ScriptInvocation<'_>, heartbeat: &HeartbeatConfig) {
    invocation
        .arg(heartbeat.timeout.as_millis() as u64)
        .arg(heartbeat.poll_min.as_millis() as u64)
        .arg(heartbeat.poll_max.as_millis() as u64);
}

/// The most users one batched script call takes (the scripts refuse more):
/// it bounds how long one call holds Redis.
pub const MAX_BATCH: usize = 500;

/// A batched script's flat answer, `width` numbers per user, checked to be
/// one answer per user asked.
fn answers<'a>(
    script: &'static str,
    flat: &'a [i64],
    width: usize,
    asked: usize,
) -> Result<std::slice::ChunksExact<'a, i64>, StoreError> {
    if flat.len() != width * asked {
        return Err(StoreError::Failed(format!(
            "{script}: {} numbers for {asked} users",
            flat.len()
        )));
    }
    Ok(flat.chunks_exact(width))
}

/// An answer to a poll, and whether its rank was walked in the waiting set
/// (rank.lua's exact path, near the head) rather than derived or decided
/// far back.
#[derive(Debug, Clone, Copy)]
struct Told {
    position: Position,
    walked: bool,
}

/// rank.lua's answers for `asked` users (`each`, four numbers a user):
/// `None` where a derived rank could not be told.
fn rank_answers(
    each: &[i64],
    batch: &RankBatch,
    samples: Option<&Samples>,
    asked: usize,
) -> Result<Vec<Option<Told>>, StoreError> {
    let told = |position, walked| Ok(Some(Told { position, walked }));
    answers("rank", each, 4, asked)?
        .map(|a| {
            let (code, value, wait, advice) = (a[0], a[1], a[2], a[3]);
            match code {
                0 => told(Position::NotQueued, false),
                1 => told(Position::Waiting(place(value, wait, advice)?), true),
                5 => {
                    let arrival = count(value)?;
                    let Some(rank) = samples.and_then(|s| s.rank(arrival, batch.counters)) else {
                        return Ok(None);
                    };
                    told(
                        Position::Waiting(Place {
                            rank,
                            wait_ms: ranks::wait_ms(
                                rank,
                                batch.first_ms,
                                batch.rate,
                                batch.interval_ms,
                            ),
                            poll_after_ms: count(advice)?,
                        }),
                        false,
                    )
                }
                3 => told(
                    Position::Active {
                        expires_at_ms: count(value)?,
                    },
                    false,
                ),
                4 => told(
                    Position::Prequeued {
                        opens_in_ms: count(value)?,
                        poll_after_ms: count(advice)?,
                    },
                    false,
                ),
                _ => Err(unexpected("rank", code)),
            }
        })
        .collect()
}

/// Decides the polls far back among `read` (their places in the batch
/// and their users) from their heartbeats (`values`) as rank.lua's pass
/// far back would, into `told`; returns the heartbeats to write (user,
/// value, arrival). A user twice in the batch gets one decision.
fn decide_far<'u>(
    far: &Far,
    batch: &RankBatch,
    samples: &Samples,
    (read, read_users): (&[usize], &[&'u str]),
    values: &[Option<String>],
    told: &mut [Option<Told>],
) -> Vec<(&'u str, String, u64)> {
    let mut written: Vec<(&str, String, u64)> = Vec::new();
    let mut decided: HashMap<&str, Told> = HashMap::new();
    for ((&i, user), value) in read.iter().zip(read_users).zip(values) {
        if let Some(&again) = decided.get(user) {
            told[i] = Some(again);
            continue;
        }
        let Some((due, arrival)) = value.as_deref().and_then(far_heartbeat) else {
            continue;
        };
        if !far.holds(due, arrival.1) {
            continue;
        }
        let Some(rank) = samples.rank(arrival.1, batch.counters) else {
            continue;
        };
        let left = due as i64 - batch.now_ms as i64;
        let advice = if far.keeps(left) {
            left as u64
        } else {
            written.push((user, format!("{}:{}", far.due, arrival.0), arrival.1));
            far.advice
        };
        let answer = Told {
            position: Position::Waiting(Place {
                rank,
                wait_ms: ranks::wait_ms(rank, batch.first_ms, batch.rate, batch.interval_ms),
                poll_after_ms: advice,
            }),
            walked: false,
        };
        decided.insert(user, answer);
        told[i] = Some(answer);
    }
    written
}

/// Drops the answers of `again`, everywhere each user is in the batch:
/// rank.lua answers them instead.
fn forget<'u>(told: &mut [Option<Told>], users: &[&str], again: impl Iterator<Item = &'u str>) {
    let again: std::collections::HashSet<&str> = again.collect();
    for (answer, user) in told.iter_mut().zip(users) {
        if again.contains(user) {
            *answer = None;
        }
    }
}

/// How long after its read `poll_many` still writes a heartbeat itself:
/// `heartbeat.poll-min-ms`, at most a second. A heartbeat written so late
/// promises that much less than the answer said.
fn late_write(heartbeat: &HeartbeatConfig) -> Duration {
    heartbeat.poll_min.min(Duration::from_secs(1))
}

/// What one call of `lua/sweep.lua` did, and the next bucket to read.
struct Swept {
    removed: u64,
    expired: u64,
    next: Option<NextBucket>,
    /// Candidates looked at, by the instance or the script.
    looked: u64,
    /// Heartbeats with no place behind them, removed.
    strays: u64,
}

/// What a `lua/sweep.lua` call is given of a bucket.
enum Read<'a> {
    /// Nothing: the call that starts a pass only finds the first bucket.
    Nothing,
    /// The instance's look: the bucket's length when read, how many
    /// candidates it read from its start, and the stale among them.
    Looked {
        bucket: &'a str,
        length: u64,
        read: u64,
        stale: &'a [&'a str],
    },
    /// The bucket alone: the script reads up to `take` candidates itself.
    Here { bucket: &'a str, take: u64 },
}

/// Whether a candidate's heartbeat may be stale: anything but a due time
/// in plain digits at or after `cutoff`. The script decides, by its own
/// reading; this only must not keep a user the script would take.
fn stale_heartbeat(value: &str, cutoff: i64) -> bool {
    let due = value.split_once(':').map_or(value, |(due, _)| due);
    if due.is_empty() || !due.bytes().all(|b| b.is_ascii_digit()) {
        return true;
    }
    due.parse::<i64>().map_or(true, |due| due < cutoff)
}

/// The numbers rank.lua returns for a whole batch, after each user's.
#[derive(Debug, Clone, Copy)]
struct RankBatch {
    counters: ranks::Counters,
    first_ms: i64,
    rate: i64,
    interval_ms: u64,
    /// Redis's time (ms).
    now_ms: u64,
    /// The arrival from which a poll is decided far back.
    far_from: u64,
    /// Whether polls far back are decided from the heartbeat alone.
    fast: bool,
}

/// rank.lua's answer: each user's numbers, and the batch's.
fn rank_batch(flat: &[i64]) -> Result<(&[i64], RankBatch), StoreError> {
    let Some(split) = flat.len().checked_sub(12) else {
        return Err(StoreError::Failed("rank: no batch numbers".into()));
    };
    let (each, b) = flat.split_at(split);
    Ok((
        each,
        RankBatch {
            counters: counters(&b[..6])?,
            first_ms: b[6],
            rate: b[7],
            interval_ms: count(b[8])?,
            now_ms: count(b[9])?,
            far_from: count(b[10])?,
            fast: b[11] == 1,
        },
    ))
}

/// A heartbeat as `<due>:<arrival>`: the due time, and the arrival as
/// written and as a number; `None` for any other form (rank.lua's path
/// reads those).
fn far_heartbeat(value: &str) -> Option<(u64, (&str, u64))> {
    let (due, arrival) = value.split_once(':')?;
    Some((due.parse().ok()?, (arrival, arrival.parse().ok()?)))
}

/// The counters of departures from a queue's waiting set, and of users
/// placed in it anywhere but at the tail, as `HMGET` reads them.
type Departures = Vec<Option<String>>;

/// Reads a queue's [`Departures`].
fn departures(keys: &QueueKeys) -> redis::Cmd {
    let mut hmget = redis::cmd("HMGET");
    hmget
        .arg(&keys.admission)
        .arg(&["epoch", "total", "removed", "added"]);
    hmget
}

/// rank.lua's rules for a poll far back (its pass over `fast` users), as
/// of one batch.
struct Far {
    /// Heartbeats due before this are past the timeout.
    oldest: i64,
    far_from: u64,
    far_to: u64,
    /// The time left that a poll keeps, in ms.
    keep: (i64, i64),
    /// The advice far back, and the heartbeat a poll that writes leaves.
    advice: u64,
    due: u64,
    /// The end of the candidates' bucket of `due` (`file` in lua/lib.lua).
    bucket: u64,
}

impl Far {
    fn new(batch: &RankBatch, heartbeat: &HeartbeatConfig, far_to: u64) -> Far {
        let pmin = heartbeat.poll_min.as_millis() as i64;
        let pmax = heartbeat.poll_max.as_millis() as i64;
        let due = batch.now_ms + pmax as u64;
        let span = pmin.clamp(1, 1000) as u64;
        Far {
            oldest: batch.now_ms as i64 - heartbeat.timeout.as_millis() as i64,
            far_from: batch.far_from,
            far_to,
            keep: (pmin.max(pmax / 2), pmax.min(pmax + pmax / 4)),
            advice: pmax as u64,
            due,
            bucket: (due / span + 1) * span,
        }
    }

    /// Whether a user with this heartbeat and arrival is decided far back.
    fn holds(&self, due: u64, arrival: u64) -> bool {
        due as i64 >= self.oldest && arrival >= self.far_from && arrival < self.far_to
    }

    /// Whether `left` ms until the heartbeat is a fair advice.
    fn keeps(&self, left: i64) -> bool {
        left >= self.keep.0 && left <= self.keep.1
    }
}

/// The rank counters a script returned (`rank_counters` in `lua/lib.lua`).
fn counters(numbers: &[i64]) -> Result<ranks::Counters, StoreError> {
    let [epoch, total, removed, added, joined, size] = numbers else {
        return Err(StoreError::Failed("rank counters: a short answer".into()));
    };
    Ok(ranks::Counters {
        epoch: count(*epoch)?,
        total: count(*total)?,
        removed: count(*removed)?,
        added: count(*added)?,
        joined: count(*joined)?,
        size: count(*size)?,
    })
}

/// The one answer of a batch of one.
fn one<T>(script: &'static str, mut answers: Vec<T>) -> Result<T, StoreError> {
    match (answers.pop(), answers.is_empty()) {
        (Some(answer), true) => Ok(answer),
        _ => Err(StoreError::Failed(format!("{script}: not one answer"))),
    }
}
