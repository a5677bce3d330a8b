//! Ranks far back, derived in the instance from samples of the waiting set
//! rather than walked in Redis.
//!
//! An exact rank is a `ZRANK`, a walk of the skiplist that costs Redis more
//! than the rest of a poll at a million waiting. Far back, where the poll
//! advice no longer depends on the rank (see `lua/rank.lua`), the script
//! returns the user's arrival (their score, a dictionary lookup) instead,
//! and the instance reads the rank off its samples: the scores at ranks
//! 0.04% apart, taken every [`REFRESH`] in bounded read-only steps
//! (`lua/samples.lua`). A sample is kept with two counters of the admission
//! HASH as of its step: `total`, the users admitted since (all from the
//! head, so ahead of everyone still waiting: the rank drops by exactly
//! that), and `moved`, every other change that can move a rank (dropouts,
//! cleanup, placements). Between two samples the rank of an arrival lies in
//! a range that the gap between them and the moves since bound; a derived
//! rank is used only when that whole range is within 0.1% of it, and is
//! otherwise asked of Redis exactly, in a second call. So every rank is
//! within 0.1%, and exact in the first `exact-rank-window` places (ranks
//! are derived from [`FIRST_SAMPLE`] on, or from the window if larger).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How often an instance takes its samples of a queue.
pub const REFRESH: Duration = Duration::from_secs(5);
/// The nearest rank sampled, unless the queue's exact-rank-window is larger:
/// nearer the head a rank is cheap, and the advice needs it exactly anyway.
pub const FIRST_SAMPLE: u64 = 10_000;
/// Samples are this fraction of their rank apart, so that the gap leaves
/// more than half of the 0.1% allowed for the moves until the next refresh.
const GAP: f64 = 0.0004;
/// Samples older than this are not used (the sampler cannot reach Redis).
const MAX_AGE: Duration = Duration::from_secs(30);
/// The ranks one `samples.lua` call reads.
pub const STEP: usize = 500;

/// One sample: the score at a rank, and the counters as of then.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point {
    pub score: u64,
    /// The rank plus the `total` admitted as of the sample: admissions do
    /// not change it.
    pub lifted: u64,
    /// `total` and `moved` as of the sample.
    pub total: u64,
    pub moved: u64,
}

/// The counters a call reads with its answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counters {
    pub epoch: u64,
    pub total: u64,
    pub moved: u64,
}

/// One queue's samples, in ascending score (and rank).
#[derive(Debug)]
pub struct Samples {
    pub epoch: u64,
    pub points: Vec<Point>,
    pub taken: Instant,
    /// The latest counters a rank call read (`total`, `moved`), from which
    /// [`Samples::range`] leaves out the samples the moves since made too
    /// coarse.
    seen: [AtomicU64; 2],
}

impl Samples {
    pub fn new(epoch: u64, points: Vec<Point>, taken: Instant) -> Samples {
        let (total, moved) = points.first().map_or((0, 0), |p| (p.total, p.moved));
        Samples {
            epoch,
            points,
            taken,
            seen: [AtomicU64::new(total), AtomicU64::new(moved)],
        }
    }

    /// The scores from and before which ranks may be derived, while these
    /// are fresh: from the first sample from which on every rank can still
    /// be told within 0.1%, as of the counters last seen.
    pub fn range(&self) -> Option<(u64, u64)> {
        if self.taken.elapsed() > MAX_AGE || self.points.len() < 2 {
            return None;
        }
        let now = Counters {
            epoch: self.epoch,
            total: self.seen[0].load(Ordering::Relaxed),
            moved: self.seen[1].load(Ordering::Relaxed),
        };
        // The bound widens with the moves and loosens with the rank, so
        // the samples it holds past are a tail of them.
        let last = self.points.len() - 1;
        let from = self.points[..last].partition_point(|p| self.range_at(p, now).is_none());
        (from < last).then(|| (self.points[from].score, self.points[last].score))
    }

    /// The range of ranks a user just past the sample `low` may have now.
    fn range_at(&self, low: &Point, now: Counters) -> Option<(u64, u64)> {
        let i = self.points.partition_point(|p| p.score <= low.score) - 1;
        self.bounds(i, low.score + 1, now)
    }

    /// The rank of `score` now, if it can be told within 0.1% (and `score`
    /// lies in [`Samples::range`]).
    pub fn rank(&self, score: u64, now: Counters) -> Option<u64> {
        if now.epoch != self.epoch {
            return None;
        }
        self.seen[0].fetch_max(now.total, Ordering::Relaxed);
        self.seen[1].fetch_max(now.moved, Ordering::Relaxed);
        // The last sample at or below the score.
        let i = self
            .points
            .partition_point(|p| p.score <= score)
            .checked_sub(1)?;
        let (least, most) = self.bounds(i, score, now)?;
        let (low, high) = (self.points[i], self.points[i + 1]);
        let along = (score - low.score) as f64 / (high.score - low.score) as f64;
        let lifted = low.lifted as f64 + along * (high.lifted - low.lifted) as f64;
        let rank = (lifted - now.total as f64).round().max(0.0) as u64;
        Some(rank.clamp(least, most))
    }

    /// The least and most users ahead of `score` now, from the samples `i`
    /// and `i + 1` around it, if that range is within 0.1%.
    fn bounds(&self, i: usize, score: u64, now: Counters) -> Option<(u64, u64)> {
        let low = self.points[i];
        let high = *self.points.get(i + 1)?;
        if now.total < low.total.max(high.total) || now.moved < low.moved.max(high.moved) {
            return None;
        }
        // Everyone ahead of the user now: at the lower sample there were
        // low.rank (+1 past it) ahead, less those admitted and those moved
        // since; at the upper one high.rank less one, less those admitted,
        // plus those moved.
        let past = u64::from(score > low.score);
        let least = (low.lifted + past).checked_sub(now.total + (now.moved - low.moved))?;
        let most = (high.lifted + (now.moved - high.moved)).checked_sub(now.total + 1)?;
        if most < least || (most - least) as f64 > least as f64 * 0.001 {
            return None;
        }
        Some((least, most))
    }
}

/// The rank sampled after `rank`.
pub fn after(rank: u64) -> u64 {
    rank + ((rank as f64 * GAP) as u64).max(1)
}

/// The wait a script would estimate for `rank` (see `wait_estimator` in
/// `lua/lib.lua`), from the numbers it returned: `None` while paused.
pub fn wait_ms(rank: u64, first_ms: i64, rate_millionths: i64, interval_ms: u64) -> Option<u64> {
    if rate_millionths < 0 {
        return None;
    }
    let rate = (rate_millionths as f64 / 1e6).max(0.01);
    let windows = (rank as f64 / rate).floor() as u64;
    Some(first_ms.max(0) as u64 + windows.saturating_mul(interval_ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Samples of a set whose scores are 10 × rank, taken with `total`
    /// admitted and `moved` moved.
    fn samples(ranks: &[u64], total: u64, moved: u64) -> Samples {
        let points = ranks
            .iter()
            .map(|&r| Point {
                score: 10 * (r + total),
                lifted: r + total,
                total,
                moved,
            })
            .collect();
        Samples::new(7, points, Instant::now())
    }

    fn at(total: u64, moved: u64) -> Counters {
        Counters {
            epoch: 7,
            total,
            moved,
        }
    }

    #[test]
    fn a_rank_between_samples_is_read_off_them_less_those_admitted_since() {
        let s = samples(&[10_000, 10_004, 20_000, 20_008], 0, 0);
        assert_eq!(s.rank(100_000, at(0, 0)), Some(10_000));
        assert_eq!(s.rank(100_020, at(0, 0)), Some(10_002));
        // 100 admitted since: everyone is 100 nearer.
        assert_eq!(s.rank(100_020, at(100, 0)), Some(9_902));
        assert_eq!(s.rank(200_040, at(100, 0)), Some(19_904));
    }

    #[test]
    fn a_rank_that_cannot_be_told_within_a_thousandth_is_not_derived() {
        // 10,004 to 20,000 is a gap far wider than 0.1%.
        let s = samples(&[10_000, 10_004, 20_000, 20_008], 0, 0);
        assert_eq!(s.rank(150_000, at(0, 0)), None);
        // Between 10,000 and 10,004 the rank is 10,001 to 10,003; 3 moves
        // since widen that to 9,998 to 10,006, within 0.1%; 4 do not.
        assert_eq!(s.rank(100_020, at(0, 3)), Some(10_002));
        assert_eq!(s.rank(100_020, at(0, 4)), None);
        // Outside the samples, or of another epoch, or counters gone back.
        assert_eq!(s.rank(99_990, at(0, 0)), None);
        assert_eq!(s.rank(200_090, at(0, 0)), None);
        let other = Counters {
            epoch: 8,
            ..at(0, 0)
        };
        assert_eq!(s.rank(100_020, other), None);
        let s = samples(&[10_000, 10_004], 0, 3);
        assert_eq!(s.rank(100_020, at(0, 2)), None);
        let s = samples(&[10_000, 10_004], 50, 0);
        assert_eq!(s.rank(100_520, at(49, 0)), None);
        assert_eq!(s.rank(100_520, at(50, 0)), Some(10_002));
    }

    #[test]
    fn the_range_leaves_out_the_samples_the_moves_since_made_too_coarse() {
        let ranks: Vec<u64> = std::iter::successors(Some(10_000), |&r| Some(after(r)))
            .take_while(|&r| r < 100_000)
            .collect();
        let s = samples(&ranks, 0, 0);
        let last = 10 * ranks[ranks.len() - 1];
        assert_eq!(s.range(), Some((100_000, last)));
        // 10 moves since: 0.04% gaps and 20 more places of doubt hold
        // within 0.1% from about rank 29,000.
        assert_eq!(s.rank(10 * 50_001, at(0, 10)), Some(50_001));
        let (from, to) = s.range().unwrap();
        assert_eq!(to, last);
        assert!((285_000..295_000).contains(&from), "{from}");
        assert!(s.rank(from + 5, at(0, 10)).is_some());
        assert_eq!(s.rank(from - 50, at(0, 10)), None);
    }

    #[test]
    fn samples_are_a_fixed_fraction_of_their_rank_apart() {
        assert_eq!(after(10_000), 10_004);
        assert_eq!(after(1_000), 1_001);
        let mut rank = FIRST_SAMPLE;
        let mut n = 0;
        while rank < 1_000_000 {
            rank = after(rank);
            n += 1;
        }
        assert!((11_000..12_000).contains(&n), "{n} samples to a million");
    }

    #[test]
    fn the_wait_is_estimated_as_the_script_does() {
        assert_eq!(wait_ms(250, 400, 100_000_000, 1000), Some(2_400));
        assert_eq!(wait_ms(250, 400, -1, 1000), None);
    }
}
