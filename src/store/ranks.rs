//! Ranks far back, derived in the instance from samples of the waiting set
//! rather than walked in Redis.
//!
//! An exact rank is a `ZRANK`, a walk of the skiplist that costs Redis more
//! than the rest of a poll at a million waiting. Far back, where the poll
//! advice no longer depends on the rank (see `lua/rank.lua`), the script
//! returns the user's arrival (their score, a dictionary lookup) instead,
//! and the instance reads the rank off its samples: the scores at places
//! 0.04% apart, taken every [`SAMPLES_REFRESH`] in bounded read-only steps
//! (`lua/samples.lua`).
//!
//! Every change to the waiting set is counted in the admission HASH (see
//! `counted` in `lua/lib.lua`), and each sample is kept with the counters
//! as of its step: `total` admitted (all from the head, so ahead of
//! everyone still waiting: a rank drops by exactly that), `removed` (other
//! departures, which can only lower a rank) and `added` (placements, which
//! can only raise one). So between two samples the rank of an arrival lies
//! in a range that the gap between them and the changes since bound; a
//! derived rank is used only when that whole range is within 0.1% of it,
//! and is otherwise asked of Redis exactly, in a second call. Each departure
//! is also logged by its arrival (`departed` in `lua/lib.lua`), and the rank
//! call returns the log since the samples' last step with the counters: an
//! instance that has read it knows how many of those who left were ahead of
//! a user, so departures no longer widen the range, however many there
//! were; only the gap between two samples does. The counters
//! and the set's size must also agree (nothing changed the set uncounted,
//! as an instance of an earlier version or a hand edit would). So every
//! rank is within 0.1%, and exact in the first `exact-rank-window` places
//! (the script derives none nearer; samples start at [`FIRST_SAMPLED_PLACE`] or at
//! the window, if larger).

use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, RwLock};
use std::time::{Duration, Instant};

use lru::LruCache;

/// How often the holder of a queue's sampler lease looks whether its
/// samples need taking again, and the others read what it published.
pub const SAMPLES_REFRESH: Duration = Duration::from_secs(1);
/// How often they are taken while nobody is placed but at the tail:
/// admissions from the head and logged departures leave derived ranks as
/// exact as the samples, so they need taking again only for the users who
/// joined past the last of them. (Before departures were logged, each
/// widened the range a derived rank lies in, and samples were taken every
/// second while users left.)
pub const SAMPLES_REFRESH_QUIET: Duration = Duration::from_secs(5);
/// The nearest place sampled, unless the queue's exact-rank-window is
/// larger: nearer the head the advice needs the rank exactly anyway.
pub const FIRST_SAMPLED_PLACE: u64 = 10_000;
/// Samples are this fraction of their place apart, so that the gap leaves
/// more than half of the 0.1% allowed for the changes until the next refresh.
const SAMPLE_GAP_FRACTION: f64 = 0.0004;
/// Samples older than this are not used (the sampler cannot reach Redis).
pub(super) const SAMPLES_MAX_AGE: Duration = Duration::from_secs(30);
/// The departures since the samples past which they are taken again
/// however young: well inside the log's `DEPARTURES_KEPT` (50,000, in
/// `lua/lib.lua`), so that every instance can still read them all.
const DEPARTURES_FOLLOWED: u64 = 10_000;
/// The places one `samples.lua` call reads.
pub const PLACES_PER_SAMPLES_CALL: usize = 500;

/// The counters of the waiting set and its size, as a call read them
/// (`rank_counters` in `lua/lib.lua`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Counters {
    pub epoch: u64,
    pub total: u64,
    pub removed: u64,
    pub added: u64,
    pub joined: u64,
    pub size: u64,
}

impl Counters {
    /// The size less every counted change: the same at any two times if
    /// every change between them was counted.
    fn uncounted(&self) -> i128 {
        i128::from(self.size) + i128::from(self.total) + i128::from(self.removed)
            - i128::from(self.added)
            - i128::from(self.joined)
    }
}

/// One sample: the score at a place, and the counters as of then.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point {
    pub score: u64,
    /// The rank plus the `total` admitted as of the sample: admissions do
    /// not change it.
    pub lifted: u64,
    pub total: u64,
    pub removed: u64,
    pub added: u64,
}

/// One queue's samples, in ascending score (and place).
#[derive(Debug)]
pub struct Samples {
    pub epoch: u64,
    /// The nearest place a rank may be derived at (the script derives none
    /// nearer): the first sampled.
    pub nearest: u64,
    pub points: Vec<Point>,
    pub taken: Instant,
    /// [`Counters::uncounted`] of every step.
    uncounted: i128,
    /// The latest counters a rank call read (`total`, `removed`, `added`),
    /// from which [`Samples::range`] leaves out the samples the changes
    /// since made too coarse.
    seen: [AtomicU64; 3],
    /// The departures (`removed`) as of the last step: from there on, the
    /// log tells where those who left stood.
    base: u64,
    departed: RwLock<Departed>,
}

/// The departures logged after the samples' last step that this instance
/// has read (`departures_since` in `lua/lib.lua`).
#[derive(Debug, Clone)]
struct Departed {
    /// Every departure after [`Samples::base`] up to this one (as `removed`
    /// counts them) is in `arrivals`.
    through: u64,
    /// Their arrivals, ascending.
    arrivals: Vec<u64>,
    /// The arrival of departure `through`, if this read it: the log is
    /// read on only where that entry still holds it.
    last: Option<u64>,
    /// What was read cannot be trusted (the log went back, or was cut
    /// short): every departure since `base` may have been ahead.
    broken: bool,
}

impl Departed {
    /// How many of the departures known left from ahead of `score`, and
    /// how many departures as of `now` are not known: `None` if what is
    /// known runs past `now` (counters read before the log was), when
    /// every departure since `base` counts as not known.
    fn ahead_of(&self, score: u64, removed: u64) -> Option<(u64, u64)> {
        if self.broken {
            return None;
        }
        let unknown = removed.checked_sub(self.through)?;
        Some((
            self.arrivals.partition_point(|&a| a < score) as u64,
            unknown,
        ))
    }
}

impl Samples {
    /// Samples of the steps that read `counters`, or `None` if the steps
    /// do not agree (the set started anew, or changed uncounted, between
    /// them).
    pub fn new(points: Vec<Point>, counters: &[Counters], taken: Instant) -> Option<Samples> {
        let first = counters.first()?;
        if counters
            .iter()
            .any(|c| c.epoch != first.epoch || c.uncounted() != first.uncounted())
        {
            return None;
        }
        let last = counters.last()?;
        Some(Samples::of(
            first.epoch,
            FIRST_SAMPLED_PLACE,
            points,
            taken,
            first.uncounted(),
            [last.total, last.removed, last.added],
        ))
    }

    fn of(
        epoch: u64,
        nearest: u64,
        points: Vec<Point>,
        taken: Instant,
        uncounted: i128,
        seen: [u64; 3],
    ) -> Samples {
        let base = points.iter().map(|p| p.removed).max().unwrap_or(0);
        Samples {
            epoch,
            nearest,
            points,
            taken,
            uncounted,
            seen: seen.map(AtomicU64::new),
            base,
            departed: RwLock::new(Departed {
                through: base,
                arrivals: Vec::new(),
                last: None,
                broken: false,
            }),
        }
    }

    /// The departures whose log this instance has read, as a rank call
    /// asks for those after them (ARGV[9] of `lua/rank.lua`): the number
    /// of the last, and the arrival read for it.
    pub fn departures_read(&self) -> String {
        let d = self.departed();
        match d.last {
            Some(last) => format!("{}:{last}", d.through),
            None => d.through.to_string(),
        }
    }

    /// Notes the departures a rank call returned with the counters `now`:
    /// the arrivals of those after number `from`, and whether they follow
    /// on from what was read. Those already read are skipped. Ranks stay
    /// bounded by every departure since the samples, as without the log,
    /// once the log does not follow on (cut short, or gone back in time:
    /// entry numbers used again), or the counters went back.
    pub fn note_departures(&self, from: u64, follows: bool, arrivals: &[u64], now: &Counters) {
        self.saw(now);
        let mut d = self
            .departed
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if !follows || now.removed < d.through {
            d.broken = true;
        }
        if d.broken {
            return;
        }
        let Some(known) = d.through.checked_sub(from) else {
            return;
        };
        let Some(new) = arrivals.get(known as usize..).filter(|n| !n.is_empty()) else {
            return;
        };
        let mut merged = Vec::with_capacity(d.arrivals.len() + new.len());
        let mut sorted = new.to_vec();
        sorted.sort_unstable();
        let (mut a, mut b) = (d.arrivals.iter().peekable(), sorted.iter().peekable());
        while let (Some(&&x), Some(&&y)) = (a.peek(), b.peek()) {
            if x <= y {
                merged.push(x);
                a.next();
            } else {
                merged.push(y);
                b.next();
            }
        }
        merged.extend(a);
        merged.extend(b);
        d.arrivals = merged;
        d.through += new.len() as u64;
        d.last = new.last().copied();
    }

    /// These, published again as `earlier` was: they go on from what was
    /// read of the log for `earlier` (the same samples, so the same
    /// departures), with their own, later time of taking.
    pub fn go_on_from(self, earlier: &Samples) -> Samples {
        *self
            .departed
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = earlier.departed().clone();
        for (seen, before) in self.seen.iter().zip(&earlier.seen) {
            seen.fetch_max(before.load(Ordering::Relaxed), Ordering::Relaxed);
        }
        self
    }

    /// Notes the latest counters a rank call read.
    fn saw(&self, now: &Counters) {
        if now.epoch == self.epoch {
            self.seen[0].fetch_max(now.total, Ordering::Relaxed);
            self.seen[1].fetch_max(now.removed, Ordering::Relaxed);
            self.seen[2].fetch_max(now.added, Ordering::Relaxed);
        }
    }

    fn departed(&self) -> std::sync::RwLockReadGuard<'_, Departed> {
        self.departed
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// These, derived from `place` on (the first sampled).
    pub fn from_place(self, place: u64) -> Samples {
        Samples {
            nearest: place,
            ..self
        }
    }

    /// The scores from and before which ranks may be derived, while these
    /// are fresh: from the first sample from which on every rank can still
    /// be told within 0.1%, as of the counters last seen.
    pub fn range(&self) -> Option<(u64, u64)> {
        if self.taken.elapsed() > SAMPLES_MAX_AGE || self.points.len() < 2 {
            return None;
        }
        let now = Counters {
            total: self.seen[0].load(Ordering::Relaxed),
            removed: self.seen[1].load(Ordering::Relaxed),
            added: self.seen[2].load(Ordering::Relaxed),
            ..Counters::default()
        };
        let departed = self.departed();
        // The bound loosens with the place, and the changes since each
        // sample only fall along the samples, so the samples it holds past
        // are a tail of them.
        let last = self.points.len() - 1;
        let (mut from, mut to) = (0, last);
        while from < to {
            let mid = (from + to) / 2;
            let score = self.points[mid].score + 1;
            if self.bounds(mid, score, now, &departed).is_none() {
                from = mid + 1;
            } else {
                to = mid;
            }
        }
        (from < last).then(|| (self.points[from].score, self.points[last].score))
    }

    /// The rank of `score` now, if it can be told within 0.1% (and `score`
    /// lies in [`Samples::range`]).
    pub fn rank(&self, score: u64, now: Counters) -> Option<u64> {
        if now.epoch != self.epoch || now.uncounted() != self.uncounted {
            return None;
        }
        self.saw(&now);
        // The last sample at or below the score.
        let i = self
            .points
            .partition_point(|p| p.score <= score)
            .checked_sub(1)?;
        let departed = self.departed();
        let (least, most, ahead) = self.bounds(i, score, now, &departed)?;
        let (low, high) = (self.points[i], self.points[i + 1]);
        let along = (score - low.score) as f64 / (high.score - low.score) as f64;
        let lifted = low.lifted as f64 + along * (high.lifted - low.lifted) as f64;
        let rank = (lifted - (now.total + ahead) as f64).round().max(0.0) as u64;
        Some(rank.clamp(least, most))
    }

    /// The least and most users ahead of `score` now, from the samples `i`
    /// and `i + 1` around it, if that range is within 0.1%; and how many of
    /// the departures since the samples `departed` knows of left from
    /// ahead of it.
    fn bounds(
        &self,
        i: usize,
        score: u64,
        now: Counters,
        departed: &Departed,
    ) -> Option<(u64, u64, u64)> {
        let low = self.points[i];
        let high = *self.points.get(i + 1)?;
        if now.total < low.total.max(high.total)
            || now.removed < self.base
            || now.added < low.added.max(high.added)
        {
            return None;
        }
        // Departures after the samples' last step: those the log told of
        // (`ahead` of the user) and those it has not yet (`unknown`, which
        // may each have been ahead).
        let (ahead, unknown) = departed
            .ahead_of(score, now.removed)
            .unwrap_or((0, now.removed - self.base));
        // Everyone ahead of the user now: at the lower sample there were
        // low's rank ahead (and low itself, past it), less those admitted
        // since, those who left ahead of the user since the last step, and
        // any who may have (between the steps, or not yet read of); at the
        // upper one high's rank less the user, less those admitted and
        // those known to have left ahead, plus those added since.
        let past = u64::from(score > low.score);
        let doubt = (self.base - low.removed) + unknown;
        let least = (low.lifted + past).checked_sub(now.total + ahead + doubt)?;
        let most = (high.lifted + (now.added - high.added)).checked_sub(now.total + ahead + 1)?;
        if most < least || (most - least) as f64 > least as f64 * 0.001 {
            return None;
        }
        Some((least, most, ahead))
    }
}

impl Samples {
    /// Whether these still tell ranks as when they were taken: nobody has
    /// been placed in the set but at the tail since (the head's admissions
    /// are counted exactly, and the departures logged), fewer have left
    /// than the log holds for certain, and they are younger than
    /// `SAMPLES_REFRESH_QUIET`.
    pub fn unchanged_at(&self, now: &Counters) -> bool {
        let Some(last) = self.points.last() else {
            return false;
        };
        now.epoch == self.epoch
            && now.uncounted() == self.uncounted
            && now.removed.saturating_sub(self.base) <= DEPARTURES_FOLLOWED
            && now.added == last.added
            && self.taken.elapsed() < SAMPLES_REFRESH_QUIET
    }

    /// Whether these are `other` as published again: the same samples,
    /// whose departures read so far still hold.
    pub fn same_as(&self, other: &Samples) -> bool {
        self.epoch == other.epoch && self.nearest == other.nearest && self.points == other.points
    }
}

/// The first byte of [`Samples::encode`]'s form.
const ENCODING_VERSION: u8 = 1;

impl Samples {
    /// These samples as one value to publish, with `taken_ms` (Redis's
    /// clock when they were taken): the fixed fields, then each point as
    /// the differences from the one before (zigzag varints: a step's
    /// counters repeat, and places and scores grow by little).
    pub fn encode(&self, taken_ms: u64) -> Vec<u8> {
        let mut out = Vec::with_capacity(64 + self.points.len() * 10);
        out.push(ENCODING_VERSION);
        for value in [self.epoch, self.nearest, taken_ms] {
            out.extend_from_slice(&value.to_le_bytes());
        }
        out.extend_from_slice(&self.uncounted.to_le_bytes());
        for seen in &self.seen {
            out.extend_from_slice(&seen.load(Ordering::Relaxed).to_le_bytes());
        }
        out.extend_from_slice(&(self.points.len() as u32).to_le_bytes());
        let mut last = [0u64; 5];
        for p in &self.points {
            let now = [p.score, p.lifted, p.total, p.removed, p.added];
            for (value, before) in now.iter().zip(&mut last) {
                put_varint(&mut out, zigzag(value.wrapping_sub(*before) as i64));
                *before = *value;
            }
        }
        out
    }

    /// Samples published by [`Samples::encode`], read when Redis's clock
    /// said `now_ms`: `None` if the value is not one, or too old to use.
    pub fn decode(bytes: &[u8], now_ms: u64) -> Option<Samples> {
        let mut r = Reader(bytes);
        if r.take(1)? != [ENCODING_VERSION] {
            return None;
        }
        let (epoch, nearest, taken_ms) = (r.u64()?, r.u64()?, r.u64()?);
        let uncounted = i128::from_le_bytes(r.take(16)?.try_into().ok()?);
        let seen = [r.u64()?, r.u64()?, r.u64()?];
        let n = u32::from_le_bytes(r.take(4)?.try_into().ok()?) as usize;
        // Each point takes five bytes at least: a count past that is false.
        if n > r.0.len() / 5 {
            return None;
        }
        let mut points = Vec::with_capacity(n);
        let mut last = [0u64; 5];
        for _ in 0..n {
            for before in &mut last {
                *before = before.wrapping_add(unzigzag(r.varint()?) as u64);
            }
            let [score, lifted, total, removed, added] = last;
            points.push(Point {
                score,
                lifted,
                total,
                removed,
                added,
            });
        }
        let increasing = points
            .windows(2)
            .all(|w| w[0].score < w[1].score && w[0].lifted < w[1].lifted);
        let age = Duration::from_millis(now_ms.saturating_sub(taken_ms));
        if !r.0.is_empty() || !increasing || age > SAMPLES_MAX_AGE {
            return None;
        }
        Some(Samples::of(
            epoch,
            nearest,
            points,
            Instant::now().checked_sub(age)?,
            uncounted,
            seen,
        ))
    }
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// What is left of a published value to read.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (head, rest) = (self.0.get(..n)?, self.0.get(n..)?);
        self.0 = rest;
        Some(head)
    }

    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }

    fn varint(&mut self) -> Option<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = self.take(1)?[0];
            v |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Some(v);
            }
        }
        None
    }
}

/// The place sampled after `place`.
pub fn after(place: u64) -> u64 {
    place + ((place as f64 * SAMPLE_GAP_FRACTION) as u64).max(1)
}

/// The wait a script would estimate for `rank` (see `wait_estimator` in
/// `lua/lib.lua`), from the numbers it returned: `None` while paused.
pub fn wait_ms(rank: u64, first_ms: i64, rate_millionths: i64, interval_ms: u64) -> Option<u64> {
    if rate_millionths < 0 {
        return None;
    }
    let rate = (rate_millionths as f64 / 1e6).max(0.01);
    let windows = (rank as f64 / rate).floor() as u64;
    Some((first_ms.max(0) as u64).saturating_add(windows.saturating_mul(interval_ms)))
}

/// How many users near the head an instance remembers per queue.
const NEAR_HEAD_USERS_REMEMBERED: usize = 32_768;

/// The users this instance last answered near the head of a queue (their
/// rank walked by rank.lua, nearer than ranks are derived), the least
/// recently answered forgotten first.
/// Their next poll goes to rank.lua in the batch's first call, beside the
/// batch's numbers, instead of in a second call once their heartbeats
/// were read and found not far back (see `Store::poll_many`). Why: with
/// random pollers at a million waiting, about two batches in three held
/// a user near the head, and that second call cost Redis a script call
/// (54 µs with no users, Redis alone) and the user a second round trip.
/// Only a hint: a user it names who is far back now is decided far back
/// by rank.lua, and forgotten.
///
/// It also keeps the base of the queue's numbers as last read (see `marks`
/// in `lua/lib.lua`), which a poll far back needs to find a number's mark
/// before it reads the base again, and the arrival from which the last
/// batch decided polls far back: a poll whose credential names an arrival
/// nearer the head is walked wherever it is asked, so it is asked in the
/// first call too, from its first poll on.
pub struct NearHead(
    Mutex<LruCache<Box<str>, (), ahash::RandomState>>,
    std::sync::atomic::AtomicU64,
    std::sync::atomic::AtomicU64,
);

impl Default for NearHead {
    fn default() -> NearHead {
        let capacity = NonZeroUsize::new(NEAR_HEAD_USERS_REMEMBERED).unwrap_or(NonZeroUsize::MIN);
        NearHead(
            Mutex::new(LruCache::with_hasher(capacity, ahash::RandomState::new())),
            std::sync::atomic::AtomicU64::new(0),
            std::sync::atomic::AtomicU64::new(0),
        )
    }
}

impl NearHead {
    /// The base of the queue's numbers as last read, if any was.
    pub fn numbers_base(&self) -> Option<u64> {
        Some(self.1.load(std::sync::atomic::Ordering::Relaxed)).filter(|&b| b > 0)
    }

    /// Keeps the base of the queue's numbers as just read.
    pub fn see_numbers_base(&self, base: Option<u64>) {
        self.1
            .store(base.unwrap_or(0), std::sync::atomic::Ordering::Relaxed);
    }

    /// The arrival from which the last batch decided polls far back (0
    /// before any).
    pub fn far_from(&self) -> u64 {
        self.2.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Keeps the arrival from which a batch decided polls far back.
    pub fn see_far_from(&self, far_from: u64) {
        self.2.store(far_from, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether each of `users` was last answered near the head.
    pub fn hints(&self, users: &[&str]) -> Vec<bool> {
        let near = self.0.lock().unwrap_or_else(|p| p.into_inner());
        users.iter().map(|u| near.contains(*u)).collect()
    }

    /// Remembers the users whose answers were walked near the head, and
    /// forgets the others.
    pub fn note<'u>(&self, answers: impl IntoIterator<Item = (&'u str, bool)>) {
        let mut near = self.0.lock().unwrap_or_else(|p| p.into_inner());
        for (user, walked) in answers {
            if walked {
                near.put(user.into(), ());
            } else {
                near.pop(user);
            }
        }
    }
}

impl std::fmt::Debug for NearHead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let near = self.0.lock().unwrap_or_else(|p| p.into_inner());
        f.debug_struct("NearHead")
            .field("users", &near.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Samples of a set whose scores are 10 × place, taken with `total`
    /// admitted, `removed` removed and `added` added.
    fn samples(places: &[u64], total: u64, removed: u64, added: u64) -> Samples {
        let points = places
            .iter()
            .map(|&p| Point {
                score: 10 * p,
                lifted: p,
                total,
                removed,
                added,
            })
            .collect();
        Samples::new(points, &[at(total, removed, added)], Instant::now()).unwrap()
    }

    /// Counters of a set of 100,000 that has changed only as counted.
    fn at(total: u64, removed: u64, added: u64) -> Counters {
        Counters {
            epoch: 7,
            total,
            removed,
            added,
            joined: 0,
            size: 100_000 + added - total - removed,
        }
    }

    #[test]
    fn a_rank_between_samples_is_read_off_them_less_those_admitted_since() {
        let s = samples(&[10_000, 10_004, 20_000, 20_008], 0, 0, 0);
        assert_eq!(s.rank(100_000, at(0, 0, 0)), Some(10_000));
        assert_eq!(s.rank(100_020, at(0, 0, 0)), Some(10_002));
        // 100 admitted since: everyone is 100 nearer.
        assert_eq!(s.rank(100_020, at(100, 0, 0)), Some(9_902));
        assert_eq!(s.rank(200_040, at(100, 0, 0)), Some(19_904));
    }

    #[test]
    fn a_rank_that_cannot_be_told_within_a_thousandth_is_not_derived() {
        // 10,004 to 20,000 is a gap far wider than 0.1%.
        let s = samples(&[10_000, 10_004, 20_000, 20_008], 0, 0, 0);
        assert_eq!(s.rank(150_000, at(0, 0, 0)), None);
        // Between 10,000 and 10,004 the rank is 10,001 to 10,003; 7
        // removals since widen that to 9,994 to 10,003, within 0.1%; 8 do
        // not. Nor do 4 and 4 additions.
        assert_eq!(s.rank(100_020, at(0, 7, 0)), Some(10_002));
        assert_eq!(s.rank(100_020, at(0, 8, 0)), None);
        assert!(s.rank(100_020, at(0, 3, 3)).is_some());
        assert_eq!(s.rank(100_020, at(0, 4, 4)), None);
        // Outside the samples, or of another epoch, or counters gone back.
        assert_eq!(s.rank(99_990, at(0, 0, 0)), None);
        assert_eq!(s.rank(200_090, at(0, 0, 0)), None);
        let other = Counters {
            epoch: 8,
            ..at(0, 0, 0)
        };
        assert_eq!(s.rank(100_020, other), None);
        let s = samples(&[10_000, 10_004], 50, 3, 0);
        assert_eq!(s.rank(100_020, at(50, 2, 0)), None);
        assert_eq!(s.rank(100_020, at(49, 3, 0)), None);
        assert_eq!(s.rank(100_020, at(50, 3, 0)), Some(9_952));
    }

    #[test]
    fn a_change_nobody_counted_turns_every_derived_rank_down() {
        let s = samples(&[10_000, 10_004], 0, 0, 0);
        let uncounted = Counters {
            size: 99_990,
            ..at(0, 0, 0)
        };
        assert_eq!(s.rank(100_020, uncounted), None);
        // Registrations at the tail are counted and move nobody.
        let joined = Counters {
            joined: 500,
            size: 100_500,
            ..at(0, 0, 0)
        };
        assert_eq!(s.rank(100_020, joined), Some(10_002));
        // Steps that disagree make no samples.
        let steps = [
            at(0, 0, 0),
            Counters {
                size: 5,
                ..at(0, 0, 0)
            },
        ];
        assert!(Samples::new(Vec::new(), &steps, Instant::now()).is_none());
    }

    #[test]
    fn departures_read_from_the_log_tell_ranks_however_many_left() {
        let s = samples(&[10_000, 10_004, 20_000, 20_008], 0, 0, 0);
        // 300 left since: 200 from ahead of place 10,000, 100 from behind
        // place 20,008. Unread, they leave the rank unsure.
        let now = at(0, 300, 0);
        assert_eq!(s.rank(100_020, now), None);
        let ahead: Vec<u64> = (100..300).map(|p| 10 * p).collect();
        let behind: Vec<u64> = (0..100).map(|p| 300_000 + 10 * p).collect();
        // Read in two calls, the second repeating the end of the first: the
        // log so far leaves 150 unread, still too many.
        s.note_departures(0, true, &[&behind[..50], &ahead[..100]].concat(), &now);
        assert_eq!(s.departures_read(), format!("150:{}", ahead[99]));
        assert_eq!(s.rank(100_020, now), None);
        s.note_departures(100, true, &[&ahead[50..], &behind[50..]].concat(), &now);
        assert_eq!(s.departures_read(), format!("300:{}", behind[99]));
        assert_eq!(s.rank(100_020, now), Some(9_802));
        assert_eq!(s.rank(200_040, now), Some(19_804));
        // Counters older than what was read: bounded by every departure.
        assert_eq!(s.rank(100_020, at(0, 299, 0)), None);
        // A log that does not follow on is not taken, nor anything read
        // before it.
        let s = samples(&[10_000, 10_004], 0, 0, 0);
        s.note_departures(0, false, &ahead[..1], &at(0, 1, 0));
        assert_eq!(s.departures_read(), "0");
        assert_eq!(s.rank(100_020, at(0, 2, 0)), Some(10_002));
        assert_eq!(s.rank(100_020, at(0, 8, 0)), None);
        // Departures before the samples' last step are in the samples.
        let s = samples(&[10_000, 10_004], 0, 40, 0);
        s.note_departures(40, true, &ahead[..30], &at(0, 70, 0));
        assert_eq!(s.departures_read(), format!("70:{}", ahead[29]));
        assert_eq!(s.rank(100_020, at(0, 70, 0)), Some(9_972));
        // Counters gone back below what was read (a Redis behind): what was
        // read is not used again.
        s.note_departures(70, true, &[], &at(0, 50, 0));
        assert_eq!(s.rank(100_020, at(0, 70, 0)), None);
    }

    #[test]
    fn the_range_leaves_out_the_samples_the_changes_since_made_too_coarse() {
        let places: Vec<u64> = std::iter::successors(Some(10_000), |&p| Some(after(p)))
            .take_while(|&p| p < 100_000)
            .collect();
        let s = samples(&places, 0, 0, 0);
        let last = 10 * places[places.len() - 1];
        assert_eq!(s.range(), Some((100_000, last)));
        // 10 removed and 10 added since: 0.04% gaps and 20 more places of
        // doubt hold within 0.1% from about place 29,000.
        assert_eq!(s.rank(10 * 50_001, at(0, 10, 10)), Some(50_001));
        let (from, to) = s.range().unwrap();
        assert_eq!(to, last);
        assert!((285_000..295_000).contains(&from), "{from}");
        assert!(s.rank(from + 5, at(0, 10, 10)).is_some());
        assert_eq!(s.rank(from - 50, at(0, 10, 10)), None);
    }

    #[test]
    fn steps_taken_apart_start_from_their_latest_counters() {
        // The second step saw 5 removals the first did not: the range
        // still covers the samples.
        let mut points: Vec<Point> = [10_000, 10_004, 10_008, 10_012]
            .iter()
            .map(|&p| Point {
                score: 10 * p,
                lifted: p,
                total: 0,
                removed: 0,
                added: 0,
            })
            .collect();
        for p in &mut points[2..] {
            p.removed = 5;
        }
        let steps = [at(0, 0, 0), at(0, 5, 0)];
        let s = Samples::new(points, &steps, Instant::now()).unwrap();
        assert_eq!(s.range(), Some((100_000, 100_120)));
    }

    #[test]
    fn samples_are_a_fixed_fraction_of_their_place_apart() {
        assert_eq!(after(10_000), 10_004);
        assert_eq!(after(1_000), 1_001);
        let mut place = FIRST_SAMPLED_PLACE;
        let mut n = 0;
        while place < 1_000_000 {
            place = after(place);
            n += 1;
        }
        assert!((11_000..12_000).contains(&n), "{n} samples to a million");
    }

    #[test]
    fn the_wait_is_estimated_as_the_script_does() {
        assert_eq!(wait_ms(250, 400, 100_000_000, 1000), Some(2_400));
        assert_eq!(wait_ms(250, 400, -1, 1000), None);
        assert_eq!(
            wait_ms(u64::MAX, i64::MAX, 10_000, u64::MAX),
            Some(u64::MAX)
        );
    }

    #[test]
    fn published_samples_read_back_as_taken_and_anything_else_is_refused() {
        let places: Vec<u64> = (0..2_000).map(|i| 10_000 + i * 7).collect();
        let taken = samples(&places, 40, 3, 9).from_place(12_000);
        let bytes = taken.encode(1_000_000);
        assert!(bytes.len() < places.len() * 8, "{} bytes", bytes.len());
        let read = Samples::decode(&bytes, 1_002_000).unwrap();
        assert_eq!(read.points, taken.points);
        assert_eq!((read.epoch, read.nearest), (taken.epoch, 12_000));
        let now = at(45, 3, 9);
        for score in [100_000, 150_005, 239_000] {
            assert_eq!(read.rank(score, now), taken.rank(score, now), "{score}");
        }
        assert!(read.taken.elapsed() >= Duration::from_secs(2));
        // Too old, cut short, with bytes after, or not ours: no samples.
        assert!(Samples::decode(&bytes, 1_000_000 + 31_000).is_none());
        assert!(Samples::decode(&bytes[..bytes.len() - 1], 1_000_000).is_none());
        assert!(Samples::decode(&[&bytes[..], &[0]].concat(), 1_000_000).is_none());
        assert!(Samples::decode(b"", 0).is_none());
        assert!(Samples::decode(&[2; 200], 0).is_none());
        let mut huge_count = bytes.clone();
        huge_count[65..69].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(Samples::decode(&huge_count, 1_000_000).is_none());
    }

    #[test]
    fn samples_need_taking_again_once_someone_is_placed_or_many_leave_but_not_for_admissions() {
        let places: Vec<u64> = (0..100).map(|i| 10_000 + i * 7).collect();
        let taken = samples(&places, 40, 3, 9);
        assert!(taken.unchanged_at(&at(40, 3, 9)));
        assert!(taken.unchanged_at(&at(400, 3, 9)), "admitted from the head");
        assert!(taken.unchanged_at(&at(40, 4, 9)), "one left, logged");
        assert!(
            taken.unchanged_at(&at(40, 10_003, 9)),
            "as many left as followed"
        );
        assert!(!taken.unchanged_at(&at(40, 10_004, 9)), "more left");
        assert!(!taken.unchanged_at(&at(40, 3, 10)), "one placed");
        let earlier = Samples {
            taken: Instant::now() - SAMPLES_REFRESH_QUIET,
            ..samples(&places, 40, 3, 9)
        };
        assert!(!earlier.unchanged_at(&at(40, 3, 9)), "quiet, but old");
    }
}
