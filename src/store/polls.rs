//! Rank polls: the batched rank call, ranks far back derived from the
//! samples (`super::ranks`), heartbeats written far back without a script,
//! and the samples themselves.

use std::collections::HashMap;
use std::time::Duration;

use redis::ScriptInvocation;

use super::answers::{place, Closed, Place, Position};
use super::connection::{Resend, Store};
use super::error::{count, StoreError};
use super::heartbeat;
use super::keys::QueueKeys;
use super::marks;
use super::ranks::{self, NearHead, Samples};
use super::scripts::*;
use crate::config::HeartbeatConfig;

/// A call of rank.lua for `users` with its keys and settings; with
/// `derive`, the samples' range of arrivals (from, before) and exact window
/// (`nearest`) the instance derives ranks for; and with `log`, the samples
/// whose departures it has read the log of since (asked for even when
/// none can be derived now: what it has not read of the log is what may
/// keep it from deriving).
pub(super) fn rank_invocation<'a>(
    queue: QueueRef<'a>,
    derive: FarBackSamples<'_>,
    log: Option<&Samples>,
    users: &[&str],
) -> ScriptInvocation<'a> {
    let ((from, to), nearest) = derive.map_or(((0, 0), 0), |(s, range)| (range, s.nearest));
    let read = log.map_or_else(|| "-1".to_string(), Samples::departures_read);
    let mut invocation = RANK.invoke(queue.keys);
    pace_args(&mut invocation, queue);
    invocation.arg(from).arg(to).arg(nearest).arg(read);
    for user in users {
        invocation.arg(*user);
    }
    invocation
}

/// The samples' range, when ranks can be derived from them now.
pub(super) fn derive(samples: Option<&Samples>) -> FarBackSamples<'_> {
    samples.and_then(|s| Some((s, s.range()?)))
}

/// The most users one batched script call takes (the scripts refuse more):
/// it bounds how long one call holds Redis.
pub const MAX_USERS_PER_SCRIPT: usize = 500;

/// How a poll's answer was found, which is what it cost Redis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PollPath {
    /// A place far back, decided by the instance from the user's heartbeat
    /// and the samples: plain commands, no script.
    Instance,
    /// The same, from the mark of the number the user's credential brought
    /// (see `marks` in `lua/lib.lua`): no lookup of the user at all.
    Marked,
    /// A place far back, derived by rank.lua from the samples.
    Derived,
    /// A place near the head (nearer than ranks are derived), or in a
    /// queue too short to sample: walked in the waiting set (`ZRANK`).
    Near,
    /// A place far back walked in the waiting set (`ZRANK`) by the first
    /// call: the departures since the samples were taken left them too
    /// coarse there.
    Walked,
    /// A place asked again, exactly, in a second call: one the samples
    /// could not tell within their bound (departures since they were
    /// taken).
    Again,
    /// Not waiting: admitted, pre-queued, unknown or closed.
    Other,
}

impl PollPath {
    pub const ALL: [PollPath; 7] = [
        PollPath::Instance,
        PollPath::Marked,
        PollPath::Derived,
        PollPath::Near,
        PollPath::Walked,
        PollPath::Again,
        PollPath::Other,
    ];

    /// The metrics' label.
    pub fn label(self) -> &'static str {
        match self {
            PollPath::Instance => "instance",
            PollPath::Marked => "marked",
            PollPath::Derived => "derived",
            PollPath::Near => "near",
            PollPath::Walked => "walked",
            PollPath::Again => "again",
            PollPath::Other => "other",
        }
    }
}

/// A poll's answer, how it was found, and how old the samples were that
/// this instance held for the queue (`None`: it held none).
#[derive(Debug, Clone)]
pub struct Polled {
    pub position: Position,
    pub path: PollPath,
    pub sample_age: Option<Duration>,
    /// For a user not queued: when Redis last lost state (ms), while that
    /// loss's users may still be seated again, as the call that found the
    /// user not queued read it. A credential older than it may name a
    /// place lost then (`lua/reseat.lua`); without one, none can.
    pub lost_at: Option<u64>,
}

/// An answer to a poll, and how it was found.
#[derive(Debug, Clone)]
pub(super) struct RankAnswer {
    position: Position,
    path: PollPath,
    /// See [`Polled::lost_at`].
    lost_at: Option<u64>,
}

impl RankAnswer {
    /// Whether its rank was walked in the waiting set (rank.lua's exact
    /// path) rather than derived or decided far back.
    fn walked(&self) -> bool {
        matches!(
            self.path,
            PollPath::Near | PollPath::Walked | PollPath::Again
        )
    }
}

/// rank.lua's answers for `asked` users (`each`, four numbers a user):
/// `None` where a derived rank could not be told.
pub(super) fn rank_answers(
    each: &[i64],
    batch: &RankBatch,
    samples: Option<&Samples>,
    asked: usize,
) -> Result<Vec<Option<RankAnswer>>, StoreError> {
    let told = |position, path| {
        Ok(Some(RankAnswer {
            position,
            path,
            lost_at: None,
        }))
    };
    answers("rank", each, 4, asked)?
        .map(|a| {
            let (code, value, wait, advice) = (a[0], a[1], a[2], a[3]);
            match RankCode::of(code)? {
                RankCode::NotQueued => Ok(Some(RankAnswer {
                    position: Position::NotQueued,
                    path: PollPath::Other,
                    lost_at: Some(count(value)?).filter(|&at| at > 0),
                })),
                RankCode::Waiting => told(
                    Position::Waiting(place(value, wait, advice)?),
                    PollPath::Walked,
                ),
                RankCode::FarBack => {
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
                        PollPath::Derived,
                    )
                }
                RankCode::Active => told(
                    Position::Active {
                        expires_at_ms: count(value)?,
                    },
                    PollPath::Other,
                ),
                RankCode::Prequeued => told(
                    Position::Prequeued {
                        opens_in_ms: count(value)?,
                        poll_after_ms: count(advice)?,
                    },
                    PollPath::Other,
                ),
                // The message is read once for the batch: see
                // `Store::polled`.
                RankCode::Closed => told(Position::Closed(Closed::default()), PollPath::Other),
            }
        })
        .collect()
}

/// Decides the polls far back among `read` (their places in the batch
/// and their users) from their heartbeats (`values`) as rank.lua's pass
/// far back would, into `told`; returns the heartbeats to write (user,
/// value, arrival). A user twice in the batch gets one decision.
pub(super) fn decide_far<'u>(
    far: &FarBack,
    batch: &RankBatch,
    samples: &Samples,
    (read, read_users): (&[usize], &[&'u str]),
    values: &[Option<String>],
    told: &mut [Option<RankAnswer>],
) -> Vec<(&'u str, String, u64)> {
    let mut written: Vec<(&str, String, u64)> = Vec::new();
    let mut decided: HashMap<&str, RankAnswer> = HashMap::new();
    for ((&i, user), value) in read.iter().zip(read_users).zip(values) {
        if let Some(again) = decided.get(user) {
            told[i] = Some(again.clone());
            continue;
        }
        let Some((due, arrival)) = value.as_deref().and_then(heartbeat::parse) else {
            continue;
        };
        let Some((answer, write)) = far.decide(batch, samples, due, arrival.1, PollPath::Instance)
        else {
            continue;
        };
        if write {
            written.push((user, format!("{}:{}", far.due, arrival.0), arrival.1));
        }
        decided.insert(user, answer.clone());
        told[i] = Some(answer);
    }
    written
}

/// One reply of a pipeline, as `T`.
fn reply_as<T: redis::FromRedisValue>(
    reply: Option<redis::Value>,
    what: &str,
) -> Result<T, StoreError> {
    let reply = reply.ok_or_else(|| StoreError::Failed(format!("poll: no {what}")))?;
    redis::from_redis_value(reply).map_err(|e| StoreError::Failed(format!("poll: {what}: {e}")))
}

/// A mark a poll far back writes: the user, the arrival its credential
/// names, and the number's offset in the marks.
pub(super) struct MarkWrite<'u> {
    user: &'u str,
    arrival: u64,
    offset: u64,
}

/// What `poll_many` writes far back: heartbeats (user, value, arrival) and
/// marks.
#[derive(Default)]
pub(super) struct Writes<'u> {
    hashed: Vec<(&'u str, String, u64)>,
    marked: Vec<MarkWrite<'u>>,
}

impl<'u> Writes<'u> {
    fn users(&self) -> impl Iterator<Item = &'u str> + '_ {
        self.hashed
            .iter()
            .map(|w| w.0)
            .chain(self.marked.iter().map(|w| w.user))
    }

    fn is_empty(&self) -> bool {
        self.hashed.is_empty() && self.marked.is_empty()
    }
}

/// The marks `poll_many` read: for each numbered user (its place in the
/// batch, the arrival its credential names, its number's offset), its
/// number's slot (the mark and the tag of the arrival it was given at, see
/// [`marks::slot_parts`]).
pub(super) struct MarksRead<'a> {
    marked: &'a [(usize, u64, u64)],
    slots: &'a [i64],
}

/// Decides the polls far back of users who brought their number, from
/// their marks, as [`decide_far`] does from heartbeats: a mark counts only
/// where its number was given at the arrival the credential names (its tag,
/// the arrival mod 2^32, so that it is this registration's, whatever Redis
/// lost or numbered since).
/// Returns the marks to write.
pub(super) fn decide_marked<'u>(
    far: &FarBack,
    batch: &RankBatch,
    samples: &Samples,
    users: &[&'u str],
    read: &MarksRead<'_>,
    told: &mut [Option<RankAnswer>],
) -> Vec<MarkWrite<'u>> {
    let mut written = Vec::new();
    let mut decided: HashMap<&str, RankAnswer> = HashMap::new();
    for (&(i, arrival, offset), &slot) in read.marked.iter().zip(read.slots) {
        let user = users[i];
        if let Some(again) = decided.get(user) {
            told[i] = Some(again.clone());
            continue;
        }
        let (mark, tag) = marks::slot_parts(slot);
        if tag != marks::tag_of(arrival) {
            continue;
        }
        let Some(due) = marks::mark_due(mark, batch.now_ms) else {
            continue;
        };
        let Some((answer, write)) = far.decide(batch, samples, due, arrival, PollPath::Marked)
        else {
            continue;
        };
        if write {
            written.push(MarkWrite {
                user,
                arrival,
                offset,
            });
        }
        decided.insert(user, answer.clone());
        told[i] = Some(answer);
    }
    written
}

/// Drops the answers of `again`, everywhere each user is in the batch:
/// rank.lua answers them instead.
pub(super) fn forget<'u>(
    told: &mut [Option<RankAnswer>],
    users: &[&str],
    again: impl Iterator<Item = &'u str>,
) {
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
pub(super) fn late_write(heartbeat: &HeartbeatConfig) -> Duration {
    heartbeat.poll_min.min(Duration::from_secs(1))
}

/// The numbers rank.lua returns for a whole batch, after each user's.
#[derive(Debug, Clone, Copy)]
pub(super) struct RankBatch {
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

/// Departures logged, as rank.lua returns them: the number of the one
/// before the first, whether they follow on from what the instance read,
/// and the arrivals of each.
pub(super) type LoggedDepartures = (u64, bool, Vec<u64>);

/// rank.lua's answer for `asked` users: each user's numbers, the
/// batch's, and the departures logged that it returned, if asked for.
pub(super) fn rank_batch(
    flat: &[i64],
    asked: usize,
) -> Result<(&[i64], RankBatch, Option<LoggedDepartures>), StoreError> {
    let short = || StoreError::Failed("rank: no batch numbers".into());
    let each = flat.get(..asked * 4).ok_or_else(short)?;
    let b = flat.get(asked * 4..asked * 4 + 12).ok_or_else(short)?;
    let departed = match flat.get(asked * 4 + 12..).unwrap_or(&[]) {
        [] => None,
        [_] => return Err(short()),
        [from, follows, arrivals @ ..] => Some((
            count(*from)?,
            *follows == 1,
            arrivals
                .iter()
                .map(|&a| count(a))
                .collect::<Result<_, _>>()?,
        )),
    };
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
        departed,
    ))
}

/// rank.lua's rules for a poll far back (its pass over `fast` users), as
/// of one batch.
pub(super) struct FarBack {
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

impl FarBack {
    fn new(batch: &RankBatch, heartbeat: &HeartbeatConfig, far_to: u64) -> FarBack {
        let pmin = heartbeat.poll_min.as_millis() as i64;
        let pmax = heartbeat.poll_max.as_millis() as i64;
        let due = batch.now_ms + pmax as u64;
        let span = pmin.clamp(1, 1000) as u64;
        FarBack {
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

    /// The answer far back to a user whose heartbeat (a `due` entry's or a
    /// mark's) is due at `due`, at `arrival`, found by `path`, and whether
    /// the heartbeat must be written anew (due at `self.due`); `None` where
    /// the poll is not decided far back.
    fn decide(
        &self,
        batch: &RankBatch,
        samples: &Samples,
        due: u64,
        arrival: u64,
        path: PollPath,
    ) -> Option<(RankAnswer, bool)> {
        if !self.holds(due, arrival) {
            return None;
        }
        let rank = samples.rank(arrival, batch.counters)?;
        let left = due as i64 - batch.now_ms as i64;
        let keep = self.keeps(left);
        let answer = RankAnswer {
            position: Position::Waiting(Place {
                rank,
                wait_ms: ranks::wait_ms(rank, batch.first_ms, batch.rate, batch.interval_ms),
                poll_after_ms: if keep { left as u64 } else { self.advice },
            }),
            path,
            lost_at: None,
        };
        Some((answer, !keep))
    }
}

/// The rank counters a script returned (`rank_counters` in `lua/lib.lua`).
pub(super) fn counters(numbers: &[i64]) -> Result<ranks::Counters, StoreError> {
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

/// Reads a queue's [`Departures`].
pub(super) fn departures(keys: &QueueKeys) -> redis::Cmd {
    let mut hmget = redis::cmd("HMGET");
    hmget
        .arg(&keys.admission)
        .arg(&["epoch", "total", "removed", "added"]);
    hmget
}

/// How many of the departure log's newest entries a write far back reads
/// with its counters: the departures between an instance's read and its
/// write (a round trip) are a few; more than this, and the written users'
/// scores are read instead.
const LOG_TAIL: usize = 64;

/// The departure log's key (`departed_log` in lua/lib.lua).
fn departed_log(keys: &QueueKeys) -> String {
    format!("{}:departed", keys.admission)
}

/// The departure counters and, read right after them, the departure log's
/// newest entry: what a write far back compares what it reads after with.
pub(super) struct Before {
    counters: Departures,
    newest: Option<String>,
}

/// Adds the reads of a [`Before`] to `pipe`.
fn read_before(keys: &QueueKeys, pipe: &mut redis::Pipeline) {
    pipe.add_command(departures(keys))
        .cmd("LINDEX")
        .arg(departed_log(keys))
        .arg(-1);
}

/// What the write far back reads after it, in the same round trip: the
/// counters, the newest entries of the departure log, and the gate's
/// frontier (the highest place admitted).
fn read_after(keys: &QueueKeys, pipe: &mut redis::Pipeline) {
    pipe.add_command(departures(keys))
        .cmd("LRANGE")
        .arg(departed_log(keys))
        .arg(-(LOG_TAIL as i64))
        .arg(-1)
        .cmd("HGET")
        .arg(&keys.admission)
        .arg("frontier");
}

/// Of the users a write far back named (`arrivals`, each one's place as
/// written), those no longer waiting there, told from what changed since
/// `before`: every departure is logged with its place, and an admission
/// takes the lowest places, so that a user who left has a place among the
/// departures logged since, or one at or below the gate's `frontier`.
/// `None` when that cannot tell, and the scores are read instead: users
/// placed anywhere but at the tail (`added`), a waiting set that started
/// anew (`epoch`), counters that went back, a log whose newest entry as
/// read before is not in the tail read after (a Redis that went back in
/// time and numbered departures again), or departures past the tail.
fn moved_by_log(
    before: &Before,
    after: &Departures,
    tail: &[String],
    frontier: Option<&str>,
    arrivals: impl Iterator<Item = u64>,
) -> Option<Vec<bool>> {
    let number = |d: &Departures, i: usize| -> Option<u64> {
        match d.get(i)? {
            None => Some(0),
            Some(text) => text.parse().ok(),
        }
    };
    let [epoch, total, removed, added] = [0, 1, 2, 3];
    let b = &before.counters;
    if b.len() != 4 || after.len() != 4 || b[epoch] != after[epoch] {
        return None;
    }
    if number(b, added)? != number(after, added)? || number(after, total)? < number(b, total)? {
        return None;
    }
    let (from, to) = (number(b, removed)?, number(after, removed)?);
    if to < from {
        return None;
    }
    // The log as read before must go on in the log read after.
    match &before.newest {
        Some(newest) => {
            let (n, _) = newest.split_once(':')?;
            if n.parse::<u64>().ok()? < from || !tail.contains(newest) {
                return None;
            }
        }
        None if from > 0 => return None,
        None => {}
    }
    // The departures numbered from + 1 to `to`, each by its place.
    let mut left = std::collections::HashSet::new();
    for entry in tail {
        let (n, arrival) = entry.split_once(':')?;
        let n: u64 = n.parse().ok()?;
        if n > from && n <= to {
            left.insert(arrival.parse::<f64>().ok()? as u64);
        }
    }
    if left.len() as u64 != to - from {
        return None;
    }
    let frontier = match frontier {
        Some(text) => text.parse::<f64>().ok()? as u64,
        None => 0,
    };
    Some(
        arrivals
            .map(|a| left.contains(&a) || a <= frontier)
            .collect(),
    )
}

/// Samples ranks far back are derived from, with their range as read once
/// for a batch ([`Samples::range`]).
pub(super) type FarBackSamples<'s> = Option<(&'s Samples, (u64, u64))>;

/// The counters of departures from a queue's waiting set, and of users
/// placed in it anywhere but at the tail, as `HMGET` reads them.
pub(super) type Departures = Vec<Option<String>>;

impl Store {
    pub async fn rank(
        &self,
        queue: QueueRef<'_>,
        user: &str,
        samples: Option<&Samples>,
    ) -> Result<Polled, StoreError> {
        one("rank", self.rank_many(queue, &[user], samples).await?)
    }
    /// The places of each of `users` (at most [`MAX_USERS_PER_SCRIPT`]) in one script
    /// call, keeping those waiting alive. With `samples`, ranks far back are
    /// derived from them (see [`ranks`]); any that cannot be told within
    /// 0.1% are asked again, exactly, in a second call.
    pub async fn rank_many(
        &self,
        queue: QueueRef<'_>,
        users: &[&str],
        samples: Option<&Samples>,
    ) -> Result<Vec<Polled>, StoreError> {
        let told = self.rank_many_told(queue, users, samples).await?;
        self.polled(queue.keys, told, samples).await
    }
    /// The answers of a batch, those a script found closed given the
    /// operator's message (one read for the batch, only when there are
    /// any).
    /// Walked places nearer than the samples' first are told apart here.
    async fn polled(
        &self,
        keys: &QueueKeys,
        told: Vec<RankAnswer>,
        samples: Option<&Samples>,
    ) -> Result<Vec<Polled>, StoreError> {
        let sample_age = samples.map(|s| s.taken.elapsed());
        let nearest = samples.map_or(u64::MAX, |s| s.nearest);
        let mut polled: Vec<Polled> = told
            .into_iter()
            .map(|t| Polled {
                path: match (t.path, &t.position) {
                    (PollPath::Walked, Position::Waiting(p)) if p.rank < nearest => PollPath::Near,
                    (path, _) => path,
                },
                position: t.position,
                sample_age,
                lost_at: t.lost_at,
            })
            .collect();
        if polled
            .iter()
            .any(|p| matches!(p.position, Position::Closed(_)))
        {
            let closed = self.closed_message(keys).await?;
            for p in &mut polled {
                if let Position::Closed(c) = &mut p.position {
                    *c = closed.clone();
                }
            }
        }
        Ok(polled)
    }
    /// [`Store::rank_many`], saying of each answer whether its rank was
    /// walked in the waiting set (near the head).
    async fn rank_many_told(
        &self,
        queue: QueueRef<'_>,
        users: &[&str],
        samples: Option<&Samples>,
    ) -> Result<Vec<RankAnswer>, StoreError> {
        self.rank_many_seen(queue, users, samples, None).await
    }
    /// [`Store::rank_many_told`], keeping in `near` (where given) the
    /// arrival from which the call decided polls far back.
    async fn rank_many_seen(
        &self,
        queue: QueueRef<'_>,
        users: &[&str],
        samples: Option<&Samples>,
        near: Option<&NearHead>,
    ) -> Result<Vec<RankAnswer>, StoreError> {
        let derived = derive(samples);
        let (mut told, batch) = self.rank_call(queue, users, derived, samples).await?;
        if let (Some(near), Some(_)) = (near, derived) {
            near.see_far_from(batch.far_from);
        }
        let exact: Vec<usize> = (0..users.len()).filter(|&i| told[i].is_none()).collect();
        if !exact.is_empty() {
            let again: Vec<&str> = exact.iter().map(|&i| users[i]).collect();
            let (answers, _) = self.rank_call(queue, &again, None, None).await?;
            for (i, answer) in exact.into_iter().zip(answers) {
                told[i] = answer.map(|a| RankAnswer {
                    path: match a.path {
                        PollPath::Walked => PollPath::Again,
                        other => other,
                    },
                    ..a
                });
            }
        }
        told.into_iter()
            .map(|t| t.ok_or_else(|| StoreError::Failed("rank: a rank not derived".into())))
            .collect()
    }
    /// One call of rank.lua for `users`: each one's answer (`None` where a
    /// derived rank could not be told), and the batch's numbers. `log`'s
    /// samples take the departures and counters it read.
    async fn rank_call(
        &self,
        queue: QueueRef<'_>,
        users: &[&str],
        derive: FarBackSamples<'_>,
        log: Option<&Samples>,
    ) -> Result<(Vec<Option<RankAnswer>>, RankBatch), StoreError> {
        let invocation = rank_invocation(queue, derive, log, users);
        let flat: Vec<i64> = self.run(invocation, Resend::Safe).await?;
        let (each, batch, departed) = rank_batch(&flat, users.len())?;
        if let (Some(s), Some((from, follows, arrivals))) = (log, departed) {
            s.note_departures(from, follows, &arrivals, &batch.counters);
        }
        let samples = derive.map(|(s, _)| s);
        Ok((rank_answers(each, &batch, samples, users.len())?, batch))
    }
    /// The places of `users` as [`Store::rank_many`] tells them, with the
    /// polls far back decided here in plain commands (one `HMGET` of the
    /// heartbeats beside a script call for the batch's numbers, one write
    /// for all), as rank.lua's pass far back would decide them with
    /// Redis's time of that call; users `near` names, and any this cannot
    /// decide, are asked of rank.lua. A user whose credential brought its
    /// registration's number (`numbered`, each user's (arrival, number))
    /// has its mark read and written instead of its heartbeat (see `marks`
    /// in `lua/lib.lua`). Invariant: a write that may name an arrival no
    /// longer the user's is put right before its answer goes out
    /// ([`Store::write_far`]). Why, and what it gives up: docs/scale.md,
    /// "Polls far back decided by the instance".
    pub async fn poll_many(
        &self,
        queue: QueueRef<'_>,
        users: &[&str],
        numbered: &[Option<(u64, u64)>],
        samples: Option<&Samples>,
        near: &NearHead,
    ) -> Result<Vec<Polled>, StoreError> {
        let told = self
            .poll_many_told(queue, users, numbered, samples, near)
            .await?;
        // Near the head: walked, and nearer than ranks are derived. (A rank
        // is also walked past the last sample, for users who joined since
        // it was taken: far back, and soon sampled.)
        let nearest = samples.map_or(0, |s| s.nearest);
        near.note(users.iter().zip(&told).map(|(u, t)| {
            let near_head =
                t.walked() && matches!(t.position, Position::Waiting(p) if p.rank < nearest);
            (*u, near_head)
        }));
        self.polled(queue.keys, told, samples).await
    }
    async fn poll_many_told(
        &self,
        queue: QueueRef<'_>,
        users: &[&str],
        numbered: &[Option<(u64, u64)>],
        samples: Option<&Samples>,
        near: &NearHead,
    ) -> Result<Vec<RankAnswer>, StoreError> {
        let Some((samples, range)) = derive(samples) else {
            return self.rank_many_told(queue, users, samples).await;
        };
        // Users last answered near the head go to rank.lua in the first
        // call, beside the batch's numbers; of the others, the marks of
        // those who brought a number are read (at the base of the numbers
        // last seen: the read says whether it still is), the heartbeats
        // of the rest.
        let hints = near.hints(users);
        let base = near.numbers_base();
        // A credential's arrival nearer the head than the last batch decided
        // far back, or past the samples, is walked: in the first call.
        let (far_from, far_to) = (near.far_from(), range.1);
        let walked = |(arrival, _): (u64, u64)| arrival < far_from || arrival >= far_to;
        let mut hinted = Vec::new();
        let mut read = Vec::new();
        let mut marked: Vec<(usize, u64, u64)> = Vec::new();
        for (i, &hint) in hints.iter().enumerate() {
            match (numbered.get(i).copied().flatten(), base) {
                _ if hint => hinted.push(i),
                (Some(n), _) if walked(n) => hinted.push(i),
                (Some((arrival, number)), Some(base))
                    if number >= base && number - base < marks::MAX_NUMBERS =>
                {
                    marked.push((i, arrival, number - base))
                }
                _ => read.push(i),
            }
        }
        if read.is_empty() && marked.is_empty() {
            // (Every user asked in the first call: where far back starts is
            // kept all the same, or a hint past it would keep every poll
            // here.)
            return self
                .rank_many_seen(queue, users, Some(samples), Some(near))
                .await;
        }
        let first_users: Vec<&str> = hinted.iter().map(|&i| users[i]).collect();
        let read_users: Vec<&str> = read.iter().map(|&i| users[i]).collect();
        // The departure counters, read before the heartbeats and the
        // marks: see `write_far`.
        let mut pipe = redis::pipe();
        read_before(queue.keys, &mut pipe);
        pipe.cmd("HGET").arg(&queue.keys.numbering).arg("base");
        if !read_users.is_empty() {
            pipe.cmd("HMGET").arg(&queue.keys.due).arg(&read_users);
        }
        if !marked.is_empty() {
            // Each number's whole slot, the mark and its tag, in one read.
            let mut bitfield = redis::cmd("BITFIELD_RO");
            bitfield.arg(&queue.keys.marks);
            for (_, _, offset) in &marked {
                bitfield.arg("GET").arg("i64").arg(format!("#{offset}"));
            }
            pipe.add_command(bitfield);
        }
        // Both at once on the shared connection: one round trip.
        let pipe = &pipe;
        let asked = std::time::Instant::now();
        let ((first, batch), replies) = futures::try_join!(
            self.rank_call(queue, &first_users, Some((samples, range)), Some(samples)),
            self.call(Resend::Safe, |mut c| async move {
                pipe.query_async::<Vec<redis::Value>>(&mut c).await
            }),
        )?;
        let mut replies = replies.into_iter();
        let counters: Departures = reply_as(replies.next(), "counters")?;
        let newest: Option<String> = reply_as(replies.next(), "log")?;
        let base_now: Option<u64> = reply_as(replies.next(), "base")?;
        let values: Vec<Option<String>> = match read_users.is_empty() {
            true => Vec::new(),
            false => reply_as(replies.next(), "heartbeats")?,
        };
        let slots: Vec<i64> = match marked.is_empty() {
            true => Vec::new(),
            false => reply_as(replies.next(), "marks")?,
        };
        near.see_numbers_base(base_now);
        near.see_far_from(batch.far_from);
        let mut told: Vec<Option<RankAnswer>> = vec![None; users.len()];
        for (&i, answer) in hinted.iter().zip(first) {
            told[i] = answer;
        }
        if batch.fast {
            let far = FarBack::new(&batch, queue.heartbeat, range.1);
            let mut written = Writes::default();
            if values.len() == read_users.len() {
                written.hashed = decide_far(
                    &far,
                    &batch,
                    samples,
                    (&read, &read_users),
                    &values,
                    &mut told,
                );
            }
            if base_now == base && slots.len() == marked.len() {
                let read = MarksRead {
                    marked: &marked,
                    slots: &slots,
                };
                written.marked = decide_marked(&far, &batch, samples, users, &read, &mut told);
            }
            if asked.elapsed() > late_write(queue.heartbeat) {
                // Written late (an instance that stalled between its read
                // and its write), a heartbeat could overwrite a later one
                // another poll wrote meanwhile with an earlier one; past a
                // bound, those users are asked of rank.lua instead, which
                // writes with its own time. (Bytes the network delivers late
                // after they were sent are not covered: see docs/scale.md.)
                forget(&mut told, users, written.users());
            } else if !written.is_empty() {
                // Users found moved after the write are asked again, exactly.
                let before = Before { counters, newest };
                let moved = self.write_far(queue.keys, &far, &written, &before).await?;
                forget(&mut told, users, moved.into_iter());
            }
        }
        let rest: Vec<usize> = (0..users.len()).filter(|&i| told[i].is_none()).collect();
        if !rest.is_empty() {
            let asked: Vec<&str> = rest.iter().map(|&i| users[i]).collect();
            let answers = self.rank_many_told(queue, &asked, Some(samples)).await?;
            for (i, answer) in rest.into_iter().zip(answers) {
                told[i] = Some(answer);
            }
        }
        Ok(told.into_iter().flatten().collect())
    }
    /// Writes what `poll_many` decided: the heartbeats (user, value,
    /// arrival), the candidates first, as rank.lua files them (`file_all`
    /// in lua/lib.lua), then the values; and the marks. Returns the users
    /// found moved (left, or joined again at another arrival, between the
    /// read and the write), whose writes are put right (`lua/recheck.lua`
    /// for heartbeats; a mark of a registration gone is cleared) and whose
    /// answers must be asked again. Scores are read only when the
    /// departure counters moved since the read: nobody leaves the waiting
    /// set, or is placed in it anywhere but at the tail, without moving one
    /// (`counted` in lua/lib.lua). Why: docs/scale.md, "Polls far back
    /// decided by the instance".
    async fn write_far<'u>(
        &self,
        keys: &QueueKeys,
        far: &FarBack,
        written: &Writes<'u>,
        before: &Before,
    ) -> Result<Vec<&'u str>, StoreError> {
        let mut pipe = redis::pipe();
        if !written.hashed.is_empty() {
            let bucket = far.bucket.to_string();
            let users: Vec<&str> = written.hashed.iter().map(|w| w.0).collect();
            let mut hset = redis::cmd("HSET");
            hset.arg(&keys.due);
            for (user, value, _) in &written.hashed {
                hset.arg(*user).arg(value);
            }
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
                .ignore();
        }
        if !written.marked.is_empty() {
            let mark = marks::mark_of(far.due);
            let mut bitfield = redis::cmd("BITFIELD");
            bitfield.arg(&keys.marks);
            for w in &written.marked {
                bitfield
                    .arg("SET")
                    .arg("u32")
                    .arg(marks::mark_bits(w.offset))
                    .arg(mark);
            }
            pipe.add_command(bitfield).ignore();
        }
        read_after(keys, &mut pipe);
        let pipe = &pipe;
        type After = (Departures, Vec<String>, Option<String>);
        let (after, tail, frontier): After = self
            .call(Resend::Safe, |mut c| async move {
                pipe.query_async::<After>(&mut c).await
            })
            .await?;
        let all: Vec<(&str, u64)> = written
            .hashed
            .iter()
            .map(|w| (w.0, w.2))
            .chain(written.marked.iter().map(|w| (w.user, w.arrival)))
            .collect();
        let moved = match moved_by_log(
            before,
            &after,
            &tail,
            frontier.as_deref(),
            all.iter().map(|w| w.1),
        ) {
            Some(moved) => moved,
            None => {
                let mut zmscore = redis::cmd("ZMSCORE");
                zmscore.arg(&keys.waiting);
                for (user, _) in &all {
                    zmscore.arg(*user);
                }
                let zmscore = &zmscore;
                let scores: Vec<Option<f64>> = self
                    .call(Resend::Safe, |mut c| async move {
                        zmscore.query_async::<Vec<Option<f64>>>(&mut c).await
                    })
                    .await?;
                all.iter()
                    .zip(&scores)
                    .map(|((_, arrival), score)| score.map(|s| s as u64) != Some(*arrival))
                    .collect()
            }
        };
        let (hashed_moved, marked_moved) = moved.split_at(written.hashed.len());
        let mut out = Vec::new();
        let hashed: Vec<&(&'u str, String, u64)> = written
            .hashed
            .iter()
            .zip(hashed_moved)
            .filter(|(_, &moved)| moved)
            .map(|(w, _)| w)
            .collect();
        if !hashed.is_empty() {
            let mut invocation = RECHECK.invoke(keys);
            for (user, value, _) in &hashed {
                invocation.arg(*user).arg(value);
            }
            self.run::<i64>(invocation, Resend::Safe).await?;
            out.extend(hashed.iter().map(|w| w.0));
        }
        let marked: Vec<&MarkWrite<'u>> = written
            .marked
            .iter()
            .zip(marked_moved)
            .filter(|(_, &moved)| moved)
            .map(|(w, _)| w)
            .collect();
        if !marked.is_empty() {
            // The registration each mark was written for is gone: its mark
            // is cleared (a number names one registration).
            let mut bitfield = redis::cmd("BITFIELD");
            bitfield.arg(&keys.marks);
            for w in &marked {
                bitfield
                    .arg("SET")
                    .arg("u32")
                    .arg(marks::mark_bits(w.offset))
                    .arg(0);
            }
            let bitfield = &bitfield;
            self.call(Resend::Safe, |mut c| async move {
                bitfield.query_async::<redis::Value>(&mut c).await
            })
            .await?;
            out.extend(marked.iter().map(|w| w.user));
        }
        Ok(out)
    }
    /// The counters of a queue's waiting set (`samples.lua` asked for no
    /// place).
    pub(super) async fn sample_counters(
        &self,
        keys: &QueueKeys,
    ) -> Result<ranks::Counters, StoreError> {
        let mut invocation = SAMPLES.invoke(keys);
        invocation.arg(u64::MAX);
        let flat: Vec<i64> = self.run(invocation, Resend::Safe).await?;
        counters(flat.get(..6).unwrap_or(&[]))
    }
    /// Takes the samples of a queue's waiting set from place `first` on, in
    /// bounded read-only steps; `None` if the set started anew or changed
    /// uncounted meanwhile. `admitted`: the users admitted so far, as the
    /// set's counters read just before say (places are counted with them).
    pub async fn take_samples(
        &self,
        keys: &QueueKeys,
        first: u64,
        admitted: u64,
    ) -> Result<Option<Samples>, StoreError> {
        let taken = std::time::Instant::now();
        let mut points = Vec::new();
        let mut steps = Vec::new();
        // Places, counted with those admitted: the first of the first step
        // is `first` from the head as the sampling starts.
        let mut next = first.saturating_add(admitted);
        loop {
            let mut invocation = SAMPLES.invoke(keys);
            let mut place = next;
            let step: Vec<u64> = (0..ranks::PLACES_PER_SAMPLES_CALL)
                .map(|_| {
                    let this = place;
                    place = ranks::after(this);
                    this
                })
                .collect();
            next = place;
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
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counters(epoch: &str, total: u64, removed: u64, added: u64) -> Departures {
        [
            epoch,
            &total.to_string(),
            &removed.to_string(),
            &added.to_string(),
        ]
        .into_iter()
        .map(|n| Some(n.to_string()))
        .collect()
    }

    fn log(entries: &[(u64, u64)]) -> Vec<String> {
        entries.iter().map(|(n, a)| format!("{n}:{a}")).collect()
    }

    fn before(total: u64, removed: u64, newest: Option<(u64, u64)>) -> Before {
        Before {
            counters: counters("1", total, removed, 0),
            newest: newest.map(|(n, a)| format!("{n}:{a}")),
        }
    }

    #[test]
    fn a_user_not_queued_carries_the_loss_that_may_have_taken_the_place() {
        // Two users not queued, one told of a loss at 1,795,000,000,000 ms,
        // one of none; then the batch's twelve numbers: the counters, then
        // first_ms, rate, interval, Redis's time, far_from and fast.
        let mut flat = vec![0, 1_795_000_000_000, 0, 0, 0, 0, 0, 0];
        flat.extend([1, 10, 5, 0, 0, 5]);
        flat.extend([0, 1_000_000, 1000, 1_795_000_001_000, 0, 1]);
        let (each, batch, departed) = rank_batch(&flat, 2).unwrap();
        assert!(departed.is_none());
        let told = rank_answers(each, &batch, None, 2).unwrap();
        let told: Vec<(Position, Option<u64>)> = told
            .into_iter()
            .map(|t| t.map(|t| (t.position, t.lost_at)).unwrap())
            .collect();
        assert_eq!(
            told,
            [
                (Position::NotQueued, Some(1_795_000_000_000)),
                (Position::NotQueued, None)
            ]
        );
    }

    #[test]
    fn the_log_and_the_frontier_tell_who_left_between_the_read_and_the_write() {
        let b = before(10, 5, Some((5, 100)));
        let tail = log(&[(4, 90), (5, 100), (6, 300), (7, 500)]);
        let after = counters("1", 10, 7, 0);
        let moved = moved_by_log(&b, &after, &tail, Some("50"), [300, 400, 500].into_iter());
        assert_eq!(moved, Some(vec![true, false, true]));
        // Nothing changed: nobody moved.
        let after = counters("1", 10, 5, 0);
        let moved = moved_by_log(&b, &after, &tail[..2], Some("50"), [300].into_iter());
        assert_eq!(moved, Some(vec![false]));
        // Admitted meanwhile: whoever is at or below the frontier, written
        // as Redis writes a score.
        let after = counters("1", 12, 5, 0);
        let moved = moved_by_log(
            &b,
            &after,
            &tail[..2],
            Some("3.5e2"),
            [300, 350, 400].into_iter(),
        );
        assert_eq!(moved, Some(vec![true, true, false]));
        // A queue with no departure yet.
        let b = before(0, 0, None);
        let moved = moved_by_log(
            &b,
            &counters("1", 0, 1, 0),
            &log(&[(1, 7)]),
            None,
            [7, 8].into_iter(),
        );
        assert_eq!(moved, Some(vec![true, false]));
    }

    #[test]
    fn what_the_log_cannot_tell_is_read_from_the_scores() {
        let b = before(10, 5, Some((5, 100)));
        let cases = [
            // A departure the tail no longer holds (number 6).
            (counters("1", 10, 7, 0), log(&[(5, 100), (7, 500)])),
            // Placed anywhere but at the tail.
            (counters("1", 10, 5, 1), log(&[(5, 100)])),
            // A waiting set started anew.
            (counters("2", 10, 5, 0), log(&[(5, 100)])),
            // Counters that went back: a Redis behind the one read.
            (counters("1", 10, 4, 0), log(&[(4, 90)])),
            (counters("1", 9, 5, 0), log(&[(5, 100)])),
            // Went back and on again to the same count: departure 5 is
            // another user's now, so the log read before does not go on.
            (counters("1", 10, 5, 0), log(&[(5, 200)])),
            (counters("1", 10, 6, 0), log(&[(5, 200), (6, 300)])),
            // A malformed entry.
            (
                counters("1", 10, 6, 0),
                vec!["5:100".to_string(), "6:x".to_string()],
            ),
        ];
        for (after, tail) in cases {
            let moved = moved_by_log(&b, &after, &tail, Some("1"), [300].into_iter());
            assert_eq!(moved, None, "{after:?} {tail:?}");
        }
        // Departures counted but no log read before.
        let b = before(10, 5, None);
        let after = counters("1", 10, 5, 0);
        assert_eq!(moved_by_log(&b, &after, &[], None, [300].into_iter()), None);
    }
}
